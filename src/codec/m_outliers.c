/*
 * +outliers=K — the "two-stream" variant of any method: the K channels of
 * highest variance over the calibration rows (the first tokens of a head)
 * are kept as int8 with one f16 scale per vector; the other d-K channels go
 * through the inner method at dim d-K.
 * Record: [inner record | f16 outlier scale | K int8].
 * Rotated domain (accumulators, prepared queries): [inner domain | K raw].
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

typedef struct { size_t inner_bytes; } outl_priv;

static size_t inner_bytes(const kvq_plan *p) { return ((const outl_priv *)p->priv)->inner_bytes; }

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const int K = p->o.outliers, di = p->d - K;
    float xi[KVQ_DIM_MAX];
    for (int c = 0; c < di; c++) xi[c] = x[p->ch_in[c]];
    int rc = p->inner->encode(p->inner, xi, code);
    if (rc) return rc;
    uint8_t *o = code + inner_bytes(p);
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[p->ch_out[k]]));
    float s = amax / 127.0f;
    if (s > 65504.0f) return KVQ_ERR_RANGE;
    uint16_t h = kvq_f32_to_f16(s);
    memcpy(o, &h, 2);
    float sh = kvq_f16_to_f32(h), inv = sh > 0 ? 1.0f / sh : 0.0f;
    for (int k = 0; k < K; k++) {
        float v = nearbyintf(x[p->ch_out[k]] * inv);
        ((int8_t *)(o + 2))[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return KVQ_OK;
}

static void outl_values(const kvq_plan *p, const uint8_t *rec, float *v) {
    const uint8_t *o = rec + inner_bytes(p);
    uint16_t h;
    memcpy(&h, o, 2);
    float s = kvq_f16_to_f32(h);
    for (int k = 0; k < p->o.outliers; k++) v[k] = s * ((const int8_t *)(o + 2))[k];
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    p->inner->decode(p->inner, code, y);
    outl_values(p, code, y + p->d - p->o.outliers);
}

static void prep(const kvq_plan *p, const float *q, float *qp) {
    const int K = p->o.outliers, di = p->d - K;
    float qi[KVQ_DIM_MAX];
    for (int c = 0; c < di; c++) qi[c] = q[p->ch_in[c]];
    p->inner->prep(p->inner, qi, qp);
    for (int k = 0; k < K; k++) qp[p->inner->qfloats + k] = q[p->ch_out[k]];
}

/* Inner kernels take their own row strides, so queries go one at a time. */
static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const int K = p->o.outliers;
    float v[KVQ_DIM_MAX];
    for (size_t j = 0; j < nq; j++) p->inner->score(p->inner, qp + j * p->qfloats, 1, codes, n, scores + j * n);
    for (size_t i = 0; i < n; i++) {
        outl_values(p, codes + i * p->code_bytes, v);
        for (size_t j = 0; j < nq; j++) {
            const float *qo = qp + j * p->qfloats + p->inner->qfloats;
            float s = 0;
            for (int k = 0; k < K; k++) s += qo[k] * v[k];
            scores[j * n + i] += s;
        }
    }
}

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    const int K = p->o.outliers, di = p->d - K;
    float v[KVQ_DIM_MAX];
    for (size_t j = 0; j < nq; j++) p->inner->accum(p->inner, w + j * n, 1, codes, n, acc + j * (size_t)p->d);
    for (size_t i = 0; i < n; i++) {
        outl_values(p, codes + i * p->code_bytes, v);
        for (size_t j = 0; j < nq; j++) {
            float wi = w[j * n + i], *a = acc + j * (size_t)p->d + di;
            for (int k = 0; k < K; k++) a[k] += wi * v[k];
        }
    }
}

int outliers_unrotate(const kvq_plan *p, const float *acc, float *out) {
    const int K = p->o.outliers, di = p->d - K;
    float tmp[KVQ_DIM_MAX], ov[KVQ_DIM_MAX];
    memcpy(ov, acc + di, (size_t)K * sizeof *ov);
    int rc = kvq_unrotate(p->inner, acc, tmp);
    if (rc) return rc;
    for (int c = 0; c < di; c++) out[p->ch_in[c]] = tmp[c];
    for (int k = 0; k < K; k++) out[p->ch_out[k]] = ov[k];
    return KVQ_OK;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Builds an outlier plan: p has m, d, seed, o, isa set. */
int outliers_build(kvq_plan *p, const char *spec, const float *calib, size_t n_calib, const int *channels) {
    const int K = p->o.outliers, d = p->d, di = d - K;
    p->ch_out = malloc((size_t)K * sizeof(int));
    p->ch_in = malloc((size_t)di * sizeof(int));
    p->priv = calloc(1, sizeof(outl_priv));
    if (!p->ch_out || !p->ch_in || !p->priv) return KVQ_ERR_NOMEM;
    if (channels) {
        memcpy(p->ch_out, channels, (size_t)K * sizeof(int));
    } else {
        if (!calib || n_calib == 0) return KVQ_ERR_NEEDS_CALIBRATION;
        double var[KVQ_DIM_MAX];
        for (int c = 0; c < d; c++) {
            double s = 0, s2 = 0;
            for (size_t i = 0; i < n_calib; i++) {
                double v = calib[i * (size_t)d + c];
                if (!isfinite(v)) return KVQ_ERR_NONFINITE;
                s += v;
                s2 += v * v;
            }
            double mean = s / n_calib;
            var[c] = s2 / n_calib - mean * mean;
        }
        for (int k = 0; k < K; k++) { /* K largest, ties to the lower channel */
            int best = -1;
            for (int c = 0; c < d; c++) {
                int taken = 0;
                for (int t = 0; t < k; t++) taken |= p->ch_out[t] == c;
                if (!taken && (best < 0 || var[c] > var[best])) best = c;
            }
            p->ch_out[k] = best;
        }
    }
    qsort(p->ch_out, (size_t)K, sizeof(int), cmp_int);
    for (int c = 0, k = 0, i = 0; c < d; c++) {
        if (k < K && p->ch_out[k] == c) k++;
        else p->ch_in[i++] = c;
    }
    /* inner spec: the same spec without the +outliers option */
    char inner[80];
    size_t o = 0;
    for (const char *s = spec; *s && o + 1 < sizeof inner;) {
        if (!strncmp(s, "+outliers=", 10)) {
            s += 10;
            while (*s && *s != '+') s++;
            continue;
        }
        inner[o++] = *s++;
    }
    inner[o] = 0;
    int rc = kvq_plan_create(&p->inner, inner, di, seed_mix(p->seed, 0x4f55544c), NULL, 0);
    if (rc) return rc;
    if (p->inner->isa != p->isa) {
        kvq_plan *c;
        rc = kvq_plan_clone_isa(&c, p->inner, p->isa);
        if (rc) return rc;
        kvq_plan_free(p->inner);
        p->inner = c;
    }
    ((outl_priv *)p->priv)->inner_bytes = p->inner->code_bytes;
    p->code_bytes = p->inner->code_bytes + 2 + (size_t)K;
    p->inner->code_bytes = p->code_bytes; /* inner kernels stride over whole records */
    p->qfloats = p->inner->qfloats + (size_t)K;
    p->can_decode = p->inner->can_decode;
    p->rotated = 1;
    p->encode = enc;
    p->decode = p->can_decode ? dec : NULL;
    p->prep = prep;
    p->score = score;
    p->accum = p->can_decode ? accum : NULL;
    return KVQ_OK;
}
