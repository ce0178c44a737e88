/*
 * tq-mse:b — TurboQuant's MSE quantizer (Zandieh et al. 2025, Alg. 1):
 * rotate, quantize each coordinate of sqrt(d) * y/|y| with the b-bit
 * Lloyd-Max codebook of the sphere-coordinate density (DESIGN.md §2), store
 * one scale. Record: [scale f16 | d*b/8 bytes of strided indices].
 * b*d/8 + 2 bytes: 4.125 bits per value at b = 4, d = 128. Codebooks of <= 4
 * bits sit on an int8 grid and scores are integer dot products with an
 * 8-bit query (tq_kernels.h).
 */
#include <string.h>

#include "codec_internal.h"
#include "tq_encode.h"
#include "tq_kernels.h"

static tq_layout layout(const kvq_plan *p) {
    tq_layout L = {p->d,          p->bits, &p->cb, p->code_bytes, (size_t)p->rec.off[KVQ_TQ_SCALE],
                   (size_t)p->rec.off[KVQ_TQ_IDX], p->o.scale32, p->vnni, NULL};
    return L;
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    float y[KVQ_DIM_MAX], g;
    uint8_t idx[KVQ_DIM_MAX];
    if (p->isa >= KVQ_ISA_AVX512 &&
        tq_encode_fused_avx512(&p->rot, &p->cb, p->d, p->bits, p->o.scale_norm, x, &g, code + p->rec.off[KVQ_TQ_IDX]))
        return scale_store(p, code, g);
    rot_apply(&p->rot, x, y);
    tq_quantize(&p->cb, y, p->d, p->o.scale_norm, idx, &g, p->isa);
    int rc = scale_store(p, code, g);
    if (rc) return rc;
    strided_pack(idx, p->d, p->bits, code + p->rec.off[KVQ_TQ_IDX]);
    return KVQ_OK;
}

/* Whole batches through the fused AVX-512 encoder; a row it cannot finish
 * (zero or non-finite norm, scale out of range) goes through enc. */
static int enc_rows(const kvq_plan *p, const float *x, size_t n, uint8_t *codes) {
    const size_t d = (size_t)p->d, cb = p->code_bytes;
    size_t i = 0;
    while (i < n) {
        i += tq_encode_rows_avx512(&p->rot, &p->cb, p->d, p->bits, p->o.scale_norm, p->o.scale32, x + i * d, n - i,
                                   codes + i * cb, cb);
        if (i < n) {
            int rc = enc(p, x + i * d, codes + i * cb);
            if (rc) return rc;
            i++;
        }
    }
    return KVQ_OK;
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    tq_layout L = layout(p);
    tq_decode(&L, code, y, p->isa);
}

static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    tq_layout L = layout(p);
    tq_score(&L, qp, p->qfloats, nq, codes, n, scores, p->isa);
}

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    tq_layout L = layout(p);
    tq_accum(&L, w, nq, codes, n, acc, p->isa);
}

static void prep(const kvq_plan *p, const float *q, float *qp) { tq_prepare_query(&p->rot, p->d, q, qp); }

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, !p->o.norot, p->isa);
    if (rc) return rc;
    rc = lloyd_max_solve(&p->cb, p->o.cb_gauss ? DENS_GAUSS : DENS_SPHERE, p->bits, p->d);
    if (rc) return rc;
    cb_snap_int8(&p->cb); /* <= 4 bits: integer scores (tq_kernels.h) */
    rc = plan_layout(p, KVQ_LAY_TQ, p->bits, 0);
    if (rc) return rc;
    p->rotated = !p->o.norot;
    p->qfloats = TQ_QFLOATS(p->d);
    p->encode = enc;
    if (p->isa >= KVQ_ISA_AVX512 && tq_encode_fused_ok(&p->rot, &p->cb, p->d, p->bits)) p->encode_rows = enc_rows;
    p->decode = dec;
    p->prep = prep;
    p->score = score;
    p->accum = accum;
    return KVQ_OK;
}

const kvq_method kvq_method_tq_mse = {"tq-mse", 1, 8, 4, init, NULL, 0};
