/*
 * +center — subtract a calibrated per-channel mean before any method.
 *
 * Keys of real models carry a large mean (SmolLM2: |mean| is 60-80% of |k|,
 * concentrated on a few low-frequency RoPE channels, which barely rotate
 * between positions). A rotation spreads it over every coordinate, so the
 * quantization error, which scales with |k|, is set by a component that does
 * not even matter to attention: <q, mean> is the same for every position and
 * softmax ignores it. Centering quantizes k - mean instead; the mean (d
 * floats per head, from the calibration rows: the cache passes a head's first
 * tokens) is added back exactly:
 *   score = est <q, k - mean> + <q, mean>      (one dot per query, in prep)
 *   acc  += sum_i w_i (v̂_i - mean) + (sum_i w_i) mean
 * Records are the inner method's; the prepared query gains one float.
 *
 * +chscale (implies +center) also scales channel c by a_c = (sigma_c / s)^-1/2
 * before the inner method (sigma_c: the calibration rows' standard deviation
 * of channel c, s: the RMS of the sigma_c, sigma_c clamped to >= s/100):
 *   encode  a * (k - mean);   score = est <q / a, a (k - mean)> + <q, mean>
 *   decode  (inner decode) / a + mean   (the / a after the inner unrotation)
 * A rotation makes the inner method's error isotropic with a size set by the
 * largest channels. Real keys put most of their energy in a few channels that
 * the queries barely read (Gemma 3 270M layer 11: key channel RMS 77 where the
 * query's is 0.4), so that error lands on the channels the queries do read.
 * Scaling by a_c^2 ∝ sigma_q / sigma_k minimises E[(q·e)^2] over diagonal
 * scalings when the error is isotropic (Cauchy–Schwarz); without query
 * statistics sigma_q is taken flat, hence the power -1/2 (half whitening).
 * Measured: docs/RESULTS.md, "Quality (issue 5)".
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const float *a = p->mu + 2 * p->d;
    float xc[KVQ_DIM_MAX];
    int bad = 0;
    for (int c = 0; c < p->d; c++) {
        xc[c] = (x[c] - p->mu[c]) * a[c];
        bad |= !isfinite(xc[c]); /* beyond float once centred and scaled: no method stores it */
    }
    return bad ? KVQ_ERR_RANGE : p->inner->encode(p->inner, xc, code);
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const float *mr = p->mu + p->d; /* a * mean in the inner plan's (rotated) domain */
    p->inner->decode(p->inner, code, y);
    for (int c = 0; c < p->d; c++) y[c] += mr[c];
}

static void prep(const kvq_plan *p, const float *q, float *qp) {
    if (p->o.chscale) {
        const float *ia = p->mu + 3 * p->d;
        float qs[KVQ_DIM_MAX];
        for (int c = 0; c < p->d; c++) qs[c] = q[c] * ia[c];
        p->inner->prep(p->inner, qs, qp);
    } else {
        p->inner->prep(p->inner, q, qp);
    }
    double s = 0;
    for (int c = 0; c < p->d; c++) s += (double)q[c] * p->mu[c];
    qp[p->qfloats - 1] = (float)s;
}

static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    p->inner->score(p->inner, qp, nq, codes, n, scores);
    for (size_t j = 0; j < nq; j++) {
        const float qm = qp[j * p->qfloats + p->qfloats - 1];
        for (size_t i = 0; i < n; i++) scores[j * n + i] += qm;
    }
}

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    const float *mr = p->mu + p->d;
    p->inner->accum(p->inner, w, nq, codes, n, acc);
    for (size_t j = 0; j < nq; j++) {
        float sw = 0;
        for (size_t i = 0; i < n; i++) sw += w[j * n + i];
        float *a = acc + j * (size_t)p->d;
        for (int c = 0; c < p->d; c++) a[c] += sw * mr[c];
    }
}

/* The inner plan's unrotation of accumulated rows, then / a per channel (+chscale). */
static int unrotate(const kvq_plan *p, const float *acc, float *out) {
    int rc = kvq_unrotate(p->inner, acc, out);
    if (rc || !p->o.chscale) return rc;
    const float *ia = p->mu + 3 * p->d;
    for (int c = 0; c < p->d; c++) out[c] *= ia[c];
    return KVQ_OK;
}

/* mean (mu[0..d)) and channel scales (mu[2d..3d), their inverses at 3d) of
 * the calibration rows */
static int fit(kvq_plan *p, const float *calib, size_t n_calib) {
    const int d = p->d;
    double mean[KVQ_DIM_MAX], var[KVQ_DIM_MAX], tot = 0;
    int rc = calib_moments(calib, n_calib, d, mean, var);
    if (rc) return rc;
    double mm = 0;
    for (int c = 0; c < d; c++) mm += mean[c] * mean[c];
    /* the mean is rotated and added back in float, like an f32 scale (layouts.h) */
    if (!(sqrt(mm) <= KVQ_SCALE32_MAX)) return KVQ_ERR_RANGE;
    for (int c = 0; c < d; c++) {
        p->mu[c] = (float)mean[c];
        tot += var[c];
    }
    const double rms = sqrt(tot / d); /* RMS over channels of sigma_c */
    for (int c = 0; c < d; c++) {
        double a = 1;
        if (p->o.chscale && rms > 0) {
            double sg = sqrt(var[c]);
            if (sg < rms / 100) sg = rms / 100;
            a = sqrt(rms / sg); /* (sigma_c / rms)^-1/2, in [1/sqrt(sqrt(d)), 10] */
        }
        p->mu[2 * d + c] = (float)a;
        p->mu[3 * d + c] = (float)(1 / a);
    }
    return KVQ_OK;
}

static int selected(const kvq_plan_opts *o) { return o->center; }

/* The inner plan: the same method and options at the same dim and seed. */
static int inner(const kvq_plan_opts *o, int d, uint64_t seed, kvq_plan_opts *io, int *id, uint64_t *iseed) {
    *io = *o;
    io->center = io->chscale = 0;
    *id = d;
    *iseed = seed;
    return KVQ_OK;
}

/* Stats (kvq_plan_stats): the mean (d floats), then with +chscale the scales a and their inverses (2 x d more);
 * the scaled mean in the inner domain is derived (attach). */
static size_t stats_floats(const kvq_plan_opts *o, int d) { return (size_t)d * (o->chscale ? 3 : 1); }

static void stats_get(const kvq_plan *p, float *out) {
    const size_t d = (size_t)p->d;
    memcpy(out, p->mu, d * sizeof *out);
    if (p->o.chscale) memcpy(out + d, p->mu + 2 * d, 2 * d * sizeof *out);
}

/* Imported stats: finite, the mean within fit's bound, the scales within [1/16, 16] (fit's lie in
 * [d^-1/4, 10]) and each inverse the float of 1 / a (|a * ia - 1| <= 2^-20; fit rounds both from
 * one double, within 2^-23). */
static int stats_set(kvq_plan *p, const float *st) {
    const int d = p->d;
    double mm = 0;
    for (int c = 0; c < d * (p->o.chscale ? 3 : 1); c++)
        if (!isfinite(st[c])) return KVQ_ERR_NONFINITE;
    for (int c = 0; c < d; c++) mm += (double)st[c] * st[c];
    if (!(sqrt(mm) <= KVQ_SCALE32_MAX)) return KVQ_ERR_RANGE;
    for (int c = 0; c < d; c++) {
        p->mu[c] = st[c];
        p->mu[2 * d + c] = p->mu[3 * d + c] = 1;
    }
    if (!p->o.chscale) return KVQ_OK;
    for (int c = 0; c < d; c++) {
        const float a = st[d + c], ia = st[2 * d + c];
        if (!(a >= 0.0625f && a <= 16.0f) || !(fabs((double)a * ia - 1.0) <= 0x1p-20)) return KVQ_ERR_RANGE;
        p->mu[2 * d + c] = a;
        p->mu[3 * d + c] = ia;
    }
    return KVQ_OK;
}

/* The mean and channel scales: from the calibration rows, src's (a clone), or stats. */
static int calibrate(kvq_plan *p, const float *calib, size_t n_calib, const kvq_plan *src, const float *stats) {
    p->mu = calloc(4 * (size_t)p->d, sizeof *p->mu);
    if (!p->mu) return KVQ_ERR_NOMEM;
    if (src) {
        memcpy(p->mu, src->mu, 4 * (size_t)p->d * sizeof *p->mu);
        return KVQ_OK;
    }
    if (stats) return stats_set(p, stats);
    if (!calib || n_calib == 0) return KVQ_ERR_NEEDS_CALIBRATION;
    return fit(p, calib, n_calib);
}

/* Around p->inner: the scaled mean in the inner domain, the record and kernels. */
static int attach(kvq_plan *p) {
    const int d = p->d;
    /* the scaled mean a * mean in the inner domain: rotated like the inner plan's decode output */
    float am[KVQ_DIM_MAX];
    for (int c = 0; c < d; c++) am[c] = p->mu[c] * p->mu[2 * d + c];
    if (p->inner->rotated) rot_apply(&p->inner->rot, am, p->mu + d);
    else memcpy(p->mu + d, am, (size_t)d * sizeof *p->mu);
    p->rec = p->inner->rec; /* the inner method's records, unchanged */
    p->code_bytes = p->inner->own_code_bytes;
    p->qfloats = p->inner->own_qfloats + 1;
    /* inner kernels stride over whole prepared rows */
    int rc = wrapper_inner_strides(p, p->code_bytes, p->qfloats);
    if (rc) return rc;
    p->rotated = p->inner->rotated;
    wrapper_kernels(p, enc, dec, prep, score, accum);
    return KVQ_OK;
}

static void fini(kvq_plan *p) {
    free(p->mu);
    p->mu = NULL;
}

const kvq_wrapper kvq_wrapper_center = {"+center", 1,      selected, inner,        calibrate, attach,
                                        unrotate,  fini,   stats_floats, stats_get};
