/*
 * QJL sign-sketch scores, SIMD: for each record and query,
 *   sum_j sign_j sq_j = 2 * sum_{j: bit set} sq_j - sum_j sq_j,
 * a masked add of the projected query per 16 (AVX-512: the 16 sign bits are
 * the mask register) or 8 (AVX2: bits expanded by compare) signs, 4 queries
 * per pass over a record. The total sum_j sq_j is computed once per call.
 */
#include <string.h>

#include "codec_internal.h"
#include "rec_transpose.h"

void qjl_scores_ref(const qjl_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                    float *scores) {
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * L->stride;
        float nrm;
        if (L->scale32) memcpy(&nrm, rec + L->norm_off, 4);
        else {
            uint16_t h;
            memcpy(&h, rec + L->norm_off, 2);
            nrm = kvq_f16_to_f32(h);
        }
        for (size_t j = 0; j < nq; j++) {
            const float *sq = qp + j * qstride;
            float e = L->k * nrm * qjl_signed_sum(rec + L->sign_off, sq, L->m);
            scores[j * n + i] = L->add ? scores[j * n + i] + e : e;
        }
    }
}

#if KVQ_X86
KVQ_TARGET_AVX512 static void qjl_scores_avx512(const qjl_layout *L, const float *qp, size_t qstride, size_t nq,
                                                const uint8_t *codes, size_t n, float *scores) {
    const int m = L->m;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t g = nq - j0 < 4 ? nq - j0 : 4;
        const float *q[4];
        float tot[4];
        for (size_t j = 0; j < 4; j++) {
            q[j] = qp + (j0 + (j < g ? j : 0)) * qstride;
            __m512 t = _mm512_setzero_ps();
            for (int c = 0; c < m; c += 16) t = _mm512_add_ps(t, _mm512_loadu_ps(q[j] + c));
            tot[j] = _mm512_reduce_add_ps(t);
        }
        const __m128 vt = _mm_loadu_ps(tot);
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * L->stride, *sb = rec + L->sign_off;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < m; c += 16) {
                uint16_t bits;
                memcpy(&bits, sb + c / 8, 2);
                const __mmask16 k = bits;
                a0 = _mm512_mask_add_ps(a0, k, a0, _mm512_loadu_ps(q[0] + c));
                a1 = _mm512_mask_add_ps(a1, k, a1, _mm512_loadu_ps(q[1] + c));
                a2 = _mm512_mask_add_ps(a2, k, a2, _mm512_loadu_ps(q[2] + c));
                a3 = _mm512_mask_add_ps(a3, k, a3, _mm512_loadu_ps(q[3] + c));
            }
            float nrm;
            if (L->scale32) memcpy(&nrm, rec + L->norm_off, 4);
            else {
                uint16_t h;
                memcpy(&h, rec + L->norm_off, 2);
                nrm = _cvtsh_ss(h);
            }
            __m128 pos = hsum4_512(a0, a1, a2, a3);
            __m128 e = _mm_mul_ps(_mm_sub_ps(_mm_add_ps(pos, pos), vt), _mm_set1_ps(L->k * nrm));
            float s[4];
            _mm_storeu_ps(s, e);
            for (size_t j = 0; j < g; j++) {
                float *o = scores + (j0 + j) * n + i;
                *o = L->add ? *o + s[j] : s[j];
            }
        }
    }
}

/* Lanes = 16 records (m % 64 == 0, m <= 256; a tail of n % 16 is masked): the records' sign
 * dwords are transposed by unpacks (lane 4i + q = record 4q + i); each
 * nibble (4 signs) of 16 records is an index into a per-call table of the 16
 * partial sums of those 4 sq_j, so one vpermps and one add per query add 4
 * signs of 16 records; no horizontal sums (the kernel above spends about
 * half its instructions reducing 4 x 16 lanes per record). Same sums,
 * another order: equal to the reference within float rounding, as the
 * kernel above. The transpose: dwords16_transpose (rec_transpose.h). */
KVQ_TARGET_AVX512 static inline __attribute__((always_inline)) void
qjl_tok_pass(const qjl_layout *L, const float *const q[4], const float *tot, const int QT, const uint8_t *codes, size_t n,
             float *const out[4]) {
    static const uint8_t zero[64] = {0};
    const int m = L->m;
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    /* per row and group of 4 signs, the 16 possible partial sums
     * T[g][p] = sum_k bit k of p * sq_{4g+k}: one vpermps per nibble */
    float T[4][64][16];
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 bk[4];
    for (int k = 0; k < 4; k++)
        bk[k] = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(lane, (unsigned)k), _mm512_set1_epi32(1)));
    for (int j = 0; j < QT; j++)
        for (int g = 0; g < m / 4; g++) {
            __m512 t = _mm512_mul_ps(bk[0], _mm512_set1_ps(q[j][4 * g]));
            t = _mm512_fmadd_ps(bk[1], _mm512_set1_ps(q[j][4 * g + 1]), t);
            t = _mm512_fmadd_ps(bk[2], _mm512_set1_ps(q[j][4 * g + 2]), t);
            t = _mm512_fmadd_ps(bk[3], _mm512_set1_ps(q[j][4 * g + 3]), t);
            _mm512_storeu_ps(T[j][g], t);
        }
    for (size_t i0 = 0; i0 < n; i0 += 16) {
        const size_t cnt = n - i0 < 16 ? n - i0 : 16;
        const uint8_t *r[16];
        for (size_t t = 0; t < 16; t++) r[t] = t < cnt ? codes + (i0 + t) * L->stride + L->sign_off : zero;
        __m512 acc[4];
        for (int j = 0; j < QT; j++) acc[j] = _mm512_setzero_ps();
        for (int c0 = 0; c0 < m / 8; c0 += 16) {
            const int S = m / 8 - c0 >= 16 ? 16 : 8;
            __m512i X[4];
            dwords16_transpose(r, (size_t)c0, S, X);
            for (int gi = 0; gi < S / 4; gi++)
                for (int nb = 0; nb < 8; nb++) { /* signs 4g..4g+3, g = 2 (c0 + 4 gi) + nb */
                    const __m512i idx = _mm512_and_si512(_mm512_srli_epi32(X[gi], (unsigned)(4 * nb)), _mm512_set1_epi32(15));
                    const int g = 2 * (c0 + 4 * gi) + nb;
                    for (int j = 0; j < QT; j++) acc[j] = _mm512_add_ps(acc[j], _mm512_permutexvar_ps(idx, _mm512_loadu_ps(T[j][g])));
                }
        }
        float nrm[16];
        for (size_t t = 0; t < 16; t++) {
            const uint8_t *rec = r[t] - L->sign_off;
            if (t >= cnt) nrm[t] = 0;
            else if (L->scale32) memcpy(nrm + t, rec + L->norm_off, 4);
            else {
                uint16_t h;
                memcpy(&h, rec + L->norm_off, 2);
                nrm[t] = _cvtsh_ss(h);
            }
        }
        const __m512 kn = _mm512_mul_ps(_mm512_loadu_ps(nrm), _mm512_set1_ps(L->k));
        const __mmask16 km = cnt == 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1);
        for (int j = 0; j < QT; j++) {
            const __m512 pos = _mm512_permutexvar_ps(perm, acc[j]);
            __m512 e = _mm512_mul_ps(_mm512_sub_ps(_mm512_add_ps(pos, pos), _mm512_set1_ps(tot[j])), kn);
            float *o = out[j] + i0;
            if (L->add) e = _mm512_add_ps(_mm512_maskz_loadu_ps(km, o), e);
            _mm512_mask_storeu_ps(o, km, e);
        }
    }
}

KVQ_TARGET_AVX512 static void qjl_scores_tok512(const qjl_layout *L, const float *qp, size_t qstride, size_t nq,
                                                const uint8_t *codes, size_t n, float *scores) {
    const int m = L->m;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t g = nq - j0 < 4 ? nq - j0 : 4;
        const float *q[4];
        float *out[4];
        float tot[4];
        for (size_t j = 0; j < 4; j++) {
            q[j] = qp + (j0 + (j < g ? j : 0)) * qstride;
            out[j] = scores + (j0 + (j < g ? j : 0)) * n;
            __m512 t = _mm512_setzero_ps();
            for (int c = 0; c < m; c += 16) t = _mm512_add_ps(t, _mm512_loadu_ps(q[j] + c));
            tot[j] = _mm512_reduce_add_ps(t);
        }
        switch (g) {
        case 1: qjl_tok_pass(L, q, tot, 1, codes, n, out); break;
        case 2: qjl_tok_pass(L, q, tot, 2, codes, n, out); break;
        case 3: qjl_tok_pass(L, q, tot, 3, codes, n, out); break;
        default: qjl_tok_pass(L, q, tot, 4, codes, n, out); break;
        }
    }
}

KVQ_TARGET_AVX2 static void qjl_scores_avx2(const qjl_layout *L, const float *qp, size_t qstride, size_t nq,
                                            const uint8_t *codes, size_t n, float *scores) {
    const int m = L->m;
    const __m256i bitsel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t g = nq - j0 < 4 ? nq - j0 : 4;
        const float *q[4];
        float tot[4];
        for (size_t j = 0; j < 4; j++) {
            q[j] = qp + (j0 + (j < g ? j : 0)) * qstride;
            __m256 t = _mm256_setzero_ps();
            for (int c = 0; c < m; c += 8) t = _mm256_add_ps(t, _mm256_loadu_ps(q[j] + c));
            tot[j] = hsum_256(t);
        }
        const __m128 vt = _mm_loadu_ps(tot);
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * L->stride, *sb = rec + L->sign_off;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < m; c += 8) {
                __m256i b = _mm256_and_si256(_mm256_set1_epi32(sb[c / 8]), bitsel);
                __m256 k = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bitsel));
                a0 = _mm256_add_ps(a0, _mm256_and_ps(k, _mm256_loadu_ps(q[0] + c)));
                a1 = _mm256_add_ps(a1, _mm256_and_ps(k, _mm256_loadu_ps(q[1] + c)));
                a2 = _mm256_add_ps(a2, _mm256_and_ps(k, _mm256_loadu_ps(q[2] + c)));
                a3 = _mm256_add_ps(a3, _mm256_and_ps(k, _mm256_loadu_ps(q[3] + c)));
            }
            float nrm;
            if (L->scale32) memcpy(&nrm, rec + L->norm_off, 4);
            else {
                uint16_t h;
                memcpy(&h, rec + L->norm_off, 2);
                nrm = _cvtsh_ss(h);
            }
            __m128 pos = hsum4_256(a0, a1, a2, a3);
            __m128 e = _mm_mul_ps(_mm_sub_ps(_mm_add_ps(pos, pos), vt), _mm_set1_ps(L->k * nrm));
            float s[4];
            _mm_storeu_ps(s, e);
            for (size_t j = 0; j < g; j++) {
                float *o = scores + (j0 + j) * n + i;
                *o = L->add ? *o + s[j] : s[j];
            }
        }
    }
}
#endif

void qjl_scores(const qjl_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                float *scores, kvq_isa isa) {
#if KVQ_X86
    /* any n, tails included (qjl_tok_pass masks them): choosing the kernel by n made a
     * token's score depend on how many keys shared its call (decode vs prefill tiles) */
    if (isa >= KVQ_ISA_AVX512 && L->m % 64 == 0 && L->m <= 256) {
        qjl_scores_tok512(L, qp, qstride, nq, codes, n, scores);
        return;
    }
    if (isa >= KVQ_ISA_AVX512 && L->m % 16 == 0) { qjl_scores_avx512(L, qp, qstride, nq, codes, n, scores); return; }
    if (isa >= KVQ_ISA_AVX2) { qjl_scores_avx2(L, qp, qstride, nq, codes, n, scores); return; }
#endif
    (void)isa;
    qjl_scores_ref(L, qp, qstride, nq, codes, n, scores);
}
