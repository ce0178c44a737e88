/*
 * kvq logits: all-position logits of a token sequence processed as one
 * prefill batch, written as n_tokens x n_vocab float32 (row-major, native
 * little-endian). Contract with tests/test_ref_logits.py.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq logits -m MODEL --tokens ID,ID,... -o OUT.f32 [options]\n"
            "  writes n_tokens x n_vocab float32 logits (row-major) of the tokens run as one batch\n"
            "  --cache-k SPEC      key cache method (default f16)\n"
            "  --cache-v SPEC      value cache method (default f16)\n"
            "  --kv-window W       keep the W most recent tokens in f16\n"
            "  --kv-f16-layers L   comma-separated layers kept in f16\n"
            "  --acts f32|q8       activations of quantized-weight products: f32 (default: weights\n"
            "                      dequantized, no activation rounding) or int8 per 32 values (fast path)\n"
            "  --threads T         threads (default 2)\n"
            "  --batch N           tokens per forward chunk (default: all)\n");
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *toks = NULL, *outp = NULL, *ck = NULL, *cv = NULL, *acts = "f32";
    int threads = 2, window = 0, batch = 0, f16l[64], nf16l = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!v) { fprintf(stderr, "kvq logits: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--tokens")) toks = v;
        else if (!strcmp(a, "-o")) outp = v;
        else if (!strcmp(a, "--cache-k")) ck = v;
        else if (!strcmp(a, "--cache-v")) cv = v;
        else if (!strcmp(a, "--acts")) acts = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--kv-window")) window = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--kv-f16-layers")) {
            long ls[64];
            nf16l = tool_parse_int_list(v, ls, 64);
            if (nf16l < 0) { fprintf(stderr, "kvq logits: bad --kv-f16-layers\n"); return 2; }
            for (int j = 0; j < nf16l; j++) f16l[j] = (int)ls[j];
        }
        else { fprintf(stderr, "kvq logits: unknown option %s\n", a); usage(stderr); return 2; }
        i++;
    }
    if (!model || !toks || !outp) { usage(stderr); return 2; }
    if (strcmp(acts, "q8") && strcmp(acts, "f32")) { fprintf(stderr, "kvq logits: --acts q8 or f32\n"); return 2; }
    if (threads < 1 || threads > 256) { fprintf(stderr, "kvq logits: bad --threads\n"); return 2; }

    int cap = 1;
    for (const char *p = toks; *p; p++) cap += *p == ',';
    long *ids = malloc(sizeof(long) * (size_t)cap);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)cap);
    int n = ids && tokens ? tool_parse_int_list(toks, ids, cap) : -1;
    if (n <= 0) { fprintf(stderr, "kvq logits: bad --tokens list\n"); free(ids); free(tokens); return 2; }

    char err[256] = "";
    kvq_model *m = NULL;
    int rc = kvq_model_load(&m, model, err, sizeof err);
    if (rc) { fprintf(stderr, "kvq logits: %s\n", err); free(ids); free(tokens); return 1; }
    kvq_model_info mi;
    kvq_model_get_info(m, &mi);
    const int n_vocab = mi.n_vocab;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            fprintf(stderr, "kvq logits: token %ld out of range (vocabulary %d)\n", ids[i], n_vocab);
            kvq_model_free(m); free(ids); free(tokens);
            return 2;
        }
        tokens[i] = (int32_t)ids[i];
    }
    kvq_pool *pool = NULL;
    kvq_session *s = NULL;
    float *logits = NULL;
    int ret = 1;
    kvq_session_params p = kvq_session_default_params();
    p.k_spec = ck;
    p.v_spec = cv;
    p.f16_window = window;
    p.f16_layers = nf16l ? f16l : NULL;
    p.n_f16_layers = nf16l;
    p.f32_acts = !strcmp(acts, "f32");
    p.n_batch = batch > 0 ? batch : n;
    if ((rc = kvq_pool_create(&pool, threads))) goto done;
    if ((rc = kvq_session_create(&s, m, &p, pool))) goto done;
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) { rc = KVQ_ERR_NOMEM; goto done; }
    double t0 = tool_now();
    if ((rc = kvq_session_eval(s, tokens, (size_t)n, logits, 1))) goto done;
    double t1 = tool_now();
    FILE *f = fopen(outp, "wb");
    if (!f) { fprintf(stderr, "kvq logits: %s: %s\n", outp, strerror(errno)); goto done; }
    size_t cnt = (size_t)n * (size_t)n_vocab;
    if (fwrite(logits, sizeof(float), cnt, f) != cnt || fclose(f) != 0) {
        fprintf(stderr, "kvq logits: write %s failed\n", outp);
        goto done;
    }
    fprintf(stderr, "kvq logits: %d tokens x %d vocab -> %s (%.3f s, kernels %s, acts %s)\n", n, n_vocab, outp,
            t1 - t0, kvq_session_kernels(s), acts);
    ret = 0;
done:
    if (rc) fprintf(stderr, "kvq logits: %s\n", kvq_strerror(rc));
    free(logits);
    kvq_session_free(s);
    kvq_pool_free(pool);
    kvq_model_free(m);
    free(ids);
    free(tokens);
    return ret;
}
