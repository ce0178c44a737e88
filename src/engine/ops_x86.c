/* AVX2 gated activations with a vector exp (see ops.h). */
#include "ops.h"

#include <math.h>

#include "cpu.h"

#if KVQ_X86
#include <immintrin.h>

/* e^x for x in [-87, 88]: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * Taylor polynomial (error < 2e-7 relative), 2^n through the exponent bits. */
KVQ_TARGET_AVX2 static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* a = a / (1 + e^(-c*z)) * b with z = a (silu, c = 1) or the GELU argument. */
KVQ_TARGET_AVX2 static void silu_mul_avx2(float *a, const float *b, int n) {
    int i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        __m256 d = _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, x)));
        _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_loadu_ps(b + i)));
    }
    for (; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3) */
KVQ_TARGET_AVX2 static void gelu_mul_avx2(float *a, const float *b, int n) {
    int i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 k2 = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(a + i);
        __m256 x2 = _mm256_mul_ps(x, x);
        __m256 u = _mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, x2), x, x));
        __m256 d = _mm256_add_ps(one, exp8(u));
        _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(x, d), _mm256_loadu_ps(b + i)));
    }
    const float k = 0.7978845608028654f;
    for (; i < n; i++) {
        float x = a[i];
        a[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * b[i];
    }
}

static const kvq_ops AVX2 = {"avx2", silu_mul_avx2, gelu_mul_avx2};
const kvq_ops *kvq_ops_avx2_table(void) { return &AVX2; }
#else
const kvq_ops *kvq_ops_avx2_table(void) { return NULL; }
#endif
