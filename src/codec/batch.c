/*
 * The batched public API (kvq_encode, kvq_decode, kvq_query_prepare,
 * kvq_score, kvq_accumulate, kvq_unrotate): argument checks, then the
 * plan's kernels.
 */
#include <stdint.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"
#include "simd_util.h"

static int mul_overflows(size_t a, size_t b) { return b && a > SIZE_MAX / b; }
/* 1 if rows x cols floats do not fit in size_t bytes: no buffer holds them,
 * and the kernels' row offsets would wrap. */
static int floats_overflow(size_t rows, size_t cols) {
    return mul_overflows(rows, cols) || mul_overflows(rows * cols, sizeof(float));
}

/* Converts one row to f32 and checks it is finite. */
static int load_row(const void *x, kvq_dtype dt, size_t row, int d, float *out) {
    unsigned bad = 0;
    switch (dt) {
    case KVQ_DTYPE_F32: {
        const float *s = (const float *)x + row * (size_t)d;
        memcpy(out, s, (size_t)d * sizeof *out);
        break;
    }
    case KVQ_DTYPE_F16: {
        const uint16_t *s = (const uint16_t *)x + row * (size_t)d;
        for (int i = 0; i < d; i++) bad |= (s[i] & 0x7c00u) == 0x7c00u, out[i] = kvq_f16_to_f32(s[i]);
        return bad ? KVQ_ERR_NONFINITE : KVQ_OK;
    }
    case KVQ_DTYPE_BF16: {
        const uint16_t *s = (const uint16_t *)x + row * (size_t)d;
        for (int i = 0; i < d; i++) bad |= (s[i] & 0x7f80u) == 0x7f80u, out[i] = kvq_bf16_to_f32(s[i]);
        return bad ? KVQ_ERR_NONFINITE : KVQ_OK;
    }
    default: return KVQ_ERR_INVALID_ARG;
    }
    /* f32: every exponent bit set means Inf or NaN */
    const uint32_t *u = (const uint32_t *)out;
    for (int i = 0; i < d; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    return bad ? KVQ_ERR_NONFINITE : KVQ_OK;
}

/* 1 if no value of x[0..n) is Inf or NaN (every exponent bit set). */
static int all_finite_ref(const float *x, size_t n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t mx = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t e = u[i] & 0x7f800000u;
        mx = e > mx ? e : mx;
    }
    return mx != 0x7f800000u;
}

#if KVQ_X86
KVQ_TARGET_AVX512 static int all_finite_avx512(const float *x, size_t n) {
    const __m512i m = _mm512_set1_epi32(0x7f800000);
    __m512i mx = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_loadu_si512(x + i), m));
    return _mm512_reduce_max_epu32(mx) != 0x7f800000u && all_finite_ref(x + i, n - i);
}
#endif

/* f16/bf16 rows r0..r0+m to f32 (exact conversions, as load_row), stopping at
 * the first row holding Inf/NaN: returns the number of leading good rows. */
static size_t load_rows_ref(const void *x, kvq_dtype dt, size_t r0, size_t m, int d, float *out) {
    for (size_t r = 0; r < m; r++)
        if (load_row(x, dt, r0 + r, d, out + r * (size_t)d)) return r;
    return m;
}

#if KVQ_X86
KVQ_TARGET_AVX512 static size_t load_rows_avx512(const void *x, kvq_dtype dt, size_t r0, size_t m, int d, float *out) {
    if (d % 16) return load_rows_ref(x, dt, r0, m, d, out);
    const uint16_t *s = (const uint16_t *)x + r0 * (size_t)d;
    const __m256i e = _mm256_set1_epi16((short)(dt == KVQ_DTYPE_F16 ? 0x7c00 : 0x7f80));
    for (size_t r = 0; r < m; r++, s += d, out += d) {
        __mmask16 bad = 0;
        for (int c = 0; c < d; c += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(s + c));
            bad |= _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, e), e);
            _mm512_storeu_ps(out + c, dt == KVQ_DTYPE_F16 ? _mm512_cvtph_ps(h)
                                                          : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
        if (bad) return r;
    }
    return m;
}
#endif

int kvq_encode(const kvq_plan *p, const void *x, kvq_dtype dtype, size_t n, void *codes) {
    if (!p || (!x && n) || (!codes && n)) return KVQ_ERR_NULL;
    if (dtype != KVQ_DTYPE_F32 && dtype != KVQ_DTYPE_F16 && dtype != KVQ_DTYPE_BF16) return KVQ_ERR_INVALID_ARG;
    if (mul_overflows(n, (size_t)p->d * 4) || mul_overflows(n, p->code_bytes)) return KVQ_ERR_OVERFLOW;
    float rows[8 * KVQ_DIM_MAX];
    uint8_t *c = codes;
    if (dtype == KVQ_DTYPE_F32) { /* whole batch checked first: a bad row writes no codes */
        const float *xf = x;
        int ok;
#if KVQ_X86
        ok = p->isa >= KVQ_ISA_AVX512 ? all_finite_avx512(xf, n * (size_t)p->d) : all_finite_ref(xf, n * (size_t)p->d);
#else
        ok = all_finite_ref(xf, n * (size_t)p->d);
#endif
        if (!ok) return KVQ_ERR_NONFINITE;
        if (p->encode_rows) return p->encode_rows(p, xf, n, c);
        for (size_t i = 0; i < n; i++) {
            int rc = p->encode(p, xf + i * (size_t)p->d, c + i * p->code_bytes);
            if (rc) return rc;
        }
        return KVQ_OK;
    }
    /* f16/bf16: chunks of rows converted to f32, then encoded (rows before a
     * non-finite row are written) */
    const size_t chunk = 8 * (size_t)KVQ_DIM_MAX / (size_t)p->d;
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk, good;
#if KVQ_X86
        good = p->isa >= KVQ_ISA_AVX512 ? load_rows_avx512(x, dtype, i, m, p->d, rows) : load_rows_ref(x, dtype, i, m, p->d, rows);
#else
        good = load_rows_ref(x, dtype, i, m, p->d, rows);
#endif
        uint8_t *ci = c + i * p->code_bytes;
        if (p->encode_rows && good) {
            int rc = p->encode_rows(p, rows, good, ci);
            if (rc) return rc;
        } else
            for (size_t r = 0; r < good; r++) {
                int rc = p->encode(p, rows + r * (size_t)p->d, ci + r * p->code_bytes);
                if (rc) return rc;
            }
        if (good < m) return KVQ_ERR_NONFINITE;
    }
    return KVQ_OK;
}

int kvq_decode(const kvq_plan *p, const void *codes, size_t n, float *out) {
    if (!p || (!codes && n) || (!out && n)) return KVQ_ERR_NULL;
    if (!p->can_decode) return KVQ_ERR_NO_DECODE;
    if (mul_overflows(n, (size_t)p->d * 4) || mul_overflows(n, p->code_bytes)) return KVQ_ERR_OVERFLOW;
    const uint8_t *c = codes;
    for (size_t i = 0; i < n; i++) {
        float *y = out + i * (size_t)p->d;
        p->decode(p, c + i * p->code_bytes, y);
        kvq_unrotate(p, y, y);
    }
    return KVQ_OK;
}

int kvq_query_prepare(const kvq_plan *p, const float *q, float *qp) {
    if (!p || !q || !qp) return KVQ_ERR_NULL;
    if (!all_finite_ref(q, (size_t)p->d)) return KVQ_ERR_NONFINITE; /* whole row first: qp untouched */
    p->prep(p, q, qp);
    return KVQ_OK;
}

int kvq_score(const kvq_plan *p, const float *qp, size_t nq, const void *codes, size_t n, float *scores) {
    if (!p || (!qp && nq) || (!codes && n) || (!scores && n && nq)) return KVQ_ERR_NULL;
    /* nq prepared rows, nq x n scores, n records */
    if (floats_overflow(nq, p->qfloats) || floats_overflow(nq, n) || mul_overflows(n, p->code_bytes))
        return KVQ_ERR_OVERFLOW;
    if (n && nq) p->score(p, qp, nq, codes, n, scores);
    return KVQ_OK;
}

int kvq_accumulate(const kvq_plan *p, const float *w, size_t nq, const void *codes, size_t n, float *acc) {
    if (!p || (!w && nq && n) || (!codes && n) || (!acc && nq)) return KVQ_ERR_NULL;
    if (!p->can_decode) return KVQ_ERR_NO_DECODE;
    /* nq x n weights, nq accumulator rows of dim floats, n records */
    if (floats_overflow(nq, n) || floats_overflow(nq, (size_t)p->d) || mul_overflows(n, p->code_bytes))
        return KVQ_ERR_OVERFLOW;
    if (n && nq) p->accum(p, w, nq, codes, n, acc);
    return KVQ_OK;
}

int kvq_unrotate(const kvq_plan *p, const float *acc, float *out) {
    if (!p || !acc || !out) return KVQ_ERR_NULL;
    if (p->w) return p->w->unrotate(p, acc, out); /* a wrapper: its inner plan's domain and its own channels */
    rot_apply_inv(&p->rot, acc, out);
    return KVQ_OK;
}
