/*
 * ggml weight types: scalar reference (dequantization, sub-block
 * decomposition, activation quantization, dot products) and the threaded
 * matrix products that dispatch to the per-ISA kernels.
 */
#include "ggml_types.h"

#include <math.h>
#include <string.h>

#include "cpu.h"

/* ------------------------------------------------------------------------ */
/* Type table                                                               */
/* ------------------------------------------------------------------------ */
typedef struct { const char *name; int block; int bytes; int supported; int q8a; } type_info;

static const type_info TYPES[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {"f32", 1, 4, 1, 0},
    [GGML_TYPE_F16] = {"f16", 1, 2, 1, 0},
    [GGML_TYPE_BF16] = {"bf16", 1, 2, 1, 0},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18, 1, 1},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20, 1, 1},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22, 1, 1},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24, 1, 1},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34, 1, 1},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144, 1, 1},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176, 1, 1},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210, 1, 1},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110, 1, 1},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, 1, 1},
};

/* ggml's kvalues_iq4nl: the 16 levels of IQ4_NL (a fixed non-uniform grid,
 * denser near 0, fitted to the weights' roughly Gaussian distribution). */
const int8_t kvq_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static const type_info *info(kvq_ggml_type t) {
    return (unsigned)t < GGML_TYPE_COUNT && TYPES[t].name ? &TYPES[t] : NULL;
}

int kvq_ggml_type_supported(kvq_ggml_type t) { const type_info *i = info(t); return i && i->supported; }
int kvq_ggml_type_block(kvq_ggml_type t) { const type_info *i = info(t); return i ? i->block : 0; }
int kvq_ggml_type_uses_q8a(kvq_ggml_type t) { const type_info *i = info(t); return i && i->q8a; }

size_t kvq_ggml_row_bytes(kvq_ggml_type t, int64_t n) {
    const type_info *i = info(t);
    if (!i || n <= 0 || n % i->block) return 0;
    return (size_t)(n / i->block) * (size_t)i->bytes;
}

static float h2f(uint16_t h) { return kvq_f16_to_f32(h); }

/* ------------------------------------------------------------------------ */
/* Dequantization (the formulas, written out per type)                      */
/* ------------------------------------------------------------------------ */
/* 6-bit scale and min of sub-block j of a q4_K / q5_K super-block. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Signed 6-bit scale s (0..15) of a q3_K super-block, -32..31 (layout in
 * ggml_types.h: low nibble from scales[s % 8], high 2 bits from
 * scales[8 + s % 4] at bit 2*(s/4)). */
static int scale_q3_K(const uint8_t *scales, int s) {
    int lo = (scales[s % 8] >> (4 * (s / 8))) & 0xF;
    int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* 3-bit code (0..7) of value v (< 256) of a q3_K super-block. */
static int code_q3_K(const block_q3_K *x, int v) {
    int h = v / 128, k = (v % 128) / 32, l = v % 32;
    return ((x->qs[32 * h + l] >> (2 * k)) & 3) | ((x->hmask[l] >> (4 * h + k)) & 1) << 2;
}

int kvq_ggml_dequant_row(kvq_ggml_type t, const void *src, float *y, int64_t n) {
    const type_info *ti = info(t);
    if (!src || !y) return KVQ_ERR_NULL;
    if (!ti || !ti->supported) return KVQ_ERR_UNSUPPORTED;
    if (n <= 0 || n % ti->block) return KVQ_ERR_INVALID_ARG;
    int64_t nb = n / ti->block;
    switch (t) {
    case GGML_TYPE_F32: memcpy(y, src, (size_t)n * 4); break;
    case GGML_TYPE_F16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) y[i] = h2f((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    }
    case GGML_TYPE_BF16: {
        const uint8_t *p = src;
        for (int64_t i = 0; i < n; i++) y[i] = kvq_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    }
    case GGML_TYPE_Q4_0:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_q4_0 *x = (const block_q4_0 *)src + b;
            float d = h2f(x->d);
            for (int l = 0; l < 16; l++) {
                y[l] = d * (float)((x->qs[l] & 0xF) - 8);
                y[l + 16] = d * (float)((x->qs[l] >> 4) - 8);
            }
        }
        break;
    case GGML_TYPE_Q4_1:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_q4_1 *x = (const block_q4_1 *)src + b;
            float d = h2f(x->d), m = h2f(x->m);
            for (int l = 0; l < 16; l++) {
                y[l] = d * (float)(x->qs[l] & 0xF) + m;
                y[l + 16] = d * (float)(x->qs[l] >> 4) + m;
            }
        }
        break;
    case GGML_TYPE_Q5_0:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_q5_0 *x = (const block_q5_0 *)src + b;
            float d = h2f(x->d);
            uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
            for (int l = 0; l < 16; l++) {
                int lo = (x->qs[l] & 0xF) | (int)((qh >> l) & 1) << 4;
                int hi = (x->qs[l] >> 4) | (int)((qh >> (l + 16)) & 1) << 4;
                y[l] = d * (float)(lo - 16);
                y[l + 16] = d * (float)(hi - 16);
            }
        }
        break;
    case GGML_TYPE_Q5_1:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_q5_1 *x = (const block_q5_1 *)src + b;
            float d = h2f(x->d), m = h2f(x->m);
            uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
            for (int l = 0; l < 16; l++) {
                int lo = (x->qs[l] & 0xF) | (int)((qh >> l) & 1) << 4;
                int hi = (x->qs[l] >> 4) | (int)((qh >> (l + 16)) & 1) << 4;
                y[l] = d * (float)lo + m;
                y[l + 16] = d * (float)hi + m;
            }
        }
        break;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_q8_0 *x = (const block_q8_0 *)src + b;
            float d = h2f(x->d);
            for (int l = 0; l < 32; l++) y[l] = d * (float)x->qs[l];
        }
        break;
    case GGML_TYPE_Q4_K:
        for (int64_t b = 0; b < nb; b++) {
            const block_q4_K *x = (const block_q4_K *)src + b;
            float d = h2f(x->d), dmin = h2f(x->dmin);
            const uint8_t *q = x->qs;
            for (int c = 0; c < 4; c++, q += 32) {
                uint8_t sc, m;
                scale_min_k4(2 * c, x->scales, &sc, &m);
                float d1 = d * sc, m1 = dmin * m;
                scale_min_k4(2 * c + 1, x->scales, &sc, &m);
                float d2 = d * sc, m2 = dmin * m;
                for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
                for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            }
        }
        break;
    case GGML_TYPE_Q5_K:
        for (int64_t b = 0; b < nb; b++) {
            const block_q5_K *x = (const block_q5_K *)src + b;
            float d = h2f(x->d), dmin = h2f(x->dmin);
            const uint8_t *q = x->qs;
            for (int c = 0; c < 4; c++, q += 32) {
                uint8_t sc, m;
                scale_min_k4(2 * c, x->scales, &sc, &m);
                float d1 = d * sc, m1 = dmin * m;
                scale_min_k4(2 * c + 1, x->scales, &sc, &m);
                float d2 = d * sc, m2 = dmin * m;
                uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
                for (int l = 0; l < 32; l++) *y++ = d1 * (float)((q[l] & 0xF) + (x->qh[l] & u1 ? 16 : 0)) - m1;
                for (int l = 0; l < 32; l++) *y++ = d2 * (float)((q[l] >> 4) + (x->qh[l] & u2 ? 16 : 0)) - m2;
            }
        }
        break;
    case GGML_TYPE_Q6_K:
        for (int64_t b = 0; b < nb; b++) {
            const block_q6_K *x = (const block_q6_K *)src + b;
            float d = h2f(x->d);
            const uint8_t *ql = x->ql, *qh = x->qh;
            const int8_t *sc = x->scales;
            for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                    int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                    int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                    int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                    y[l] = d * sc[is + 0] * (float)q1;
                    y[l + 32] = d * sc[is + 2] * (float)q2;
                    y[l + 64] = d * sc[is + 4] * (float)q3;
                    y[l + 96] = d * sc[is + 6] * (float)q4;
                }
            }
        }
        break;
    case GGML_TYPE_Q3_K:
        for (int64_t b = 0; b < nb; b++, y += 256) {
            const block_q3_K *x = (const block_q3_K *)src + b;
            float d = h2f(x->d);
            for (int v = 0; v < 256; v++)
                y[v] = d * (float)scale_q3_K(x->scales, v / 16) * (float)(code_q3_K(x, v) - 4);
        }
        break;
    case GGML_TYPE_IQ4_NL:
        for (int64_t b = 0; b < nb; b++, y += 32) {
            const block_iq4_nl *x = (const block_iq4_nl *)src + b;
            float d = h2f(x->d);
            for (int l = 0; l < 16; l++) {
                y[l] = d * (float)kvq_iq4nl_values[x->qs[l] & 0xF];
                y[l + 16] = d * (float)kvq_iq4nl_values[x->qs[l] >> 4];
            }
        }
        break;
    default: return KVQ_ERR_UNSUPPORTED;
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Sub-block decomposition                                                   */
/* ------------------------------------------------------------------------ */
void kvq_ggml_unpack32(kvq_ggml_type t, const void *row, int64_t j, uint8_t u[32], float scale[2], float min[2]) {
    switch (t) {
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: {
        const uint8_t *qs;
        float d, m;
        if (t == GGML_TYPE_Q4_0) {
            const block_q4_0 *x = (const block_q4_0 *)row + j;
            qs = x->qs; d = h2f(x->d); m = -8.0f * d;
        } else {
            const block_q4_1 *x = (const block_q4_1 *)row + j;
            qs = x->qs; d = h2f(x->d); m = h2f(x->m);
        }
        for (int l = 0; l < 16; l++) { u[l] = qs[l] & 0xF; u[l + 16] = qs[l] >> 4; }
        scale[0] = scale[1] = d;
        min[0] = min[1] = m;
        break;
    }
    case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: {
        const uint8_t *qs, *qhb;
        float d, m;
        if (t == GGML_TYPE_Q5_0) {
            const block_q5_0 *x = (const block_q5_0 *)row + j;
            qs = x->qs; qhb = x->qh; d = h2f(x->d); m = -16.0f * d;
        } else {
            const block_q5_1 *x = (const block_q5_1 *)row + j;
            qs = x->qs; qhb = x->qh; d = h2f(x->d); m = h2f(x->m);
        }
        uint32_t qh = (uint32_t)qhb[0] | (uint32_t)qhb[1] << 8 | (uint32_t)qhb[2] << 16 | (uint32_t)qhb[3] << 24;
        for (int l = 0; l < 16; l++) {
            u[l] = (uint8_t)((qs[l] & 0xF) | ((qh >> l) & 1) << 4);
            u[l + 16] = (uint8_t)((qs[l] >> 4) | ((qh >> (l + 16)) & 1) << 4);
        }
        scale[0] = scale[1] = d;
        min[0] = min[1] = m;
        break;
    }
    case GGML_TYPE_Q8_0: {
        const block_q8_0 *x = (const block_q8_0 *)row + j;
        float d = h2f(x->d);
        for (int l = 0; l < 32; l++) u[l] = (uint8_t)(x->qs[l] + 128);
        scale[0] = scale[1] = d;
        min[0] = min[1] = -128.0f * d;
        break;
    }
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: {
        int sb = (int)(j % 8), c = sb / 2, hi = sb % 2;
        const uint8_t *scales, *qs;
        uint16_t dd, dm;
        const uint8_t *qh = NULL;
        if (t == GGML_TYPE_Q4_K) {
            const block_q4_K *x = (const block_q4_K *)row + j / 8;
            scales = x->scales; qs = x->qs; dd = x->d; dm = x->dmin;
        } else {
            const block_q5_K *x = (const block_q5_K *)row + j / 8;
            scales = x->scales; qs = x->qs; dd = x->d; dm = x->dmin; qh = x->qh;
        }
        uint8_t sc, m;
        scale_min_k4(sb, scales, &sc, &m);
        for (int l = 0; l < 32; l++) {
            uint8_t q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
            if (qh) q = (uint8_t)(q | ((qh[l] >> sb) & 1) << 4);
            u[l] = q;
        }
        scale[0] = scale[1] = h2f(dd) * sc;
        min[0] = min[1] = -h2f(dm) * m;
        break;
    }
    case GGML_TYPE_Q6_K: {
        const block_q6_K *x = (const block_q6_K *)row + j / 8;
        int sb = (int)(j % 8), h = sb / 4, k = sb % 4;
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
            int hb = (qh[l] >> (2 * k)) & 3;
            u[l] = (uint8_t)(lo | hb << 4);
        }
        float d = h2f(x->d);
        for (int half = 0; half < 2; half++) {
            scale[half] = d * (float)x->scales[8 * h + 2 * k + half];
            min[half] = -32.0f * scale[half];
        }
        break;
    }
    case GGML_TYPE_Q3_K: { /* w = d*(sc-32)*(code-4): scale_h = d*(sc_h-32), min_h = -4*scale_h */
        const block_q3_K *x = (const block_q3_K *)row + j / 8;
        int sb = (int)(j % 8);
        for (int l = 0; l < 32; l++) u[l] = (uint8_t)code_q3_K(x, 32 * sb + l);
        float d = h2f(x->d);
        for (int half = 0; half < 2; half++) {
            scale[half] = d * (float)scale_q3_K(x->scales, 2 * sb + half);
            min[half] = -4.0f * scale[half];
        }
        break;
    }
    case GGML_TYPE_IQ4_NL: { /* u = table value + 128 (1..241), w = d*u - 128d */
        const block_iq4_nl *x = (const block_iq4_nl *)row + j;
        float d = h2f(x->d);
        for (int l = 0; l < 16; l++) {
            u[l] = (uint8_t)(kvq_iq4nl_values[x->qs[l] & 0xF] + 128);
            u[l + 16] = (uint8_t)(kvq_iq4nl_values[x->qs[l] >> 4] + 128);
        }
        scale[0] = scale[1] = d;
        min[0] = min[1] = -128.0f * d;
        break;
    }
    default:
        memset(u, 0, 32);
        scale[0] = scale[1] = min[0] = min[1] = 0.0f;
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Activations                                                              */
/* ------------------------------------------------------------------------ */
/* Offset of the spread scales dx in a q8a row. */
static size_t q8a_dx_offset(int64_t n) { return ((size_t)n + 12 * ((size_t)n / 32) + 63) & ~(size_t)63; }

size_t kvq_ggml_q8a_row_bytes(int64_t n) {
    size_t pairs = ((size_t)n / 32 + 1) / 2;
    return q8a_dx_offset(n) + 64 * pairs;
}

void kvq_ggml_q8a_spread(void *row, int64_t n) {
    int64_t nb = n / 32;
    const float *d = (const float *)((const uint8_t *)row + n);
    float *dx = (float *)((uint8_t *)row + q8a_dx_offset(n));
    for (int64_t b = 0; b < 2 * ((nb + 1) / 2); b++)
        for (int l = 0; l < 8; l++) dx[8 * b + l] = b < nb ? d[b] : 0.0f;
}

void kvq_ggml_quantize_q8a_row(const float *x, int64_t n, void *row) {
    int64_t nb = n / 32;
    int8_t *q = row;
    float *d = (float *)((uint8_t *)row + n), *s = d + nb, *s0 = s + nb;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(xb[l]));
        float db = amax / 127.0f, id = db > 0.0f ? 1.0f / db : 0.0f;
        int sum0 = 0, sum1 = 0;
        for (int l = 0; l < 32; l++) {
            int v = (int)lrintf(xb[l] * id);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[32 * b + l] = (int8_t)v;
            if (l < 16) sum0 += v;
            else sum1 += v;
        }
        d[b] = db;
        s[b] = db * (float)(sum0 + sum1);
        s0[b] = db * (float)sum0;
    }
    kvq_ggml_q8a_spread(row, n);
}

/* ------------------------------------------------------------------------ */
/* Scalar reference dot products                                            */
/* ------------------------------------------------------------------------ */
static void dot_q8a_ref(kvq_ggml_type t, int64_t n, const void *w, const void *act, size_t stride, int nx, float *out) {
    int64_t nb = n / 32;
    for (int r = 0; r < nx; r++) {
        const uint8_t *row = (const uint8_t *)act + (size_t)r * stride;
        const int8_t *q = (const int8_t *)row;
        const float *d = (const float *)(row + n), *s = d + nb, *s0 = s + nb;
        double acc = 0.0;
        for (int64_t j = 0; j < nb; j++) {
            uint8_t u[32];
            float sc[2], mn[2];
            kvq_ggml_unpack32(t, w, j, u, sc, mn);
            int32_t ia = 0, ib = 0;
            for (int l = 0; l < 16; l++) ia += (int32_t)u[l] * q[32 * j + l];
            for (int l = 16; l < 32; l++) ib += (int32_t)u[l] * q[32 * j + l];
            acc += (double)d[j] * ((double)sc[0] * ia + (double)sc[1] * ib) + (double)mn[1] * s[j] +
                   ((double)mn[0] - mn[1]) * s0[j];
        }
        out[r] = (float)acc;
    }
}

/* Quantized weights (through the sub-block decomposition) against f32 rows. */
static void dotf_ref(kvq_ggml_type t, int64_t n, const void *w, const void *act, size_t stride, int nx, float *out) {
    double acc[GGML_MAX_NX] = {0};
    for (int64_t j = 0; j < n / 32; j++) {
        uint8_t u[32];
        float sc[2], mn[2];
        kvq_ggml_unpack32(t, w, j, u, sc, mn);
        for (int r = 0; r < nx; r++) {
            const float *x = (const float *)((const uint8_t *)act + (size_t)r * stride) + 32 * j;
            for (int l = 0; l < 32; l++) acc[r] += ((double)sc[l / 16] * u[l] + mn[l / 16]) * x[l];
        }
    }
    for (int r = 0; r < nx; r++) out[r] = (float)acc[r];
}

static void dot_float_ref(kvq_ggml_type t, int64_t n, const void *w, const void *act, size_t stride, int nx, float *out) {
    const uint8_t *p = w;
    for (int r = 0; r < nx; r++) {
        const float *x = (const float *)((const uint8_t *)act + (size_t)r * stride);
        double acc = 0.0;
        for (int64_t i = 0; i < n; i++) {
            float wi;
            if (t == GGML_TYPE_F32) memcpy(&wi, p + 4 * i, 4);
            else if (t == GGML_TYPE_F16) wi = h2f((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
            else wi = kvq_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
            acc += (double)wi * x[i];
        }
        out[r] = (float)acc;
    }
}

#define REF_Q8A(T, name) \
    static void name(int64_t n, const void *w, const void *a, size_t s, int nx, float *o) { dot_q8a_ref(T, n, w, a, s, nx, o); }
#define REF_F(T, name) \
    static void name(int64_t n, const void *w, const void *a, size_t s, int nx, float *o) { dot_float_ref(T, n, w, a, s, nx, o); }
REF_Q8A(GGML_TYPE_Q4_0, ref_q4_0)
REF_Q8A(GGML_TYPE_Q4_1, ref_q4_1)
REF_Q8A(GGML_TYPE_Q5_0, ref_q5_0)
REF_Q8A(GGML_TYPE_Q5_1, ref_q5_1)
REF_Q8A(GGML_TYPE_Q8_0, ref_q8_0)
REF_Q8A(GGML_TYPE_Q4_K, ref_q4_K)
REF_Q8A(GGML_TYPE_Q5_K, ref_q5_K)
REF_Q8A(GGML_TYPE_Q6_K, ref_q6_K)
REF_Q8A(GGML_TYPE_Q3_K, ref_q3_K)
REF_Q8A(GGML_TYPE_IQ4_NL, ref_iq4_nl)
#define REF_QF(T, name) \
    static void name(int64_t n, const void *w, const void *a, size_t s, int nx, float *o) { dotf_ref(T, n, w, a, s, nx, o); }
REF_QF(GGML_TYPE_Q4_0, reff_q4_0)
REF_QF(GGML_TYPE_Q4_1, reff_q4_1)
REF_QF(GGML_TYPE_Q5_0, reff_q5_0)
REF_QF(GGML_TYPE_Q5_1, reff_q5_1)
REF_QF(GGML_TYPE_Q8_0, reff_q8_0)
REF_QF(GGML_TYPE_Q4_K, reff_q4_K)
REF_QF(GGML_TYPE_Q5_K, reff_q5_K)
REF_QF(GGML_TYPE_Q6_K, reff_q6_K)
REF_QF(GGML_TYPE_Q3_K, reff_q3_K)
REF_QF(GGML_TYPE_IQ4_NL, reff_iq4_nl)
REF_F(GGML_TYPE_F32, ref_f32)
REF_F(GGML_TYPE_F16, ref_f16)
REF_F(GGML_TYPE_BF16, ref_bf16)

static const kvq_ggml_kernels SCALAR = {
    .name = "scalar",
    .dot = {
        [GGML_TYPE_F32] = ref_f32, [GGML_TYPE_F16] = ref_f16, [GGML_TYPE_BF16] = ref_bf16,
        [GGML_TYPE_Q4_0] = ref_q4_0, [GGML_TYPE_Q4_1] = ref_q4_1, [GGML_TYPE_Q5_0] = ref_q5_0,
        [GGML_TYPE_Q5_1] = ref_q5_1, [GGML_TYPE_Q8_0] = ref_q8_0, [GGML_TYPE_Q4_K] = ref_q4_K,
        [GGML_TYPE_Q5_K] = ref_q5_K, [GGML_TYPE_Q6_K] = ref_q6_K, [GGML_TYPE_Q3_K] = ref_q3_K,
        [GGML_TYPE_IQ4_NL] = ref_iq4_nl,
    },
    .dotf = {
        [GGML_TYPE_Q4_0] = reff_q4_0, [GGML_TYPE_Q4_1] = reff_q4_1, [GGML_TYPE_Q5_0] = reff_q5_0,
        [GGML_TYPE_Q5_1] = reff_q5_1, [GGML_TYPE_Q8_0] = reff_q8_0, [GGML_TYPE_Q4_K] = reff_q4_K,
        [GGML_TYPE_Q5_K] = reff_q5_K, [GGML_TYPE_Q6_K] = reff_q6_K, [GGML_TYPE_Q3_K] = reff_q3_K,
        [GGML_TYPE_IQ4_NL] = reff_iq4_nl,
    },
    .quantize_q8a = kvq_ggml_quantize_q8a_row,
};

const kvq_ggml_kernels *kvq_ggml_kernels_scalar(void) { return &SCALAR; }

const kvq_ggml_kernels *kvq_ggml_kernels_for(kvq_isa isa) {
    kvq_isa have = kvq_cpu_isa();
    if (isa == KVQ_ISA_BEST) {
        if (have >= KVQ_ISA_AVX512 && kvq_cpu_has_avx512vnni()) return kvq_ggml_kernels_avx512vnni_table();
        if (have >= KVQ_ISA_AVX2) return kvq_ggml_kernels_avx2_table();
        return &SCALAR;
    }
    switch (isa) {
    case KVQ_ISA_SCALAR: return &SCALAR;
    case KVQ_ISA_AVX2: return have >= KVQ_ISA_AVX2 ? kvq_ggml_kernels_avx2_table() : NULL;
    case KVQ_ISA_AVX512:
        return have >= KVQ_ISA_AVX512 && kvq_cpu_has_avx512vnni() ? kvq_ggml_kernels_avx512vnni_table() : NULL;
    default: return NULL;
    }
}

int kvq_ggml_kernels_all(const kvq_ggml_kernels **out, int max) {
    int n = 0;
    if (n < max) out[n++] = &SCALAR;
    kvq_isa have = kvq_cpu_isa();
    if (have >= KVQ_ISA_AVX2 && n < max) out[n++] = kvq_ggml_kernels_avx2_table();
    if (have >= KVQ_ISA_AVX512 && kvq_cpu_has_avx512vnni()) {
        if (n < max) out[n++] = kvq_ggml_kernels_avx512vnni256_table();
        if (n < max) out[n++] = kvq_ggml_kernels_avx512vnni_table();
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Matrix products                                                          */
/* ------------------------------------------------------------------------ */
void kvq_ggml_acts_init(kvq_ggml_acts *a, const float *x, int64_t ntok, int64_t cols, void *q8) {
    a->x = x;
    a->ntok = ntok;
    a->cols = cols;
    a->q8 = q8;
    a->q8_ready = 0;
    a->f32_only = 0;
}

#define MM_MAX 4
/* Weight rows per task: small enough to balance threads, large enough
 * that a task's weight rows stay in L1/L2 while all activation rows pass. */
#define ROWS_PER_TASK_MIN 8
/* Weight bytes of one task when several activation tiles reuse them. */
#define TASK_WEIGHT_BYTES (96 * 1024)
/* Fewest activation rows for which the row-block kernels (dotr) beat the
 * single-row ones: decode (1 row) keeps the single-row kernels. */
#define DOTR_MIN_NX 2

typedef struct {
    const kvq_ggml_kernels *k;
    const kvq_ggml_matrix *W[MM_MAX];
    float *Y[MM_MAX];
    int64_t ldy[MM_MAX];
    int64_t row0[MM_MAX + 1]; /* prefix sums of rows */
    int nm;
    const kvq_ggml_acts *A;
    int64_t rows_per_task;
} mm_job;

typedef struct { const kvq_ggml_acts *A; const kvq_ggml_kernels *k; int64_t per_task; } quant_job;

static void quant_task(void *arg, int task, int thread) {
    (void)thread;
    const quant_job *j = arg;
    size_t rb = kvq_ggml_q8a_row_bytes(j->A->cols);
    int64_t t0 = (int64_t)task * j->per_task, t1 = t0 + j->per_task;
    if (t1 > j->A->ntok) t1 = j->A->ntok;
    for (int64_t t = t0; t < t1; t++)
        j->k->quantize_q8a(j->A->x + t * j->A->cols, j->A->cols, (uint8_t *)j->A->q8 + (size_t)t * rb);
}

static void mm_task(void *arg, int task, int thread) {
    (void)thread;
    const mm_job *j = arg;
    int64_t g0 = (int64_t)task * j->rows_per_task, g1 = g0 + j->rows_per_task;
    if (g1 > j->row0[j->nm]) g1 = j->row0[j->nm];
    const kvq_ggml_acts *A = j->A;
    for (int m = 0; m < j->nm; m++) {
        int64_t r0 = g0 > j->row0[m] ? g0 : j->row0[m];
        int64_t r1 = g1 < j->row0[m + 1] ? g1 : j->row0[m + 1];
        if (r0 >= r1) continue;
        const kvq_ggml_matrix *W = j->W[m];
        kvq_ggml_dot_fn dot = j->k->dot[W->type];
        const void *act;
        size_t stride;
        r0 -= j->row0[m];
        r1 -= j->row0[m];
        float *Y = j->Y[m];
        int64_t ldy = j->ldy[m];
        if (kvq_ggml_type_uses_q8a(W->type) && !A->f32_only) { act = A->q8; stride = kvq_ggml_q8a_row_bytes(A->cols); }
        else {
            act = A->x;
            stride = (size_t)A->cols * sizeof(float);
            if (A->f32_only && kvq_ggml_type_uses_q8a(W->type)) dot = j->k->dotf[W->type];
        }
        /* activation tiles outer, weight rows inner: the task's weight rows
         * are reused from cache for every tile */
        kvq_ggml_dotr_fn dotr = act == A->q8 && A->ntok >= DOTR_MIN_NX ? j->k->dotr[W->type] : NULL;
        int64_t rb_end = r0;
        if (dotr) { /* whole 8-row blocks, activation tiles of up to GGML_MAX_NXR rows */
            rb_end = r0 + (r1 - r0) / GGML_ROWS * GGML_ROWS;
            for (int64_t t = 0; t < A->ntok && rb_end > r0; t += GGML_MAX_NXR) {
                int nx = (int)(A->ntok - t < GGML_MAX_NXR ? A->ntok - t : GGML_MAX_NXR);
                const uint8_t *at = (const uint8_t *)act + (size_t)t * stride;
                for (int64_t r = r0; r < rb_end; r += GGML_ROWS) {
                    float o[GGML_ROWS * GGML_MAX_NXR];
                    dotr(W->cols, (const uint8_t *)W->data + (size_t)r * W->row_bytes, W->row_bytes, at, stride, nx, o);
                    for (int k = 0; k < GGML_ROWS; k++)
                        for (int x = 0; x < nx; x++) Y[(t + x) * ldy + r + k] = o[k * nx + x];
                }
            }
        }
        /* the other rows one by one, activation tiles of up to GGML_MAX_NX rows */
        for (int64_t t = 0; t < A->ntok && rb_end < r1; t += GGML_MAX_NX) {
            int nx = (int)(A->ntok - t < GGML_MAX_NX ? A->ntok - t : GGML_MAX_NX);
            const uint8_t *at = (const uint8_t *)act + (size_t)t * stride;
            int64_t r = rb_end;
            for (; r < r1; r++) {
                float o[GGML_MAX_NX];
                dot(W->cols, (const uint8_t *)W->data + (size_t)r * W->row_bytes, at, stride, nx, o);
                for (int x = 0; x < nx; x++) Y[(t + x) * ldy + r] = o[x];
            }
        }
    }
}

int kvq_ggml_matmul_multi(const kvq_ggml_kernels *k, kvq_pool *pool, const kvq_ggml_matrix *const *W, int nm, kvq_ggml_acts *A,
                      float *const *Y, const int64_t *ldy) {
    if (!k || !W || !A || !Y || !ldy) return KVQ_ERR_NULL;
    if (nm < 1 || nm > MM_MAX || A->ntok < 1) return KVQ_ERR_INVALID_ARG;
    mm_job j;
    memset(&j, 0, sizeof j);
    j.k = k;
    j.nm = nm;
    j.A = A;
    int need_q8 = 0;
    for (int m = 0; m < nm; m++) {
        if (!W[m] || !Y[m]) return KVQ_ERR_NULL;
        if (W[m]->cols != A->cols || ldy[m] < W[m]->rows) return KVQ_ERR_INVALID_ARG;
        if (!kvq_ggml_type_supported(W[m]->type) || !k->dot[W[m]->type]) return KVQ_ERR_UNSUPPORTED;
        if (kvq_ggml_type_uses_q8a(W[m]->type)) {
            if (A->cols % 32) return KVQ_ERR_INVALID_ARG;
            if (A->f32_only && !k->dotf[W[m]->type]) return KVQ_ERR_UNSUPPORTED;
            need_q8 = !A->f32_only;
        }
        j.W[m] = W[m];
        j.Y[m] = Y[m];
        j.ldy[m] = ldy[m];
        j.row0[m + 1] = j.row0[m] + W[m]->rows;
    }
    int nth = kvq_pool_size(pool);
    if (need_q8 && !A->q8_ready) {
        if (!A->q8) return KVQ_ERR_NULL;
        quant_job q = {A, k, (A->ntok + nth - 1) / nth};
        int nt = (int)((A->ntok + q.per_task - 1) / q.per_task);
        int rc = kvq_pool_run(pool, quant_task, &q, nt);
        if (rc) return rc;
        A->q8_ready = 1;
    }
    int64_t total = j.row0[nm];
    /* about 4 tasks per thread for balance; and a task's weight rows must
     * stay in L2 while every activation tile passes over them (else each
     * tile streams the whole matrix from memory again) */
    int64_t per = (total + 4 * nth - 1) / (4 * nth);
    int64_t fit = (int64_t)(TASK_WEIGHT_BYTES / (W[0]->row_bytes ? W[0]->row_bytes : 1));
    if (A->ntok > GGML_MAX_NX && per > fit) per = fit;
    if (per < ROWS_PER_TASK_MIN) per = ROWS_PER_TASK_MIN;
    per = (per + GGML_ROWS - 1) / GGML_ROWS * GGML_ROWS; /* whole row blocks */
    j.rows_per_task = per;
    int ntasks = (int)((total + per - 1) / per);
    return kvq_pool_run(pool, mm_task, &j, ntasks);
}

int kvq_ggml_matmul(const kvq_ggml_kernels *k, kvq_pool *pool, const kvq_ggml_matrix *W, kvq_ggml_acts *A, float *Y, int64_t ldy) {
    const kvq_ggml_matrix *Ws[1] = {W};
    float *Ys[1] = {Y};
    int64_t l[1] = {ldy};
    return kvq_ggml_matmul_multi(k, pool, Ws, 1, A, Ys, l);
}
