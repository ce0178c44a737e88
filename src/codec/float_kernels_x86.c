/*
 * Baseline kernels: scores and p-weighted sums straight from f32/f16/bf16
 * rows, 4 queries at a time (grouped-query attention shares each row).
 * Scores: 4 accumulators per row, reduced together (hsum4). Accumulate:
 * 64 output floats x 4 queries held in registers while the rows stream by.
 */
#include <string.h>

#include "float_kernels.h"
#include "simd_util.h"

#if KVQ_X86

/* Loads 16 (AVX-512) or 8 (AVX2) values at element offset c of a row. */
#define LD512_F32(row, c) _mm512_loadu_ps((const float *)(row) + (c))
#define LD512_F16(row, c) ld16_f16((const uint16_t *)(row) + (c))
#define LD512_BF16(row, c) ld16_bf16((const uint16_t *)(row) + (c))
#define LD256_F32(row, c) _mm256_loadu_ps((const float *)(row) + (c))
#define LD256_F16(row, c) ld8_f16((const uint16_t *)(row) + (c))
#define LD256_BF16(row, c) ld8_bf16((const uint16_t *)(row) + (c))

/* AVX-512 kernels need d % 16 == 0; AVX2 ones d % 8 == 0 (always true). */
#define DEFINE_512(T, LD)                                                                                  \
    KVQ_TARGET_AVX512 static void score512_##T(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, \
                                               size_t n, float *scores) {                                  \
        const int d = p->d;                                                                                \
        const size_t qs = p->qfloats, cb = p->code_bytes;                                                  \
        for (size_t j0 = 0; j0 < nq; j0 += 4) {                                                            \
            const float *q0 = qp + j0 * qs;                                                                \
            const float *q1 = j0 + 1 < nq ? q0 + qs : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qs : q0;             \
            const float *q3 = j0 + 3 < nq ? q0 + 3 * qs : q0;                                              \
            for (size_t i = 0; i < n; i++) {                                                               \
                const uint8_t *row = codes + i * cb;                                                       \
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
                for (int c = 0; c < d; c += 16) {                                                          \
                    __m512 k = LD(row, c);                                                                 \
                    a0 = _mm512_fmadd_ps(k, _mm512_loadu_ps(q0 + c), a0);                                  \
                    a1 = _mm512_fmadd_ps(k, _mm512_loadu_ps(q1 + c), a1);                                  \
                    a2 = _mm512_fmadd_ps(k, _mm512_loadu_ps(q2 + c), a2);                                  \
                    a3 = _mm512_fmadd_ps(k, _mm512_loadu_ps(q3 + c), a3);                                  \
                }                                                                                          \
                float s[4];                                                                                \
                _mm_storeu_ps(s, hsum4_512(a0, a1, a2, a3));                                               \
                for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = s[j - j0];              \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
    KVQ_TARGET_AVX512 static void accum512_##T(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, \
                                               size_t n, float *acc) {                                     \
        const int d = p->d;                                                                                \
        const size_t cb = p->code_bytes;                                                                   \
        for (size_t j = 0; j < nq; j++) {                                                                  \
            const float *wj = w + j * n;                                                                   \
            float *aj = acc + j * (size_t)d;                                                               \
            int c = 0;                                                                                     \
            for (; c + 64 <= d; c += 64) {                                                                 \
                __m512 a0 = _mm512_loadu_ps(aj + c), a1 = _mm512_loadu_ps(aj + c + 16);                   \
                __m512 a2 = _mm512_loadu_ps(aj + c + 32), a3 = _mm512_loadu_ps(aj + c + 48);               \
                for (size_t i = 0; i < n; i++) {                                                           \
                    const uint8_t *row = codes + i * cb;                                                   \
                    __m512 wi = _mm512_set1_ps(wj[i]);                                                     \
                    a0 = _mm512_fmadd_ps(wi, LD(row, c), a0);                                              \
                    a1 = _mm512_fmadd_ps(wi, LD(row, c + 16), a1);                                         \
                    a2 = _mm512_fmadd_ps(wi, LD(row, c + 32), a2);                                         \
                    a3 = _mm512_fmadd_ps(wi, LD(row, c + 48), a3);                                         \
                }                                                                                          \
                _mm512_storeu_ps(aj + c, a0);                                                              \
                _mm512_storeu_ps(aj + c + 16, a1);                                                         \
                _mm512_storeu_ps(aj + c + 32, a2);                                                         \
                _mm512_storeu_ps(aj + c + 48, a3);                                                         \
            }                                                                                              \
            for (; c < d; c += 16) {                                                                       \
                __m512 a0 = _mm512_loadu_ps(aj + c);                                                       \
                for (size_t i = 0; i < n; i++) a0 = _mm512_fmadd_ps(_mm512_set1_ps(wj[i]), LD(codes + i * cb, c), a0); \
                _mm512_storeu_ps(aj + c, a0);                                                              \
            }                                                                                              \
        }                                                                                                  \
    }

#define DEFINE_256(T, LD)                                                                                  \
    KVQ_TARGET_AVX2 static void score256_##T(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, \
                                             size_t n, float *scores) {                                    \
        const int d = p->d;                                                                                \
        const size_t qs = p->qfloats, cb = p->code_bytes;                                                  \
        for (size_t j0 = 0; j0 < nq; j0 += 4) {                                                            \
            const float *q0 = qp + j0 * qs;                                                                \
            const float *q1 = j0 + 1 < nq ? q0 + qs : q0, *q2 = j0 + 2 < nq ? q0 + 2 * qs : q0;             \
            const float *q3 = j0 + 3 < nq ? q0 + 3 * qs : q0;                                              \
            for (size_t i = 0; i < n; i++) {                                                               \
                const uint8_t *row = codes + i * cb;                                                       \
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
                for (int c = 0; c < d; c += 8) {                                                           \
                    __m256 k = LD(row, c);                                                                 \
                    a0 = _mm256_fmadd_ps(k, _mm256_loadu_ps(q0 + c), a0);                                  \
                    a1 = _mm256_fmadd_ps(k, _mm256_loadu_ps(q1 + c), a1);                                  \
                    a2 = _mm256_fmadd_ps(k, _mm256_loadu_ps(q2 + c), a2);                                  \
                    a3 = _mm256_fmadd_ps(k, _mm256_loadu_ps(q3 + c), a3);                                  \
                }                                                                                          \
                float s[4];                                                                                \
                _mm_storeu_ps(s, hsum4_256(a0, a1, a2, a3));                                               \
                for (size_t j = j0; j < nq && j < j0 + 4; j++) scores[j * n + i] = s[j - j0];              \
            }                                                                                              \
        }                                                                                                  \
    }                                                                                                      \
    KVQ_TARGET_AVX2 static void accum256_##T(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, \
                                             size_t n, float *acc) {                                       \
        const int d = p->d;                                                                                \
        const size_t cb = p->code_bytes;                                                                   \
        for (size_t j = 0; j < nq; j++) {                                                                  \
            const float *wj = w + j * n;                                                                   \
            float *aj = acc + j * (size_t)d;                                                               \
            int c = 0;                                                                                     \
            for (; c + 32 <= d; c += 32) {                                                                 \
                __m256 a0 = _mm256_loadu_ps(aj + c), a1 = _mm256_loadu_ps(aj + c + 8);                     \
                __m256 a2 = _mm256_loadu_ps(aj + c + 16), a3 = _mm256_loadu_ps(aj + c + 24);               \
                for (size_t i = 0; i < n; i++) {                                                           \
                    const uint8_t *row = codes + i * cb;                                                   \
                    __m256 wi = _mm256_set1_ps(wj[i]);                                                     \
                    a0 = _mm256_fmadd_ps(wi, LD(row, c), a0);                                              \
                    a1 = _mm256_fmadd_ps(wi, LD(row, c + 8), a1);                                          \
                    a2 = _mm256_fmadd_ps(wi, LD(row, c + 16), a2);                                         \
                    a3 = _mm256_fmadd_ps(wi, LD(row, c + 24), a3);                                         \
                }                                                                                          \
                _mm256_storeu_ps(aj + c, a0);                                                              \
                _mm256_storeu_ps(aj + c + 8, a1);                                                          \
                _mm256_storeu_ps(aj + c + 16, a2);                                                         \
                _mm256_storeu_ps(aj + c + 24, a3);                                                         \
            }                                                                                              \
            for (; c < d; c += 8) {                                                                        \
                __m256 a0 = _mm256_loadu_ps(aj + c);                                                       \
                for (size_t i = 0; i < n; i++) a0 = _mm256_fmadd_ps(_mm256_set1_ps(wj[i]), LD(codes + i * cb, c), a0); \
                _mm256_storeu_ps(aj + c, a0);                                                              \
            }                                                                                              \
        }                                                                                                  \
    }


/* acc rows += w * row values, 4 queries x 64 coordinates in 16 registers:
 * each row chunk is converted once per query group (GQA shares it). */
#define DEFINE_512_G4(T, LD)                                                                               \
    KVQ_TARGET_AVX512 static void accum512g_##T(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, \
                                                size_t n, float *acc) {                                    \
        const int d = p->d;                                                                                \
        const size_t cb = p->code_bytes;                                                                   \
        for (size_t j0 = 0; j0 < nq; j0 += 4) {                                                            \
            const size_t m = nq - j0 < 4 ? nq - j0 : 4;                                                    \
            const float *wr[4];                                                                            \
            for (size_t j = 0; j < 4; j++) wr[j] = w + (j0 + (j < m ? j : 0)) * n;                         \
            for (int c = 0; c < d; c += 64) {                                                              \
                __m512 a[4][4];                                                                            \
                for (size_t j = 0; j < 4; j++)                                                             \
                    for (int k = 0; k < 4; k++)                                                            \
                        a[j][k] = j < m ? _mm512_loadu_ps(acc + (j0 + j) * (size_t)d + c + 16 * k) : _mm512_setzero_ps(); \
                for (size_t i = 0; i < n; i++) {                                                           \
                    const uint8_t *row = codes + i * cb;                                                   \
                    const __m512 v0 = LD(row, c), v1 = LD(row, c + 16), v2 = LD(row, c + 32), v3 = LD(row, c + 48); \
                    for (int j = 0; j < 4; j++) {                                                          \
                        const __m512 wi = _mm512_set1_ps(wr[j][i]);                                        \
                        a[j][0] = _mm512_fmadd_ps(wi, v0, a[j][0]);                                        \
                        a[j][1] = _mm512_fmadd_ps(wi, v1, a[j][1]);                                        \
                        a[j][2] = _mm512_fmadd_ps(wi, v2, a[j][2]);                                        \
                        a[j][3] = _mm512_fmadd_ps(wi, v3, a[j][3]);                                        \
                    }                                                                                      \
                }                                                                                          \
                for (size_t j = 0; j < m; j++)                                                             \
                    for (int k = 0; k < 4; k++) _mm512_storeu_ps(acc + (j0 + j) * (size_t)d + c + 16 * k, a[j][k]); \
            }                                                                                              \
        }                                                                                                  \
    }

DEFINE_512_G4(f32, LD512_F32)
DEFINE_512_G4(f16, LD512_F16)
DEFINE_512_G4(bf16, LD512_BF16)

DEFINE_512(f32, LD512_F32)
DEFINE_512(f16, LD512_F16)
DEFINE_512(bf16, LD512_BF16)
DEFINE_256(f32, LD256_F32)
DEFINE_256(f16, LD256_F16)
DEFINE_256(bf16, LD256_BF16)

void float_kernels_select(kvq_plan *p, int ftype) {
    static const score_fn s512[] = {score512_f32, score512_f16, score512_bf16};
    static const accum_fn a512[] = {accum512_f32, accum512_f16, accum512_bf16};
    static const accum_fn a512g[] = {accum512g_f32, accum512g_f16, accum512g_bf16};
    static const score_fn s256[] = {score256_f32, score256_f16, score256_bf16};
    static const accum_fn a256[] = {accum256_f32, accum256_f16, accum256_bf16};
    if (p->isa >= KVQ_ISA_AVX512 && p->d % 16 == 0) {
        p->score = s512[ftype];
        p->accum = p->d % 64 == 0 ? a512g[ftype] : a512[ftype];
    } else if (p->isa >= KVQ_ISA_AVX2) {
        p->score = s256[ftype];
        p->accum = a256[ftype];
    }
}
#else
void float_kernels_select(kvq_plan *p, int ftype) { (void)p; (void)ftype; }
#endif
