/*
 * Private parts of the tokenizers, shared by tokenizer.c (vocabulary, special
 * tokens, encode driver, decode, chat format), tokenizer_bpe.c (GPT-2
 * byte-level BPE and its pre-tokenizers) and tokenizer_spm.c (SentencePiece).
 */
#ifndef KVQ_ENGINE_TOKENIZER_IMPL_H
#define KVQ_ENGINE_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

enum { KVQ_TOK_KIND_BPE = 1, KVQ_TOK_KIND_SPM = 2 };
enum { KVQ_TOK_PRE_GPT2 = 0, KVQ_TOK_PRE_SMOLLM = 1, KVQ_TOK_PRE_QWEN2 = 2 };

/* flags[] bits */
enum { KVQ_TOK_FLAG_EOG = 1 };

/* Node of the trie of special tokens (matched in the raw text). */
typedef struct kvq_tok_trie_node {
    int32_t child;   /* first child node, -1 if none */
    int32_t sibling; /* next sibling, -1 if none */
    int32_t token;   /* token ending here, -1 if none */
    unsigned char byte;
} kvq_tok_trie_node;

struct kvq_tokenizer {
    int kind; /* KVQ_TOK_KIND_* */
    int pre;  /* KVQ_TOK_PRE_* (BPE) */
    size_t n_tokens;
    char *pool;       /* token texts, back to back */
    size_t *off;      /* (n_tokens) offset of each text in pool */
    uint32_t *len;    /* (n_tokens) text lengths */
    float *scores;    /* (n_tokens) scores, SentencePiece only */
    uint8_t *type;    /* (n_tokens) KVQ_TOK_TYPE_* */
    uint8_t *flags;   /* (n_tokens) KVQ_TOK_FLAG_* */

    /* text -> id: open addressing, linear probing, -1 = empty */
    int32_t *tmap;
    size_t tmap_mask;

    /* BPE merges: (left id << 32 | right id) -> rank and merged id */
    uint64_t *mkey;   /* UINT64_MAX = empty */
    int32_t *mrank;
    int32_t *mres;
    size_t mmask;

    int32_t byte_tok[256];  /* BPE: id of each byte's byte-level character (-1 if absent) */
    int16_t cp_to_byte[324]; /* BPE: byte-level character -> byte (-1 if not one) */
    int32_t byte_fallback[256]; /* SPM: id of <0xXX> (-1 if absent) */

    kvq_tok_trie_node *trie; /* node 0 = root */
    size_t n_trie;

    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix;
};

/* Growable scratch buffers for one encode call. */
typedef struct kvq_tok_scratch {
    void *sym;  size_t sym_cap;  /* bytes */
    void *heap; size_t heap_cap; /* bytes */
    char *text; size_t text_cap; /* bytes */
} kvq_tok_scratch;

/* Output of encode: ids are counted past cap but only stored below it. */
typedef struct kvq_tok_out {
    int32_t *ids;
    size_t cap, n;
} kvq_tok_out;

static inline void kvq_tok_emit(kvq_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Makes *buf at least need bytes (keeps contents). KVQ_OK or KVQ_ERR_NOMEM. */
int kvq_tok_reserve(void **buf, size_t *cap, size_t need);

/* Id of text[0..len) or -1. */
int32_t kvq_tok_lookup(const kvq_tokenizer *t, const char *text, size_t len);

/* Builds the BPE-specific tables (merges, byte maps). */
int kvq_tok_bpe_init(kvq_tokenizer *t, const kvq_tok_vocab *v);
/* Tokenizes one fragment of plain text (no special tokens in it). */
int kvq_tok_bpe_fragment(const kvq_tokenizer *t, const char *s, size_t n, kvq_tok_out *o,
                         kvq_tok_scratch *sc);
/* Splits s[0..n) into pre-tokenizer words, calling fn for each. */
typedef int (*kvq_tok_word_fn)(void *ctx, const char *w, size_t n);
int kvq_tok_pretokenize(int pre, const char *s, size_t n, kvq_tok_word_fn fn, void *ctx);
/* Decodes a byte-level BPE token text into raw bytes; returns the count needed. */
size_t kvq_tok_bpe_unmap(const kvq_tokenizer *t, const char *s, size_t n, char *buf, size_t cap);

/* Builds the SentencePiece tables (byte fallback). */
int kvq_tok_spm_init(kvq_tokenizer *t, const kvq_tok_vocab *v);
/* Tokenizes one fragment; space_prefix: prepend U+2581. */
int kvq_tok_spm_fragment(const kvq_tokenizer *t, const char *s, size_t n, int space_prefix,
                         kvq_tok_out *o, kvq_tok_scratch *sc);

#endif
