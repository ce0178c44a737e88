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
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    float xc[KVQ_DIM_MAX];
    for (int c = 0; c < p->d; c++) xc[c] = x[c] - p->mu[c];
    return p->inner->encode(p->inner, xc, code);
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const float *mr = p->mu + p->d; /* mean in the inner plan's (rotated) domain */
    p->inner->decode(p->inner, code, y);
    for (int c = 0; c < p->d; c++) y[c] += mr[c];
}

static void prep(const kvq_plan *p, const float *q, float *qp) {
    p->inner->prep(p->inner, q, qp);
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

/* Builds a +center plan: p has m, d, seed, o, isa set. src: clone source. */
int center_build(kvq_plan *p, const char *spec, const float *calib, size_t n_calib, const kvq_plan *src) {
    const int d = p->d;
    p->mu = calloc(2 * (size_t)d, sizeof *p->mu);
    if (!p->mu) return KVQ_ERR_NOMEM;
    if (src) {
        memcpy(p->mu, src->mu, (size_t)d * sizeof *p->mu);
    } else {
        if (!calib || n_calib == 0) return KVQ_ERR_NEEDS_CALIBRATION;
        for (int c = 0; c < d; c++) {
            double s = 0;
            for (size_t i = 0; i < n_calib; i++) {
                double v = calib[i * (size_t)d + c];
                if (!isfinite(v)) return KVQ_ERR_NONFINITE;
                s += v;
            }
            p->mu[c] = (float)(s / (double)n_calib);
        }
    }
    char inner[80];
    size_t o = 0;
    for (const char *s = spec; *s && o + 1 < sizeof inner;) {
        if (!strncmp(s, "+center", 7) && (s[7] == 0 || s[7] == '+')) { s += 7; continue; }
        inner[o++] = *s++;
    }
    inner[o] = 0;
    int rc = kvq_plan_create(&p->inner, inner, d, p->seed, NULL, 0);
    if (rc) return rc;
    if (p->inner->isa != p->isa) {
        kvq_plan *c;
        rc = kvq_plan_clone_isa(&c, p->inner, p->isa);
        if (rc) return rc;
        kvq_plan_free(p->inner);
        p->inner = c;
    }
    /* the mean in the inner domain: rotated like the inner plan's decode output */
    if (p->inner->rotated) rot_apply(&p->inner->rot, p->mu, p->mu + d);
    else memcpy(p->mu + d, p->mu, (size_t)d * sizeof *p->mu);
    p->code_bytes = p->inner->code_bytes;
    p->qfloats = p->inner->qfloats + 1;
    p->inner->qfloats = p->qfloats; /* inner kernels stride over whole prepared rows */
    p->can_decode = p->inner->can_decode;
    p->rotated = p->inner->rotated;
    p->encode = enc;
    p->decode = p->can_decode ? dec : NULL;
    p->prep = prep;
    p->score = score;
    p->accum = p->can_decode ? accum : NULL;
    return KVQ_OK;
}
