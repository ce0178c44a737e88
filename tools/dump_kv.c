/*
 * kvq dump-kv: runs a text through a model and writes the real keys (after
 * RoPE) and values of every layer as vector files (docs/FORMAT.md), ordered
 * (layer, token, head), for codec-bench / attn-bench; with --queries also the
 * queries (after their norm and RoPE), to study how the cache's errors meet
 * real queries (scripts/key_error.py).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "vecfile.h"
#include "args.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq dump-kv [-m MODEL] -f TEXT -o OUT [options]\n"
            "  writes OUT.k.vec (keys, after RoPE) and OUT.v.vec (values): every layer's K/V vectors\n"
            "  for the tokens of TEXT, ordered (layer, token, head), head_dim values each\n"
            "  --max-tokens N    tokens of TEXT to use (default 2048)\n"
            "  --layers LIST     only these layers (comma-separated; default all)\n"
            "  --dtype f32|f16   element type in the files (default f32)\n"
            "  --queries         also write OUT.q.vec (queries, n_head per token)\n"
            "  -t, --threads T   threads, 1..256 (default 2)\n");
}

typedef struct {
    int n_layers, kv, qw;    /* layers of the model, n_head_kv * head_dim, n_head * head_dim */
    size_t max_tok;
    const int *keep;         /* (n_layers) 1 if the layer is dumped */
    float **k, **v, **q;     /* per layer: (max_tok, kv), q (max_tok, qw) when dumped */
} dump_state;

static void hook(void *user, int layer, size_t pos0, const float *q, const float *k, const float *v, size_t ntok) {
    dump_state *d = user;
    if (!d->keep[layer] || pos0 >= d->max_tok) return;
    if (pos0 + ntok > d->max_tok) ntok = d->max_tok - pos0;
    memcpy(d->k[layer] + pos0 * (size_t)d->kv, k, ntok * (size_t)d->kv * sizeof(float));
    memcpy(d->v[layer] + pos0 * (size_t)d->kv, v, ntok * (size_t)d->kv * sizeof(float));
    if (d->q) memcpy(d->q[layer] + pos0 * (size_t)d->qw, q, ntok * (size_t)d->qw * sizeof(float));
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) { free(buf); buf = NULL; }
            else buf = b;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int cmd_dump_kv(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *out = NULL, *layers = NULL, *dtype = "f32";
    long max_tokens = 2048;
    int threads = 2, queries = 0;
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &model},
        {.names = "-f|--file", .kind = TOOL_ARG_STR, .dst = &text_path},
        {.names = "-o|--output", .kind = TOOL_ARG_STR, .dst = &out},
        {.names = "--max-tokens", .kind = TOOL_ARG_LONG, .dst = &max_tokens, .min = 1, .max = 1 << 24},
        {.names = "--layers", .kind = TOOL_ARG_STR, .dst = &layers},
        {.names = "--dtype", .kind = TOOL_ARG_CHOICE, .dst = &dtype, .choices = "f32|f16"},
        {.names = "--queries", .kind = TOOL_ARG_SET, .dst = &queries},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &threads, .min = 1, .max = 256},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "dump-kv", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if (!text_path || !out) return tool_usage_error("dump-kv", "-f TEXT and -o OUT are required");
    char def[4096];
    if (!model) {
        if (tool_default_model(def, sizeof def, 1)) { fprintf(stderr, "kvq dump-kv: no model\n"); return 1; }
        model = def;
    }
    size_t tlen = 0;
    char *text = read_file(text_path, &tlen);
    if (!text) { fprintf(stderr, "kvq dump-kv: %s: %s\n", text_path, strerror(errno)); return 1; }

    char err[256] = "";
    kvq_model *m = NULL;
    kvq_pool *pool = NULL;
    kvq_session *s = NULL;
    int32_t *ids = NULL;
    int *keep = NULL;
    dump_state d;
    memset(&d, 0, sizeof d);
    int ret = 1, rc = 0;
    if ((rc = kvq_model_load(&m, model, err, sizeof err))) { fprintf(stderr, "kvq dump-kv: %s\n", err); free(text); return 1; }
    kvq_model_info c_info;
    kvq_model_get_info(m, &c_info);
    const kvq_model_info *c = &c_info;
    if (!c->has_tokenizer) { rc = KVQ_ERR_UNSUPPORTED; goto done; }
    size_t cap = tlen + 16, n = 0;
    ids = malloc(sizeof(int32_t) * cap);
    if (!ids) { rc = KVQ_ERR_NOMEM; goto done; }
    if ((rc = kvq_tokenize(m, text, tlen, 1, 0, ids, cap, &n))) goto done;
    if (n > (size_t)max_tokens) n = (size_t)max_tokens;
    if (n == 0) { fprintf(stderr, "kvq dump-kv: the text has no tokens\n"); goto done; }

    keep = calloc((size_t)c->n_layers, sizeof(int));
    d.k = calloc((size_t)c->n_layers, sizeof(float *));
    d.v = calloc((size_t)c->n_layers, sizeof(float *));
    if (queries) d.q = calloc((size_t)c->n_layers, sizeof(float *));
    if (!keep || !d.k || !d.v || (queries && !d.q)) { rc = KVQ_ERR_NOMEM; goto done; }
    if (layers) {
        long list[KVQ_MAX_LAYERS];
        char lerr[256];
        int nl = tool_parse_long_list(layers, 0, c->n_layers - 1, list, KVQ_MAX_LAYERS, lerr, sizeof lerr);
        if (nl <= 0) { fprintf(stderr, "kvq dump-kv: --layers %s (the model has layers 0..%d)\n", lerr, c->n_layers - 1); goto done; }
        for (int i = 0; i < nl; i++) {
            keep[list[i]] = 1;
        }
    } else {
        for (int l = 0; l < c->n_layers; l++) keep[l] = 1;
    }
    int n_keep = 0;
    d.n_layers = c->n_layers;
    d.kv = c->n_head_kv * c->head_dim;
    d.qw = c->n_head * c->head_dim;
    d.max_tok = n;
    d.keep = keep;
    for (int l = 0; l < c->n_layers; l++) {
        if (!keep[l]) continue;
        n_keep++;
        d.k[l] = malloc(n * (size_t)d.kv * sizeof(float));
        d.v[l] = malloc(n * (size_t)d.kv * sizeof(float));
        if (d.q) d.q[l] = malloc(n * (size_t)d.qw * sizeof(float));
        if (!d.k[l] || !d.v[l] || (d.q && !d.q[l])) { rc = KVQ_ERR_NOMEM; goto done; }
    }
    kvq_session_params p = kvq_session_default_params();
    p.k_spec = "f32"; /* the cache only has to serve attention; f32 never refuses a value */
    p.v_spec = "f32";
    p.kv_hook = hook;
    p.kv_hook_user = &d;
    if ((rc = kvq_pool_create(&pool, threads))) goto done;
    if ((rc = kvq_session_create(&s, m, &p, pool))) goto done;
    double t0 = tool_now();
    if ((rc = kvq_session_eval(s, ids, n, NULL, 0))) goto done;
    double t1 = tool_now();

    /* (layer, token, head) order: the dumped layers one after the other */
    float *all = malloc(n * (size_t)(d.q ? d.qw : d.kv) * (size_t)n_keep * sizeof(float));
    if (!all) { rc = KVQ_ERR_NOMEM; goto done; }
    for (int kind = 1; kind <= (d.q ? 3 : 2); kind++) { /* keys, values, queries */
        const int heads = kind == 3 ? c->n_head : c->n_head_kv;
        const size_t per_layer = n * (size_t)heads * (size_t)c->head_dim;
        size_t off = 0;
        for (int l = 0; l < c->n_layers; l++) {
            if (!keep[l]) continue;
            memcpy(all + off, kind == 1 ? d.k[l] : kind == 2 ? d.v[l] : d.q[l], per_layer * sizeof(float));
            off += per_layer;
        }
        kvq_vecfile_info info;
        memset(&info, 0, sizeof info);
        info.dim = (uint32_t)c->head_dim;
        info.count = (uint64_t)n * (uint64_t)heads * (uint64_t)n_keep;
        info.dtype = !strcmp(dtype, "f16") ? KVQ_DTYPE_F16 : KVQ_DTYPE_F32;
        info.layers = (uint32_t)n_keep;
        info.heads = (uint32_t)heads;
        info.kind = (uint32_t)kind;
        char path[4096];
        snprintf(path, sizeof path, "%s.%s.vec", out, kind == 1 ? "k" : kind == 2 ? "v" : "q");
        if ((rc = kvq_vecfile_write(path, &info, all))) {
            fprintf(stderr, "kvq dump-kv: %s: %s\n", path, kvq_strerror(rc));
            free(all);
            goto done;
        }
        fprintf(stderr, "kvq dump-kv: %s: %llu vectors of %d (%d layers x %zu tokens x %d heads)\n", path,
                (unsigned long long)info.count, c->head_dim, n_keep, n, heads);
    }
    free(all);
    fprintf(stderr, "kvq dump-kv: %zu tokens through %s in %.2f s\n", n, c->arch, t1 - t0);
    ret = 0;
done:
    if (rc && ret) fprintf(stderr, "kvq dump-kv: %s\n", kvq_strerror(rc));
    if (d.k)
        for (int l = 0; l < c->n_layers; l++) { free(d.k[l]); free(d.v[l]); if (d.q) free(d.q[l]); }
    free(d.k);
    free(d.v);
    free(d.q);
    free(keep);
    free(ids);
    free(text);
    kvq_session_free(s);
    kvq_pool_free(pool);
    kvq_model_free(m);
    return ret;
}
