/*
 * q4: 4-bit asymmetric per block of 32 values with f16 scale and f16 min
 * (llama.cpp q4_1, MLX kv_bits=4): x ≈ min + scale * q, q in 0..15,
 * scale = (max - min) / 15. Record: [nb x (f16 scale, f16 min) | d/2 bytes],
 * value c of a block in the low nibble of byte c/2 when c is even.
 * 5 bits per value (4 + 32/32). No rotation.
 * Scores use an 8-bit query with one scale per block, as llama.cpp's q4_1 x
 * q8_1 dot: s = sum_b sq_b * (ks_b * sum q8_c n_c + km_b * sum q8_c), the
 * block sums exact integers (qblk.h: prepared row, whose q8 bytes are in
 * nibble order, order of the float operations, error bound). The query
 * rounding adds a relative score error of 5.3e-3 (RMS, Gaussian, d = 128;
 * docs/METHODS.md), against 7.8e-2 for the 4-bit key's own.
 * Reference kernels here (score_ref: the defining integer arithmetic;
 * decode-based accumulate), SIMD in q4_kernels_x86.c (AVX2 maddubs scores,
 * float accumulate) and qblk_vnni_x86.c (AVX-512 VNNI).
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "qblk.h"

#define QB 32

static int nblocks(int d) { return (d + QB - 1) / QB; }

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    int d = p->d, nb = nblocks(d);
    uint8_t *q = code + 4 * nb;
    memset(q, 0, (size_t)d / 2);
    for (int b = 0; b < nb; b++) {
        int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
        float mn = x[lo], mx = x[lo];
        for (int c = lo; c < hi; c++) { mn = fminf(mn, x[c]); mx = fmaxf(mx, x[c]); }
        float s = (mx - mn) / 15.0f;
        if (s > 65504.0f || fabsf(mn) > 65504.0f) return KVQ_ERR_RANGE;
        uint16_t hs = kvq_f32_to_f16(s), hm = kvq_f32_to_f16(mn);
        /* a spread below f16's resolution (s < 2^-25) would store scale 0 and decode the whole
         * block as the rounded min (zeros beside a -1e-7 as -1.2e-7): keep the smallest step */
        if (hs == 0 && s > 0) hs = 1; /* 2^-24 */
        memcpy(code + 4 * b, &hs, 2);
        memcpy(code + 4 * b + 2, &hm, 2);
        float fs = kvq_f16_to_f32(hs), fm = kvq_f16_to_f32(hm);
        float inv = fs > 0 ? 1.0f / fs : 0.0f;
        for (int c = lo; c < hi; c++) {
            float v = nearbyintf((x[c] - fm) * inv);
            int qi = v < 0 ? 0 : v > 15 ? 15 : (int)v;
            q[c / 2] |= (uint8_t)(qi << (4 * (c & 1)));
        }
    }
    return KVQ_OK;
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    int d = p->d, nb = nblocks(d);
    const uint8_t *q = code + 4 * nb;
    for (int b = 0; b < nb; b++) {
        uint16_t hs, hm;
        memcpy(&hs, code + 4 * b, 2);
        memcpy(&hm, code + 4 * b + 2, 2);
        float s = kvq_f16_to_f32(hs), m = kvq_f16_to_f32(hm);
        int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
        for (int c = lo; c < hi; c++) y[c] = m + s * (float)((q[c / 2] >> (4 * (c & 1))) & 15);
    }
}

static void prep(const kvq_plan *p, const float *q, float *qp) { qblk_prep(p->d, 1, q, qp, p->isa); }

/* The definition of a q4 score (qblk.h). */
static void score_ref(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const int d = p->d, nb = nblocks(d);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * p->code_bytes, *q = rec + 4 * nb;
        for (size_t j = 0; j < nq; j++) {
            const float *row = qp + j * p->qfloats;
            const int8_t *q8 = qblk_q8(row, nb);
            float s = 0;
            for (int b = 0; b < nb; b++) {
                const int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
                int32_t N = 0;
                for (int c = lo; c < hi; c++) N += q8[qblk_q4pos(c)] * ((q[c / 2] >> (4 * (c & 1))) & 15);
                uint16_t hs, hm;
                memcpy(&hs, rec + 4 * b, 2);
                memcpy(&hm, rec + 4 * b + 2, 2);
                const float inner = fmaf(kvq_f16_to_f32(hs), (float)N, kvq_f16_to_f32(hm) * row[nb + b]);
                s = fmaf(row[b], inner, s);
            }
            scores[j * n + i] = s;
        }
    }
}

void q4_kernels_select(kvq_plan *p);

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (!rc) rc = plan_layout(p, KVQ_LAY_Q4, 0, 0);
    if (rc) return rc;
    p->qfloats = QBLK_QFLOATS(p->d);
    p->encode = enc;
    p->decode = dec;
    p->prep = prep;
    p->score = score_ref;
    p->accum = generic_accum;
    q4_kernels_select(p);
    return KVQ_OK;
}

const kvq_method kvq_method_q4 = {"q4", 0, 0, 0, init, NULL, 0};
