/*
 * AVX-512 VNNI + VBMI kernels of q8 (q8_0) and q4 (q4_1), the model of
 * tq_vnni_x86.c.
 *
 * Scores (qblk.h: 8-bit queries, exact integer block sums), lanes = 16
 * records: the dwords of 16 records (4 coordinates each) are transposed by
 * unpacks (dwords16_transpose, rec_transpose.h) so that one vpdpbusd against the
 * query's 4 bytes (a broadcast memory operand) adds 4 coordinates of 16
 * records; no horizontal sums. vpdpbusd multiplies unsigned by signed bytes:
 * q8 codes go in as k8 + 128 (xor 0x80) and the block's sum starts at
 * -128 * S_b, q4 nibbles are unsigned already (low nibbles against the
 * even coordinates' q8 bytes, high against the odd). The records' block
 * scales (and q4 mins) come through the same transpose, so per block and
 * query one int -> float conversion and the float operations of the
 * reference, lane by lane: the same bits as the scalar reference.
 *
 * Values, integer dot products over tokens:
 *   acc_j[c] += sum_i w_ji * ks_ib * k8_ic                 (q8)
 *   acc_j[c] += sum_i w_ji * ks_ib * n_ic + sum_i w_ji * km_ib   (q4)
 * for c in block b. Per query row j, run of <= 256 records and block b, the
 * weights x_i = w_ji * ks_ib (>= 0) are rounded to 16 bits relative to the
 * largest, u_i = rint(x_i * 65535 / xmax), split into a hi and a lo byte;
 * 4 records' codes are interleaved per coordinate (lane = coordinate, its
 * 4 bytes = the 4 records: q8 by two vpermt2b of 32-byte loads, q4 by one
 * vpermb of 16-byte loads and a nibble split) and one vpdpbusd against the
 * broadcast hi bytes and one against the lo bytes add 4 records into two
 * int32 sums per coordinate (|sum| <= 256 * 255 * 128 < 2^24: exact, also as
 * floats). q4 nibbles go in centred, as n - 8 (signed bytes), and the min
 * term becomes sum_i w_ji * (km_ib + 8 ks_ib), summed in float. At the end
 * acc += (256 H + L) * (xmax / 65535) (+ that min term). The only
 * approximation is the weight rounding: x_i moves by at most xmax / 131070
 * (+ float rounding of the product), so |delta acc_c| <= 0.51 * (xmax /
 * 65535) * sum_i |k8_ic| (q4: |n_ic - 8|), ~1e-5 of the block's largest
 * contribution. A (row, run,
 * block) with a negative or non-finite x_i (never from the cache's softmax,
 * but allowed by kvq_accumulate) is accumulated in float instead, as the
 * decode-based reference. tests/test_qblk_vnni.c checks both kernels
 * against exact emulations.
 */
#include <math.h>
#include <string.h>

#include "qblk.h"
#include "rec_transpose.h"

#if KVQ_X86
#define TV __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi2")))
#define AI static inline __attribute__((always_inline))
#define RUN 256 /* records per run: one weight scale per (row, run, block) */

/* padding records (weight 0, scale 0): longer than any q8 / q4 record */
static const uint8_t ZREC[2 * KVQ_DIM_MAX] = {0};

/* vpermb: byte 4l + t = byte l of record t, records at bytes 16 t */
#define I4(l, s, o) (o) + (l), (o) + (s) + (l), (o) + 2 * (s) + (l), (o) + 3 * (s) + (l)
#define I16(s, o)                                                                                                 \
    I4(0, s, o), I4(1, s, o), I4(2, s, o), I4(3, s, o), I4(4, s, o), I4(5, s, o), I4(6, s, o), I4(7, s, o),      \
        I4(8, s, o), I4(9, s, o), I4(10, s, o), I4(11, s, o), I4(12, s, o), I4(13, s, o), I4(14, s, o), I4(15, s, o)
static const uint8_t PERM16[64] = {I16(16, 0)};
/* vpermt2b of [r0 | r1] (32 bytes each) and [r2 | r3]: byte 4l + t = byte l
 * (PERM32A) or 16 + l (PERM32B) of record t */
static const uint8_t PERM32A[64] = {I16(32, 0)};
static const uint8_t PERM32B[64] = {I16(32, 16)};
/* vpermt2b of packus_epi32(u0, u1) and packus_epi32(u2, u3): byte 16 r + i
 * = low (WSPLIT) or high (WSPLIT + 64) byte of row r's word for record i,
 * which sits in lane i / 4, word 4 (r % 2) + i % 4 of source r / 2. */
#define WS(r, i, o) (64 * ((r) / 2) + 16 * ((i) / 4) + 2 * (4 * ((r) % 2) + (i) % 4) + (o))
#define WS4(r, i, o) WS(r, i, o), WS(r, i + 1, o), WS(r, i + 2, o), WS(r, i + 3, o)
#define WS16(r, o) WS4(r, 0, o), WS4(r, 4, o), WS4(r, 8, o), WS4(r, 12, o)
static const uint8_t WSPLIT[128] = {WS16(0, 0), WS16(1, 0), WS16(2, 0), WS16(3, 0),
                                    WS16(0, 1), WS16(1, 1), WS16(2, 1), WS16(3, 1)};
/* q4 values: even coordinates (lanes of E) and odd ones (O) back in order */
static const int32_t EO_LO[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
static const int32_t EO_HI[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};


static inline __mmask16 lanes(size_t k) { return k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << k) - 1); }

/* lane 4i + q of a transposed vector holds record 4q + i: back to record order */
TV AI __m512i unscramble(void) { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

/* Block scales of blocks 4g..4g+3 of 16 records (transposed lanes).
 * q8: 2 bytes per block, an 8-byte load at 8g (inside the record: its
 * 2 nb scale bytes are followed by d >= 32 code bytes). q4: 4 bytes (scale,
 * min) per block, a 16-byte load at 16g (16g + 16 <= 4 nb + d / 2 for
 * d >= 24). */
TV AI void q8_scales16(const uint8_t *const r[16], int g, __m512 ks[4]) {
    __m512i X[4];
    dwords16_transpose(r, 8 * (size_t)g, 8, X);
    ks[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(X[0]));
    ks[1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(X[0], 16)));
    ks[2] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(X[1]));
    ks[3] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(X[1], 16)));
}
TV AI void q4_scales16(const uint8_t *const r[16], int g, __m512 ks[4], __m512 km[4]) {
    __m512i X[4];
    dwords16_transpose(r, 16 * (size_t)g, 16, X);
    for (int k = 0; k < 4; k++) {
        ks[k] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(X[k]));
        km[k] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(X[k], 16)));
    }
}

TV AI void rec16(const uint8_t *codes, size_t stride, size_t i0, size_t m, const uint8_t *r[16]) {
    for (size_t t = 0; t < 16; t++) r[t] = t < m ? codes + (i0 + t) * stride : ZREC;
}

/* ---- scores ------------------------------------------------------------------ */

/* Rows j0..j0+QT-1 of q8 against all n records (D: the head dim; a
 * compile-time constant for the common dims). */
TV AI void q8s_pass(const kvq_plan *p, const float *qp, size_t j0, const int QT, const uint8_t *codes, size_t n,
                    float *scores, const int D) {
    const int nb = (D + 31) / 32;
    const size_t stride = p->code_bytes, qs = p->qfloats, off = 2 * (size_t)nb;
    const float *row[8];
    const int8_t *q8[8];
    for (int j = 0; j < QT; j++) {
        row[j] = qp + (j0 + (size_t)j) * qs;
        q8[j] = qblk_q8(row[j], nb);
    }
    const __m512i perm = unscramble(), x80 = _mm512_set1_epi8((char)0x80);
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        const size_t m = n - i0 < 16 ? n - i0 : 16;
        const uint8_t *r[16];
        rec16(codes, stride, i0, m, r);
        __m512 s[8], ks[4];
        for (int j = 0; j < QT; j++) s[j] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            if (b % 4 == 0) q8_scales16(r, b / 4, ks);
            __m512i a[8];
            for (int j = 0; j < QT; j++) a[j] = _mm512_set1_epi32(-128 * (int32_t)row[j][nb + b]);
            for (int c0 = 32 * b; c0 < 32 * b + 32 && c0 < D; c0 += 16) {
                const int S = D - c0 >= 16 ? 16 : 8;
                __m512i X[4];
                dwords16_transpose(r, off + (size_t)c0, S, X);
                for (int g = 0; g < S / 4; g++) {
                    const __m512i u = _mm512_xor_si512(X[g], x80);
                    for (int j = 0; j < QT; j++) {
                        int32_t qw;
                        memcpy(&qw, q8[j] + c0 + 4 * g, 4);
                        a[j] = _mm512_dpbusd_epi32(a[j], u, _mm512_set1_epi32(qw));
                    }
                }
            }
            for (int j = 0; j < QT; j++)
                s[j] = _mm512_fmadd_ps(_mm512_mul_ps(ks[b % 4], _mm512_set1_ps(row[j][b])), _mm512_cvtepi32_ps(a[j]), s[j]);
        }
        const __mmask16 km = lanes(m);
        for (int j = 0; j < QT; j++)
            _mm512_mask_storeu_ps(scores + (j0 + (size_t)j) * n + i0, km, _mm512_permutexvar_ps(perm, s[j]));
    }
}

/* q4, D % 16 == 0 (a partial last block holds 16 coordinates: 8 bytes). */
TV AI void q4s_pass(const kvq_plan *p, const float *qp, size_t j0, const int QT, const uint8_t *codes, size_t n,
                    float *scores, const int D) {
    const int nb = (D + 31) / 32;
    const size_t stride = p->code_bytes, qs = p->qfloats, off = 4 * (size_t)nb;
    const float *row[8];
    const int8_t *q8[8];
    for (int j = 0; j < QT; j++) {
        row[j] = qp + (j0 + (size_t)j) * qs;
        q8[j] = qblk_q8(row[j], nb);
    }
    const __m512i perm = unscramble(), m15 = _mm512_set1_epi8(15);
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        const size_t m = n - i0 < 16 ? n - i0 : 16;
        const uint8_t *r[16];
        rec16(codes, stride, i0, m, r);
        __m512 s[8], ks[4], km[4];
        for (int j = 0; j < QT; j++) s[j] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            if (b % 4 == 0) q4_scales16(r, b / 4, ks, km);
            const int S = D - 32 * b >= 32 ? 16 : 8;
            __m512i a[8], X[4];
            for (int j = 0; j < QT; j++) a[j] = _mm512_setzero_si512();
            dwords16_transpose(r, off + 16 * (size_t)b, S, X);
            for (int g = 0; g < S / 4; g++) {
                const __m512i lo = _mm512_and_si512(X[g], m15), hi = _mm512_and_si512(_mm512_srli_epi16(X[g], 4), m15);
                for (int j = 0; j < QT; j++) {
                    int32_t qe, qo;
                    memcpy(&qe, q8[j] + 32 * b + 4 * g, 4);
                    memcpy(&qo, q8[j] + 32 * b + 16 + 4 * g, 4);
                    a[j] = _mm512_dpbusd_epi32(a[j], lo, _mm512_set1_epi32(qe));
                    a[j] = _mm512_dpbusd_epi32(a[j], hi, _mm512_set1_epi32(qo));
                }
            }
            for (int j = 0; j < QT; j++) {
                const __m512 inner = _mm512_fmadd_ps(ks[b % 4], _mm512_cvtepi32_ps(a[j]),
                                                     _mm512_mul_ps(km[b % 4], _mm512_set1_ps(row[j][nb + b])));
                s[j] = _mm512_fmadd_ps(_mm512_set1_ps(row[j][b]), inner, s[j]);
            }
        }
        const __mmask16 kmask = lanes(m);
        for (int j = 0; j < QT; j++)
            _mm512_mask_storeu_ps(scores + (j0 + (size_t)j) * n + i0, kmask, _mm512_permutexvar_ps(perm, s[j]));
    }
}

/* passes of 8 rows (G = 8, prefill: the transposes serve twice the rows),
 * then of <= 4 */
#define SCORE_BODY(NAME, PASS)                                                                                   \
    TV AI void NAME(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores, \
                    const int D) {                                                                               \
        for (size_t j0 = 0; j0 < nq;) {                                                                          \
            const size_t left = nq - j0;                                                                         \
            switch (left >= 8 ? 8 : left >= 4 ? 4 : left) {                                                     \
            case 1: PASS(p, qp, j0, 1, codes, n, scores, D); j0 += 1; break;                                     \
            case 2: PASS(p, qp, j0, 2, codes, n, scores, D); j0 += 2; break;                                     \
            case 3: PASS(p, qp, j0, 3, codes, n, scores, D); j0 += 3; break;                                     \
            case 4: PASS(p, qp, j0, 4, codes, n, scores, D); j0 += 4; break;                                     \
            default: PASS(p, qp, j0, 8, codes, n, scores, D); j0 += 8; break;                                    \
            }                                                                                                    \
        }                                                                                                        \
    }
SCORE_BODY(q8s_body, q8s_pass)
SCORE_BODY(q4s_body, q4s_pass)

/* one function per common dim (everything folds), one for the others */
#define DIMS(X, B) X(B, 64) X(B, 128) X(B, 256)
#define DEF_DIM(B, D)                                                                                                  \
    TV static void B##_##D(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *out) { \
        B(p, qp, nq, codes, n, out, D);                                                                                \
    }
#define CASE_DIM(B, D) case D: B##_##D(p, qp, nq, codes, n, out); return;
/* FN: the body B specialised for d = 64, 128, 256, and one copy for any d */
#define DISPATCH(FN, B)                                                                                              \
    DIMS(DEF_DIM, B)                                                                                                 \
    TV static void B##_any(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *out) { \
        B(p, qp, nq, codes, n, out, p->d);                                                                           \
    }                                                                                                                \
    void FN(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *out) {            \
        switch (p->d) { DIMS(CASE_DIM, B) default: B##_any(p, qp, nq, codes, n, out); }                           \
    }
DISPATCH(q8_score_vnni, q8s_body)
DISPATCH(q4_score_vnni, q4s_body)

/* ---- values ------------------------------------------------------------------ */

/* Scales (q4: and mins) of blocks 4g..4g+3 of a run's m records, in record
 * order: gs[k][i] (gm[k][i]) for block 4g + k (garbage past nb, unused). */
TV AI void run_scales(const uint8_t *codes, size_t stride, size_t m, int g, int q4, float (*gs)[RUN], float (*gm)[RUN]) {
    const __m512i perm = unscramble();
    for (size_t t0 = 0; t0 < m; t0 += 16) {
        const uint8_t *r[16];
        rec16(codes, stride, t0, m - t0 < 16 ? m - t0 : 16, r);
        __m512 ks[4], km[4];
        if (q4) q4_scales16(r, g, ks, km);
        else q8_scales16(r, g, ks);
        for (int k = 0; k < 4; k++) {
            _mm512_storeu_ps(gs[k] + t0, _mm512_permutexvar_ps(perm, ks[k]));
            if (q4) _mm512_storeu_ps(gm[k] + t0, _mm512_permutexvar_ps(perm, km[k]));
        }
    }
}

/* Byte planes of the 16-bit weights: per 16 records, 16 bytes of row 0, then
 * rows 1, 2, 3 (one 64-byte store per 16 records and plane). */
static inline size_t woff(int j, size_t t) { return (t / 16) * 64 + 16 * (size_t)j + t % 16; }

/* Weights of rows j < QT (w[j]: the row at the run's first record) for a
 * run of m records and one block: x_i = w_i * g_i as 16-bit integers split
 * into hi / lo byte planes (layout woff, zero padding to a multiple of 16
 * records); st[j] = xmax / 65535; q4 (gm): M[j] = sum_i w_i * (gm_i +
 * 8 g_i), the value n being taken as n - 8 (centred: half the rounding
 * error of n). ok[j] = 0 (planes zero) if some x_i of row j is negative or
 * not finite. */
TV AI void run_weights(const float *const *w, const int QT, const float *g, const float *gm, size_t m, uint8_t *wh,
                       uint8_t *wl, float *st, float *M, int *ok) {
    __m512 mx[4], mv[4];
    __mmask16 good[4];
    const __m512 zero = _mm512_setzero_ps(), eight = _mm512_set1_ps(8.0f);
    for (int j = 0; j < QT; j++) {
        mx[j] = mv[j] = zero;
        good[j] = 0xffff;
    }
    for (size_t t = 0; t < m; t += 16) {
        const __mmask16 k = lanes(m - t);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + t);
        /* q4: the values go in as n - 8, the min term takes km + 8 ks */
        const __m512 g8 = gm ? _mm512_fmadd_ps(eight, gv, _mm512_maskz_loadu_ps(k, gm + t)) : zero;
        for (int j = 0; j < QT; j++) {
            const __m512 wv = _mm512_maskz_loadu_ps(k, w[j] + t), x = _mm512_mul_ps(wv, gv);
            mx[j] = _mm512_max_ps(mx[j], x);
            good[j] = _mm512_mask_cmp_ps_mask(good[j], x, zero, _CMP_GE_OQ); /* NaN, < 0: bad; inf: xmax */
            if (gm) mv[j] = _mm512_fmadd_ps(wv, g8, mv[j]);
        }
    }
    __m512 inv[4];
    for (int j = 0; j < QT; j++) {
        const float xmax = _mm512_reduce_max_ps(mx[j]);
        ok[j] = good[j] == 0xffff && xmax < INFINITY;
        st[j] = ok[j] ? xmax / 65535.0f : 0.0f;
        inv[j] = _mm512_set1_ps(ok[j] && xmax > 0 ? 65535.0f / xmax : 0.0f);
        if (gm) M[j] = _mm512_reduce_add_ps(mv[j]);
    }
    const __m512i plo = _mm512_loadu_si512(WSPLIT), phi = _mm512_loadu_si512(WSPLIT + 64);
    for (size_t t = 0; t < m; t += 16) {
        const __mmask16 k = lanes(m - t);
        const __m512 gv = _mm512_maskz_loadu_ps(k, g + t);
        __m512i u[4];
        for (int j = 0; j < 4; j++) /* 0 <= x * inv <= 65535 (1 + 2^-24)^2 < 65535.5: no clamp; a bad
                                     * row gets 0 or NaN -> 0x80000000, which packus makes 0 */
            u[j] = j < QT ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, w[j] + t), gv), inv[j]))
                          : _mm512_setzero_si512();
        /* words of rows 0, 1 and of rows 2, 3 (per 128-bit lane: 4 records of
         * each), then their low and high bytes in plane order by vpermt2b */
        const __m512i p01 = _mm512_packus_epi32(u[0], u[1]), p23 = _mm512_packus_epi32(u[2], u[3]);
        _mm512_storeu_si512(wl + 4 * t, _mm512_permutex2var_epi8(p01, plo, p23));
        _mm512_storeu_si512(wh + 4 * t, _mm512_permutex2var_epi8(p01, phi, p23));
    }
}

/* Float accumulation of block b of one row over a run (the reference's
 * arithmetic: decoded value, then weight). */
static void run_float(const kvq_plan *p, int q4, const uint8_t *codes, size_t m, int b, const float *w, const float *gs,
                      const float *gm, float *a) {
    const int d = p->d, nb = qblk_nb(d), lo = 32 * b, hi = lo + 32 < d ? lo + 32 : d;
    for (size_t i = 0; i < m; i++) {
        const uint8_t *rec = codes + i * p->code_bytes;
        for (int c = lo; c < hi; c++) {
            const float y = q4 ? gm[i] + gs[i] * (float)((rec[4 * nb + c / 2] >> (4 * (c & 1))) & 15)
                               : gs[i] * (float)(int8_t)rec[2 * nb + c];
            a[c] += w[i] * y;
        }
    }
}

/* 4 records' bytes at o..o+31 (q8 block) as two vectors, lane l = byte l
 * (u0) or 16 + l (u1) of records 0..3; L < 32: only L bytes read. */
TV AI void inter4_32(const uint8_t *const r[4], size_t o, int L, __m512i pa, __m512i pb, __m512i *u0, __m512i *u1) {
    __m256i a0, a1, a2, a3;
    if (L >= 32) {
        a0 = _mm256_loadu_si256((const __m256i *)(const void *)(r[0] + o));
        a1 = _mm256_loadu_si256((const __m256i *)(const void *)(r[1] + o));
        a2 = _mm256_loadu_si256((const __m256i *)(const void *)(r[2] + o));
        a3 = _mm256_loadu_si256((const __m256i *)(const void *)(r[3] + o));
    } else {
        const __mmask32 k = (__mmask32)((1u << L) - 1);
        a0 = _mm256_maskz_loadu_epi8(k, r[0] + o);
        a1 = _mm256_maskz_loadu_epi8(k, r[1] + o);
        a2 = _mm256_maskz_loadu_epi8(k, r[2] + o);
        a3 = _mm256_maskz_loadu_epi8(k, r[3] + o);
    }
    const __m512i A = _mm512_inserti64x4(_mm512_castsi256_si512(a0), a1, 1);
    const __m512i B = _mm512_inserti64x4(_mm512_castsi256_si512(a2), a3, 1);
    *u0 = _mm512_permutex2var_epi8(A, pa, B);
    *u1 = _mm512_permutex2var_epi8(A, pb, B);
}

/* 4 records' bytes at o..o+15 (q4 block), lane l = byte l of records 0..3;
 * L < 16: only L bytes read. */
TV AI __m512i inter4_16(const uint8_t *const r[4], size_t o, int L, __m512i p16) {
    __m512i z;
    if (L >= 16) {
        z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(r[0] + o)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(r[1] + o)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(r[2] + o)), 2);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(r[3] + o)), 3);
    } else {
        const __mmask16 k = (__mmask16)((1u << L) - 1);
        z = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(k, r[0] + o));
        z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(k, r[1] + o), 1);
        z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(k, r[2] + o), 2);
        z = _mm512_inserti32x4(z, _mm_maskz_loadu_epi8(k, r[3] + o), 3);
    }
    return _mm512_permutexvar_epi8(p16, z);
}

TV AI void rec4(const uint8_t *codes, size_t stride, size_t t0, size_t m, size_t o, const uint8_t *r[4]) {
    const uint8_t *r0 = codes + t0 * stride + o;
    if (t0 + 4 <= m) {
        r[0] = r0;
        r[1] = r0 + stride;
        r[2] = r0 + 2 * stride;
        r[3] = r0 + 3 * stride;
    } else /* the last, partial group: padding records of weight 0 */
        for (size_t t = 0; t < 4; t++) r[t] = t0 + t < m ? r0 + t * stride : ZREC;
}

/* One group of 4 records (q8): two vpermt2b, 2 x 2 vpdpbusd per row. */
TV AI void q8a_group(const uint8_t *const r[4], int L, const int QT, __m512i pa, __m512i pb, const uint8_t *wh,
                     const uint8_t *wl, size_t t0, __m512i *H0, __m512i *H1, __m512i *L0, __m512i *L1) {
    __m512i u0, u1;
    inter4_32(r, 0, L, pa, pb, &u0, &u1);
    for (int j = 0; j < QT; j++) {
        int32_t h, l;
        memcpy(&h, wh + woff(j, t0), 4);
        memcpy(&l, wl + woff(j, t0), 4);
        const __m512i bh = _mm512_set1_epi32(h), bl = _mm512_set1_epi32(l);
        DPBUSD(H0[j], bh, u0);
        DPBUSD(H1[j], bh, u1);
        DPBUSD(L0[j], bl, u0);
        DPBUSD(L1[j], bl, u1);
    }
}

/* One block b of rows a[0..QT-1] over a run of m records (weights ready). */
TV AI void q8a_pass(const uint8_t *codes, size_t stride, size_t m, int b, const int QT, const int D, const uint8_t *wh,
                    const uint8_t *wl, const float *st, const int *ok, float *const *a) {
    const int nb = (D + 31) / 32, L = D - 32 * b < 32 ? D - 32 * b : 32;
    const size_t o = 2 * (size_t)nb + 32 * (size_t)b;
    const __m512i pa = _mm512_loadu_si512(PERM32A), pb = _mm512_loadu_si512(PERM32B);
    __m512i H0[4], H1[4], L0[4], L1[4];
    for (int j = 0; j < QT; j++) H0[j] = H1[j] = L0[j] = L1[j] = _mm512_setzero_si512();
    const size_t m4 = m & ~(size_t)3;
    const uint8_t *rp = codes + o;
    if (L == 32)
        for (size_t t0 = 0; t0 < m4; t0 += 4, rp += 4 * stride) {
            const uint8_t *const r[4] = {rp, rp + stride, rp + 2 * stride, rp + 3 * stride};
            q8a_group(r, 32, QT, pa, pb, wh, wl, t0, H0, H1, L0, L1);
        }
    else
        for (size_t t0 = 0; t0 < m4; t0 += 4, rp += 4 * stride) {
            const uint8_t *const r[4] = {rp, rp + stride, rp + 2 * stride, rp + 3 * stride};
            q8a_group(r, L, QT, pa, pb, wh, wl, t0, H0, H1, L0, L1);
        }
    if (m4 < m) { /* the last, partial group: padding records of weight 0 */
        const uint8_t *r[4];
        for (size_t t = 0; t < 4; t++) r[t] = m4 + t < m ? rp + t * stride : ZREC;
        q8a_group(r, L, QT, pa, pb, wh, wl, m4, H0, H1, L0, L1);
    }
    const __mmask16 k0 = lanes((size_t)L), k1 = lanes(L > 16 ? (size_t)(L - 16) : 0);
    for (int j = 0; j < QT; j++) {
        if (!ok[j]) continue;
        const __m512 sh = _mm512_set1_ps(st[j] * 256.0f), sl = _mm512_set1_ps(st[j]);
        float *y = a[j] + 32 * b;
        __m512 y0 = _mm512_maskz_loadu_ps(k0, y), y1 = _mm512_maskz_loadu_ps(k1, y + 16);
        y0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(L0[j]), sl, _mm512_fmadd_ps(_mm512_cvtepi32_ps(H0[j]), sh, y0));
        y1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(L1[j]), sl, _mm512_fmadd_ps(_mm512_cvtepi32_ps(H1[j]), sh, y1));
        _mm512_mask_storeu_ps(y, k0, y0);
        _mm512_mask_storeu_ps(y + 16, k1, y1);
    }
}

TV AI void q4a_pass(const uint8_t *codes, size_t stride, size_t m, int b, const int QT, const int D, const uint8_t *wh,
                    const uint8_t *wl, const float *st, const float *M, const int *ok, float *const *a) {
    const int nb = (D + 31) / 32, L = D - 32 * b < 32 ? D - 32 * b : 32;
    const size_t o = 4 * (size_t)nb + 16 * (size_t)b;
    const __m512i p16 = _mm512_loadu_si512(PERM16), m15 = _mm512_set1_epi8(15), m8 = _mm512_set1_epi8(8);
    __m512i HE[4], HO[4], LE[4], LO[4];
    for (int j = 0; j < QT; j++) HE[j] = HO[j] = LE[j] = LO[j] = _mm512_setzero_si512();
    for (size_t t0 = 0; t0 < m; t0 += 4) {
        const uint8_t *r[4];
        rec4(codes, stride, t0, m, o, r);
        const __m512i u = inter4_16(r, 0, L / 2, p16);
        const __m512i ue = _mm512_sub_epi8(_mm512_and_si512(u, m15), m8);
        const __m512i uo = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(u, 4), m15), m8);
        for (int j = 0; j < QT; j++) {
            int32_t h, l;
            memcpy(&h, wh + woff(j, t0), 4);
            memcpy(&l, wl + woff(j, t0), 4);
            const __m512i bh = _mm512_set1_epi32(h), bl = _mm512_set1_epi32(l);
            DPBUSD(HE[j], bh, ue);
            DPBUSD(HO[j], bh, uo);
            DPBUSD(LE[j], bl, ue);
            DPBUSD(LO[j], bl, uo);
        }
    }
    const __mmask16 k0 = lanes((size_t)L), k1 = lanes(L > 16 ? (size_t)(L - 16) : 0);
    const __m512i elo = _mm512_loadu_si512(EO_LO), ehi = _mm512_loadu_si512(EO_HI);
    for (int j = 0; j < QT; j++) {
        if (!ok[j]) continue;
        const __m512 sh = _mm512_set1_ps(st[j] * 256.0f), sl = _mm512_set1_ps(st[j]), mv = _mm512_set1_ps(M[j]);
        const __m512 fe = _mm512_fmadd_ps(_mm512_cvtepi32_ps(LE[j]), sl, _mm512_fmadd_ps(_mm512_cvtepi32_ps(HE[j]), sh, mv));
        const __m512 fo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(LO[j]), sl, _mm512_fmadd_ps(_mm512_cvtepi32_ps(HO[j]), sh, mv));
        float *y = a[j] + 32 * b;
        _mm512_mask_storeu_ps(y, k0, _mm512_add_ps(_mm512_maskz_loadu_ps(k0, y), _mm512_permutex2var_ps(fe, elo, fo)));
        _mm512_mask_storeu_ps(y + 16, k1, _mm512_add_ps(_mm512_maskz_loadu_ps(k1, y + 16), _mm512_permutex2var_ps(fe, ehi, fo)));
    }
}

/* q4 != 0: q4 records. */
TV AI void accv_body(const kvq_plan *p, const int q4, const float *w, size_t nq, const uint8_t *codes, size_t n,
                     float *acc, const int D) {
    const int nb = (D + 31) / 32;
    const size_t stride = p->code_bytes;
    float gs[4][RUN], gm[4][RUN];
    uint8_t wh[4 * RUN], wl[4 * RUN];
    float st[4], M[4];
    int ok[4];
    for (size_t i0 = 0; i0 < n; i0 += RUN) {
        const size_t m = n - i0 < RUN ? n - i0 : RUN;
        const uint8_t *c = codes + i0 * stride;
        for (int b = 0; b < nb; b++) {
            if (b % 4 == 0) run_scales(c, stride, m, b / 4, q4, gs, gm);
            const float *g = gs[b % 4], *gmb = q4 ? gm[b % 4] : NULL;
            for (size_t j0 = 0; j0 < nq; j0 += 4) {
                const int QT = nq - j0 < 4 ? (int)(nq - j0) : 4;
                float *a[4];
                const float *wr[4];
                for (int j = 0; j < QT; j++) {
                    a[j] = acc + (j0 + (size_t)j) * (size_t)D;
                    wr[j] = w + (j0 + (size_t)j) * n + i0;
                }
#define PASS(Q)                                                            \
    case Q:                                                                \
        run_weights(wr, Q, g, gmb, m, wh, wl, st, M, ok);                  \
        if (q4) q4a_pass(c, stride, m, b, Q, D, wh, wl, st, M, ok, a);     \
        else q8a_pass(c, stride, m, b, Q, D, wh, wl, st, ok, a);           \
        break;
                switch (QT) { PASS(1) PASS(2) PASS(3) PASS(4) }
#undef PASS
                for (int j = 0; j < QT; j++)
                    if (!ok[j]) run_float(p, q4, c, m, b, wr[j], g, gmb, a[j]);
            }
        }
    }
}

TV AI void q8a_body(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc, const int D) {
    accv_body(p, 0, w, nq, codes, n, acc, D);
}
TV AI void q4a_body(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc, const int D) {
    accv_body(p, 1, w, nq, codes, n, acc, D);
}
DISPATCH(q8_accum_vnni, q8a_body) /* qp: the weights, out: the accumulators */
DISPATCH(q4_accum_vnni, q4a_body)
#endif
