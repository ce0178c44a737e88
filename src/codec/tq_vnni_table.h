/*
 * Shared by the AVX-512 VNNI tq kernels (tq_kernels_x86.c: score,
 * tq_vnni_x86.c: accumulate): their target attribute and the vpermb table
 * of a snapped codebook's int8 levels (codec_internal.h, c8).
 */
#ifndef KVQ_TQ_VNNI_TABLE_H
#define KVQ_TQ_VNNI_TABLE_H

#include "codec_internal.h"

#if KVQ_X86
#include <immintrin.h>

#define KVQ_TARGET_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi2")))

/* Bytes 0..n-1: c8[k] XOR flip (flip 0x80: c8 + 128 as unsigned bytes, the
 * u8 side of vpdpbusd; flip 0: c8 as it is), zero above; n <= 16 levels.
 * Built in registers: a zeroed 64-byte stack table is stored with one
 * aligned zmm store, which faults where gcc 13's ASan places the frame on
 * its fake stack (detect_stack_use_after_return, 32-byte-aligned frames). */
KVQ_TARGET_VNNI static inline __m512i kvq_tq_c8_table(const kvq_codebook *cb, int flip) {
    const __m512i c8 = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)cb->c8));
    return _mm512_maskz_mov_epi8((__mmask64)((1u << cb->n) - 1), _mm512_xor_si512(c8, _mm512_set1_epi8((char)flip)));
}
#endif

#endif
