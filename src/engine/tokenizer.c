/*
 * Tokenizer object: vocabulary copy, text -> id hash, special-token trie,
 * encode driver (special tokens, then BPE or SentencePiece on the text between
 * them), decode, end-of-generation set and chat prompts.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

int kvq_tok_reserve(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return KVQ_OK;
    size_t c = *cap ? *cap : 256;
    while (c < need) {
        if (c > SIZE_MAX / 2) return KVQ_ERR_OVERFLOW;
        c *= 2;
    }
    void *p = realloc(*buf, c);
    if (!p) return KVQ_ERR_NOMEM;
    *buf = p;
    *cap = c;
    return KVQ_OK;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

int32_t kvq_tok_lookup(const kvq_tokenizer *t, const char *text, size_t len) {
    size_t i = (size_t)hash_bytes(text, len) & t->tmap_mask;
    for (;;) {
        int32_t id = t->tmap[i];
        if (id < 0) return -1;
        if (t->len[id] == len && memcmp(t->pool + t->off[id], text, len) == 0) return id;
        i = (i + 1) & t->tmap_mask;
    }
}

static size_t tok_len(const kvq_tok_vocab *v, size_t i) {
    return v->token_lens ? v->token_lens[i] : (v->tokens[i] ? strlen(v->tokens[i]) : 0);
}

/* ------------------------------------------------------------------------ */
/* special tokens                                                            */
/* ------------------------------------------------------------------------ */

static int trie_insert(kvq_tokenizer *t, size_t *cap, const char *s, size_t n, int32_t id) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].sibling;
        if (c < 0) {
            if (t->n_trie == *cap) {
                size_t bytes = *cap * sizeof *t->trie;
                void *p = t->trie;
                int rc = kvq_tok_reserve(&p, &bytes, bytes * 2);
                if (rc) return rc;
                t->trie = p;
                *cap = bytes / sizeof *t->trie;
            }
            c = (int32_t)t->n_trie++;
            t->trie[c] = (kvq_tok_trie_node){-1, t->trie[node].child, -1, b};
            t->trie[node].child = c;
        }
        node = c;
    }
    /* two tokens with one text: keep the first (lowest id) */
    if (t->trie[node].token < 0) t->trie[node].token = id;
    return KVQ_OK;
}

static int special_allowed(const kvq_tokenizer *t, int32_t id, int parse_special) {
    int ty = t->type[id];
    return ty == KVQ_TOK_TYPE_USER_DEFINED || (parse_special && (ty == KVQ_TOK_TYPE_CONTROL || ty == KVQ_TOK_TYPE_UNKNOWN));
}

/* Length of the longest allowed special token at s[0..n) (0 if none); its id in *id. */
static size_t match_special(const kvq_tokenizer *t, const char *s, size_t n, int parse_special, int32_t *id) {
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].sibling;
        if (c < 0) break;
        node = c;
        int32_t tok = t->trie[c].token;
        if (tok >= 0 && special_allowed(t, tok, parse_special)) {
            best = i + 1;
            *id = tok;
        }
    }
    return best;
}

static const char *const eog_texts[] = {
    "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<EOT>",
};

/* ------------------------------------------------------------------------ */
/* create / free                                                             */
/* ------------------------------------------------------------------------ */

void kvq_tok_vocab_init(kvq_tok_vocab *v) {
    if (!v) return;
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->eot = v->eom = v->unk = v->pad = -1;
    v->add_bos = v->add_eos = v->add_space_prefix = -1;
}

void kvq_tok_free(kvq_tokenizer *t) {
    if (!t) return;
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->type);
    free(t->flags);
    free(t->tmap);
    free(t->mkey);
    free(t->mrank);
    free(t->mres);
    free(t->trie);
    free(t);
}

static int check_id(int32_t id, size_t n) { return id >= -1 && (id < 0 || (size_t)id < n); }

int kvq_tok_create(kvq_tokenizer **out, const kvq_tok_vocab *v) {
    if (!out || !v || !v->model || !v->tokens) return KVQ_ERR_NULL;
    int kind;
    if (strcmp(v->model, "gpt2") == 0) kind = KVQ_TOK_KIND_BPE;
    else if (strcmp(v->model, "llama") == 0) kind = KVQ_TOK_KIND_SPM;
    else return KVQ_ERR_UNSUPPORTED;
    int pre = KVQ_TOK_PRE_GPT2;
    if (kind == KVQ_TOK_KIND_BPE && v->pre) {
        if (strcmp(v->pre, "smollm") == 0) pre = KVQ_TOK_PRE_SMOLLM;
        else if (strcmp(v->pre, "qwen2") == 0) pre = KVQ_TOK_PRE_QWEN2;
        else if (strcmp(v->pre, "gpt2") == 0 || strcmp(v->pre, "default") == 0) pre = KVQ_TOK_PRE_GPT2;
        else return KVQ_ERR_UNSUPPORTED;
    }
    if (v->n_tokens == 0 || v->n_tokens > INT32_MAX / 4) return KVQ_ERR_FORMAT;
    if (kind == KVQ_TOK_KIND_SPM && !v->scores) return KVQ_ERR_FORMAT;
    if (kind == KVQ_TOK_KIND_BPE && (!v->merges || v->n_merges == 0)) return KVQ_ERR_FORMAT;
    size_t n = v->n_tokens;
    if (!check_id(v->bos, n) || !check_id(v->eos, n) || !check_id(v->eot, n) || !check_id(v->eom, n) ||
        !check_id(v->unk, n) || !check_id(v->pad, n))
        return KVQ_ERR_FORMAT;

    kvq_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return KVQ_ERR_NOMEM;
    int rc = KVQ_ERR_NOMEM;
    t->kind = kind;
    t->pre = pre;
    t->n_tokens = n;
    t->bos = v->bos;
    t->eos = v->eos;
    t->eot = v->eot;
    t->eom = v->eom;
    t->unk = v->unk;
    t->pad = v->pad;
    t->add_bos = v->add_bos >= 0 ? v->add_bos != 0 : kind == KVQ_TOK_KIND_SPM;
    t->add_eos = v->add_eos >= 0 ? v->add_eos != 0 : 0;
    t->add_space_prefix = kind == KVQ_TOK_KIND_SPM && (v->add_space_prefix >= 0 ? v->add_space_prefix != 0 : 1);

    /* token texts */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_len(v, i);
        if (l > UINT32_MAX || (l && !v->tokens[i])) { rc = KVQ_ERR_FORMAT; goto fail; }
        total += l;
    }
    t->pool = malloc(total ? total : 1);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->type = malloc(n);
    t->flags = calloc(n, 1);
    if (!t->pool || !t->off || !t->len || !t->type || !t->flags) goto fail;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_len(v, i);
        if (l) memcpy(t->pool + pos, v->tokens[i], l);
        t->off[i] = pos;
        t->len[i] = (uint32_t)l;
        pos += l;
        int32_t ty = v->token_types ? v->token_types[i] : KVQ_TOK_TYPE_NORMAL;
        t->type[i] = (uint8_t)(ty >= 0 && ty <= KVQ_TOK_TYPE_BYTE ? ty : KVQ_TOK_TYPE_UNDEFINED);
    }
    if (v->scores) {
        t->scores = malloc(n * sizeof *t->scores);
        if (!t->scores) goto fail;
        memcpy(t->scores, v->scores, n * sizeof *t->scores);
    }

    /* text -> id map (the first id wins for duplicate texts) */
    size_t slots = pow2_at_least(2 * n);
    t->tmap = malloc(slots * sizeof *t->tmap);
    if (!t->tmap) goto fail;
    memset(t->tmap, 0xff, slots * sizeof *t->tmap);
    t->tmap_mask = slots - 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = t->pool + t->off[i];
        size_t h = (size_t)hash_bytes(s, t->len[i]) & t->tmap_mask;
        int dup = 0;
        while (t->tmap[h] >= 0) {
            int32_t o = t->tmap[h];
            if (t->len[o] == t->len[i] && memcmp(t->pool + t->off[o], s, t->len[i]) == 0) { dup = 1; break; }
            h = (h + 1) & t->tmap_mask;
        }
        if (!dup) t->tmap[h] = (int32_t)i;
    }

    /* special tokens: trie of CONTROL, USER_DEFINED and UNKNOWN texts */
    size_t trie_cap = 256;
    t->trie = malloc(trie_cap * sizeof *t->trie);
    if (!t->trie) goto fail;
    t->trie[0] = (kvq_tok_trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
    for (size_t i = 0; i < n; i++) {
        int ty = t->type[i];
        if (t->len[i] == 0 || (ty != KVQ_TOK_TYPE_CONTROL && ty != KVQ_TOK_TYPE_USER_DEFINED && ty != KVQ_TOK_TYPE_UNKNOWN))
            continue;
        if ((rc = trie_insert(t, &trie_cap, t->pool + t->off[i], t->len[i], (int32_t)i)) != KVQ_OK) goto fail;
    }
    rc = KVQ_ERR_NOMEM;

    /* end of generation */
    int32_t eog_ids[3] = {t->eos, t->eot, t->eom};
    for (int k = 0; k < 3; k++)
        if (eog_ids[k] >= 0) t->flags[eog_ids[k]] |= KVQ_TOK_FLAG_EOG;
    for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++) {
        int32_t id = kvq_tok_lookup(t, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0 && t->type[id] == KVQ_TOK_TYPE_CONTROL) t->flags[id] |= KVQ_TOK_FLAG_EOG;
    }

    rc = kind == KVQ_TOK_KIND_BPE ? kvq_tok_bpe_init(t, v) : kvq_tok_spm_init(t, v);
    if (rc) goto fail;
    *out = t;
    return KVQ_OK;
fail:
    kvq_tok_free(t);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* queries                                                                   */
/* ------------------------------------------------------------------------ */

size_t kvq_tok_n_tokens(const kvq_tokenizer *t) { return t ? t->n_tokens : 0; }
int32_t kvq_tok_bos(const kvq_tokenizer *t) { return t ? t->bos : -1; }
int32_t kvq_tok_eos(const kvq_tokenizer *t) { return t ? t->eos : -1; }

int32_t kvq_tok_find(const kvq_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) return -1;
    return kvq_tok_lookup(t, text ? text : "", len);
}

const char *kvq_tok_text(const kvq_tokenizer *t, int32_t id, size_t *len) {
    if (!t || id < 0 || (size_t)id >= t->n_tokens) return NULL;
    if (len) *len = t->len[id];
    return t->pool + t->off[id];
}

int kvq_tok_type(const kvq_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_tokens) return -1;
    return t->type[id];
}

int kvq_tok_is_eog(const kvq_tokenizer *t, int32_t id) {
    if (!t || id < 0 || (size_t)id >= t->n_tokens) return 0;
    return (t->flags[id] & KVQ_TOK_FLAG_EOG) != 0;
}

/* ------------------------------------------------------------------------ */
/* encode                                                                    */
/* ------------------------------------------------------------------------ */

static int encode_fragment(const kvq_tokenizer *t, const char *s, size_t n, int prev_special, kvq_tok_out *o,
                           kvq_tok_scratch *sc) {
    if (t->kind == KVQ_TOK_KIND_BPE) return kvq_tok_bpe_fragment(t, s, n, o, sc);
    return kvq_tok_spm_fragment(t, s, n, t->add_space_prefix && prev_special, o, sc);
}

int kvq_tok_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                   int32_t *out, size_t cap, size_t *n_out) {
    if (!t || (!text && len) || (!out && cap) || !n_out) return KVQ_ERR_NULL;
    kvq_tok_out o = {out, cap, 0};
    kvq_tok_scratch sc = {0};
    int rc = KVQ_OK;
    if (add_special && t->add_bos && t->bos >= 0) kvq_tok_emit(&o, t->bos);
    int prev_special = 1; /* SentencePiece space prefix: at the start and after a special token */
    size_t start = 0, i = 0;
    while (i < len) {
        int32_t id = -1;
        size_t m = match_special(t, text + i, len - i, parse_special, &id);
        if (!m) {
            i++;
            continue;
        }
        if (i > start) {
            if ((rc = encode_fragment(t, text + start, i - start, prev_special, &o, &sc)) != KVQ_OK) goto done;
        }
        kvq_tok_emit(&o, id);
        prev_special = 1;
        i += m;
        start = i;
    }
    if (len > start && (rc = encode_fragment(t, text + start, len - start, prev_special, &o, &sc)) != KVQ_OK)
        goto done;
    if (add_special && t->add_eos && t->eos >= 0) kvq_tok_emit(&o, t->eos);
    *n_out = o.n;
    if (o.n > cap) rc = KVQ_ERR_RANGE;
done:
    free(sc.sym);
    free(sc.heap);
    free(sc.text);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* decode                                                                    */
/* ------------------------------------------------------------------------ */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* SentencePiece text: U+2581 -> ' '. Returns the size needed. */
static size_t spm_unescape(const char *s, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81) {
            if (k < cap) buf[k] = ' ';
            k++;
            i += 3;
        } else {
            if (k < cap) buf[k] = s[i];
            k++;
            i++;
        }
    }
    return k;
}

int kvq_tok_decode_piece(const kvq_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *n_out) {
    if (!t || (!buf && cap) || !n_out) return KVQ_ERR_NULL;
    if (id < 0 || (size_t)id >= t->n_tokens) return KVQ_ERR_INVALID_ARG;
    const char *s = t->pool + t->off[id];
    size_t n = t->len[id], need = 0;
    switch (t->type[id]) {
    case KVQ_TOK_TYPE_CONTROL:
    case KVQ_TOK_TYPE_UNKNOWN:
    case KVQ_TOK_TYPE_UNUSED:
        need = 0;
        break;
    case KVQ_TOK_TYPE_BYTE:
        /* <0xXX> */
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
            if (cap >= 1) buf[0] = (char)(hexval(s[3]) * 16 + hexval(s[4]));
            need = 1;
        } else {
            need = n;
            if (n <= cap) memcpy(buf, s, n);
        }
        break;
    case KVQ_TOK_TYPE_USER_DEFINED:
        if (t->kind == KVQ_TOK_KIND_SPM) {
            need = spm_unescape(s, n, buf, cap);
        } else {
            need = n;
            if (n <= cap) memcpy(buf, s, n);
        }
        break;
    default:
        need = t->kind == KVQ_TOK_KIND_BPE ? kvq_tok_bpe_unmap(t, s, n, buf, cap) : spm_unescape(s, n, buf, cap);
        break;
    }
    *n_out = need;
    return need > cap ? KVQ_ERR_RANGE : KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* chat prompts                                                              */
/* ------------------------------------------------------------------------ */

typedef struct strbuf {
    char *buf;
    size_t cap, n;
} strbuf;

static void sb_put(strbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->n < b->cap) memcpy(b->buf + b->n, s, b->n + l <= b->cap ? l : b->cap - b->n);
    b->n += l;
}

static int has_token(const kvq_tokenizer *t, const char *s) { return kvq_tok_lookup(t, s, strlen(s)) >= 0; }

static const char SMOLLM_SYSTEM[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
static const char QWEN25_SYSTEM[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

int kvq_tok_chat_format(const kvq_tokenizer *t, const char *arch, const char *system, const char *user_msg,
                        char *buf, size_t cap, size_t *n_out) {
    if (!t || !user_msg || (!buf && cap) || !n_out) return KVQ_ERR_NULL;
    if (!arch) arch = "";
    strbuf b = {buf, cap, 0};
    int gemma = strncmp(arch, "gemma", 5) == 0 || (!has_token(t, "<|im_start|>") && has_token(t, "<start_of_turn>"));
    if (gemma) {
        if (!has_token(t, "<start_of_turn>") || !has_token(t, "<end_of_turn>")) return KVQ_ERR_UNSUPPORTED;
        sb_put(&b, "<start_of_turn>user\n");
        if (system && system[0]) {
            sb_put(&b, system);
            sb_put(&b, "\n\n");
        }
        sb_put(&b, user_msg);
        sb_put(&b, "<end_of_turn>\n<start_of_turn>model\n");
    } else if (has_token(t, "<|im_start|>") && has_token(t, "<|im_end|>")) {
        if (!system) {
            if (t->kind == KVQ_TOK_KIND_BPE && t->pre == KVQ_TOK_PRE_SMOLLM) system = SMOLLM_SYSTEM;
            else if (strcmp(arch, "qwen2") == 0) system = QWEN25_SYSTEM;
        }
        if (system && system[0]) {
            sb_put(&b, "<|im_start|>system\n");
            sb_put(&b, system);
            sb_put(&b, "<|im_end|>\n");
        }
        sb_put(&b, "<|im_start|>user\n");
        sb_put(&b, user_msg);
        sb_put(&b, "<|im_end|>\n<|im_start|>assistant\n");
    } else {
        return KVQ_ERR_UNSUPPORTED;
    }
    *n_out = b.n;
    if (b.n + 1 > cap) return KVQ_ERR_RANGE;
    buf[b.n] = '\0';
    return KVQ_OK;
}
