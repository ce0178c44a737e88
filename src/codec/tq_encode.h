/*
 * Fused tq encode (tq_encode_x86.c): rows of d floats rotated by the two
 * Hadamard rounds, quantized and packed in registers, for the specialised
 * shapes (tq_encode_fused_ok). The single-row entry is in tq_kernels.h
 * (tq_encode_fused_avx512); a row gets the same bytes by either entry.
 */
#ifndef KVQ_TQ_ENCODE_H
#define KVQ_TQ_ENCODE_H
#include <stddef.h>
#include <stdint.h>

#include "codec_internal.h"

/* 1 if the fused encoder serves (rotation, codebook, d, b). */
int tq_encode_fused_ok(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b);

/* Encodes rows x[0..n) (d floats each, finite) into records `stride` bytes
 * apart: [scale (f16, or f32 if scale32) | d*b/8 bytes of strided indices].
 * Returns the number of leading rows done; a smaller value than n is the
 * index of a row it cannot encode (zero or non-finite norm, scale outside
 * the stored format), which the caller encodes by the generic path before
 * calling again after it. AVX-512 only; served shapes only. */
size_t tq_encode_rows_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int scale_norm,
                             int scale32, const float *x, size_t n, uint8_t *codes, size_t stride);
#endif
