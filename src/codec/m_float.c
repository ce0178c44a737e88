/*
 * f32, f16, bf16: the uncompressed baselines (f16 is the reference every
 * policy is compared with). No rotation; 32, 16, 16 bits per value.
 * The f16 score/accumulate kernels are the baseline's speed: F16C + FMA
 * (float_kernels_x86.c), so that ratios against it are meaningful.
 */
#include <string.h>

#include "codec_internal.h"
#include "float_kernels.h"

static int enc_f32(const kvq_plan *p, const float *x, uint8_t *code) {
    memcpy(code, x, (size_t)p->d * 4);
    return KVQ_OK;
}
static void dec_f32(const kvq_plan *p, const uint8_t *code, float *y) { memcpy(y, code, (size_t)p->d * 4); }

static int enc_f16(const kvq_plan *p, const float *x, uint8_t *code) {
    for (int i = 0; i < p->d; i++) {
        if (x[i] > 65504.0f || x[i] < -65504.0f) return KVQ_ERR_RANGE;
        uint16_t h = kvq_f32_to_f16(x[i]);
        memcpy(code + 2 * i, &h, 2);
    }
    return KVQ_OK;
}
static void dec_f16(const kvq_plan *p, const uint8_t *code, float *y) {
    for (int i = 0; i < p->d; i++) {
        uint16_t h;
        memcpy(&h, code + 2 * i, 2);
        y[i] = kvq_f16_to_f32(h);
    }
}

static int enc_bf16(const kvq_plan *p, const float *x, uint8_t *code) {
    for (int i = 0; i < p->d; i++) {
        uint16_t h = kvq_f32_to_bf16(x[i]);
        if ((h & 0x7f80u) == 0x7f80u) return KVQ_ERR_RANGE; /* rounds to Inf */
        memcpy(code + 2 * i, &h, 2);
    }
    return KVQ_OK;
}
static void dec_bf16(const kvq_plan *p, const uint8_t *code, float *y) {
    for (int i = 0; i < p->d; i++) {
        uint16_t h;
        memcpy(&h, code + 2 * i, 2);
        y[i] = kvq_bf16_to_f32(h);
    }
}

static void prep_copy(const kvq_plan *p, const float *q, float *qp) { memcpy(qp, q, (size_t)p->d * 4); }

static int init_common(kvq_plan *p, int kind, enc_fn e, dec_fn dec, int ftype) {
    int rc = rot_init(&p->rot, p->d, p->seed, 0, p->isa);
    if (!rc) rc = plan_layout(p, kind, 0, 0);
    if (rc) return rc;
    p->qfloats = (size_t)p->d;
    p->encode = e;
    p->decode = dec;
    p->prep = prep_copy;
    p->score = generic_score;
    p->accum = generic_accum;
    float_kernels_select(p, ftype);
    return KVQ_OK;
}

static int init_f32(kvq_plan *p) { return init_common(p, KVQ_LAY_F32, enc_f32, dec_f32, FK_F32); }
static int init_f16(kvq_plan *p) { return init_common(p, KVQ_LAY_F16, enc_f16, dec_f16, FK_F16); }
static int init_bf16(kvq_plan *p) { return init_common(p, KVQ_LAY_BF16, enc_bf16, dec_bf16, FK_BF16); }

const kvq_method kvq_method_f32 = {"f32", 0, 0, 0, init_f32, NULL, 0};
const kvq_method kvq_method_f16 = {"f16", 0, 0, 0, init_f16, NULL, 0};
const kvq_method kvq_method_bf16 = {"bf16", 0, 0, 0, init_bf16, NULL, 0};
