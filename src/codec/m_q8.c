/*
 * q8: int8 per value with one f16 scale per block of 32 values (llama.cpp
 * q8_0, MLX kv_bits=8). scale = max|x| / 127, q = round(x / scale).
 * Record: [nb f16 scales | d int8]; nb = ceil(d/32); 8.5 bits per value.
 * No rotation.
 * Scores use an 8-bit query with one scale per block, as llama.cpp's q8_0 x
 * q8_0 dot: s = sum_b (ks_b * sq_b) * sum_{c in b} q8_c * k8_c, the block
 * sums exact integers (qblk.h: prepared row, order of the float operations,
 * error bound). The query rounding adds a relative score error of 5.2e-3
 * (RMS, Gaussian, d = 128; docs/METHODS.md), as large as the key's own int8
 * rounding: attention rel_err 0.0076 -> 0.0093 (attn-bench, d = 128).
 * Reference kernels here (score_ref: the defining integer arithmetic;
 * decode-based accumulate), SIMD in q8_kernels_x86.c (AVX2 maddubs scores,
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

static void prep(const kvq_plan *p, const float *q, float *qp) { qblk_prep(p->d, 0, q, qp, p->isa); }

/* The definition of a q8 score (qblk.h). */
static void score_ref(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const int d = p->d, nb = nblocks(d);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * p->code_bytes;
        const int8_t *k8 = (const int8_t *)(rec + 2 * nb);
        for (size_t j = 0; j < nq; j++) {
            const float *row = qp + j * p->qfloats;
            const int8_t *q8 = qblk_q8(row, nb);
            float s = 0;
            for (int b = 0; b < nb; b++) {
                const int lo = b * QB, hi = lo + QB < d ? lo + QB : d;
                int32_t I = 0;
                for (int c = lo; c < hi; c++) I += q8[c] * k8[c];
                uint16_t h;
                memcpy(&h, rec + 2 * b, 2);
                s = fmaf(kvq_f16_to_f32(h) * row[b], (float)I, s);
            }
            scores[j * n + i] = s;
        }
    }
}

void q8_kernels_select(kvq_plan *p);

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (!rc) rc = plan_layout(p, KVQ_LAY_Q8, 0, 0);
    if (rc) return rc;
    p->qfloats = QBLK_QFLOATS(p->d);
    p->encode = enc;
    p->decode = dec;
    p->prep = prep;
    p->score = score_ref;
    p->accum = generic_accum;
    q8_kernels_select(p);
    return KVQ_OK;
}

const kvq_method kvq_method_q8 = {"q8", 0, 0, 0, init, NULL, 0};
