/*
 * ggml weight types: block layouts, scalar dequantization (the
 * specification), and fast dot products / matrix products against
 * activations quantized once per row.
 *
 * Every quantized block type decomposes, per 32-value sub-block, into
 * unsigned integer codes u (0..255) and an affine map per half (16 values):
 *     w[l] = scale_h * u[l] + min_h,   h = l / 16
 * (Q4_0: scale d, min -8d; Q4_1: d, m; Q6_K: d*sc, -32*d*sc; Q3_K: d*(sc-32),
 * -4*d*(sc-32); IQ4_NL: u = level + 128, d, -128d; ...). With the
 * activations quantized as x[l] = dx * q[l] (q int8, one dx per 32 values),
 *     sum_l w[l] x[l] = dx * sum_h scale_h * (sum_{l in h} u[l] q[l]) + sum_h min_h * s_h
 * where s_h = dx * sum_{l in h} q[l] is stored with the activation row. The
 * inner sum is an unsigned x signed int8 dot: vpmaddubsw (AVX2) or vpdpbusd
 * (AVX-512 VNNI). F32/F16/BF16 weights are dotted with float activations.
 */
#ifndef KVQ_ENGINE_GGML_TYPES_H
#define KVQ_ENGINE_GGML_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

/* ggml type ids as stored in GGUF tensor infos (fixed numeric values). */
typedef enum kvq_ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 31
} kvq_ggml_type;

/* ------------------------------------------------------------------------ */
/* Block layouts (halves are IEEE binary16 bit patterns)                    */
/* ------------------------------------------------------------------------ */
#define QK4_0 32
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
/* 18 B / 32 values = 4.5 bits per weight. w = d * (nibble - 8); value l < 16
 * is the low nibble of qs[l], value l + 16 the high nibble. */
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

#define QK4_1 32
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
/* 20 B / 32 = 5.0 bpw. w = d * nibble + m (nibble order as q4_0). */
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

#define QK5_0 32
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
/* 22 B / 32 = 5.5 bpw. 5-bit code = nibble | (bit l of qh as u32) << 4;
 * w = d * (code - 16). */
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

#define QK5_1 32
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
/* 24 B / 32 = 6.0 bpw. w = d * code + m. */
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

#define QK8_0 32
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
/* 34 B / 32 = 8.5 bpw. w = d * q. */
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

#define QK_K 256
#define K_SCALE_SIZE 12
typedef struct {
    uint16_t d, dmin;              /* super-block scales of the 6-bit scales / mins */
    uint8_t scales[K_SCALE_SIZE];  /* 8 x (6-bit scale, 6-bit min), packed */
    uint8_t qs[QK_K / 2];          /* 4-bit codes */
} block_q4_K;
/* 144 B / 256 = 4.5 bpw. Sub-block j (32 values): w = d*sc_j * code - dmin*m_j.
 * Codes: 64-value chunk c uses qs[32c .. 32c+31]; low nibbles are sub-block
 * 2c, high nibbles sub-block 2c+1. Scales: for j < 4 sc = scales[j] & 63,
 * m = scales[j+4] & 63; for j >= 4 sc = (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
 * m = (scales[j+4] >> 4) | (scales[j] >> 6) << 4. */
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];          /* 5th bits: value l of sub-block j has bit j of qh[l] */
    uint8_t qs[QK_K / 2];
} block_q5_K;
/* 176 B / 256 = 5.5 bpw. As q4_K with a 5th bit: code of value l of
 * sub-block j = nibble | ((qh[l] >> j) & 1) << 4. */
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16]; /* one signed 8-bit scale per 16 values */
    uint16_t d;
} block_q6_K;
/* 210 B / 256 = 6.5625 bpw. w = d * scales[i/16] * (code - 32). Half h
 * (128 values) uses ql[64h..], qh[32h..], scales[8h..]; within it value
 * 32k + l (k < 4, l < 32) has low bits ql[l + 32*(k&1)] >> (4*(k>>1)) & 15
 * and high bits (qh[l] >> 2k) & 3. */
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

typedef struct {
    uint8_t hmask[QK_K / 8];       /* 3rd bits: value v has bit v/32 of hmask[v%32] */
    uint8_t qs[QK_K / 4];          /* low 2 bits */
    uint8_t scales[K_SCALE_SIZE];  /* 16 x 6-bit scales, offset by 32, packed */
    uint16_t d;
} block_q3_K;
/* 110 B / 256 = 3.4375 bpw. Value v = 128h + 32k + l (h < 2, k < 4, l < 32):
 * code = ((qs[32h + l] >> 2k) & 3) | ((hmask[l] >> (4h + k)) & 1) << 2 (0..7),
 * w = d * (sc_{v/16} - 32) * (code - 4). 6-bit scale s (s < 16): low 4 bits
 * are the low nibble of scales[s % 8] for s < 8, its high nibble for s >= 8;
 * high 2 bits are bits 2*(s/4) .. 2*(s/4)+1 of scales[8 + s % 4]. (ggml's
 * dequantize_row_q3_K: a set hmask bit means code >= 4, i.e. nothing
 * subtracted from the 2-bit value, a clear one subtracts 4.) */
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

#define QK4_NL 32
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
/* 18 B / 32 = 4.5 bpw. w = d * kvq_iq4nl_values[nibble], nibble order as
 * q4_0 (value l < 16 the low nibble of qs[l], l + 16 the high nibble). The
 * table is ggml's fixed non-uniform 4-bit grid (kvalues_iq4nl). */
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");
extern const int8_t kvq_iq4nl_values[16];

/* ------------------------------------------------------------------------ */
/* Types, sizes, scalar reference                                           */
/* ------------------------------------------------------------------------ */
/* 1 if the engine can compute with weights of this type. */
int kvq_ggml_type_supported(kvq_ggml_type t);
/* Values per block (1 for float types), 0 if unknown. */
int kvq_ggml_type_block(kvq_ggml_type t);
/* Bytes of one row of n values (n a multiple of the block); 0 if invalid. */
size_t kvq_ggml_row_bytes(kvq_ggml_type t, int64_t n);

/* Dequantizes one row of n values (scalar reference). */
int kvq_ggml_dequant_row(kvq_ggml_type t, const void *src, float *dst, int64_t n);

/*
 * Sub-block decomposition (the specification of the fast kernels):
 * sub-block j (values 32j .. 32j+31) of a row of type t, into codes u[32]
 * and per-half scale[2] / min[2] (w[l] = scale[l/16]*u[l] + min[l/16]).
 * Only for quantized supported types.
 */
void kvq_ggml_unpack32(kvq_ggml_type t, const void *row, int64_t j, uint8_t u[32], float scale[2], float min[2]);

/* ------------------------------------------------------------------------ */
/* Activations                                                              */
/* ------------------------------------------------------------------------ */
/*
 * A q8a row of n values (n % 32 == 0), nb = n/32, structure of arrays:
 *   int8 q[n] | float d[nb] | float s[nb] | float s0[nb] | (to 64 B)
 *   | float dx[(nb+1)/2][16]                                   (padded to 64 B)
 * x[i] ~= d[i/32] * q[i], q = round(x/d) with d = max|x|/127 per block;
 * s = d * sum of the block's 32 q, s0 = d * sum of its first 16 (the min
 * terms: sum_h min_h * s_h = min_b * s + (min_a - min_b) * s0);
 * dx[p] = the scales of blocks 2p and 2p+1 spread over 8 lanes each (0 past
 * the last block): what a 512-bit kernel multiplies a pair's lanes with.
 */
size_t kvq_ggml_q8a_row_bytes(int64_t n);
void kvq_ggml_quantize_q8a_row(const float *x, int64_t n, void *row);
/* Writes the row's dx array from its d array (part of quantizing). */
void kvq_ggml_q8a_spread(void *row, int64_t n);

/* 1 if weights of type t are dotted with q8a activations, 0 with f32. */
int kvq_ggml_type_uses_q8a(kvq_ggml_type t);

/* ------------------------------------------------------------------------ */
/* Kernels with run-time dispatch                                           */
/* ------------------------------------------------------------------------ */
/* Most activation rows one kernel call handles (weight block reuse). */
#define GGML_MAX_NX 8

/*
 * out[r] = dot(weight row w, activation row r) for r < nx <= GGML_MAX_NX;
 * activation row r starts at act + r * act_stride (q8a rows or f32 rows
 * according to kvq_ggml_type_uses_q8a). n is the row length.
 */
typedef void (*kvq_ggml_dot_fn)(int64_t n, const void *w, const void *act, size_t act_stride, int nx, float *out);

/* Weight rows one row-block kernel handles, and most activation rows per call. */
#define GGML_ROWS 8
#define GGML_MAX_NXR 16
/*
 * Row-block form (prefill): out[k * nx + r] = dot(weight row k, activation
 * row r) for k < GGML_ROWS, r < nx <= GGML_MAX_NXR; weight row k starts at
 * w + k * w_stride. q8a activations only. The 8 rows' codes of a block are
 * interleaved in registers so that one activation load and one integer dot
 * serve 8 weight rows, and the per-block scaling (convert, scale, fma) is
 * shared by them: a quarter of the single-row kernels' per-block work.
 */
typedef void (*kvq_ggml_dotr_fn)(int64_t n, const void *w, size_t w_stride, const void *act, size_t act_stride, int nx,
                                 float *out);

typedef struct kvq_ggml_kernels {
    const char *name;                    /* "scalar", "avx2", "avx512vnni" */
    kvq_ggml_dot_fn dot[GGML_TYPE_COUNT];    /* NULL for unsupported types */
    /* quantized weights against f32 activation rows (each sub-block
     * dequantized in registers, shared by the rows): no activation rounding */
    kvq_ggml_dot_fn dotf[GGML_TYPE_COUNT];
    /* row-block kernels (NULL where absent: the matrix product then uses dot) */
    kvq_ggml_dotr_fn dotr[GGML_TYPE_COUNT];
    void (*quantize_q8a)(const float *x, int64_t n, void *row);
} kvq_ggml_kernels;

/* Scalar reference kernels (always available). */
const kvq_ggml_kernels *kvq_ggml_kernels_scalar(void);
/* Kernels for an ISA, NULL if the CPU lacks it. KVQ_ISA_AVX512 means the
 * AVX-512 VNNI kernels (NULL without VNNI); KVQ_ISA_BEST picks the best. */
const kvq_ggml_kernels *kvq_ggml_kernels_for(kvq_isa isa);

/* A weight matrix: rows of `cols` values, row r at data + r * row_bytes
 * (the file's tensor). When `coded` is set the engine computes with kvq's
 * coded copy instead (wmat.h: kvq_model_quantize_weights); data, type and
 * row_bytes still describe the source. */
struct kvq_wmat;
typedef struct kvq_ggml_matrix {
    const void *data;
    kvq_ggml_type type;
    int64_t rows, cols;
    size_t row_bytes;
    const struct kvq_wmat *coded;
} kvq_ggml_matrix;

/*
 * A batch of ntok activation rows of `cols` floats, quantized to q8a on
 * first use by a q8a weight type (once, shared by every matrix multiplied
 * with it). q8 must hold ntok * kvq_ggml_q8a_row_bytes(cols) bytes.
 */
typedef struct kvq_ggml_acts {
    const float *x;   /* (ntok, cols) */
    int64_t ntok, cols;
    void *q8;         /* (ntok, q8a row) workspace */
    int q8_ready;
    int f32_only;     /* 1: quantized weights are dotted with the f32 rows
                       * (kernels' dotf): no activation rounding, slower */
} kvq_ggml_acts;

/* Starts a batch (q8_ready = 0, f32_only = 0). */
void kvq_ggml_acts_init(kvq_ggml_acts *a, const float *x, int64_t ntok, int64_t cols, void *q8);

/*
 * Y_m[t * ldy_m + r] = W_m[r] . X[t] for nm <= 4 matrices sharing the
 * activations (e.g. Q, K, V), t < ntok, r < W_m->rows; one parallel region
 * over all their rows. Returns KVQ_ERR_INVALID_ARG on shape mismatch,
 * KVQ_ERR_UNSUPPORTED for a type without kernel.
 */
int kvq_ggml_matmul_multi(const kvq_ggml_kernels *k, kvq_pool *pool, const kvq_ggml_matrix *const *W, int nm, kvq_ggml_acts *A,
                      float *const *Y, const int64_t *ldy);
/* Single-matrix form: Y is (ntok, ldy). */
int kvq_ggml_matmul(const kvq_ggml_kernels *k, kvq_pool *pool, const kvq_ggml_matrix *W, kvq_ggml_acts *A, float *Y, int64_t ldy);

/* Every kernel table the running CPU can run, the scalar reference first
 * (for tests); returns the count written (at most max). */
int kvq_ggml_kernels_all(const kvq_ggml_kernels **out, int max);

/* Internal: per-ISA tables (kvq_ggml_types_avx2.c / kvq_ggml_types_avx512.c). */
const kvq_ggml_kernels *kvq_ggml_kernels_avx2_table(void);
const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni_table(void);
const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni256_table(void);

#endif
