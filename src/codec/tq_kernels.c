/* Scalar references of the codebook-index kernels, and ISA dispatch. */
#include <math.h>
#include <string.h>

#include "simd_util.h"
#include "tq_kernels.h"

void tq_quantize_ref(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale) {
    double ss = 0;
    for (int c = 0; c < d; c++) ss += (double)y[c] * y[c];
    if (ss == 0) {
        int z = cb_quantize(cb, 0.0f);
        memset(idx, z, (size_t)d);
        *scale = 0;
        return;
    }
    double nrm = sqrt(ss);
    float s = (float)(sqrt((double)d) / nrm);
    double yc = 0, cc = 0;
    for (int c = 0; c < d; c++) {
        int i = cb_quantize(cb, y[c] * s);
        idx[c] = (uint8_t)i;
        yc += (double)y[c] * cb->c[i];
        cc += (double)cb->c[i] * cb->c[i];
    }
    *scale = scale_norm || cc == 0 ? (float)(nrm / sqrt((double)d)) : (float)(yc / cc);
}

void tq_unpack(const tq_layout *L, const uint8_t *rec, uint8_t *idx, kvq_isa isa) {
    (void)isa;
    strided_unpack(rec + L->idx_off, L->d, L->b, idx);
}

void tq_score_ref(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    uint8_t idx[KVQ_DIM_MAX];
    const float *cent = L->scent;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * L->stride;
        strided_unpack(rec + L->idx_off, L->d, L->b, idx);
        float g = tq_scale(L, rec);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * qstride;
            float s = 0;
            for (int c = 0; c < L->d; c++) s += q[c] * cent[idx[c]];
            scores[j * n + i] = g * s;
        }
    }
}

void tq_accum_ref(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    uint8_t idx[KVQ_DIM_MAX];
    const float *cent = L->cb->c;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * L->stride;
        strided_unpack(rec + L->idx_off, L->d, L->b, idx);
        float g = tq_scale(L, rec);
        for (size_t j = 0; j < nq; j++) {
            float wg = w[j * n + i] * g;
            float *a = acc + j * (size_t)L->d;
            for (int c = 0; c < L->d; c++) a[c] += wg * cent[idx[c]];
        }
    }
}

void tq_decode(const tq_layout *L, const uint8_t *rec, float *y, kvq_isa isa) {
    if (isa >= KVQ_ISA_AVX512 && tq_decode_avx512(L, rec, y)) return;
    uint8_t idx[KVQ_DIM_MAX];
    tq_unpack(L, rec, idx, isa);
    float g = tq_scale(L, rec);
    for (int c = 0; c < L->d; c++) y[c] = g * L->cb->c[idx[c]];
}

#if !KVQ_X86
void tq_quantize_avx512(const kvq_codebook *cb, const float *y, int d, int sn, uint8_t *idx, float *scale) { tq_quantize_ref(cb, y, d, sn, idx, scale); }
void tq_quantize_avx2(const kvq_codebook *cb, const float *y, int d, int sn, uint8_t *idx, float *scale) { tq_quantize_ref(cb, y, d, sn, idx, scale); }
void tq_score_avx512(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes, size_t n, float *s) { tq_score_ref(L, qp, qs, nq, codes, n, s); }
void tq_score_avx2(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes, size_t n, float *s) { tq_score_ref(L, qp, qs, nq, codes, n, s); }
void tq_accum_avx512(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *a) { tq_accum_ref(L, w, nq, codes, n, a); }
void tq_accum_avx2(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *a) { tq_accum_ref(L, w, nq, codes, n, a); }
int tq_encode_fused_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int sn, const float *x, float *scale, uint8_t *packed) { (void)rot; (void)cb; (void)d; (void)b; (void)sn; (void)x; (void)scale; (void)packed; return 0; }
int tq_decode_avx512(const tq_layout *L, const uint8_t *rec, float *y) { (void)L; (void)rec; (void)y; return 0; }
int tq_score_vnni(const tq_layout *L, const float *qp, size_t qs, size_t nq, const uint8_t *codes, size_t n, float *s) { (void)L; (void)qp; (void)qs; (void)nq; (void)codes; (void)n; (void)s; return 0; }
#endif

void tq_quantize(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale, kvq_isa isa) {
    if (isa >= KVQ_ISA_AVX512) tq_quantize_avx512(cb, y, d, scale_norm, idx, scale);
    else if (isa >= KVQ_ISA_AVX2) tq_quantize_avx2(cb, y, d, scale_norm, idx, scale);
    else tq_quantize_ref(cb, y, d, scale_norm, idx, scale);
}

#if KVQ_X86
/* The 8-bit query of tq_prepare_query with AVX2: cvtps2dq rounds to nearest
 * even like lrintf (default rounding mode), max and the integer sum do not
 * depend on the order, so the bytes and floats equal the scalar ones (and
 * 128 libm lrintf calls, ~0.7 us at d = 128, become a few vector ops). */
KVQ_TARGET_AVX2 static void tq_query8_avx2(int d, float *qp) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mv = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) mv = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(qp + c), absmask), mv); /* NaN ignored, as fmaxf */
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float m = _mm_cvtss_f32(m4), sq = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f;
    int8_t *q8 = (int8_t *)(qp + 2 * d + 2);
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < d; c += 8) {
        __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(qp + c), vinv));
        v = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
        _mm256_storeu_ps(qp + d + c, _mm256_cvtepi32_ps(v));
        sum = _mm256_add_epi32(sum, v);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storel_epi64((__m128i *)(q8 + c), _mm_packs_epi16(w, w));
    }
    int32_t s8[8];
    _mm256_storeu_si256((__m256i *)s8, sum);
    qp[2 * d] = sq;
    qp[2 * d + 1] = (float)(s8[0] + s8[1] + s8[2] + s8[3] + s8[4] + s8[5] + s8[6] + s8[7]);
}
#endif

void tq_prepare_query(const kvq_rotation *rot, int d, const float *q, float *qp) {
    rot_apply(rot, q, qp);
#if KVQ_X86
    if (rot->isa >= KVQ_ISA_AVX2 && d % 8 == 0) { tq_query8_avx2(d, qp); return; }
#endif
    float m = 0;
    for (int c = 0; c < d; c++) m = fmaxf(m, fabsf(qp[c]));
    float sq = m / 127.0f, inv = m > 0 ? 127.0f / m : 0.0f;
    int8_t *q8 = (int8_t *)(qp + 2 * d + 2);
    float sum = 0;
    for (int c = 0; c < d; c++) {
        long v = lrintf(qp[c] * inv);
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        q8[c] = (int8_t)v;
        qp[d + c] = (float)v;
        sum += (float)v;
    }
    qp[2 * d] = sq;
    qp[2 * d + 1] = sum;
}

void tq_score(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores, kvq_isa isa) {
    tq_layout l = *L;
    const int i8 = L->cb->snapped;
    l.scent = i8 ? L->cb->ci : L->cb->c;
    if (i8 && L->vnni && (tq_score_tok(&l, qp, qstride, nq, codes, n, scores) || tq_score_vnni(&l, qp, qstride, nq, codes, n, scores)))
        return;
    const float *q = i8 ? qp + L->d : qp; /* integer-valued q8 rows, or q~ */
    if (isa >= KVQ_ISA_AVX512) tq_score_avx512(&l, q, qstride, nq, codes, n, scores);
    else if (isa >= KVQ_ISA_AVX2) tq_score_avx2(&l, q, qstride, nq, codes, n, scores);
    else tq_score_ref(&l, q, qstride, nq, codes, n, scores);
    if (i8)
        for (size_t j = 0; j < nq; j++) {
            const float qs = qp[j * qstride + 2 * (size_t)L->d] * L->cb->cscale;
            for (size_t i = 0; i < n; i++) scores[j * n + i] *= qs;
        }
}

void tq_accum(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc, kvq_isa isa) {
    if (isa >= KVQ_ISA_AVX512 && L->vnni && tq_accum_vnni(L, w, nq, codes, n, acc)) return;
    if (isa >= KVQ_ISA_AVX512) tq_accum_avx512(L, w, nq, codes, n, acc);
    else if (isa >= KVQ_ISA_AVX2) tq_accum_avx2(L, w, nq, codes, n, acc);
    else tq_accum_ref(L, w, nq, codes, n, acc);
}
