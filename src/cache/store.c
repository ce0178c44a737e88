/*
 * Paged storage of one layer: the page table of the main store (grown by
 * doubling an array of page pointers; pages themselves never move), spare
 * pages recycled by sliding-window layers, the f16 tail ring, and the
 * lookup of contiguous runs of records used by attention.
 */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

static uint8_t *page_alloc(cache_layer *L) {
    if (L->n_spare > 0) return L->spare[--L->n_spare];
    /* 64-byte aligned so that a page starts on a cache line */
    size_t bytes = (L->page_bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes);
}

static void page_free(cache_layer *L, uint8_t *p) {
    if (L->sliding && L->n_spare < CACHE_MAX_SPARE) L->spare[L->n_spare++] = p;
    else free(p);
}

int store_reserve(cache_layer *L, size_t from, size_t to) {
    if (to <= from) return KVQ_OK;
    const size_t P = L->page_tokens;
    size_t first = from / P, last = (to - 1) / P; /* absolute page indices needed */
    if (L->n_pages == 0) L->first_page = first;
    size_t need = last + 1 - L->first_page;
    if (need <= L->n_pages) return KVQ_OK;
    if (need > L->cap_pages) {
        size_t cap = L->cap_pages ? L->cap_pages : 8;
        while (cap < need) cap *= 2;
        uint8_t **np = realloc(L->pages, cap * sizeof *np); /* pointers only, never the data */
        if (!np) return KVQ_ERR_NOMEM;
        L->pages = np;
        L->cap_pages = cap;
    }
    size_t had = L->n_pages;
    while (L->n_pages < need) {
        uint8_t *p = page_alloc(L);
        if (!p) {
            while (L->n_pages > had) page_free(L, L->pages[--L->n_pages]);
            return KVQ_ERR_NOMEM;
        }
        L->pages[L->n_pages++] = p;
    }
    return KVQ_OK;
}

void store_trim(cache_layer *L, size_t end) {
    const size_t P = L->page_tokens;
    if (end <= L->sink) end = 0; /* the sink holds every position below S: no page needed */
    size_t keep_to = (end + P - 1) / P; /* absolute page index past the last page kept */
    while (L->n_pages > 0 && L->first_page + L->n_pages > keep_to) {
        L->n_pages--;
        free(L->pages[L->n_pages]);
    }
}

void store_evict(cache_layer *L, size_t pos) {
    const size_t P = L->page_tokens;
    size_t drop = 0;
    while (drop < L->n_pages && (L->first_page + drop + 1) * P <= pos) drop++;
    if (drop) {
        for (size_t i = 0; i < drop; i++) page_free(L, L->pages[i]);
        memmove(L->pages, L->pages + drop, (L->n_pages - drop) * sizeof *L->pages);
        L->n_pages -= drop;
        L->first_page += drop;
    }
    /* what stays addressable: whole pages are dropped, so positions of the
     * first kept page remain (a little slack for truncate) */
    size_t held = L->n_pages ? L->first_page * P : L->main_end;
    if (held > L->base) L->base = held;
}

void store_release(cache_layer *L) {
    for (size_t i = 0; i < L->n_pages; i++) free(L->pages[i]);
    free(L->pages);
    L->pages = NULL;
    L->n_pages = L->cap_pages = L->first_page = 0;
    for (int i = 0; i < L->n_spare; i++) free(L->spare[i]);
    L->n_spare = 0;
    free(L->tail);
    L->tail = NULL;
    L->tail_cap = 0;
    free(L->sinkbuf);
    L->sinkbuf = NULL;
}

size_t store_bytes(const kvq_cache *c, const cache_layer *L) {
    size_t b = (L->n_pages + (size_t)L->n_spare) * L->page_bytes;
    b += L->tail_cap * (size_t)c->H * 2 * 2 * (size_t)c->d;
    if (L->sinkbuf) b += sink_bytes(c, L);
    return b;
}

void store_segment(const kvq_cache *c, const cache_layer *L, int h, size_t a, size_t b, cache_seg *s) {
    s->pos = a;
    if (a < L->sink && a < L->main_end) {
        size_t end = L->sink < L->main_end ? L->sink : L->main_end;
        s->n = (end < b ? end : b) - a;
        s->k = sink_k(c, L, h, a);
        s->v = sink_v(c, L, h, a);
        s->kp = s->vp = c->f16;
        s->dom = DOM_F16;
    } else if (a < L->main_end) {
        const size_t P = L->page_tokens, slot = a % P;
        size_t end = a - slot + P;
        if (end > L->main_end) end = L->main_end;
        if (end > b) end = b;
        uint8_t *page = store_page(L, a);
        s->n = end - a;
        s->k = page_k(c, L, page, h, slot);
        s->v = page_v(c, L, page, h, slot);
        s->kp = layer_kplan(L, h);
        s->vp = layer_vplan(L, h);
        s->dom = DOM_MAIN;
    } else {
        const size_t cap = L->tail_cap, slot = a % cap;
        size_t end = a - slot + cap;
        if (end > b) end = b;
        s->n = end - a;
        s->k = tail_k(c, L, h, a);
        s->v = tail_v(c, L, h, a);
        s->kp = s->vp = c->f16;
        s->dom = DOM_F16;
    }
}
