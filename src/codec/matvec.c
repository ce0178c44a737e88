/* y = M x for a row-major rows x cols matrix (cols % 8 == 0): the dense
 * rotation (d x d) and the QJL projection (m x d). */
#include "codec_internal.h"
#include "simd_util.h"

static void matvec_ref(const float *m, int rows, int cols, const float *x, float *y) {
    for (int i = 0; i < rows; i++) {
        float acc = 0;
        for (int j = 0; j < cols; j++) acc += m[(size_t)i * cols + j] * x[j];
        y[i] = acc;
    }
}

#if KVQ_X86
/* Four rows at a time share each load of x; hsum4 reduces them together. */
KVQ_TARGET_AVX2 static void matvec_avx2(const float *m, int rows, int cols, const float *x, float *y) {
    int i = 0;
    for (; i + 4 <= rows; i += 4) {
        const float *r0 = m + (size_t)i * cols, *r1 = r0 + cols, *r2 = r1 + cols, *r3 = r2 + cols;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < cols; j += 8) {
            __m256 xv = _mm256_loadu_ps(x + j);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + j), xv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + j), xv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + j), xv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + j), xv, a3);
        }
        _mm_storeu_ps(y + i, hsum4_256(a0, a1, a2, a3));
    }
    for (; i < rows; i++) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0; j < cols; j += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(m + (size_t)i * cols + j), _mm256_loadu_ps(x + j), a);
        y[i] = hsum_256(a);
    }
}
#endif

void matvec(const float *m, int rows, int cols, const float *x, float *y, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX2) { matvec_avx2(m, rows, cols, x, y); return; }
#endif
    (void)isa;
    matvec_ref(m, rows, cols, x, y);
}
