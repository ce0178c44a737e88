/* AVX2 / AVX-512 kernels of q4 (4-bit, f16 scale and min per 32 values):
 * integer scores with 8-bit queries (AVX2, also used by AVX-512 CPUs without
 * VNNI); float value accumulation, 64 coordinates x 4 rows in registers
 * (AVX-512, d % 64 == 0; else qblk.c's AVX2 one).
 * AVX-512 VNNI: qblk_vnni_x86.c. */
#include <string.h>

#include "codec_internal.h"
#include "qblk.h"
#include "simd_util.h"

#if KVQ_X86
/* scale and min of the block holding value c */
KVQ_TARGET_AVX2 static inline void blk(const uint8_t *rec, int c, float *s, float *m) {
    uint16_t h[2];
    memcpy(h, rec + 4 * (c / 32), 4);
    *s = _cvtsh_ss(h[0]);
    *m = _cvtsh_ss(h[1]);
}

/* values c..c+31 of one block (c % 32 == 0): one load, one scale/min */
KVQ_TARGET_AVX512 static inline void q4_vals32(const uint8_t *rec, int nb, int c, __m512 *v0, __m512 *v1) {
    __m128i b = _mm_loadu_si128((const __m128i *)(rec + 4 * nb + c / 2));
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
    float s, m;
    blk(rec, c, &s, &m);
    const __m512 vs = _mm512_set1_ps(s), vm = _mm512_set1_ps(m);
    *v0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi))), vs, vm);
    *v1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi))), vs, vm);
}

/* acc rows += w * values: 64 coordinates x 4 queries in registers, each
 * record's two blocks decoded once for the query group (d % 64 == 0) */
KVQ_TARGET_AVX512 static void accum512_64(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                          float *acc) {
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
                __m512 v[4];
                q4_vals32(rec, nb, c, &v[0], &v[1]);
                q4_vals32(rec, nb, c + 32, &v[2], &v[3]);
                for (int j = 0; j < 4; j++) {
                    const __m512 wi = _mm512_set1_ps(wr[j][i]);
                    for (int k = 0; k < 4; k++) a[j][k] = _mm512_fmadd_ps(wi, v[k], a[j][k]);
                }
            }
            for (size_t j = 0; j < m; j++)
                for (int k = 0; k < 4; k++) _mm512_storeu_ps(acc + (j0 + j) * (size_t)d + c + 16 * k, a[j][k]);
        }
    }
}


/* Integer scores (qblk.h), 4 query rows per pass: per block, the 16 data
 * bytes give the low nibbles (even coordinates) and the high ones (odd), in
 * the order of the prepared q8 bytes; maddubs (pairs <= 2 * 15 * 127), madd
 * to int32, one 4-row horizontal sum, then the block's float fmas. */
KVQ_TARGET_AVX2 static void score256(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                                     float *scores) {
    const int d = p->d, nb = qblk_nb(d), tail = d - 32 * (nb - 1);
    const size_t qs = p->qfloats;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m128i m15 = _mm_set1_epi8(15);
    const __m128i tmask = _mm_cmpgt_epi32(_mm_set1_epi32(tail / 8), _mm_setr_epi32(0, 1, 2, 3));
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const float *q[4];
        for (size_t j = 0; j < 4; j++) q[j] = qp + (j0 + (j0 + j < nq ? j : 0)) * qs;
        const int8_t *q8[4] = {qblk_q8(q[0], nb), qblk_q8(q[1], nb), qblk_q8(q[2], nb), qblk_q8(q[3], nb)};
        __m128 sqv[KVQ_DIM_MAX / 32], sbv[KVQ_DIM_MAX / 32];
        for (int b = 0; b < nb; b++) {
            sqv[b] = _mm_setr_ps(q[0][b], q[1][b], q[2][b], q[3][b]);
            sbv[b] = _mm_setr_ps(q[0][nb + b], q[1][nb + b], q[2][nb + b], q[3][nb + b]);
        }
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * p->code_bytes, *nib = rec + 4 * nb;
            __m128 s = _mm_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const __m128i raw = b < nb - 1 || tail == 32 ? _mm_loadu_si128((const __m128i *)(nib + 16 * b))
                                                             : _mm_maskload_epi32((const int *)(const void *)(nib + 16 * b), tmask);
                const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m15), _mm_and_si128(raw, m15));
                __m256i N[4];
                for (int j = 0; j < 4; j++)
                    N[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(q8[j] + 32 * b))), ones);
                float ks, km;
                blk(rec, 32 * b, &ks, &km);
                const __m128 inner = _mm_fmadd_ps(_mm_set1_ps(ks), _mm_cvtepi32_ps(hsum4_epi32_256(N[0], N[1], N[2], N[3])),
                                                  _mm_mul_ps(_mm_set1_ps(km), sbv[b]));
                s = _mm_fmadd_ps(sqv[b], inner, s);
            }
            float o[4];
            _mm_storeu_ps(o, s);
            for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = o[j - j0];
        }
    }
}

void q4_kernels_select(kvq_plan *p) {
    if (p->vnni) {
        p->score = p->d % 16 == 0 ? q4_score_vnni : score256;
        p->accum = q4_accum_vnni;
    } else if (p->isa >= KVQ_ISA_AVX512 && p->d % 16 == 0) {
        p->score = score256;
        p->accum = p->d % 64 == 0 ? accum512_64 : qblk_accum_avx2_q4;
    } else if (p->isa >= KVQ_ISA_AVX2) {
        p->score = score256;
        p->accum = qblk_accum_avx2_q4;
    }
}
#else
void q4_kernels_select(kvq_plan *p) { (void)p; }
#endif
