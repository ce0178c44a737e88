/*
 * Fused tq encode for x86 (AVX-512): Hadamard rotation, quantization and
 * strided packing in registers. Kept apart from tq_kernels_x86.c (score,
 * accumulate, decode kernels).
 */
#include <math.h>
#include <string.h>

#include "simd_util.h"
#include "tq_kernels.h"

#if KVQ_X86

static const int SUBW[9][3] = {{0}, {1}, {2}, {2, 1}, {4}, {4, 1}, {4, 2}, {4, 2, 1}, {4, 4}};

/* 1 if every sub-field block of (d, b) is a multiple of `lanes` bytes. */
static int direct_ok(int d, int b, int lanes) {
    for (int f = 0; f < 3 && SUBW[b][f]; f++)
        if ((d * SUBW[b][f] / 8) % lanes) return 0;
    return 1;
}

/*
 * Fused tq encode (AVX-512): sign flip, Walsh-Hadamard in registers, norm,
 * branch-free binary-search quantization, least-squares scale and strided
 * packing, one pass over the vector. Returns 0 when the layout is not served
 * (the caller then takes the generic path).
 */
KVQ_TARGET_AVX512 static inline __attribute__((always_inline)) int
encode_fused_body(const kvq_rotation *rot, const kvq_codebook *cb, const int d, const int b, int scale_norm,
                  const float *x, float *scale, uint8_t *packed) {
    const int ng = d / 16;
    __m512 v[d / 16]; /* d is a constant in every instantiation */
    const __m512 inv = _mm512_set1_ps(1.0f / sqrtf((float)d));
#pragma GCC unroll 32
    for (int g = 0; g < ng; g++)
        v[g] = _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), _mm512_loadu_ps(rot->signs + 16 * g)), inv);
    const __m512 sgn1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    const __m512 sgn2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    const __m512 sgn4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    const __m512 sgn8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m512 ss = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int round = 0; round < 2; round++) {
        if (round) /* second randomized round: s2 and 1/sqrt(d) */
#pragma GCC unroll 32
            for (int g = 0; g < ng; g++) v[g] = _mm512_mul_ps(_mm512_mul_ps(v[g], _mm512_loadu_ps(rot->signs + d + 16 * g)), inv);
#pragma GCC unroll 32
        for (int g = 0; g < ng; g++) {
            __m512 t = v[g];
            t = _mm512_fmadd_ps(t, sgn1, _mm512_permute_ps(t, 0xB1));
            t = _mm512_fmadd_ps(t, sgn2, _mm512_permute_ps(t, 0x4E));
            t = _mm512_fmadd_ps(t, sgn4, _mm512_shuffle_f32x4(t, t, 0xB1));
            v[g] = _mm512_fmadd_ps(t, sgn8, _mm512_shuffle_f32x4(t, t, 0x4E));
        }
#pragma GCC unroll 8
        for (int h = 1; h < ng; h <<= 1)
#pragma GCC unroll 16
            for (int k = 0; k < ng / 2; k++) { /* butterfly k of span h */
                const int j = (k / h) * 2 * h + k % h;
                __m512 a = v[j], c = v[j + h];
                v[j] = _mm512_add_ps(a, c);
                v[j + h] = _mm512_sub_ps(a, c);
            }
    }
#pragma GCC unroll 32
    for (int g = 0; g < ng; g++) ss = _mm512_fmadd_ps(v[g], v[g], ss);
    float nrm2 = _mm512_reduce_add_ps(ss);
    if (!(nrm2 > 0) || !isfinite(nrm2)) return 0;
    float nrm = sqrtf(nrm2);
    const __m512 s = _mm512_set1_ps(sqrtf((float)d) / nrm);
    const __m512 tb = _mm512_loadu_ps(cb->t), cv = _mm512_loadu_ps(cb->c);
    __m512 yc = _mm512_setzero_ps(), cc = _mm512_setzero_ps();
    __m512i id[KVQ_DIM_MAX / 16];
    /* guess-and-correct (cb->guess_ok: the guess is off by at most one):
     * g = clamp(floor(x ga + gb)); g += x > t[g]; g -= x <= t[g-1] */
    const int guess = cb->guess_ok;
    const __m512 ga = _mm512_set1_ps(cb->ga), gbv = _mm512_set1_ps(cb->gb);
    const __m512i one = _mm512_set1_epi32(1), top = _mm512_set1_epi32((1 << b) - 1);
    /* tdown[g] = t[g-1], and -inf for g = 0 (no cell below the first) */
    const __m512 tdown = _mm512_mask_mov_ps(
        _mm512_permutexvar_ps(_mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), one), tb),
        1, _mm512_set1_ps(-INFINITY));
#pragma GCC unroll 32
    for (int g = 0; g < ng; g++) {
        __m512 xs = _mm512_mul_ps(v[g], s);
        __m512i k = _mm512_setzero_si512();
        if (guess) {
            k = _mm512_cvt_roundps_epi32(_mm512_fmadd_ps(xs, ga, gbv), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_setzero_si512()), top);
            __mmask16 up = _mm512_cmp_ps_mask(xs, _mm512_permutexvar_ps(k, tb), _CMP_GT_OQ);
            __mmask16 dn = _mm512_cmp_ps_mask(xs, _mm512_permutexvar_ps(k, tdown), _CMP_LE_OQ);
            k = _mm512_mask_add_epi32(k, up, k, one);
            k = _mm512_mask_sub_epi32(k, dn, k, one);
        } else
#pragma GCC unroll 4
        for (int step = (1 << b) >> 1; step > 0; step >>= 1) {
            __m512i probe = _mm512_add_epi32(k, _mm512_set1_epi32(step - 1));
            __mmask16 gt = _mm512_cmp_ps_mask(xs, _mm512_permutexvar_ps(probe, tb), _CMP_GT_OQ);
            k = _mm512_mask_add_epi32(k, gt, k, _mm512_set1_epi32(step));
        }
        __m512 cval = _mm512_permutexvar_ps(k, cv);
        yc = _mm512_fmadd_ps(v[g], cval, yc);
        cc = _mm512_fmadd_ps(cval, cval, cc);
        id[g] = k;
    }
    float fyc = _mm512_reduce_add_ps(yc), fcc = _mm512_reduce_add_ps(cc);
    *scale = scale_norm || fcc == 0 ? nrm / sqrtf((float)d) : fyc / fcc;
    /* strided packing: byte j of a w-bit block holds coords j + k*S, k < 8/w */
    int shift = 0;
    for (int f = 0; f < 3 && SUBW[b][f]; f++) {
        const int w = SUBW[b][f], S = d * w / 8, per = 8 / w;
        const __m512i mask = _mm512_set1_epi32((1 << w) - 1);
#pragma GCC unroll 16
        for (int j0 = 0; j0 < S; j0 += 16) {
            __m512i byte = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < per; k++) {
                __m512i f16 = _mm512_and_si512(_mm512_srli_epi32(id[(j0 + k * S) / 16], (unsigned)shift), mask);
                byte = _mm512_or_si512(byte, _mm512_slli_epi32(f16, (unsigned)(k * w)));
            }
            _mm_storeu_si128((__m128i *)(packed + j0), _mm512_cvtepi32_epi8(byte));
        }
        packed += S;
        shift += w;
    }
    return 1;
}

/* Constant d and b let the compiler keep the vector in registers. */
KVQ_TARGET_AVX512 int tq_encode_fused_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b,
                                             int scale_norm, const float *x, float *scale, uint8_t *packed) {
    if (rot->kind != ROT_HADAMARD || d % 16 || cb->n > 16 || !direct_ok(d, b, 16)) return 0;
#define FUSED_CASE(D, B) \
    if (d == D && b == B) return encode_fused_body(rot, cb, D, B, scale_norm, x, scale, packed);
    FUSED_CASE(128, 4) FUSED_CASE(128, 3) FUSED_CASE(128, 2) FUSED_CASE(128, 1)
    FUSED_CASE(64, 4) FUSED_CASE(64, 2) FUSED_CASE(256, 4) FUSED_CASE(256, 3) FUSED_CASE(256, 2)
#undef FUSED_CASE
    return 0; /* other shapes: rotate, tq_quantize, strided_pack */
}
#endif
