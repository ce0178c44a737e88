/*
 * Helpers of the methods and wrappers (declared in codec_internal.h): the
 * record layout of a plan, stored scales, the decode-based reference
 * kernels, calibration moments. Nothing here reaches a method or the plan
 * tables.
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"

/* ---- record layout ------------------------------------------------------------ */
int plan_layout(kvq_plan *p, int kind, int bits, int m) {
    p->rec = kvq_layout_make(kind, p->d, bits, m, (int)scale_bytes(p));
    p->code_bytes = (size_t)p->rec.bytes;
    return p->rec.bytes > 0 ? KVQ_OK : KVQ_ERR_UNSUPPORTED_DIM;
}

/* ---- scales --------------------------------------------------------------- */
int scale_store(const kvq_plan *p, uint8_t *dst, float s) {
    if (!(fabsf(s) <= (p->o.scale32 ? KVQ_SCALE32_MAX : KVQ_SCALE16_MAX))) return KVQ_ERR_RANGE; /* NaN too */
    if (p->o.scale32) { memcpy(dst, &s, 4); return KVQ_OK; }
    uint16_t h = kvq_f32_to_f16(s);
    memcpy(dst, &h, 2);
    return KVQ_OK;
}

float scale_load(const kvq_plan *p, const uint8_t *src) {
    if (p->o.scale32) { float s; memcpy(&s, src, 4); return s; }
    uint16_t h;
    memcpy(&h, src, 2);
    return kvq_f16_to_f32(h);
}

/* ---- generic (decode-based) reference kernels ----------------------------- */
void generic_prep_rot(const kvq_plan *p, const float *q, float *qp) { rot_apply(&p->rot, q, qp); }

void generic_score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    float y[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        p->decode(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * p->qfloats;
            float s = 0;
            for (int c = 0; c < p->d; c++) s += q[c] * y[c];
            scores[j * n + i] = s;
        }
    }
}

void generic_accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    float y[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        p->decode(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            float wi = w[j * n + i];
            float *a = acc + j * (size_t)p->d;
            for (int c = 0; c < p->d; c++) a[c] += wi * y[c];
        }
    }
}

/* ---- wrappers --------------------------------------------------------------- */
int wrapper_inner_strides(kvq_plan *p, size_t code_bytes, size_t qfloats) {
    kvq_plan *in = p->inner;
    if (p->inner_shared) return in->code_bytes == code_bytes && in->qfloats == qfloats ? KVQ_OK : KVQ_ERR_STATE;
    in->code_bytes = code_bytes;
    in->qfloats = qfloats;
    return KVQ_OK;
}

void wrapper_kernels(kvq_plan *p, enc_fn enc, dec_fn dec, prep_fn prep, score_fn score, accum_fn accum) {
    p->can_decode = p->inner->can_decode;
    p->encode = enc;
    p->decode = p->can_decode ? dec : NULL;
    p->prep = prep;
    p->score = score;
    p->accum = p->can_decode ? accum : NULL;
}

/* ---- calibration ---------------------------------------------------------- */
/* Per-channel mean and variance of n_calib rows (two passes, double);
 * KVQ_ERR_NONFINITE on NaN/Inf. (+center, +outliers) */
int calib_moments(const float *calib, size_t n_calib, int d, double *mean, double *var) {
    for (int c = 0; c < d; c++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < n_calib; i++) {
            double v = calib[i * (size_t)d + c];
            if (!isfinite(v)) return KVQ_ERR_NONFINITE;
            s += v;
        }
        mean[c] = s / (double)n_calib;
        for (size_t i = 0; i < n_calib; i++) {
            double v = calib[i * (size_t)d + c] - mean[c];
            s2 += v * v;
        }
        var[c] = s2 / (double)n_calib;
    }
    return KVQ_OK;
}
