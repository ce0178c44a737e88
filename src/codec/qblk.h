/*
 * Block-quantized methods q8 (llama.cpp q8_0) and q4 (q4_1): 8-bit queries
 * and integer scores, as llama.cpp's CPU attention converts Q to the K type's
 * vec_dot_type (q8_0 for q8_0, q8_1 for q4_1).
 *
 * The query is quantized per block b of 32 coordinates (the records' blocks):
 *   sq_b = max_{c in b} |q_c| / 127,  q8_c = round(q_c / sq_b)   (to nearest even)
 * and a score is, in this order of float operations (fmaf: one rounding):
 *   q8:  s = 0; for b: s = fmaf(ks_b * sq_b, (float) I_b, s)
 *        I_b = sum_{c in b} q8_c * k8_c                      (exact int32)
 *   q4:  s = 0; for b: s = fmaf(sq_b, fmaf(ks_b, (float) N_b, km_b * (float) S_b), s)
 *        N_b = sum_{c in b} q8_c * n_c,  S_b = sum_{c in b} q8_c   (exact)
 * (ks_b, km_b: the record's f16 block scale and min as floats). |I_b| <=
 * 32 * 127 * 128 < 2^24 and |N_b| < 2^16, so the sums are exact in int32 and
 * in float alike: every path (scalar reference, AVX2 maddubs, AVX-512 VNNI
 * token lanes) computes the same integers and combines them with the same
 * float operations, so all agree bit for bit.
 *
 * Error: |q_c - sq_b q8_c| <= sq_b / 2 (+ float rounding), so
 * |score - <q, k^>| <= sum_b (sq_b / 2) sum_{c in b} |k^_c| (k^ the decoded
 * key). Measured (tests/test_qblk_vnni.c, Gaussian, d = 128): relative RMS
 * 5.2e-3 of the scores, mean |error| 3.7e-4 |q||k^|; a q8 key's own
 * rounding costs as much (5.2e-3), a q4 key's 15x more (docs/METHODS.md).
 *
 * Prepared row (QBLK_QFLOATS(d) floats, nb = ceil(d / 32)):
 *   [0, nb)          sq_b
 *   [nb, 2 nb)       S_b = sum of the block's q8 (an exact integer)
 *   [2 nb, 10 nb)    32 nb int8 q8 bytes, zero past d. q8: byte 32 b + r is
 *                    coordinate 32 b + r. q4: the block's 16 even coordinates,
 *                    then its 16 odd ones (byte 32 b + 16 (r & 1) + r / 2),
 *                    the order of a block's low and high nibbles.
 * A block holding a NaN gets sq_b = NaN (the scores are NaN, as with float
 * queries); a block whose largest |q_c| is below 1e-30 is all zero.
 */
#ifndef KVQ_QBLK_H
#define KVQ_QBLK_H
#include <stdint.h>

#include "codec_internal.h"
#include "simd_util.h"

#define QBLK 32
static inline int qblk_nb(int d) { return (d + QBLK - 1) / QBLK; }
#define QBLK_QFLOATS(d) (10 * (size_t)qblk_nb(d))
static inline const int8_t *qblk_q8(const float *row, int nb) { return (const int8_t *)(const void *)(row + 2 * nb); }
/* byte of coordinate c in a q4-ordered prepared row */
static inline int qblk_q4pos(int c) { return (c & ~31) + ((c & 1) << 4) + ((c & 31) >> 1); }

/* Prepared row of q (d floats) into qp; q4 != 0: q4 byte order. Scalar, or
 * AVX2 (same bytes and floats) when isa >= AVX2. */
void qblk_prep(int d, int q4, const float *q, float *qp, kvq_isa isa);

/* AVX2 float value accumulation (qblk.c): acc += w * decoded value, 4 query
 * rows per pass over the records (each record decoded once per 4 rows). */
void qblk_accum_avx2_q8(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void qblk_accum_avx2_q4(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);

/* AVX-512 VNNI + VBMI kernels (qblk_vnni_x86.c): scores with lanes = 16
 * records (q4: d % 16 == 0), values by integer dot products over tokens. */
void q8_score_vnni(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores);
void q4_score_vnni(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores);
void q8_accum_vnni(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void q4_accum_vnni(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
#endif
