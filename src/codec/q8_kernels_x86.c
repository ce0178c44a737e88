/* AVX2 / AVX-512 kernels of q8 (int8 + f16 scale per 32 values): integer
 * scores with 8-bit queries (AVX2, also used by AVX-512 CPUs without VNNI),
 * float value accumulation (AVX-512; AVX2: qblk.c). AVX-512 VNNI:
 * qblk_vnni_x86.c. */
#include <string.h>

#include "codec_internal.h"
#include "qblk.h"
#include "simd_util.h"

#if KVQ_X86
KVQ_TARGET_AVX2 static inline float blk_scale(const uint8_t *rec, int b) {
    uint16_t h;
    memcpy(&h, rec + 2 * b, 2);
    return _cvtsh_ss(h);
}

/* Integer scores (qblk.h), 4 query rows per pass: per block, |k8| x
 * sign(q8, k8) by maddubs (pairs <= 2 * 128 * 127, no saturation), madd to
 * int32, one 4-row horizontal sum, then the block's float fma. */
KVQ_TARGET_AVX2 static void score_avx2(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                                       float *scores) {
    const int d = p->d, nb = qblk_nb(d), tail = d - 32 * (nb - 1);
    const size_t qs = p->qfloats;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i tmask = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail / 4), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q[4];
        for (size_t j = 0; j < 4; j++) q[j] = qp + (j0 + (j0 + j < nq ? j : 0)) * qs;
        const int8_t *q8[4] = {qblk_q8(q[0], nb), qblk_q8(q[1], nb), qblk_q8(q[2], nb), qblk_q8(q[3], nb)};
        __m128 sqv[KVQ_DIM_MAX / 32];
        for (int b = 0; b < nb; b++) sqv[b] = _mm_setr_ps(q[0][b], q[1][b], q[2][b], q[3][b]);
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * p->code_bytes;
            const int8_t *k8 = (const int8_t *)(rec + 2 * nb);
            __m128 s = _mm_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m256i kv = b < nb - 1 || tail == 32 ? _mm256_loadu_si256((const __m256i *)(k8 + 32 * b))
                                                            : _mm256_maskload_epi32((const int *)(const void *)(k8 + 32 * b), tmask);
                const __m256i ak = _mm256_abs_epi8(kv);
                __m256i I[4];
                for (int j = 0; j < 4; j++) {
                    const __m256i qv = _mm256_loadu_si256((const __m256i *)(q8[j] + 32 * b));
                    I[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ak, _mm256_sign_epi8(qv, kv)), ones);
                }
                const __m128 t = _mm_mul_ps(_mm_set1_ps(blk_scale(rec, b)), sqv[b]);
                s = _mm_fmadd_ps(t, _mm_cvtepi32_ps(hsum4_epi32_256(I[0], I[1], I[2], I[3])), s);
            }
            float o[4];
            _mm_storeu_ps(o, s);
            for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = o[j - j0];
        }
    }
}

KVQ_TARGET_AVX512 static inline __m512 q8_vals16(const uint8_t *rec, int nb, int c) {
    const int8_t *q = (const int8_t *)(rec + 2 * nb);
    __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + c))));
    return _mm512_mul_ps(v, _mm512_set1_ps(blk_scale(rec, c / 32)));
}

KVQ_TARGET_AVX512 static void accum_avx512(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes,
                                           size_t n, float *acc) {
    const int d = p->d, nb = (d + 31) / 32;
    for (size_t j = 0; j < nq; j++) {
        const float *wj = w + j * n;
        float *aj = acc + j * (size_t)d;
        int c = 0;
        for (; c + 64 <= d; c += 64) {
            __m512 a0 = _mm512_loadu_ps(aj + c), a1 = _mm512_loadu_ps(aj + c + 16);
            __m512 a2 = _mm512_loadu_ps(aj + c + 32), a3 = _mm512_loadu_ps(aj + c + 48);
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * p->code_bytes;
                const int8_t *q = (const int8_t *)(rec + 2 * nb) + c;
                __m512 w0 = _mm512_set1_ps(wj[i] * blk_scale(rec, c / 32));
                __m512 w1 = _mm512_set1_ps(wj[i] * blk_scale(rec, c / 32 + 1));
                a0 = _mm512_fmadd_ps(w0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), a0);
                a1 = _mm512_fmadd_ps(w0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)))), a1);
                a2 = _mm512_fmadd_ps(w1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 32)))), a2);
                a3 = _mm512_fmadd_ps(w1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 48)))), a3);
            }
            _mm512_storeu_ps(aj + c, a0);
            _mm512_storeu_ps(aj + c + 16, a1);
            _mm512_storeu_ps(aj + c + 32, a2);
            _mm512_storeu_ps(aj + c + 48, a3);
        }
        for (; c < d; c += 16) {
            __m512 a0 = _mm512_loadu_ps(aj + c);
            for (size_t i = 0; i < n; i++) a0 = _mm512_fmadd_ps(_mm512_set1_ps(wj[i]), q8_vals16(codes + i * p->code_bytes, nb, c), a0);
            _mm512_storeu_ps(aj + c, a0);
        }
    }
}

/* 4 queries x 64 coordinates in registers; each record chunk converted once
 * per query group (d % 64 == 0) */
KVQ_TARGET_AVX512 static void accum_avx512_g4(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes,
                                              size_t n, float *acc) {
    const int d = p->d, nb = d / 32;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *wr[4];
        for (size_t j = 0; j < 4; j++) wr[j] = w + (j0 + (j < m ? j : 0)) * n;
        for (int c = 0; c < d; c += 64) {
            __m512 a[4][4];
            for (size_t j = 0; j < 4; j++)
                for (int k = 0; k < 4; k++)
                    a[j][k] = j < m ? _mm512_loadu_ps(acc + (j0 + j) * (size_t)d + c + 16 * k) : _mm512_setzero_ps();
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * p->code_bytes;
                const __m512 v0 = q8_vals16(rec, nb, c), v1 = q8_vals16(rec, nb, c + 16);
                const __m512 v2 = q8_vals16(rec, nb, c + 32), v3 = q8_vals16(rec, nb, c + 48);
                for (int j = 0; j < 4; j++) {
                    const __m512 wi = _mm512_set1_ps(wr[j][i]);
                    a[j][0] = _mm512_fmadd_ps(wi, v0, a[j][0]);
                    a[j][1] = _mm512_fmadd_ps(wi, v1, a[j][1]);
                    a[j][2] = _mm512_fmadd_ps(wi, v2, a[j][2]);
                    a[j][3] = _mm512_fmadd_ps(wi, v3, a[j][3]);
                }
            }
            for (size_t j = 0; j < m; j++)
                for (int k = 0; k < 4; k++) _mm512_storeu_ps(acc + (j0 + j) * (size_t)d + c + 16 * k, a[j][k]);
        }
    }
}

void q8_kernels_select(kvq_plan *p) {
    if (p->vnni) {
        p->score = q8_score_vnni;
        p->accum = q8_accum_vnni;
    } else if (p->isa >= KVQ_ISA_AVX512 && p->d % 16 == 0) {
        p->score = score_avx2;
        p->accum = p->d % 64 == 0 ? accum_avx512_g4 : accum_avx512;
    } else if (p->isa >= KVQ_ISA_AVX2) {
        p->score = score_avx2;
        p->accum = qblk_accum_avx2_q8;
    }
}
#else
void q8_kernels_select(kvq_plan *p) { (void)p; }
#endif
