/* Plans: spec parsing, creation, the batched public API, shared helpers. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"
#include "simd_util.h"

/* ---- scales --------------------------------------------------------------- */
int scale_store(const kvq_plan *p, uint8_t *dst, float s) {
    if (!isfinite(s)) return KVQ_ERR_RANGE;
    if (p->o.scale32) { memcpy(dst, &s, 4); return KVQ_OK; }
    if (fabsf(s) > 65504.0f) return KVQ_ERR_RANGE;
    uint16_t h = kvq_f32_to_f16(s);
    memcpy(dst, &h, 2);
    return KVQ_OK;
}

float scale_load(const kvq_plan *p, const uint8_t *src) {
    if (p->o.scale32) { float s; memcpy(&s, src, 4); return s; }
    uint16_t h;
    memcpy(&h, src, 2);
    return kvq_f16_to_f32(h);
}

/* ---- generic (decode-based) reference kernels ----------------------------- */
void generic_prep_rot(const kvq_plan *p, const float *q, float *qp) { rot_apply(&p->rot, q, qp); }

void generic_score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    float y[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        p->decode(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * p->qfloats;
            float s = 0;
            for (int c = 0; c < p->d; c++) s += q[c] * y[c];
            scores[j * n + i] = s;
        }
    }
}

void generic_accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    float y[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        p->decode(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            float wi = w[j * n + i];
            float *a = acc + j * (size_t)p->d;
            for (int c = 0; c < p->d; c++) a[c] += wi * y[c];
        }
    }
}

/* ---- spec parsing ---------------------------------------------------------- */
/* spec := name [":" int] { "+" opt ["=" int] } */
static int parse_int(const char *s, size_t len, long *out) {
    if (len == 0 || len > 9) return 0;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

static int parse_spec(const char *spec, const kvq_method **m, kvq_plan_opts *o) {
    memset(o, 0, sizeof *o);
    o->bits = -1;
    size_t L = strlen(spec);
    if (L == 0 || L >= 80) return KVQ_ERR_UNKNOWN_METHOD;
    size_t nl = strcspn(spec, ":+");
    char name[32];
    if (nl == 0 || nl >= sizeof name) return KVQ_ERR_UNKNOWN_METHOD;
    memcpy(name, spec, nl);
    name[nl] = 0;
    *m = kvq_method_find(name);
    if (!*m) return KVQ_ERR_UNKNOWN_METHOD;
    const char *s = spec + nl;
    if (*s == ':') {
        s++;
        size_t al = strcspn(s, "+");
        long v;
        if (!parse_int(s, al, &v)) return KVQ_ERR_UNKNOWN_METHOD;
        if (!strcmp(name, "qjl")) o->m = (int)v; /* qjl:M is the sketch size */
        else if ((*m)->max_bits == 0) return KVQ_ERR_UNKNOWN_METHOD;
        else o->bits = (int)v;
        s += al;
    }
    while (*s == '+') {
        s++;
        size_t ol = strcspn(s, "+");
        const char *eq = memchr(s, '=', ol);
        size_t kl = eq ? (size_t)(eq - s) : ol;
        long v = 0;
        int hasv = eq && parse_int(eq + 1, ol - kl - 1, &v);
        if (eq && !hasv) {
            if (kl == 5 && !strncmp(s, "scale", 5) && ol - kl - 1 == 4 && !strncmp(eq + 1, "norm", 4)) o->scale_norm = 1;
            else if (kl == 2 && !strncmp(s, "cb", 2) && ol - kl - 1 == 5 && !strncmp(eq + 1, "gauss", 5)) o->cb_gauss = 1;
            else return KVQ_ERR_UNKNOWN_METHOD;
        } else if (kl == 1 && s[0] == 'm' && hasv) o->m = (int)v;
        else if (kl == 8 && !strncmp(s, "outliers", 8) && hasv) o->outliers = (int)v;
        else if (!eq && kl == 5 && !strncmp(s, "norot", 5)) o->norot = 1;
        else if (!eq && kl == 7 && !strncmp(s, "scale32", 7)) o->scale32 = 1;
        else if (!eq && kl == 6 && !strncmp(s, "center", 6)) o->center = 1;
        else if (!eq && kl == 7 && !strncmp(s, "chscale", 7)) o->center = o->chscale = 1;
        else return KVQ_ERR_UNKNOWN_METHOD;
        s += ol;
    }
    if (*s) return KVQ_ERR_UNKNOWN_METHOD;
    return KVQ_OK;
}

static void canonical_spec(kvq_plan *p) {
    char *s = p->spec;
    size_t cap = sizeof p->spec;
    int n = snprintf(s, cap, "%s", p->m->name);
    if (p->m->max_bits > 0) n += snprintf(s + n, cap - (size_t)n, ":%d", p->bits);
    if (p->qjl_m && p->qjl_m != p->d) n += snprintf(s + n, cap - (size_t)n, "+m=%d", p->qjl_m);
    if (p->o.outliers) n += snprintf(s + n, cap - (size_t)n, "+outliers=%d", p->o.outliers);
    if (p->o.norot) n += snprintf(s + n, cap - (size_t)n, "+norot");
    if (p->o.scale_norm) n += snprintf(s + n, cap - (size_t)n, "+scale=norm");
    if (p->o.scale32) n += snprintf(s + n, cap - (size_t)n, "+scale32");
    if (p->o.cb_gauss) n += snprintf(s + n, cap - (size_t)n, "+cb=gauss");
    if (p->o.center) n += snprintf(s + n, cap - (size_t)n, "+center");
    if (p->o.chscale) snprintf(s + n, cap - (size_t)n, "+chscale");
}

int outliers_build(kvq_plan *p, const char *spec, const float *calib, size_t n_calib, const int *channels);
int center_build(kvq_plan *p, const char *spec, const float *calib, size_t n_calib, const kvq_plan *src);
int center_unrotate(const kvq_plan *p, const float *acc, float *out);

static int plan_build(kvq_plan **out, const char *spec, int dim, uint64_t seed, const float *calib, size_t n_calib,
                      kvq_isa isa, const kvq_plan *src) {
    if (!out || !spec) return KVQ_ERR_NULL;
    if (dim < KVQ_DIM_MIN || dim > KVQ_DIM_MAX || dim % 8) return KVQ_ERR_UNSUPPORTED_DIM;
    const kvq_method *m;
    kvq_plan_opts o;
    int rc = parse_spec(spec, &m, &o);
    if (rc) return rc;
    if (m->max_bits > 0) {
        if (o.bits < 0) o.bits = m->default_bits;
        if (o.bits < m->min_bits || o.bits > m->max_bits) return KVQ_ERR_BITS_RANGE;
    }
    if (o.m && (o.m < 8 || o.m > 4096 || o.m % 8)) return KVQ_ERR_INVALID_ARG;
    if (o.outliers && (o.outliers % 8 || o.outliers < 8 || dim - o.outliers < KVQ_DIM_MIN)) return KVQ_ERR_INVALID_ARG;
    kvq_isa best = kvq_cpu_isa();
    if (isa == KVQ_ISA_BEST) isa = best;
    if (isa > best) return KVQ_ERR_UNSUPPORTED;
    kvq_plan *p = calloc(1, sizeof *p);
    if (!p) return KVQ_ERR_NOMEM;
    p->m = m;
    p->d = dim;
    p->seed = seed;
    p->o = o;
    p->bits = m->max_bits > 0 ? o.bits : 0;
    p->isa = isa;
    p->vnni = isa == KVQ_ISA_AVX512 && kvq_cpu_has_int8_dot();
    p->can_decode = 1;
    if (o.outliers && o.center) rc = KVQ_ERR_INVALID_ARG;
    else if (o.outliers) rc = outliers_build(p, spec, calib, n_calib, src ? src->ch_out : NULL);
    else if (o.center) rc = center_build(p, spec, calib, n_calib, src);
    else rc = m->init(p);
    if (rc) { kvq_plan_free(p); return rc; }
    canonical_spec(p);
    *out = p;
    return KVQ_OK;
}

int kvq_plan_create(kvq_plan **out, const char *spec, int dim, uint64_t seed, const float *calib, size_t n_calib) {
    return plan_build(out, spec, dim, seed, calib, n_calib, KVQ_ISA_BEST, NULL);
}

int kvq_plan_clone_isa(kvq_plan **out, const kvq_plan *plan, kvq_isa isa) {
    if (!out || !plan) return KVQ_ERR_NULL;
    if (isa != KVQ_ISA_SCALAR && isa != KVQ_ISA_AVX2 && isa != KVQ_ISA_AVX512 && isa != KVQ_ISA_BEST)
        return KVQ_ERR_INVALID_ARG;
    return plan_build(out, plan->spec, plan->d, plan->seed, NULL, 0, isa, plan);
}

int kvq_spec_needs_calibration(const char *spec, int *needs) {
    if (!spec || !needs) return KVQ_ERR_NULL;
    const kvq_method *m;
    kvq_plan_opts o;
    int rc = parse_spec(spec, &m, &o);
    if (rc) return rc;
    *needs = o.outliers > 0 || o.center;
    return KVQ_OK;
}

void kvq_plan_free(kvq_plan *p) {
    if (!p) return;
    if (p->o.outliers || p->o.center) free(p->priv); /* the wrappers own priv, not the method */
    else if (p->m && p->m->fini) p->m->fini(p);
    rot_free(&p->rot);
    free(p->S);
    free(p->ch_out);
    free(p->ch_in);
    free(p->mu);
    kvq_plan_free(p->inner);
    free(p);
}

const char *kvq_plan_spec(const kvq_plan *p) { return p ? p->spec : ""; }
int kvq_plan_dim(const kvq_plan *p) { return p ? p->d : 0; }
size_t kvq_plan_code_bytes(const kvq_plan *p) { return p ? p->code_bytes : 0; }
double kvq_plan_bits_per_value(const kvq_plan *p) { return p ? (double)p->code_bytes * 8.0 / p->d : 0; }
int kvq_plan_can_decode(const kvq_plan *p) { return p ? p->can_decode : 0; }
size_t kvq_plan_query_floats(const kvq_plan *p) { return p ? p->qfloats : 0; }
kvq_isa kvq_plan_isa(const kvq_plan *p) { return p ? p->isa : KVQ_ISA_SCALAR; }

/* ---- batched API ------------------------------------------------------------ */
static int mul_overflows(size_t a, size_t b) { return b && a > SIZE_MAX / b; }

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
    p->prep(p, q, qp);
    return KVQ_OK;
}

int kvq_score(const kvq_plan *p, const float *qp, size_t nq, const void *codes, size_t n, float *scores) {
    if (!p || (!qp && nq) || (!codes && n) || (!scores && n && nq)) return KVQ_ERR_NULL;
    if (mul_overflows(nq, n) || mul_overflows(n, p->code_bytes)) return KVQ_ERR_OVERFLOW;
    if (n && nq) p->score(p, qp, nq, codes, n, scores);
    return KVQ_OK;
}

int kvq_accumulate(const kvq_plan *p, const float *w, size_t nq, const void *codes, size_t n, float *acc) {
    if (!p || (!w && nq && n) || (!codes && n) || (!acc && nq)) return KVQ_ERR_NULL;
    if (!p->can_decode) return KVQ_ERR_NO_DECODE;
    if (mul_overflows(nq, n) || mul_overflows(n, p->code_bytes)) return KVQ_ERR_OVERFLOW;
    if (n && nq) p->accum(p, w, nq, codes, n, acc);
    return KVQ_OK;
}

int outliers_unrotate(const kvq_plan *p, const float *acc, float *out);

int kvq_unrotate(const kvq_plan *p, const float *acc, float *out) {
    if (!p || !acc || !out) return KVQ_ERR_NULL;
    if (p->o.center) return center_unrotate(p, acc, out);
    if (p->inner) return outliers_unrotate(p, acc, out);
    rot_apply_inv(&p->rot, acc, out);
    return KVQ_OK;
}
