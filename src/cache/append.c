/*
 * Appending tokens to a layer. A token enters the f16 tail (the window W,
 * or every token while +outliers plans wait for their calibration rows) and
 * is encoded into the main store when it leaves it; with no tail it is
 * encoded at once. The result does not depend on how tokens are batched:
 * a token that passes through the tail is encoded from its f16 value, the
 * same whether it waited there or not.
 *
 * An append is all or nothing: every fallible step (calibration plans, new
 * pages, a new tail ring, encoding) happens before anything visible changes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

/* KVQ_ERR_NONFINITE for NaN/Inf; KVQ_ERR_RANGE if f16 storage is needed and |x| > 65504. */
static int check_values(const float *x, size_t n, int via_f16) {
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return KVQ_ERR_NONFINITE;
        if (via_f16 && fabsf(x[i]) > 65504.0f) return KVQ_ERR_RANGE;
    }
    return KVQ_OK;
}

static void row_to_f16(const float *x, uint8_t *out, int d) {
    for (int i = 0; i < d; i++) {
        uint16_t h = kvq_f32_to_f16(x[i]);
        memcpy(out + 2 * i, &h, 2);
    }
}

static void row_from_f16(const uint8_t *in, float *x, int d) {
    for (int i = 0; i < d; i++) {
        uint16_t h;
        memcpy(&h, in + 2 * i, 2);
        x[i] = kvq_f16_to_f32(h);
    }
}

static void free_head_plans(kvq_plan **p, int H) {
    if (!p) return;
    for (int h = 0; h < H; h++) kvq_plan_free(p[h]);
    free(p);
}

/*
 * Per-head +outliers plans from the first calib_tokens positions (their f16
 * values: in the tail for positions < old_len, else in the input).
 */
static int build_head_plans(const kvq_cache *c, const cache_layer *L, int layer, const float *k, const float *v,
                            size_t old_len, kvq_plan ***nk, kvq_plan ***nv) {
    const int H = c->H, d = c->d;
    const size_t N = L->calib_tokens, row = (size_t)H * d;
    float *rows = malloc(N * (size_t)d * sizeof *rows);
    uint8_t tmp[2 * KVQ_DIM_MAX];
    kvq_plan **pk = L->k_per_head ? calloc((size_t)H, sizeof *pk) : NULL;
    kvq_plan **pv = L->v_per_head ? calloc((size_t)H, sizeof *pv) : NULL;
    int rc = KVQ_OK;
    if (!rows || (L->k_per_head && !pk) || (L->v_per_head && !pv)) rc = KVQ_ERR_NOMEM;
    for (int kv = 0; kv < 2 && !rc; kv++) {
        kvq_plan **dst = kv ? pv : pk;
        if (!dst) continue;
        const float *in = kv ? v : k;
        const char *spec = kv ? c->vspec : c->kspec;
        for (int h = 0; h < H && !rc; h++) {
            for (size_t p = 0; p < N; p++) {
                if (p < old_len) {
                    row_from_f16(kv ? tail_v(c, L, h, p) : tail_k(c, L, h, p), rows + p * d, d);
                } else {
                    row_to_f16(in + (p - old_len) * row + (size_t)h * d, tmp, d);
                    row_from_f16(tmp, rows + p * d, d);
                }
            }
            rc = cache_plan_make(c, &dst[h], spec, cache_plan_seed(c->seed, layer, kv, h), rows, N);
        }
    }
    free(rows);
    if (rc) {
        free_head_plans(pk, H);
        free_head_plans(pv, H);
        return rc;
    }
    *nk = pk;
    *nv = pv;
    return KVQ_OK;
}

int kvq_cache_append(kvq_cache *c, int layer, const float *k, const float *v, size_t ntok) {
    if (!c) return KVQ_ERR_NULL;
    if (layer < 0 || layer >= c->n_layers) return KVQ_ERR_INVALID_ARG;
    if (ntok == 0) return KVQ_OK;
    if (!k || !v) return KVQ_ERR_NULL;
    cache_layer *L = &c->layers[layer];
    const int H = c->H, d = c->d;
    const size_t row = (size_t)H * d;
    if (ntok > SIZE_MAX / 8 / row || L->len > SIZE_MAX / 4 - ntok) return KVQ_ERR_OVERFLOW;
    const int via_f16 = !L->compressed || L->window > 0 || L->calib_tokens > 0 || L->len < L->sink;
    int rc = check_values(k, ntok * row, via_f16);
    if (!rc) rc = check_values(v, ntok * row, via_f16);
    if (rc) return rc;

    const size_t old_len = L->len, new_len = old_len + ntok, W = L->window;
    /* 1. calibration of per-head plans, when the calibration rows are complete */
    kvq_plan **nk = NULL, **nv = NULL;
    const int calibrate = !L->ready && new_len >= L->calib_tokens;
    if (calibrate && (rc = build_head_plans(c, L, layer, k, v, old_len, &nk, &nv))) return rc;
    const int ready = L->ready || calibrate;
    kvq_plan *const *kh = L->khead ? L->khead : nk, *const *vh = L->vhead ? L->vhead : nv;

    /* 2. the new frontier of the main store and the tail's capacity */
    size_t main_end = L->main_end;
    if (ready) {
        size_t t = new_len > W ? new_len - W : 0;
        if (t > main_end) main_end = t;
    }
    size_t cap = ready ? W : (W > L->calib_tokens ? W : L->calib_tokens);
    uint8_t *ntail = NULL;
    const int new_tail = cap != L->tail_cap;
    if (new_tail && cap && !(ntail = malloc(cap * (size_t)H * 2 * 2 * (size_t)d))) rc = KVQ_ERR_NOMEM;
    /* the sink, with the layer's first token (invisible until main_end moves;
     * a rollback frees it again) */
    uint8_t *nsink = NULL;
    if (!rc && L->sink && !L->sinkbuf && !(L->sinkbuf = nsink = malloc(sink_bytes(c, L)))) rc = KVQ_ERR_NOMEM;

    /* 3. pages, then encode positions [L->main_end, main_end) (those below
     * the sink size are kept f16 in the sink) */
    if (!rc) rc = store_reserve(L, L->main_end > L->sink ? L->main_end : L->sink, main_end);
    uint8_t h16[2 * KVQ_DIM_MAX];
    for (size_t p = L->main_end; p < main_end && p < L->sink && !rc; p++) {
        for (int h = 0; h < H; h++) {
            uint8_t *kd = sink_k(c, L, h, p), *vd = sink_v(c, L, h, p);
            if (p < old_len) { /* leaves the tail */
                memcpy(kd, tail_k(c, L, h, p), 2 * (size_t)d);
                memcpy(vd, tail_v(c, L, h, p), 2 * (size_t)d);
            } else {
                row_to_f16(k + (p - old_len) * row + (size_t)h * d, kd, d);
                row_to_f16(v + (p - old_len) * row + (size_t)h * d, vd, d);
            }
        }
    }
    for (size_t p = L->main_end > L->sink ? L->main_end : L->sink; p < main_end && !rc; p++) {
        uint8_t *page = store_page(L, p);
        const size_t slot = p % L->page_tokens;
        const int src_f16 = W > 0 || (L->calib_tokens && p < L->calib_tokens);
        for (int h = 0; h < H && !rc; h++) {
            const kvq_plan *kp = L->k_per_head ? kh[h] : L->kplan, *vp = L->v_per_head ? vh[h] : L->vplan;
            uint8_t *kd = page_k(c, L, page, h, slot), *vd = page_v(c, L, page, h, slot);
            if (p < old_len) { /* leaves the tail */
                rc = kvq_encode(kp, tail_k(c, L, h, p), KVQ_DTYPE_F16, 1, kd);
                if (!rc) rc = kvq_encode(vp, tail_v(c, L, h, p), KVQ_DTYPE_F16, 1, vd);
            } else {
                const float *kx = k + (p - old_len) * row + (size_t)h * d, *vx = v + (p - old_len) * row + (size_t)h * d;
                if (src_f16) {
                    row_to_f16(kx, h16, d);
                    rc = kvq_encode(kp, h16, KVQ_DTYPE_F16, 1, kd);
                    row_to_f16(vx, h16, d);
                    if (!rc) rc = kvq_encode(vp, h16, KVQ_DTYPE_F16, 1, vd);
                } else {
                    rc = kvq_encode(kp, kx, KVQ_DTYPE_F32, 1, kd);
                    if (!rc) rc = kvq_encode(vp, vx, KVQ_DTYPE_F32, 1, vd);
                }
            }
        }
    }
    if (rc) { /* roll back: nothing visible has changed */
        store_trim(L, L->main_end);
        free(ntail);
        if (nsink) {
            free(nsink);
            L->sinkbuf = NULL;
        }
        free_head_plans(nk, H);
        free_head_plans(nv, H);
        return rc;
    }

    /* 4. commit */
    if (calibrate) {
        L->khead = nk;
        L->vhead = nv;
        L->ready = 1;
    }
    if (new_tail) {
        uint8_t *old = L->tail;
        size_t old_cap = L->tail_cap;
        L->tail = ntail;
        L->tail_cap = cap;
        for (size_t p = main_end; p < old_len; p++) { /* survivors of the old ring */
            for (int h = 0; h < H; h++) {
                size_t os = p % old_cap, rb = 2 * (size_t)d;
                memcpy(tail_k(c, L, h, p), old + ((size_t)h * old_cap + os) * rb, rb);
                memcpy(tail_v(c, L, h, p), old + ((size_t)(H + h) * old_cap + os) * rb, rb);
            }
        }
        free(old);
    }
    for (size_t p = main_end > old_len ? main_end : old_len; p < new_len; p++) {
        for (int h = 0; h < H; h++) {
            row_to_f16(k + (p - old_len) * row + (size_t)h * d, tail_k(c, L, h, p), d);
            row_to_f16(v + (p - old_len) * row + (size_t)h * d, tail_v(c, L, h, p), d);
        }
    }
    L->main_end = main_end;
    L->len = new_len;
    /* queries from now on are at positions >= old_len: a sliding layer can
     * drop what they cannot see */
    if (L->sliding && old_len + 1 > (size_t)L->sliding) store_evict(L, old_len + 1 - (size_t)L->sliding);
    return KVQ_OK;
}
