/* polar (PolarQuant): angle codebooks against closed-form float64 moments,
 * the derived angle densities against Gaussian samples, an independent
 * reference of the whole encoder, round-trip quality and honest bits at
 * d = 64/128/256, the B knob, score/accumulate, determinism, dims and errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "kvq.h"
#include "codec/polar_cb.h"
#include "testutil.h"

/* ---- closed forms for f(ψ) ∝ sin^k(2ψ), k odd, on [0, π/2] ---------------- */
/* sin^k u = 2^(1-k) Σ_j (-1)^j C(k, (k-1)/2 - j) sin((2j+1) u), so every
 * moment is a sum of ∫ ψ^p sin(aψ) dψ with a = 2(2j+1). */
static double binom(int n, int k) {
    double r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

/* ∫_0^x ψ^p sin(aψ) dψ, p = 0, 1, 2 */
static double isin(int p, double a, double x) {
    double c = cos(a * x), s = sin(a * x);
    switch (p) {
    case 0: return (1 - c) / a;
    case 1: return -x * c / a + s / (a * a);
    default: return -x * x * c / a + 2 * x * s / (a * a) + 2 * (c - 1) / (a * a * a);
    }
}

/* ∫_0^x ψ^p sin^k(2ψ) dψ */
static double moment(int k, int p, double x) {
    double s = 0;
    for (int j = 0; j <= (k - 1) / 2; j++)
        s += (j & 1 ? -1 : 1) * binom(k, (k - 1) / 2 - j) * isin(p, 2.0 * (2 * j + 1), x);
    return s * pow(2.0, 1 - k);
}

static void test_codebooks(void) {
    /* level 1: uniform cells of [0, 2π) */
    for (int b = 1; b <= 8; b++) {
        kvq_codebook cb;
        CHECK_OK(polar_angle_codebook(&cb, 1, b));
        double w = 2 * M_PI / cb.n;
        double err = 0;
        for (int i = 0; i < cb.n; i++) err = fmax(err, fabs(cb.c[i] - (i + 0.5) * w));
        CHECK(err < 1e-6 && fabs(cb.mse - w * w / 12) < 1e-12, "level 1 b=%d err %.3g", b, err);
    }
    /* levels 2..5 (k = 1, 3, 7, 15): centroids are the conditional means of
     * their cells (float boundaries as stored) to 1e-6, MSE to 1e-6 relative,
     * symmetric about π/4 */
    for (int l = 2; l <= 5; l++) {
        int k = (1 << (l - 1)) - 1;
        double Z = moment(k, 0, M_PI / 2);
        for (int b = 1; b <= 6; b++) {
            kvq_codebook cb;
            CHECK_OK(polar_angle_codebook(&cb, l, b));
            double worst = 0, sym = 0, mse = 0;
            for (int i = 0; i < cb.n; i++) {
                double a = i == 0 ? 0 : cb.t[i - 1], e = i == cb.n - 1 ? M_PI / 2 : cb.t[i];
                double m0 = moment(k, 0, e) - moment(k, 0, a), m1 = moment(k, 1, e) - moment(k, 1, a);
                double m2 = moment(k, 2, e) - moment(k, 2, a), c = cb.c[i];
                worst = fmax(worst, fabs(c - m1 / m0));
                sym = fmax(sym, fabs(cb.c[i] + cb.c[cb.n - 1 - i] - M_PI / 2));
                mse += m2 - 2 * c * m1 + c * c * m0;
                if (i < cb.n - 1) CHECK(cb.t[i] == 0.5f * (cb.c[i] + cb.c[i + 1]), "boundary");
            }
            mse /= Z;
            CHECK(worst < 1e-6, "level %d b=%d: centroid vs conditional mean %.3g", l, b, worst);
            CHECK(sym < 1e-6, "level %d b=%d: asymmetry %.3g", l, b, sym);
            CHECK(fabs(cb.mse / mse - 1) < 1e-6, "level %d b=%d: mse %.9g vs %.9g", l, b, cb.mse, mse);
            if (b == 2) printf("level %d (sin^%d(2psi)) 2-bit centroids %.6f %.6f %.6f %.6f  mse %.6g\n", l, k,
                               cb.c[0], cb.c[1], cb.c[2], cb.c[3], cb.mse);
        }
    }
}

/* The generic solver on densities with known answers. */
static double pdf_const(double x, void *ctx) { (void)x; (void)ctx; return 2.5; }
static double pdf_gauss(double x, void *ctx) { (void)ctx; return exp(-0.5 * x * x); }

static void test_generic_solver(void) {
    kvq_codebook cb;
    for (int b = 1; b <= 5; b++) {
        CHECK_OK(lloyd_max_solve_fn(&cb, pdf_const, NULL, 0.0, 1.0, b));
        double err = 0;
        for (int i = 0; i < cb.n; i++) err = fmax(err, fabs(cb.c[i] - (i + 0.5) / cb.n));
        CHECK(err < 1e-6, "uniform b=%d err %.3g", b, err);
        CHECK(fabs(cb.mse * 12.0 * cb.n * cb.n - 1) < 1e-6, "uniform b=%d mse %.9g", b, cb.mse);
    }
    /* Max (1960): N(0,1), truncated at ±12 (mass lost < 1e-32) */
    static const double max2[2] = {0.4528, 1.5104}, max3[4] = {0.2451, 0.7560, 1.3440, 2.1520};
    CHECK_OK(lloyd_max_solve_fn(&cb, pdf_gauss, NULL, -12.0, 12.0, 2));
    for (int i = 0; i < 2; i++) CHECK(fabs(cb.c[2 + i] - max2[i]) < 1e-4, "gauss b=2 c=%.5f", cb.c[2 + i]);
    CHECK(fabs(cb.mse - 0.1175) < 1e-4, "gauss b=2 mse %.5f", cb.mse);
    CHECK_OK(lloyd_max_solve_fn(&cb, pdf_gauss, NULL, -12.0, 12.0, 3));
    for (int i = 0; i < 4; i++) CHECK(fabs(cb.c[4 + i] - max3[i]) < 1e-4, "gauss b=3 c=%.5f", cb.c[4 + i]);
    CHECK(fabs(cb.mse - 0.03454) < 1e-5, "gauss b=3 mse %.5f", cb.mse);
    CHECK(lloyd_max_solve_fn(&cb, pdf_const, NULL, 1.0, 1.0, 2) == KVQ_ERR_INVALID_ARG, "empty interval");
    CHECK(lloyd_max_solve_fn(&cb, pdf_const, NULL, 0.0, 1.0, 9) == KVQ_ERR_BITS_RANGE, "bits 9");
    CHECK(polar_angle_codebook(&cb, 0, 2) == KVQ_ERR_INVALID_ARG, "level 0");
}

/* The densities themselves: angles of the recursive polar transform of
 * Gaussian vectors fall in the 2-bit cells with the predicted masses. */
static void test_angle_density(void) {
    const int d = 128, n = 3000;
    tu_rng rng = {42};
    for (int l = 2; l <= 4; l++) {
        int k = (1 << (l - 1)) - 1;
        kvq_codebook cb;
        CHECK_OK(polar_angle_codebook(&cb, l, 2));
        long cnt[4] = {0, 0, 0, 0}, tot = 0;
        for (int v = 0; v < n; v++) {
            double r[128];
            for (int c = 0; c < d; c++) r[c] = tu_gauss(&rng);
            int m = d;
            for (int lev = 1; lev <= l; lev++) {
                for (int i = 0; i < m / 2; i++) {
                    double a = r[2 * i], b = r[2 * i + 1];
                    if (lev == l) {
                        cnt[cb_quantize(&cb, (float)atan2(fabs(b), fabs(a)))]++;
                        tot++;
                    }
                    r[i] = sqrt(a * a + b * b);
                }
                m /= 2;
            }
        }
        double Z = moment(k, 0, M_PI / 2);
        for (int i = 0; i < 4; i++) {
            double a = i == 0 ? 0 : cb.t[i - 1], e = i == 3 ? M_PI / 2 : cb.t[i];
            double pth = (moment(k, 0, e) - moment(k, 0, a)) / Z, pobs = (double)cnt[i] / tot;
            double se = sqrt(pth * (1 - pth) / tot);
            CHECK(fabs(pobs - pth) < 5 * se, "level %d cell %d: observed %.4f predicted %.4f (se %.4f)", l, i, pobs,
                  pth, se);
        }
    }
}

static float *gauss_rows(size_t n, int d, uint64_t seed) {
    float *x = malloc(n * (size_t)d * sizeof *x);
    tu_rng r = {seed};
    for (size_t i = 0; i < n * (size_t)d; i++) x[i] = (float)tu_gauss(&r);
    return x;
}

typedef struct { double cos, mse, bits; } quality;

static quality measure(const char *spec, int d, size_t n, uint64_t seed) {
    quality q = {0, 0, 0};
    kvq_plan *p;
    int rc = kvq_plan_create(&p, spec, d, seed, NULL, 0);
    CHECK(rc == 0, "%s d=%d: %s", spec, d, kvq_strerror(rc));
    if (rc) return q;
    float *x = gauss_rows(n, d, seed * 31 + d);
    uint8_t *codes = malloc(n * kvq_plan_code_bytes(p));
    float *y = malloc(n * (size_t)d * sizeof *y);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, codes));
    CHECK_OK(kvq_decode(p, codes, n, y));
    for (size_t i = 0; i < n; i++) {
        double xy = 0, xx = 0, yy = 0, e = 0;
        for (int c = 0; c < d; c++) {
            double a = x[i * d + c], b = y[i * d + c];
            xy += a * b, xx += a * a, yy += b * b, e += (a - b) * (a - b);
        }
        q.cos += xy / sqrt(xx * yy);
        q.mse += e / xx;
    }
    q.cos /= n;
    q.mse /= n;
    q.bits = kvq_plan_bits_per_value(p);
    free(x);
    free(codes);
    free(y);
    kvq_plan_free(p);
    return q;
}

static void test_quality(void) {
    static const int dims[3] = {64, 128, 256};
    for (int i = 0; i < 3; i++) {
        int d = dims[i];
        quality q = measure("polar", d, 4000, 3), qn = measure("polar+scale=norm", d, 4000, 3);
        printf("polar   d=%3d: %.3f bits/value  cos %.4f  rel_mse %.4f  (+scale=norm: cos %.4f rel_mse %.4f)\n", d,
               q.bits, q.cos, q.mse, qn.cos, qn.mse);
        CHECK(q.bits == 3.875 && qn.bits == 3.875, "d=%d bits %.4f (the paper's 3.875)", d, q.bits);
        CHECK(q.cos >= 0.982, "d=%d cos %.4f", d, q.cos);
        CHECK(qn.cos >= 0.982, "d=%d +scale=norm cos %.4f", d, qn.cos);
        CHECK(q.mse <= qn.mse * 1.001, "d=%d least-squares radii mse %.5f > exact radii %.5f", d, q.mse, qn.mse);
    }
    /* the knob: more bits, better cosine */
    quality prev = {0, 1, 0};
    for (int b = 3; b <= 8; b++) {
        char spec[16];
        snprintf(spec, sizeof spec, "polar:%d", b);
        quality q = measure(spec, 128, 2000, 5);
        double expect = (b * 64 + (b - 2) * 56 + 16 * 8) / 128.0;
        printf("polar:%d d=128: %.3f bits/value  cos %.5f  rel_mse %.5f\n", b, q.bits, q.cos, q.mse);
        CHECK(q.bits == expect, "polar:%d bits %.4f vs %.4f", b, q.bits, expect);
        CHECK(q.cos > prev.cos && q.mse < prev.mse, "polar:%d does not improve on polar:%d", b, b - 1);
        prev = q;
    }
    /* other dims (Haar rotation unless a power of two): L = 4 where 16 | d,
     * else L = 3; the bitstream's byte padding is counted */
    static const int odd_dims[8] = {32, 48, 80, 96, 112, 40, 72, 120};
    for (int i = 0; i < 8; i++) {
        int d = odd_dims[i];
        quality q = measure("polar", d, 1000, 9);
        int L = d % 16 == 0 ? 4 : 3, m = d >> L;
        double expect = (2 * m + (4 * d / 2 + 2 * (d / 2 - m) + 7) / 8) * 8.0 / d; /* whole bytes */
        printf("polar   d=%3d: %.3f bits/value  cos %.4f\n", d, q.bits, q.cos);
        CHECK(q.bits == expect, "d=%d bits %.4f vs %.4f", d, q.bits, expect);
        CHECK(q.cos >= 0.98, "d=%d cos %.4f", d, q.cos);
    }
}

/* An independent reference of the encoder (atan2 + cb_quantize on every
 * level, least-squares radii, f16 rounding), compared with the plan's decode
 * in the rotated domain. */
static void reference(const kvq_plan *p, const kvq_codebook *cb, int L, const float *x, float *out) {
    const int d = p->d, m = d >> L;
    float y[KVQ_DIM_MAX];
    double r[KVQ_DIM_MAX], ang[8][KVQ_DIM_MAX / 2], u[KVQ_DIM_MAX], v[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    for (int c = 0; c < d; c++) r[c] = y[c];
    for (int l = 1, cnt = d / 2; l <= L; l++, cnt /= 2)
        for (int i = 0; i < cnt; i++) {
            double a = r[2 * i], b = r[2 * i + 1], t = atan2(b, a);
            if (l == 1 && t < 0) t += 2 * M_PI;
            ang[l][i] = cb[l].c[l == 1 ? (int)fmin(t / (2 * M_PI) * cb[1].n, cb[1].n - 1) : cb_quantize(&cb[l], (float)t)];
            r[i] = sqrt(a * a + b * b);
        }
    for (int j = 0; j < m; j++) u[j] = 1;
    for (int l = L, cnt = m; l >= 1; l--, cnt *= 2) {
        for (int i = 0; i < cnt; i++) v[2 * i] = u[i] * cos(ang[l][i]), v[2 * i + 1] = u[i] * sin(ang[l][i]);
        memcpy(u, v, 2 * cnt * sizeof *u);
    }
    const int B = 1 << L;
    for (int j = 0; j < m; j++) {
        double s = 0;
        for (int c = j * B; c < (j + 1) * B; c++) s += y[c] * u[c];
        float rho = kvq_f16_to_f32(kvq_f32_to_f16((float)s));
        for (int c = j * B; c < (j + 1) * B; c++) out[c] = (float)(rho * u[c]);
    }
}

static void test_reference(void) {
    const int d = 128, L = 4, n = 500;
    kvq_codebook cb[5];
    for (int b = 3; b <= 6; b++) {
        char spec[16];
        snprintf(spec, sizeof spec, "polar:%d", b);
        kvq_plan *p;
        CHECK_OK(kvq_plan_create(&p, spec, d, 11, NULL, 0));
        for (int l = 1; l <= L; l++) CHECK_OK(polar_angle_codebook(&cb[l], l, l == 1 ? b : b - 2));
        float *x = gauss_rows(n, d, 77 + b);
        uint8_t *codes = malloc(n * kvq_plan_code_bytes(p));
        CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, codes));
        int bad = 0;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            float ref[KVQ_DIM_MAX], got[KVQ_DIM_MAX];
            reference(p, cb, L, x + i * d, ref);
            p->decode(p, codes + i * kvq_plan_code_bytes(p), got);
            double e = 0, nn = 0;
            for (int c = 0; c < d; c++) e += (ref[c] - got[c]) * (ref[c] - got[c]), nn += ref[c] * ref[c];
            e = sqrt(e / nn);
            /* an angle on a boundary may round either way (rare); otherwise
             * the f16 radii may differ by one ulp (2^-11 relative) */
            if (e > 1e-3) bad++;
            else worst = fmax(worst, e);
        }
        CHECK(bad <= 1 && worst < 6e-4, "%s: %d records differ from the reference, worst %.3g", spec, bad, worst);
        free(x);
        free(codes);
        kvq_plan_free(p);
    }
}

static void test_score_accum_determinism(void) {
    const int d = 128;
    const size_t n = 200, nq = 3;
    kvq_plan *p, *p2, *p3, *ps;
    CHECK_OK(kvq_plan_create(&p, "polar", d, 1234, NULL, 0));
    CHECK_OK(kvq_plan_create(&p2, "polar", d, 1234, NULL, 0));
    CHECK_OK(kvq_plan_create(&p3, "polar", d, 1235, NULL, 0));
    CHECK_OK(kvq_plan_clone_isa(&ps, p, KVQ_ISA_SCALAR));
    CHECK(!strcmp(kvq_plan_spec(p), "polar:4"), "spec %s", kvq_plan_spec(p));
    /* prepared rows: q~, the 8-bit score scale and the rows' 8-bit pair tables (8d bytes) */
    const size_t qf = kvq_plan_query_floats(p);
    CHECK(kvq_plan_can_decode(p) == 1 && qf == 3 * (size_t)d + 16, "decode/qfloats %zu", qf);
    size_t cbytes = kvq_plan_code_bytes(p);
    CHECK(cbytes == 62, "code bytes %zu (8 f16 radii + 46 angle bytes)", cbytes);
    float *x = gauss_rows(n, d, 5), *q = gauss_rows(nq, d, 6);
    uint8_t *c1 = malloc(n * cbytes), *c2 = malloc(n * cbytes), *c3 = malloc(n * cbytes), *cs = malloc(n * cbytes);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, c1));
    CHECK_OK(kvq_encode(p2, x, KVQ_DTYPE_F32, n, c2));
    CHECK_OK(kvq_encode(p3, x, KVQ_DTYPE_F32, n, c3));
    CHECK_OK(kvq_encode(ps, x, KVQ_DTYPE_F32, n, cs));
    CHECK(!memcmp(c1, c2, n * cbytes), "same seed, different bytes");
    CHECK(!memcmp(c1, cs, n * cbytes), "scalar clone, different bytes");
    CHECK(memcmp(c1, c3, n * cbytes) != 0, "another seed, same bytes");
    /* scores and accumulation against the decoded vectors */
    float *y = malloc(n * d * sizeof *y), *qp = malloc(nq * qf * sizeof *qp), *sc = malloc(nq * n * sizeof *sc);
    float *w = malloc(nq * n * sizeof *w), *acc = calloc(nq * d, sizeof *acc);
    CHECK_OK(kvq_decode(p, c1, n, y));
    for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(p, q + j * d, qp + j * qf));
    CHECK_OK(kvq_score(p, qp, nq, c1, n, sc));
    /* 8-bit scores (polar:4): the pair tables rounded to 1/127 of their
     * largest entry, g = f4 f3 f2 to 1/255: a small error against the decoded
     * vectors' own dot products (the codec's error is ~0.25 relative) */
    double worst = 0, e2 = 0, t2 = 0;
    for (size_t j = 0; j < nq; j++)
        for (size_t i = 0; i < n; i++) {
            double t = 0, qq = 0, yy = 0;
            for (int c = 0; c < d; c++) t += (double)q[j * d + c] * y[i * d + c], qq += q[j * d + c] * q[j * d + c],
                                        yy += y[i * d + c] * y[i * d + c];
            worst = fmax(worst, fabs(sc[j * n + i] - t) / sqrt(qq * yy));
            e2 += (sc[j * n + i] - t) * (sc[j * n + i] - t), t2 += t * t;
        }
    printf("polar:4 d=%d 8-bit scores vs decoded dot: RMS %.3g relative, worst %.3g of |q||y|\n", d, sqrt(e2 / t2), worst);
    CHECK(sqrt(e2 / t2) < 0.02 && worst < 0.01, "score vs decoded dot: RMS %.3g, worst %.3g", sqrt(e2 / t2), worst);
    tu_rng r = {9};
    for (size_t i = 0; i < nq * n; i++) w[i] = (float)tu_uniform(&r);
    CHECK_OK(kvq_accumulate(p, w, nq, c1, n, acc));
    worst = 0;
    for (size_t j = 0; j < nq; j++) {
        CHECK_OK(kvq_unrotate(p, acc + j * d, acc + j * d));
        for (int c = 0; c < d; c++) {
            double t = 0, s = 0;
            for (size_t i = 0; i < n; i++) t += w[j * n + i] * y[i * d + c], s += w[j * n + i];
            worst = fmax(worst, fabs(acc[j * d + c] - t) / s);
        }
    }
    CHECK(worst < 1e-4, "accumulate vs decoded sum: %.3g", worst);
    /* f16 / bf16 input give the codes of the converted f32 rows */
    uint16_t *xh = malloc(n * d * sizeof *xh);
    float *xf = malloc(n * d * sizeof *xf);
    for (size_t i = 0; i < n * d; i++) xh[i] = kvq_f32_to_f16(x[i]), xf[i] = kvq_f16_to_f32(xh[i]);
    CHECK_OK(kvq_encode(p, xh, KVQ_DTYPE_F16, n, c2));
    CHECK_OK(kvq_encode(p, xf, KVQ_DTYPE_F32, n, c3));
    CHECK(!memcmp(c2, c3, n * cbytes), "f16 input");
    free(xh), free(xf), free(x), free(q), free(c1), free(c2), free(c3), free(cs), free(y), free(qp), free(sc), free(w),
        free(acc);
    kvq_plan_free(p), kvq_plan_free(p2), kvq_plan_free(p3), kvq_plan_free(ps);
}

/* The AVX2 kernels (used by AVX2 and AVX-512 plans) against the scalar
 * reference: identical bytes (same float operations), identical decode (only
 * multiplications), score / accumulate within FMA rounding. Tail paths are
 * covered by d = 32 (levels of 2 and 4 angles) and d = 8·odd. */
static void test_simd_vs_scalar(void) {
    if (kvq_cpu_isa() < KVQ_ISA_AVX2) {
        printf("no AVX2: SIMD comparison skipped\n");
        return;
    }
    static const int dims[] = {32, 40, 48, 72, 80, 96, 120, 128, 256, 512};
    static const char *specs[] = {"polar:3", "polar:4", "polar:5", "polar:6", "polar:7", "polar:8",
                                  "polar+scale=norm", "polar+scale32", "polar:5"};
    const size_t n = 64, nq = 3;
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
            const int d = dims[di];
            /* The Haar rotation of non power-of-two d sums in another order
             * per ISA, so the kernels are compared without it there (and on
             * one spec of every d). */
            char spec[40];
            int norot = (d & (d - 1)) || si == sizeof specs / sizeof *specs - 1;
            snprintf(spec, sizeof spec, "%s%s", specs[si], norot ? "+norot" : "");
            kvq_plan *pv, *ps;
            CHECK_OK(kvq_plan_create(&pv, spec, d, 21, NULL, 0));
            CHECK_OK(kvq_plan_clone_isa(&ps, pv, KVQ_ISA_SCALAR));
            size_t cb = kvq_plan_code_bytes(pv);
            float *x = gauss_rows(n, d, 300 + d), *q = gauss_rows(nq, d, 400 + d);
            x[5] = 0, x[6] = 0;         /* a zero pair */
            x[d + 2] = 0, x[d + 3] = -1; /* pairs on the quadrant boundaries */
            x[d + 4] = -2, x[d + 5] = 0;
            uint8_t *cv = malloc(n * cb), *cs = malloc(n * cb);
            CHECK_OK(kvq_encode(pv, x, KVQ_DTYPE_F32, n, cv));
            CHECK_OK(kvq_encode(ps, x, KVQ_DTYPE_F32, n, cs));
            CHECK(!memcmp(cv, cs, n * cb), "%s d=%d: SIMD and scalar bytes differ", spec, d);
            float yv[KVQ_DIM_MAX], ys[KVQ_DIM_MAX];
            int same = 1;
            for (size_t i = 0; i < n; i++) {
                pv->decode(pv, cs + i * cb, yv);
                ps->decode(ps, cs + i * cb, ys);
                same &= !memcmp(yv, ys, d * sizeof *yv);
            }
            CHECK(same, "%s d=%d: SIMD and scalar decode differ", spec, d);
            const size_t qf = kvq_plan_query_floats(pv);
            float *qp = malloc(nq * qf * sizeof *qp), *s1 = malloc(nq * n * sizeof *s1), *s2 = malloc(nq * n * sizeof *s2);
            float *w = malloc(nq * n * sizeof *w), *a1 = calloc(nq * d, sizeof *a1), *a2 = calloc(nq * d, sizeof *a2);
            for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(pv, q + j * d, qp + j * qf));
            {   /* prepared rows (8-bit pair tables included) are the same bytes on every ISA; the
                 * rotation itself is compared where it is the same computation (Hadamard, none) */
                float *qs = malloc(nq * qf * sizeof *qs);
                for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(ps, q + j * d, qs + j * qf));
                int same = 1;
                for (size_t j = 0; j < nq; j++) same &= !memcmp(qs + j * qf + d, qp + j * qf + d, (qf - d) * sizeof *qs);
                for (size_t j = 0; j < nq && (norot || !(d & (d - 1))); j++)
                    same &= !memcmp(qs + j * qf, qp + j * qf, d * sizeof *qs);
                CHECK(same, "%s d=%d: prepared rows differ between ISAs", spec, d);
                free(qs);
            }
            CHECK_OK(kvq_score(pv, qp, nq, cs, n, s1));
            CHECK_OK(kvq_score(ps, qp, nq, cs, n, s2));
            tu_rng r = {d};
            for (size_t i = 0; i < nq * n; i++) w[i] = (float)tu_uniform(&r);
            CHECK_OK(kvq_accumulate(pv, w, nq, cs, n, a1));
            CHECK_OK(kvq_accumulate(ps, w, nq, cs, n, a2));
            double es = 0, ea = 0, ss = 0, sa = 0;
            for (size_t i = 0; i < nq * n; i++) es = fmax(es, fabs(s1[i] - s2[i])), ss = fmax(ss, fabs(s2[i]));
            for (size_t i = 0; i < nq * (size_t)d; i++) ea = fmax(ea, fabs(a1[i] - a2[i])), sa = fmax(sa, fabs(a2[i]));
            CHECK(es <= 1e-5 * ss && ea <= 1e-5 * sa, "%s d=%d: score diff %.3g (of %.3g), accum diff %.3g (of %.3g)",
                  spec, d, es, ss, ea, sa);
            free(x), free(q), free(cv), free(cs), free(qp), free(s1), free(s2), free(w), free(a1), free(a2);
            kvq_plan_free(pv), kvq_plan_free(ps);
        }
}

/* The plan's kernels (AVX-512 record-lane / lane-expansion kernels where the
 * CPU has them) against the scalar reference on record counts around the
 * 16-record groups and the 256-record runs, every row count 1..8, the dims
 * and bit widths that take different paths. Codes sit in exactly sized
 * buffers (the sanitizer build catches reads past the last record). */
static void test_kernel_sizes(void) {
    static const int dims[] = {32, 48, 64, 80, 96, 128, 256};
    static const size_t ns[] = {1, 15, 16, 17, 255, 256, 257};
    static const char *specs[] = {"polar:3",          "polar:4",       "polar:5", "polar:6", "polar:7", "polar:8",
                                  "polar+scale=norm", "polar+scale32", /* inner plans striding over longer rows */
                                  "polar+outliers=8", "polar:3+outliers=16"};
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const int d = dims[di];
            char spec[40];
            snprintf(spec, sizeof spec, "%s%s", specs[si], d & (d - 1) ? "+norot" : "");
            kvq_plan *pv, *ps;
            const size_t nmax = 257, nqmax = 8;
            float *x = gauss_rows(nmax, d, 500 + d + si), *q = gauss_rows(nqmax, d, 600 + d);
            const int calib = strstr(spec, "outliers") != NULL;
            const int rc = kvq_plan_create(&pv, spec, d, 31, calib ? x : NULL, calib ? nmax : 0);
            if (calib && d < 48 && rc == KVQ_ERR_INVALID_ARG) { /* fewer than 32 inner channels */
                free(x), free(q);
                continue;
            }
            CHECK(rc == 0, "%s d=%d: %s", spec, d, kvq_strerror(rc));
            CHECK_OK(kvq_plan_clone_isa(&ps, pv, KVQ_ISA_SCALAR));
            const size_t cb = kvq_plan_code_bytes(pv), qf = kvq_plan_query_floats(pv);
            uint8_t *all = malloc(nmax * cb);
            CHECK_OK(kvq_encode(ps, x, KVQ_DTYPE_F32, nmax, all));
            float *qp = malloc(nqmax * qf * sizeof *qp), *s1 = malloc(nqmax * nmax * sizeof *s1),
                  *s2 = malloc(nqmax * nmax * sizeof *s2), *w = malloc(nqmax * nmax * sizeof *w),
                  *a1 = malloc(nqmax * d * sizeof *a1), *a2 = malloc(nqmax * d * sizeof *a2);
            for (size_t j = 0; j < nqmax; j++) CHECK_OK(kvq_query_prepare(pv, q + j * d, qp + j * qf));
            tu_rng r = {77 + (uint64_t)d};
            for (size_t i = 0; i < nqmax * nmax; i++) w[i] = (float)tu_uniform(&r);
            for (size_t k = 0; k < sizeof ns / sizeof *ns + nqmax; k++) {
                /* every n with a row count that moves along, then every row count at n = 33 */
                const size_t n = k < sizeof ns / sizeof *ns ? ns[k] : 33;
                const size_t nq = k < sizeof ns / sizeof *ns ? 1 + (k + si + di) % nqmax : k - sizeof ns / sizeof *ns + 1;
                uint8_t *codes = malloc(n * cb);
                memcpy(codes, all + (nmax - n) * cb, n * cb);
                CHECK_OK(kvq_score(pv, qp, nq, codes, n, s1));
                CHECK_OK(kvq_score(ps, qp, nq, codes, n, s2));
                for (size_t i = 0; i < nq * d; i++) a1[i] = a2[i] = (float)i / d;
                CHECK_OK(kvq_accumulate(pv, w, nq, codes, n, a1));
                CHECK_OK(kvq_accumulate(ps, w, nq, codes, n, a2));
                double es = 0, ea = 0, ss = 0, sa = 0;
                for (size_t i = 0; i < nq * n; i++) es = fmax(es, fabs(s1[i] - s2[i])), ss = fmax(ss, fabs(s2[i]));
                for (size_t i = 0; i < nq * (size_t)d; i++) ea = fmax(ea, fabs(a1[i] - a2[i])), sa = fmax(sa, fabs(a2[i]));
                CHECK(es <= 1e-5 * ss && ea <= 1e-5 * sa,
                      "%s d=%d n=%zu nq=%zu: score diff %.3g (of %.3g), accum diff %.3g (of %.3g)", spec, d, n, nq, es,
                      ss, ea, sa);
                free(codes);
            }
            free(x), free(q), free(all), free(qp), free(s1), free(s2), free(w), free(a1), free(a2);
            kvq_plan_free(pv), kvq_plan_free(ps);
        }
}

/* Non-finite query entries: kvq_query_prepare refuses them
 * (KVQ_ERR_NONFINITE); the prepare kernels themselves still give the same
 * bytes on every ISA (the scores are then meaningless, but defined and
 * sanitizer-clean). */
static void test_prep_nonfinite(void) {
    const int d = 64;
    kvq_plan *pv, *ps;
    CHECK_OK(kvq_plan_create(&pv, "polar+norot", d, 3, NULL, 0));
    CHECK_OK(kvq_plan_clone_isa(&ps, pv, KVQ_ISA_SCALAR));
    const size_t qf = kvq_plan_query_floats(pv);
    float *q = gauss_rows(3, d, 77), *a = malloc(3 * qf * sizeof *a), *b = malloc(3 * qf * sizeof *b);
    q[5] = NAN;
    q[d + 7] = INFINITY;
    for (int c = 0; c < d; c++) q[2 * d + c] = 0; /* zero row: scale 0 */
    for (int j = 0; j < 3; j++) {
        const int want = j < 2 ? KVQ_ERR_NONFINITE : KVQ_OK;
        CHECK(kvq_query_prepare(pv, q + j * d, a + j * qf) == want, "row %d: public prepare", j);
        pv->prep(pv, q + j * d, a + j * qf);
        ps->prep(ps, q + j * d, b + j * qf);
        CHECK(!memcmp((const char *)(a + j * qf + d + 1), (const char *)(b + j * qf + d + 1), (qf - d - 1) * sizeof *a),
              "row %d: 8-bit tables differ", j);
    }
    free(q), free(a), free(b);
    kvq_plan_free(pv), kvq_plan_free(ps);
}

static void test_errors(void) {
    kvq_plan *p = NULL;
    static const int bad_dims[6] = {0, 16, 24, 30, 100, 520};
    for (int i = 0; i < 6; i++)
        CHECK(kvq_plan_create(&p, "polar", bad_dims[i], 1, NULL, 0) == KVQ_ERR_UNSUPPORTED_DIM, "d=%d", bad_dims[i]);
    CHECK(kvq_plan_create(&p, "polar:2", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "polar:2");
    CHECK(kvq_plan_create(&p, "polar:9", 128, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "polar:9");
    CHECK(kvq_plan_create(&p, "polar:x", 128, 1, NULL, 0) == KVQ_ERR_UNKNOWN_METHOD, "polar:x");
    for (int d = 32; d <= 512; d += 8) {
        int rc = kvq_plan_create(&p, "polar", d, 1, NULL, 0);
        CHECK(rc == 0, "d=%d: %s", d, kvq_strerror(rc));
        if (!rc) kvq_plan_free(p);
    }
    CHECK_OK(kvq_plan_create(&p, "polar", 128, 1, NULL, 0));
    float x[128], y[128];
    uint8_t code[64];
    memset(x, 0, sizeof x);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, code));
    CHECK_OK(kvq_decode(p, code, 1, y));
    double s = 0;
    for (int c = 0; c < 128; c++) s += fabs(y[c]);
    CHECK(s == 0, "zero vector decodes to %.3g", s);
    x[3] = NAN;
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, code) == KVQ_ERR_NONFINITE, "NaN");
    for (int c = 0; c < 128; c++) x[c] = 1e5f;
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, code) == KVQ_ERR_RANGE, "radius beyond f16");
    kvq_plan_free(p);
    CHECK_OK(kvq_plan_create(&p, "polar+scale32", 128, 1, NULL, 0));
    CHECK(kvq_plan_code_bytes(p) == 8 * 4 + 46, "scale32 bytes %zu", kvq_plan_code_bytes(p));
    uint8_t code32[8 * 4 + 46];
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, code32));
    CHECK_OK(kvq_decode(p, code32, 1, y));
    double xy = 0, yy = 0;
    for (int c = 0; c < 128; c++) xy += (double)x[c] * y[c], yy += (double)y[c] * y[c];
    CHECK(xy / sqrt(yy * 128 * 1e10) > 0.97, "scale32 large vector cos %.4f", xy / sqrt(yy * 128 * 1e10));
    kvq_plan_free(p);
}

int main(void) {
    test_codebooks();
    test_generic_solver();
    test_angle_density();
    test_reference();
    test_quality();
    test_score_accum_determinism();
    test_simd_vs_scalar();
    test_kernel_sizes();
    test_prep_nonfinite();
    test_errors();
    return tu_finish("test_polar");
}
