/*
 * QJL sign-sketch scores, SIMD: for each record and query,
 *   sum_j sign_j sq_j = 2 * sum_{j: bit set} sq_j - sum_j sq_j,
 * a masked add of the projected query per 16 (AVX-512: the 16 sign bits are
 * the mask register) or 8 (AVX2: bits expanded by compare) signs, 4 queries
 * per pass over a record. The total sum_j sq_j is computed once per call.
 */
#include <string.h>

#include "codec_internal.h"
#include "simd_util.h"

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
    if (isa >= KVQ_ISA_AVX512 && L->m % 16 == 0) { qjl_scores_avx512(L, qp, qstride, nq, codes, n, scores); return; }
    if (isa >= KVQ_ISA_AVX2) { qjl_scores_avx2(L, qp, qstride, nq, codes, n, scores); return; }
#endif
    (void)isa;
    qjl_scores_ref(L, qp, qstride, nq, codes, n, scores);
}
