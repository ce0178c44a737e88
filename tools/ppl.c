/*
 * kvq ppl: perplexity of a text with attention reading the (compressed) KV
 * cache. llama.cpp's convention: non-overlapping windows of C tokens, each
 * evaluated from an empty cache (the first token replaced by BOS when the
 * model adds one), the second half of each window scored: positions
 * j = C/2 .. C-2 predict token j+1. The window goes through the cache as a
 * prefill: within an eval call the keys/values of the call are appended (and
 * so compressed) before they are attended, so every score reads compressed
 * K/V. Calls are --batch tokens long (0: the whole window in one call); with
 * no f16 window the results do not depend on it (tests/test_engine.c checks
 * batch/chunk equality), with --kv-window they do (the window then holds the
 * most recent tokens of the call, not of each query).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_util.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq ppl [-m MODEL] -f TEXT [options]\n"
            "  perplexity over non-overlapping windows of C tokens, second half of each scored,\n"
            "  attention reading the compressed cache (prefill included)\n"
            "  -f, --file TEXT        text file (e.g. corpora/prose.txt)\n"
            "  -c, --ctx C            window length in tokens (default 1024)\n"
            "  --chunks N             windows to evaluate (default: all the text holds)\n"
            "  -b, --batch B          tokens per eval call (default 256; 0 = the whole window at once)\n"
            "  --per-window           with --json, also one record per window and policy\n");
    eval_common_usage(f);
}

typedef struct {
    tool_policy pol;
    double *nll;          /* scored positions so far */
    size_t n_nll;
    size_t kv_bytes;      /* largest memory_bytes after a window */
    double bits_k, bits_v, bits_all, seconds;
    size_t tokens_run;
} pol_state;

static void print_json(FILE *f, const char *record, const eval_env *e, const char *text, size_t C, int windows,
                       long window_index, size_t B, const pol_state *ps, int interrupted) {
    double mean, se;
    eval_mean_se(ps->nll, ps->n_nll, &mean, &se);
    double ppl = exp(mean);
    fprintf(f, "{\"tool\":\"ppl\",\"record\":\"%s\",\"model\":", record);
    eval_json_str(f, eval_basename(e->model_path));
    eval_json_weights(f, e);
    fprintf(f, ",\"text\":");
    eval_json_str(f, eval_basename(text));
    fprintf(f, ",\"ctx\":%zu,\"chunks\":%d,", C, windows);
    if (window_index >= 0) fprintf(f, "\"window_index\":%ld,", window_index);
    fprintf(f, "\"batch\":%zu,", B);
    tool_policy_json(&ps->pol, f);
    fprintf(f, ",\"ppl\":");
    eval_json_num(f, ppl);
    fprintf(f, ",\"ppl_se\":");
    eval_json_num(f, ppl * se);
    fprintf(f, ",\"nll\":");
    eval_json_num(f, mean);
    fprintf(f, ",\"tokens\":%zu,\"kv_bytes\":%zu,\"bits_per_value\":", ps->n_nll, ps->kv_bytes);
    eval_json_num(f, 0.5 * (ps->bits_k + ps->bits_v));
    fprintf(f, ",\"bits_k\":");
    eval_json_num(f, ps->bits_k);
    fprintf(f, ",\"bits_v\":");
    eval_json_num(f, ps->bits_v);
    fprintf(f, ",\"bits_per_value_all_layers\":");
    eval_json_num(f, ps->bits_all);
    fprintf(f, ",\"seconds\":");
    eval_json_num(f, ps->seconds);
    fprintf(f, ",\"tok_per_s\":");
    eval_json_num(f, ps->seconds > 0 ? (double)ps->tokens_run / ps->seconds : NAN);
    fprintf(f, ",\"interrupted\":%s,\"partial\":%s}\n", interrupted ? "true" : "false", interrupted ? "true" : "false");
    fflush(f);
}

int cmd_ppl(int argc, char **argv) {
    eval_common co;
    eval_common_init(&co);
    const char *text_path = NULL;
    long ctx = 1024, chunks = 0, batch = 256;
    int per_window = 0;
    const tool_opt opts[] = {
        {.names = "-f|--file", .kind = TOOL_ARG_STR, .dst = &text_path},
        {.names = "--ctx|-c|--ctx-size", .kind = TOOL_ARG_LONG, .dst = &ctx, .min = 8, .max = 1 << 20},
        {.names = "--chunks", .kind = TOOL_ARG_LONG, .dst = &chunks, .min = 0, .max = 1L << 30},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_LONG, .dst = &batch, .min = 0, .max = 65536},
        {.names = "--per-window", .kind = TOOL_ARG_SET, .dst = &per_window},
        {0}};
    const tool_opt *tables[] = {opts, eval_common_table(&co), eval_common_policy_table(&co), NULL};
    const tool_cmd cmd = {.name = "ppl", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if ((pr = eval_common_finish(&co, "ppl"))) return pr;
    if (!text_path) return tool_usage_error("ppl", "-f TEXT is required (a text file, e.g. corpora/prose.txt)");
    tool_policy pols[EVAL_MAX_POLICIES];
    int np = eval_common_policies(&co, pols, EVAL_MAX_POLICIES);

    size_t tlen = 0;
    char *text = eval_read_file(text_path, &tlen);
    if (!text) { fprintf(stderr, "kvq ppl: %s: %s\n", text_path, strerror(errno)); return 1; }
    eval_env e;
    if (eval_env_open(&e, "ppl", co.model, co.threads)) { free(text); return 1; }
    if (eval_env_weights(&e, &co, 0)) { free(text); eval_env_close(&e); return 1; }
    const kvq_model_info *mc = &e.info;
    int ret = 1, rc;
    int32_t *ids = NULL, *win = NULL, *top = NULL;
    float *logits = NULL;
    double *lse = NULL, *nll = NULL;
    pol_state *ps = calloc((size_t)np, sizeof *ps);
    size_t nt = 0;
    if (!ps) goto done;
    if (mc->n_ctx_train > 0 && ctx > mc->n_ctx_train)
        fprintf(stderr, "kvq ppl: warning: --ctx %ld beyond the model's training context %d\n", ctx, mc->n_ctx_train);
    if ((rc = eval_tokenize(e.m, text, tlen, 0, 0, &ids, &nt))) {
        fprintf(stderr, "kvq ppl: tokenize: %s\n", kvq_strerror(rc));
        goto done;
    }
    size_t C = (size_t)ctx, first = C / 2, nwin = nt / C;
    if (chunks > 0 && (size_t)chunks < nwin) nwin = (size_t)chunks;
    if (nwin == 0) { fprintf(stderr, "kvq ppl: %s has %zu tokens, fewer than --ctx %zu\n", text_path, nt, C); goto done; }
    size_t B = (size_t)batch, rows = B == 0 ? C : (B < C - first ? B : C - first);
    eval_call calls[4096];
    int ncalls = eval_window_calls(C, first, B, calls, 4096);
    if (B && (first + B - 1) / B + (C - first + B - 1) / B > 4096) { fprintf(stderr, "kvq ppl: --batch too small\n"); goto done; }
    win = malloc(sizeof(int32_t) * C);
    logits = malloc(sizeof(float) * rows * (size_t)mc->n_vocab);
    lse = malloc(sizeof(double) * rows);
    nll = malloc(sizeof(double) * rows);
    top = malloc(sizeof(int32_t) * rows);
    if (!win || !logits || !lse || !nll || !top) { fprintf(stderr, "kvq ppl: out of memory\n"); goto done; }
    for (int p = 0; p < np; p++) {
        ps[p].pol = pols[p];
        ps[p].nll = malloc(sizeof(double) * nwin * (C - first));
        if (!ps[p].nll) { fprintf(stderr, "kvq ppl: out of memory\n"); goto done; }
        if (eval_policy_bits(&pols[p], mc->head_dim, &ps[p].bits_k, &ps[p].bits_v)) {
            ps[p].bits_k = ps[p].bits_v = NAN;
        }
    }
    char wdesc[256];
    eval_weights_desc(&e, wdesc, sizeof wdesc);
    fprintf(stderr, "kvq ppl: %s, %s: %zu tokens, %zu windows of %zu (scoring %zu per window), %d polic%s, %d threads%s\n",
            eval_basename(e.model_path), eval_basename(text_path), nt, nwin, C, C - first - 1, np,
            np == 1 ? "y" : "ies", co.threads, wdesc);
    eval_sigint_install();
    eval_progress prog;
    eval_progress_init(&prog, "ppl");
    int windows_done = 0;
    double toks = 0;
    for (size_t w = 0; w < nwin && !eval_interrupted(); w++) {
        memcpy(win, ids + w * C, sizeof(int32_t) * C);
        if (e.add_bos) win[0] = e.info.bos;
        for (int p = 0; p < np; p++) {
            kvq_session *s = NULL;
            if ((rc = eval_session(&e, &ps[p].pol, B ? (int)B : (int)C, co.f32_acts, co.seed, NULL, NULL, &s))) goto done;
            size_t n0 = ps[p].n_nll;
            for (int c = 0; c < ncalls; c++) {
                size_t a = calls[c].a, b = calls[c].b;
                double t0 = tool_now();
                rc = kvq_session_eval(s, win + a, b - a, calls[c].logits ? logits : NULL, 1);
                ps[p].seconds += tool_now() - t0;
                if (rc) {
                    fprintf(stderr, "kvq ppl: eval: %s\n", kvq_strerror(rc));
                    kvq_session_free(s);
                    goto done;
                }
                ps[p].tokens_run += b - a;
                toks += (double)(b - a);
                if (calls[c].logits) {
                    /* scored rows: positions j in [max(a, first), min(b, C-1)) */
                    size_t j0 = a > first ? a : first, j1 = b < C - 1 ? b : C - 1;
                    if (j1 > j0) {
                        const float *lg = logits + (j0 - a) * (size_t)mc->n_vocab;
                        if ((rc = eval_logit_stats(e.pool, lg, mc->n_vocab, j1 - j0, win + j0 + 1, lse, top, nll))) {
                            kvq_session_free(s);
                            goto done;
                        }
                        memcpy(ps[p].nll + ps[p].n_nll, nll, sizeof(double) * (j1 - j0));
                        ps[p].n_nll += j1 - j0;
                    }
                }
                char what[64];
                snprintf(what, sizeof what, "window %zu/%zu", w + 1, nwin);
                eval_progress_update(&prog, (double)w * np + p + (double)b / (double)C, (double)nwin * np, toks, what);
            }
            size_t kb = kvq_cache_memory_bytes(kvq_session_cache(s));
            if (kb > ps[p].kv_bytes) ps[p].kv_bytes = kb;
            ps[p].bits_all = eval_cache_bits_all(s, e.m);
            kvq_session_free(s);
            if (co.json && per_window) {
                pol_state one = ps[p];
                one.nll = ps[p].nll + n0;
                one.n_nll = ps[p].n_nll - n0;
                print_json(stdout, "window", &e, text_path, C, 1, (long)w, B, &one, 0);
            }
        }
        windows_done++;
    }
    eval_progress_end(&prog);
    int intr = eval_interrupted();
    if (intr) fprintf(stderr, "kvq ppl: interrupted after %d window(s)\n", windows_done);
    if (co.json) {
        for (int p = 0; p < np; p++) print_json(stdout, "summary", &e, text_path, C, windows_done, -1, B, &ps[p], intr);
    } else {
        printf("model %s, text %s, ctx %zu, %d window(s), %zu scored tokens per policy%s\n\n",
               eval_basename(e.model_path), eval_basename(text_path), C, windows_done, np ? ps[0].n_nll : (size_t)0,
               intr ? " (PARTIAL: interrupted)" : "");
        printf("%-28s %6s %7s %7s %10s %9s %8s %10s %8s\n", "policy", "bits", "bits K", "bits V", "ppl", "+/-", "tokens",
               "KV MiB", "tok/s");
        for (int p = 0; p < np; p++) {
            char name[TOOL_POLICY_NAME];
            tool_policy_name(&ps[p].pol, name, sizeof name);
            double mean, se;
            eval_mean_se(ps[p].nll, ps[p].n_nll, &mean, &se);
            printf("%-28s %6.3f %7.3f %7.3f %10.4f %9.4f %8zu %10.2f %8.1f\n", name, ps[p].bits_all, ps[p].bits_k,
                   ps[p].bits_v, exp(mean),
                   exp(mean) * se, ps[p].n_nll, (double)ps[p].kv_bytes / 1048576.0,
                   ps[p].seconds > 0 ? (double)ps[p].tokens_run / ps[p].seconds : 0.0);
        }
        printf("bits: per cached value over all layers, scales included (f16 and sliding-window layers counted);\n"
               "bits K, bits V: the key and value methods on the compressed layers\n");
        fflush(stdout);
    }
    ret = intr ? TOOL_EXIT_INTERRUPTED : 0;
done:
    if (ps)
        for (int p = 0; p < np; p++) free(ps[p].nll);
    free(ps);
    free(ids);
    free(win);
    free(logits);
    free(lse);
    free(nll);
    free(top);
    free(text);
    eval_env_close(&e);
    return ret;
}
