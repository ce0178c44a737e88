/* GGUF metadata -> kvq_tok_vocab -> kvq_tokenizer (see tokenizer.h for the mapping). */
#include "tok_gguf.h"

#include <stdlib.h>
#include <string.h>

/* NUL-terminated copy of a string key into buf; "" if absent. */
static int get_name(const kvq_gguf_file *g, const char *key, char *buf, size_t cap, int required) {
    int rc = kvq_gguf_get_cstr(g, key, buf, cap);
    if (rc == GGUF_NOT_FOUND) {
        buf[0] = 0;
        return required ? KVQ_ERR_FORMAT : KVQ_OK;
    }
    return rc;
}

static int get_id(const kvq_gguf_file *g, const char *key, int32_t *out) {
    uint32_t v;
    int rc = kvq_gguf_get_u32(g, key, &v);
    if (rc == GGUF_NOT_FOUND) { *out = -1; return KVQ_OK; }
    if (rc) return rc;
    if (v > INT32_MAX) return KVQ_ERR_FORMAT;
    *out = (int32_t)v;
    return KVQ_OK;
}

static int get_flag(const kvq_gguf_file *g, const char *key, int *out) {
    int rc = kvq_gguf_get_bool(g, key, out);
    if (rc == GGUF_NOT_FOUND) { *out = -1; return KVQ_OK; }
    return rc;
}

/* Strings of an array key as (pointer, length) arrays; n = 0 if absent. */
static int get_strings(const kvq_gguf_file *g, const char *key, const char ***ptrs, size_t **lens, size_t *n) {
    const kvq_gguf_kv *kv;
    *n = 0;
    int rc = kvq_gguf_get_arr(g, key, &kv);
    if (rc == GGUF_NOT_FOUND) return KVQ_OK;
    if (rc) return rc;
    if (kv->v.arr.type != GGUF_TYPE_STRING || kv->v.arr.n > (1u << 30)) return KVQ_ERR_FORMAT;
    size_t cnt = (size_t)kv->v.arr.n;
    kvq_gguf_str *s = malloc(sizeof *s * (cnt ? cnt : 1));
    *ptrs = malloc(sizeof **ptrs * (cnt ? cnt : 1));
    *lens = malloc(sizeof **lens * (cnt ? cnt : 1));
    if (!s || !*ptrs || !*lens) { free(s); return KVQ_ERR_NOMEM; }
    rc = kvq_gguf_arr_strings(kv, s, cnt);
    if (!rc)
        for (size_t i = 0; i < cnt; i++) {
            (*ptrs)[i] = s[i].ptr;
            (*lens)[i] = (size_t)s[i].len;
        }
    free(s);
    if (!rc) *n = cnt;
    return rc;
}

int kvq_tok_create_from_gguf(kvq_tokenizer **out, const struct kvq_gguf_file *g) {
    if (!out || !g) return KVQ_ERR_NULL;
    kvq_tok_vocab v;
    kvq_tok_vocab_init(&v);
    char model[32], pre[64];
    const char **tokens = NULL, **merges = NULL;
    size_t *token_lens = NULL, *merge_lens = NULL, n_tokens = 0, n_merges = 0;
    float *scores = NULL;
    int32_t *types = NULL;
    int rc = get_name(g, "tokenizer.ggml.model", model, sizeof model, 1);
    if (!rc) rc = get_name(g, "tokenizer.ggml.pre", pre, sizeof pre, 0);
    if (!rc) rc = get_strings(g, "tokenizer.ggml.tokens", &tokens, &token_lens, &n_tokens);
    if (!rc && n_tokens == 0) rc = KVQ_ERR_FORMAT;
    if (!rc) rc = get_strings(g, "tokenizer.ggml.merges", &merges, &merge_lens, &n_merges);
    const kvq_gguf_kv *a;
    if (!rc && (rc = kvq_gguf_get_arr(g, "tokenizer.ggml.scores", &a)) == KVQ_OK) {
        if (a->v.arr.n != n_tokens) rc = KVQ_ERR_FORMAT;
        else if (!(scores = malloc(sizeof *scores * n_tokens))) rc = KVQ_ERR_NOMEM;
        for (size_t i = 0; !rc && i < n_tokens; i++) rc = kvq_gguf_arr_f32(a, i, &scores[i]);
    } else if (rc == GGUF_NOT_FOUND) {
        rc = KVQ_OK;
    }
    if (!rc && (rc = kvq_gguf_get_arr(g, "tokenizer.ggml.token_type", &a)) == KVQ_OK) {
        if (a->v.arr.n != n_tokens) rc = KVQ_ERR_FORMAT;
        else if (!(types = malloc(sizeof *types * n_tokens))) rc = KVQ_ERR_NOMEM;
        for (size_t i = 0; !rc && i < n_tokens; i++) {
            int64_t t;
            rc = kvq_gguf_arr_i64(a, i, &t);
            if (!rc && (t < INT32_MIN || t > INT32_MAX)) rc = KVQ_ERR_FORMAT;
            if (!rc) types[i] = (int32_t)t;
        }
    } else if (rc == GGUF_NOT_FOUND) {
        rc = KVQ_OK;
    }
    if (!rc) rc = get_id(g, "tokenizer.ggml.bos_token_id", &v.bos);
    if (!rc) rc = get_id(g, "tokenizer.ggml.eos_token_id", &v.eos);
    if (!rc) rc = get_id(g, "tokenizer.ggml.eot_token_id", &v.eot);
    if (!rc) rc = get_id(g, "tokenizer.ggml.eom_token_id", &v.eom);
    if (!rc) rc = get_id(g, "tokenizer.ggml.unknown_token_id", &v.unk);
    if (!rc) rc = get_id(g, "tokenizer.ggml.padding_token_id", &v.pad);
    if (!rc) rc = get_flag(g, "tokenizer.ggml.add_bos_token", &v.add_bos);
    if (!rc) rc = get_flag(g, "tokenizer.ggml.add_eos_token", &v.add_eos);
    if (!rc) rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix);
    if (!rc) {
        v.model = model;
        v.pre = pre[0] ? pre : NULL;
        v.n_tokens = n_tokens;
        v.tokens = tokens;
        v.token_lens = token_lens;
        v.scores = scores;
        v.token_types = types;
        v.n_merges = n_merges;
        v.merges = n_merges ? merges : NULL;
        v.merge_lens = n_merges ? merge_lens : NULL;
        rc = kvq_tok_create(out, &v);
    }
    free(tokens); free(token_lens); free(merges); free(merge_lens); free(scores); free(types);
    return rc;
}
