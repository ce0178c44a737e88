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
#include <stdatomic.h>
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

/*
 * Encoding of main-store positions [p0, p1) over the pool: one task per
 * (chunk of positions, head, K or V), each row encoded exactly as a serial
 * loop would (plans are read-only, every task writes its own records), so
 * the records do not depend on the pool. On failure the error is that of
 * the first failing row in the serial order (position, head, K then V):
 * each task stops at its first failing row and the least (row, code) key
 * wins, whatever the schedule.
 */
#define ENC_CHUNK 16 /* positions per task */

typedef struct {
    const kvq_cache *c;
    const cache_layer *L;
    const float *k, *v;
    size_t old_len, p0, p1;
    kvq_plan *const *kh, *const *vh;
    _Atomic uint64_t err; /* least (row key << 16 | -rc) of a failed row, UINT64_MAX if none */
} enc_job;

static void enc_fail(enc_job *J, uint64_t key, int rc) {
    const uint64_t e = key << 16 | (uint16_t)-rc;
    uint64_t cur = atomic_load(&J->err);
    while (e < cur && !atomic_compare_exchange_weak(&J->err, &cur, e)) {
    }
}

static void enc_task(void *arg, int task, int thread) {
    (void)thread;
    enc_job *J = arg;
    const kvq_cache *c = J->c;
    const cache_layer *L = J->L;
    const int H = c->H, d = c->d, kv = task % 2, h = task / 2 % H;
    const size_t row = (size_t)H * d, W = L->window, a = J->p0 + (size_t)(task / 2 / H) * ENC_CHUNK;
    const size_t b = a + ENC_CHUNK < J->p1 ? a + ENC_CHUNK : J->p1;
    const kvq_plan *pl = kv ? (L->v_per_head ? J->vh[h] : L->vplan) : (L->k_per_head ? J->kh[h] : L->kplan);
    const float *in = kv ? J->v : J->k;
    uint8_t h16[2 * KVQ_DIM_MAX];
    for (size_t p = a; p < b; p++) {
        uint8_t *page = store_page(L, p);
        const size_t slot = p % L->page_tokens;
        uint8_t *dst = kv ? page_v(c, L, page, h, slot) : page_k(c, L, page, h, slot);
        int rc;
        if (p < J->old_len) { /* leaves the tail */
            rc = kvq_encode(pl, kv ? tail_v(c, L, h, p) : tail_k(c, L, h, p), KVQ_DTYPE_F16, 1, dst);
        } else {
            const float *x = in + (p - J->old_len) * row + (size_t)h * d;
            if (W > 0 || (L->calib_tokens && p < L->calib_tokens)) { /* stored from its f16 value */
                row_to_f16(x, h16, d);
                rc = kvq_encode(pl, h16, KVQ_DTYPE_F16, 1, dst);
            } else {
                rc = kvq_encode(pl, x, KVQ_DTYPE_F32, 1, dst);
            }
        }
        if (rc) {
            enc_fail(J, ((p - J->p0) * (size_t)H + (size_t)h) * 2 + (size_t)kv, rc);
            return;
        }
    }
}

static int encode_main(const kvq_cache *c, const cache_layer *L, const float *k, const float *v, size_t old_len,
                       size_t p0, size_t p1, kvq_plan *const *kh, kvq_plan *const *vh, kvq_pool *pool) {
    enc_job J = {c, L, k, v, old_len, p0, p1, kh, vh, 0};
    atomic_init(&J.err, UINT64_MAX);
    const size_t nchunk = (p1 - p0 + ENC_CHUNK - 1) / ENC_CHUNK;
    if (nchunk > (size_t)0x7fffffff / 2 / (size_t)c->H) return KVQ_ERR_OVERFLOW;
    int rc = kvq_pool_run(pool, enc_task, &J, (int)(nchunk * 2 * (size_t)c->H));
    if (rc) return rc;
    const uint64_t e = atomic_load(&J.err);
    return e == UINT64_MAX ? KVQ_OK : -(int)(e & 0xffff);
}

int kvq_cache_append(kvq_cache *c, int layer, const float *k, const float *v, size_t ntok) {
    return kvq_cache_append_pool(c, layer, k, v, ntok, NULL);
}

int kvq_cache_append_pool(kvq_cache *c, int layer, const float *k, const float *v, size_t ntok, kvq_pool *pool) {
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
    if (!rc) {
        const size_t e0 = L->main_end > L->sink ? L->main_end : L->sink;
        if (e0 < main_end) rc = encode_main(c, L, k, v, old_len, e0, main_end, kh, vh, pool);
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
