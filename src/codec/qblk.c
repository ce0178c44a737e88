/* 8-bit queries of q8 / q4 (qblk.h): scalar reference and AVX2 (the same
 * bytes and floats: max and integer sums do not depend on the order, and
 * cvtps2dq rounds to nearest even like lrintf). And the AVX2 float value
 * accumulation of both (4 rows per decoded record). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "qblk.h"
#include "simd_util.h"

#if KVQ_X86
KVQ_TARGET_AVX2 static void prep_avx2(int d, int q4, const float *q, float *qp) {
    const int nb = qblk_nb(d);
    int8_t *q8 = (int8_t *)(void *)(qp + 2 * nb);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = _mm256_set1_ps(FLT_MAX);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127), ord = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i eo = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1,
                                        3, 5, 7, 9, 11, 13, 15);
    for (int b = 0; b < nb; b++) {
        const int nv = d - 32 * b >= 32 ? 4 : (d - 32 * b) / 8;
        __m256 x[4], a = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int v = 0; v < 4; v++) {
            x[v] = v < nv ? _mm256_loadu_ps(q + 32 * b + 8 * v) : _mm256_setzero_ps();
            const __m256 ax = _mm256_and_ps(x[v], absm);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(ax, big, _CMP_NLE_UQ)); /* > FLT_MAX or NaN */
            a = _mm256_max_ps(a, ax);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float m = _mm_cvtss_f32(m4);
        if (_mm256_movemask_ps(bad) || !(m >= 1e-30f)) {
            qp[b] = _mm256_movemask_ps(bad) ? NAN : 0.0f;
            qp[nb + b] = 0;
            memset(q8 + 32 * b, 0, 32);
            continue;
        }
        const __m256 inv = _mm256_set1_ps(127.0f / m);
        __m256i v[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x[k], inv)), lo), hi);
            sum = _mm256_add_epi32(sum, v[k]);
        }
        /* packs interleave the 128-bit lanes: dwords back in order by ord */
        __m256i y = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
        y = _mm256_permutevar8x32_epi32(y, ord);
        if (q4) y = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(y, eo), 0xD8); /* evens, then odds */
        _mm256_storeu_si256((__m256i *)(void *)(q8 + 32 * b), y);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
        qp[b] = m / 127.0f;
        qp[nb + b] = (float)_mm_cvtsi128_si32(s);
    }
}

/* 16 (L = 8: 8) decoded values at coordinate c (c % 8 == 0) of a record,
 * as the scalar decoders compute them (q8: s * k8; q4: m + s * n, s * n exact). */
KVQ_TARGET_AVX2 static inline __attribute__((always_inline)) void vals16(const uint8_t *rec, int nb, int c, int L, const int q4,
                                                                          __m256 *v0, __m256 *v1) {
    uint16_t h[2];
    if (q4) {
        memcpy(h, rec + 4 * (c / 32), 4);
        __m128i b;
        if (L == 16) b = _mm_loadl_epi64((const __m128i *)(const void *)(rec + 4 * nb + c / 2));
        else {
            uint32_t u;
            memcpy(&u, rec + 4 * nb + c / 2, 4);
            b = _mm_cvtsi32_si128((int)u);
        }
        const __m128i m15 = _mm_set1_epi8(15);
        const __m128i x = _mm_unpacklo_epi8(_mm_and_si128(b, m15), _mm_and_si128(_mm_srli_epi16(b, 4), m15));
        const __m256 s = _mm256_set1_ps(_cvtsh_ss(h[0])), m = _mm256_set1_ps(_cvtsh_ss(h[1]));
        *v0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), s, m);
        *v1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8))), s, m);
    } else {
        memcpy(h, rec + 2 * (c / 32), 2);
        const int8_t *k = (const int8_t *)(rec + 2 * nb + c);
        const __m256 s = _mm256_set1_ps(_cvtsh_ss(h[0]));
        *v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)k))), s);
        *v1 = L == 16 ? _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(k + 8)))), s)
                      : _mm256_setzero_ps();
    }
}

/* acc rows j0..j0+QT-1 += w * decoded values, QT rows x 16 coordinates in
 * registers: each record's values decoded once per QT <= 4 rows. */
KVQ_TARGET_AVX2 static inline __attribute__((always_inline)) void accum_rows(const kvq_plan *p, const float *w, size_t j0,
                                                                              const int QT, const uint8_t *codes, size_t n,
                                                                              float *acc, const int q4) {
    const int d = p->d, nb = qblk_nb(d);
    for (int c = 0; c < d; c += 16) {
        const int L = d - c >= 16 ? 16 : 8;
        __m256 a[4][2];
        for (int j = 0; j < QT; j++) {
            const float *y = acc + (j0 + (size_t)j) * (size_t)d + c;
            a[j][0] = _mm256_loadu_ps(y);
            a[j][1] = L == 16 ? _mm256_loadu_ps(y + 8) : _mm256_setzero_ps();
        }
        for (size_t i = 0; i < n; i++) {
            __m256 v0, v1;
            vals16(codes + i * p->code_bytes, nb, c, L, q4, &v0, &v1);
            for (int j = 0; j < QT; j++) {
                const __m256 wi = _mm256_broadcast_ss(w + (j0 + (size_t)j) * n + i);
                a[j][0] = _mm256_fmadd_ps(wi, v0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(wi, v1, a[j][1]);
            }
        }
        for (int j = 0; j < QT; j++) {
            float *y = acc + (j0 + (size_t)j) * (size_t)d + c;
            _mm256_storeu_ps(y, a[j][0]);
            if (L == 16) _mm256_storeu_ps(y + 8, a[j][1]);
        }
    }
}

KVQ_TARGET_AVX2 static inline __attribute__((always_inline)) void accum_g4(const kvq_plan *p, const float *w, size_t nq,
                                                                            const uint8_t *codes, size_t n, float *acc, const int q4) {
    for (size_t j0 = 0; j0 < nq; j0 += 4) switch (nq - j0 < 4 ? nq - j0 : 4) {
        case 1: accum_rows(p, w, j0, 1, codes, n, acc, q4); break;
        case 2: accum_rows(p, w, j0, 2, codes, n, acc, q4); break;
        case 3: accum_rows(p, w, j0, 3, codes, n, acc, q4); break;
        default: accum_rows(p, w, j0, 4, codes, n, acc, q4); break;
        }
}

KVQ_TARGET_AVX2 void qblk_accum_avx2_q8(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    accum_g4(p, w, nq, codes, n, acc, 0);
}
KVQ_TARGET_AVX2 void qblk_accum_avx2_q4(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    accum_g4(p, w, nq, codes, n, acc, 1);
}
#endif

void qblk_prep(int d, int q4, const float *q, float *qp, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX2) {
        prep_avx2(d, q4, q, qp);
        return;
    }
#else
    (void)isa;
#endif
    const int nb = qblk_nb(d);
    int8_t *q8 = (int8_t *)(void *)(qp + 2 * nb);
    memset(q8, 0, 32 * (size_t)nb);
    for (int b = 0; b < nb; b++) {
        const int lo = 32 * b, hi = lo + 32 < d ? lo + 32 : d;
        float m = 0;
        int bad = 0;
        for (int c = lo; c < hi; c++) {
            const float a = fabsf(q[c]);
            bad |= !(a <= FLT_MAX);
            m = fmaxf(m, a);
        }
        if (bad || !(m >= 1e-30f)) {
            qp[b] = bad ? NAN : 0.0f;
            qp[nb + b] = 0;
            continue;
        }
        const float inv = 127.0f / m;
        int sum = 0;
        for (int c = lo; c < hi; c++) {
            long v = lrintf(q[c] * inv);
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q8[q4 ? qblk_q4pos(c) : c] = (int8_t)v;
            sum += (int)v;
        }
        qp[b] = m / 127.0f;
        qp[nb + b] = (float)sum;
    }
}
