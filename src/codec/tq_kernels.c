/*
 * Scalar references of the codebook-index kernels (tq_kernels.h): the
 * specification that the x86 kernels (tq_kernels_x86.c, tq_vnni_x86.c)
 * match and fall back to. They call nothing of the SIMD files; the choice
 * of kernel per ISA is made in tq_dispatch.c.
 */
#include <math.h>
#include <string.h>

#include "simd_util.h"
#include "tq_kernels.h"

void tq_quantize_ref(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale) {
    double ss = 0;
    for (int c = 0; c < d; c++) ss += (double)y[c] * y[c];
    if (ss == 0) {
        int z = cb_quantize(cb, 0.0f);
        memset(idx, z, (size_t)d);
        *scale = 0;
        return;
    }
    double nrm = sqrt(ss);
    float s = (float)(sqrt((double)d) / nrm);
    double yc = 0, cc = 0;
    for (int c = 0; c < d; c++) {
        int i = cb_quantize(cb, y[c] * s);
        idx[c] = (uint8_t)i;
        yc += (double)y[c] * cb->c[i];
        cc += (double)cb->c[i] * cb->c[i];
    }
    *scale = scale_norm || cc == 0 ? (float)(nrm / sqrt((double)d)) : (float)(yc / cc);
}

void tq_unpack(const tq_layout *L, const uint8_t *rec, uint8_t *idx, kvq_isa isa) {
    (void)isa;
    strided_unpack(rec + L->idx_off, L->d, L->b, idx);
}

void tq_score_ref(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    uint8_t idx[KVQ_DIM_MAX];
    const float *cent = L->scent;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * L->stride;
        strided_unpack(rec + L->idx_off, L->d, L->b, idx);
        float g = tq_scale(L, rec);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * qstride;
            float s = 0;
            for (int c = 0; c < L->d; c++) s += q[c] * cent[idx[c]];
            scores[j * n + i] = g * s;
        }
    }
}

void tq_accum_ref(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    uint8_t idx[KVQ_DIM_MAX];
    const float *cent = L->cb->c;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * L->stride;
        strided_unpack(rec + L->idx_off, L->d, L->b, idx);
        float g = tq_scale(L, rec);
        for (size_t j = 0; j < nq; j++) {
            float wg = w[j * n + i] * g;
            float *a = acc + j * (size_t)L->d;
            for (int c = 0; c < L->d; c++) a[c] += wg * cent[idx[c]];
        }
    }
}

void tq_decode_ref(const tq_layout *L, const uint8_t *rec, float *y) {
    uint8_t idx[KVQ_DIM_MAX];
    strided_unpack(rec + L->idx_off, L->d, L->b, idx);
    float g = tq_scale(L, rec);
    for (int c = 0; c < L->d; c++) y[c] = g * L->cb->c[idx[c]];
}

void tq_query8_ref(int d, float *qp) {
    float m = 0;
    for (int c = 0; c < d; c++) m = fmaxf(m, fabsf(qp[c]));
    float sq = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f;
    int8_t *q8 = (int8_t *)(qp + 2 * d + 2);
    float sum = 0;
    for (int c = 0; c < d; c++) {
        long v = lrintf(qp[c] * inv);
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        q8[c] = (int8_t)v;
        qp[d + c] = (float)v;
        sum += (float)v;
    }
    qp[2 * d] = sq;
    qp[2 * d + 1] = sum;
}
