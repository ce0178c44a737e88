/*
 * qjl: 1-bit QJL sketch of the whole key (key-only, no reconstruction).
 * Record: [f16 |k| | m/8 bytes of signs of S k]; m = d by default
 * (+m=M or qjl:M): 1.125 bits per value at m = d = 128.
 * Prepared query: S q (m floats).
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    double ss = 0;
    for (int c = 0; c < p->d; c++) ss += (double)x[c] * x[c];
    int rc = scale_store(p, code, (float)sqrt(ss));
    if (rc) return rc;
    qjl_signs(p, x, code + p->rec.off[KVQ_QJL_SIGNS]);
    return KVQ_OK;
}

static void prep(const kvq_plan *p, const float *q, float *qp) { qjl_project(p, q, qp); }

static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    qjl_layout L = {p->code_bytes, (size_t)p->rec.off[KVQ_QJL_NORM], (size_t)p->rec.off[KVQ_QJL_SIGNS], p->qjl_m,
                    p->o.scale32, sqrtf((float)M_PI / 2) / (float)p->qjl_m, 0};
    qjl_scores(&L, qp, p->qfloats, nq, codes, n, scores, p->isa);
}

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (rc) return rc;
    rc = qjl_init_matrix(p);
    if (!rc) rc = plan_layout(p, KVQ_LAY_QJL, 0, p->qjl_m);
    if (rc) return rc;
    p->qfloats = (size_t)p->qjl_m;
    p->can_decode = 0;
    p->encode = enc;
    p->prep = prep;
    p->score = score;
    return KVQ_OK;
}

const kvq_method kvq_method_qjl = {"qjl", 0, 0, 0, init, NULL, 1};
