/*
 * Rotations (DESIGN.md §2).
 * Power-of-two d: two rounds of the randomized Hadamard transform,
 *   y = (1/d) H_d (s2 ⊙ (H_d (s1 ⊙ x))),  s1, s2 in {±1}^d from the seed,
 * H_d the Walsh-Hadamard matrix applied by the in-place fast transform.
 * One round (the textbook form; DESIGN.md §2.1 says why kvq uses two) maps
 * a spike e_j to a flat ±1/sqrt(d) vector whatever the signs, so a key with
 * one dominant channel gives bimodal, not Gaussian, coordinates and the
 * Lloyd-Max codebook no longer fits; the second round makes every coordinate
 * a random-sign sum of d terms (≈ Gaussian by the CLT). Cost: one more
 * d log d pass.
 * Other d: a seeded Haar-random orthogonal Q (modified Gram-Schmidt QR of a
 * Gaussian matrix in double precision, with R's diagonal made positive,
 * which is what makes Q Haar-distributed; Mezzadri 2007).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"

#if KVQ_X86
#include <immintrin.h>
#endif

void fwht_ref(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

#if KVQ_X86
/* Butterflies of span >= 8 across registers; spans 1, 2, 4 inside a register. */
KVQ_TARGET_AVX2 void fwht_avx2(float *x, int n) {
    if (n < 8) { fwht_ref(x, n); return; }
    const __m256 sgn1 = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
    const __m256 sgn2 = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
    const __m256 sgn4 = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256 s = _mm256_permute_ps(v, 0xB1); /* swap neighbours */
        v = _mm256_fmadd_ps(v, sgn1, s);
        s = _mm256_permute_ps(v, 0x4E); /* swap pairs */
        v = _mm256_fmadd_ps(v, sgn2, s);
        s = _mm256_permute2f128_ps(v, v, 0x01); /* swap halves */
        v = _mm256_fmadd_ps(v, sgn4, s);
        _mm256_storeu_ps(x + i, v);
    }
    for (int h = 8; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
}

KVQ_TARGET_AVX512 void fwht_avx512(float *x, int n) {
    if (n < 16) { fwht_avx2(x, n); return; }
    const __m512 sgn1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    const __m512 sgn2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    const __m512 sgn4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    const __m512 sgn8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 s = _mm512_permute_ps(v, 0xB1);
        v = _mm512_fmadd_ps(v, sgn1, s);
        s = _mm512_permute_ps(v, 0x4E);
        v = _mm512_fmadd_ps(v, sgn2, s);
        s = _mm512_shuffle_f32x4(v, v, 0xB1); /* swap 128-bit lanes pairwise */
        v = _mm512_fmadd_ps(v, sgn4, s);
        s = _mm512_shuffle_f32x4(v, v, 0x4E); /* swap 256-bit halves */
        v = _mm512_fmadd_ps(v, sgn8, s);
        _mm512_storeu_ps(x + i, v);
    }
    for (int h = 16; h < n; h <<= 1)
        for (int i = 0; i < n; i += h << 1)
            for (int j = i; j < i + h; j += 16) {
                __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
                _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
                _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
            }
}
#else
void fwht_avx2(float *x, int n) { fwht_ref(x, n); }
void fwht_avx512(float *x, int n) { fwht_ref(x, n); }
#endif

static void fwht(const kvq_rotation *r, float *x) {
    switch (r->isa) {
    case KVQ_ISA_AVX512: fwht_avx512(x, r->d); break;
    case KVQ_ISA_AVX2: fwht_avx2(x, r->d); break;
    default: fwht_ref(x, r->d); break;
    }
}

static int is_pow2(int d) { return d > 0 && (d & (d - 1)) == 0; }

/* Haar-random orthogonal matrix by MGS QR of a Gaussian matrix (double).
 * The work array holds the matrix column by column (a[j*d + i] is row i,
 * column j) so that every inner loop runs over contiguous memory: O(d^3)
 * either way, but ~10x faster than striding rows at d ~ 500. */
static int haar_matrix(float *out, int d, uint64_t seed) {
    double *a = malloc((size_t)d * d * sizeof *a);
    if (!a) return KVQ_ERR_NOMEM;
    kvq_rng rng;
    kvq_rng_seed(&rng, seed);
    /* the Gaussian draws fill the matrix row by row, as they always have */
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) a[(size_t)j * d + i] = kvq_rng_gauss(&rng);
    for (int j = 0; j < d; j++) {
        double *cj = a + (size_t)j * d;
        for (int pass = 0; pass < 2; pass++) /* re-orthogonalise for accuracy */
            for (int k = 0; k < j; k++) {
                const double *ck = a + (size_t)k * d;
                double dot = 0;
                for (int i = 0; i < d; i++) dot += ck[i] * cj[i];
                for (int i = 0; i < d; i++) cj[i] -= dot * ck[i];
            }
        double nrm = 0;
        for (int i = 0; i < d; i++) nrm += cj[i] * cj[i];
        nrm = sqrt(nrm);
        /* the sign fix: R_jj = nrm > 0 already, since MGS keeps the original
         * column's direction; dividing by +nrm gives the Haar measure. */
        for (int i = 0; i < d; i++) cj[i] /= nrm;
    }
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) out[(size_t)i * d + j] = (float)a[(size_t)j * d + i];
    free(a);
    return KVQ_OK;
}

int rot_init(kvq_rotation *r, int d, uint64_t seed, int enabled, kvq_isa isa) {
    memset(r, 0, sizeof *r);
    r->d = d;
    r->isa = isa;
    if (!enabled) { r->kind = ROT_NONE; return KVQ_OK; }
    kvq_rng rng;
    kvq_rng_seed(&rng, kvq_seed_mix(seed, 0x524f54));
    if (is_pow2(d)) {
        r->kind = ROT_HADAMARD;
        r->signs = malloc(2 * (size_t)d * sizeof *r->signs);
        if (!r->signs) return KVQ_ERR_NOMEM;
        for (int i = 0; i < 2 * d; i++) r->signs[i] = (kvq_rng_u64(&rng) >> 63) ? -1.0f : 1.0f;
        return KVQ_OK;
    }
    r->kind = ROT_DENSE;
    r->mat = malloc((size_t)d * d * sizeof *r->mat);
    if (!r->mat) return KVQ_ERR_NOMEM;
    r->mat_t = malloc((size_t)d * d * sizeof *r->mat_t);
    if (!r->mat_t) return KVQ_ERR_NOMEM;
    int rc = haar_matrix(r->mat, d, kvq_rng_u64(&rng));
    if (rc) return rc;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) r->mat_t[(size_t)j * d + i] = r->mat[(size_t)i * d + j];
    return KVQ_OK;
}

void rot_free(kvq_rotation *r) {
    free(r->signs);
    free(r->mat);
    free(r->mat_t);
    r->signs = NULL;
    r->mat = r->mat_t = NULL;
}

static void dense_apply(const kvq_rotation *r, const float *x, float *y, int transpose) {
    float tmp[KVQ_DIM_MAX];
    memcpy(tmp, x, (size_t)r->d * sizeof *tmp);
    matvec(transpose ? r->mat_t : r->mat, r->d, r->d, tmp, y, r->isa);
}

void rot_apply(const kvq_rotation *r, const float *x, float *y) {
    int d = r->d;
    switch (r->kind) {
    case ROT_NONE:
        if (y != x) memmove(y, x, (size_t)d * sizeof *y);
        return;
    case ROT_HADAMARD: {
        float s = 1.0f / sqrtf((float)d);
        for (int i = 0; i < d; i++) y[i] = x[i] * r->signs[i] * s;
        fwht(r, y);
        for (int i = 0; i < d; i++) y[i] *= r->signs[d + i] * s;
        fwht(r, y);
        return;
    }
    case ROT_DENSE: dense_apply(r, x, y, 0); return;
    }
}

void rot_apply_inv(const kvq_rotation *r, const float *y, float *x) {
    int d = r->d;
    switch (r->kind) {
    case ROT_NONE:
        if (y != x) memmove(x, y, (size_t)d * sizeof *x);
        return;
    case ROT_HADAMARD: {
        /* H is symmetric and H H = d I: x = s1 ⊙ H (s2 ⊙ H y) / d */
        if (y != x) memmove(x, y, (size_t)d * sizeof *x);
        float s = 1.0f / sqrtf((float)d);
        fwht(r, x);
        for (int i = 0; i < d; i++) x[i] *= r->signs[d + i] * s;
        fwht(r, x);
        for (int i = 0; i < d; i++) x[i] *= r->signs[i] * s;
        return;
    }
    case ROT_DENSE: dense_apply(r, y, x, 1); return;
    }
}
