/*
 * Kernels over records holding a scale and b-bit codebook indices in the
 * strided layout (tq-mse, and the first stages of tq-prod and rvq):
 *   est <q, x> = scale * sum_c q~_c * cent[idx_c]       (q~ = R q)
 *   acc_c     += w * scale * cent[idx_c]                 (rotated domain)
 * With a snapped codebook (<= 16 levels, cb_snap_int8) scores are integer
 * dot products, as llama.cpp dots quantized weights with q8 activations:
 *   est = ((float) sum_c q8_c * c8[idx_c] * scale) * (sq * cscale)
 * q8 = round(q~ / sq), sq = max|q~| / 127: every path (scalar, AVX2, AVX-512,
 * AVX-512 VNNI) computes the same exact integer sum (products < 2^14, sums
 * < 2^24, exact in float too), so they agree bit for bit. The query
 * rounding costs ~6e-4 |q||k| of inner-product error at d = 128, against
 * 6.7e-3 for the 4-bit codebook itself.
 * Files, each calling only those below it (tests/check_codec_calls.sh):
 *   tq_dispatch.c     tq_quantize, tq_score, tq_accum, tq_decode and
 *                     tq_prepare_query: the kernel for the ISA and layout;
 *   tq_kernels_x86.c  AVX2 and AVX-512 kernels (float scores and
 *                     accumulate, quantize, decode, the 8-bit query, the
 *                     per-record VNNI scores);
 *   tq_vnni_x86.c     integer accumulate and 16-record scores (AVX-512 VNNI);
 *   tq_kernels.c      the scalar references (*_ref), which the x86 kernels
 *                     call for the layouts and tails they do not serve.
 */
#ifndef KVQ_TQ_KERNELS_H
#define KVQ_TQ_KERNELS_H
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"

typedef struct tq_layout {
    int d, b;
    const kvq_codebook *cb;
    size_t stride;    /* bytes per record */
    size_t scale_off; /* offset of the scale (f16, or f32 if scale32) */
    size_t idx_off;   /* offset of the packed indices */
    int scale32;
    int vnni;         /* the plan may use the AVX-512 VNNI score kernel */
    /* set by tq_score: the table the score kernels multiply queries with
     * (cb->c, or cb->ci for integer scores) */
    const float *scent;
} tq_layout;

/*
 * Prepared query of the tq family (d = head dim), TQ_QFLOATS(d) floats:
 *   [0, d)            q~ = R q
 *   [d, 2d)           q8 as floats (integers, |q8| <= 127)
 *   2d                sq = max|q~| / 127
 *   2d + 1            sum of q8
 *   [2d + 2, ...)     q8 as d int8 bytes (d/4 floats)
 */
#define TQ_QFLOATS(d) (2 * (size_t)(d) + 2 + (size_t)(d) / 4)
void tq_prepare_query(const kvq_rotation *rot, int d, const float *q, float *qp);
/* The 8-bit part of a prepared query from q~ in qp[0, d): [d, ...) filled. */
void tq_query8_ref(int d, float *qp);
void tq_query8_avx2(int d, float *qp);


static inline float tq_scale(const tq_layout *L, const uint8_t *rec) {
    if (L->scale32) { float s; memcpy(&s, rec + L->scale_off, 4); return s; }
    uint16_t h;
    memcpy(&h, rec + L->scale_off, 2);
    return kvq_f16_to_f32(h);
}

/* Unpacks a record's indices to d bytes (SIMD where the layout allows). */
void tq_unpack(const tq_layout *L, const uint8_t *rec, uint8_t *idx, kvq_isa isa);

/* Nearest-centroid indices of sqrt(d) * y / |y| and the stored scale:
 * least squares <y, c>/<c, c> (or |y|/sqrt(d) if scale_norm). */
void tq_quantize_ref(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale);
void tq_quantize_avx512(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale);
void tq_quantize_avx2(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale);
void tq_quantize(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale, kvq_isa isa);

/* scores[j*n + i] = est <q_j, x_i>; q rows are qstride floats apart. */
void tq_score_ref(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores);
void tq_score_avx512(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores);
void tq_score_avx2(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores);
/* acc[j*d + c] += sum_i w[j*n + i] * scale_i * cent[idx_ic] */
void tq_accum_ref(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void tq_accum_avx512(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
void tq_accum_avx2(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
/* y_c = scale * cent[idx_c] */
void tq_decode(const tq_layout *L, const uint8_t *rec, float *y, kvq_isa isa);
void tq_decode_ref(const tq_layout *L, const uint8_t *rec, float *y);

/* Fused rotate+quantize+pack for Hadamard rotations (returns 0 if it does
 * not serve this layout; the caller then rotates and calls tq_quantize). */
int tq_encode_fused_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int scale_norm,
                           const float *x, float *scale, uint8_t *packed);
int tq_decode_avx512(const tq_layout *L, const uint8_t *rec, float *y);

/* qp: nq prepared queries (TQ_QFLOATS(d) layout), qstride floats apart. */
void tq_score(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores, kvq_isa isa);
/* VNNI kernel (returns 0 if it does not serve the layout). */
int tq_score_vnni(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores);
void tq_accum(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc, kvq_isa isa);
/* Integer accumulate over tokens (tq_vnni_x86.c; snapped codebooks, weights
 * rounded to 16 bits per row and run of 256 records): returns 0 if it does
 * not serve the layout. */
int tq_accum_vnni(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
/* Integer scores with lanes = 16 records (tq_vnni_x86.c; n >= 16, snapped
 * codebooks, d = 64/128/256, b <= 4; same bits as tq_score_vnni): returns 0
 * if it does not serve the call. */
int tq_score_tok(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                 float *scores);
#endif
