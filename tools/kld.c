/*
 * kvq kld: how far a compressed cache moves the model from a base cache
 * (f16 or f32) on the same text. Windows and scoring as kvq ppl (llama.cpp
 * convention: non-overlapping windows of C tokens, second half scored). The
 * base session and every tested session run in lockstep, eval call by eval
 * call, on the same tokens; per scored position:
 *   KL(base || tested) of the next-token distributions, top-1 agreement,
 *   the negative log-likelihood of the actual next token under both;
 * and, through the engine's attention hook, for every layer and every
 * position of the window, the relative L2 error of the layer's attention
 * output (all heads, before the output projection) against the base run:
 * |a_test - a_base| / |a_base|, averaged over positions. These errors are
 * end to end (errors of earlier layers propagate into later ones); compare
 * a policy compressing only keys (k=SPEC,v=f16) with one compressing only
 * values to tell which side a bad layer comes from. --isolate runs, for each
 * policy, one session per compressed layer with all other layers in f16 (in
 * the same lockstep): the KLD of that session is what the layer costs on its
 * own, and its error at that layer is free of propagated errors.
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
            "usage: kvq kld [-m MODEL] -f TEXT [options]\n"
            "  KL divergence, top-1 agreement and perplexity of cache policies vs a base cache, plus\n"
            "  per-layer attention-output error; windows as kvq ppl (second half of each scored)\n"
            "  -f, --file TEXT        text file (e.g. corpora/prose.txt)\n"
            "  --base f16|f32         base cache (default f16)\n"
            "  -c, --ctx C            window length in tokens (default 1024)\n"
            "  --chunks N             windows to evaluate (default: all the text holds)\n"
            "  -b, --batch B          tokens per eval call (default 256; 0 = the whole window at once)\n"
            "  --per-window           with --json, also one record per window and policy\n"
            "  --no-layers            do not measure per-layer attention errors\n"
            "  --isolate              for each policy, one run per compressed layer with every other\n"
            "                         layer in f16: the KLD each layer costs on its own and its\n"
            "                         attention error without errors propagated from earlier layers\n"
            "  --test-model PATH      the tested sessions run on another GGUF of the same model (e.g. its\n"
            "                         weights re-quantized); the base runs on -m. With --weights the\n"
            "                         tested sessions run on coded weights (of --test-model, else -m)\n");
    eval_common_usage(f);
}

/* Attention outputs of the base run for the current eval call. */
typedef struct {
    int n_layers, width;
    size_t rows;        /* rows allocated per layer */
    size_t pos0;        /* first position of the call */
    float *att;         /* (n_layers, rows, width) */
} base_store;

typedef struct {
    const base_store *bs;
    double *sum;        /* (n_layers) sum over positions of the relative error */
    double *mx;         /* (n_layers) largest relative error */
    size_t *cnt;        /* (n_layers) positions */
    int mismatch;       /* a call at other positions than the base's */
} test_hook_state;

static void base_hook(void *user, int layer, size_t pos0, const float *att, size_t ntok, int width) {
    base_store *b = user;
    if (layer < 0 || layer >= b->n_layers || width != b->width || ntok > b->rows) return;
    b->pos0 = pos0;
    memcpy(b->att + (size_t)layer * b->rows * (size_t)width, att, sizeof(float) * ntok * (size_t)width);
}

static void test_hook(void *user, int layer, size_t pos0, const float *att, size_t ntok, int width) {
    test_hook_state *t = user;
    const base_store *b = t->bs;
    if (layer < 0 || layer >= b->n_layers || width != b->width || ntok > b->rows || pos0 != b->pos0) {
        t->mismatch = 1;
        return;
    }
    const float *ref = b->att + (size_t)layer * b->rows * (size_t)width;
    for (size_t i = 0; i < ntok; i++) {
        const float *x = att + i * (size_t)width, *r = ref + i * (size_t)width;
        double num = 0.0, den = 0.0;
        for (int c = 0; c < width; c++) {
            double d = (double)x[c] - (double)r[c];
            num += d * d;
            den += (double)r[c] * (double)r[c];
        }
        if (den <= 0.0) continue;
        double e = sqrt(num / den);
        t->sum[layer] += e;
        if (e > t->mx[layer]) t->mx[layer] = e;
        t->cnt[layer]++;
    }
}

typedef struct {
    tool_policy pol;
    int iso;                  /* --isolate: the one compressed layer (-1: none) */
    double *kl, *nll;         /* per scored position */
    size_t n, top1;           /* scored positions, top-1 agreements */
    size_t top1_w;            /* top1 at the start of the current window */
    double *lsum, *lmax;      /* per layer */
    size_t *lcnt;
    test_hook_state hk;
    size_t kv_bytes;
    double bits_k, bits_v, bits_all, seconds;
    size_t tokens_run;
} pol_state;

typedef struct {
    const eval_env *e;
    const char *text, *base;
    size_t C, B;
    int layers;
    const double *nll_base;
    double seconds_base;
} run_info;

/* Policy name for tables; "K/V@l" for an --isolate run of layer l. */
static void policy_label(const pol_state *q, char *buf, size_t cap) {
    if (q->iso < 0) {
        tool_policy_name(&q->pol, buf, cap);
        return;
    }
    tool_policy t = q->pol;
    t.n_f16_layers = 0;
    char name[TOOL_POLICY_NAME];
    tool_policy_name(&t, name, sizeof name);
    snprintf(buf, cap, "%.200s @%d", name, q->iso);
}

/* Paired difference of the KLDs of q and ref over the same positions. */
static void paired_diff(const pol_state *q, const pol_state *ref, double *mean, double *se) {
    size_t n = q->n < ref->n ? q->n : ref->n;
    double *d = malloc(sizeof(double) * (n ? n : 1));
    if (!d) { *mean = *se = NAN; return; }
    for (size_t i = 0; i < n; i++) d[i] = q->kl[i] - ref->kl[i];
    eval_mean_se(d, n, mean, se);
    free(d);
}

static void print_json(FILE *f, const char *record, const run_info *ri, int windows, long window_index,
                       const pol_state *ps, const pol_state *ref, int interrupted) {
    double kl, kl_se, nll, nll_se, nllb, nllb_se;
    eval_mean_se(ps->kl, ps->n, &kl, &kl_se);
    eval_mean_se(ps->nll, ps->n, &nll, &nll_se);
    eval_mean_se(ri->nll_base, ps->n, &nllb, &nllb_se);
    fprintf(f, "{\"tool\":\"kld\",\"record\":\"%s\",\"model\":", record);
    eval_json_str(f, eval_basename(ri->e->model_path));
    eval_json_weights(f, ri->e);
    fprintf(f, ",\"text\":");
    eval_json_str(f, eval_basename(ri->text));
    fprintf(f, ",\"ctx\":%zu,\"chunks\":%d,", ri->C, windows);
    if (window_index >= 0) fprintf(f, "\"window_index\":%ld,", window_index);
    fprintf(f, "\"batch\":%zu,\"base\":\"%s\",", ri->B, ri->base);
    tool_policy_json(&ps->pol, f);
    if (ps->iso >= 0) fprintf(f, ",\"isolated_layer\":%d", ps->iso);
    fprintf(f, ",\"kld\":");
    eval_json_num(f, kl);
    fprintf(f, ",\"kld_se\":");
    eval_json_num(f, kl_se);
    fprintf(f, ",\"kld_median\":");
    eval_json_num(f, eval_quantile(ps->kl, ps->n, 0.5));
    fprintf(f, ",\"kld_p99\":");
    eval_json_num(f, eval_quantile(ps->kl, ps->n, 0.99));
    fprintf(f, ",\"kld_max\":");
    eval_json_num(f, eval_quantile(ps->kl, ps->n, 1.0));
    if (ref) {
        /* vs the first policy of the list, position by position */
        double dm, dse;
        paired_diff(ps, ref, &dm, &dse);
        char name[TOOL_POLICY_NAME];
        policy_label(ref, name, sizeof name);
        fprintf(f, ",\"kld_diff_vs\":");
        eval_json_str(f, name);
        fprintf(f, ",\"kld_diff\":");
        eval_json_num(f, dm);
        fprintf(f, ",\"kld_diff_se\":");
        eval_json_num(f, dse);
    }
    fprintf(f, ",\"top1\":");
    eval_json_num(f, ps->n ? (double)ps->top1 / (double)ps->n : NAN);
    fprintf(f, ",\"ppl_base\":");
    eval_json_num(f, exp(nllb));
    fprintf(f, ",\"ppl\":");
    eval_json_num(f, exp(nll));
    fprintf(f, ",\"ppl_se\":");
    eval_json_num(f, exp(nll) * nll_se);
    fprintf(f, ",\"tokens\":%zu,\"kv_bytes\":%zu,\"bits_per_value\":", ps->n, ps->kv_bytes);
    eval_json_num(f, 0.5 * (ps->bits_k + ps->bits_v));
    fprintf(f, ",\"bits_k\":");
    eval_json_num(f, ps->bits_k);
    fprintf(f, ",\"bits_v\":");
    eval_json_num(f, ps->bits_v);
    fprintf(f, ",\"bits_per_value_all_layers\":");
    eval_json_num(f, ps->bits_all);
    if (ri->layers) {
        int worst = -1;
        double wv = -1.0;
        fprintf(f, ",\"layer_err\":[");
        for (int l = 0; l < ri->e->info.n_layers; l++) {
            double v = ps->lcnt[l] ? ps->lsum[l] / (double)ps->lcnt[l] : NAN;
            if (ps->lcnt[l] && v > wv) { wv = v; worst = l; }
            if (l) fputc(',', f);
            eval_json_num(f, v);
        }
        fprintf(f, "],\"layer_err_max\":[");
        for (int l = 0; l < ri->e->info.n_layers; l++) {
            if (l) fputc(',', f);
            eval_json_num(f, ps->lcnt[l] ? ps->lmax[l] : NAN);
        }
        fprintf(f, "],\"worst_layer\":%d", worst);
    }
    fprintf(f, ",\"seconds\":");
    eval_json_num(f, ps->seconds);
    fprintf(f, ",\"seconds_base\":");
    eval_json_num(f, ri->seconds_base);
    fprintf(f, ",\"interrupted\":%s,\"partial\":%s}\n", interrupted ? "true" : "false", interrupted ? "true" : "false");
    fflush(f);
}

int cmd_kld(int argc, char **argv) {
    eval_common co;
    eval_common_init(&co);
    const char *text_path = NULL, *base_spec = "f16";
    long ctx = 1024, chunks = 0, batch = 256;
    int per_window = 0, layers = 1, isolate = 0;
    const tool_opt opts[] = {
        {.names = "-f|--file", .kind = TOOL_ARG_STR, .dst = &text_path},
        {.names = "--base", .kind = TOOL_ARG_CHOICE, .dst = &base_spec, .choices = "f16|f32"},
        {.names = "--ctx|-c|--ctx-size", .kind = TOOL_ARG_LONG, .dst = &ctx, .min = 8, .max = 1 << 20},
        {.names = "--chunks", .kind = TOOL_ARG_LONG, .dst = &chunks, .min = 0, .max = 1L << 30},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_LONG, .dst = &batch, .min = 0, .max = 65536},
        {.names = "--per-window", .kind = TOOL_ARG_SET, .dst = &per_window},
        {.names = "--no-layers", .kind = TOOL_ARG_CLEAR, .dst = &layers},
        {.names = "--isolate", .kind = TOOL_ARG_SET, .dst = &isolate},
        {.names = "--test-model", .kind = TOOL_ARG_STR, .dst = &co.test_model},
        {0}};
    const tool_opt *tables[] = {opts, eval_common_table(&co), eval_common_policy_table(&co), NULL};
    const tool_cmd cmd = {.name = "kld", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if ((pr = eval_common_finish(&co, "kld"))) return pr;
    if (!text_path) return tool_usage_error("kld", "-f TEXT is required (a text file, e.g. corpora/prose.txt)");
    tool_policy given[EVAL_MAX_POLICIES], base_pol, *pols = NULL;
    int *iso = NULL, np = 0, ngiven = eval_common_policies(&co, given, EVAL_MAX_POLICIES);
    char perr[128];
    if (tool_policy_parse(base_spec, &base_pol, perr, sizeof perr)) return 2;

    size_t tlen = 0;
    char *text = eval_read_file(text_path, &tlen);
    if (!text) { fprintf(stderr, "kvq kld: %s: %s\n", text_path, strerror(errno)); return 1; }
    eval_env e;
    if (eval_env_open(&e, "kld", co.model, co.threads)) { free(text); return 1; }
    if (eval_env_weights(&e, &co, 1)) { free(text); eval_env_close(&e); return 1; }
    const kvq_model_info *mc = &e.info;
    const int L = mc->n_layers, width = mc->n_head * mc->head_dim, V = mc->n_vocab;
    int ret = 1, rc = 0;
    /* the policies run: as given, or (--isolate) one per compressed layer of each */
    pols = malloc(sizeof(tool_policy) * (size_t)ngiven * (size_t)(isolate ? L : 1));
    iso = malloc(sizeof(int) * (size_t)ngiven * (size_t)(isolate ? L : 1));
    if (!pols || !iso) {
        fprintf(stderr, "kvq kld: out of memory\n");
        free(pols);
        free(iso);
        free(text);
        eval_env_close(&e);
        return 1;
    }
    for (int g = 0; g < ngiven; g++) {
        if (!isolate) {
            iso[np] = -1;
            pols[np++] = given[g];
            continue;
        }
        if (L - 1 > TOOL_POLICY_MAX_F16) {
            fprintf(stderr, "kvq kld: --isolate supports models of at most %d layers\n", TOOL_POLICY_MAX_F16 + 1);
            free(pols);
            free(iso);
            free(text);
            eval_env_close(&e);
            return 2;
        }
        for (int l = 0; l < L; l++) {
            int f16 = mc->sliding_window[l] > 0 && !given[g].compress_sliding;
            for (int i = 0; i < given[g].n_f16_layers; i++) {
                int fl = given[g].f16_layers[i];
                f16 |= (fl < 0 ? L + fl : fl) == l;
            }
            if (f16) continue;
            tool_policy q = given[g];
            q.n_f16_layers = 0;
            for (int k = 0; k < L; k++)
                if (k != l) q.f16_layers[q.n_f16_layers++] = k;
            iso[np] = l;
            pols[np++] = q;
        }
    }
    if (np == 0) {
        fprintf(stderr, "kvq kld: no layer to compress\n");
        free(pols);
        free(iso);
        free(text);
        eval_env_close(&e);
        return 2;
    }
    int32_t *ids = NULL, *win = NULL, *top_b = NULL, *top_t = NULL;
    float *lb = NULL, *lt = NULL;
    double *lse_b = NULL, *lse_t = NULL, *nll_row = NULL, *nll_base = NULL;
    base_store bs;
    memset(&bs, 0, sizeof bs);
    kvq_session *sb = NULL;
    kvq_session **st = calloc((size_t)np, sizeof *st);
    pol_state *ps = calloc((size_t)np, sizeof *ps);
    size_t nt = 0, n_base = 0;
    double seconds_base = 0.0;
    if (!ps || !st) goto done;
    if ((rc = eval_tokenize(e.m, text, tlen, 0, 0, &ids, &nt))) {
        fprintf(stderr, "kvq kld: tokenize: %s\n", kvq_strerror(rc));
        goto done;
    }
    size_t C = (size_t)ctx, first = C / 2, nwin = nt / C;
    if (chunks > 0 && (size_t)chunks < nwin) nwin = (size_t)chunks;
    if (nwin == 0) { fprintf(stderr, "kvq kld: %s has %zu tokens, fewer than --ctx %zu\n", text_path, nt, C); goto done; }
    size_t B = (size_t)batch, rows = B == 0 ? C : (B < C - first ? B : C - first), hrows = B == 0 ? C : B;
    if (B && (first + B - 1) / B + (C - first + B - 1) / B > 4096) { fprintf(stderr, "kvq kld: --batch too small\n"); goto done; }
    eval_call calls[4096];
    int ncalls = eval_window_calls(C, first, B, calls, 4096);
    size_t maxn = nwin * (C - first);
    win = malloc(sizeof(int32_t) * C);
    lb = malloc(sizeof(float) * rows * (size_t)V);
    lt = malloc(sizeof(float) * rows * (size_t)V);
    lse_b = malloc(sizeof(double) * rows);
    lse_t = malloc(sizeof(double) * rows);
    nll_row = malloc(sizeof(double) * rows);
    top_b = malloc(sizeof(int32_t) * rows);
    top_t = malloc(sizeof(int32_t) * rows);
    nll_base = malloc(sizeof(double) * maxn);
    if (!win || !lb || !lt || !lse_b || !lse_t || !nll_row || !top_b || !top_t || !nll_base) goto nomem;
    if (layers) {
        bs.n_layers = L;
        bs.width = width;
        bs.rows = hrows;
        bs.att = malloc(sizeof(float) * (size_t)L * hrows * (size_t)width);
        if (!bs.att) goto nomem;
    }
    for (int p = 0; p < np; p++) {
        pol_state *q = &ps[p];
        q->pol = pols[p];
        q->iso = iso[p];
        q->kl = malloc(sizeof(double) * maxn);
        q->nll = malloc(sizeof(double) * maxn);
        q->lsum = calloc((size_t)L, sizeof(double));
        q->lmax = calloc((size_t)L, sizeof(double));
        q->lcnt = calloc((size_t)L, sizeof(size_t));
        if (!q->kl || !q->nll || !q->lsum || !q->lmax || !q->lcnt) goto nomem;
        q->hk.bs = &bs;
        q->hk.sum = q->lsum;
        q->hk.mx = q->lmax;
        q->hk.cnt = q->lcnt;
        if (eval_policy_bits(&q->pol, mc->head_dim, &q->bits_k, &q->bits_v)) q->bits_k = q->bits_v = NAN;
    }
    char wdesc[256];
    eval_weights_desc(&e, wdesc, sizeof wdesc);
    fprintf(stderr, "kvq kld: %s, %s: %zu tokens, %zu windows of %zu (scoring %zu per window), base %s, %d polic%s, "
                    "%d threads%s\n",
            eval_basename(e.model_path), eval_basename(text_path), nt, nwin, C, C - first - 1, base_spec, np,
            np == 1 ? "y" : "ies", co.threads, wdesc);
    run_info ri = {&e, text_path, base_spec, C, B, layers, nll_base, 0.0};
    eval_sigint_install();
    eval_progress prog;
    eval_progress_init(&prog, "kld");
    int windows_done = 0;
    double toks = 0;
    for (size_t w = 0; w < nwin && !eval_interrupted(); w++) {
        memcpy(win, ids + w * C, sizeof(int32_t) * C);
        if (e.add_bos) win[0] = e.info.bos;
        int nb = B ? (int)B : (int)C;
        if ((rc = eval_session(&e, &base_pol, nb, co.f32_acts, co.seed, layers ? base_hook : NULL, &bs, &sb))) goto done;
        for (int p = 0; p < np; p++)
            if ((rc = eval_session_on(&e, e.m_test, &ps[p].pol, nb, co.f32_acts, co.seed, layers ? test_hook : NULL,
                                      &ps[p].hk, &st[p])))
                goto done;
        size_t n0 = n_base;
        for (int p = 0; p < np; p++) ps[p].top1_w = ps[p].top1;
        for (int c = 0; c < ncalls; c++) {
            size_t a = calls[c].a, b = calls[c].b, j0 = a > first ? a : first, j1 = b < C - 1 ? b : C - 1;
            int scored = calls[c].logits && j1 > j0;
            double t0 = tool_now();
            if ((rc = kvq_session_eval(sb, win + a, b - a, calls[c].logits ? lb : NULL, 1))) goto evalfail;
            seconds_base += tool_now() - t0;
            toks += (double)(b - a);
            const float *rb = lb + (j0 - a) * (size_t)V, *rt = lt + (j0 - a) * (size_t)V;
            if (scored) {
                if ((rc = eval_logit_stats(e.pool, rb, V, j1 - j0, win + j0 + 1, lse_b, top_b, nll_row))) goto done;
                memcpy(nll_base + n_base, nll_row, sizeof(double) * (j1 - j0));
                n_base += j1 - j0;
            }
            for (int p = 0; p < np; p++) {
                pol_state *q = &ps[p];
                t0 = tool_now();
                if ((rc = kvq_session_eval(st[p], win + a, b - a, calls[c].logits ? lt : NULL, 1))) goto evalfail;
                q->seconds += tool_now() - t0;
                q->tokens_run += b - a;
                toks += (double)(b - a);
                if (q->hk.mismatch) { fprintf(stderr, "kvq kld: internal error: lockstep lost\n"); goto done; }
                if (!scored) continue;
                size_t n = j1 - j0;
                if ((rc = eval_logit_stats(e.pool, rt, V, n, win + j0 + 1, lse_t, top_t, q->nll + q->n))) goto done;
                if ((rc = eval_kl(e.pool, rb, lse_b, rt, lse_t, V, n, q->kl + q->n))) goto done;
                for (size_t i = 0; i < n; i++) q->top1 += top_b[i] == top_t[i];
                q->n += n;
            }
            char what[64];
            snprintf(what, sizeof what, "window %zu/%zu", w + 1, nwin);
            eval_progress_update(&prog, (double)w + (double)b / (double)C, (double)nwin, toks, what);
        }
        for (int p = 0; p < np; p++) {
            size_t kb = kvq_cache_memory_bytes(kvq_session_cache(st[p]));
            if (kb > ps[p].kv_bytes) ps[p].kv_bytes = kb;
            ps[p].bits_all = eval_cache_bits_all(st[p], e.m);
            kvq_session_free(st[p]);
            st[p] = NULL;
        }
        kvq_session_free(sb);
        sb = NULL;
        ri.seconds_base = seconds_base;
        if (co.json && per_window) {
            for (int p = 0; p < np; p++) {
                /* this window's positions only (layer errors stay cumulative) */
                pol_state one = ps[p];
                size_t nw = n_base - n0;
                one.kl = ps[p].kl + n0;
                one.nll = ps[p].nll + n0;
                one.n = nw;
                one.top1 = ps[p].top1 - ps[p].top1_w;
                run_info r1 = ri;
                r1.nll_base = nll_base + n0;
                print_json(stdout, "window", &r1, 1, (long)w, &one, NULL, 0);
            }
        }
        windows_done++;
    }
    eval_progress_end(&prog);
    int intr = eval_interrupted();
    if (intr) fprintf(stderr, "kvq kld: interrupted after %d window(s)\n", windows_done);
    ri.seconds_base = seconds_base;
    if (co.json) {
        for (int p = 0; p < np; p++) print_json(stdout, "summary", &ri, windows_done, -1, &ps[p], p ? &ps[0] : NULL, intr);
    } else {
        double nb_mean, nb_se;
        eval_mean_se(nll_base, n_base, &nb_mean, &nb_se);
        printf("model %s, text %s, ctx %zu, %d window(s), %zu scored tokens, base %s: ppl %.4f +/- %.4f%s\n\n",
               eval_basename(e.model_path), eval_basename(text_path), C, windows_done, n_base, base_spec, exp(nb_mean),
               exp(nb_mean) * nb_se, intr ? " (PARTIAL: interrupted)" : "");
        printf("%-28s %6s %10s %10s %10s %7s %10s %9s %18s %s\n", "policy", "bits", "KLD", "+/-", "KLD p99", "top-1",
               "ppl", "+/-", "KLD - first (se)", layers ? "worst layer (attn err)" : "");
        for (int p = 0; p < np; p++) {
            pol_state *q = &ps[p];
            char name[TOOL_POLICY_NAME];
            policy_label(q, name, sizeof name);
            double kl, kl_se, nll, nll_se;
            eval_mean_se(q->kl, q->n, &kl, &kl_se);
            eval_mean_se(q->nll, q->n, &nll, &nll_se);
            printf("%-28s %6.3f %10.6f %10.6f %10.6f %7.4f %10.4f %9.4f", name, q->bits_all, kl,
                   kl_se, eval_quantile(q->kl, q->n, 0.99), q->n ? (double)q->top1 / (double)q->n : NAN, exp(nll),
                   exp(nll) * nll_se);
            if (p) {
                double dm, dse;
                paired_diff(q, &ps[0], &dm, &dse);
                char cell[48];
                snprintf(cell, sizeof cell, "%+.5f (%.5f)", dm, dse);
                printf(" %18s", cell);
            } else printf(" %18s", "");
            if (layers) {
                int worst = -1;
                double wv = -1;
                for (int l = 0; l < L; l++)
                    if (q->lcnt[l] && q->lsum[l] / (double)q->lcnt[l] > wv) { wv = q->lsum[l] / (double)q->lcnt[l]; worst = l; }
                if (worst >= 0) printf(" %d (%.4f)", worst, wv);
            }
            printf("\n");
        }
        printf("bits: per cached value over all layers, scales included (f16 and sliding-window layers counted; "
               "the methods' own bits: --json bits_k, bits_v)\n");
        if (layers && isolate) {
            printf("\n--isolate: one layer compressed, every other in f16\n%-28s %10s %7s %14s %14s\n", "policy @layer",
                   "KLD", "top-1", "err at layer", "err last layer");
            for (int p = 0; p < np; p++) {
                pol_state *q = &ps[p];
                char name[TOOL_POLICY_NAME];
                policy_label(q, name, sizeof name);
                double kl, kl_se;
                eval_mean_se(q->kl, q->n, &kl, &kl_se);
                int l = q->iso;
                printf("%-28s %10.6f %7.4f %14.6f %14.6f\n", name, kl, q->n ? (double)q->top1 / (double)q->n : NAN,
                       q->lcnt[l] ? q->lsum[l] / (double)q->lcnt[l] : NAN,
                       q->lcnt[L - 1] ? q->lsum[L - 1] / (double)q->lcnt[L - 1] : NAN);
            }
        } else if (layers && np > 0) {
            printf("\nrelative L2 error of each layer's attention output vs the base run (mean over positions)\n%5s",
                   "layer");
            for (int p = 0; p < np; p++) {
                char name[TOOL_POLICY_NAME];
                policy_label(&ps[p], name, sizeof name);
                printf(" %14.14s", name);
            }
            printf("\n");
            for (int l = 0; l < L; l++) {
                printf("%5d", l);
                for (int p = 0; p < np; p++)
                    printf(" %14.6f", ps[p].lcnt[l] ? ps[p].lsum[l] / (double)ps[p].lcnt[l] : NAN);
                printf("%s\n", mc->sliding_window[l] ? "  (sliding)" : "");
            }
        }
        fflush(stdout);
    }
    ret = intr ? TOOL_EXIT_INTERRUPTED : 0;
    goto done;
nomem:
    fprintf(stderr, "kvq kld: out of memory\n");
    goto done;
evalfail:
    fprintf(stderr, "kvq kld: eval: %s\n", kvq_strerror(rc));
done:
    kvq_session_free(sb);
    if (st)
        for (int p = 0; p < np; p++) kvq_session_free(st[p]);
    free(st);
    if (ps)
        for (int p = 0; p < np; p++) {
            free(ps[p].kl);
            free(ps[p].nll);
            free(ps[p].lsum);
            free(ps[p].lmax);
            free(ps[p].lcnt);
        }
    free(ps);
    free(bs.att);
    free(ids);
    free(win);
    free(lb);
    free(lt);
    free(lse_b);
    free(lse_t);
    free(nll_row);
    free(top_b);
    free(top_t);
    free(nll_base);
    free(pols);
    free(iso);
    free(text);
    eval_env_close(&e);
    return ret;
}
