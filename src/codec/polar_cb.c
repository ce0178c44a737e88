/*
 * Lloyd-Max for a density given as a function on [lo, hi], and the angle
 * codebooks of PolarQuant (see polar_cb.h and m_polar.c).
 *
 * Integration: the interval is cut into GRID cells; cumulative mass, first
 * and second moments at the cell edges are Simpson sums (edge + midpoint
 * evaluations). A moment up to an arbitrary x adds one Simpson step on the
 * partial cell [x_i, x], so boundaries need not fall on the grid. With the
 * smooth densities used here (sin^k on 4096 cells of [0, pi/2]) the
 * conditional means are exact to ~1e-12.
 */
#include "polar_cb.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GRID 4096
#define MAX_ITERS 200000

typedef struct {
    kvq_pdf_fn pdf;
    void *ctx;
    double lo, h;
    double *f;      /* pdf at the GRID + 1 edges */
    double *m0, *m1, *m2; /* cumulative ∫ x^k f from lo to edge i */
} grid_ctx;

/* ∫_lo^x x^k f(x) dx for k = 0, 1, 2. */
static void cum(const grid_ctx *g, double x, double out[3]) {
    double pos = (x - g->lo) / g->h;
    int i = pos <= 0 ? 0 : (int)pos;
    if (i > GRID) i = GRID;
    out[0] = g->m0[i];
    out[1] = g->m1[i];
    out[2] = g->m2[i];
    double x0 = g->lo + i * g->h, w = x - x0;
    if (i >= GRID || w <= 0) return;
    double xm = x0 + 0.5 * w, f0 = g->f[i], fm = g->pdf(xm, g->ctx), f1 = g->pdf(x, g->ctx);
    double s = w / 6;
    out[0] += s * (f0 + 4 * fm + f1);
    out[1] += s * (x0 * f0 + 4 * xm * fm + x * f1);
    out[2] += s * (x0 * x0 * f0 + 4 * xm * xm * fm + x * x * f1);
}

static int build_grid(grid_ctx *g) {
    g->f = malloc((GRID + 1) * sizeof(double));
    g->m0 = malloc((GRID + 1) * sizeof(double));
    g->m1 = malloc((GRID + 1) * sizeof(double));
    g->m2 = malloc((GRID + 1) * sizeof(double));
    if (!g->f || !g->m0 || !g->m1 || !g->m2) return KVQ_ERR_NOMEM;
    for (int i = 0; i <= GRID; i++) {
        double v = g->pdf(g->lo + i * g->h, g->ctx);
        if (!(v >= 0) || !isfinite(v)) return KVQ_ERR_INVALID_ARG;
        g->f[i] = v;
    }
    g->m0[0] = g->m1[0] = g->m2[0] = 0;
    for (int i = 0; i < GRID; i++) {
        double x0 = g->lo + i * g->h, x1 = x0 + g->h, xm = x0 + 0.5 * g->h;
        double f0 = g->f[i], f1 = g->f[i + 1], fm = g->pdf(xm, g->ctx);
        if (!(fm >= 0) || !isfinite(fm)) return KVQ_ERR_INVALID_ARG;
        double s = g->h / 6;
        g->m0[i + 1] = g->m0[i] + s * (f0 + 4 * fm + f1);
        g->m1[i + 1] = g->m1[i] + s * (x0 * f0 + 4 * xm * fm + x1 * f1);
        g->m2[i + 1] = g->m2[i] + s * (x0 * x0 * f0 + 4 * xm * xm * fm + x1 * x1 * f1);
    }
    return g->m0[GRID] > 0 ? KVQ_OK : KVQ_ERR_INVALID_ARG;
}

/* Smallest x with cumulative mass >= target (grid search + linear step). */
static double quantile(const grid_ctx *g, double target) {
    int a = 0, b = GRID;
    while (b - a > 1) {
        int mid = (a + b) / 2;
        if (g->m0[mid] < target) a = mid;
        else b = mid;
    }
    double dm = g->m0[b] - g->m0[a], fr = dm > 0 ? (target - g->m0[a]) / dm : 0.5;
    if (fr < 0) fr = 0;
    if (fr > 1) fr = 1;
    return g->lo + (a + fr) * g->h;
}

int lloyd_max_solve_fn(kvq_codebook *cb, kvq_pdf_fn pdf, void *ctx, double lo, double hi, int bits) {
    if (!cb || !pdf) return KVQ_ERR_NULL;
    if (bits < 1 || bits > 8) return KVQ_ERR_BITS_RANGE;
    if (!(hi > lo) || !isfinite(lo) || !isfinite(hi)) return KVQ_ERR_INVALID_ARG;
    grid_ctx g = {pdf, ctx, lo, (hi - lo) / GRID, NULL, NULL, NULL, NULL};
    int rc = build_grid(&g);
    const int n = 1 << bits;
    double c[KVQ_MAX_LEVELS], t[KVQ_MAX_LEVELS + 1], mt[KVQ_MAX_LEVELS + 1][3];
    if (rc) goto done;
    const double total = g.m0[GRID], tol = 1e-12 * (hi - lo);
    for (int i = 0; i < n; i++) c[i] = quantile(&g, (i + 0.5) / n * total);
    t[0] = lo;
    t[n] = hi;
    cum(&g, lo, mt[0]);
    memcpy(mt[n], (double[3]){g.m0[GRID], g.m1[GRID], g.m2[GRID]}, sizeof mt[n]);
    for (int it = 0; it < MAX_ITERS; it++) {
        for (int i = 1; i < n; i++) {
            t[i] = 0.5 * (c[i - 1] + c[i]);
            cum(&g, t[i], mt[i]);
        }
        double delta = 0;
        for (int i = 0; i < n; i++) {
            double mass = mt[i + 1][0] - mt[i][0];
            double nc = mass > 1e-300 * total ? (mt[i + 1][1] - mt[i][1]) / mass : 0.5 * (t[i] + t[i + 1]);
            delta = fmax(delta, fabs(nc - c[i]));
            c[i] = nc;
        }
        if (delta < tol) break;
    }
    /* final cells for the stored boundaries and the MSE */
    double mse = 0;
    for (int i = 1; i < n; i++) {
        t[i] = 0.5 * (c[i - 1] + c[i]);
        cum(&g, t[i], mt[i]);
    }
    for (int i = 0; i < n; i++) {
        double m0 = mt[i + 1][0] - mt[i][0], m1 = mt[i + 1][1] - mt[i][1], m2 = mt[i + 1][2] - mt[i][2];
        mse += m2 - 2 * c[i] * m1 + c[i] * c[i] * m0; /* E[(X-c)^2; cell] */
    }
    cb->bits = bits;
    cb->n = n;
    cb->mse = mse / total;
    for (int i = 0; i < n; i++) cb->c[i] = (float)c[i];
    for (int i = 0; i < n - 1; i++) cb->t[i] = 0.5f * (cb->c[i] + cb->c[i + 1]);
    cb->t[n - 1] = INFINITY;
    for (int i = n; i < KVQ_MAX_LEVELS; i++) { cb->c[i] = 0; cb->t[i] = INFINITY; }
done:
    free(g.f);
    free(g.m0);
    free(g.m1);
    free(g.m2);
    return rc;
}

double polar_angle_pdf(double psi, void *ctx) {
    int k = *(const int *)ctx;
    double s = sin(2 * psi), v = 1;
    if (s <= 0) return k == 0 ? 1.0 : 0.0;
    for (; k > 0; k >>= 1, s *= s) /* s^k by squaring */
        if (k & 1) v *= s;
    return v;
}

int polar_angle_codebook(kvq_codebook *cb, int level, int bits) {
    if (!cb) return KVQ_ERR_NULL;
    if (bits < 1 || bits > 8) return KVQ_ERR_BITS_RANGE;
    if (level < 1 || level > 8) return KVQ_ERR_INVALID_ARG;
    if (level == 1) {
        const int n = 1 << bits;
        const double w = 2 * M_PI / n;
        cb->bits = bits;
        cb->n = n;
        for (int i = 0; i < n; i++) cb->c[i] = (float)((i + 0.5) * w);
        for (int i = 0; i < n - 1; i++) cb->t[i] = (float)((i + 1) * w);
        cb->t[n - 1] = INFINITY;
        for (int i = n; i < KVQ_MAX_LEVELS; i++) { cb->c[i] = 0; cb->t[i] = INFINITY; }
        cb->mse = w * w / 12;
        return KVQ_OK;
    }
    int k = (1 << (level - 1)) - 1;
    return lloyd_max_solve_fn(cb, polar_angle_pdf, &k, 0.0, M_PI / 2, bits);
}
