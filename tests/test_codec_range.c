/*
 * Rows beyond the range of the stored formats (layouts.h, KVQ_SCALE32_MAX):
 * the regression test of a defect found by tests/fuzz/fuzz_codec.c, where
 * a finite row whose norm exceeds FLT_MAX (64 values of +-3e38) encoded
 * with KVQ_OK under +scale32 into a finite f32 scale that decoded to
 * Inf/NaN, and a +center / +chscale plan calibrated on such rows rotated
 * its mean to Inf and decoded NaN.
 * For every method, with +scale32, +norot, +center and +chscale, at head
 * dims 32..512 and on every ISA the CPU runs:
 *  - the probe rows are refused (KVQ_ERR_RANGE) by every method that
 *    stores a scale, and +center / +chscale plans calibrated on them are
 *    refused too;
 *  - over a sweep of row norms from 1e20 to past FLT_MAX and four row
 *    shapes, every row kvq_encode accepts decodes to finite values, its
 *    score against a unit query is finite, and every ISA gives the same
 *    status;
 *  - +scale32 still takes the rows it can store: norm 1e30 at d = 128
 *    (polar 1e18) encodes and decodes with its usual error.
 * And at the low end, found by the same fuzzer: a q4 block whose spread is
 * below f16's resolution ((max - min) / 15 < 2^-25) stored scale 0 and
 * decoded every value as the rounded min (zeros beside one -1e-7: error
 * 6.6e-7 for a row of norm 1e-7); such blocks keep the smallest f16 step.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "testutil.h"

static const char *SPECS[] = {
    "f32", "f16", "bf16", "q8", "q4", "tq-mse:1", "tq-mse:4", "tq-mse:8", "tq-mse:4+scale32", "tq-mse:1+scale32",
    "tq-mse:8+scale32", "tq-mse:8+scale32+norot", "tq-mse:4+scale=norm+scale32", "tq-prod:2+scale32",
    "tq-prod:8+scale32", "tq-prod:3", "qjl", "qjl+scale32", "polar+scale32", "polar:3+scale32",
    "polar+scale=norm+scale32", "rvq:1+scale32", "rvq:2+scale32", "rvq:4+scale32", "tq-mse:3+outliers=8+scale32",
    "q8+outliers=16", "tq-mse:4+center", "tq-mse:4+center+scale32", "q8+center", "tq-mse:3+chscale",
    "tq-mse:3+chscale+scale32", "q4+chscale", "polar+chscale+scale32", "rvq:2+center+scale32", "f32+center",
    "bf16+chscale",
};
#define NSPECS (sizeof SPECS / sizeof *SPECS)
static const int DIMS[] = {32, 40, 64, 128, 512};
#define NDIMS (sizeof DIMS / sizeof *DIMS)
#define NROW 4
#define NCAL 8

/* Row r of shape `shape` and norm about `mag` * sqrt(d) (values clamped to +-FLT_MAX). */
static void make_row(float *x, int d, int shape, double mag, int r) {
    for (int i = 0; i < d; i++) {
        double v;
        switch (shape) {
        case 0: v = (i % 3 ? 1 : -1) * mag; break;                              /* flat: the fuzzer's probe */
        case 1: v = i == 3 + r ? mag * sqrt((double)d) : 1.0; break;             /* one spike */
        case 2: v = (i & 1 ? -1 : 1) * mag * ((i * 7919 + r) % 13) / 6.5; break; /* uneven */
        default: v = mag * (((i * 31 + r) % 7) - 3) / 2.0; break;                /* a few levels */
        }
        x[i] = (float)fmax(-FLT_MAX, fmin(FLT_MAX, v));
    }
}

static int stores_scale(const char *spec) {
    return strncmp(spec, "f32", 3) && strncmp(spec, "bf16", 4); /* f16 values refuse them too */
}

static int needs(const char *spec) {
    int n = 0;
    CHECK_OK(kvq_spec_needs_calibration(spec, &n));
    return n;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Encodes rows on plan p: returns the status; when OK, decode and scores are finite. */
static int check_rows(const kvq_plan *p, const char *spec, const float *x, size_t n, double norm) {
    const int d = kvq_plan_dim(p);
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    uint8_t *codes = malloc(n * cb);
    float *y = malloc(n * (size_t)d * sizeof *y), *qp = malloc(qf * sizeof *qp), q[512], s[NROW];
    CHECK(codes && y && qp, "out of memory");
    int rc = kvq_encode(p, x, KVQ_DTYPE_F32, n, codes);
    CHECK(rc == KVQ_OK || rc == KVQ_ERR_RANGE, "%s d=%d: encode %d", spec, d, rc);
    if (rc == KVQ_OK && kvq_plan_can_decode(p)) {
        CHECK_OK(kvq_decode(p, codes, n, y));
        CHECK(all_finite(y, n * (size_t)d), "%s d=%d isa=%s: rows of norm %g encoded, decode not finite", spec, d,
              kvq_isa_name(kvq_plan_isa(p)), norm);
    }
    if (rc == KVQ_OK) {
        for (int i = 0; i < d; i++) q[i] = (float)(1 / sqrt((double)d));
        CHECK_OK(kvq_query_prepare(p, q, qp));
        CHECK_OK(kvq_score(p, qp, 1, codes, n, s));
        if (norm < 1e30)
            CHECK(all_finite(s, n), "%s d=%d isa=%s: rows of norm %g, score not finite", spec, d,
                  kvq_isa_name(kvq_plan_isa(p)), norm);
    }
    free(codes);
    free(y);
    free(qp);
    return rc;
}

int main(void) {
    const kvq_isa best = kvq_cpu_isa();
    float cal[NCAL * 512], x[NROW * 512];
    tu_rng r = {3};
    for (size_t s = 0; s < NSPECS; s++)
        for (size_t di = 0; di < NDIMS; di++) {
            const int d = DIMS[di], nc = needs(SPECS[s]);
            for (int i = 0; i < NCAL * d; i++) cal[i] = (float)tu_gauss(&r);
            kvq_plan *base = NULL;
            int rc = kvq_plan_create(&base, SPECS[s], d, 9, nc ? cal : NULL, nc ? NCAL : 0);
            if (rc == KVQ_ERR_UNSUPPORTED_DIM || rc == KVQ_ERR_INVALID_ARG) continue; /* e.g. polar at d = 40 */
            CHECK(rc == KVQ_OK, "%s d=%d: plan %d", SPECS[s], d, rc);
            if (rc) continue;
            kvq_plan *isa[KVQ_ISA_AVX512 + 1] = {0};
            for (int k = KVQ_ISA_SCALAR; k <= (int)best; k++) CHECK_OK(kvq_plan_clone_isa(&isa[k], base, (kvq_isa)k));
            /* the fuzzer's probe: a row longer than FLT_MAX */
            make_row(x, d, 0, 3e38, 0);
            for (int k = KVQ_ISA_SCALAR; k <= (int)best; k++) {
                rc = check_rows(isa[k], SPECS[s], x, 1, INFINITY);
                if (stores_scale(SPECS[s]))
                    CHECK(rc == KVQ_ERR_RANGE, "%s d=%d isa=%s: a row of norm > FLT_MAX gave %d", SPECS[s], d,
                          kvq_isa_name((kvq_isa)k), rc);
            }
            /* a +center / +chscale plan calibrated on such rows: refused (+outliers only picks channels) */
            if (nc && strstr(SPECS[s], "+c")) {
                for (int i = 0; i < NCAL; i++) make_row(cal + i * d, d, 0, 3e38, i);
                kvq_plan *c = NULL;
                rc = kvq_plan_create(&c, SPECS[s], d, 9, cal, NCAL);
                CHECK(rc == KVQ_ERR_RANGE && !c, "%s d=%d: calibrated on rows of norm > FLT_MAX: %d", SPECS[s], d, rc);
                kvq_plan_free(c);
            }
            /* the sweep: whatever is accepted decodes finite, on every ISA alike */
            for (int shape = 0; shape < 4; shape++)
                for (double mag = 1e20; mag < 4e38; mag *= 9.3) {
                    for (int i = 0; i < NROW; i++) make_row(x + i * d, d, shape, mag * (1 + 0.3 * i), i);
                    int rc0 = 0;
                    for (int k = KVQ_ISA_SCALAR; k <= (int)best; k++) {
                        rc = check_rows(isa[k], SPECS[s], x, NROW, mag * sqrt((double)d));
                        if (k == KVQ_ISA_SCALAR) rc0 = rc;
                        CHECK(rc == rc0, "%s d=%d shape %d mag %g: isa %s gave %d, scalar %d", SPECS[s], d, shape,
                              mag, kvq_isa_name((kvq_isa)k), rc, rc0);
                    }
                }
            for (int k = KVQ_ISA_SCALAR; k <= (int)best; k++) kvq_plan_free(isa[k]);
            kvq_plan_free(base);
        }
    /* +scale32 keeps the range it can store: rows of norm 1e30 (polar: 1e18, its radii are computed in
     * float, sqrt(a^2 + b^2), so its coordinates stay below ~1e19) */
    const char *keep[] = {"tq-mse:4+scale32", "rvq:2+scale32", "tq-prod:3+scale32", "polar+scale32"};
    for (size_t s = 0; s < sizeof keep / sizeof *keep; s++) {
        kvq_plan *p;
        CHECK_OK(kvq_plan_create(&p, keep[s], 128, 9, NULL, 0));
        float y[NROW * 128];
        uint8_t codes[NROW * 1024];
        const double norm = strncmp(keep[s], "polar", 5) ? 1e30 : 1e18;
        for (int i = 0; i < NROW * 128; i++) x[i] = (float)(tu_gauss(&r) * norm / sqrt(128.0));
        CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, NROW, codes));
        if (kvq_plan_can_decode(p)) {
            CHECK_OK(kvq_decode(p, codes, NROW, y));
            const double e = tu_rel_l2(y, x, NROW * 128);
            CHECK(e < 0.3, "%s: rows of norm 1e30 decode with relative error %g", keep[s], e);
        }
        kvq_plan_free(p);
    }
    /* q4 blocks of tiny spread (tests/fuzz/regress/codec/q4-scale-below-f16) */
    for (int k = 0; k < 3; k++) {
        const float tiny[3] = {-1e-7f, 2e-8f, -3e-9f};
        for (int c = 0; c < 96; c++) x[c] = c % 32 == 5 ? tiny[k] * (1 + c / 32) : 0.0f;
        kvq_plan *p;
        CHECK_OK(kvq_plan_create(&p, "q4", 96, 9, NULL, 0));
        uint8_t codes[256];
        float y[96];
        CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes));
        CHECK_OK(kvq_decode(p, codes, 1, y));
        double e = 0, nx = 0;
        for (int c = 0; c < 96; c++) e += ((double)y[c] - x[c]) * ((double)y[c] - x[c]), nx += (double)x[c] * x[c];
        /* no worse than decoding zeros (the fuzzer allows 1.5 |x|; before, 6.6e-7 for a -1e-7 per block) */
        CHECK(sqrt(e) <= 1.000001 * sqrt(nx), "q4, one %g per block and zeros: error %g for norm %g", tiny[k],
              sqrt(e), sqrt(nx));
        kvq_plan_free(p);
    }
    return tu_finish("test_codec_range");
}
