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
#include "args.h"
#include "policy.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq logits -m MODEL --tokens ID,ID,... -o OUT.f32 [options]\n"
            "  writes n_tokens x n_vocab float32 logits (row-major) of the tokens run as one batch\n"
            "  --acts f32|q8       activations of quantized-weight products: f32 (default: weights\n"
            "                      dequantized, no activation rounding) or int8 per 32 values (fast path)\n"
            "  -t, --threads T     threads, 1..256 (default 2)\n"
            "  -b, --batch N       tokens per forward chunk (default 0: all)\n");
    tool_policy_args_usage(f);
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *toks = NULL, *outp = NULL, *acts = "f32";
    int threads = 2, batch = 0;
    tool_policy_args pa;
    tool_policy pol;
    tool_policy_args_init(&pa);
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &model},
        {.names = "--tokens", .kind = TOOL_ARG_STR, .dst = &toks},
        {.names = "-o|--output", .kind = TOOL_ARG_STR, .dst = &outp},
        {.names = "--acts", .kind = TOOL_ARG_CHOICE, .dst = &acts, .choices = "f32|q8"},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &threads, .min = 1, .max = 256},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_INT, .dst = &batch, .min = 0, .max = 1 << 24},
        {0}};
    const tool_opt *tables[] = {opts, tool_policy_args_table(&pa), NULL};
    const tool_cmd cmd = {.name = "logits", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    char perr[1024];
    if (tool_policy_args_build(&pa, &pol, perr, sizeof perr)) return tool_usage_error("logits", "%s", perr);
    if (!model || !toks || !outp) return tool_usage_error("logits", "-m MODEL, --tokens ID,ID,... and -o OUT.f32 are required");

    int cap = 1;
    for (const char *p = toks; *p; p++) cap += *p == ',';
    long *ids = malloc(sizeof(long) * (size_t)cap);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)cap);
    int n = ids && tokens ? tool_parse_long_list(toks, 0, INT32_MAX, ids, cap, perr, sizeof perr) : -1;
    if (n <= 0) {
        free(ids);
        free(tokens);
        return tool_usage_error("logits", "--tokens %s", ids ? perr : "out of memory");
    }

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
    if (tool_policy_session_params(&pol, mi.n_layers, &p, perr, sizeof perr)) {
        fprintf(stderr, "kvq logits: %s\n", perr);
        kvq_model_free(m);
        free(ids);
        free(tokens);
        return 2;
    }
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
