/*
 * Lloyd-Max scalar quantizers: the n = 2^b levels minimising the mean
 * squared error for a known density (S. P. Lloyd, "Least squares
 * quantization in PCM", Bell Labs 1957, IEEE Trans. Inf. Theory 28(2),
 * 1982; J. Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory
 * 6(1), 1960). Densities:
 *   DENS_GAUSS   standard normal;
 *   DENS_LAPLACE Laplacian of unit variance (scale 1/sqrt(2));
 *   DENS_SPHERE  X = sqrt(d) * t where t is one coordinate of a uniform point
 *                on S^{d-1}: f(t) ∝ (1 - t^2)^((d-3)/2) on [-1, 1].
 * All three are symmetric: only the positive half is solved, and the
 * codebook is mirrored. The optimum satisfies Lloyd's conditions
 * t_i = (c_i + c_{i+1}) / 2 and c_i = E[X | t_{i-1} < X <= t_i]; the solve
 * (lloyd_max_solve) reaches it in three stages:
 *  1. start at the high-resolution optimum of Panter and Dite (P. F. Panter,
 *     W. Dite, "Quantization distortion in pulse-count modulation with
 *     nonuniform spacing of levels", Proc. IRE 39(1), 1951): point density
 *     ∝ f^(1/3), centroids at equal quantiles of f^(1/3) (panter_dite_init);
 *  2. 30 sweeps of Lloyd's map, over-relaxed: c_i += w (E[X | cell i] - c_i)
 *     in Gauss-Seidel order with w = 1.9 from 8 levels per half (w = 1
 *     below, and again whenever a step breaks the order of the centroids);
 *  3. Newton's method on the fixed-point system m_i(c) - c_i = 0, whose
 *     Jacobian is tridiagonal (dm/db = f(b)(b - m)/M, dm/da = f(a)(m - a)/M
 *     for a cell (a, b] of mass M; Thomas algorithm), each step halved until
 *     the centroids stay ordered, until the step is below 1e-11
 *     (newton_refine). Should Newton fail, stage 2 goes on until no
 *     centroid moves by more than 1e-10.
 * Conditional means: closed forms for the Gaussian and the Laplacian (tails
 * from the upper-tail forms, erfc and exp(-a), without cancellation); for
 * the sphere density, tables of the cumulative mass and first moment over
 * 32768 cells of [0, sqrt(d)] (Simpson per cell, linear interpolation
 * inside one). The codebook's MSE comes from the second moments (closed
 * form, or Simpson for the sphere).
 * Also here: cb_snap_int8 (codebooks of <= 16 levels put on an int8 grid,
 * for the integer scores of tq_kernels.h) and cb_prepare_guess (the
 * guess-and-correct table of the SIMD nearest-centroid search).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

#define SPHERE_GRID 32768 /* cells on [0, 1] for t (symmetric half) */

typedef struct {
    kvq_density dens;
    int d;
    /* sphere tables over x in [0, xmax]: cumulative mass and first moment */
    double xmax, h, znorm; /* znorm: sphere pdf normalisation */
    double *mass, *mom; /* SPHERE_GRID + 1 entries */
} density_ctx;

/* Mass and first moment of the density on [0, x] (x >= 0, symmetric half). */
static void half_moments(const density_ctx *c, double x, double *m, double *f) {
    switch (c->dens) {
    case DENS_GAUSS:
        *m = 0.5 * erf(x / sqrt(2.0));
        *f = (1.0 - exp(-0.5 * x * x)) / sqrt(2.0 * M_PI);
        return;
    case DENS_LAPLACE: {
        const double beta = 1.0 / sqrt(2.0); /* unit variance */
        double e = exp(-x / beta);
        *m = 0.5 * (1.0 - e);
        *f = isinf(x) ? 0.5 * beta : 0.5 * (beta - (x + beta) * e);
        return;
    }
    case DENS_SPHERE: {
        if (x >= c->xmax) { *m = c->mass[SPHERE_GRID]; *f = c->mom[SPHERE_GRID]; return; }
        double pos = x / c->h;
        int i = (int)pos;
        if (i >= SPHERE_GRID) i = SPHERE_GRID - 1;
        double fr = pos - i;
        *m = c->mass[i] + fr * (c->mass[i + 1] - c->mass[i]);
        *f = c->mom[i] + fr * (c->mom[i + 1] - c->mom[i]);
        return;
    }
    }
    *m = *f = 0;
}

/* Signed mass and first moment on [0, x] for any x (odd extension). */
static void moments(const density_ctx *c, double x, double *m, double *f) {
    if (x >= 0) { half_moments(c, x, m, f); return; }
    half_moments(c, -x, m, f);
    *m = -*m; /* M(x) = ∫_0^x f is odd; F(x) = ∫_0^x u f(u) du is even */
}

/* E[X | a < X <= b] and the mass of (a, b]. */
static double cond_mean(const density_ctx *c, double a, double b, double *mass_out) {
    if (a >= 0 && c->dens != DENS_SPHERE) {
        /* tails without cancellation: masses and moments from the upper tail */
        double mass, mom;
        if (c->dens == DENS_GAUSS) {
            mass = 0.5 * (erfc(a / sqrt(2.0)) - erfc(b / sqrt(2.0)));
            mom = (exp(-0.5 * a * a) - (isinf(b) ? 0 : exp(-0.5 * b * b))) / sqrt(2 * M_PI);
        } else {
            const double beta = 1.0 / sqrt(2.0);
            double ea = exp(-a / beta), eb = isinf(b) ? 0 : exp(-b / beta);
            mass = 0.5 * (ea - eb);
            mom = 0.5 * ((a + beta) * ea - (isinf(b) ? 0 : (b + beta) * eb));
        }
        *mass_out = mass;
        return mass > 1e-300 ? mom / mass : 0.5 * (a + b);
    }
    double ma, fa, mb, fb;
    moments(c, a, &ma, &fa);
    moments(c, b, &mb, &fb);
    /* moments() returns F(x) = ∫_0^x u f(u) du for both signs (even integrand
     * gives F(-x) = F(x)), and M(x) = ∫_0^x f (odd). */
    double mass = mb - ma, mom = fb - fa;
    *mass_out = mass;
    if (mass <= 1e-300) return 0.5 * (a + b);
    return mom / mass;
}

static int sphere_tables(density_ctx *c) {
    /* t in [0,1], x = sqrt(d) t; f_X(x) ∝ (1 - x^2/d)^((d-3)/2). Integrate
     * with Simpson on each cell (midpoint evaluation), normalise to 1/2. */
    double sd = sqrt((double)c->d), k = 0.5 * (c->d - 3);
    c->xmax = sd;
    c->h = sd / SPHERE_GRID;
    c->mass = malloc((SPHERE_GRID + 1) * sizeof(double));
    c->mom = malloc((SPHERE_GRID + 1) * sizeof(double));
    if (!c->mass || !c->mom) return KVQ_ERR_NOMEM;
    c->mass[0] = c->mom[0] = 0;
    for (int i = 0; i < SPHERE_GRID; i++) {
        double x0 = i * c->h, x1 = x0 + c->h, xm = 0.5 * (x0 + x1);
        double f0 = pow(fmax(0.0, 1 - x0 * x0 / c->d), k), f1 = pow(fmax(0.0, 1 - x1 * x1 / c->d), k);
        double fm = pow(fmax(0.0, 1 - xm * xm / c->d), k);
        c->mass[i + 1] = c->mass[i] + c->h / 6 * (f0 + 4 * fm + f1);
        c->mom[i + 1] = c->mom[i] + c->h / 6 * (x0 * f0 + 4 * xm * fm + x1 * f1);
    }
    double z = 0.5 / c->mass[SPHERE_GRID];
    c->znorm = z;
    for (int i = 0; i <= SPHERE_GRID; i++) { c->mass[i] *= z; c->mom[i] *= z; }
    return KVQ_OK;
}

/* Density at x >= 0 (normalised). */
static double pdf(const density_ctx *c, double x) {
    if (isinf(x)) return 0;
    switch (c->dens) {
    case DENS_GAUSS: return exp(-0.5 * x * x) / sqrt(2 * M_PI);
    case DENS_LAPLACE: return exp(-sqrt(2.0) * x) / sqrt(2.0);
    case DENS_SPHERE: return x >= c->xmax ? 0 : c->znorm * pow(1 - x * x / c->d, 0.5 * (c->d - 3));
    }
    return 0;
}

/*
 * Newton's method on the Lloyd fixed point F_i(c) = m_i(c) - c_i = 0 (the
 * positive half; t_{i-1} = (c_{i-1}+c_i)/2, t_{-1} = 0, t_{half-1} = hi).
 * With M the cell mass, dm/db = f(b)(b - m)/M and dm/da = f(a)(m - a)/M, so
 * the Jacobian is tridiagonal (Thomas algorithm). Returns 1 on convergence
 * (step below 1e-11), 0 otherwise; cc holds the last ordered iterate.
 */
static int newton_refine(const density_ctx *c, int half, double hi, double *cc) {
    double x[KVQ_MAX_LEVELS], lo_[KVQ_MAX_LEVELS], di[KVQ_MAX_LEVELS], up[KVQ_MAX_LEVELS], rhs[KVQ_MAX_LEVELS];
    memcpy(x, cc, sizeof(double) * half);
    for (int it = 0; it < 100; it++) {
        for (int i = 0; i < half; i++) {
            double a = i == 0 ? 0.0 : 0.5 * (x[i - 1] + x[i]);
            double b = i == half - 1 ? hi : 0.5 * (x[i] + x[i + 1]);
            double M, m = cond_mean(c, a, b, &M);
            if (!(M > 1e-300)) return 0;
            double dma = i == 0 ? 0 : pdf(c, a) * (m - a) / M;
            double dmb = i == half - 1 ? 0 : pdf(c, b) * (b - m) / M;
            lo_[i] = 0.5 * dma;
            up[i] = 0.5 * dmb;
            di[i] = 0.5 * (dma + dmb) - 1;
            rhs[i] = -(m - x[i]);
        }
        for (int i = 1; i < half; i++) { /* forward elimination */
            double f = lo_[i] / di[i - 1];
            di[i] -= f * up[i - 1];
            rhs[i] -= f * rhs[i - 1];
        }
        double step = 0;
        for (int i = half - 1; i >= 0; i--) {
            rhs[i] = (rhs[i] - (i + 1 < half ? up[i] * rhs[i + 1] : 0)) / di[i];
            step = fmax(step, fabs(rhs[i]));
        }
        /* damped step: halve it until the centroids stay ordered */
        double lam = 1, trial[KVQ_MAX_LEVELS];
        int ok = 0;
        for (int h = 0; h < 30 && !ok; h++, lam *= 0.5) {
            ok = 1;
            for (int i = 0; i < half; i++) {
                trial[i] = x[i] + lam * rhs[i];
                if (!(trial[i] > (i ? trial[i - 1] : 0.0)) || !isfinite(trial[i]) || trial[i] > hi) ok = 0;
            }
        }
        if (!ok) return 0;
        memcpy(x, trial, sizeof(double) * half);
        memcpy(cc, x, sizeof(double) * half);
        if (step < 1e-11) return 1;
    }
    return 0;
}

/*
 * Starting point: the high-resolution optimum (Panter & Dite 1951), whose
 * point density is ∝ f^(1/3): centroids at equal quantiles of f^(1/3).
 * Lloyd's iteration then converges in tens of steps instead of thousands
 * for 8-bit codebooks.
 */
static void panter_dite_init(const density_ctx *c, int half, double *cc) {
    enum { G = 8192 };
    double xmax = c->dens == DENS_SPHERE ? c->xmax : c->dens == DENS_GAUSS ? 12.0 : 40.0;
    double h = xmax / G, cum[G + 1];
    cum[0] = 0;
    for (int i = 0; i < G; i++) cum[i + 1] = cum[i] + h * cbrt(pdf(c, (i + 0.5) * h));
    for (int k = 0, i = 0; k < half; k++) {
        double target = cum[G] * (k + 0.5) / half;
        while (i < G - 1 && cum[i + 1] < target) i++;
        double fr = cum[i + 1] > cum[i] ? (target - cum[i]) / (cum[i + 1] - cum[i]) : 0.5;
        cc[k] = (i + fr) * h;
    }
}

/* E[X^2 1{a<X<=b}] needed for the MSE: closed form or grid. */
static double second_moment(const density_ctx *c, double a, double b);
static void panter_dite_init(const density_ctx *c, int half, double *cc);
static int newton_refine(const density_ctx *c, int half, double hi, double *cc);

int lloyd_max_solve(kvq_codebook *cb, kvq_density dens, int bits, int d) {
    if (bits < 1 || bits > 8) return KVQ_ERR_BITS_RANGE;
    if (dens == DENS_SPHERE && d < 4) return KVQ_ERR_UNSUPPORTED_DIM;
    density_ctx c;
    memset(&c, 0, sizeof c);
    c.dens = dens;
    c.d = d;
    if (dens == DENS_SPHERE) {
        int rc = sphere_tables(&c);
        if (rc) { free(c.mass); free(c.mom); return rc; }
    }
    int n = 1 << bits, half = n / 2;
    double cc[KVQ_MAX_LEVELS]; /* positive half: cc[0..half-1] ascending */
    double hi = dens == DENS_SPHERE ? c.xmax : INFINITY;
    panter_dite_init(&c, half, cc);
    /* Lloyd's map T (boundaries at midpoints, centroids at conditional
     * means) converges linearly and slowly for many levels; successive
     * over-relaxation c <- c + w (T(c) - c) with w < 2 has the same fixed
     * point and converges much faster. Gauss-Seidel order (each new centroid
     * used at once); w falls back to 1 if the order of centroids breaks. */
    double w = half >= 8 ? 1.9 : 1.0;
    int newton_tried = 0;
    for (int it = 0; it < 200000; it++) {
        if (it == 30 && !newton_tried) { /* close enough for Newton's quadratic convergence */
            newton_tried = 1;
            if (newton_refine(&c, half, hi, cc)) break;
        }
        double delta = 0, prev[KVQ_MAX_LEVELS];
        memcpy(prev, cc, sizeof(double) * half);
        for (int i = 0; i < half; i++) {
            double a = i == 0 ? 0.0 : 0.5 * (cc[i - 1] + cc[i]);
            double b = i == half - 1 ? hi : 0.5 * (cc[i] + cc[i + 1]);
            double mass;
            double nc = cond_mean(&c, a, b, &mass);
            delta = fmax(delta, fabs(nc - cc[i]));
            cc[i] += w * (nc - cc[i]);
        }
        int ordered = cc[0] > 0;
        for (int i = 1; i < half; i++) ordered &= cc[i] > cc[i - 1];
        if (!ordered) { memcpy(cc, prev, sizeof(double) * half); w = 1.0; continue; }
        if (delta < 1e-10) break;
    }
    cb->bits = bits;
    cb->n = n;
    cb->snapped = 0;
    double mse = 0;
    for (int i = 0; i < half; i++) {
        cb->c[half + i] = (float)cc[i];
        cb->c[half - 1 - i] = (float)-cc[i];
        double a = i == 0 ? 0.0 : 0.5 * (cc[i - 1] + cc[i]);
        double b = i == half - 1 ? hi : 0.5 * (cc[i] + cc[i + 1]);
        double m0, mean = cond_mean(&c, a, b, &m0);
        /* E[(X-c)^2; cell] = E[X^2; cell] - 2c E[X; cell] + c^2 P(cell) */
        mse += 2 * (second_moment(&c, a, b) - 2 * cc[i] * mean * m0 + cc[i] * cc[i] * m0);
    }
    cb->mse = mse;
    for (int i = 0; i < n - 1; i++) cb->t[i] = 0.5f * (cb->c[i] + cb->c[i + 1]);
    cb->t[n - 1] = INFINITY;
    for (int i = n; i < KVQ_MAX_LEVELS; i++) { cb->c[i] = 0; cb->t[i] = INFINITY; }
    free(c.mass);
    free(c.mom);
    return KVQ_OK;
}

static double second_moment(const density_ctx *c, double a, double b) {
    /* a >= 0 here (positive half) */
    switch (c->dens) {
    case DENS_GAUSS: {
        /* ∫ x^2 φ = Φ(x) - x φ(x) */
        double pa = isinf(a) ? 0 : a * exp(-0.5 * a * a) / sqrt(2 * M_PI);
        double pb = isinf(b) ? 0 : b * exp(-0.5 * b * b) / sqrt(2 * M_PI);
        return 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0))) - (pb - pa);
    }
    case DENS_LAPLACE: {
        const double beta = 1.0 / sqrt(2.0);
        /* ∫_0^x u^2 e^{-u/β}/(2β) du = β^2 - e^{-x/β}(x^2 + 2βx + 2β^2)/2 */
        double ga = isinf(a) ? 0 : exp(-a / beta) * (a * a + 2 * beta * a + 2 * beta * beta) / 2;
        double gb = isinf(b) ? 0 : exp(-b / beta) * (b * b + 2 * beta * b + 2 * beta * beta) / 2;
        return ga - gb;
    }
    case DENS_SPHERE: {
        /* Simpson on a sub-grid of the cell */
        double hi = fmin(b, c->xmax);
        if (hi <= a) return 0;
        const int steps = 2000;
        double h = (hi - a) / steps, s = 0, k = 0.5 * (c->d - 3);
        for (int i = 0; i <= steps; i++) {
            double x = a + i * h;
            double w = (i == 0 || i == steps) ? 1 : (i & 1 ? 4 : 2);
            s += w * x * x * pow(fmax(0.0, 1 - x * x / c->d), k);
        }
        s *= h / 3;
        /* normalise with the same constant as the tables: mass(xmax) = 1/2 */
        double raw_half = 0;
        {
            const int st = 4000;
            double hh = c->xmax / st;
            for (int i = 0; i <= st; i++) {
                double x = i * hh;
                double w = (i == 0 || i == st) ? 1 : (i & 1 ? 4 : 2);
                raw_half += w * pow(fmax(0.0, 1 - x * x / c->d), k);
            }
            raw_half *= hh / 3;
        }
        return s * 0.5 / raw_half;
    }
    }
    return 0;
}

void cb_snap_int8(kvq_codebook *cb) {
    if (cb->n > 16) return;
    float m = 0;
    for (int i = 0; i < cb->n; i++) m = fmaxf(m, fabsf(cb->c[i]));
    cb->cscale = m / 127.0f;
    for (int i = 0; i < cb->n; i++) {
        long v = lrintf(cb->c[i] / cb->cscale);
        cb->c8[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        cb->ci[i] = (float)cb->c8[i];
        cb->c[i] = cb->cscale * cb->ci[i];
    }
    for (int i = cb->n; i < 32; i++) cb->ci[i] = 0;
    for (int i = 0; i + 1 < cb->n; i++) cb->t[i] = 0.5f * (cb->c[i] + cb->c[i + 1]);
    cb->snapped = 1;
    cb_prepare_guess(cb);
}

static int guess_of(const kvq_codebook *cb, float x) {
    float g = floorf(x * cb->ga + cb->gb);
    return g < 0 ? 0 : g > cb->n - 1 ? cb->n - 1 : (int)g;
}

void cb_prepare_guess(kvq_codebook *cb) {
    cb->guess_ok = 0;
    if (cb->n < 4 || cb->n > 16) return;
    /* uniform cells of the mean spacing, cell 1 starting at t_0 */
    float span = cb->t[cb->n - 2] - cb->t[0];
    cb->ga = (float)(cb->n - 2) / span;
    cb->gb = 1.0f - cb->t[0] * cb->ga;
    /* g is monotone: check it at both ends of every cell (and just inside) */
    for (int i = 0; i < cb->n; i++) {
        float lo = i == 0 ? -1e30f : nextafterf(cb->t[i - 1], INFINITY);
        float hi = i == cb->n - 1 ? 1e30f : cb->t[i];
        int glo = guess_of(cb, lo), ghi = guess_of(cb, hi);
        if (glo < i - 1 || ghi > i + 1) return;
    }
    cb->guess_ok = 1;
}
