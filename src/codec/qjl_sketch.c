/*
 * QJL sign sketch (Zandieh et al. 2024): S is m x d with iid N(0,1) entries
 * from the seed. A key r is stored as m sign bits of S r (and |r|); the
 * query is projected in full precision once (S q). Estimator (unbiased):
 *   <q, r> ≈ sqrt(pi/2) / m * |r| * sum_j sign(<S_j, r>) <S_j, q>
 * since E[sign(<s, r>) <s, q>] = sqrt(2/pi) <r, q> / |r| for s ~ N(0, I).
 */
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

int qjl_init_matrix(kvq_plan *p) {
    int m = p->o.m ? p->o.m : p->d;
    p->qjl_m = m;
    p->S = malloc((size_t)m * p->d * sizeof *p->S);
    if (!p->S) return KVQ_ERR_NOMEM;
    kvq_rng r;
    kvq_rng_seed(&r, kvq_seed_mix(p->seed, 0x514a4c));
    for (size_t i = 0; i < (size_t)m * p->d; i++) p->S[i] = (float)kvq_rng_gauss(&r);
    return KVQ_OK;
}

void qjl_project(const kvq_plan *p, const float *x, float *out) { matvec(p->S, p->qjl_m, p->d, x, out, p->isa); }

void qjl_signs(const kvq_plan *p, const float *r, uint8_t *bits) {
    float proj[4096];
    qjl_project(p, r, proj);
    memset(bits, 0, (size_t)p->qjl_m / 8);
    for (int j = 0; j < p->qjl_m; j++) bits[j >> 3] |= (uint8_t)((proj[j] >= 0) << (j & 7));
}

float qjl_signed_sum(const uint8_t *bits, const float *sq, int m) {
    float pos = 0, all = 0;
    for (int j = 0; j < m; j++) {
        all += sq[j];
        if ((bits[j >> 3] >> (j & 7)) & 1) pos += sq[j];
    }
    return 2 * pos - all; /* sum of +sq over set bits, -sq over clear bits */
}
