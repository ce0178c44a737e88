/*
 * q8: int8 per value with one f16 scale per block of 32 values (llama.cpp
 * q8_0, MLX kv_bits=8). scale = max|x| / 127, q = round(x / scale).
 * Record: [nb f16 scales | d int8]; nb = ceil(d/32); 8.5 bits per value.
 * No rotation.
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"

#define QB 32

static int nblocks(int d) { return (d + QB - 1) / QB; }

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    int d = p->d, nb = nblocks(d);
    int8_t *q = (int8_t *)(code + 2 * nb);
    for (int b = 0; b < nb; b++) {
        int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
        float amax = 0;
        for (int c = lo; c < hi; c++) amax = fmaxf(amax, fabsf(x[c]));
        float s = amax / 127.0f;
        if (s > 65504.0f) return KVQ_ERR_RANGE;
        uint16_t h = kvq_f32_to_f16(s);
        memcpy(code + 2 * b, &h, 2);
        float sh = kvq_f16_to_f32(h); /* quantize against the stored scale */
        float inv = sh > 0 ? 1.0f / sh : 0.0f;
        for (int c = lo; c < hi; c++) {
            float v = nearbyintf(x[c] * inv);
            q[c] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        }
    }
    return KVQ_OK;
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    int d = p->d, nb = nblocks(d);
    const int8_t *q = (const int8_t *)(code + 2 * nb);
    for (int b = 0; b < nb; b++) {
        uint16_t h;
        memcpy(&h, code + 2 * b, 2);
        float s = kvq_f16_to_f32(h);
        int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
        for (int c = lo; c < hi; c++) y[c] = s * q[c];
    }
}

static void prep(const kvq_plan *p, const float *q, float *qp) { memcpy(qp, q, (size_t)p->d * 4); }

void q8_kernels_select(kvq_plan *p);

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (rc) return rc;
    p->code_bytes = 2 * (size_t)nblocks(p->d) + (size_t)p->d;
    p->qfloats = (size_t)p->d;
    p->encode = enc;
    p->decode = dec;
    p->prep = prep;
    p->score = generic_score;
    p->accum = generic_accum;
    q8_kernels_select(p);
    return KVQ_OK;
}

const kvq_method kvq_method_q8 = {"q8", 0, 0, 0, init, NULL};
