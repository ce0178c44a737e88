/* Codec methods through the public API: quality against the Lloyd-Max
 * bounds, unbiasedness of the QJL estimators, determinism, every head dim,
 * and every bad input returning an error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "testutil.h"

static const char *METHODS[] = {"f32", "f16", "bf16", "q8", "q4", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4",
                                "tq-mse:5", "tq-mse:8", "tq-prod:2", "tq-prod:3", "tq-prod:8", "qjl", "polar",
                                "rvq:1", "rvq:2", "tq-mse:3+outliers=8", "tq-prod:3+outliers=8", "q8+outliers=16",
                                "tq-mse:4+center", "q8+center", "tq-prod:3+center", "tq-mse:3+chscale", "q8+chscale"};
#define NMETHODS (sizeof METHODS / sizeof *METHODS)

static float *gauss_rows(size_t n, int d, uint64_t seed) {
    float *x = malloc(n * (size_t)d * sizeof *x);
    tu_rng r = {seed};
    for (size_t i = 0; i < n * (size_t)d; i++) x[i] = (float)tu_gauss(&r);
    return x;
}

static double mean_rel_mse(kvq_plan *p, const float *x, size_t n) {
    int d = kvq_plan_dim(p);
    uint8_t *codes = malloc(n * kvq_plan_code_bytes(p));
    float *y = malloc(n * (size_t)d * sizeof *y);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, codes));
    CHECK_OK(kvq_decode(p, codes, n, y));
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double e = 0, xx = 0;
        for (int c = 0; c < d; c++) {
            double t = x[i * d + c] - y[i * d + c];
            e += t * t;
            xx += (double)x[i * d + c] * x[i * d + c];
        }
        s += e / xx;
    }
    free(codes);
    free(y);
    return s / n;
}

/*
 * tq-mse rel_mse within 10% of the Gaussian Lloyd-Max MSE (Max 1960), on
 * Gaussian rows and on rows whose channel 5 is 100x larger: the rotation
 * spreads the outlier over all coordinates. With one dominant channel every
 * row shares the same rotated direction, so one plan's error is that of one
 * finite sample of coordinates; the outlier case averages over 8 plan seeds.
 */
static void test_tq_mse_bounds(void) {
    static const double lm[5] = {0, 0.3634, 0.1175, 0.03454, 0.009497};
    const size_t n = 2000;
    for (int dd = 0; dd < 3; dd++) {
        int d = dd == 0 ? 128 : dd == 1 ? 64 : 96;
        float *x = gauss_rows(n, d, 100 + d);
        float *xo = gauss_rows(n, d, 200 + d);
        for (size_t i = 0; i < n; i++) xo[i * d + 5] *= 100;
        for (int b = 1; b <= 4; b++) {
            char spec[16];
            snprintf(spec, sizeof spec, "tq-mse:%d", b);
            kvq_plan *p;
            double mo = 0;
            for (int seed = 0; seed < 8; seed++) {
                CHECK_OK(kvq_plan_create(&p, spec, d, 7 + seed, NULL, 0));
                if (seed == 0) {
                    double m = mean_rel_mse(p, x, n);
                    CHECK(fabs(m / lm[b] - 1) < 0.10, "d=%d b=%d gaussian rel_mse %.5f vs LM %.5f", d, b, m, lm[b]);
                    double bits = kvq_plan_bits_per_value(p);
                    CHECK(fabs(bits - (b + 16.0 / d)) < 1e-9, "bits %.4f", bits);
                }
                mo += mean_rel_mse(p, xo, n) / 8;
                kvq_plan_free(p);
            }
            /* never worse than Lloyd-Max by more than 10%; it can be better: at
             * small d the rotated spike's coordinates are sums of d signs, a
             * discrete lattice that quantizes with less error than a Gaussian */
            CHECK(mo / lm[b] < 1.10 && mo / lm[b] > 0.80, "d=%d b=%d outlier-channel rel_mse %.5f vs LM %.5f", d, b, mo, lm[b]);
        }
        free(x);
        free(xo);
    }
}

/*
 * QJL-based inner products are unbiased over the randomness of S. With one
 * fixed S a finite sketch has its own systematic error of order 1/sqrt(m), so
 * the test averages the slope bias b_s = sum (est - t) t / sum t^2 over many
 * seeds and requires |mean| <= 3 standard errors (+ a 1e-3 floor for float
 * rounding). The same statistic for tq-mse:2 must be clearly negative (the
 * MSE quantizer shrinks inner products): the test can fail.
 */
static double slope_bias(const char *spec, int d, uint64_t seed, const float *k, const float *q, size_t nk, size_t nq) {
    kvq_plan *p;
    if (kvq_plan_create(&p, spec, d, seed, NULL, 0)) return NAN;
    size_t qf = kvq_plan_query_floats(p);
    uint8_t *codes = malloc(nk * kvq_plan_code_bytes(p));
    float *qp = malloc(nq * qf * sizeof *qp), *s = malloc(nq * nk * sizeof *s);
    kvq_encode(p, k, KVQ_DTYPE_F32, nk, codes);
    for (size_t j = 0; j < nq; j++) kvq_query_prepare(p, q + j * d, qp + j * qf);
    kvq_score(p, qp, nq, codes, nk, s);
    double num = 0, den = 0;
    for (size_t j = 0; j < nq; j++)
        for (size_t i = 0; i < nk; i++) {
            double t = 0;
            for (int c = 0; c < d; c++) t += (double)q[j * d + c] * k[i * d + c];
            num += (s[j * nk + i] - t) * t;
            den += t * t;
        }
    free(codes);
    free(qp);
    free(s);
    kvq_plan_free(p);
    return num / den;
}

static void test_unbiased(void) {
    const int d = 64, seeds = 60;
    const size_t nk = 64, nq = 8;
    float *k = gauss_rows(nk, d, 1), *q = gauss_rows(nq, d, 2);
    const char *specs[] = {"qjl", "tq-prod:2", "tq-prod:3", "tq-mse:2"};
    for (int m = 0; m < 4; m++) {
        double s = 0, s2 = 0;
        for (int t = 0; t < seeds; t++) {
            double b = slope_bias(specs[m], d, 1000 + t, k, q, nk, nq);
            s += b;
            s2 += b * b;
        }
        double mean = s / seeds, sd = sqrt(fmax(0, s2 / seeds - mean * mean)), se = sd / sqrt((double)seeds);
        if (m < 3) CHECK(fabs(mean) <= 3 * se + 1e-3, "%s mean slope bias %.5f, se %.5f", specs[m], mean, se);
        else CHECK(mean < -0.08 && mean < -10 * se, "tq-mse:2 bias %.4f should be ~ -0.115", mean);
    }
    free(k);
    free(q);
}

static void test_all_dims_and_determinism(void) {
    static const int dims[] = {32, 40, 64, 80, 96, 128, 136, 256, 504, 512};
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
        int d = dims[di];
        const size_t n = 37;
        float *x = gauss_rows(n, d, d);
        for (size_t m = 0; m < NMETHODS; m++) {
            kvq_plan *p = NULL, *p2 = NULL;
            int rc = kvq_plan_create(&p, METHODS[m], d, 3, x, n);
            if (rc == KVQ_ERR_UNKNOWN_METHOD) continue; /* method not in this build */
            if (rc == KVQ_ERR_UNSUPPORTED_DIM && !strcmp(METHODS[m], "polar") && (d & (d - 1))) continue;
            if (rc == KVQ_ERR_INVALID_ARG && strstr(METHODS[m], "+outliers") && d < 48) continue; /* d - K < 32 */
            CHECK(rc == 0, "%s d=%d: %s", METHODS[m], d, kvq_strerror(rc));
            if (rc) continue;
            CHECK_OK(kvq_plan_create(&p2, METHODS[m], d, 3, x, n));
            size_t cb = kvq_plan_code_bytes(p);
            uint8_t *c1 = malloc(n * cb), *c2 = malloc(n * cb);
            CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, c1));
            CHECK_OK(kvq_encode(p2, x, KVQ_DTYPE_F32, n, c2));
            CHECK(!memcmp(c1, c2, n * cb), "%s d=%d: same seed, different bytes", METHODS[m], d);
            if (kvq_plan_can_decode(p)) {
                double e = mean_rel_mse(p, x, n);
                CHECK(e < 0.45, "%s d=%d rel_mse %.4f", METHODS[m], d, e);
            }
            free(c1);
            free(c2);
            kvq_plan_free(p);
            kvq_plan_free(p2);
        }
        free(x);
    }
}

/* f16 and bf16 inputs: bf16 rows with norms far beyond f16's range. */
static void test_input_dtypes(void) {
    const int d = 128;
    const size_t n = 50;
    float *x = gauss_rows(n, d, 77);
    uint16_t *h = malloc(n * d * 2), *bf = malloc(n * d * 2);
    for (size_t i = 0; i < n * d; i++) {
        h[i] = kvq_f32_to_f16(x[i]);
        bf[i] = kvq_f32_to_bf16(x[i] * 30000.0f); /* norm ~ 3.4e5 > 65504 */
    }
    kvq_plan *p;
    CHECK_OK(kvq_plan_create(&p, "tq-mse:4", d, 1, NULL, 0));
    uint8_t *c = malloc(n * kvq_plan_code_bytes(p));
    float *y = malloc(n * d * sizeof *y);
    CHECK_OK(kvq_encode(p, h, KVQ_DTYPE_F16, n, c));
    CHECK_OK(kvq_encode(p, bf, KVQ_DTYPE_BF16, n, c));
    CHECK_OK(kvq_decode(p, c, n, y));
    double e = 0, xx = 0;
    for (size_t i = 0; i < n * d; i++) {
        double t = kvq_bf16_to_f32(bf[i]);
        e += (t - y[i]) * (t - y[i]);
        xx += t * t;
    }
    CHECK(e / xx < 0.012, "bf16 large-norm rel err %.4f", e / xx);
    kvq_plan_free(p);
    /* f16 storage of such rows is a range error, not a crash or Inf */
    CHECK_OK(kvq_plan_create(&p, "f16", d, 1, NULL, 0));
    CHECK(kvq_encode(p, bf, KVQ_DTYPE_BF16, n, c) == KVQ_ERR_RANGE, "f16 overflow");
    kvq_plan_free(p);
    free(x);
    free(h);
    free(bf);
    free(c);
    free(y);
}

/*
 * tq codebooks of <= 4 bits score with 8-bit queries (tq_kernels.h). Against
 * the exact <q, decoded k>: the hard bound |err| <= (sq/2) sum_c |ŷ_c| <=
 * (|q|/254) sqrt(d) |k̂| on every pair, and a mean error below 1e-3 |q||k̂|
 * (the 4-bit codebook's own inner-product error is 6.7e-3).
 */
static void test_int8_scores(void) {
    const char *specs[] = {"tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "rvq:2"};
    const int dims[] = {64, 128, 256};
    for (int si = 0; si < 5; si++)
        for (int di = 0; di < 3; di++) {
            const int d = dims[di];
            const size_t n = 200, nq = 4;
            float *k = gauss_rows(n, d, 5 + d), *q = gauss_rows(nq, d, 6 + d), *kh = malloc(n * d * sizeof *kh);
            kvq_plan *p;
            CHECK_OK(kvq_plan_create(&p, specs[si], d, 9, NULL, 0));
            size_t qf = kvq_plan_query_floats(p);
            uint8_t *codes = malloc(n * kvq_plan_code_bytes(p));
            float *qp = malloc(nq * qf * sizeof *qp), *sc = malloc(nq * n * sizeof *sc);
            CHECK_OK(kvq_encode(p, k, KVQ_DTYPE_F32, n, codes));
            CHECK_OK(kvq_decode(p, codes, n, kh));
            for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(p, q + j * d, qp + j * qf));
            CHECK_OK(kvq_score(p, qp, nq, codes, n, sc));
            double mean = 0;
            for (size_t j = 0; j < nq; j++)
                for (size_t i = 0; i < n; i++) {
                    double t = 0, qq = 0, kk = 0;
                    for (int c = 0; c < d; c++) {
                        t += (double)q[j * d + c] * kh[i * d + c];
                        qq += (double)q[j * d + c] * q[j * d + c];
                        kk += (double)kh[i * d + c] * kh[i * d + c];
                    }
                    double e = fabs(sc[j * n + i] - t), bound = sqrt(qq * kk * d) / 254 * 1.001 + 1e-4;
                    CHECK(e <= bound, "%s d=%d: |err| %.4g above the hard bound %.4g", specs[si], d, e, bound);
                    mean += e / sqrt(qq * kk);
                }
            mean /= (double)(nq * n);
            CHECK(mean < 1e-3, "%s d=%d: mean 8-bit query score error %.2e", specs[si], d, mean);
            free(k);
            free(q);
            free(kh);
            free(codes);
            free(qp);
            free(sc);
            kvq_plan_free(p);
        }
}

static void test_errors(void) {
    kvq_plan *p = NULL;
    float x[512] = {0};
    uint8_t codes[4096];
    CHECK(kvq_plan_create(NULL, "tq-mse:4", 128, 1, NULL, 0) == KVQ_ERR_NULL, "null out");
    CHECK(kvq_plan_create(&p, NULL, 128, 1, NULL, 0) == KVQ_ERR_NULL, "null spec");
    CHECK(kvq_plan_create(&p, "tq-mse:4", 0, 1, NULL, 0) == KVQ_ERR_UNSUPPORTED_DIM, "d=0");
    CHECK(kvq_plan_create(&p, "tq-mse:4", -8, 1, NULL, 0) == KVQ_ERR_UNSUPPORTED_DIM, "d<0");
    CHECK(kvq_plan_create(&p, "tq-mse:4", 33, 1, NULL, 0) == KVQ_ERR_UNSUPPORTED_DIM, "d=33");
    CHECK(kvq_plan_create(&p, "tq-mse:4", 1024, 1, NULL, 0) == KVQ_ERR_UNSUPPORTED_DIM, "d=1024");
    CHECK(kvq_plan_create(&p, "tq-mse:0", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "b=0");
    CHECK(kvq_plan_create(&p, "tq-mse:9", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "b=9");
    CHECK(kvq_plan_create(&p, "tq-prod:1", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "prod b=1");
    CHECK(kvq_plan_create(&p, "rvq:5", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "rvq b=5");
    CHECK(kvq_plan_create(&p, "tq-mse:99999999999", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "huge b");
    CHECK(kvq_plan_create(&p, "nope", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "unknown");
    CHECK(kvq_plan_create(&p, "tq-mse:4+bogus", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "bad option");
    CHECK(kvq_plan_create(&p, "tq-mse:", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "empty bits");
    CHECK(kvq_plan_create(&p, "f16:4", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "bits on f16");
    CHECK(kvq_plan_create(&p, "", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "empty spec");
    CHECK(kvq_plan_create(&p, "qjl+m=7", 128, 1, NULL, 0) == KVQ_ERR_INVALID_ARG, "m=7");
    /* a sketch size of 0, or on a method without a sketch, is refused, not ignored (issue 15) */
    const char *no_m[] = {"qjl+m=0", "qjl:0", "tq-mse:4+m=0", "tq-mse:4+m=64", "q8+m=64", "tcq:2+m=8"};
    for (size_t i = 0; i < sizeof no_m / sizeof *no_m; i++)
        CHECK(kvq_plan_create(&p, no_m[i], 128, 1, NULL, 0) == KVQ_ERR_INVALID_ARG, "%s refused", no_m[i]);
    kvq_plan *tp = NULL;
    CHECK_OK(kvq_plan_create(&tp, "tq-prod:3+m=64", 128, 1, NULL, 0));
    kvq_plan_free(tp);
    CHECK(kvq_plan_create(&p, "tq-mse:4+outliers=8", 128, 1, NULL, 0) == KVQ_ERR_NEEDS_CALIBRATION, "no calib");
    CHECK(kvq_plan_create(&p, "tq-mse:4+outliers=5", 128, 1, x, 1) == KVQ_ERR_INVALID_ARG, "K=5");
    CHECK(kvq_plan_create(&p, "tq-mse:4+center", 128, 1, NULL, 0) == KVQ_ERR_NEEDS_CALIBRATION, "center without calib");
    CHECK(kvq_plan_create(&p, "tq-mse:4+center+outliers=8", 128, 1, x, 1) == KVQ_ERR_INVALID_ARG, "center+outliers");
    CHECK(kvq_plan_create(&p, "tq-mse:4+outliers=112", 128, 1, x, 1) == KVQ_ERR_INVALID_ARG, "K too large");
    CHECK(p == NULL, "out untouched on error");
    kvq_plan_free(NULL);
    CHECK_OK(kvq_plan_create(&p, "tq-mse:4", 128, 1, NULL, 0));
    x[3] = NAN;
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes) == KVQ_ERR_NONFINITE, "nan");
    x[3] = INFINITY;
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes) == KVQ_ERR_NONFINITE, "inf");
    x[3] = 0;
    uint16_t hx[128] = {0};
    hx[7] = 0x7c00;
    CHECK(kvq_encode(p, hx, KVQ_DTYPE_F16, 1, codes) == KVQ_ERR_NONFINITE, "f16 inf");
    hx[7] = 0x7fc0;
    CHECK(kvq_encode(p, hx, KVQ_DTYPE_BF16, 1, codes) == KVQ_ERR_NONFINITE, "bf16 nan");
    CHECK(kvq_encode(p, x, (kvq_dtype)7, 1, codes) == KVQ_ERR_INVALID_ARG, "dtype");
    CHECK(kvq_encode(p, NULL, KVQ_DTYPE_F32, 1, codes) == KVQ_ERR_NULL, "null x");
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, NULL) == KVQ_ERR_NULL, "null codes");
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, SIZE_MAX / 64, codes) == KVQ_ERR_OVERFLOW, "overflow n");
    CHECK(kvq_decode(p, codes, SIZE_MAX / 16, x) == KVQ_ERR_OVERFLOW, "overflow decode");
    CHECK(kvq_score(p, x, SIZE_MAX / 2, codes, 4, x) == KVQ_ERR_OVERFLOW, "overflow score");
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 0, codes)); /* n = 0 is fine */
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes)); /* zero vector */
    float y[128];
    CHECK_OK(kvq_decode(p, codes, 1, y));
    for (int i = 0; i < 128; i++) CHECK(y[i] == 0, "zero vector decodes to zero");
    kvq_plan_free(p);
    CHECK_OK(kvq_plan_create(&p, "qjl", 128, 1, NULL, 0));
    CHECK(kvq_decode(p, codes, 1, y) == KVQ_ERR_NO_DECODE, "qjl decode");
    CHECK(kvq_accumulate(p, y, 1, codes, 1, y) == KVQ_ERR_NO_DECODE, "qjl accumulate");
    kvq_plan_free(p);
    CHECK(strcmp(kvq_strerror(KVQ_ERR_NONFINITE), "unknown status code") != 0, "strerror");
    CHECK(strcmp(kvq_strerror(12345), "unknown status code") == 0, "strerror unknown");
    int needs = -1;
    CHECK_OK(kvq_spec_needs_calibration("q8+outliers=8", &needs));
    CHECK(needs == 1, "needs calib");
    CHECK_OK(kvq_spec_needs_calibration("tq-mse:3+center", &needs));
    CHECK(needs == 1, "center needs calib");
    CHECK_OK(kvq_spec_needs_calibration("tq-mse:3", &needs));
    CHECK(needs == 0, "plain spec needs no calib");
}

/* +chscale: keys with a non-zero mean and a few channels 30x larger than the
 * rest, isotropic queries. (1) The plan is exactly "inner method on
 * a * (k - mean)" with a_c = (sigma_c / rms sigma)^-1/2 computed here in
 * double: decode = inner decode / a + mean, score = <q, decode>, accumulate +
 * unrotate = sum w decode. (2) Against +center alone, the mean squared score
 * error drops by the Cauchy-Schwarz factor of the half whitening, here
 * (sum sigma)^2 / (d sum sigma^2) = 0.13 in theory: required < 0.5. */
static void test_chscale(void) {
    enum { D = 128, N = 512, NQ = 4 };
    float *x = malloc((size_t)N * D * sizeof *x), q[NQ * D];
    tu_rng r = {77};
    for (int i = 0; i < N; i++)
        for (int c = 0; c < D; c++) x[i * D + c] = (float)((c < 4 ? 30.0 : 1.0) * tu_gauss(&r) + (c % 8 == 0 ? 5 : 0));
    for (int i = 0; i < NQ * D; i++) q[i] = (float)tu_gauss(&r);
    double mu[D], sg[D], tot = 0, a[D];
    for (int c = 0; c < D; c++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < N; i++) s += x[i * D + c];
        mu[c] = s / N;
        for (int i = 0; i < N; i++) s2 += (x[i * D + c] - mu[c]) * (x[i * D + c] - mu[c]);
        sg[c] = sqrt(s2 / N);
        tot += s2 / N;
    }
    for (int c = 0; c < D; c++) a[c] = sqrt(sqrt(tot / D) / sg[c]);
    kvq_plan *p = NULL, *pc = NULL, *in = NULL;
    CHECK_OK(kvq_plan_create(&p, "tq-mse:4+chscale", D, 5, x, N));
    CHECK_OK(kvq_plan_create(&pc, "tq-mse:4+center", D, 5, x, N));
    CHECK_OK(kvq_plan_create(&in, "tq-mse:4", D, 5, NULL, 0));
    CHECK(!strcmp(kvq_plan_spec(p), "tq-mse:4+center+chscale"), "spec %s", kvq_plan_spec(p));
    const size_t cb = kvq_plan_code_bytes(p);
    uint8_t *codes = malloc(N * cb), *ci = malloc(N * cb);
    float *y = malloc((size_t)N * D * sizeof *y), *yi = malloc((size_t)N * D * sizeof *yi), *xs = malloc((size_t)N * D * sizeof *xs);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < D; c++) xs[i * D + c] = (float)((x[i * D + c] - mu[c]) * a[c]);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, N, codes));
    CHECK_OK(kvq_encode(in, xs, KVQ_DTYPE_F32, N, ci));
    CHECK_OK(kvq_decode(p, codes, N, y));
    CHECK_OK(kvq_decode(in, ci, N, yi));
    double worst = 0;
    for (int i = 0; i < N * D; i++) {
        double ref = yi[i] / a[i % D] + mu[i % D], e = fabs(y[i] - ref) / (fabs(ref) + 1);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-3, "chscale decode vs reference: %.3g", worst);
    /* scores and accumulation from the codes against the decoded rows */
    float qp[NQ * 1024], sc[NQ * N], w[NQ * N], acc[NQ * D], out[D];
    CHECK(kvq_plan_query_floats(p) <= 1024, "query floats");
    for (int j = 0; j < NQ; j++) CHECK_OK(kvq_query_prepare(p, q + j * D, qp + j * kvq_plan_query_floats(p)));
    CHECK_OK(kvq_score(p, qp, NQ, codes, N, sc));
    double es = 0, ss = 0;
    for (int j = 0; j < NQ; j++)
        for (int i = 0; i < N; i++) {
            double t = 0;
            for (int c = 0; c < D; c++) t += (double)q[j * D + c] * y[i * D + c];
            es += (sc[j * N + i] - t) * (sc[j * N + i] - t);
            ss += t * t;
            w[j * N + i] = (float)tu_uniform(&r);
        }
    CHECK(sqrt(es / ss) < 1e-2, "chscale score vs <q, decode>: %.3g", sqrt(es / ss));
    memset(acc, 0, sizeof acc);
    CHECK_OK(kvq_accumulate(p, w, NQ, codes, N, acc));
    for (int j = 0; j < NQ; j++) {
        CHECK_OK(kvq_unrotate(p, acc + j * D, out));
        double e = 0, n2 = 0;
        for (int c = 0; c < D; c++) {
            double t = 0;
            for (int i = 0; i < N; i++) t += (double)w[j * N + i] * y[i * D + c];
            e += (out[c] - t) * (out[c] - t);
            n2 += t * t;
        }
        CHECK(sqrt(e / n2) < 1e-4, "chscale accumulate q%d: %.3g", j, sqrt(e / n2));
    }
    /* score error against the exact <q, k>: chscale vs center alone */
    double err[2] = {0, 0};
    kvq_plan *pl[2] = {p, pc};
    for (int v = 0; v < 2; v++) {
        CHECK_OK(kvq_encode(pl[v], x, KVQ_DTYPE_F32, N, codes));
        for (int j = 0; j < NQ; j++) CHECK_OK(kvq_query_prepare(pl[v], q + j * D, qp + j * kvq_plan_query_floats(pl[v])));
        CHECK_OK(kvq_score(pl[v], qp, NQ, codes, N, sc));
        for (int j = 0; j < NQ; j++)
            for (int i = 0; i < N; i++) {
                double t = 0;
                for (int c = 0; c < D; c++) t += (double)q[j * D + c] * x[i * D + c];
                err[v] += (sc[j * N + i] - t) * (sc[j * N + i] - t);
            }
    }
    CHECK(err[0] < 0.5 * err[1], "chscale score MSE %.4g not below half of center's %.4g", err[0], err[1]);
    free(x); free(codes); free(ci); free(y); free(yi); free(xs);
    kvq_plan_free(p); kvq_plan_free(pc); kvq_plan_free(in);
}

int main(void) {
    test_tq_mse_bounds();
    test_unbiased();
    test_all_dims_and_determinism();
    test_input_dtypes();
    test_int8_scores();
    test_errors();
    test_chscale();
    return tu_finish("test_codec_methods");
}
