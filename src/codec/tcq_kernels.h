/*
 * Kernels of the bitshift trellis quantizer tcq:k (m_tcq.c; QTIP, Tseng et
 * al. 2024, sec. 3). A trellis of S = 2^L states; the state after value t is
 * the last L bits of the bitstream, s_t = ((s_{t-1} << k) | b_t) mod S, and
 * value t is f[s_t] (tcq_value: a computed pseudo-Gaussian code).
 *
 * The encoder (Viterbi 1967; Forney 1973) keeps one path cost per state.
 * The predecessors of state s are p = (s >> k) | (j << (L-k)), j < J = 2^k:
 * the J states r + j R (R = 2^(L-k)) of "group" r = s >> k. With M_t[r]
 * the least cost of a path into group r before value t:
 *     M_0[r] = 0 for the allowed start groups, TCQ_BIG for the others,
 *     C_t[s] = fma(u_t - f[s], u_t - f[s], M_t[s >> k])     (t = 0 .. T-1)
 *     M_t[r] = min_j C_{t-1}[r + j R]                       (t = 1 .. T-1)
 * The forward kernels store only the arrays M_t (R floats a step; the
 * costs C are formed on the fly), and the final C_{T-1}. The traceback
 * recomputes the J candidates C_{t-1}[r + j R] of the path's group r and
 * takes the first (lowest j) equal to M_t[r]: a minimum is one of its
 * inputs exactly, and fma is correctly rounded (fmaf in C, vfmadd in SIMD),
 * so every ISA finds the same path bit for bit, ties included.
 *
 * Files, each calling only those below it (tests/check_codec_calls.sh):
 *   tcq_dispatch.c     the two-pass tail-biting encoder and the kernel per ISA;
 *   tcq_kernels_x86.c  AVX2 and AVX-512 steps of the forward recursion, AVX2 and AVX-512
 *                      integer scores (the 8-bit query below) and accumulate;
 *   tcq_kernels.c      the code, the scalar references (*_ref), argmin,
 *                      traceback, the record walk and the 8-bit query.
 */
#ifndef KVQ_TCQ_KERNELS_H
#define KVQ_TCQ_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "cpu.h"
#include "kvq.h"
#include "tcq_code.h"

/* The trellis of a plan (read-only after creation). */
typedef struct tcq_code {
    int L, k;       /* 2^L states, k bits per value; 2k + 3 <= L <= 16 */
    const float *f; /* f[s] = tcq_value(s), 2^L floats */
} tcq_code;

/* The computed code (tcq_kernels.c documents it); its constants and TCQ_BIG: tcq_code.h. */
float tcq_value(uint32_t s);

/* Bytes of scratch the encoder needs for T values: T arrays M_t of R
 * floats, the final costs (2^L floats) and 8 floats of slack. */
size_t tcq_scratch_bytes(const tcq_code *tc, int T);

/* M_0: 0 for group c (every group if c < 0), TCQ_BIG for the others. */
void tcq_m0(const tcq_code *tc, long c, float *m0);
/* M_1 .. M_{T-1} into M + t R from M_0 at M, and C_{T-1} into C. */
void tcq_forward_ref(const tcq_code *tc, const float *u, int T, float *M, float *C);
void tcq_forward_avx2(const tcq_code *tc, const float *u, int T, float *M, float *C);
/* AVX-512: bit for bit the same arrays (16 groups a pass). */
void tcq_forward_avx512(const tcq_code *tc, const float *u, int T, float *M, float *C);
/* The state of least cost (ties: the lowest state) among all states (c < 0)
 * or those with s & (R-1) == c. */
uint32_t tcq_argmin(const tcq_code *tc, const float *C, long c);
/* tcq_argmin over all states (c < 0), AVX2: the same state. */
uint32_t tcq_argmin_all_avx2(const tcq_code *tc, const float *C);
/* st[t] for t = T-1 down to 0, from st[T-1] = end (tcq_kernels.h's rule). */
void tcq_traceback_ref(const tcq_code *tc, const float *u, const float *M, int T, uint32_t end, uint32_t *st);
void tcq_traceback_avx2(const tcq_code *tc, const float *u, const float *M, int T, uint32_t end, uint32_t *st);

/* The tail-biting Viterbi encoder of T values u (tcq_dispatch.c): states
 * st[0..T-1] of a circular path. scratch: tcq_scratch_bytes(tc, T) bytes. */
void tcq_encode_path(const tcq_code *tc, const float *u, int T, void *scratch, uint32_t *st, kvq_isa isa);
/* W, the half-width of the second pass's window around the seam; 0 when
 * the second pass covers the whole cycle (tcq_dispatch.c). */
int tcq_window(const tcq_code *tc, int T);

/* ---- records: [scale | T*k bits] --------------------------------------------
 * Symbol t (the k bits b_t) sits at bits (T-1-t) k .. (T-1-t) k + k - 1 of
 * the LSB-first stream: symbols in reverse order, so that the state
 * s_t = b_t | b_{t-1} << k | ... is the L-bit window of the stream from bit
 * (T-1-t) k, read circularly (the window of s_t for t < ceil(L/k) - 1 runs
 * past the end into b_{T-1}, b_{T-2}, ...: tail-biting). One unaligned load
 * and a shift give a state. */
#define TCQ_BYTES_MAX (KVQ_DIM_MAX * 4 / 8) /* bits of a record at d = KVQ_DIM_MAX, k = 4 */
/* States s_0 .. s_{T-1} of a record's stream (the decoder's walk). */
void tcq_states(const tcq_code *tc, const uint8_t *bits, int T, uint32_t *st);
/* buf (nb + 16 bytes) = the nb bytes of a stream followed by its first 16
 * bytes again (cyclically when nb < 16), so that a window may run past the end. */
void tcq_stream_pad(const uint8_t *bits, size_t nb, uint8_t *buf);
/* v[t] = f[s_t], the unscaled values of a record's stream. */
void tcq_values_ref(const tcq_code *tc, const uint8_t *bits, int T, float *v);
void tcq_values_avx2(const tcq_code *tc, const uint8_t *bits, int T, float *v);
void tcq_values(const tcq_code *tc, const uint8_t *bits, int T, float *v, kvq_isa isa);
/* Writes the low k bits of st[t] as symbol t. */
void tcq_pack(const tcq_code *tc, const uint32_t *st, int T, uint8_t *bits);

/* Records of one plan for the kernels below. */
typedef struct tcq_records {
    const tcq_code *tc;
    int d;
    size_t stride;    /* bytes per record */
    size_t bits_off;  /* offset of the bitstream in a record */
    size_t scale_off; /* offset of the scale */
    int scale32;      /* f32 scale (else f16) */
    int vnni;         /* AVX-512 VNNI allowed (the plan's vnni) */
} tcq_records;

float tcq_scale(const tcq_records *R, const uint8_t *rec);

/* ---- the 8-bit query -------------------------------------------------------
 * Scores are integer dot products, as tq-mse's (tq_kernels.h) and as
 * llama.cpp dots quantized weights with q8 activations. With q~ = R q,
 * sq = max|q~| / 127 and q8_t = round(q~_t / sq) (|q8_t| <= 127), and
 * f(s) = (B(s) - 510) TCQ_INV_SD, B(s) the byte sum of h(s) = TCQ_MUL s + TCQ_ADD:
 *     sum_t q~_t f(s_t) ~ (sq TCQ_INV_SD) (sum_t q8_t B(s_t) - 510 sum_t q8_t),
 * the first sum one vpdpbusd per 16 values (h's four unsigned bytes times
 * q8_t in the four bytes of its lane), exact in int32 (|sum| <= 512 * 127
 * * 1020 < 2^27). Every path (scalar, AVX2, AVX-512, AVX-512 VNNI) forms
 * the same integer and then est = gamma ((float) isum qs): bit for bit the
 * same scores on every ISA. Prepared query, TCQ_QFLOATS(d) floats:
 *   [0, d)          q~ = R q
 *   d               qs = sq TCQ_INV_SD
 *   d + 1           sum_t q8_t (an integer, exact in float)
 *   [d + 2, 2d + 2) q8_t in the 4 bytes of float d + 2 + t (int8 bytes)
 * The rounding of q~ costs ~1e-3 |q~||x| of inner-product error at d = 256
 * (tests/test_tcq.c bounds it), against ~0.1 |q~||x| for tcq:4 itself. */
#define TCQ_QFLOATS(d) (2 * (size_t)(d) + 2)
/* [d, 2d + 2) of a prepared query from q~ in qp[0, d); the AVX2 one (d % 8 == 0) gives the same bytes
 * and floats (the products in double, rounded to nearest even as lrint) */
void tcq_query8_ref(int d, float *qp);
void tcq_query8_avx2(int d, float *qp);
void tcq_query8(int d, float *qp, kvq_isa isa);
/* B(s) - 510 = f(s) / TCQ_INV_SD, an integer in [-510, 510] */
int tcq_value_int(uint32_t s);

/* scores[j n + i] = gamma_i ((float) isum_ij qs_j), isum_ij = sum_t q8_jt (B(s_it) - 510): the 8-bit
 * query above (qp: prepared queries, qstride floats apart) */
void tcq_score_ref(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                   float *scores);
/* acc[j d + t] += w[j n + i] gamma_i f(s_it) */
void tcq_accum_ref(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void tcq_score_avx2(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                    float *scores);
void tcq_accum_avx2(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
/* AVX-512 (R->vnni: the integer dots by vpdpbusd, else vpmaddubsw + vpmaddwd): the same integers,
 * so bit for bit the reference's scores; accumulate: bit for bit the AVX2 kernel. */
void tcq_score_avx512(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                      float *scores);
void tcq_accum_avx512(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void tcq_score(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
               float *scores, kvq_isa isa);
void tcq_accum(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc,
               kvq_isa isa);
#endif
