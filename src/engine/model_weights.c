/*
 * kvq_model_quantize_weights: the model's matrices re-coded with a kvq codec
 * (wmat.h) at load time. Every 2-D weight of the blocks (attn_q/k/v/output,
 * ffn_gate/up/down) and token_embd / output unless kept; the source (the
 * file's own type, dequantized) stays mapped and is what gets coded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errfmt.h"
#include "model.h"
#include "wmat.h"

#define fail kvq_errf

/* 1 if an item of the comma-separated keep list names part of the tensor
 * name: it occurs starting at the name's start or after a '.', and ends at
 * the end, a '.' or a '_' ("output" keeps output.weight, not
 * blk.0.attn_output.weight; "ffn" keeps every ffn_*; "blk.3" layer 3). */
static int kept(const char *name, const char *keep) {
    const char *p = keep;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        for (const char *s = name; n && *s; s++) {
            if (s != name && s[-1] != '.') continue;
            if (strncmp(s, p, n)) continue;
            char after = s[n];
            if (!after || after == '.' || after == '_') return 1;
        }
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

typedef struct {
    kvq_ggml_matrix *mat;
    char name[64];
} named_matrix;

/* The matrices in file order: token_embd, output (untied), then per layer. */
static int list_matrices(kvq_model *m, named_matrix *out, int cap) {
    int n = 0;
#define ADD(M, ...)                                                                 \
    do {                                                                            \
        if (n < cap) {                                                              \
            out[n].mat = (M);                                                       \
            snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                 \
        }                                                                           \
        n++;                                                                        \
    } while (0)
    ADD(&m->tok_embd, "token_embd.weight");
    if (!m->tied_output) ADD(&m->output, "output.weight");
    for (int l = 0; l < m->cfg.n_layers; l++) {
        kvq_layer *L = &m->layers[l];
        ADD(&L->wq, "blk.%d.attn_q.weight", l);
        ADD(&L->wk, "blk.%d.attn_k.weight", l);
        ADD(&L->wv, "blk.%d.attn_v.weight", l);
        ADD(&L->wo, "blk.%d.attn_output.weight", l);
        ADD(&L->w_gate, "blk.%d.ffn_gate.weight", l);
        ADD(&L->w_up, "blk.%d.ffn_up.weight", l);
        ADD(&L->w_down, "blk.%d.ffn_down.weight", l);
    }
#undef ADD
    return n;
}

int kvq_model_quantize_weights(kvq_model *m, const char *wspec, const char *keep, uint64_t seed, kvq_pool *pool,
                               char *err, size_t cap) {
    if (!m || !wspec) return KVQ_ERR_NULL;
    if (m->n_wmats) return fail(err, cap, KVQ_ERR_INVALID_ARG, "the weights are already coded (%s)", m->weights_spec);
    if (!keep) keep = KVQ_WEIGHTS_KEEP_DEFAULT;
    if (!strcmp(keep, "none")) keep = "";
    char spec[64];
    int block = 0;
    int rc = kvq_wmat_parse_spec(wspec, spec, sizeof spec, &block, err, cap);
    if (rc) return rc;

    int n = list_matrices(m, NULL, 0);
    named_matrix *list = calloc((size_t)n, sizeof *list);
    kvq_wmat **w = calloc((size_t)n, sizeof *w);
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    if (!list || !w || !names) {
        free(list);
        free(w);
        free(names);
        return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    }
    list_matrices(m, list, n);
    int nw = 0;
    char why[256] = "";
    for (int i = 0; i < n && !rc; i++) {
        if (kept(list[i].name, keep)) continue;
        rc = kvq_wmat_create(&w[nw], list[i].mat, spec, block, seed, pool, why, sizeof why);
        if (rc) fail(err, cap, rc, "%s (%lld x %lld): %s", list[i].name, (long long)list[i].mat->rows,
                     (long long)list[i].mat->cols, why);
        else nw++;
    }
    if (rc) { /* nothing of the model changed */
        for (int i = 0; i < nw; i++) kvq_wmat_free(w[i]);
        free(w);
        free(names);
        free(list);
        return rc;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (kept(list[i].name, keep)) continue;
        kvq_ggml_matrix *mat = list[i].mat;
        m->n_weight_bytes -= (size_t)mat->rows * mat->row_bytes;
        m->n_weight_bytes += kvq_wmat_code_bytes(w[k]) + kvq_wmat_stats_bytes(w[k]);
        m->type_count[mat->type]--;
        snprintf(names[k], sizeof names[k], "%s", list[i].name);
        mat->coded = w[k++];
    }
    if (m->tied_output) m->output.coded = m->tok_embd.coded;
    m->wmats = w;
    m->wmat_names = names;
    m->n_wmats = nw;
    m->n_coded_tensors = nw;
    m->weights_seed = seed;
    if (block) snprintf(m->weights_spec, sizeof m->weights_spec, "%.48s@%d", spec, block);
    else snprintf(m->weights_spec, sizeof m->weights_spec, "%.48s", spec);
    free(list);
    return KVQ_OK;
}

void kvq_model_free_weights(kvq_model *m) {
    for (int i = 0; i < m->n_wmats; i++) kvq_wmat_free(m->wmats[i]);
    free(m->wmats);
    free(m->wmat_names);
    m->wmats = NULL;
    m->wmat_names = NULL;
    m->n_wmats = 0;
}

int kvq_model_adopt_wmat(kvq_model *m, kvq_wmat *w, const char *name) {
    kvq_wmat **nw = realloc(m->wmats, sizeof *nw * (size_t)(m->n_wmats + 1));
    if (!nw) { kvq_wmat_free(w); return KVQ_ERR_NOMEM; }
    m->wmats = nw;
    char(*nn)[64] = realloc(m->wmat_names, sizeof *nn * (size_t)(m->n_wmats + 1));
    if (!nn) { kvq_wmat_free(w); return KVQ_ERR_NOMEM; }
    m->wmat_names = nn;
    snprintf(nn[m->n_wmats], sizeof nn[m->n_wmats], "%s", name);
    m->wmats[m->n_wmats++] = w;
    m->n_coded_tensors = m->n_wmats;
    return KVQ_OK;
}

int kvq_stats_tensor_name(const char *name, size_t n, char *out, size_t cap) {
    if (n >= cap) return -1;
    if (n >= 7 && !memcmp(name + n - 7, ".weight", 7)) n -= 7;
    int k = snprintf(out, cap, "%.*s%s", (int)n, name, KVQ_STATS_SUFFIX);
    return k < 0 || (size_t)k >= cap ? -1 : 0;
}

int kvq_is_stats_tensor(const char *name, size_t n) {
    const size_t k = sizeof KVQ_STATS_SUFFIX - 1;
    return n >= k && !memcmp(name + n - k, KVQ_STATS_SUFFIX, k);
}
