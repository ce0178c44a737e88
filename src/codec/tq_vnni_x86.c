/*
 * Integer value accumulation (AVX-512 VNNI + VBMI) for tq layouts with a
 * snapped codebook (<= 16 levels on the grid cscale * c8, tq_kernels.h):
 *
 *   acc_j[c] += sum_i w_ji * scale_i * cscale * c8[idx_ic]
 *
 * as integer dot products over TOKENS. Per query row and run of <= 256
 * records, the weights x_i = w_ji * scale_i (>= 0) are rounded to 16 bits,
 * u_i = rint(x_i * 65535 / xmax), and split into two bytes (hi, lo). For a
 * block of 4 records, the records' indices are interleaved byte-wise per
 * coordinate (lane = coordinate, its 4 bytes = the 4 records), turned into
 * signed centroid bytes by one vpermb of c8, and one vpdpbusd against the
 * broadcast hi bytes and one against the lo bytes of the 4 weights add 4
 * records into two int32 sums per coordinate: 2 instructions per 16
 * coordinates x 4 records x query, where the float kernel spends 4 FMAs
 * per record. At the end of the run acc += (256 H + L) * (xmax / 65535) *
 * cscale (float). The only approximation is the weight rounding: each x_i
 * moves by at most xmax / 131070 (+ float rounding of the product), so
 * |delta acc_c| <= 0.51 * n * xmax / 65535 * max|c|, ~1e-5 of the largest
 * weight's contribution, far below any codec's error; the integer sums are
 * exact (|H|, |L| <= 64 * 4 * 255 * 127 < 2^24, also exact as floats).
 * A run with a negative or non-finite weight (never produced by the cache's
 * softmax, but allowed by kvq_accumulate) is accumulated in float instead.
 */
#include <math.h>
#include <string.h>

#include "rec_transpose.h"
#include "tq_kernels.h"
#include "tq_vnni_table.h"

#if KVQ_X86
#define TV KVQ_TARGET_VNNI
#define AI static inline __attribute__((always_inline))

/* vpermb indices: byte 4l + t of the result = byte l (lanes of a 16-byte
 * chunk) of record t; records at bytes 16t (chunks of 16) or 8t (S = 8, the
 * 8 bytes serving lanes l and l + 8). */
static const uint8_t PERM16[64] = {
    0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51, 4, 20, 36, 52, 5, 21, 37, 53,
    6, 22, 38, 54, 7, 23, 39, 55, 8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
    12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63};
static const uint8_t PERM8[64] = {
    0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27, 4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30,
    7, 15, 23, 31, 0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27, 4, 12, 20, 28, 5, 13, 21, 29,
    6, 14, 22, 30, 7, 15, 23, 31};
static const uint8_t ZERO_REC[KVQ_DIM_MAX] = {0}; /* indices of the padding records (weight 0) */

#define RUN 256 /* records per run: one weight scale per (row, run) */

/* The 4 records' bytes o..o+15 (S >= 16) or o..o+7 (S == 8), interleaved:
 * lane l holds byte l (S == 8: l % 8) of records 0..3. */
TV AI __m512i inter4(const uint8_t *const r[4], size_t o, const int S, __m512i p16, __m512i p8) {
    if (S >= 16) {
        __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r[0] + o)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[1] + o)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[2] + o)), 2);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(r[3] + o)), 3);
        return _mm512_permutexvar_epi8(p16, z);
    }
    __m128i a = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(r[0] + o)), _mm_loadl_epi64((const __m128i *)(r[1] + o)));
    __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(r[2] + o)), _mm_loadl_epi64((const __m128i *)(r[3] + o)));
    return _mm512_permutexvar_epi8(p8, _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1)));
}

/* Signed centroid bytes of coordinates 16m..16m+15 of the 4 records (lane =
 * coordinate, byte t = record t). Constant D, B, m: everything folds. */
TV AI __m512i cent4(const uint8_t *const r[4], const int D, const int B, const int m, __m512i tab, __m512i p16, __m512i p8) {
    __m512i idx = _mm512_setzero_si512();
    size_t off = 0;
    int shift = 0;
    for (int f = 0; f < 3 && kvq_strided_width(B, f); f++) {
        const int w = kvq_strided_width(B, f), S = D * w / 8;
        const __m512i mask = _mm512_set1_epi8((char)((1 << w) - 1));
        __m512i x;
        if (S >= 16) {
            const int j0 = (16 * m) % S, k = (16 * m) / S;
            x = inter4(r, off + (size_t)j0, S, p16, p8);
            if (k) x = _mm512_srli_epi16(x, (unsigned)(w * k));
        } else { /* S == 8: lanes 0..7 hold field 2m, lanes 8..15 field 2m + 1 */
            x = inter4(r, off, S, p16, p8);
            const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16((short)(w * 2 * m)), _mm256_set1_epi16((short)(w * (2 * m + 1))), 1);
            x = _mm512_srlv_epi16(x, cnt);
        }
        x = _mm512_and_si512(x, mask);
        idx = shift ? _mm512_or_si512(idx, _mm512_slli_epi16(x, (unsigned)shift)) : x;
        off += (size_t)S;
        shift += w;
    }
    return _mm512_permutexvar_epi8(idx, tab);
}

/* Weights of rows j0..j0+QT-1 for records i0..i0+m-1, as 16-bit integers
 * split into hi / lo byte planes (4 records per dword, zero padding to a
 * multiple of 4); returns each row's float step xmax / 65535 in st. */
TV AI void prep_weights(const float *w, size_t n, size_t j0, const int QT, size_t i0, size_t m, const float *gam,
                        uint8_t (*wh)[RUN], uint8_t (*wl)[RUN], float *st) {
    for (int j = 0; j < QT; j++) {
        const float *wj = w + (j0 + (size_t)j) * n + i0;
        __m512 mx = _mm512_setzero_ps();
        for (size_t t = 0; t < m; t += 16) {
            const __mmask16 k = m - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - t)) - 1);
            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, wj + t), _mm512_maskz_loadu_ps(k, gam + t));
            mx = _mm512_max_ps(mx, x);
        }
        const float xmax = _mm512_reduce_max_ps(mx);
        st[j] = xmax / 65535.0f;
        const __m512 inv = _mm512_set1_ps(xmax > 0 ? 65535.0f / xmax : 0.0f);
        const __m512i top = _mm512_set1_epi32(65535);
        for (size_t t = 0; t < m; t += 16) {
            const __mmask16 k = m - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - t)) - 1);
            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, wj + t), _mm512_maskz_loadu_ps(k, gam + t));
            __m512i u = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inv)), top);
            _mm_storeu_si128((__m128i *)(wl[j] + t), _mm512_cvtepi32_epi8(u));
            _mm_storeu_si128((__m128i *)(wh[j] + t), _mm512_cvtepi32_epi8(_mm512_srli_epi32(u, 8)));
        }
        for (size_t t = m; t % 4; t++) wl[j][t] = wh[j][t] = 0;
    }
}

/* One pass: rows j0..j0+QT-1, a run of m <= RUN records. Tiles of VT
 * 16-coordinate vectors (QT * VT * 2 int32 accumulators), vectors ordered so
 * that a tile's vectors share their 16-byte chunks. */
TV AI void accv_pass(const tq_layout *L, size_t j0, const int QT, const uint8_t *codes, size_t m, float *acc,
                     uint8_t (*wh)[RUN], uint8_t (*wl)[RUN], const float *st, const int D, const int B) {
    const int NV = D / 16, S0 = D * kvq_strided_width(B, 0) / 8, C = S0 >= 16 ? S0 / 16 : 1, K = NV / C;
    const int VT0 = 8 / QT < NV ? 8 / QT : NV, VT = VT0 == 3 ? 2 : VT0; /* 8, 4, 2 (QT = 3: 2) */
    const __m512i tab = kvq_tq_c8_table(L->cb, 0), p16 = _mm512_loadu_si512(PERM16), p8 = _mm512_loadu_si512(PERM8);
    const size_t stride = L->stride, io = L->idx_off, nb = (m + 3) / 4;
    const float cs = L->cb->cscale;
#pragma GCC unroll 16
    for (int v0 = 0; v0 < NV; v0 += VT) {
        __m512i H[4][8], Lo[4][8];
        for (int j = 0; j < QT; j++)
            for (int v = 0; v < VT; v++) H[j][v] = Lo[j][v] = _mm512_setzero_si512();
        for (size_t bk = 0; bk < nb; bk++) {
            const uint8_t *r[4];
            const uint8_t *r0 = codes + 4 * bk * stride + io;
            if (4 * bk + 4 <= m) {
                r[0] = r0;
                r[1] = r0 + stride;
                r[2] = r0 + 2 * stride;
                r[3] = r0 + 3 * stride;
            } else /* the last, partial block: padding records of weight 0 */
                for (size_t t = 0; t < 4; t++) r[t] = 4 * bk + t < m ? r0 + t * stride : ZERO_REC;
            __m512i bh[4], bl[4];
            for (int j = 0; j < QT; j++) {
                int32_t h32, l32;
                memcpy(&h32, wh[j] + 4 * bk, 4);
                memcpy(&l32, wl[j] + 4 * bk, 4);
                bh[j] = _mm512_set1_epi32(h32);
                bl[j] = _mm512_set1_epi32(l32);
            }
            for (int v = 0; v < VT; v++) {
                const int o = v0 + v, mv = (o % K) * C + o / K;
                const __m512i u = cent4(r, D, B, mv, tab, p16, p8);
                for (int j = 0; j < QT; j++) {
                    DPBUSD(H[j][v], bh[j], u);
                    DPBUSD(Lo[j][v], bl[j], u);
                }
            }
        }
        for (int j = 0; j < QT; j++) {
            const __m512 sl = _mm512_set1_ps(st[j] * cs), sh = _mm512_set1_ps(st[j] * cs * 256.0f);
            float *a = acc + (j0 + (size_t)j) * (size_t)D;
            for (int v = 0; v < VT; v++) {
                const int o = v0 + v, mv = (o % K) * C + o / K;
                __m512 y = _mm512_loadu_ps(a + 16 * mv);
                y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(H[j][v]), sh, y);
                y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Lo[j][v]), sl, y);
                _mm512_storeu_ps(a + 16 * mv, y);
            }
        }
    }
}

/* Scales of m records as floats (F16C, 16 at a time). */
TV AI void load_scales(const tq_layout *L, const uint8_t *codes, size_t m, float *gam) {
    if (L->scale32) {
        for (size_t i = 0; i < m; i++) memcpy(gam + i, codes + i * L->stride + L->scale_off, 4);
        return;
    }
    uint16_t h[RUN];
    for (size_t i = 0; i < m; i++) memcpy(h + i, codes + i * L->stride + L->scale_off, 2);
    for (size_t i = 0; i < m; i += 16) {
        const __mmask16 k = m - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - i)) - 1);
        _mm512_mask_storeu_ps(gam + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, h + i)));
    }
}

/* 1 if w_ji * gam_i is finite and >= 0 for every row and record of the run. */
TV AI int run_ok(const float *w, size_t n, size_t nq, size_t i0, size_t m, const float *gam) {
    const __m512 inf = _mm512_set1_ps(INFINITY), zero = _mm512_setzero_ps();
    for (size_t j = 0; j < nq; j++)
        for (size_t t = 0; t < m; t += 16) {
            const __mmask16 k = m - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (m - t)) - 1);
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + j * n + i0 + t), _mm512_maskz_loadu_ps(k, gam + t));
            if ((_mm512_cmp_ps_mask(x, zero, _CMP_GE_OQ) & _mm512_cmp_ps_mask(x, inf, _CMP_LT_OQ) & k) != k) return 0;
        }
    return 1;
}

/* Float fallback for one run (negative or non-finite weights). */
static void run_float(const tq_layout *L, const float *w, size_t n, size_t nq, size_t i0, size_t m, const uint8_t *codes,
                      const float *gam, float *acc) {
    uint8_t idx[KVQ_DIM_MAX];
    for (size_t i = 0; i < m; i++) {
        strided_unpack(codes + i * L->stride + L->idx_off, L->d, L->b, idx);
        for (size_t j = 0; j < nq; j++) {
            const float wg = w[j * n + i0 + i] * gam[i];
            float *a = acc + j * (size_t)L->d;
            for (int c = 0; c < L->d; c++) a[c] += wg * L->cb->c[idx[c]];
        }
    }
}

TV AI void accv_body(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc,
                     const int D, const int B) {
    float gam[RUN];
    uint8_t wh[4][RUN], wl[4][RUN];
    float st[4];
    for (size_t i0 = 0; i0 < n; i0 += RUN) {
        const size_t m = n - i0 < RUN ? n - i0 : RUN;
        const uint8_t *c = codes + i0 * L->stride;
        load_scales(L, c, m, gam);
        if (!run_ok(w, n, nq, i0, m, gam)) {
            run_float(L, w, n, nq, i0, m, c, gam, acc);
            continue;
        }
        for (size_t j0 = 0; j0 < nq; j0 += 4) {
            const size_t q = nq - j0 < 4 ? nq - j0 : 4;
#define PASS(QT)                                                                   \
    case QT:                                                                       \
        prep_weights(w, n, j0, QT, i0, m, gam, wh, wl, st);                        \
        accv_pass(L, j0, QT, c, m, acc, wh, wl, st, D, B);                         \
        break;
            switch (q) { PASS(1) PASS(2) PASS(3) PASS(4) }
#undef PASS
        }
    }
}

#define TQ_ACCV(X) X(64, 1) X(64, 2) X(64, 3) X(64, 4) X(128, 1) X(128, 2) X(128, 3) X(128, 4) \
    X(256, 1) X(256, 2) X(256, 3) X(256, 4)
#define DEF_ACCV(D, B)                                                                                        \
    TV static void accv_##D##_##B(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, \
                                  float *acc) {                                                               \
        accv_body(L, w, nq, codes, n, acc, D, B);                                                             \
    }
TQ_ACCV(DEF_ACCV)

int tq_accum_vnni(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    if (!L->vnni || !L->cb->snapped || L->b > 4 || n == 0) return 0;
    int served = 0;
#define HAS_V(D, B) served |= L->d == D && L->b == B;
    TQ_ACCV(HAS_V)
#undef HAS_V
    if (!served) return 0;
#define CASE_V(D, B) if (L->d == D && L->b == B) { accv_##D##_##B(L, w, nq, codes, n, acc); return 1; }
    TQ_ACCV(CASE_V)
#undef CASE_V
    return 0;
}

/* ---- integer scores with lanes = 16 records ---------------------------------
 * The float and per-record VNNI kernels (tq_kernels_x86.c) reduce 16 lanes to
 * one score per record and query (a horizontal sum: ~a third of their time
 * at d = 128 and half at d = 64). Here a 16-lane vector holds 16 records:
 * lane = record, its 4 bytes = 4 consecutive coordinates (the packed dwords
 * of 16 records transposed by unpacks), so one vpdpbusd against the query's
 * 4 bytes (broadcast) adds 4 coordinates of 16 records, and the sums need no
 * reduction. Same integer sums as the reference, so the same bits. The
 * transpose: dwords16_transpose (rec_transpose.h). */

/* Rows j0..j0+QT-1 against all n records. */
TV AI void stok_pass(const tq_layout *L, const float *qp, size_t qs, size_t j0, const int QT, const uint8_t *codes,
                     size_t n, float *scores, const int D, const int B) {
    const int w0 = kvq_strided_width(B, 0), S0 = D * w0 / 8, w1 = kvq_strided_width(B, 1), S1 = D * w1 / 8;
    const int NGC = S0 >= 16 ? 4 : 2; /* dwords per chunk */
    uint8_t tb[64] = {0};
    for (int i = 0; i < L->cb->n; i++) tb[i] = (uint8_t)(L->cb->c8[i] + 128);
    const __m512i tab = _mm512_loadu_si512(tb);
    /* lane 4i + q holds record 4q + i: the same map back */
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const size_t stride = L->stride, io = L->idx_off;
    const float cs = L->cb->cscale;
    const int8_t *q8[4];
    float bias[4], qsc[4];
    for (int j = 0; j < QT; j++) {
        const float *qr = qp + (j0 + (size_t)j) * qs;
        q8[j] = (const int8_t *)(const void *)(qr + 2 * D + 2);
        bias[j] = 128.0f * qr[2 * D + 1];
        qsc[j] = qr[2 * D] * cs;
    }
    float gam[16];
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        const size_t m = n - i0 < 16 ? n - i0 : 16;
        const uint8_t *r[16];
        for (size_t t = 0; t < 16; t++) r[t] = t < m ? codes + (i0 + t) * stride + io : ZERO_REC;
        __m512i acc[4];
        for (int j = 0; j < QT; j++) acc[j] = _mm512_setzero_si512();
        for (int c0 = 0; c0 < (S0 >= 16 ? S0 : 16); c0 += 16) {
            __m512i X0[4], X1[4];
            dwords16_transpose(r, (size_t)c0, S0, X0);
            /* the 1-bit sub-field of b = 3 (S1 = S0 / 2): coordinate
             * 4g + k S0 + p sits in its dword g mod (S1/4), field 2k + g / (S1/4) */
            if (w1) dwords16_transpose(r, (size_t)S0 + (S1 >= 16 ? (size_t)(c0 % S1) : 0), S1, X1);
            for (int gi = 0; gi < NGC; gi++) {
                const int g = c0 / 4 + gi;
                for (int k = 0; k < 8 / w0; k++) {
                    __m512i idx = X0[gi];
                    if (k) idx = _mm512_srli_epi16(idx, (unsigned)(w0 * k));
                    idx = _mm512_and_si512(idx, _mm512_set1_epi8((char)((1 << w0) - 1)));
                    if (w1) {
                        const int g1 = S1 >= 16 ? gi : gi % 2, f1 = 2 * k + (S1 >= 16 ? c0 / S1 : gi / 2);
                        __m512i y = X1[g1];
                        if (f1) y = _mm512_srli_epi16(y, (unsigned)(w1 * f1));
                        y = _mm512_and_si512(y, _mm512_set1_epi8((char)((1 << w1) - 1)));
                        idx = _mm512_or_si512(idx, _mm512_slli_epi16(y, (unsigned)w0));
                    }
                    const __m512i u = _mm512_permutexvar_epi8(idx, tab);
                    const int qd = g + k * S0 / 4; /* query dword: coordinates 4 qd .. 4 qd + 3 */
                    for (int j = 0; j < QT; j++) {
                        int32_t qw;
                        memcpy(&qw, q8[j] + 4 * qd, 4);
                        acc[j] = _mm512_dpbusd_epi32(acc[j], u, _mm512_set1_epi32(qw));
                    }
                }
            }
        }
        load_scales(L, codes + i0 * stride, m, gam);
        const __mmask16 km = m == 16 ? (__mmask16)0xffff : (__mmask16)((1u << m) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(km, gam);
        for (int j = 0; j < QT; j++) {
            /* lanes are exact integers < 2^24, as is the bias: the float
             * subtraction is exact; then scale, then sq * cscale, as tq_score */
            __m512 v = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(perm, acc[j])), _mm512_set1_ps(bias[j]));
            v = _mm512_mul_ps(_mm512_mul_ps(v, gv), _mm512_set1_ps(qsc[j]));
            _mm512_mask_storeu_ps(scores + (j0 + (size_t)j) * n + i0, km, v);
        }
    }
}

TV AI void stok_body(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes, size_t n,
                     float *scores, const int D, const int B) {
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t q = nq - j0 < 4 ? nq - j0 : 4;
        switch (q) {
        case 1: stok_pass(L, qp, qs, j0, 1, codes, n, scores, D, B); break;
        case 2: stok_pass(L, qp, qs, j0, 2, codes, n, scores, D, B); break;
        case 3: stok_pass(L, qp, qs, j0, 3, codes, n, scores, D, B); break;
        default: stok_pass(L, qp, qs, j0, 4, codes, n, scores, D, B); break;
        }
    }
}

#define DEF_STOK(D, B)                                                                                         \
    TV static void stok_##D##_##B(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes, \
                                  size_t n, float *scores) {                                                   \
        stok_body(L, qp, qs, nq, codes, n, scores, D, B);                                                      \
    }
TQ_ACCV(DEF_STOK)

int tq_score_tok(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                 float *scores) {
    if (!L->vnni || !L->cb->snapped || L->b > 4 || n < 16) return 0;
#define CASE_S(D, B) if (L->d == D && L->b == B) { stok_##D##_##B(L, qp, qstride, nq, codes, n, scores); return 1; }
    TQ_ACCV(CASE_S)
#undef CASE_S
    return 0;
}
#else
int tq_accum_vnni(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    (void)L; (void)w; (void)nq; (void)codes; (void)n; (void)acc;
    return 0;
}
int tq_score_tok(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                 float *scores) {
    (void)L; (void)qp; (void)qstride; (void)nq; (void)codes; (void)n; (void)scores;
    return 0;
}
#endif
