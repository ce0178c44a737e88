/*
 * q4: 4-bit asymmetric per block of 32 values with f16 scale and f16 min
 * (llama.cpp q4_1, MLX kv_bits=4): x ≈ min + scale * q, q in 0..15,
 * scale = (max - min) / 15. Record: [nb x (f16 scale, f16 min) | d/2 bytes],
 * value c of a block in the low nibble of byte c/2 when c is even.
 * 5 bits per value (4 + 32/32). No rotation. SIMD kernels in q4_kernels_x86.c
 * (decode-based references here).
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"

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

static void prep(const kvq_plan *p, const float *q, float *qp) { memcpy(qp, q, (size_t)p->d * 4); }

void q4_kernels_select(kvq_plan *p);

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (rc) return rc;
    p->code_bytes = 4 * (size_t)nblocks(p->d) + (size_t)p->d / 2;
    p->qfloats = (size_t)p->d;
    p->encode = enc;
    p->decode = dec;
    p->prep = prep;
    p->score = generic_score;
    p->accum = generic_accum;
    q4_kernels_select(p);
    return KVQ_OK;
}

const kvq_method kvq_method_q4 = {"q4", 0, 0, 0, init, NULL};
