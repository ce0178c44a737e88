/* Generic x86 SIMD helpers (header-only, static inline) shared by the
 * codec's and the cache's kernels: horizontal sums, f16 / bf16 loads, the
 * in-place vpdpbusd. Record-layout helpers stay in src/codec (rec_transpose.h). */
#ifndef KVQ_SIMD_UTIL_H
#define KVQ_SIMD_UTIL_H
#include "cpu.h"
#if KVQ_X86
#include <immintrin.h>

/* [sum(a), sum(b), sum(c), sum(d)] of four 16-float vectors. */
KVQ_TARGET_AVX512 static inline __m128 hsum4_512(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 t = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* [sum(a), sum(b), sum(c), sum(d)] of four 8-float vectors. */
KVQ_TARGET_AVX2 static inline __m128 hsum4_256(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    __m256 t = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xEE));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* [sum a, sum b, sum c, sum d] of four 8-lane int32 vectors. */
KVQ_TARGET_AVX2 static inline __m128i hsum4_epi32_256(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    const __m256i t = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* sum(v): pairs of halves, then of quarters, then the last two lanes. */
KVQ_TARGET_AVX2 static inline float hsum_256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 (AVX2 + F16C) or 16 (AVX-512) f16 / bf16 values at p as floats; bf16
 * is the top half of an f32, so a widening and a 16-bit shift are exact. */
KVQ_TARGET_AVX2 static inline __m256 ld8_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
KVQ_TARGET_AVX512 static inline __m512 ld16_f16(const void *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
KVQ_TARGET_AVX2 static inline __m256 ld8_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
KVQ_TARGET_AVX512 static inline __m512 ld16_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* acc += a (unsigned bytes) . b (signed bytes) per dword (vpdpbusd), in
 * place: gcc 12 copies the accumulators of _mm512_dpbusd_epi32 around every
 * instruction in the integer value loops (two moves each, and spills: ~30%
 * of those kernels' time). Needs an AVX-512 VNNI target. */
#define DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))
/* acc += a . b per dword over signed 16-bit pairs (vpdpwssd), b the dword at p broadcast */
#define DPWSSD_BCST(acc, a, p) __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*(const uint32_t *)(p)))

#endif
#endif
