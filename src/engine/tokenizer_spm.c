/*
 * SentencePiece (BPE model type, as Gemma uses): spaces become U+2581, the
 * text is split into UTF-8 characters, and the adjacent pair whose
 * concatenation is a vocabulary piece of the highest score is merged first
 * (the leftmost on ties), until no pair forms a piece. Characters that are not
 * pieces fall back to their <0xXX> byte tokens (or unk when the vocabulary has
 * none). Only NORMAL and USER_DEFINED tokens can be formed by merges, as in
 * SentencePiece (CONTROL, BYTE, UNKNOWN and UNUSED texts never appear from
 * plain text).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "tokenizer_unicode.h"

int kvq_tok_spm_init(kvq_tokenizer *t, const kvq_tok_vocab *v) {
    (void)v;
    for (unsigned b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        int32_t id = kvq_tok_lookup(t, name, 6);
        t->byte_fallback[b] = id >= 0 && t->type[id] == KVQ_TOK_TYPE_BYTE ? id : -1;
    }
    return KVQ_OK;
}

typedef struct spm_sym {
    int32_t off;  /* byte offset in the escaped text */
    int32_t n;    /* byte length, 0 once merged into its left neighbour */
    int32_t prev, next;
    int32_t id;   /* token id if known (after a merge), else -1 */
} spm_sym;

typedef struct spm_pair {
    float score;
    int32_t left, right, size, id;
} spm_pair;

/* x comes out of the heap before y: higher score, then leftmost */
static int pair_before(const spm_pair *x, const spm_pair *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static void heap_push(spm_pair *h, size_t *n, spm_pair p) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = p;
}

static spm_pair heap_pop(spm_pair *h, size_t *n) {
    spm_pair top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_before(&h[c + 1], &h[c])) c++;
        if (!pair_before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

static int mergeable(const kvq_tokenizer *t, int32_t id) {
    return id >= 0 && (t->type[id] == KVQ_TOK_TYPE_NORMAL || t->type[id] == KVQ_TOK_TYPE_USER_DEFINED);
}

static void try_pair(const kvq_tokenizer *t, const char *text, const spm_sym *sym, int32_t l, int32_t r,
                     spm_pair *h, size_t *nh) {
    if (l < 0 || r < 0) return;
    int32_t size = sym[l].n + sym[r].n;
    int32_t id = kvq_tok_lookup(t, text + sym[l].off, (size_t)size);
    if (!mergeable(t, id)) return;
    spm_pair p = {t->scores[id], l, r, size, id};
    heap_push(h, nh, p);
}

int kvq_tok_spm_fragment(const kvq_tokenizer *t, const char *s, size_t n, int space_prefix, kvq_tok_out *o,
                         kvq_tok_scratch *sc) {
    /* escape: ' ' -> U+2581 (3 bytes) */
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    if (n > (size_t)INT32_MAX / 4 - 2 * spaces - 3) return KVQ_ERR_OVERFLOW;
    size_t m = n + 2 * spaces + (space_prefix ? 3 : 0);
    int rc;
    void *p = sc->text;
    if ((rc = kvq_tok_reserve(&p, &sc->text_cap, m)) != KVQ_OK) return rc;
    sc->text = p;
    char *text = sc->text;
    size_t k = 0;
    if (space_prefix) {
        memcpy(text, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(text + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            text[k++] = s[i];
        }
    }

    /* symbols: one per UTF-8 character */
    if ((rc = kvq_tok_reserve(&sc->sym, &sc->sym_cap, m * sizeof(spm_sym))) != KVQ_OK) return rc;
    if ((rc = kvq_tok_reserve(&sc->heap, &sc->heap_cap, 3 * m * sizeof(spm_pair))) != KVQ_OK) return rc;
    spm_sym *sym = sc->sym;
    spm_pair *h = sc->heap;
    size_t ns = 0, nh = 0;
    for (size_t i = 0; i < m;) {
        uint32_t cp;
        size_t l = kvq_utf8_decode(text + i, m - i, &cp);
        sym[ns] = (spm_sym){(int32_t)i, (int32_t)l, (int32_t)ns - 1, -1, -1};
        if (ns) sym[ns - 1].next = (int32_t)ns;
        ns++;
        i += l;
    }
    for (size_t i = 0; i + 1 < ns; i++) try_pair(t, text, sym, (int32_t)i, (int32_t)i + 1, h, &nh);

    while (nh) {
        spm_pair q = heap_pop(h, &nh);
        spm_sym *L = &sym[q.left], *R = &sym[q.right];
        /* stale: one side already merged into something else */
        if (L->n == 0 || R->n == 0 || L->next != q.right || L->n + R->n != q.size) continue;
        L->n += R->n;
        L->id = q.id;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = q.left;
        try_pair(t, text, sym, L->prev, q.left, h, &nh);
        try_pair(t, text, sym, q.left, L->next, h, &nh);
    }

    for (int32_t i = ns ? 0 : -1; i >= 0; i = sym[i].next) {
        int32_t id = sym[i].id;
        if (id < 0) {
            id = kvq_tok_lookup(t, text + sym[i].off, (size_t)sym[i].n);
            if (!mergeable(t, id)) id = -1;
        }
        if (id >= 0) {
            kvq_tok_emit(o, id);
            continue;
        }
        for (int32_t j = 0; j < sym[i].n; j++) {
            int32_t b = t->byte_fallback[(unsigned char)text[sym[i].off + j]];
            if (b < 0) b = t->unk;
            if (b >= 0) kvq_tok_emit(o, b);
        }
    }
    return KVQ_OK;
}
