/*
 * The cache object: configuration, per-layer policy and plans, sizes,
 * truncate and clear. Storage is in store.c, append in append.c, attention
 * in attend.c (layout: cache_internal.h, docs/CACHE.md).
 */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "rng.h"

/* Independent seeds for (layer, K/V, head): splitmix64 hashes (rng.h) of
 * the seed and of the tag. */
uint64_t cache_plan_seed(uint64_t seed, int layer, int kv, int head) {
    uint64_t tag = ((uint64_t)(uint32_t)layer << 32) | ((uint64_t)(kv & 1) << 31) | (uint32_t)(head + 1);
    return kvq_mix64(seed ^ kvq_mix64(tag ^ 0x4b5643414348ull));
}

int cache_plan_make(const kvq_cache *c, kvq_plan **out, const char *spec, uint64_t seed, const float *calib, size_t n) {
    kvq_plan *p;
    int rc = kvq_plan_create(&p, spec, c->d, seed, calib, n);
    if (rc) return rc;
    if (c->reference && kvq_plan_isa(p) != KVQ_ISA_SCALAR) {
        kvq_plan *s;
        rc = kvq_plan_clone_isa(&s, p, KVQ_ISA_SCALAR);
        kvq_plan_free(p);
        if (rc) return rc;
        p = s;
    }
    *out = p;
    return KVQ_OK;
}

/* Record bytes of a spec at dim d (a +outliers spec is sized with dummy calibration rows). */
static int spec_record_bytes(const kvq_cache *c, const char *spec, int needs_calib, size_t *bytes, int *can_decode) {
    float *zero = NULL;
    if (needs_calib) {
        zero = calloc((size_t)c->d, sizeof *zero);
        if (!zero) return KVQ_ERR_NOMEM;
    }
    kvq_plan *p;
    int rc = kvq_plan_create(&p, spec, c->d, 0, zero, needs_calib ? 1 : 0);
    free(zero);
    if (rc) return rc;
    *bytes = kvq_plan_code_bytes(p);
    *can_decode = kvq_plan_can_decode(p);
    kvq_plan_free(p);
    return KVQ_OK;
}

static void layer_free_plans(kvq_cache *c, cache_layer *L) {
    if (L->kplan != c->f16) kvq_plan_free(L->kplan);
    if (L->vplan != c->f16) kvq_plan_free(L->vplan);
    L->kplan = L->vplan = NULL;
    for (int pass = 0; pass < 2; pass++) {
        kvq_plan **hp = pass ? L->vhead : L->khead;
        if (!hp) continue;
        for (int h = 0; h < c->H; h++) kvq_plan_free(hp[h]);
        free(hp);
    }
    L->khead = L->vhead = NULL;
}

/* Drops per-head calibrated plans (the layer waits for calibration again). */
static void layer_uncalibrate(kvq_cache *c, cache_layer *L) {
    if (!L->calib_tokens || !L->ready) return;
    for (int pass = 0; pass < 2; pass++) {
        kvq_plan ***hp = pass ? &L->vhead : &L->khead;
        if (!*hp) continue;
        for (int h = 0; h < c->H; h++) kvq_plan_free((*hp)[h]);
        free(*hp);
        *hp = NULL;
    }
    L->ready = 0;
}

void kvq_cache_free(kvq_cache *c) {
    if (!c) return;
    if (c->layers) {
        for (int l = 0; l < c->n_layers; l++) {
            store_release(&c->layers[l]);
            layer_free_plans(c, &c->layers[l]);
        }
    }
    free(c->layers);
    kvq_plan_free(c->f16);
    free(c->ws);
    free(c);
}

static int layer_init(kvq_cache *c, int l, int f16_layer, int sliding, int compress_sliding, size_t kb, size_t vb) {
    cache_layer *L = &c->layers[l];
    L->sliding = sliding;
    L->compressed = !f16_layer && (!sliding || compress_sliding);
    L->page_tokens = sliding ? CACHE_SLIDING_PAGE_TOKENS : CACHE_PAGE_TOKENS;
    if (!L->compressed) {
        L->kplan = L->vplan = c->f16;
        L->kb = L->vb = 2 * (size_t)c->d;
        L->ready = 1;
    } else {
        L->kb = kb;
        L->vb = vb;
        L->window = c->window;
        L->sink = sliding ? 0 : c->sink; /* a sliding window drops the first tokens anyway */
        /* a sliding layer's tail never needs more than the window (so that
         * main_end >= base after every append) */
        if (sliding && L->window > (size_t)sliding - 1) L->window = (size_t)sliding - 1;
        L->k_per_head = c->k_calib;
        L->v_per_head = c->v_calib;
        L->calib_tokens = (c->k_calib || c->v_calib) ? c->calib_tokens : 0;
        int rc;
        if (!c->k_calib && (rc = cache_plan_make(c, &L->kplan, c->kspec, cache_plan_seed(c->seed, l, 0, -1), NULL, 0)))
            return rc;
        if (!c->v_calib && (rc = cache_plan_make(c, &L->vplan, c->vspec, cache_plan_seed(c->seed, l, 1, -1), NULL, 0)))
            return rc;
        L->ready = !L->calib_tokens;
    }
    L->page_bytes = (size_t)c->H * L->page_tokens * (L->kb + L->vb);
    return KVQ_OK;
}

int kvq_cache_create(kvq_cache **out, const kvq_cache_config *cfg) {
    if (!out || !cfg) return KVQ_ERR_NULL;
    if (cfg->n_layers <= 0 || cfg->n_kv_heads <= 0 || cfg->n_kv_heads > 4096 || cfg->f16_window < 0 ||
        cfg->n_f16_layers < 0 || cfg->outlier_calib_tokens < 0 || (cfg->n_f16_layers > 0 && !cfg->f16_layers) ||
        cfg->sink_tokens < 0 || cfg->sink_tokens > KVQ_SINK_MAX)
        return KVQ_ERR_INVALID_ARG;
    if (cfg->head_dim < KVQ_DIM_MIN || cfg->head_dim > KVQ_DIM_MAX || cfg->head_dim % 8) return KVQ_ERR_UNSUPPORTED_DIM;
    for (int i = 0; i < cfg->n_f16_layers; i++)
        if (cfg->f16_layers[i] < -cfg->n_layers || cfg->f16_layers[i] >= cfg->n_layers) return KVQ_ERR_INVALID_ARG;
    if (cfg->sliding_window)
        for (int l = 0; l < cfg->n_layers; l++)
            if (cfg->sliding_window[l] < 0) return KVQ_ERR_INVALID_ARG;
    const char *ks = cfg->k_spec ? cfg->k_spec : "f16", *vs = cfg->v_spec ? cfg->v_spec : "f16";
    if (strlen(ks) >= sizeof ((kvq_cache *)0)->kspec || strlen(vs) >= sizeof ((kvq_cache *)0)->vspec)
        return KVQ_ERR_UNKNOWN_METHOD;

    kvq_cache *c = calloc(1, sizeof *c);
    if (!c) return KVQ_ERR_NOMEM;
    c->n_layers = cfg->n_layers;
    c->H = cfg->n_kv_heads;
    c->d = cfg->head_dim;
    c->window = (size_t)cfg->f16_window;
    c->sink = (size_t)cfg->sink_tokens;
    c->calib_tokens = cfg->outlier_calib_tokens ? (size_t)cfg->outlier_calib_tokens : CACHE_DEFAULT_CALIB;
    c->reference = cfg->reference_kernels != 0;
    c->isa = c->reference ? KVQ_ISA_SCALAR : kvq_cpu_isa();
    c->seed = cfg->seed;
    strcpy(c->kspec, ks);
    strcpy(c->vspec, vs);

    int rc = kvq_spec_needs_calibration(ks, &c->k_calib);
    if (!rc) rc = kvq_spec_needs_calibration(vs, &c->v_calib);
    size_t kb = 0, vb = 0;
    int kdec, vdec;
    if (!rc) rc = spec_record_bytes(c, ks, c->k_calib, &kb, &kdec);
    if (!rc) rc = spec_record_bytes(c, vs, c->v_calib, &vb, &vdec);
    if (!rc && !vdec) rc = KVQ_ERR_NO_DECODE; /* values must be reconstructed */
    if (!rc) rc = cache_plan_make(c, &c->f16, "f16", 0, NULL, 0);
    if (!rc && !(c->layers = calloc((size_t)c->n_layers, sizeof *c->layers))) rc = KVQ_ERR_NOMEM;
    for (int l = 0; !rc && l < c->n_layers; l++) {
        int f16l = 0;
        for (int i = 0; i < cfg->n_f16_layers; i++) /* negative: from the end */
            f16l |= (cfg->f16_layers[i] < 0 ? cfg->n_layers + cfg->f16_layers[i] : cfg->f16_layers[i]) == l;
        int sw = cfg->sliding_window ? cfg->sliding_window[l] : 0;
        rc = layer_init(c, l, f16l, sw, cfg->compress_sliding, kb, vb);
    }
    if (rc) { kvq_cache_free(c); return rc; }
    *out = c;
    return KVQ_OK;
}

size_t kvq_cache_len(const kvq_cache *c, int layer) {
    if (!c || layer < 0 || layer >= c->n_layers) return 0;
    return c->layers[layer].len;
}

size_t kvq_cache_memory_bytes(const kvq_cache *c) {
    if (!c) return 0;
    size_t b = 0;
    for (int l = 0; l < c->n_layers; l++) b += store_bytes(c, &c->layers[l]);
    return b;
}

size_t kvq_cache_bytes_per_token(const kvq_cache *c) {
    if (!c) return 0;
    size_t b = 0;
    for (int l = 0; l < c->n_layers; l++) b += (size_t)c->H * (c->layers[l].kb + c->layers[l].vb);
    return b;
}

int kvq_cache_truncate(kvq_cache *c, size_t pos) {
    if (!c) return KVQ_ERR_NULL;
    /* refuse before changing anything if a sliding layer already dropped
     * positions that a query at `pos` needs */
    for (int l = 0; l < c->n_layers; l++) {
        const cache_layer *L = &c->layers[l];
        if (pos >= L->len || !L->sliding) continue;
        size_t need = pos + 1 > (size_t)L->sliding ? pos + 1 - (size_t)L->sliding : 0;
        if (L->base > need) return KVQ_ERR_STATE;
    }
    for (int l = 0; l < c->n_layers; l++) {
        cache_layer *L = &c->layers[l];
        if (pos >= L->len) continue;
        L->len = pos;
        if (L->main_end > pos) L->main_end = pos;
        store_trim(L, L->main_end);
        if (pos == 0) {
            /* nothing left: the next tokens calibrate +outliers plans again */
            layer_uncalibrate(c, L);
            L->base = L->main_end = 0;
        }
    }
    return KVQ_OK;
}

void kvq_cache_clear(kvq_cache *c) {
    if (!c) return;
    for (int l = 0; l < c->n_layers; l++) {
        cache_layer *L = &c->layers[l];
        store_release(L);
        layer_uncalibrate(c, L);
        L->len = L->base = L->main_end = 0;
    }
    free(c->ws);
    c->ws = NULL;
    c->ws_floats = 0;
}

int cache_locate(const kvq_cache *c, int layer, int head, size_t pos, const uint8_t **k, const kvq_plan **kp,
                 const uint8_t **v, const kvq_plan **vp) {
    if (!c || !k || !kp || !v || !vp) return KVQ_ERR_NULL;
    if (layer < 0 || layer >= c->n_layers || head < 0 || head >= c->H) return KVQ_ERR_INVALID_ARG;
    const cache_layer *L = &c->layers[layer];
    if (pos >= L->len || pos < L->base) return KVQ_ERR_INVALID_ARG;
    cache_seg s;
    store_segment(c, L, head, pos, pos + 1, &s);
    *k = s.k;
    *v = s.v;
    *kp = s.kp;
    *vp = s.vp;
    return KVQ_OK;
}
