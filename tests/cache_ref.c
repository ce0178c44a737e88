/*
 * Helpers shared by the cache tests: Gaussian data, a base configuration,
 * relative errors, and the float64 attention computed from the records a
 * cache holds (cache_locate), the reference every attention path is
 * checked against.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ref.h"
#include "cache/cache_internal.h"
#include "testutil.h"

float *cr_gauss(tu_rng *r, size_t n, double sd) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * tu_gauss(r));
    return x;
}

kvq_cache_config cr_base_cfg(int layers, int H, int d, const char *ks, const char *vs) {
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = layers;
    cfg.n_kv_heads = H;
    cfg.head_dim = d;
    cfg.k_spec = ks;
    cfg.v_spec = vs;
    cfg.seed = 42;
    return cfg;
}

/* Relative L2 error of a vs b over n values. */
double cr_rel_err(const float *a, const double *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += (a[i] - b[i]) * (a[i] - b[i]);
        s += b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}
/* Worst relative L2 error over rows of d values. */
double cr_worst_row_err(const float *a, const double *b, size_t rows, int d) {
    double w = 0;
    for (size_t r = 0; r < rows; r++) {
        double e = cr_rel_err(a + r * d, b + r * d, (size_t)d);
        if (e > w) w = e;
    }
    return w;
}

/* 1 if the plan scores with 8-bit queries (tq codebooks of <= 4 bits, also
 * inside +outliers; q8 and q4, qblk.h; tcq, tcq_kernels.h): its scores are its own estimator, not
 * <q, decoded k> (test_codec_methods, test_qblk_vnni and test_tcq bound the difference). */
int cr_int_scores(const kvq_plan *p) {
    const char *s = kvq_plan_spec(p);
    if (!strncmp(s, "q8", 2) || !strncmp(s, "q4", 2) || !strncmp(s, "tcq:", 4)) return 1;
    int b = 0;
    if (!strncmp(s, "tq-mse:", 7)) b = atoi(s + 7);
    else if (!strncmp(s, "tq-prod:", 8)) b = atoi(s + 8) - 1;
    else if (!strncmp(s, "rvq:", 4)) b = atoi(s + 4);
    /* polar:3 / polar:4 with 4 levels: 8-bit pair tables (their prepared rows hold them, 3d + 16 floats) */
    else if (!strncmp(s, "polar:", 6)) return kvq_plan_query_floats(p) == 3 * (size_t)kvq_plan_dim(p) + 16;
    return b > 0 && b <= 4;
}

/*
 * float64 attention from the cache's own records: keys decoded (or scored
 * with kvq_score when the method is key-only or scores with 8-bit queries),
 * values decoded.
 */
void cr_ref_from_cache(const kvq_cache *c, int layer, const float *q, size_t nq, int HQ, size_t pos0, float scale,
                           int sliding, double *out) {
    const int H = c->H, d = c->d, G = HQ / H;
    const size_t end = pos0 + nq;
    double *logit = malloc(end * sizeof *logit);
    float *kd = malloc(end * (size_t)d * sizeof *kd), *vd = malloc(end * (size_t)d * sizeof *vd);
    const kvq_plan **kps = malloc(end * sizeof *kps);
    const uint8_t **krs = malloc(end * sizeof *krs);
    float qp[8192], sc;
    for (int h = 0; h < H; h++) {
        size_t lo0 = sliding && pos0 + 1 > (size_t)sliding ? pos0 + 1 - sliding : 0;
        for (size_t p = lo0; p < end; p++) {
            const uint8_t *kr, *vr;
            const kvq_plan *kp, *vp;
            CHECK_OK(cache_locate(c, layer, h, p, &kr, &kp, &vr, &vp));
            kps[p] = kp;
            krs[p] = kr;
            if (kvq_plan_can_decode(kp)) CHECK_OK(kvq_decode(kp, kr, 1, kd + p * d));
            CHECK_OK(kvq_decode(vp, vr, 1, vd + p * d));
        }
        for (size_t t = 0; t < nq; t++) {
            size_t pt = pos0 + t, lo = sliding && pt + 1 > (size_t)sliding ? pt + 1 - sliding : 0;
            for (int g = 0; g < G; g++) {
                const float *qr = q + (t * HQ + (size_t)h * G + g) * d;
                double mx = -INFINITY;
                for (size_t p = lo; p <= pt; p++) {
                    double s = 0;
                    if (kvq_plan_can_decode(kps[p]) && !cr_int_scores(kps[p])) {
                        for (int i = 0; i < d; i++) s += (double)qr[i] * kd[p * d + i];
                        s *= scale;
                    } else { /* the codec's own estimator (key-only, or 8-bit query scores),
                              * on the query scaled as the cache scales it */
                        float qs[KVQ_DIM_MAX];
                        for (int i = 0; i < d; i++) qs[i] = qr[i] * scale;
                        CHECK_OK(kvq_query_prepare(kps[p], qs, qp));
                        CHECK_OK(kvq_score(kps[p], qp, 1, krs[p], 1, &sc));
                        s = sc;
                    }
                    logit[p] = s;
                    if (logit[p] > mx) mx = logit[p];
                }
                double sum = 0, *o = out + (t * HQ + (size_t)h * G + g) * d;
                for (int i = 0; i < d; i++) o[i] = 0;
                for (size_t p = lo; p <= pt; p++) {
                    double w = exp(logit[p] - mx);
                    sum += w;
                    for (int i = 0; i < d; i++) o[i] += w * vd[p * d + i];
                }
                for (int i = 0; i < d; i++) o[i] /= sum;
            }
        }
    }
    free(logit);
    free(kd);
    free(vd);
    free(kps);
    free(krs);
}

