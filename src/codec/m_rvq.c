/*
 * rvq:b — the seeds' two-stage residual scalar quantizer (DESIGN.md §3):
 * stage 1: b-bit Gaussian Lloyd-Max on u = sqrt(d) y/|y| (rvq:1: the sign
 * quantizer ±0.7979); stage 2: b-bit unit-variance Laplacian Lloyd-Max on
 * the residual r = u - c1[i1], scaled to its RMS σ. 2b bits per coordinate:
 * rvq:2 is a 4-bit method (compare with tq-mse:4), rvq:1 a 2-bit one.
 *   ŷ = s1 * c1[i1] + s2 * c2[i2],  s1 = |y|/sqrt(d),  s2 = s1 * σ
 * Record: [f16 s1 | f16 s2 | b*d/8 stage-1 indices | b*d/8 stage-2 indices].
 * Both stages use the tq kernels (two passes over the same records).
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "tq_kernels.h"

static tq_layout stage(const kvq_plan *p, int s) {
    const int *off = p->rec.off;
    tq_layout L = {p->d, p->bits, s ? &p->cb2 : &p->cb, p->code_bytes, (size_t)off[s ? KVQ_RVQ_S2 : KVQ_RVQ_S1],
                   (size_t)off[s ? KVQ_RVQ_IDX2 : KVQ_RVQ_IDX1], p->o.scale32, p->vnni, NULL};
    return L;
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const int d = p->d;
    float y[KVQ_DIM_MAX], r[KVQ_DIM_MAX];
    uint8_t i1[KVQ_DIM_MAX], i2[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    double ss = 0;
    for (int c = 0; c < d; c++) ss += (double)y[c] * y[c];
    float s1 = (float)sqrt(ss / d), inv = s1 > 0 ? 1.0f / s1 : 0.0f;
    double rr = 0;
    for (int c = 0; c < d; c++) {
        float u = y[c] * inv;
        i1[c] = (uint8_t)cb_quantize(&p->cb, u);
        r[c] = u - p->cb.c[i1[c]];
        rr += (double)r[c] * r[c];
    }
    float sigma = (float)sqrt(rr / d), rinv = sigma > 0 ? 1.0f / sigma : 0.0f;
    for (int c = 0; c < d; c++) i2[c] = (uint8_t)cb_quantize(&p->cb2, r[c] * rinv);
    int rc = scale_store(p, code + p->rec.off[KVQ_RVQ_S1], s1);
    if (!rc) rc = scale_store(p, code + p->rec.off[KVQ_RVQ_S2], s1 * sigma);
    if (rc) return rc;
    tq_layout L1 = stage(p, 0), L2 = stage(p, 1);
    strided_pack(i1, d, p->bits, code + L1.idx_off);
    strided_pack(i2, d, p->bits, code + L2.idx_off);
    return KVQ_OK;
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    float y2[KVQ_DIM_MAX];
    tq_layout L1 = stage(p, 0), L2 = stage(p, 1);
    tq_decode(&L1, code, y, p->isa);
    tq_decode(&L2, code, y2, p->isa);
    for (int c = 0; c < p->d; c++) y[c] += y2[c];
}

static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    enum { CH = 64, QG = 16 };
    float t1[QG * CH], t2[QG * CH];
    tq_layout L1 = stage(p, 0), L2 = stage(p, 1);
    for (size_t j0 = 0; j0 < nq; j0 += QG) {
        size_t gq = nq - j0 < QG ? nq - j0 : QG;
        for (size_t i0 = 0; i0 < n; i0 += CH) {
            size_t m = n - i0 < CH ? n - i0 : CH;
            const uint8_t *c = codes + i0 * p->code_bytes;
            tq_score(&L1, qp + j0 * p->qfloats, p->qfloats, gq, c, m, t1, p->isa);
            tq_score(&L2, qp + j0 * p->qfloats, p->qfloats, gq, c, m, t2, p->isa);
            for (size_t j = 0; j < gq; j++)
                for (size_t i = 0; i < m; i++) scores[(j0 + j) * n + i0 + i] = t1[j * m + i] + t2[j * m + i];
        }
    }
}

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    tq_layout L1 = stage(p, 0), L2 = stage(p, 1);
    tq_accum(&L1, w, nq, codes, n, acc, p->isa);
    tq_accum(&L2, w, nq, codes, n, acc, p->isa);
}

static void prep(const kvq_plan *p, const float *q, float *qp) { tq_prepare_query(&p->rot, p->d, q, qp); }

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, !p->o.norot, p->isa);
    if (!rc) rc = lloyd_max_solve(&p->cb, DENS_GAUSS, p->bits, p->d);
    if (!rc) rc = lloyd_max_solve(&p->cb2, DENS_LAPLACE, p->bits, p->d);
    if (!rc) rc = plan_layout(p, KVQ_LAY_RVQ, p->bits, 0);
    if (rc) return rc;
    cb_snap_int8(&p->cb);
    cb_snap_int8(&p->cb2);
    p->rotated = !p->o.norot;
    p->qfloats = TQ_QFLOATS(p->d);
    p->encode = enc;
    p->decode = dec;
    p->prep = prep;
    p->score = score;
    p->accum = accum;
    return KVQ_OK;
}

const kvq_method kvq_method_rvq = {"rvq", 1, 4, 2, init, NULL, 0};
