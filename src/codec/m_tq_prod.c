/*
 * tq-prod:b — TurboQuant's inner-product quantizer (Zandieh et al. 2025,
 * Alg. 2): tq-mse:(b-1) of the rotated key, then a QJL sketch of the residual
 * r = y - ŷ in the rotated domain (S is rotation-invariant in law):
 *   est <q, k> = <q~, ŷ> + sqrt(pi/2)/m * |r| * sum_j sign(S_j r) (S q~)_j
 * unbiased over S. Key-only: no useful reconstruction for values.
 * Record: [f16 scale | (b-1)d/8 index bytes | f16 |r| | m/8 sign bytes].
 * Prepared query: [tq query (TQ_QFLOATS(d), q~ = R q first) | S q~ (m floats)].
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "tq_kernels.h"

static tq_layout layout(const kvq_plan *p) {
    tq_layout L = {p->d,          p->bits - 1, &p->cb, p->code_bytes, (size_t)p->rec.off[KVQ_TQPROD_SCALE],
                   (size_t)p->rec.off[KVQ_TQPROD_IDX], p->o.scale32, p->vnni, NULL};
    return L;
}
static size_t res_off(const kvq_plan *p) { return (size_t)p->rec.off[KVQ_TQPROD_RNORM]; }

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    float y[KVQ_DIM_MAX], g;
    uint8_t idx[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    tq_quantize(&p->cb, y, p->d, p->o.scale_norm, idx, &g, p->isa);
    int rc = scale_store(p, code, g);
    if (rc) return rc;
    strided_pack(idx, p->d, p->bits - 1, code + p->rec.off[KVQ_TQPROD_IDX]);
    /* residual against the scale actually stored */
    float gs = scale_load(p, code);
    double rr = 0;
    for (int c = 0; c < p->d; c++) {
        y[c] -= gs * p->cb.c[idx[c]];
        rr += (double)y[c] * y[c];
    }
    uint8_t *rq = code + res_off(p);
    rc = scale_store(p, rq, (float)sqrt(rr));
    if (rc) return rc;
    qjl_signs(p, y, code + p->rec.off[KVQ_TQPROD_SIGNS]);
    return KVQ_OK;
}

static void prep(const kvq_plan *p, const float *q, float *qp) {
    tq_prepare_query(&p->rot, p->d, q, qp);
    qjl_project(p, qp, qp + TQ_QFLOATS(p->d));
}

static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    tq_layout L = layout(p);
    tq_score(&L, qp, p->qfloats, nq, codes, n, scores, p->isa);
    qjl_layout Q = {p->code_bytes, res_off(p), (size_t)p->rec.off[KVQ_TQPROD_SIGNS], p->qjl_m, p->o.scale32,
                    sqrtf((float)M_PI / 2) / (float)p->qjl_m, 1};
    qjl_scores(&Q, qp + TQ_QFLOATS(p->d), p->qfloats, nq, codes, n, scores, p->isa);
}

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, !p->o.norot, p->isa);
    if (rc) return rc;
    rc = lloyd_max_solve(&p->cb, p->o.cb_gauss ? DENS_GAUSS : DENS_SPHERE, p->bits - 1, p->d);
    if (rc) return rc;
    cb_snap_int8(&p->cb);
    rc = qjl_init_matrix(p);
    if (!rc) rc = plan_layout(p, KVQ_LAY_TQPROD, p->bits - 1, p->qjl_m);
    if (rc) return rc;
    p->rotated = !p->o.norot;
    p->qfloats = TQ_QFLOATS(p->d) + (size_t)p->qjl_m;
    p->can_decode = 0;
    p->encode = enc;
    p->prep = prep;
    p->score = score;
    return KVQ_OK;
}

const kvq_method kvq_method_tq_prod = {"tq-prod", 2, 8, 3, init, NULL, 0};
