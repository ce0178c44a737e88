/*
 * AVX2 / AVX-512 online softmax. exp(x) for x <= 0: x = k ln2 + r with
 * |r| <= ln2/2 (ln2 split in two constants so that r is exact), e^r by a
 * degree-6 polynomial (Cephes expf coefficients, relative error ~1e-7),
 * times 2^k. Inputs below -87 (including -inf, the mask) give exactly 0;
 * such terms are below 2^-125 relative to the row's largest weight (1).
 */
#include <math.h>

#include "cache_internal.h"
#include "simd_util.h"

#if KVQ_X86

#define EXP_LOW -87.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

KVQ_TARGET_AVX512 static inline __m512 exp16(__m512 x) {
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LOW), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(EXP_LOW));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(LN2_LO), r);
    __m512 p = _mm512_set1_ps(P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, k));
}

KVQ_TARGET_AVX2 static inline __m256 exp8(__m256 x) {
    __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LOW), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LOW));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^k for k in [-126, 0]: exponent field k + 127 */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), live);
}

KVQ_TARGET_AVX512 void vexp_avx512(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, mk, exp16(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mk, x + i)));
    }
}

KVQ_TARGET_AVX2 void vexp_avx2(const float *x, float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8];
        for (size_t j = 0; j < 8; j++) t[j] = i + j < n ? x[i + j] : -INFINITY;
        _mm256_storeu_ps(t, exp8(_mm256_loadu_ps(t)));
        for (size_t j = 0; i + j < n; j++) y[i + j] = t[j];
    }
}

KVQ_TARGET_AVX512 float softmax_block_avx512(float *s, size_t n, float *m, float *l) {
    __m512 vm = _mm512_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + i));
    float bm = _mm512_reduce_max_ps(vm);
    for (; i < n; i++) bm = s[i] > bm ? s[i] : bm;
    if (bm == -INFINITY) {
        for (i = 0; i < n; i++) s[i] = 0;
        return 1.0f;
    }
    float mn = bm > *m ? bm : *m;
    float alpha = *m == -INFINITY ? 0.0f : expf(*m - mn);
    __m512 vmn = _mm512_set1_ps(mn), vs = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vmn));
        _mm512_storeu_ps(s + i, e);
        vs = _mm512_add_ps(vs, e);
    }
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), mk, s + i), vmn));
        _mm512_mask_storeu_ps(s + i, mk, e);
        vs = _mm512_add_ps(vs, e);
    }
    *l = *l * alpha + _mm512_reduce_add_ps(vs);
    *m = mn;
    return alpha;
}

KVQ_TARGET_AVX2 float softmax_block_avx2(float *s, size_t n, float *m, float *l) {
    __m256 vm = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + i));
    float t[8];
    _mm256_storeu_ps(t, vm);
    float bm = -INFINITY;
    for (int j = 0; j < 8; j++) bm = t[j] > bm ? t[j] : bm;
    for (; i < n; i++) bm = s[i] > bm ? s[i] : bm;
    if (bm == -INFINITY) {
        for (i = 0; i < n; i++) s[i] = 0;
        return 1.0f;
    }
    float mn = bm > *m ? bm : *m;
    float alpha = *m == -INFINITY ? 0.0f : expf(*m - mn);
    __m256 vmn = _mm256_set1_ps(mn), vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmn));
        _mm256_storeu_ps(s + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    if (i < n) {
        /* the tail through the same polynomial, padded with -inf (exactly 0):
         * an element's weight must not depend on where the block ends, or a
         * query's result would depend on the batch it is evaluated in (a
         * decode row sees n = its position + 1 keys, a prefill row the whole
         * block with the future masked) */
        float t[8];
        for (size_t j = 0; j < 8; j++) t[j] = i + j < n ? s[i + j] : -INFINITY;
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(t), vmn));
        _mm256_storeu_ps(t, e);
        for (size_t j = 0; i + j < n; j++) s[i + j] = t[j];
        vs = _mm256_add_ps(vs, e);
    }
    *l = *l * alpha + hsum_256(vs);
    *m = mn;
    return alpha;
}
#endif
