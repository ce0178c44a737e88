/*
 * Memory planning: the K/V bytes a cache's configuration holds after n
 * tokens, computed from the configuration alone with the same page, spare
 * and ring rules as store.c / append.c (tests/test_cache_memplan.c checks
 * the two agree on real appends).
 *
 * Per layer, from an empty cache, appending ntok tokens does:
 *   ready     = ready || len + ntok >= calib_tokens        (+outliers plans)
 *   main_end  = max(main_end, len + ntok - W)  when ready   (W: f16 window)
 *   pages     exist for main-store positions [first_page * P, main_end),
 *             new ones taken from the spares first
 *   tail_cap  = ready ? W : max(W, calib_tokens)
 *   sliding layers then drop whole pages below len_old + 1 - Wl (at most
 *   CACHE_MAX_SPARE of them kept as spares)
 *   bytes     = (pages + spares) * page_bytes + tail_cap * H * 2 * 2 * d
 * Global layers only grow, so their state after n tokens does not depend on
 * the batches; sliding layers are simulated batch by batch.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

typedef struct {
    size_t n_pages, first_page, main_end, len, tail_cap;
    int n_spare, ready;
} sim_layer;

/* One append of ntok tokens to the simulated layer (mirrors kvq_cache_append). */
static void sim_append(const cache_layer *L, sim_layer *s, size_t ntok) {
    const size_t P = L->page_tokens, W = L->window, old_len = s->len, new_len = old_len + ntok;
    const int ready = s->ready || new_len >= L->calib_tokens;
    size_t main_end = s->main_end;
    if (ready) {
        size_t t = new_len > W ? new_len - W : 0;
        if (t > main_end) main_end = t;
    }
    if (main_end > s->main_end) { /* store_reserve(main_end_old, main_end) */
        size_t first = s->main_end / P, last = (main_end - 1) / P;
        if (s->n_pages == 0) s->first_page = first;
        size_t need = last + 1 - s->first_page;
        if (need > s->n_pages) { /* new pages come from the spares first */
            size_t fresh = need - s->n_pages, reuse = fresh < (size_t)s->n_spare ? fresh : (size_t)s->n_spare;
            s->n_spare -= (int)reuse;
            s->n_pages = need;
        }
    }
    s->tail_cap = ready ? W : (W > L->calib_tokens ? W : L->calib_tokens);
    s->main_end = main_end;
    s->len = new_len;
    s->ready = ready;
    if (L->sliding && old_len + 1 > (size_t)L->sliding) { /* store_evict */
        /* pages first_page + i with (first_page + i + 1) * P <= pos */
        size_t pos = old_len + 1 - (size_t)L->sliding, below = pos / P;
        size_t drop = below > s->first_page ? below - s->first_page : 0;
        if (drop > s->n_pages) drop = s->n_pages;
        size_t keep = (size_t)(CACHE_MAX_SPARE - s->n_spare);
        s->n_spare += (int)(drop < keep ? drop : keep);
        s->n_pages -= drop;
        s->first_page += drop;
    }
}

/* Bytes of a simulated layer; SIZE_MAX on overflow. */
static size_t sim_bytes(const kvq_cache *c, const cache_layer *L, const sim_layer *s) {
    const size_t pages = s->n_pages + (size_t)s->n_spare, rec = (size_t)c->H * 4 * (size_t)c->d;
    if (pages && L->page_bytes > SIZE_MAX / 2 / pages) return SIZE_MAX;
    if (s->tail_cap && rec > SIZE_MAX / 2 / s->tail_cap) return SIZE_MAX;
    return pages * L->page_bytes + s->tail_cap * rec;
}

/* Global layer after n tokens (any batching): closed form. */
static void global_state(const cache_layer *L, size_t n, sim_layer *s) {
    memset(s, 0, sizeof *s);
    s->len = n;
    s->ready = n >= L->calib_tokens;
    if (n == 0) s->ready = L->calib_tokens == 0;
    const size_t W = L->window;
    s->main_end = s->ready && n > W ? n - W : 0;
    s->n_pages = (s->main_end + L->page_tokens - 1) / L->page_tokens;
    if (n > 0) s->tail_cap = s->ready ? W : (W > L->calib_tokens ? W : L->calib_tokens);
}

static int add(size_t *acc, size_t b) {
    if (b == SIZE_MAX || *acc > SIZE_MAX - b) return KVQ_ERR_OVERFLOW;
    *acc += b;
    return KVQ_OK;
}

int kvq_cache_memory_plan(const kvq_cache *c, size_t n_tokens, size_t batch, size_t *at, size_t *peak) {
    if (!c || !at) return KVQ_ERR_NULL;
    if (batch == 0 || batch > n_tokens) batch = n_tokens ? n_tokens : 1;
    /* global layers: monotonic, so their share of the peak is their final state */
    size_t global = 0;
    int n_sliding = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const cache_layer *L = &c->layers[l];
        if (L->sliding) { n_sliding++; continue; }
        sim_layer s;
        global_state(L, n_tokens, &s);
        if (add(&global, sim_bytes(c, L, &s))) return KVQ_ERR_OVERFLOW;
    }
    if (!n_sliding) {
        *at = global;
        if (peak) *peak = global;
        return KVQ_OK;
    }
    /* sliding layers: simulated append by append; the peak adds the global
     * layers' bytes at that point (which never exceed their final bytes) */
    sim_layer *sim = calloc((size_t)n_sliding, sizeof *sim);
    const cache_layer **sl = calloc((size_t)n_sliding, sizeof *sl);
    if (!sim || !sl) { free(sim); free(sl); return KVQ_ERR_NOMEM; }
    int j = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layers[l].sliding) {
            sl[j] = &c->layers[l];
            sim[j].ready = sl[j]->calib_tokens == 0;
            j++;
        }
    size_t best = 0, last = 0, done = 0;
    int rc = KVQ_OK;
    while (done < n_tokens && !rc) {
        size_t ntok = n_tokens - done < batch ? n_tokens - done : batch;
        done += ntok;
        size_t now = 0;
        for (int i = 0; i < n_sliding && !rc; i++) {
            sim_append(sl[i], &sim[i], ntok);
            rc = add(&now, sim_bytes(c, sl[i], &sim[i]));
        }
        if (!rc && peak) { /* global layers at `done` tokens */
            for (int l = 0; l < c->n_layers && !rc; l++) {
                const cache_layer *L = &c->layers[l];
                if (L->sliding) continue;
                sim_layer s;
                global_state(L, done, &s);
                rc = add(&now, sim_bytes(c, L, &s));
            }
            if (!rc && now > best) best = now;
        }
        last = now;
    }
    free(sim);
    free(sl);
    if (rc) return rc;
    if (peak) { /* `last` included the global layers */
        *at = last;
        *peak = best;
    } else {
        size_t t = last;
        if (add(&t, global)) return KVQ_ERR_OVERFLOW;
        *at = t;
    }
    if (n_tokens == 0) {
        *at = global;
        if (peak) *peak = global;
    }
    return KVQ_OK;
}
