/*
 * GPT-2 byte-level BPE: pre-tokenizer scanners (one hand-written scanner per
 * regex), the byte <-> character map, and merges by rank.
 *
 * Pre-tokenizers (what each scanner matches, leftmost alternative first, as the
 * regex engines of the reference tokenizers do):
 *   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   smollm: every \p{N} character alone, then gpt2 on the text between them
 *   qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Each word is then mapped byte by byte to the vocabulary's byte-level
 * characters and merged: the adjacent pair of lowest merge rank first (the
 * leftmost on ties), until no pair has a merge. A heap keeps this O(n log n)
 * in the word length.
 * Not done (as in llama.cpp): the NFC normalization of Qwen2's HF tokenizer;
 * text is taken as it is (normally already NFC).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "tokenizer_unicode.h"

/* ------------------------------------------------------------------------ */
/* byte-level map                                                            */
/* ------------------------------------------------------------------------ */

/* Code point standing for byte b: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for 256, 257, ... in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) k++;
    return 256 + k;
}

size_t kvq_tok_bpe_unmap(const kvq_tokenizer *t, const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = kvq_utf8_decode(s + i, n - i, &cp);
        if (cp < 324 && t->cp_to_byte[cp] >= 0) {
            if (k < cap) buf[k] = (char)t->cp_to_byte[cp];
            k++;
        } else { /* not a byte-level character: copy as is */
            for (size_t j = 0; j < l; j++, k++)
                if (k < cap) buf[k] = s[i + j];
        }
        i += l;
    }
    return k;
}

/* ------------------------------------------------------------------------ */
/* merges                                                                    */
/* ------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int merge_find(const kvq_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *res) {
    if (a < 0 || b < 0) return 0;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = (size_t)mix64(key) & t->mmask;
    for (;;) {
        uint64_t k = t->mkey[i];
        if (k == UINT64_MAX) return 0;
        if (k == key) {
            *rank = t->mrank[i];
            *res = t->mres[i];
            return 1;
        }
        i = (i + 1) & t->mmask;
    }
}

int kvq_tok_bpe_init(kvq_tokenizer *t, const kvq_tok_vocab *v) {
    for (unsigned cp = 0; cp < 324; cp++) t->cp_to_byte[cp] = -1;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = byte_to_cp(b);
        char u[4];
        size_t l = kvq_utf8_encode(cp, u);
        t->cp_to_byte[cp] = (int16_t)b;
        t->byte_tok[b] = kvq_tok_lookup(t, u, l);
    }
    if (v->n_merges > (size_t)INT32_MAX) return KVQ_ERR_FORMAT;
    size_t slots = 16;
    while (slots < 2 * v->n_merges) slots *= 2;
    t->mkey = malloc(slots * sizeof *t->mkey);
    t->mrank = malloc(slots * sizeof *t->mrank);
    t->mres = malloc(slots * sizeof *t->mres);
    if (!t->mkey || !t->mrank || !t->mres) return KVQ_ERR_NOMEM;
    memset(t->mkey, 0xff, slots * sizeof *t->mkey);
    t->mmask = slots - 1;
    char *cat = NULL;
    size_t cat_cap = 0;
    int rc = KVQ_OK;
    for (size_t r = 0; r < v->n_merges; r++) {
        const char *m = v->merges[r];
        size_t ml = v->merge_lens ? v->merge_lens[r] : (m ? strlen(m) : 0);
        const char *sp = m && ml ? memchr(m, ' ', ml) : NULL;
        if (!sp) { rc = KVQ_ERR_FORMAT; break; }
        size_t la = (size_t)(sp - m), lb = ml - la - 1;
        int32_t a = kvq_tok_lookup(t, m, la), b = kvq_tok_lookup(t, sp + 1, lb);
        if (a < 0 || b < 0) continue;
        void *p = cat;
        if ((rc = kvq_tok_reserve(&p, &cat_cap, la + lb)) != KVQ_OK) break;
        cat = p;
        memcpy(cat, m, la);
        memcpy(cat + la, sp + 1, lb);
        int32_t res = kvq_tok_lookup(t, cat, la + lb);
        if (res < 0) continue;
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        size_t i = (size_t)mix64(key) & t->mmask;
        while (t->mkey[i] != UINT64_MAX && t->mkey[i] != key) i = (i + 1) & t->mmask;
        if (t->mkey[i] == key) continue; /* duplicate: the lower rank stays */
        t->mkey[i] = key;
        t->mrank[i] = (int32_t)r;
        t->mres[i] = res;
    }
    free(cat);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* pre-tokenizers                                                            */
/* ------------------------------------------------------------------------ */

typedef struct ch {
    uint32_t cp;
    size_t len;
    int cat;
} ch;

static ch ch_at(const char *s, size_t n, size_t i) {
    ch c;
    c.len = kvq_utf8_decode(s + i, n - i, &c.cp);
    c.cat = c.cp == KVQ_UCP_INVALID ? KVQ_UCAT_OTHER : kvq_ucat(c.cp);
    return c;
}

/* End of the run of characters of class cat starting at i. */
static size_t run_of(const char *s, size_t n, size_t i, int cat) {
    while (i < n) {
        ch c = ch_at(s, n, i);
        if (c.cat != cat) break;
        i += c.len;
    }
    return i;
}

/* Whitespace run from i: returns its end, and in *last the start of its last character. */
static size_t ws_run(const char *s, size_t n, size_t i, size_t *last) {
    *last = i;
    while (i < n) {
        ch c = ch_at(s, n, i);
        if (c.cat != KVQ_UCAT_WS) break;
        *last = i;
        i += c.len;
    }
    return i;
}

/* Length of a contraction suffix after an apostrophe at s[0..n): s t m d re ve ll. */
static size_t contraction(const char *s, size_t n, int icase) {
    if (n == 0) return 0;
    unsigned char c = (unsigned char)s[0];
    if (icase) {
        /* U+017F (long s) folds to 's' */
        if (n >= 2 && c == 0xC5 && (unsigned char)s[1] == 0xBF) return 2;
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
    }
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 1;
    if (n < 2) return 0;
    unsigned char d = (unsigned char)s[1];
    if (icase && d >= 'A' && d <= 'Z') d = (unsigned char)(d + 32);
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l')) return 2;
    return 0;
}

/* The whitespace alternatives \s+(?!\S)|\s+ at i: end of the match. */
static size_t ws_tail(const char *s, size_t n, size_t i) {
    size_t last;
    size_t k = ws_run(s, n, i, &last);
    if (k == n) return k;         /* run reaches the end */
    if (last > i) return last;    /* leave the last one for the next word */
    return k;                     /* a single whitespace character */
}

static int scan_gpt2(const char *s, size_t n, kvq_tok_word_fn fn, void *ctx) {
    size_t i = 0;
    while (i < n) {
        ch c0 = ch_at(s, n, i);
        size_t e;
        if (c0.cp == '\'' && (e = contraction(s + i + 1, n - i - 1, 0)) > 0) {
            e += i + 1;
        } else {
            size_t j = i;
            ch c1 = c0;
            if (c0.cp == ' ' && i + 1 < n) {
                j = i + 1;
                c1 = ch_at(s, n, j);
            }
            if (c1.cat == KVQ_UCAT_WS) e = ws_tail(s, n, i);
            else e = run_of(s, n, j, c1.cat); /* ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ */
        }
        int rc = fn(ctx, s + i, e - i);
        if (rc) return rc;
        i = e;
    }
    return KVQ_OK;
}

static int scan_smollm(const char *s, size_t n, kvq_tok_word_fn fn, void *ctx) {
    size_t i = 0, start = 0;
    int rc;
    while (i < n) {
        ch c = ch_at(s, n, i);
        if (c.cat != KVQ_UCAT_N) {
            i += c.len;
            continue;
        }
        if (i > start && (rc = scan_gpt2(s + start, i - start, fn, ctx)) != KVQ_OK) return rc;
        if ((rc = fn(ctx, s + i, c.len)) != KVQ_OK) return rc;
        i += c.len;
        start = i;
    }
    return n > start ? scan_gpt2(s + start, n - start, fn, ctx) : KVQ_OK;
}

static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

static size_t crlf_run(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

static int scan_qwen2(const char *s, size_t n, kvq_tok_word_fn fn, void *ctx) {
    size_t i = 0;
    while (i < n) {
        ch c0 = ch_at(s, n, i);
        size_t e;
        ch c1 = {0, 0, -1};
        if (i + c0.len < n) c1 = ch_at(s, n, i + c0.len);
        if (c0.cp == '\'' && (e = contraction(s + i + 1, n - i - 1, 1)) > 0) {
            e += i + 1;
        } else if (c0.cat == KVQ_UCAT_L) {
            e = run_of(s, n, i, KVQ_UCAT_L);
        } else if (c0.cat != KVQ_UCAT_N && !is_crlf(c0.cp) && c1.cat == KVQ_UCAT_L) {
            e = run_of(s, n, i + c0.len, KVQ_UCAT_L); /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        } else if (c0.cat == KVQ_UCAT_N) {
            e = i + c0.len;                           /* \p{N} */
        } else if (c0.cp == ' ' && c1.cat == KVQ_UCAT_OTHER) {
            e = crlf_run(s, n, run_of(s, n, i + 1, KVQ_UCAT_OTHER)); /* ?[^\s\p{L}\p{N}]+[\r\n]* */
        } else if (c0.cat == KVQ_UCAT_OTHER) {
            e = crlf_run(s, n, run_of(s, n, i, KVQ_UCAT_OTHER));
        } else {
            /* whitespace: \s*[\r\n]+ ends after the run's last CR/LF, if any */
            size_t last, k = ws_run(s, n, i, &last), nl = 0;
            for (size_t p = i; p < k; p++)
                if (s[p] == '\r' || s[p] == '\n') nl = p + 1;
            e = nl ? nl : ws_tail(s, n, i);
        }
        int rc = fn(ctx, s + i, e - i);
        if (rc) return rc;
        i = e;
    }
    return KVQ_OK;
}

int kvq_tok_pretokenize(int pre, const char *s, size_t n, kvq_tok_word_fn fn, void *ctx) {
    switch (pre) {
    case KVQ_TOK_PRE_SMOLLM: return scan_smollm(s, n, fn, ctx);
    case KVQ_TOK_PRE_QWEN2: return scan_qwen2(s, n, fn, ctx);
    default: return scan_gpt2(s, n, fn, ctx);
    }
}

/* ------------------------------------------------------------------------ */
/* merges of one word                                                        */
/* ------------------------------------------------------------------------ */

typedef struct bpe_sym {
    int32_t id;         /* current token id, -1 if the byte has none */
    int32_t prev, next; /* neighbours, -1 at the ends */
    int32_t alive;
} bpe_sym;

typedef struct bpe_pair {
    int32_t rank, left, right, a, b, res;
} bpe_pair;

static int pair_less(const bpe_pair *x, const bpe_pair *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(bpe_pair *h, size_t *n, bpe_pair p) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&p, &h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = p;
}

static bpe_pair heap_pop(bpe_pair *h, size_t *n) {
    bpe_pair top = h[0], x = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && pair_less(&h[c + 1], &h[c])) c++;
        if (!pair_less(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

typedef struct bpe_ctx {
    const kvq_tokenizer *t;
    kvq_tok_out *o;
    kvq_tok_scratch *sc;
} bpe_ctx;

static void try_pair(const kvq_tokenizer *t, const bpe_sym *sym, int32_t l, int32_t r, bpe_pair *h, size_t *nh) {
    if (l < 0 || r < 0) return;
    bpe_pair p;
    if (!merge_find(t, sym[l].id, sym[r].id, &p.rank, &p.res)) return;
    p.left = l;
    p.right = r;
    p.a = sym[l].id;
    p.b = sym[r].id;
    heap_push(h, nh, p);
}

static int bpe_word(void *vctx, const char *w, size_t n) {
    bpe_ctx *c = vctx;
    const kvq_tokenizer *t = c->t;
    if (n == 1) {
        int32_t id = t->byte_tok[(unsigned char)w[0]];
        if (id >= 0) kvq_tok_emit(c->o, id);
        return KVQ_OK;
    }
    if (n > (size_t)INT32_MAX / 4) return KVQ_ERR_OVERFLOW;
    int rc;
    if ((rc = kvq_tok_reserve(&c->sc->sym, &c->sc->sym_cap, n * sizeof(bpe_sym))) != KVQ_OK) return rc;
    /* each merge adds at most two pairs: n - 1 + 2 (n - 1) */
    if ((rc = kvq_tok_reserve(&c->sc->heap, &c->sc->heap_cap, 3 * n * sizeof(bpe_pair))) != KVQ_OK) return rc;
    bpe_sym *sym = c->sc->sym;
    bpe_pair *h = c->sc->heap;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i].id = t->byte_tok[(unsigned char)w[i]];
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        sym[i].alive = 1;
    }
    for (size_t i = 0; i + 1 < n; i++) try_pair(t, sym, (int32_t)i, (int32_t)i + 1, h, &nh);
    while (nh) {
        bpe_pair p = heap_pop(h, &nh);
        bpe_sym *L = &sym[p.left], *R = &sym[p.right];
        if (!L->alive || !R->alive || L->next != p.right || L->id != p.a || R->id != p.b) continue;
        L->id = p.res;
        R->alive = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = p.left;
        try_pair(t, sym, L->prev, p.left, h, &nh);
        try_pair(t, sym, p.left, L->next, h, &nh);
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (sym[i].id >= 0) kvq_tok_emit(c->o, sym[i].id);
    return KVQ_OK;
}

int kvq_tok_bpe_fragment(const kvq_tokenizer *t, const char *s, size_t n, kvq_tok_out *o, kvq_tok_scratch *sc) {
    bpe_ctx c = {t, o, sc};
    return kvq_tok_pretokenize(t->pre, s, n, bpe_word, &c);
}
