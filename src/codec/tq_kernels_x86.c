/*
 * x86 kernels over strided codebook indices (layout in codec_internal.h).
 * Indices of 16 (AVX-512) or 8 (AVX2) consecutive coordinates come from one
 * zero-extending load, a shift and a mask per sub-field; centroids from a
 * register permute (<= 16 levels: vpermps; 32: vpermi2ps) or a gather.
 * Layouts whose sub-field blocks are not a multiple of the vector width are
 * unpacked to bytes first (scalar), then looked up the same way.
 * Layouts these kernels do not serve go to the scalar references
 * (tq_kernels.c); tq_dispatch.c picks the kernel per ISA.
 */
#include <math.h>
#include <string.h>

#include "simd_util.h"
#include "tq_kernels.h"
#include "tq_vnni_table.h"

#if KVQ_X86

/* 1 if every sub-field block of (d, b) is a multiple of `lanes` bytes. */
static int direct_ok(int d, int b, int lanes) {
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++)
        if ((d * kvq_strided_width(b, f) / 8) % lanes) return 0;
    return 1;
}


/* Bytes holding the w-bit field of coordinates c0..c0+15 (c0 % 16 == 0), each
 * shifted down to bit 0 (upper bits not yet masked). The sub-field block of S
 * bytes holds coordinate c in byte c % S at bit w * (c / S): with S % 16 == 0
 * one 16-byte load; with S % 8 == 0 two 8-byte halves (each its own shift). */
KVQ_TARGET_AVX2 static inline __m128i field16(const uint8_t *pk, int S, int w, int c0) {
    if (S % 16 == 0) {
        __m128i x = _mm_loadu_si128((const __m128i *)(pk + c0 % S));
        return c0 / S ? _mm_srli_epi16(x, w * (c0 / S)) : x;
    }
    __m128i lo = _mm_loadl_epi64((const __m128i *)(pk + c0 % S));
    __m128i hi = _mm_loadl_epi64((const __m128i *)(pk + (c0 + 8) % S));
    if (c0 / S) lo = _mm_srli_epi16(lo, w * (c0 / S));
    if ((c0 + 8) / S) hi = _mm_srli_epi16(hi, w * ((c0 + 8) / S));
    return _mm_unpacklo_epi64(lo, hi);
}

/* ---------------------------------------------------------------- AVX-512 */
typedef struct {
    int d, b, nlev, direct;
    int w[4]; /* sub-field widths of b, 0-terminated (kvq_strided_width) */
    __m512 c0, c1; /* centroids 0..15, 16..31 */
    const float *cent;
} lut512;

KVQ_TARGET_AVX512 static lut512 lut512_make(const tq_layout *L, const float *cent) {
    lut512 t;
    t.d = L->d;
    t.b = L->b;
    t.nlev = L->cb->n;
    t.cent = cent;
    t.direct = direct_ok(L->d, L->b, 8);
    for (int f = 0; f < 4; f++) t.w[f] = f < 3 ? kvq_strided_width(L->b, f) : 0;
    t.c0 = _mm512_loadu_ps(cent);
    t.c1 = _mm512_loadu_ps(cent + 16);
    return t;
}

/* Indices of coordinates c0..c0+15 of a record's packed bytes `pk`. */
KVQ_TARGET_AVX512 static inline __m512i idx16_direct(const lut512 *t, const uint8_t *pk, int c0) {
    __m512i idx = _mm512_setzero_si512();
    int shift = 0;
    for (int f = 0; t->w[f]; f++) {
        int w = t->w[f], S = t->d * w / 8;
        __m512i x = _mm512_and_si512(_mm512_cvtepu8_epi32(field16(pk, S, w, c0)), _mm512_set1_epi32((1 << w) - 1));
        idx = _mm512_or_si512(idx, _mm512_slli_epi32(x, (unsigned)shift));
        pk += S;
        shift += w;
    }
    return idx;
}

KVQ_TARGET_AVX512 static inline __m512 lookup16(const lut512 *t, __m512i idx) {
    if (t->nlev <= 16) return _mm512_permutexvar_ps(idx, t->c0);
    if (t->nlev <= 32) return _mm512_permutex2var_ps(t->c0, idx, t->c1);
    return _mm512_i32gather_ps(idx, t->cent, 4);
}

/* Centroid values of coordinates c0..c0+15. ub: unpacked bytes or NULL. */
KVQ_TARGET_AVX512 static inline __m512 vals16(const lut512 *t, const uint8_t *pk, const uint8_t *ub, int c0) {
    __m512i idx = ub ? _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ub + c0))) : idx16_direct(t, pk, c0);
    return lookup16(t, idx);
}

KVQ_TARGET_AVX512 static void score512_generic(const tq_layout *L, const float *qp, size_t qstride, size_t nq,
                                       const uint8_t *codes, size_t n, float *scores) {
    if (L->d % 16) { tq_score_avx2(L, qp, qstride, nq, codes, n, scores); return; }
    lut512 t = lut512_make(L, L->scent);
    uint8_t ubuf[KVQ_DIM_MAX];
    const int d = L->d;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q0 = qp + j0 * qstride;
        const float *q1 = j0 + 1 < nq ? q0 + qstride : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qstride : q0;
        const float *q3 = j0 + 3 < nq ? q0 + 3 * qstride : q0;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * L->stride, *pk = rec + L->idx_off, *ub = NULL;
            if (!t.direct) { strided_unpack(pk, d, L->b, ubuf); ub = ubuf; }
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 16) {
                __m512 v = vals16(&t, pk, ub, c);
                a0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + c), a0);
                a1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q1 + c), a1);
                a2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q2 + c), a2);
                a3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q3 + c), a3);
            }
            float s[4];
            _mm_storeu_ps(s, _mm_mul_ps(hsum4_512(a0, a1, a2, a3), _mm_set1_ps(tq_scale(L, rec))));
            for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = s[j - j0];
        }
    }
}

KVQ_TARGET_AVX512 static void accum512_generic(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes,
                                       size_t n, float *acc) {
    if (L->d % 16 || !direct_ok(L->d, L->b, 8)) { tq_accum_ref(L, w, nq, codes, n, acc); return; }
    lut512 t = lut512_make(L, L->cb->c);
    const int d = L->d;
    for (size_t j = 0; j < nq; j++) {
        const float *wj = w + j * n;
        float *aj = acc + j * (size_t)d;
        int c = 0;
        for (; c + 64 <= d; c += 64) {
            __m512 a0 = _mm512_loadu_ps(aj + c), a1 = _mm512_loadu_ps(aj + c + 16);
            __m512 a2 = _mm512_loadu_ps(aj + c + 32), a3 = _mm512_loadu_ps(aj + c + 48);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * L->stride, *pk = rec + L->idx_off;
                __m512 wg = _mm512_set1_ps(wj[i] * tq_scale(L, rec));
                a0 = _mm512_fmadd_ps(wg, lookup16(&t, idx16_direct(&t, pk, c)), a0);
                a1 = _mm512_fmadd_ps(wg, lookup16(&t, idx16_direct(&t, pk, c + 16)), a1);
                a2 = _mm512_fmadd_ps(wg, lookup16(&t, idx16_direct(&t, pk, c + 32)), a2);
                a3 = _mm512_fmadd_ps(wg, lookup16(&t, idx16_direct(&t, pk, c + 48)), a3);
            }
            _mm512_storeu_ps(aj + c, a0);
            _mm512_storeu_ps(aj + c + 16, a1);
            _mm512_storeu_ps(aj + c + 32, a2);
            _mm512_storeu_ps(aj + c + 48, a3);
        }
        for (; c < d; c += 16) {
            __m512 a0 = _mm512_loadu_ps(aj + c);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * L->stride;
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(wj[i] * tq_scale(L, rec)), lookup16(&t, idx16_direct(&t, rec + L->idx_off, c)), a0);
            }
            _mm512_storeu_ps(aj + c, a0);
        }
    }
}


/* ---- specialised kernels: constant d and b, everything unrolled --------- */
#define AI static inline __attribute__((always_inline))

KVQ_TARGET_AVX512 AI float scale_f16c(const tq_layout *L, const uint8_t *rec) {
    if (L->scale32) { float s; memcpy(&s, rec + L->scale_off, 4); return s; }
    uint16_t h;
    memcpy(&h, rec + L->scale_off, 2);
    return _cvtsh_ss(h);
}

/* Indices of coordinates c0..c0+15 (constant d, b: the sub-field loop and the
 * table reads fold away; loads shared by several groups are merged). */
KVQ_TARGET_AVX512 AI __m512i idx16_c(const uint8_t *pk, const int d, const int b, const int c0) {
    __m512i idx = _mm512_setzero_si512();
    int shift = 0;
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++) {
        const int w = kvq_strided_width(b, f), S = d * w / 8;
        /* field16 shifts bytes in 16-bit lanes: the upper bits of each byte
         * then come from its neighbour, so the mask is always needed */
        __m512i x = _mm512_and_si512(_mm512_cvtepu8_epi32(field16(pk, S, w, c0)), _mm512_set1_epi32((1 << w) - 1));
        idx = shift ? _mm512_or_si512(idx, _mm512_slli_epi32(x, (unsigned)shift)) : x;
        pk += S;
        shift += w;
    }
    return idx;
}

KVQ_TARGET_AVX512 AI __m512 lut16_c(__m512i idx, __m512 c0, __m512 c1, const int b) {
    return b <= 4 ? _mm512_permutexvar_ps(idx, c0) : _mm512_permutex2var_ps(c0, idx, c1);
}

KVQ_TARGET_AVX512 AI void score_body(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes,
                                     size_t n, float *scores, const int d, const int b) {
    const __m512 c0 = _mm512_loadu_ps(L->scent), c1 = _mm512_loadu_ps(L->scent + 16);
    const size_t stride = L->stride, io = L->idx_off;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q0 = qp + j0 * qs;
        const float *q1 = j0 + 1 < nq ? q0 + qs : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qs : q0;
        const float *q3 = j0 + 3 < nq ? q0 + 3 * qs : q0;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * stride, *pk = rec + io;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 16) {
                __m512 v = lut16_c(idx16_c(pk, d, b, c), c0, c1, b);
                a0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q0 + c), a0);
                a1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q1 + c), a1);
                a2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q2 + c), a2);
                a3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(q3 + c), a3);
            }
            float s[4];
            _mm_storeu_ps(s, _mm_mul_ps(hsum4_512(a0, a1, a2, a3), _mm_set1_ps(scale_f16c(L, rec))));
            size_t m = nq - j0 < 4 ? nq - j0 : 4;
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] = s[j];
        }
    }
}

/* acc rows += w * scale * centroids: 64 coordinates x up to 4 queries held in
 * 16 registers while the records stream by; each record is decoded once per
 * 64-coordinate chunk and query group. */
KVQ_TARGET_AVX512 AI void accum_body(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                     float *acc, const int d, const int b) {
    const __m512 c0 = _mm512_loadu_ps(L->cb->c), c1 = _mm512_loadu_ps(L->cb->c + 16);
    const size_t stride = L->stride, io = L->idx_off;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *w0 = w + j0 * n, *w1 = m > 1 ? w0 + n : w0, *w2 = m > 2 ? w0 + 2 * n : w0, *w3 = m > 3 ? w0 + 3 * n : w0;
        float *r0 = acc + j0 * (size_t)d;
        for (int c = 0; c < d; c += 64) {
            const int nv = d - c >= 64 ? 4 : (d - c) / 16;
            __m512 a[4][4];
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 4; k++) a[j][k] = (j < (int)m && k < nv) ? _mm512_loadu_ps(r0 + j * d + c + 16 * k) : _mm512_setzero_ps();
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * stride, *pk = rec + io;
                const float g = scale_f16c(L, rec);
                const __m512 g0 = _mm512_set1_ps(w0[i] * g), g1 = _mm512_set1_ps(w1[i] * g);
                const __m512 g2 = _mm512_set1_ps(w2[i] * g), g3 = _mm512_set1_ps(w3[i] * g);
                for (int k = 0; k < 4; k++) {
                    if (k >= nv) break;
                    __m512 v = lut16_c(idx16_c(pk, d, b, c + 16 * k), c0, c1, b);
                    a[0][k] = _mm512_fmadd_ps(g0, v, a[0][k]);
                    a[1][k] = _mm512_fmadd_ps(g1, v, a[1][k]);
                    a[2][k] = _mm512_fmadd_ps(g2, v, a[2][k]);
                    a[3][k] = _mm512_fmadd_ps(g3, v, a[3][k]);
                }
            }
            for (int j = 0; j < (int)m; j++)
                for (int k = 0; k < nv; k++) _mm512_storeu_ps(r0 + j * d + c + 16 * k, a[j][k]);
        }
    }
}

#define TQ_SPECIALISED(X) X(64, 1) X(64, 2) X(64, 3) X(64, 4) X(64, 5) X(128, 1) X(128, 2) X(128, 3) X(128, 4) X(128, 5) \
    X(256, 1) X(256, 2) X(256, 3) X(256, 4) X(256, 5) X(512, 2) X(512, 4)

#define DEF_FAST(D, B)                                                                                     \
    KVQ_TARGET_AVX512 static void score512_##D##_##B(const tq_layout *L, const float *qp, size_t qs, size_t nq, \
                                                     const uint8_t *codes, size_t n, float *scores) {      \
        score_body(L, qp, qs, nq, codes, n, scores, D, B);                                                 \
    }                                                                                                      \
    KVQ_TARGET_AVX512 static void accum512_##D##_##B(const tq_layout *L, const float *w, size_t nq,         \
                                                     const uint8_t *codes, size_t n, float *acc) {         \
        accum_body(L, w, nq, codes, n, acc, D, B);                                                         \
    }
TQ_SPECIALISED(DEF_FAST)

KVQ_TARGET_AVX512 void tq_score_avx512(const tq_layout *L, const float *qp, size_t qstride, size_t nq,
                                       const uint8_t *codes, size_t n, float *scores) {
    /* specialised kernels read indices straight from the packed bytes */
#define CASE_S(D, B) if (L->d == D && L->b == B) { score512_##D##_##B(L, qp, qstride, nq, codes, n, scores); return; }
    if (direct_ok(L->d, L->b, 8)) { TQ_SPECIALISED(CASE_S) }
#undef CASE_S
    score512_generic(L, qp, qstride, nq, codes, n, scores);
}

KVQ_TARGET_AVX512 void tq_accum_avx512(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes,
                                       size_t n, float *acc) {
#define CASE_A(D, B) if (L->d == D && L->b == B) { accum512_##D##_##B(L, w, nq, codes, n, acc); return; }
    if (direct_ok(L->d, L->b, 8)) { TQ_SPECIALISED(CASE_A) }
#undef CASE_A
    accum512_generic(L, w, nq, codes, n, acc);
}

/* Branch-free binary search over the boundaries with vpermps (<= 16 levels):
 * idx += step where x > t[idx + step - 1], for step = n/2 .. 1. */
KVQ_TARGET_AVX512 void tq_quantize_avx512(const kvq_codebook *cb, const float *y, int d, int scale_norm,
                                          uint8_t *idx, float *scale) {
    if (cb->n > 16 || d % 16) { tq_quantize_ref(cb, y, d, scale_norm, idx, scale); return; }
    __m512 ss = _mm512_setzero_ps();
    for (int c = 0; c < d; c += 16) {
        __m512 v = _mm512_loadu_ps(y + c);
        ss = _mm512_fmadd_ps(v, v, ss);
    }
    float nrm2 = _mm512_reduce_add_ps(ss);
    if (!(nrm2 > 0) || !isfinite(nrm2)) { tq_quantize_ref(cb, y, d, scale_norm, idx, scale); return; }
    float nrm = sqrtf(nrm2);
    __m512 s = _mm512_set1_ps(sqrtf((float)d) / nrm);
    __m512 tb = _mm512_loadu_ps(cb->t), cv = _mm512_loadu_ps(cb->c);
    __m512 yc = _mm512_setzero_ps(), cc = _mm512_setzero_ps();
    for (int c = 0; c < d; c += 16) {
        __m512 yv = _mm512_loadu_ps(y + c), x = _mm512_mul_ps(yv, s);
        __m512i id = _mm512_setzero_si512();
        for (int step = cb->n >> 1; step > 0; step >>= 1) {
            __m512i probe = _mm512_add_epi32(id, _mm512_set1_epi32(step - 1));
            __mmask16 gt = _mm512_cmp_ps_mask(x, _mm512_permutexvar_ps(probe, tb), _CMP_GT_OQ);
            id = _mm512_mask_add_epi32(id, gt, id, _mm512_set1_epi32(step));
        }
        __m512 cval = _mm512_permutexvar_ps(id, cv);
        yc = _mm512_fmadd_ps(yv, cval, yc);
        cc = _mm512_fmadd_ps(cval, cval, cc);
        _mm_storeu_si128((__m128i *)(idx + c), _mm512_cvtepi32_epi8(id));
    }
    float fyc = _mm512_reduce_add_ps(yc), fcc = _mm512_reduce_add_ps(cc);
    *scale = scale_norm || fcc == 0 ? nrm / sqrtf((float)d) : fyc / fcc;
}

/* ------------------------------------------------------------------- AVX2 */
typedef struct {
    int d, b, nlev, direct;
    int w[4]; /* sub-field widths of b, 0-terminated (kvq_strided_width) */
    __m256 c0, c1;
    const float *cent;
} lut256;

KVQ_TARGET_AVX2 static lut256 lut256_make(const tq_layout *L, const float *cent) {
    lut256 t;
    t.d = L->d;
    t.b = L->b;
    t.nlev = L->cb->n;
    t.cent = cent;
    t.direct = direct_ok(L->d, L->b, 8);
    for (int f = 0; f < 4; f++) t.w[f] = f < 3 ? kvq_strided_width(L->b, f) : 0;
    t.c0 = _mm256_loadu_ps(cent);
    t.c1 = _mm256_loadu_ps(cent + 8);
    return t;
}

KVQ_TARGET_AVX2 static inline __m256i idx8_direct(const lut256 *t, const uint8_t *pk, int c0) {
    __m256i idx = _mm256_setzero_si256();
    int shift = 0;
    for (int f = 0; t->w[f]; f++) {
        int w = t->w[f], S = t->d * w / 8;
        __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pk + c0 % S)));
        x = _mm256_and_si256(_mm256_srli_epi32(x, w * (c0 / S)), _mm256_set1_epi32((1 << w) - 1));
        idx = _mm256_or_si256(idx, _mm256_slli_epi32(x, shift));
        pk += S;
        shift += w;
    }
    return idx;
}

KVQ_TARGET_AVX2 static inline __m256 lookup8(const lut256 *t, __m256i idx) {
    if (t->nlev <= 8) return _mm256_permutevar8x32_ps(t->c0, idx);
    if (t->nlev <= 16) {
        __m256 lo = _mm256_permutevar8x32_ps(t->c0, idx), hi = _mm256_permutevar8x32_ps(t->c1, idx);
        return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return _mm256_i32gather_ps(t->cent, idx, 4);
}

KVQ_TARGET_AVX2 static inline __m256 vals8(const lut256 *t, const uint8_t *pk, const uint8_t *ub, int c0) {
    __m256i idx = ub ? _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ub + c0))) : idx8_direct(t, pk, c0);
    return lookup8(t, idx);
}

KVQ_TARGET_AVX2 static void score256_generic(const tq_layout *L, const float *qp, size_t qstride, size_t nq,
                                   const uint8_t *codes, size_t n, float *scores) {
    lut256 t = lut256_make(L, L->scent);
    uint8_t ubuf[KVQ_DIM_MAX];
    const int d = L->d;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q0 = qp + j0 * qstride;
        const float *q1 = j0 + 1 < nq ? q0 + qstride : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qstride : q0;
        const float *q3 = j0 + 3 < nq ? q0 + 3 * qstride : q0;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * L->stride, *pk = rec + L->idx_off, *ub = NULL;
            if (!t.direct) { strided_unpack(pk, d, L->b, ubuf); ub = ubuf; }
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 8) {
                __m256 v = vals8(&t, pk, ub, c);
                a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q0 + c), a0);
                a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q1 + c), a1);
                a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q2 + c), a2);
                a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q3 + c), a3);
            }
            float s[4];
            _mm_storeu_ps(s, _mm_mul_ps(hsum4_256(a0, a1, a2, a3), _mm_set1_ps(tq_scale(L, rec))));
            for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = s[j - j0];
        }
    }
}

KVQ_TARGET_AVX2 static void accum256_generic(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes,
                                   size_t n, float *acc) {
    if (!direct_ok(L->d, L->b, 8)) { tq_accum_ref(L, w, nq, codes, n, acc); return; }
    lut256 t = lut256_make(L, L->cb->c);
    const int d = L->d;
    for (size_t j = 0; j < nq; j++) {
        const float *wj = w + j * n;
        float *aj = acc + j * (size_t)d;
        int c = 0;
        for (; c + 32 <= d; c += 32) {
            __m256 a0 = _mm256_loadu_ps(aj + c), a1 = _mm256_loadu_ps(aj + c + 8);
            __m256 a2 = _mm256_loadu_ps(aj + c + 16), a3 = _mm256_loadu_ps(aj + c + 24);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * L->stride, *pk = rec + L->idx_off;
                __m256 wg = _mm256_set1_ps(wj[i] * tq_scale(L, rec));
                a0 = _mm256_fmadd_ps(wg, lookup8(&t, idx8_direct(&t, pk, c)), a0);
                a1 = _mm256_fmadd_ps(wg, lookup8(&t, idx8_direct(&t, pk, c + 8)), a1);
                a2 = _mm256_fmadd_ps(wg, lookup8(&t, idx8_direct(&t, pk, c + 16)), a2);
                a3 = _mm256_fmadd_ps(wg, lookup8(&t, idx8_direct(&t, pk, c + 24)), a3);
            }
            _mm256_storeu_ps(aj + c, a0);
            _mm256_storeu_ps(aj + c + 8, a1);
            _mm256_storeu_ps(aj + c + 16, a2);
            _mm256_storeu_ps(aj + c + 24, a3);
        }
        for (; c < d; c += 8) {
            __m256 a0 = _mm256_loadu_ps(aj + c);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * L->stride;
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(wj[i] * tq_scale(L, rec)), lookup8(&t, idx8_direct(&t, rec + L->idx_off, c)), a0);
            }
            _mm256_storeu_ps(aj + c, a0);
        }
    }
}


/* ---- AVX2 kernels specialised per (d, b), as for AVX-512 ----------------- */
KVQ_TARGET_AVX2 AI float scale_f16c_256(const tq_layout *L, const uint8_t *rec) {
    if (L->scale32) { float s; memcpy(&s, rec + L->scale_off, 4); return s; }
    uint16_t h;
    memcpy(&h, rec + L->scale_off, 2);
    return _cvtsh_ss(h);
}

KVQ_TARGET_AVX2 AI __m256i idx8_c(const uint8_t *pk, const int d, const int b, const int c0) {
    __m256i idx = _mm256_setzero_si256();
    int shift = 0;
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++) {
        const int w = kvq_strided_width(b, f), S = d * w / 8;
        __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pk + c0 % S)));
        if (c0 / S > 0) x = _mm256_srli_epi32(x, w * (c0 / S));
        if (w * (c0 / S) + w < 8) x = _mm256_and_si256(x, _mm256_set1_epi32((1 << w) - 1));
        idx = shift ? _mm256_or_si256(idx, _mm256_slli_epi32(x, shift)) : x;
        pk += S;
        shift += w;
    }
    return idx;
}

KVQ_TARGET_AVX2 AI __m256 lut8_c(__m256i idx, __m256 c0, __m256 c1, const int b) {
    if (b <= 3) return _mm256_permutevar8x32_ps(c0, idx);
    __m256 lo = _mm256_permutevar8x32_ps(c0, idx), hi = _mm256_permutevar8x32_ps(c1, idx);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

KVQ_TARGET_AVX2 AI void score_body256(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes,
                                      size_t n, float *scores, const int d, const int b) {
    const __m256 c0 = _mm256_loadu_ps(L->scent), c1 = _mm256_loadu_ps(L->scent + 8);
    const size_t stride = L->stride, io = L->idx_off;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q0 = qp + j0 * qs;
        const float *q1 = j0 + 1 < nq ? q0 + qs : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qs : q0;
        const float *q3 = j0 + 3 < nq ? q0 + 3 * qs : q0;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * stride, *pk = rec + io;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 8) {
                __m256 v = lut8_c(idx8_c(pk, d, b, c), c0, c1, b);
                a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q0 + c), a0);
                a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q1 + c), a1);
                a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q2 + c), a2);
                a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q3 + c), a3);
            }
            float s[4];
            _mm_storeu_ps(s, _mm_mul_ps(hsum4_256(a0, a1, a2, a3), _mm_set1_ps(scale_f16c_256(L, rec))));
            size_t m = nq - j0 < 4 ? nq - j0 : 4;
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] = s[j];
        }
    }
}

KVQ_TARGET_AVX2 AI void accum_body256(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                      float *acc, const int d, const int b) {
    const __m256 c0 = _mm256_loadu_ps(L->cb->c), c1 = _mm256_loadu_ps(L->cb->c + 8);
    const size_t stride = L->stride, io = L->idx_off;
    for (size_t j0 = 0; j0 < nq; j0 += 2) {
        const size_t m = nq - j0 < 2 ? nq - j0 : 2;
        const float *w0 = w + j0 * n, *w1 = m > 1 ? w0 + n : w0;
        float *r0 = acc + j0 * (size_t)d;
        for (int c = 0; c < d; c += 32) {
            const int nv = d - c >= 32 ? 4 : (d - c) / 8;
            __m256 a[2][4];
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 4; k++) a[j][k] = (j < (int)m && k < nv) ? _mm256_loadu_ps(r0 + j * d + c + 8 * k) : _mm256_setzero_ps();
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * stride, *pk = rec + io;
                const float g = scale_f16c_256(L, rec);
                const __m256 g0 = _mm256_set1_ps(w0[i] * g), g1 = _mm256_set1_ps(w1[i] * g);
                for (int k = 0; k < 4; k++) {
                    if (k >= nv) break;
                    __m256 v = lut8_c(idx8_c(pk, d, b, c + 8 * k), c0, c1, b);
                    a[0][k] = _mm256_fmadd_ps(g0, v, a[0][k]);
                    a[1][k] = _mm256_fmadd_ps(g1, v, a[1][k]);
                }
            }
            for (int j = 0; j < (int)m; j++)
                for (int k = 0; k < nv; k++) _mm256_storeu_ps(r0 + j * d + c + 8 * k, a[j][k]);
        }
    }
}

#define TQ_SPECIALISED_256(X) X(64, 2) X(64, 4) X(128, 1) X(128, 2) X(128, 3) X(128, 4) X(256, 2) X(256, 3) X(256, 4)

#define DEF_FAST_256(D, B)                                                                                 \
    KVQ_TARGET_AVX2 static void score256_##D##_##B(const tq_layout *L, const float *qp, size_t qs, size_t nq, \
                                                   const uint8_t *codes, size_t n, float *scores) {        \
        score_body256(L, qp, qs, nq, codes, n, scores, D, B);                                              \
    }                                                                                                      \
    KVQ_TARGET_AVX2 static void accum256_##D##_##B(const tq_layout *L, const float *w, size_t nq,          \
                                                   const uint8_t *codes, size_t n, float *acc) {           \
        accum_body256(L, w, nq, codes, n, acc, D, B);                                                      \
    }
TQ_SPECIALISED_256(DEF_FAST_256)

KVQ_TARGET_AVX2 void tq_score_avx2(const tq_layout *L, const float *qp, size_t qstride, size_t nq,
                                   const uint8_t *codes, size_t n, float *scores) {
#define CASE_S2(D, B) if (L->d == D && L->b == B) { score256_##D##_##B(L, qp, qstride, nq, codes, n, scores); return; }
    if (direct_ok(L->d, L->b, 8)) { TQ_SPECIALISED_256(CASE_S2) }
#undef CASE_S2
    score256_generic(L, qp, qstride, nq, codes, n, scores);
}

KVQ_TARGET_AVX2 void tq_accum_avx2(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes,
                                   size_t n, float *acc) {
#define CASE_A2(D, B) if (L->d == D && L->b == B) { accum256_##D##_##B(L, w, nq, codes, n, acc); return; }
    if (direct_ok(L->d, L->b, 8)) { TQ_SPECIALISED_256(CASE_A2) }
#undef CASE_A2
    accum256_generic(L, w, nq, codes, n, acc);
}

/* Boundary count (idx = sum_i [x > t_i]) with 8-wide compares, <= 16 levels. */
KVQ_TARGET_AVX2 void tq_quantize_avx2(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx,
                                      float *scale) {
    if (cb->n > 16) { tq_quantize_ref(cb, y, d, scale_norm, idx, scale); return; }
    __m256 ss = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {
        __m256 v = _mm256_loadu_ps(y + c);
        ss = _mm256_fmadd_ps(v, v, ss);
    }
    float nrm2 = hsum_256(ss);
    if (!(nrm2 > 0) || !isfinite(nrm2)) { tq_quantize_ref(cb, y, d, scale_norm, idx, scale); return; }
    float nrm = sqrtf(nrm2);
    __m256 s = _mm256_set1_ps(sqrtf((float)d) / nrm);
    lut256 t;
    t.nlev = cb->n;
    t.cent = cb->c;
    t.c0 = _mm256_loadu_ps(cb->c);
    t.c1 = _mm256_loadu_ps(cb->c + 8);
    __m256 yc = _mm256_setzero_ps(), cc = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {
        __m256 yv = _mm256_loadu_ps(y + c), x = _mm256_mul_ps(yv, s);
        __m256i id = _mm256_setzero_si256();
        for (int k = 0; k < cb->n - 1; k++) /* compare mask is -1 where x > t_k */
            id = _mm256_sub_epi32(id, _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_set1_ps(cb->t[k]), _CMP_GT_OQ)));
        __m256 cval = lookup8(&t, id);
        yc = _mm256_fmadd_ps(yv, cval, yc);
        cc = _mm256_fmadd_ps(cval, cval, cc);
        int32_t tmp[8];
        _mm256_storeu_si256((__m256i *)tmp, id);
        for (int k = 0; k < 8; k++) idx[c + k] = (uint8_t)tmp[k];
    }
    float fyc = hsum_256(yc), fcc = hsum_256(cc);
    *scale = scale_norm || fcc == 0 ? nrm / sqrtf((float)d) : fyc / fcc;
}
#endif

#if KVQ_X86
/* Decode to the rotated domain with the direct lookups. */
KVQ_TARGET_AVX512 int tq_decode_avx512(const tq_layout *L, const uint8_t *rec, float *y) {
    if (L->d % 16 || !direct_ok(L->d, L->b, 8)) return 0;
    lut512 t = lut512_make(L, L->cb->c);
    __m512 g = _mm512_set1_ps(tq_scale(L, rec));
    for (int c = 0; c < L->d; c += 16)
        _mm512_storeu_ps(y + c, _mm512_mul_ps(g, lookup16(&t, idx16_direct(&t, rec + L->idx_off, c))));
    return 1;
}
#endif

#if KVQ_X86
/* The 8-bit query of tq_prepare_query (tq_query8_ref) with AVX2: cvtps2dq
 * rounds to nearest even like lrintf (default rounding mode), max and the
 * integer sum do not depend on the order, so the bytes and floats equal the
 * scalar ones (and 128 libm lrintf calls, ~0.7 us at d = 128, become a few
 * vector ops). */
KVQ_TARGET_AVX2 void tq_query8_avx2(int d, float *qp) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mv = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) mv = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(qp + c), absmask), mv); /* NaN ignored, as fmaxf */
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float m = _mm_cvtss_f32(m4), sq = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f;
    int8_t *q8 = (int8_t *)(qp + 2 * d + 2);
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < d; c += 8) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(qp + c), vinv));
        v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        _mm256_storeu_ps(qp + d + c, _mm256_cvtepi32_ps(v));
        sum = _mm256_add_epi32(sum, v);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(q8 + c), _mm_packs_epi16(w, w));
    }
    int32_t s8[8];
    _mm256_storeu_si256((__m256i *)s8, sum);
    qp[2 * d] = sq;
    qp[2 * d + 1] = (float)(s8[0] + s8[1] + s8[2] + s8[3] + s8[4] + s8[5] + s8[6] + s8[7]);
}
#endif

#if KVQ_X86
/* ---- integer scores: AVX-512 VNNI (vpdpbusd) + VBMI (vpermb) ------------
 * Per 64 coordinates: the index bytes, one vpermb into the 64-byte table of
 * c8 + 128 (unsigned), one vpdpbusd per query against q8 (signed); the +128
 * bias is removed with 128 * sum(q8). Integer sums are exact, so this equals
 * the float kernels bit for bit. */

/* Index bytes of coordinates c0..c0+63 (constant d, b, c0). */
KVQ_TARGET_VNNI AI __m512i idx64_c(const uint8_t *pk, const int d, const int b, const int c0) {
    __m512i idx = _mm512_setzero_si512();
    int shift = 0;
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++) {
        const int w = kvq_strided_width(b, f), S = d * w / 8;
        const __m512i mask = _mm512_set1_epi8((char)((1 << w) - 1));
        __m512i x;
        if (S % 64 == 0) {
            x = _mm512_loadu_si512(pk + c0 % S);
            if (c0 / S) x = _mm512_srli_epi16(x, (unsigned)(w * (c0 / S)));
        } else if (S % 32 == 0) { /* two 32-coordinate halves */
            __m256i h0 = _mm256_loadu_si256((const __m256i *)(pk + c0 % S));
            __m256i h1 = _mm256_loadu_si256((const __m256i *)(pk + (c0 + 32) % S));
            if (c0 / S) h0 = _mm256_srli_epi16(h0, w * (c0 / S));
            if ((c0 + 32) / S) h1 = _mm256_srli_epi16(h1, w * ((c0 + 32) / S));
            x = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
        } else { /* four 16-coordinate pieces (S % 8 == 0 is required) */
            __m128i p[4];
            for (int k = 0; k < 4; k++) p[k] = field16(pk, S, w, c0 + 16 * k);
            x = _mm512_inserti32x4(_mm512_castsi128_si512(p[0]), p[1], 1);
            x = _mm512_inserti32x4(x, p[2], 2);
            x = _mm512_inserti32x4(x, p[3], 3);
        }
        x = _mm512_and_si512(x, mask);
        idx = shift ? _mm512_or_si512(idx, _mm512_and_si512(_mm512_slli_epi16(x, (unsigned)shift),
                                                             _mm512_set1_epi8((char)(((1 << w) - 1) << shift))))
                    : x;
        pk += S;
        shift += w;
    }
    return idx;
}

KVQ_TARGET_VNNI AI void score_vnni_body(const tq_layout *L, const float *qp, size_t qs, size_t nq,
                                        const uint8_t *codes, size_t n, float *scores, const int d, const int b) {
    const __m512i tab = kvq_tq_c8_table(L->cb, 0x80); /* c8 + 128: vpdpbusd's unsigned side */
    const size_t stride = L->stride, io = L->idx_off;
    const float cs = L->cb->cscale;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *qr[4];
        for (size_t j = 0; j < 4; j++) qr[j] = qp + (j0 + (j < m ? j : 0)) * qs;
        const int8_t *q8[4];
        float bias[4], qscale[4];
        for (int j = 0; j < 4; j++) {
            q8[j] = (const int8_t *)(qr[j] + 2 * d + 2);
            bias[j] = 128.0f * qr[j][2 * d + 1];
            qscale[j] = qr[j][2 * d] * cs;
        }
        const __m128 vbias = _mm_loadu_ps(bias);
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * stride, *pk = rec + io;
            __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < d; c += 64) {
                const __m512i v = _mm512_permutexvar_epi8(idx64_c(pk, d, b, c), tab);
                a0 = _mm512_dpbusd_epi32(a0, v, _mm512_loadu_si512(q8[0] + c));
                a1 = _mm512_dpbusd_epi32(a1, v, _mm512_loadu_si512(q8[1] + c));
                a2 = _mm512_dpbusd_epi32(a2, v, _mm512_loadu_si512(q8[2] + c));
                a3 = _mm512_dpbusd_epi32(a3, v, _mm512_loadu_si512(q8[3] + c));
            }
            /* lanes are exact integers < 2^24: the float reduction is exact */
            __m128 isum = _mm_sub_ps(hsum4_512(_mm512_cvtepi32_ps(a0), _mm512_cvtepi32_ps(a1), _mm512_cvtepi32_ps(a2),
                                               _mm512_cvtepi32_ps(a3)),
                                     vbias);
            float s[4];
            _mm_storeu_ps(s, _mm_mul_ps(isum, _mm_set1_ps(scale_f16c(L, rec))));
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] = s[j] * qscale[j];
        }
    }
}

#define TQ_VNNI(X) X(64, 1) X(64, 2) X(64, 3) X(64, 4) X(128, 1) X(128, 2) X(128, 3) X(128, 4) \
    X(256, 1) X(256, 2) X(256, 3) X(256, 4) X(512, 2) X(512, 4)
#define DEF_VNNI(D, B)                                                                                      \
    KVQ_TARGET_VNNI static void score_vnni_##D##_##B(const tq_layout *L, const float *qp, size_t qs, size_t nq, \
                                                     const uint8_t *codes, size_t n, float *scores) {       \
        score_vnni_body(L, qp, qs, nq, codes, n, scores, D, B);                                             \
    }
TQ_VNNI(DEF_VNNI)

int tq_score_vnni(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                  float *scores) {
    if (!L->vnni || !L->cb->snapped || L->d % 64 || !direct_ok(L->d, L->b, 8)) return 0;
#define CASE_V(D, B) if (L->d == D && L->b == B) { score_vnni_##D##_##B(L, qp, qstride, nq, codes, n, scores); return 1; }
    TQ_VNNI(CASE_V)
#undef CASE_V
    return 0;
}
#endif
