/* Small SIMD helpers shared by the x86 kernels (header-only, static inline). */
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

KVQ_TARGET_AVX2 static inline float hsum_256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc += a (unsigned bytes) . b (signed bytes) per dword (vpdpbusd), in
 * place: gcc 12 copies the accumulators of _mm512_dpbusd_epi32 around every
 * instruction in the integer value loops (two moves each, and spills: ~30%
 * of those kernels' time). Needs an AVX-512 VNNI target. */
#define DPBUSD(acc, a, b) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b))

/* Dwords of the 16-byte chunk at offset o (S < 16: the 8-byte chunk, dwords
 * 0 and 1) of 16 records r[0..15], transposed so that lanes are records:
 * X[g] lane 4i + q = dword g of record 4q + i (the token-lane score kernels
 * of tq_vnni_x86.c and qjl_kernels_x86.c). */
KVQ_TARGET_AVX512 static inline __attribute__((always_inline)) void
dwords16_transpose(const uint8_t *const r[16], size_t o, const int S, __m512i X[4]) {
    __m512i Z[4];
    for (int q = 0; q < 4; q++) {
        __m512i z;
        if (S >= 16) {
            z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r[4 * q] + o)));
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 1] + o)), 1);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 2] + o)), 2);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[4 * q + 3] + o)), 3);
        } else {
            z = _mm512_castsi128_si512(_mm_loadl_epi64((const __m128i *)(r[4 * q] + o)));
            z = _mm512_inserti32x4(z, _mm_loadl_epi64((const __m128i *)(r[4 * q + 1] + o)), 1);
            z = _mm512_inserti32x4(z, _mm_loadl_epi64((const __m128i *)(r[4 * q + 2] + o)), 2);
            z = _mm512_inserti32x4(z, _mm_loadl_epi64((const __m128i *)(r[4 * q + 3] + o)), 3);
        }
        Z[q] = z;
    }
    const __m512i a0 = _mm512_unpacklo_epi32(Z[0], Z[1]), a1 = _mm512_unpackhi_epi32(Z[0], Z[1]);
    const __m512i b0 = _mm512_unpacklo_epi32(Z[2], Z[3]), b1 = _mm512_unpackhi_epi32(Z[2], Z[3]);
    X[0] = _mm512_unpacklo_epi64(a0, b0);
    X[1] = _mm512_unpackhi_epi64(a0, b0);
    X[2] = _mm512_unpacklo_epi64(a1, b1);
    X[3] = _mm512_unpackhi_epi64(a1, b1);
}

#endif
#endif
