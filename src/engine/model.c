/*
 * Model loading: hyperparameters from GGUF metadata, weight views into the
 * mapping, every tensor checked (presence, shape, type) before use.
 */
#include "model.h"
#include "tok_gguf.h"
#include "errfmt.h"
#include "open_reason.h"
#include "wmat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define fail kvq_errf

const char *kvq_rope_type_name(kvq_rope_type t) { return t == KVQ_ROPE_NEOX ? "neox" : "norm"; }

/* "{arch}.{suffix}" */
static const char *akey(char *buf, size_t cap, const kvq_model_config *c, const char *suffix) {
    snprintf(buf, cap, "%s.%s", c->arch_name, suffix);
    return buf;
}

/* Reads a positive int hyperparameter; absent -> def (def < 0: required). */
static int get_int(const kvq_gguf_file *g, const kvq_model_config *c, const char *suffix, int def, int *out, char *err,
                   size_t cap) {
    char k[128];
    uint32_t v;
    int rc = kvq_gguf_get_u32(g, akey(k, sizeof k, c, suffix), &v);
    if (rc == GGUF_NOT_FOUND) {
        if (def < 0) return fail(err, cap, KVQ_ERR_FORMAT, "missing metadata %s", k);
        *out = def;
        return KVQ_OK;
    }
    if (rc) return fail(err, cap, rc, "metadata %s: not an unsigned integer (arrays are not supported)", k);
    if (v > (1u << 30)) return fail(err, cap, KVQ_ERR_FORMAT, "metadata %s = %u out of range", k, v);
    *out = (int)v;
    return KVQ_OK;
}

static int get_float(const kvq_gguf_file *g, const kvq_model_config *c, const char *suffix, float def, float *out,
                     char *err, size_t cap) {
    char k[128];
    int rc = kvq_gguf_get_f32(g, akey(k, sizeof k, c, suffix), out);
    if (rc == GGUF_NOT_FOUND) { *out = def; return KVQ_OK; }
    if (rc) return fail(err, cap, rc, "metadata %s: not a number", k);
    if (!isfinite(*out)) return fail(err, cap, KVQ_ERR_FORMAT, "metadata %s is not finite", k);
    return KVQ_OK;
}

static int read_config(const kvq_gguf_file *g, kvq_model_config *c, char *err, size_t cap) {
    int rc = kvq_gguf_get_cstr(g, "general.architecture", c->arch_name, sizeof c->arch_name);
    if (rc == GGUF_NOT_FOUND) return fail(err, cap, KVQ_ERR_FORMAT, "missing general.architecture");
    if (rc) return fail(err, cap, rc, "general.architecture is not a string");
    if (!strcmp(c->arch_name, "llama")) c->arch = KVQ_ARCH_LLAMA;
    else if (!strcmp(c->arch_name, "qwen2")) c->arch = KVQ_ARCH_QWEN2;
    else if (!strcmp(c->arch_name, "gemma3")) c->arch = KVQ_ARCH_GEMMA3;
    else return fail(err, cap, KVQ_ERR_UNSUPPORTED, "architecture '%s' is not supported (llama, qwen2, gemma3)", c->arch_name);
    c->name[0] = 0;
    (void)kvq_gguf_get_cstr(g, "general.name", c->name, sizeof c->name);

    if ((rc = get_int(g, c, "block_count", -1, &c->n_layers, err, cap))) return rc;
    if ((rc = get_int(g, c, "embedding_length", -1, &c->n_embd, err, cap))) return rc;
    if ((rc = get_int(g, c, "feed_forward_length", -1, &c->n_ff, err, cap))) return rc;
    if ((rc = get_int(g, c, "attention.head_count", -1, &c->n_head, err, cap))) return rc;
    if ((rc = get_int(g, c, "attention.head_count_kv", c->n_head, &c->n_head_kv, err, cap))) return rc;
    if (c->n_layers < 1 || c->n_layers > KVQ_MAX_LAYERS || c->n_embd < 1 || c->n_ff < 1 || c->n_head < 1 ||
        c->n_head_kv < 1 || c->n_head % c->n_head_kv)
        return fail(err, cap, KVQ_ERR_FORMAT, "inconsistent hyperparameters (layers %d, embd %d, ff %d, heads %d/%d)",
                    c->n_layers, c->n_embd, c->n_ff, c->n_head, c->n_head_kv);
    int hd_v;
    if ((rc = get_int(g, c, "attention.key_length", c->n_embd / c->n_head, &c->head_dim, err, cap))) return rc;
    if ((rc = get_int(g, c, "attention.value_length", c->head_dim, &hd_v, err, cap))) return rc;
    if (hd_v != c->head_dim)
        return fail(err, cap, KVQ_ERR_UNSUPPORTED, "key length %d != value length %d", c->head_dim, hd_v);
    if (c->head_dim < KVQ_DIM_MIN || c->head_dim > KVQ_DIM_MAX || c->head_dim % 8)
        return fail(err, cap, KVQ_ERR_UNSUPPORTED, "head dim %d not supported by the cache", c->head_dim);
    if ((rc = get_int(g, c, "rope.dimension_count", c->head_dim, &c->n_rot, err, cap))) return rc;
    if (c->n_rot < 2 || c->n_rot > c->head_dim || c->n_rot % 2)
        return fail(err, cap, KVQ_ERR_FORMAT, "rope dimension count %d invalid for head dim %d", c->n_rot, c->head_dim);
    if ((rc = get_int(g, c, "context_length", 0, &c->n_ctx_train, err, cap))) return rc;
    if ((rc = get_int(g, c, "vocab_size", 0, &c->n_vocab, err, cap))) return rc;

    float def_eps = c->arch == KVQ_ARCH_GEMMA3 ? 1e-6f : 1e-5f;
    if ((rc = get_float(g, c, "attention.layer_norm_rms_epsilon", def_eps, &c->norm_eps, err, cap))) return rc;
    if ((rc = get_float(g, c, "rope.freq_base", 10000.0f, &c->rope_base, err, cap))) return rc;
    float factor = 0.0f;
    if ((rc = get_float(g, c, "rope.scaling.factor", 0.0f, &factor, err, cap))) return rc;
    char st[32] = "";
    char k[128];
    (void)kvq_gguf_get_cstr(g, akey(k, sizeof k, c, "rope.scaling.type"), st, sizeof st);
    if (st[0] && strcmp(st, "linear") && strcmp(st, "none"))
        return fail(err, cap, KVQ_ERR_UNSUPPORTED, "rope scaling '%s' is not supported", st);
    c->rope_freq_scale = (factor > 0.0f && strcmp(st, "none")) ? 1.0f / factor : 1.0f;
    if ((rc = get_float(g, c, "final_logit_softcapping", 0.0f, &c->final_softcap, err, cap))) return rc;
    if (c->rope_base <= 0.0f || c->norm_eps <= 0.0f || c->final_softcap < 0.0f)
        return fail(err, cap, KVQ_ERR_FORMAT, "invalid rope base / eps / softcap");

    c->rope_base_swa = c->rope_base;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->embd_scale = 1.0f;
    c->act = KVQ_ACT_SILU;
    c->rope_type = KVQ_ROPE_NORM;
    c->qk_norm = c->post_norms = c->qkv_bias = 0;
    c->n_swa = 0;
    memset(c->sliding_window, 0, sizeof c->sliding_window);
    switch (c->arch) {
    case KVQ_ARCH_LLAMA: break;
    case KVQ_ARCH_QWEN2:
        c->rope_type = KVQ_ROPE_NEOX;
        c->qkv_bias = 1;
        break;
    case KVQ_ARCH_GEMMA3: {
        c->rope_type = KVQ_ROPE_NEOX;
        c->qk_norm = c->post_norms = 1;
        c->act = KVQ_ACT_GELU_TANH;
        c->embd_scale = sqrtf((float)c->n_embd);
        c->rope_base_swa = 10000.0f;
        if (c->n_layers == 62) c->attn_scale = 1.0f / sqrtf((float)(c->n_embd / c->n_head));
        if ((rc = get_int(g, c, "attention.sliding_window", -1, &c->n_swa, err, cap))) return rc;
        if (c->n_swa < 1) return fail(err, cap, KVQ_ERR_FORMAT, "sliding window %d", c->n_swa);
        /* pattern: llama.cpp's set_swa_pattern(6) unless the file says otherwise */
        const kvq_gguf_kv *pat = kvq_gguf_find_kv(g, akey(k, sizeof k, c, "attention.sliding_window_pattern"));
        for (int l = 0; l < c->n_layers; l++) c->sliding_window[l] = (l % 6 < 5) ? c->n_swa : 0;
        if (pat && pat->type == GGUF_TYPE_ARRAY) {
            if (pat->v.arr.n != (uint64_t)c->n_layers)
                return fail(err, cap, KVQ_ERR_FORMAT, "sliding_window_pattern has %llu entries for %d layers",
                            (unsigned long long)pat->v.arr.n, c->n_layers);
            for (int l = 0; l < c->n_layers; l++) {
                int64_t v;
                if ((rc = kvq_gguf_arr_i64(pat, (uint64_t)l, &v)))
                    return fail(err, cap, rc, "sliding_window_pattern entry %d", l);
                c->sliding_window[l] = v ? c->n_swa : 0;
            }
        } else if (pat) {
            uint32_t p;
            if ((rc = kvq_gguf_get_u32(g, k, &p)) || p < 1) return fail(err, cap, KVQ_ERR_FORMAT, "bad %s", k);
            for (int l = 0; l < c->n_layers; l++) c->sliding_window[l] = (l % (int)p < (int)p - 1) ? c->n_swa : 0;
        }
        break;
    }
    }
    return KVQ_OK;
}

/* ---- tensors ------------------------------------------------------------- */
/*
 * Tensors are loaded in two passes: the first (dry) checks every tensor's
 * presence, shape and type and counts the floats of the 1-D vectors; only
 * then is the owned buffer allocated (exactly that size) and the second
 * pass converts. The hyperparameters alone never size an allocation: a
 * hostile file claiming a huge embedding_length is refused by a shape check
 * instead of asking for gigabytes first.
 */
typedef struct {
    kvq_model *m;
    char *err;
    size_t cap;
    int dry;           /* 1: check and count only */
    size_t n_owned;    /* dry: floats the vectors need */
    float *owned_next; /* !dry: where the next vector goes */
} loader;

/*
 * A kvq-coded matrix written by kvq quantize (docs/FORMAT.md "Coded weights
 * in GGUF"): the codes stay in the mapping; the plans are built once, from
 * kvq.weights.spec / kvq.weights.seed and, for a calibrated spec (version 3:
 * f16 stats, version 2: f32), the stats tensor of the matrix, and give the size the file must hold. The
 * dry pass checks the keys and the shape only.
 */
static int get_coded(loader *L, const char *name, const kvq_gguf_tensor *t, int64_t rows, int64_t cols,
                     kvq_ggml_matrix *out) {
    const kvq_gguf_file *g = L->m->gguf;
    uint32_t ver = 0;
    char wspec[64] = "", spec[64], why[256] = "";
    int64_t seed = 0;
    int block = 0, needs = 0, rc = kvq_gguf_get_u32(g, "kvq.weights.version", &ver);
    if (rc || ver < 1 || ver > 3)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT,
                    "tensor %s is kvq-coded but kvq.weights.version is %s (this reader: 1, 2, 3)", name,
                    rc ? "missing" : "another");
    if (kvq_gguf_get_cstr(g, "kvq.weights.spec", wspec, sizeof wspec) ||
        kvq_gguf_get_i64(g, "kvq.weights.seed", &seed) || seed < 0)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s is kvq-coded but kvq.weights.spec / .seed are missing",
                    name);
    if ((rc = kvq_wmat_parse_spec(wspec, spec, sizeof spec, &block, why, sizeof why)))
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "kvq.weights.spec: %s", why);
    if (!block) block = kvq_wmat_default_block(cols);
    if (block < KVQ_DIM_MIN || block > KVQ_DIM_MAX || block % 8 || cols % block ||
        kvq_spec_needs_calibration(spec, &needs))
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s: kvq.weights.spec '%s' does not fit rows of %lld values",
                    name, wspec, (long long)cols);
    if (needs != (ver >= 2))
        return fail(L->err, L->cap, KVQ_ERR_FORMAT,
                    "tensor %s: kvq.weights.version %u but spec '%s' is %scalibrated (versions 2 and 3: calibrated "
                    "plans with f32 / f16 stats tensors, 1: plain)", name, ver, wspec, needs ? "" : "not ");
    out->type = GGML_TYPE_F32; /* unused: the engine computes with out->coded */
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = 0;
    if (L->dry) return KVQ_OK;
    void *stats = NULL;
    size_t ns = 0, es = 0; /* stats values, bytes each */
    if (needs) { /* the plans' stats: version 2 f32 [per, nb], version 3 f16 [stored per, nb] */
        char sname[80];
        size_t per = 0;
        const int nb = (int)(cols / block);
        const int ty = ver == 3 ? GGML_TYPE_F16 : GGML_TYPE_F32;
        const kvq_gguf_tensor *st = NULL;
        if (kvq_spec_stats_floats(spec, block, &per) || kvq_stats_tensor_name(name, strlen(name), sname, sizeof sname))
            return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s: no stats layout for '%s'", name, wspec);
        if (ver == 3) per = kvq_wmat_stored_per(spec, block); /* +chscale: no inverse scales */
        es = ver == 3 ? 2 : 4;
        if (!(st = kvq_gguf_find_tensor(g, sname)))
            return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s (calibrated '%s'): its stats tensor %s is missing",
                        name, wspec, sname);
        if ((int)st->type != ty || st->n_dims != 2 || st->ne[0] != per || st->ne[1] != (uint64_t)nb || !st->data)
            return fail(L->err, L->cap, KVQ_ERR_FORMAT,
                        "stats tensor %s is %s [%llu, %llu], expected %s [%zu, %d] ('%s' in blocks of %d, version %u)",
                        sname, kvq_ggml_type_name(st->type), (unsigned long long)st->ne[0],
                        (unsigned long long)(st->n_dims > 1 ? st->ne[1] : 1), kvq_ggml_type_name(ty), per, nb, spec,
                        block, ver);
        ns = per * (size_t)nb;
        if (!(stats = malloc(es * ns))) return fail(L->err, L->cap, KVQ_ERR_NOMEM, "out of memory");
        memcpy(stats, st->data, es * ns); /* the mapping need not be aligned */
    }
    kvq_wmat *w = NULL;
    if (ver == 3)
        rc = kvq_wmat_for_codes16(&w, rows, cols, spec, block, (uint64_t)seed, stats, ns, why, sizeof why);
    else
        rc = kvq_wmat_for_codes(&w, rows, cols, spec, block, (uint64_t)seed, stats, ns, why, sizeof why);
    free(stats);
    if (rc)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s: kvq.weights.spec '%s'%s: %s", name, wspec,
                    needs ? " and its stats" : "", why);
    uint64_t n_bytes = kvq_wmat_code_bytes(w);
    const void *codes = kvq_gguf_tensor_span(g, t, n_bytes);
    if (!codes) {
        kvq_wmat_free(w);
        return fail(L->err, L->cap, KVQ_ERR_TRUNCATED, "tensor %s: %llu bytes of codes are not all in the file", name,
                    (unsigned long long)n_bytes);
    }
    if ((rc = kvq_wmat_set_codes(w, codes, (size_t)n_bytes, why, sizeof why))) { /* the size it just asked for */
        kvq_wmat_free(w);
        return fail(L->err, L->cap, rc, "tensor %s: %s", name, why);
    }
    out->data = codes;
    if ((rc = kvq_model_adopt_wmat(L->m, w, name))) return fail(L->err, L->cap, rc, "out of memory");
    out->coded = w;
    L->m->n_weight_bytes += n_bytes + (uint64_t)kvq_wmat_stats_bytes(w);
    L->m->weights_seed = (uint64_t)seed;
    snprintf(L->m->weights_spec, sizeof L->m->weights_spec, "%s", wspec);
    return KVQ_OK;
}

static int get_matrix(loader *L, const char *fmt, int layer, int64_t rows, int64_t cols, kvq_ggml_matrix *out,
                      int required) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    const kvq_gguf_tensor *t = kvq_gguf_find_tensor(L->m->gguf, name);
    if (!t) {
        if (!required) return GGUF_NOT_FOUND;
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "missing tensor %s", name);
    }
    if (t->n_dims != 2 || (int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
                    (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)cols, (long long)rows);
    if (t->type == KVQ_GGUF_TYPE_CODES) return get_coded(L, name, t, rows, cols, out);
    if (!kvq_ggml_type_supported((kvq_ggml_type)t->type) || !t->size_known)
        return fail(L->err, L->cap, KVQ_ERR_UNSUPPORTED, "tensor %s has unsupported type %s (%u)", name,
                    kvq_ggml_type_name(t->type), t->type);
    if (kvq_ggml_type_uses_q8a((kvq_ggml_type)t->type) && cols % 32)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s: row length %lld", name, (long long)cols);
    out->data = t->data;
    out->type = (kvq_ggml_type)t->type;
    out->rows = rows;
    out->cols = cols;
    out->row_bytes = kvq_ggml_row_bytes(out->type, cols);
    if (!L->dry) {
        L->m->n_weight_bytes += t->n_bytes;
        L->m->type_count[t->type]++;
    }
    return KVQ_OK;
}

/* A 1-D tensor of n values, converted to f32 into the owned buffer. */
static int get_vector(loader *L, const char *fmt, int layer, int64_t n, const float **out, int required) {
    char name[128];
    snprintf(name, sizeof name, fmt, layer);
    const kvq_gguf_tensor *t = kvq_gguf_find_tensor(L->m->gguf, name);
    *out = NULL;
    if (!t) {
        if (!required) return GGUF_NOT_FOUND;
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "missing tensor %s", name);
    }
    if (t->n_elems != (uint64_t)n || t->ne[0] != (uint64_t)n)
        return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s has %llu values, expected %lld", name,
                    (unsigned long long)t->n_elems, (long long)n);
    if (!kvq_ggml_type_supported((kvq_ggml_type)t->type) || !t->size_known)
        return fail(L->err, L->cap, KVQ_ERR_UNSUPPORTED, "tensor %s has unsupported type %s", name,
                    kvq_ggml_type_name(t->type));
    if (L->dry) { /* n <= the tensor's elements, which the file holds */
        L->n_owned += (size_t)n;
        return KVQ_OK;
    }
    int rc = kvq_ggml_dequant_row((kvq_ggml_type)t->type, t->data, L->owned_next, n);
    if (rc) return fail(L->err, L->cap, rc, "tensor %s cannot be read", name);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(L->owned_next[i])) return fail(L->err, L->cap, KVQ_ERR_FORMAT, "tensor %s is not finite", name);
    *out = L->owned_next;
    L->owned_next += n;
    L->m->n_weight_bytes += t->n_bytes;
    L->m->type_count[t->type]++;
    return KVQ_OK;
}

static int load_pass(loader *Lp, int64_t V, int64_t E, int64_t F, int64_t Q, int64_t KV);

static int load_tensors(kvq_model *m, char *err, size_t cap) {
    const kvq_model_config *c = &m->cfg;
    const kvq_gguf_file *g = m->gguf;
    int64_t E = c->n_embd, F = c->n_ff, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;

    /* vocabulary size: token_embd's rows (checked against vocab_size when present) */
    const kvq_gguf_tensor *te = kvq_gguf_find_tensor(g, "token_embd.weight");
    if (!te || te->n_dims != 2) return fail(err, cap, KVQ_ERR_FORMAT, "missing or misshaped token_embd.weight");
    if (te->ne[1] < 1 || te->ne[1] > (1u << 30)) return fail(err, cap, KVQ_ERR_FORMAT, "token_embd.weight rows");
    if (c->n_vocab && (uint64_t)c->n_vocab != te->ne[1])
        return fail(err, cap, KVQ_ERR_FORMAT, "vocab_size %d but token_embd has %llu rows", c->n_vocab,
                    (unsigned long long)te->ne[1]);
    m->cfg.n_vocab = (int)te->ne[1];
    int64_t V = m->cfg.n_vocab;

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    /* pass 1: every tensor checked, the owned f32 vectors (norms, biases,
     * output norm, rope freqs) counted; pass 2: converted into m->owned */
    loader L = {m, err, cap, 1, 0, NULL};
    int rc = load_pass(&L, V, E, F, Q, KV);
    if (rc) return rc;
    m->owned = malloc((L.n_owned ? L.n_owned : 1) * sizeof(float));
    if (!m->owned) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    L.dry = 0;
    L.owned_next = m->owned;
    return load_pass(&L, V, E, F, Q, KV);
}

static int load_pass(loader *Lp, int64_t V, int64_t E, int64_t F, int64_t Q, int64_t KV) {
    loader L = *Lp;
    kvq_model *m = L.m;
    const kvq_model_config *c = &m->cfg;
    int rc;
    m->tied_output = 0;
    if ((rc = get_matrix(&L, "token_embd.weight", 0, V, E, &m->tok_embd, 1))) return rc;
    rc = get_matrix(&L, "output.weight", 0, V, E, &m->output, 0);
    if (rc == GGUF_NOT_FOUND) { m->output = m->tok_embd; m->tied_output = 1; }
    else if (rc) return rc;
    if ((rc = get_vector(&L, "output_norm.weight", 0, E, &m->output_norm, 1))) return rc;
    rc = get_vector(&L, "rope_freqs.weight", 0, c->n_rot / 2, &m->rope_freqs, 0);
    if (rc < 0) return rc;

    for (int l = 0; l < c->n_layers; l++) {
        kvq_layer *y = &m->layers[l];
        if ((rc = get_vector(&L, "blk.%d.attn_norm.weight", l, E, &y->attn_norm, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.attn_q.weight", l, Q, E, &y->wq, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.attn_k.weight", l, KV, E, &y->wk, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.attn_v.weight", l, KV, E, &y->wv, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.attn_output.weight", l, E, Q, &y->wo, 1))) return rc;
        if ((rc = get_vector(&L, "blk.%d.ffn_norm.weight", l, E, &y->ffn_norm, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.ffn_gate.weight", l, F, E, &y->w_gate, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.ffn_up.weight", l, F, E, &y->w_up, 1))) return rc;
        if ((rc = get_matrix(&L, "blk.%d.ffn_down.weight", l, E, F, &y->w_down, 1))) return rc;
        if (c->qkv_bias) {
            if ((rc = get_vector(&L, "blk.%d.attn_q.bias", l, Q, &y->bq, 1))) return rc;
            if ((rc = get_vector(&L, "blk.%d.attn_k.bias", l, KV, &y->bk, 1))) return rc;
            if ((rc = get_vector(&L, "blk.%d.attn_v.bias", l, KV, &y->bv, 1))) return rc;
        }
        if (c->qk_norm) {
            if ((rc = get_vector(&L, "blk.%d.attn_q_norm.weight", l, c->head_dim, &y->q_norm, 1))) return rc;
            if ((rc = get_vector(&L, "blk.%d.attn_k_norm.weight", l, c->head_dim, &y->k_norm, 1))) return rc;
        }
        if (c->post_norms) {
            if ((rc = get_vector(&L, "blk.%d.post_attention_norm.weight", l, E, &y->post_attn_norm, 1))) return rc;
            if ((rc = get_vector(&L, "blk.%d.post_ffw_norm.weight", l, E, &y->post_ffw_norm, 1))) return rc;
        }
    }
    *Lp = L;
    return KVQ_OK;
}

int kvq_model_from_gguf(kvq_model **out, kvq_gguf_file *g, char *err, size_t err_cap) {
    if (!out || !g) return KVQ_ERR_NULL;
    kvq_model *m = calloc(1, sizeof *m);
    if (!m) return KVQ_ERR_NOMEM;
    m->gguf = g;
    int rc = read_config(g, &m->cfg, err, err_cap);
    if (!rc) rc = load_tensors(m, err, err_cap);
    if (!rc && kvq_gguf_find_kv(g, "tokenizer.ggml.model")) {
        rc = kvq_tok_create_from_gguf(&m->tok, g);
        if (rc) fail(err, err_cap, rc, "tokenizer: %s", kvq_strerror(rc));
        /* ids the embedding has no row for could not be evaluated (fewer
         * tokens than rows is fine: padded vocabularies) */
        else if (kvq_tok_n_tokens(m->tok) > (size_t)m->cfg.n_vocab)
            rc = fail(err, err_cap, KVQ_ERR_FORMAT, "the tokenizer has %zu tokens but token_embd.weight %d rows",
                      kvq_tok_n_tokens(m->tok), m->cfg.n_vocab);
    }
    if (rc) {
        m->gguf = NULL; /* not taken on failure */
        kvq_model_free(m);
        return rc;
    }
    *out = m;
    return KVQ_OK;
}

int kvq_model_load(kvq_model **out, const char *path, char *err, size_t err_cap) {
    if (!out || !path) return KVQ_ERR_NULL;
    kvq_gguf_file *g = NULL;
    int rc = kvq_gguf_open(&g, path);
    if (rc) return kvq_open_reason(path, rc, err, err_cap);
    rc = kvq_model_from_gguf(out, g, err, err_cap);
    if (rc) kvq_gguf_close(g);
    else kvq_gguf_prefault(g);
    return rc;
}

void kvq_model_free(kvq_model *m) {
    if (!m) return;
    kvq_tok_free(m->tok);
    kvq_model_free_weights(m);
    free(m->layers);
    free(m->owned);
    kvq_gguf_close(m->gguf);
    free(m);
}
