/*
 * Record-lane transposes of the integer score kernels (tq_vnni_x86.c,
 * qjl_kernels_x86.c, qblk_vnni_x86.c, the polar lane scores): the same
 * bytes of 16 records brought into the 16 dword lanes of a zmm, so that
 * one vpdpbusd scores 16 records.
 */
#ifndef KVQ_REC_TRANSPOSE_H
#define KVQ_REC_TRANSPOSE_H
#include <stddef.h>
#include <stdint.h>

#include "simd_util.h"
#if KVQ_X86

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
