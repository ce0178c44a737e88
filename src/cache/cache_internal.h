/*
 * Internal structures of the KV cache (docs/CACHE.md).
 *
 * Per layer, all KV heads live in one paged store:
 *   - the main store: pages of P tokens; a page holds, for K then V, per KV
 *     head a contiguous run of P records of the layer's method
 *       K record (head h, slot s): page + (h * P + s) * kb
 *       V record (head h, slot s): page + H * P * kb + (h * P + s) * vb
 *     so a (page, head) pair is one kvq_score / kvq_accumulate call;
 *   - the f16 tail: a ring of f16 records for the newest positions (the f16
 *     window, and the first tokens of a layer whose +outliers plans are not
 *     calibrated yet), position p at slot p % tail_cap
 *       K (h, slot): tail + (h * cap + slot) * 2d,  V: after the H * cap K records;
 *   - the f16 sink: the first S positions (policy sink=S, global compressed
 *     layers), kept f16 for good instead of being encoded when they leave
 *     the tail; position p < S at
 *       K (h, p): sink + (h * S + p) * 2d,  V: after the H * S K records.
 * Positions [base, main_end) are in the main store (those below S in the
 * sink), [main_end, len) in the tail. Sliding-window layers free main-store pages that no future query can
 * see (base grows), which makes their page table a ring of pages.
 */
#ifndef KVQ_CACHE_INTERNAL_H
#define KVQ_CACHE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

#define CACHE_PAGE_TOKENS 256         /* page size of global layers */
#define CACHE_SLIDING_PAGE_TOKENS 64  /* page size of sliding-window layers (less slack) */
#define CACHE_BLOCK_TOKENS 256        /* most tokens scored by one kvq_score call */
#define CACHE_CHUNK_TOKENS 2048       /* split-K chunk of the context */
#define CACHE_TASK_ROWS 64            /* query rows (tokens x heads of a group) per task */
#define CACHE_MAX_SPARE 2             /* recycled pages kept per layer */
#define CACHE_DEFAULT_CALIB 128       /* default outlier_calib_tokens */

enum { DOM_MAIN = 0, DOM_F16 = 1 }; /* accumulator domains */

typedef struct cache_layer {
    int sliding;         /* local-attention window in tokens, 0 = global */
    int compressed;      /* the main store uses the policy's methods (else f16) */
    size_t window;       /* effective f16 window W (0 if the layer is f16) */
    size_t calib_tokens; /* > 0: per-head +outliers plans built from the first calib_tokens tokens */
    size_t sink;         /* S: positions [0, S) go to the f16 sink instead of the main store */
    int ready;           /* main-store plans exist (always, unless waiting for calibration) */
    size_t page_tokens;  /* P */
    size_t kb, vb;       /* record bytes in the main store */
    size_t page_bytes;   /* H * P * (kb + vb) */
    kvq_plan *kplan, *vplan;   /* plans shared by the layer's heads (NULL when per head) */
    kvq_plan **khead, **vhead; /* per-head plans (+outliers), NULL until calibrated */
    int k_per_head, v_per_head;
    /* main store */
    uint8_t **pages;     /* pages[i] holds positions [(first_page + i) * P, ...) */
    size_t n_pages, cap_pages, first_page;
    uint8_t *spare[CACHE_MAX_SPARE];
    int n_spare;
    size_t base;         /* first position held */
    size_t main_end;     /* the main store holds [base, main_end) */
    uint8_t *sinkbuf;    /* the f16 sink (H * S * 2 records of 2d bytes), allocated with the first token */
    /* f16 tail */
    uint8_t *tail;
    size_t tail_cap;     /* tokens */
    size_t len;          /* tokens held: positions [0, len) were appended */
} cache_layer;

struct kvq_cache {
    int n_layers, H, d;
    size_t window;            /* cfg f16_window */
    size_t calib_tokens;      /* cfg outlier_calib_tokens (resolved) */
    size_t sink;              /* cfg sink_tokens */
    int k_calib, v_calib;     /* K / V spec needs calibration */
    int reference;            /* scalar reference kernels */
    kvq_isa isa;              /* ISA of the cache's own kernels (softmax) */
    uint64_t seed;
    char kspec[80], vspec[80];
    kvq_plan *f16;            /* shared f16 plan: tails and f16 layers */
    cache_layer *layers;
    /* attention workspace, grown on demand (one attend call at a time) */
    float *ws;
    size_t ws_floats;
};

/* A contiguous run of records of one head: positions [pos, pos + n). */
typedef struct cache_seg {
    size_t pos, n;
    const uint8_t *k, *v;
    const kvq_plan *kp, *vp;
    int dom;
} cache_seg;

/* ---- plans (cache.c) ---------------------------------------------------- */
static inline const kvq_plan *layer_kplan(const cache_layer *L, int h) { return L->k_per_head ? (L->khead ? L->khead[h] : NULL) : L->kplan; }
static inline const kvq_plan *layer_vplan(const cache_layer *L, int h) { return L->v_per_head ? (L->vhead ? L->vhead[h] : NULL) : L->vplan; }
/* Seed of the plan of (layer, kv = 0 K / 1 V, head; head -1: shared by the layer). */
uint64_t cache_plan_seed(uint64_t seed, int layer, int kv, int head);
/* Creates a plan (cloned to scalar kernels for a reference cache). */
int cache_plan_make(const kvq_cache *c, kvq_plan **out, const char *spec, uint64_t seed, const float *calib, size_t n);

/* ---- storage (store.c) -------------------------------------------------- */
static inline uint8_t *page_k(const kvq_cache *c, const cache_layer *L, uint8_t *page, int h, size_t slot) {
    (void)c;
    return page + ((size_t)h * L->page_tokens + slot) * L->kb;
}
static inline uint8_t *page_v(const kvq_cache *c, const cache_layer *L, uint8_t *page, int h, size_t slot) {
    return page + (size_t)c->H * L->page_tokens * L->kb + ((size_t)h * L->page_tokens + slot) * L->vb;
}
static inline uint8_t *tail_k(const kvq_cache *c, const cache_layer *L, int h, size_t pos) {
    return L->tail + ((size_t)h * L->tail_cap + pos % L->tail_cap) * 2 * (size_t)c->d;
}
static inline uint8_t *tail_v(const kvq_cache *c, const cache_layer *L, int h, size_t pos) {
    return L->tail + ((size_t)(c->H + h) * L->tail_cap + pos % L->tail_cap) * 2 * (size_t)c->d;
}
static inline uint8_t *sink_k(const kvq_cache *c, const cache_layer *L, int h, size_t pos) {
    return L->sinkbuf + ((size_t)h * L->sink + pos) * 2 * (size_t)c->d;
}
static inline uint8_t *sink_v(const kvq_cache *c, const cache_layer *L, int h, size_t pos) {
    return L->sinkbuf + ((size_t)(c->H + h) * L->sink + pos) * 2 * (size_t)c->d;
}
/* Bytes of a layer's f16 sink. */
static inline size_t sink_bytes(const kvq_cache *c, const cache_layer *L) { return L->sink * (size_t)c->H * 4 * (size_t)c->d; }
/* Page holding main-store position pos (which must be in [base, main_end) or being written). */
static inline uint8_t *store_page(const cache_layer *L, size_t pos) { return L->pages[pos / L->page_tokens - L->first_page]; }

/* Makes pages exist for positions [from, to) of the main store (from >= base,
 * pages appended in order). KVQ_ERR_NOMEM leaves the table as it was. */
int store_reserve(cache_layer *L, size_t from, size_t to);
/* Frees the pages holding no position below `end` (after a rollback or truncate). */
void store_trim(cache_layer *L, size_t end);
/* Drops main-store positions below `pos` (sliding layers); whole pages go to the spares. */
void store_evict(cache_layer *L, size_t pos);
/* Frees every page and spare. */
void store_release(cache_layer *L);
/* Bytes held by a layer's K/V data (pages, spares, sink, tail). */
size_t store_bytes(const kvq_cache *c, const cache_layer *L);
/*
 * The longest run of records of head h starting at position a (base <= a < b
 * <= len) that is contiguous in memory and ends at or before b.
 */
void store_segment(const kvq_cache *c, const cache_layer *L, int h, size_t a, size_t b, cache_seg *s);

/* ---- online softmax (softmax.c, softmax_x86.c) -------------------------- */
/*
 * One online-softmax step over a block of logits s[0..n) of one query row
 * (masked entries are -INFINITY): with M = max(*m, max s), replaces s by
 * exp(s - M), sets *l = *l * exp(*m - M) + sum exp(s - M), *m = M, and
 * returns exp(m_old - M), the factor earlier partial sums must be scaled by.
 * A block with no finite logit leaves *m, *l unchanged, zeroes s, returns 1.
 */
float softmax_block(float *s, size_t n, float *m, float *l, kvq_isa isa);
float softmax_block_ref(float *s, size_t n, float *m, float *l);
float softmax_block_avx2(float *s, size_t n, float *m, float *l);
float softmax_block_avx512(float *s, size_t n, float *m, float *l);
/* y[i] = exp(x[i]) for x <= 0 (SIMD polynomial; -inf and x < -87 give 0). */
void vexp_avx2(const float *x, float *y, size_t n);
void vexp_avx512(const float *x, float *y, size_t n);
/* y[i] *= a (n floats). */
void vscale(float *y, size_t n, float a, kvq_isa isa);

/* ---- test hooks --------------------------------------------------------- */
/*
 * Locates the stored K and V records of (layer, head, pos): pointers to the
 * records and the plans that decode them. KVQ_ERR_INVALID_ARG if the
 * position is not held (beyond len, or evicted from a sliding window).
 */
int cache_locate(const kvq_cache *c, int layer, int head, size_t pos, const uint8_t **k, const kvq_plan **kp,
                 const uint8_t **v, const kvq_plan **vp);
/*
 * kvq_cache_memory_plan by simulating every append (O(layers x n / batch)):
 * the reference tests/test_cache_memplan.c compares the closed form with.
 */
int cache_memory_plan_sim(const kvq_cache *c, size_t n_tokens, size_t batch, size_t *at, size_t *peak);
#endif
