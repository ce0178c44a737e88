/*
 * Memory planning: the K/V bytes a cache's configuration holds after n
 * tokens, computed from the configuration alone with the same page, spare
 * and ring rules as store.c / append.c (tests/test_cache_memplan.c checks
 * the two agree on real appends, and this against the step-by-step
 * simulation below on random configurations).
 *
 * Per layer, from an empty cache, appending ntok tokens does:
 *   ready     = ready || len + ntok >= calib_tokens        (+outliers plans)
 *   main_end  = max(main_end, len + ntok - W)  when ready   (W: f16 window)
 *   pages     exist for main-store positions [first_page * P, main_end),
 *             from the page of position S on (positions below S, policy
 *             sink=S, are in the f16 sink), new ones taken from the spares first
 *   tail_cap  = ready ? W : max(W, calib_tokens)
 *   sliding layers then drop whole pages below len_old + 1 - Wl (at most
 *   CACHE_MAX_SPARE of them kept as spares)
 *   bytes     = (pages + spares) * page_bytes + tail_cap * H * 2 * 2 * d
 *             + (len > 0 ? S * H * 2 * 2 * d : 0)
 *
 * Global layers only grow, so their state after n tokens does not depend on
 * the batches: closed form. A sliding layer, appended to in batches of b:
 *  - until its first page is dropped (step k_d, known in closed form) it is
 *    in the state of a global layer of the same length;
 *  - from then on its transition commutes with a shift of every position by
 *    P (len, main_end += P, first_page += 1): it is ready, longer than W and
 *    than its window, and holds at least one page. Its state relative to
 *    first_page * P therefore takes finitely many values and becomes
 *    periodic, in practice within a few windows' worth of pages: it is
 *    simulated until a relative state repeats (Brent's cycle detection),
 *    and any later step is a stored state shifted by whole periods.
 * The peak is the largest total over the steps: between breakpoints (the
 * calibration step, each sliding class's k_d and cycle start) every layer's
 * bytes are either nondecreasing (global-like) or periodic, so the largest
 * value of an interval lies in its last lcm(periods) steps (an interval
 * holding a pre-periodic stretch is evaluated step by step; such stretches
 * are short). Cost: O(layers x (windows / P + periods)) instead of
 * O(layers x n / b); layers with the same geometry are counted once.
 * The appends kvq_cache_append refuses (a batch or a length beyond its
 * KVQ_ERR_OVERFLOW limits) give KVQ_ERR_OVERFLOW here too.
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
    const size_t from = s->main_end > L->sink ? s->main_end : L->sink; /* below S: the sink */
    if (main_end > from) { /* store_reserve(max(main_end_old, S), main_end) */
        size_t first = from / P, last = (main_end - 1) / P;
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
    /* the sink exists from the first token on (S <= KVQ_SINK_MAX: no overflow) */
    return pages * L->page_bytes + s->tail_cap * rec + (s->len ? sink_bytes(c, L) : 0);
}

/* Global layer after n tokens (any batching): closed form. */
static void global_state(const cache_layer *L, size_t n, sim_layer *s) {
    memset(s, 0, sizeof *s);
    s->len = n;
    s->ready = n >= L->calib_tokens;
    if (n == 0) s->ready = L->calib_tokens == 0;
    const size_t W = L->window;
    s->main_end = s->ready && n > W ? n - W : 0;
    if (s->main_end > L->sink) { /* pages from the one holding position S on */
        s->first_page = L->sink / L->page_tokens;
        s->n_pages = (s->main_end + L->page_tokens - 1) / L->page_tokens - s->first_page;
    }
    if (n > 0) s->tail_cap = s->ready ? W : (W > L->calib_tokens ? W : L->calib_tokens);
}

static int add(size_t *acc, size_t b) {
    if (b == SIZE_MAX || *acc > SIZE_MAX - b) return KVQ_ERR_OVERFLOW;
    *acc += b;
    return KVQ_OK;
}

/* acc += count * b */
static int add_n(size_t *acc, size_t count, size_t b) {
    if (b == SIZE_MAX || (b && count > SIZE_MAX / b)) return KVQ_ERR_OVERFLOW;
    return add(acc, count * b);
}

/* The limits of kvq_cache_append (KVQ_ERR_OVERFLOW) for n tokens in batches of b. */
static int append_limits(const kvq_cache *c, size_t n, size_t b) {
    const size_t row = (size_t)c->H * (size_t)c->d;
    if (n > SIZE_MAX / 4 || b > SIZE_MAX / 8 / row) return KVQ_ERR_OVERFLOW;
    return KVQ_OK;
}

/* ---- the step-by-step simulation (reference; O(layers x n / batch)) -------- */
int cache_memory_plan_sim(const kvq_cache *c, size_t n_tokens, size_t batch, size_t *at, size_t *peak) {
    if (!c || !at) return KVQ_ERR_NULL;
    if (batch == 0 || batch > n_tokens) batch = n_tokens ? n_tokens : 1;
    if (n_tokens && append_limits(c, n_tokens, batch)) return KVQ_ERR_OVERFLOW;
    sim_layer *sim = calloc((size_t)c->n_layers, sizeof *sim);
    if (!sim) return KVQ_ERR_NOMEM;
    for (int l = 0; l < c->n_layers; l++) sim[l].ready = c->layers[l].calib_tokens == 0;
    size_t best = 0, last = 0, done = 0;
    int rc = KVQ_OK;
    while (done < n_tokens && !rc) {
        size_t ntok = n_tokens - done < batch ? n_tokens - done : batch, now = 0;
        done += ntok;
        for (int l = 0; l < c->n_layers && !rc; l++) {
            sim_append(&c->layers[l], &sim[l], ntok);
            rc = add(&now, sim_bytes(c, &c->layers[l], &sim[l]));
        }
        if (now > best) best = now;
        last = now;
    }
    free(sim);
    if (rc) return rc;
    *at = last;
    if (peak) *peak = best;
    return KVQ_OK;
}

/* ---- closed form + periodic extrapolation ---------------------------------- */
#define TRAJ_MAX_STEPS 65536 /* states stored per sliding class before giving up (never reached in practice) */

/* Layers of one geometry (everything sim_append and sim_bytes read). */
typedef struct {
    const cache_layer *L;
    size_t count;
    /* sliding classes: full steps k (1-based, batches of b) */
    size_t k_d;       /* first step whose state is not the global-like closed form */
    size_t k_t, lam;  /* from step k_t the state repeats every lam steps, shifted by `shift` pages (lam 0: none) */
    size_t shift;
    sim_layer *tab;   /* states of steps k_d, k_d + 1, ... */
    size_t n_tab;
} layer_class;

static int same_geometry(const cache_layer *a, const cache_layer *b) {
    return a->sliding == b->sliding && a->window == b->window && a->calib_tokens == b->calib_tokens && a->sink == b->sink &&
           a->page_tokens == b->page_tokens && a->page_bytes == b->page_bytes;
}

/* Equal states up to a shift of whole pages (both taken after k_d). */
static int same_relative(const cache_layer *L, const sim_layer *a, const sim_layer *b) {
    const size_t P = L->page_tokens;
    if (!a->n_pages || !b->n_pages) return 0; /* the shift argument needs a page */
    return a->n_pages == b->n_pages && a->n_spare == b->n_spare && a->tail_cap == b->tail_cap &&
           a->ready == b->ready && a->len - a->first_page * P == b->len - b->first_page * P &&
           a->main_end - a->first_page * P == b->main_end - b->first_page * P;
}

static size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

/*
 * Trajectory of a sliding class over full steps 1..K of b tokens: k_d, the
 * stored states and the period. KVQ_ERR_UNSUPPORTED if no period shows
 * within TRAJ_MAX_STEPS (the caller then simulates step by step).
 */
static int class_trajectory(layer_class *C, size_t K, size_t b) {
    const cache_layer *L = C->L;
    const size_t P = L->page_tokens;
    size_t k1 = 1 + ceil_div((size_t)L->sliding + P - 1, b); /* (k-1) b + 1 >= sliding + P: a page below the window */
    size_t k2 = L->calib_tokens ? ceil_div(L->calib_tokens, b) : 1; /* ready */
    size_t k3 = L->window / b + 1;                                  /* k b > W: the main store holds a position */
    C->k_d = k1 > k2 ? k1 : k2;
    if (k3 > C->k_d) C->k_d = k3;
    C->lam = 0;
    C->n_tab = 0;
    if (C->k_d > K) return KVQ_OK;
    size_t cap = 64;
    C->tab = malloc(cap * sizeof *C->tab);
    if (!C->tab) return KVQ_ERR_NOMEM;
    sim_layer s;
    global_state(L, (C->k_d - 1) * b, &s);
    sim_append(L, &s, b);
    C->tab[C->n_tab++] = s;
    /* Brent: tortoise t, hare h = t + lam */
    size_t t = 0, power = 1, lam = 1;
    for (;;) {
        if (C->k_d + C->n_tab - 1 >= K) return KVQ_OK; /* every step up to K is stored */
        if (C->n_tab == TRAJ_MAX_STEPS) return KVQ_ERR_UNSUPPORTED;
        if (C->n_tab == cap) {
            sim_layer *nt = realloc(C->tab, 2 * cap * sizeof *nt);
            if (!nt) return KVQ_ERR_NOMEM;
            C->tab = nt;
            cap *= 2;
        }
        sim_append(L, &s, b);
        C->tab[C->n_tab++] = s;
        size_t h = C->n_tab - 1;
        if (same_relative(L, &C->tab[t], &C->tab[h])) {
            C->k_t = C->k_d + t;
            C->lam = lam;
            C->shift = C->tab[h].first_page - C->tab[t].first_page;
            C->n_tab = h; /* states k_d .. k_t + lam - 1 */
            return KVQ_OK;
        }
        if (power == lam) {
            t = h;
            power *= 2;
            lam = 0;
        }
        lam++;
    }
}

/* State of a class after full step k (1 <= k <= K). */
static void class_state(const layer_class *C, size_t k, size_t b, sim_layer *s) {
    if (!C->L->sliding || k < C->k_d) {
        global_state(C->L, k * b, s);
        return;
    }
    if (!C->lam || k < C->k_t + C->lam) {
        *s = C->tab[k - C->k_d];
        return;
    }
    const size_t m = (k - C->k_t) / C->lam, j = (k - C->k_t) % C->lam, P = C->L->page_tokens;
    *s = C->tab[C->k_t - C->k_d + j];
    s->first_page += m * C->shift;
    s->len += m * C->shift * P;
    s->main_end += m * C->shift * P;
}

/* Total bytes after full step k. */
static int total_at(const kvq_cache *c, const layer_class *cls, int ncls, size_t k, size_t b, size_t *out) {
    size_t t = 0;
    for (int i = 0; i < ncls; i++) {
        sim_layer s;
        class_state(&cls[i], k, b, &s);
        if (add_n(&t, cls[i].count, sim_bytes(c, cls[i].L, &s))) return KVQ_ERR_OVERFLOW;
    }
    *out = t;
    return KVQ_OK;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static size_t gcd(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Largest total over full steps 1..K. */
static int peak_over_steps(const kvq_cache *c, const layer_class *cls, int ncls, size_t K, size_t b, size_t *best) {
    size_t *bp = malloc(sizeof *bp * (3 * (size_t)ncls + 2));
    if (!bp) return KVQ_ERR_NOMEM;
    size_t nb = 0;
    bp[nb++] = 1;
    bp[nb++] = K + 1;
    for (int i = 0; i < ncls; i++) {
        const layer_class *C = &cls[i];
        if (C->L->calib_tokens) bp[nb++] = ceil_div(C->L->calib_tokens, b); /* ready: the tail shrinks */
        if (C->L->sliding) {
            bp[nb++] = C->k_d;
            bp[nb++] = C->lam ? C->k_t : C->k_d + C->n_tab;
        }
    }
    qsort(bp, nb, sizeof *bp, cmp_size);
    int rc = KVQ_OK;
    *best = 0;
    for (size_t i = 0; i + 1 < nb && !rc; i++) {
        size_t a = bp[i] < 1 ? 1 : bp[i], e = bp[i + 1] > K + 1 ? K + 1 : bp[i + 1];
        if (a >= e) continue;
        /* every class in [a, e): global-like (nondecreasing), stored (evaluate all) or periodic */
        size_t span = 1;
        int all = 0;
        for (int j = 0; j < ncls && !all; j++) {
            const layer_class *C = &cls[j];
            if (!C->L->sliding || e <= C->k_d) continue;
            if (!C->lam || a < C->k_t) { all = 1; break; }
            size_t g = gcd(span, C->lam);
            if (span / g > (e - a) / C->lam) { all = 1; break; } /* lcm beyond the interval */
            span = span / g * C->lam;
        }
        size_t from = all || e - a <= span ? a : e - span;
        for (size_t k = from; k < e && !rc; k++) {
            size_t t;
            rc = total_at(c, cls, ncls, k, b, &t);
            if (!rc && t > *best) *best = t;
        }
    }
    free(bp);
    return rc;
}

int kvq_cache_memory_plan(const kvq_cache *c, size_t n_tokens, size_t batch, size_t *at, size_t *peak) {
    if (!c || !at) return KVQ_ERR_NULL;
    if (n_tokens == 0) {
        *at = 0;
        if (peak) *peak = 0;
        return KVQ_OK;
    }
    if (batch == 0 || batch > n_tokens) batch = n_tokens;
    if (append_limits(c, n_tokens, batch)) return KVQ_ERR_OVERFLOW;
    layer_class *cls = calloc((size_t)c->n_layers, sizeof *cls);
    if (!cls) return KVQ_ERR_NOMEM;
    int ncls = 0, rc = KVQ_OK;
    for (int l = 0; l < c->n_layers; l++) {
        int j = 0;
        while (j < ncls && !same_geometry(cls[j].L, &c->layers[l])) j++;
        if (j == ncls) cls[ncls++].L = &c->layers[l];
        cls[j].count++;
    }
    const size_t K = n_tokens / batch, rem = n_tokens % batch; /* full steps, then one of rem tokens */
    for (int i = 0; i < ncls && !rc; i++)
        if (cls[i].L->sliding) rc = class_trajectory(&cls[i], K, batch);
    size_t total = 0, best = 0;
    if (!rc) { /* after the last append: global layers closed form, sliding ones from step K */
        for (int i = 0; i < ncls && !rc; i++) {
            sim_layer s;
            if (!cls[i].L->sliding) global_state(cls[i].L, n_tokens, &s);
            else if (K == 0) {
                memset(&s, 0, sizeof s);
                s.ready = cls[i].L->calib_tokens == 0;
            } else {
                class_state(&cls[i], K, batch, &s);
            }
            if (cls[i].L->sliding && rem) sim_append(cls[i].L, &s, rem);
            rc = add_n(&total, cls[i].count, sim_bytes(c, cls[i].L, &s));
        }
    }
    if (!rc && peak) {
        rc = peak_over_steps(c, cls, ncls, K, batch, &best);
        if (total > best) best = total;
    }
    for (int i = 0; i < ncls; i++) free(cls[i].tab);
    free(cls);
    if (rc == KVQ_ERR_UNSUPPORTED) return cache_memory_plan_sim(c, n_tokens, batch, at, peak);
    if (rc) return rc;
    *at = total;
    if (peak) *peak = best;
    return KVQ_OK;
}
