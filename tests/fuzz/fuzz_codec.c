/*
 * Codec round trips on hostile floats, over the method specs.
 *
 * Input: byte 0 picks the spec, byte 1 the head dim, byte 2 the row count
 * (1..4), the input dtype and how the values are read; then the values:
 * raw f32 bit patterns (NaN, Inf, denormals, anything) or bytes mapped to
 * a table of hostile values (0, -0, the smallest denormal, FLT_MIN,
 * FLT_MAX, 65504 and just above it, 1e30, NaN, Inf, ...). Rows the input
 * does not cover are filled with a fixed pattern.
 *
 * Checks (zstd's round-trip style):
 *  - kvq_encode returns a documented code: KVQ_ERR_NONFINITE when a value
 *    is NaN/Inf (f32 input), else KVQ_OK or a range error (a row whose
 *    scale is beyond its stored format, layouts.h: so every row accepted,
 *    however long, decodes finite; tests/test_codec_range.c);
 *  - encoding twice, and row by row, gives the same bytes;
 *  - decode gives n x dim finite values, within the method's error of the
 *    input (|x - x'| <= 1.5 |x| per row, for methods without +center);
 *  - scores are finite and agree with the decoded rows
 *    (|s - <q, x'>| <= 0.05 |q| |x'|; key-only methods |s| <= 4 |q| |x|;
 *    not for +center / +chscale, whose errors are relative to the
 *    calibrated mean and channel scales) when |q| |x| is far from
 *    overflowing, and an accumulation of the decoded rows agrees with
 *    sum p_i x'_i;
 *  - a non-finite query is refused by kvq_query_prepare (KVQ_ERR_NONFINITE).
 */
#include <float.h>

#include "fuzz_common.h"

static const char *const SPECS[] = {
    "f32", "f16", "bf16", "q8", "q4", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "tq-mse:5", "tq-mse:6",
    "tq-mse:8", "tq-prod:2", "tq-prod:3", "tq-prod:4", "tq-prod:8", "qjl", "qjl:64", "polar", "polar:3",
    "polar:6", "rvq:1", "rvq:2", "rvq:4", "tq-mse:4+norot", "tq-mse:3+scale=norm", "tq-mse:4+scale32",
    "tq-mse:2+cb=gauss", "tq-prod:3+m=64", "polar+scale32", "rvq:2+scale32", "tq-mse:3+outliers=8",
    "tq-prod:3+outliers=8", "q8+outliers=16", "tq-mse:4+center", "q8+center", "tq-prod:3+center",
    "tq-mse:3+chscale", "q4+chscale", "tq-mse:8+scale32+norot",
};
#define N_SPECS (sizeof SPECS / sizeof SPECS[0]) /* polar:7/8 left out: their plans take seconds to build */
static const int DIMS[8] = {32, 64, 128, 256, 40, 96, 48, 512};
#define MAX_ROWS 4

/* Plans that need no calibration, built once per (spec, dim). */
static kvq_plan *PLANS[N_SPECS][8];
static int PLAN_RC[N_SPECS][8];
static int NEEDS[N_SPECS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t s = 0; s < N_SPECS; s++)
        FUZZ_CHECK(kvq_spec_needs_calibration(SPECS[s], &NEEDS[s]) == KVQ_OK, "spec %s", SPECS[s]);
    return 0;
}

static float hostile(uint8_t b) {
    static const float T[16] = {0.0f, -0.0f, 1.4e-45f, FLT_MIN, FLT_MAX, -FLT_MAX, 65504.0f, 65520.0f,
                                1e30f, -1e-30f, 1.0f, -3.0f, 1e-7f, 300.0f, 0.5f, -1e20f};
    if (b >= 0xfd) return b == 0xfd ? NAN : b == 0xfe ? INFINITY : -INFINITY;
    float v = T[b & 15];
    return (b & 16) ? -v : v;
}

static double dot(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}
static double norm(const float *a, int d) { return sqrt(dot(a, a, d)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_input in = {data, size, 0};
    const size_t si = fuzz_u8(&in) % N_SPECS;
    const int di = fuzz_u8(&in) & 7, d = DIMS[di];
    const uint8_t mode = fuzz_u8(&in);
    const size_t n = 1 + (mode & 3);
    const kvq_dtype dtype = (mode >> 2) % 3 == 0 ? KVQ_DTYPE_F32 : (mode >> 2) % 3 == 1 ? KVQ_DTYPE_F16 : KVQ_DTYPE_BF16;
    const int raw = (mode >> 4) & 1;
    const char *spec = SPECS[si];

    float x[MAX_ROWS * KVQ_DIM_MAX];
    uint32_t fill = 0x9e3779b9u;
    for (size_t i = 0; i < n * (size_t)d; i++) {
        if (raw && fuzz_left(&in) >= 4) {
            uint32_t u = fuzz_u32(&in);
            memcpy(&x[i], &u, 4);
        } else if (!raw && fuzz_left(&in) >= 1) {
            x[i] = hostile(fuzz_u8(&in));
        } else {
            fill = fill * 1664525u + 1013904223u;
            x[i] = (float)((int32_t)(fill >> 8) - (1 << 23)) / (float)(1 << 23);
        }
    }
    /* the input as the encoder sees it (f16/bf16 rounding) */
    uint16_t h[MAX_ROWS * KVQ_DIM_MAX];
    float xs[MAX_ROWS * KVQ_DIM_MAX];
    int finite = 1;
    for (size_t i = 0; i < n * (size_t)d; i++) {
        if (dtype == KVQ_DTYPE_F32) xs[i] = x[i];
        else {
            h[i] = dtype == KVQ_DTYPE_F16 ? kvq_f32_to_f16(x[i]) : kvq_f32_to_bf16(x[i]);
            xs[i] = dtype == KVQ_DTYPE_F16 ? kvq_f16_to_f32(h[i]) : kvq_bf16_to_f32(h[i]);
        }
        finite &= isfinite(xs[i]) != 0;
    }
    const void *src = dtype == KVQ_DTYPE_F32 ? (const void *)x : (const void *)h;

    /* the plan: cached, or calibrated on the input rows */
    kvq_plan *p = NULL;
    int rc;
    if (NEEDS[si]) {
        rc = kvq_plan_create(&p, spec, d, 7, xs, n);
        FUZZ_CHECK(fuzz_known_status(rc), "calibrated plan: %d", rc);
        if (!finite) FUZZ_CHECK(rc != KVQ_OK, "%s calibrated on non-finite rows", spec);
        if (rc) return 0;
    } else {
        if (!PLANS[si][di] && !PLAN_RC[si][di]) {
            PLAN_RC[si][di] = kvq_plan_create(&PLANS[si][di], spec, d, 7, NULL, 0);
            FUZZ_CHECK(fuzz_known_status(PLAN_RC[si][di]), "plan: %d", PLAN_RC[si][di]);
        }
        if (PLAN_RC[si][di]) return 0; /* e.g. a dim the method refuses */
        p = PLANS[si][di];
    }
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    uint8_t *c1 = malloc(n * cb), *c2 = malloc(n * cb), *c3 = malloc(n * cb);
    float *dec = malloc(sizeof(float) * n * (size_t)d), *qp = malloc(sizeof(float) * qf);
    FUZZ_CHECK(c1 && c2 && c3 && dec && qp, "out of memory");

    /* encode: a documented code, deterministic, row by row the same */
    int rc1 = kvq_encode(p, src, dtype, n, c1), rc2 = kvq_encode(p, src, dtype, n, c2);
    FUZZ_CHECK(fuzz_known_status(rc1) && rc1 == rc2, "encode %s: %d then %d", spec, rc1, rc2);
    if (!finite && dtype == KVQ_DTYPE_F32) /* checked for the whole batch first */
        FUZZ_CHECK(rc1 == KVQ_ERR_NONFINITE, "%s: non-finite input encoded: %d", spec, rc1);
    else if (!finite) /* f16 / bf16 rows are encoded in turn: a range error may come first */
        FUZZ_CHECK(rc1 == KVQ_ERR_NONFINITE || rc1 == KVQ_ERR_RANGE, "%s: non-finite input encoded: %d", spec, rc1);
    else
        FUZZ_CHECK(rc1 == KVQ_OK || rc1 == KVQ_ERR_RANGE, "%s: finite input: %d", spec, rc1);
    if (rc1 == KVQ_OK) {
        FUZZ_CHECK(!memcmp(c1, c2, n * cb), "%s: two encodes differ", spec);
        const size_t es = kvq_dtype_size(dtype);
        for (size_t i = 0; i < n; i++) {
            int r = kvq_encode(p, (const uint8_t *)src + i * (size_t)d * es, dtype, 1, c3 + i * cb);
            FUZZ_CHECK(r == KVQ_OK, "%s: row %zu alone: %d", spec, i, r);
        }
        FUZZ_CHECK(!memcmp(c1, c3, n * cb), "%s: rows encoded alone differ from the batch", spec);
    }

    /* decode: finite, within the method's error */
    const int can_decode = kvq_plan_can_decode(p);
    const int centered = strstr(spec, "+center") || strstr(spec, "+chscale");
    double all = 0; /* longest row (calibrated methods: every row went into the mean / scales) */
    for (size_t i = 0; i < n; i++) all = fmax(all, norm(xs + i * (size_t)d, d));
    if (rc1 == KVQ_OK) {
        rc = kvq_decode(p, c1, n, dec);
        FUZZ_CHECK(rc == (can_decode ? KVQ_OK : KVQ_ERR_NO_DECODE), "%s: decode %d", spec, rc);
        for (size_t i = 0; can_decode && i < n; i++) {
            const float *xi = xs + i * (size_t)d, *yi = dec + i * (size_t)d;
            double e = 0;
            for (int j = 0; j < d; j++) {
                FUZZ_CHECK(isfinite(yi[j]), "%s: decoded row %zu value %d not finite", spec, i, j);
                e += ((double)yi[j] - xi[j]) * ((double)yi[j] - xi[j]);
            }
            if (!centered)
                FUZZ_CHECK(sqrt(e) <= 1.5 * norm(xi, d) + 1e-30, "%s d=%d: row %zu error %g for norm %g", spec, d, i,
                           sqrt(e), norm(xi, d));
        }
    }

    /* scores against a query: the first input row, rescaled to a moderate norm */
    float q[KVQ_DIM_MAX];
    memcpy(q, xs, sizeof(float) * (size_t)d);
    double qn = norm(q, d);
    if (rc1 == KVQ_OK && qn > 0 && qn < 1e300) {
        for (int j = 0; j < d; j++) q[j] = (float)(q[j] / qn);
        qn = norm(q, d);
        rc = kvq_query_prepare(p, q, qp);
        FUZZ_CHECK(rc == KVQ_OK, "%s: prepare of a unit query: %d", spec, rc);
        float s[MAX_ROWS];
        FUZZ_CHECK(kvq_score(p, qp, 1, c1, n, s) == KVQ_OK, "score");
        for (size_t i = 0; i < n; i++) {
            const double kn = norm(xs + i * (size_t)d, d);
            if (!((NEEDS[si] ? fmax(all, kn) : kn) < 1e30)) continue; /* |q| |k| near the float range */
            FUZZ_CHECK(isfinite(s[i]), "%s d=%d: score %zu not finite (|k| = %g)", spec, d, i, kn);
            if (centered) continue; /* errors relative to the calibrated mean / channel scales, not |q| |k| */
            if (!can_decode) {
                FUZZ_CHECK(fabs(s[i]) <= 4.0 * qn * kn + 1e-30, "%s: estimate %g for |q||k| %g", spec, s[i], qn * kn);
                continue;
            }
            const float *yi = dec + i * (size_t)d;
            const double want = dot(q, yi, d), tol = 0.05 * qn * norm(yi, d) + 1e-30;
            FUZZ_CHECK(fabs(s[i] - want) <= tol, "%s d=%d: score %g vs decoded %g (tol %g)", spec, d, s[i],
                       want, tol);
        }
        /* values: sum p_i x'_i */
        if (can_decode) {
            float w[MAX_ROWS], acc[KVQ_DIM_MAX], out[KVQ_DIM_MAX];
            double mx = 0;
            for (size_t i = 0; i < n; i++) {
                w[i] = 1.0f / (float)(i + 1);
                double kn = norm(dec + i * (size_t)d, d);
                if (!isnan(mx) && !(kn <= mx)) mx = kn; /* NaN sticks */
            }
            if (mx < 1e30 && (NEEDS[si] ? all : 0) < 1e30) {
                memset(acc, 0, sizeof acc);
                FUZZ_CHECK(kvq_accumulate(p, w, 1, c1, n, acc) == KVQ_OK && kvq_unrotate(p, acc, out) == KVQ_OK,
                           "accumulate");
                double e = 0, tot = 0;
                for (int j = 0; j < d; j++) {
                    double want = 0;
                    for (size_t i = 0; i < n; i++) want += (double)w[i] * dec[i * (size_t)d + j];
                    FUZZ_CHECK(isfinite(out[j]), "%s: accumulated value %d not finite", spec, j);
                    e += (out[j] - want) * (out[j] - want);
                }
                double wsum = 0;
                for (size_t i = 0; i < n; i++) tot += w[i] * norm(dec + i * (size_t)d, d), wsum += w[i];
                /* plus an absolute floor at the scales' resolution: the record scales are f16 (smallest
                 * step 2^-24) and the VNNI accumulate of the block formats rounds the weights to 16 bits
                 * and offsets q4's values by 8 steps (n - 8, the min term + 8 scales), so a row that
                 * decodes to exact zeros (|x| = 1e-30: scale 2^-24, min 0) accumulates to ~1e-16, not 0
                 * (regress/codec/q4-zero-row-accum): up to 8 * 2^-24 * 2^-16 a unit of weight and
                 * coordinate */
                const double floor_e = 8.0 * ldexp(1.0, -40) * sqrt((double)d) * wsum;
                FUZZ_CHECK(sqrt(e) <= 1e-2 * tot + floor_e + 1e-30, "%s d=%d: accumulation error %g of %g", spec, d,
                           sqrt(e), tot);
            }
        }
    }
    /* a non-finite query is refused */
    for (int j = 0; j < d; j++) q[j] = 0.25f;
    q[d / 2] = (mode & 0x20) ? INFINITY : NAN;
    rc = kvq_query_prepare(p, q, qp);
    FUZZ_CHECK(rc == KVQ_ERR_NONFINITE, "%s: prepare of a non-finite query: %d", spec, rc);

    free(c1);
    free(c2);
    free(c3);
    free(dec);
    free(qp);
    if (NEEDS[si]) kvq_plan_free(p);
    return 0;
}
