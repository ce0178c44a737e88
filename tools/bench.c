/*
 * kvq bench: end-to-end prefill and generation speed of the engine per cache
 * policy, side by side in one process (DESIGN.md §7), and KV bytes per token.
 *
 * One session per policy (f16 always first), all alive at once and driven
 * through the same token sequence. For each context length C (ascending),
 * with G = --gen and P = min(--prefill, C - G - position already reached):
 *
 *   fill     positions up to C - G - P of the text, untimed (batches of
 *            --batch tokens; the sessions keep their cache from one C to the
 *            next, so the fill costs max(C) once per policy)
 *   prefill  positions [C - G - P, C - G): P tokens in --rounds calls of
 *            ceil(P / rounds) tokens, each attending to everything before;
 *            prefill_tok_s = P / total time of those calls
 *   generate positions [C - G, C): G greedy decode steps (one token per
 *            kvq_session_eval), in --rounds rounds of G / rounds steps;
 *            gen_tok_s = G / total time, gen_ms_median = median over rounds
 *            of the ms per step
 *
 * The calls of one round are made policy after policy (the order reversed
 * every other round), so the load of the shared machine hits every policy
 * alike; only ratios to f16 (prefill_speedup, gen_speedup) are meaningful on
 * a shared CPU. Tokens come from a text (default corpora/prose.txt, read
 * cyclically), the generated ones from each policy's own greedy choice.
 * Context lengths above the model's training context are skipped.
 *
 * Memory: kv_bytes_per_token = kvq_cache_bytes_per_token (steady state, all
 * layers), kv_bytes = kvq_cache_memory_bytes at C, bits_per_value =
 * 8 kv_bytes_per_token / (2 n_layers n_head_kv head_dim).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "policy.h"
#include "progress.h"
#include "args.h"
#include "tools.h"

#define MAX_POLICIES 64
#define MAX_MODELS 8
#define MAX_CTX 32
#define MAX_ROUNDS 64

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq bench [-m MODEL] --ctx N[,N...] [--policies \"P1 P2 ...\"] [options]\n"
            "  Prefill and generation tokens/s of the engine per cache policy, side by side\n"
            "  in one run (f16 first), and KV bytes per token. Policies: tools/policy.h,\n"
            "  e.g. --policies \"q8 tq-mse:4 k=q8,v=tq-mse:3 tq-mse:3,w=128\".\n"
            "  -m, --model MODEL GGUF model (default: SmolLM2)\n"
            "  -c, --ctx LIST    context lengths, e.g. 512,4096,16K (default 512,2048)\n"
            "  --policies LIST   policies separated by spaces or '|' (repeatable; default f16)\n"
            "  --policy P        one more policy\n"
            "  --gen N           decode steps timed at each ctx (default 32)\n"
            "  --prefill N       prompt tokens timed before each ctx (default 512)\n"
            "  --rounds R        interleaved rounds of prefill and decode (default 4)\n"
            "  -t, --threads T   threads, 1..256 (default 2)\n"
            "  -b, --batch N     tokens per forward chunk, 1..65536 (default 256)\n"
            "  --text FILE       token source (default corpora/prose.txt; synthetic ids if absent)\n"
            "  --json            one JSON object per (ctx, policy)\n"
            "  --models \"E ...\"  more weights, each run with every policy in the same rounds: a\n"
            "                    weight spec (-m coded with it) or another GGUF of the same model\n"
            "                    (e.g. re-quantized); ratios stay relative to f16 on -m's weights\n"
            TOOL_WEIGHTS_USAGE
            "What is measured: see the comment at the top of tools/bench.c and docs/RESULTS.md.\n");
}

typedef struct {
    tool_policy pol;
    char name[TOOL_POLICY_NAME];
    kvq_session *s;
    int dead;          /* an error stopped this policy */
    char err[160];
    int32_t next;      /* greedy choice from the last logits */
    double pre_t, gen_t;
    double round_ms[MAX_ROUNDS];
    int n_round_ms;
    const kvq_model *m;   /* the weights this entry runs on */
    char wlabel[48];      /* "" (as stored, or --weights), else the --models entry */
} bench_pol;

typedef struct {
    const char *model, *text, *weights, *keep, *models;
    long ctx[MAX_CTX];
    int nctx, gen, prefill, rounds, threads, batch, json;
    tool_policy pols[MAX_POLICIES];
    int npol;
} bench_opts;

static int on_ctx(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name;
    bench_opts *o = user;
    int n = tool_parse_long_list(val, 2, 1L << 24, o->ctx, MAX_CTX, err, cap);
    if (n < 0) return -1;
    o->nctx = n;
    return 0;
}

/* --policies LIST and --policy P add to the list (--policy: one policy, '|' and spaces kept as errors). */
static int on_policies(void *user, const char *name, const char *val, char *err, size_t cap) {
    bench_opts *o = user;
    char why[768] = "";
    int n = !strcmp(name, "--policy") ? (tool_policy_parse(val, &o->pols[o->npol], why, sizeof why) ? -1 : 1)
                                      : tool_policy_list(val, o->pols + o->npol, MAX_POLICIES - 1 - o->npol, why, sizeof why);
    if (n < 0 || o->npol + n >= MAX_POLICIES) {
        snprintf(err, cap, "'%s': %s", val, n < 0 ? why : "too many policies");
        return -1;
    }
    o->npol += n;
    return 0;
}

static int parse(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->gen = 32;
    o->prefill = 512;
    o->rounds = 4;
    o->threads = 2;
    o->batch = 256;
    o->nctx = 2;
    o->ctx[0] = 512;
    o->ctx[1] = 2048;
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &o->model},
        {.names = "--ctx|-c|--ctx-size", .kind = TOOL_ARG_FN, .fn = on_ctx, .user = o},
        {.names = "--policies|--policy", .kind = TOOL_ARG_FN, .fn = on_policies, .user = o},
        {.names = "--gen", .kind = TOOL_ARG_INT, .dst = &o->gen, .min = 1, .max = 1 << 20},
        {.names = "--prefill", .kind = TOOL_ARG_INT, .dst = &o->prefill, .min = 0, .max = 1 << 24},
        {.names = "--rounds", .kind = TOOL_ARG_INT, .dst = &o->rounds, .min = 1, .max = MAX_ROUNDS},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &o->threads, .min = 1, .max = 256},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_INT, .dst = &o->batch, .min = 1, .max = 65536},
        {.names = "--text", .kind = TOOL_ARG_STR, .dst = &o->text},
        {.names = "--json", .kind = TOOL_ARG_SET, .dst = &o->json},
        {.names = "--weights", .kind = TOOL_ARG_STR, .dst = &o->weights},
        {.names = "--models", .kind = TOOL_ARG_STR, .dst = &o->models},
        {.names = "--keep", .kind = TOOL_ARG_STR, .dst = &o->keep},
        TOOL_OPT_NGL,
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "bench", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 1 : pr;
    for (int i = 1; i < o->nctx; i++)
        for (int j = i; j > 0 && o->ctx[j - 1] > o->ctx[j]; j--) { long t = o->ctx[j]; o->ctx[j] = o->ctx[j - 1]; o->ctx[j - 1] = t; }
    return 0;
}

/* Reads a whole file (NUL-terminated); NULL if unreadable. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) { free(buf); fclose(f); return NULL; }
            buf = b;
        }
        size_t r = fread(buf + n, 1, 65536, f);
        n += r;
        if (r < 65536) break;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* The default text: corpora/prose.txt here or next to the build directory. */
static int default_text(char *buf, size_t cap) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    const char *cands[3] = {"corpora/prose.txt", "/../corpora/prose.txt", "/../../corpora/prose.txt"};
    for (int i = 0; i < 3; i++) {
        if (i == 0) snprintf(buf, cap, "%s", cands[0]);
        else if (exe[0]) snprintf(buf, cap, "%s%s", exe, cands[i]);
        else continue;
        if (access(buf, R_OK) == 0) return 0;
    }
    return -1;
}

/*
 * n_need token ids of the text (cyclic), or synthetic ids (a fixed
 * pseudo-random sequence) when there is no text. The first is BOS if the
 * model adds one.
 */
static int32_t *load_tokens(const kvq_model *m, int n_vocab, const char *path, size_t n_need, const char **src) {
    int32_t *ids = malloc(n_need * sizeof *ids);
    if (!ids) return NULL;
    size_t len = 0;
    char *text = path ? read_file(path, &len) : NULL;
    size_t have = 0;
    if (text && len) {
        size_t take = n_need * 8 + 4096 < len ? n_need * 8 + 4096 : len, cap = n_need + 16, n = 0;
        int32_t *t = malloc(cap * sizeof *t);
        int rc = t ? kvq_tokenize(m, text, take, 1, 0, t, cap, &n) : KVQ_ERR_NOMEM;
        if (rc == KVQ_ERR_RANGE) { rc = 0; n = cap; } /* more than needed: keep the first cap */
        if (!rc && n > 1) {
            for (size_t i = 0; i < n_need; i++) ids[i] = t[i < n ? i : 1 + (i - n) % (n - 1)];
            have = n_need;
            *src = path;
        }
        free(t);
    }
    free(text);
    if (!have) {
        uint64_t z = 0x6b7671;
        kvq_model_info mi;
        kvq_model_get_info(m, &mi);
        int32_t bos = mi.bos;
        for (size_t i = 0; i < n_need; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)(256 + (z >> 33) % (uint64_t)(n_vocab > 512 ? n_vocab - 256 : 1));
        }
        if (bos >= 0) ids[0] = bos;
        *src = "synthetic";
    }
    return ids;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *basename_noext(const char *path, char *buf, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, cap, "%s", b);
    return buf;
}

/* Marks a policy dead after an error (its session stays as it is). */
static void fail(bench_pol *p, const char *what, int rc) {
    p->dead = 1;
    snprintf(p->err, sizeof p->err, "%s: %s", what, kvq_strerror(rc));
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : prc;
    char def[4096], textpath[4096];
    if (!o.model) {
        if (tool_default_model(def, sizeof def, 1)) {
            fprintf(stderr, "kvq bench: no -m given and the default model could not be installed\n");
            return 1;
        }
        o.model = def;
    }
    if (!o.text && !default_text(textpath, sizeof textpath)) o.text = textpath;

    /* policies: f16 first, no duplicates */
    bench_pol *P = calloc(MAX_POLICIES, sizeof *P);
    if (!P) return 1;
    int np = 0;
    tool_policy_init(&P[np].pol);
    tool_policy_name(&P[np].pol, P[np].name, sizeof P[np].name);
    np++;
    for (int i = 0; i < o.npol; i++) {
        char name[TOOL_POLICY_NAME];
        tool_policy_name(&o.pols[i], name, sizeof name);
        int dup = 0;
        for (int j = 0; j < np; j++) dup |= !strcmp(P[j].name, name);
        if (dup) continue;
        P[np].pol = o.pols[i];
        strcpy(P[np].name, name);
        np++;
    }

    char err[256] = "", mname[128];
    kvq_model *m = NULL;
    kvq_pool *pool = NULL;
    kvq_model *extra[MAX_MODELS]; /* --models (declared before the first goto done) */
    int nextra = 0;
    float *logits = NULL;
    int32_t *ids = NULL;
    int ret = 1, rc = 0;
    tool_progress prog;
    tool_progress_init(&prog, "bench");
    tool_interrupt_install();

    if ((rc = kvq_model_load(&m, o.model, err, sizeof err))) { fprintf(stderr, "kvq bench: %s\n", err); free(P); return 1; }
    kvq_model_info mc_info;
    kvq_model_get_info(m, &mc_info);
    const kvq_model_info *mc = &mc_info;
    basename_noext(o.model, mname, sizeof mname);
    if (!mc->has_tokenizer) { fprintf(stderr, "kvq bench: %s has no tokenizer\n", o.model); rc = KVQ_ERR_UNSUPPORTED; goto done; }
    if ((rc = kvq_pool_create(&pool, o.threads))) goto done;
    if (tool_code_weights(m, o.weights, o.keep, pool, "bench", o.json)) { rc = KVQ_ERR_INVALID_ARG; goto done; }
    kvq_model_get_info(m, &mc_info);
    logits = malloc(sizeof(float) * (size_t)mc->n_vocab);
    if (!logits) { rc = KVQ_ERR_NOMEM; goto done; }

    /* context lengths the model can hold */
    long ctx[MAX_CTX];
    int nctx = 0;
    size_t limit = mc->n_ctx_train > 0 ? (size_t)mc->n_ctx_train : (size_t)1 << 24;
    for (int i = 0; i < o.nctx; i++) {
        if ((size_t)o.ctx[i] > limit) {
            fprintf(stderr, "kvq bench: ctx %ld skipped (the model's context is %zu)\n", o.ctx[i], limit);
            continue;
        }
        if (o.ctx[i] <= o.gen) { fprintf(stderr, "kvq bench: ctx %ld skipped (not above --gen)\n", o.ctx[i]); continue; }
        if (nctx && o.ctx[i] == ctx[nctx - 1]) continue;
        ctx[nctx++] = o.ctx[i];
    }
    if (!nctx) { fprintf(stderr, "kvq bench: no context length to measure\n"); rc = 0; goto done; }
    const char *textsrc = "synthetic";
    ids = load_tokens(m, mc->n_vocab, o.text, (size_t)ctx[nctx - 1], &textsrc);
    if (!ids) { rc = KVQ_ERR_NOMEM; goto done; }
    const char *textname = strrchr(textsrc, '/') ? strrchr(textsrc, '/') + 1 : textsrc;

    /* --models: every policy again on each other set of weights */
    int np0 = np;
    for (int i = 0; i < np; i++) P[i].m = m;
    if (o.models) {
        char list[1024];
        snprintf(list, sizeof list, "%s", o.models);
        for (char *save = NULL, *e = strtok_r(list, " |", &save); e; e = strtok_r(NULL, " |", &save)) {
            size_t el = strlen(e);
            int file = el > 5 && !strcmp(e + el - 5, ".gguf");
            if (nextra == MAX_MODELS || np + np0 > MAX_POLICIES) {
                fprintf(stderr, "kvq bench: --models: at most %d entries and %d runs\n", MAX_MODELS, MAX_POLICIES);
                rc = 0;
                goto done;
            }
            kvq_model *x = NULL;
            if ((rc = kvq_model_load(&x, file ? e : o.model, err, sizeof err))) {
                fprintf(stderr, "kvq bench: --models %s: %s\n", e, err);
                rc = 0;
                goto done;
            }
            extra[nextra++] = x;
            kvq_model_info xi;
            kvq_model_get_info(x, &xi);
            if (!tool_same_model_shape(mc, &xi)) {
                fprintf(stderr, "kvq bench: --models %s is not the same model as %s\n", e, o.model);
                rc = 0;
                goto done;
            }
            if (!file && tool_code_weights(x, e, o.keep, pool, "bench", o.json)) { rc = 0; goto done; }
            const char *b = strrchr(e, '/');
            for (int i = 0; i < np0; i++) {
                P[np] = P[i];
                P[np].m = x;
                snprintf(P[np].wlabel, sizeof P[np].wlabel, "%.47s", b ? b + 1 : e);
                snprintf(P[np].name, sizeof P[np].name, "%.20s @%.40s", P[i].name, P[np].wlabel);
                np++;
            }
        }
    }
    for (int i = 0; i < np; i++) {
        kvq_session_params sp = kvq_session_default_params();
        sp.n_batch = o.batch;
        if (tool_policy_session_params(&P[i].pol, mc->n_layers, &sp, err, sizeof err)) {
            fprintf(stderr, "kvq bench: policy %s: %s\n", P[i].name, err);
            rc = 0;
            goto done;
        }
        if ((rc = kvq_session_create(&P[i].s, P[i].m, &sp, pool))) {
            fprintf(stderr, "kvq bench: policy %s: %s\n", P[i].name, kvq_strerror(rc));
            rc = 0;
            goto done;
        }
    }

    const size_t f16_bpt = (size_t)mc->n_layers * (size_t)mc->n_head_kv * (size_t)mc->head_dim * 4;
    /* work units for the progress line: tokens evaluated over all policies */
    double total_units = (double)ctx[nctx - 1] * np, done_units = 0;
    if (!o.json)
        printf("model %s (%s), %d threads, kernels %s, text %s\n%-7s %-34s %10s %6s %9s %6s %9s %6s %11s\n", mname,
               mc->arch, o.threads, kvq_session_kernels(P[0].s), textname, "ctx", "policy", "prefill/s", "x f16",
               "gen tok/s", "x f16", "B/token", "bits", "KV MiB");
    size_t pos = 0; /* positions every session holds */
    int interrupted = 0;
    for (int ci = 0; ci < nctx && !interrupted; ci++) {
        const size_t C = (size_t)ctx[ci], G = (size_t)o.gen;
        if (C < pos + G + 1) {
            fprintf(stderr, "kvq bench: ctx %zu skipped (too close to the previous one)\n", C);
            continue;
        }
        size_t Pn = (size_t)o.prefill < C - G - pos ? (size_t)o.prefill : C - G - pos;
        const size_t fill_end = C - G - Pn;
        /* fill, policy after policy */
        for (int i = 0; i < np && !interrupted; i++) {
            size_t at = pos;
            while (at < fill_end && !P[i].dead) {
                if (tool_interrupted()) { interrupted = 1; break; }
                size_t n = fill_end - at < (size_t)o.batch ? fill_end - at : (size_t)o.batch;
                int last = at + n == fill_end; /* its logits give the next token if no prompt chunk follows */
                if ((rc = kvq_session_eval(P[i].s, ids + at, n, last ? logits : NULL, 0))) fail(&P[i], "fill", rc);
                else if (last) P[i].next = argmax(logits, mc->n_vocab);
                at += n;
                done_units += (double)n;
                tool_progress_update(&prog, done_units, total_units, "tok", "ctx %zu: fill %s %zu/%zu", C, P[i].name,
                                     at, fill_end);
            }
            rc = 0;
        }
        if (interrupted) break;
        /* prefill: rounds of ceil(Pn / rounds) tokens, interleaved */
        for (int i = 0; i < np; i++) {
            P[i].pre_t = P[i].gen_t = 0;
            P[i].n_round_ms = 0;
        }
        const size_t chunk = Pn ? (Pn + (size_t)o.rounds - 1) / (size_t)o.rounds : 0;
        for (size_t at = fill_end, r = 0; at < fill_end + Pn && !interrupted; r++) {
            size_t n = fill_end + Pn - at < chunk ? fill_end + Pn - at : chunk;
            for (int j = 0; j < np; j++) {
                int i = r % 2 ? np - 1 - j : j;
                if (P[i].dead) continue;
                double t0 = tool_now();
                if ((rc = kvq_session_eval(P[i].s, ids + at, n, logits, 0))) { fail(&P[i], "prefill", rc); rc = 0; continue; }
                P[i].pre_t += tool_now() - t0;
                P[i].next = argmax(logits, mc->n_vocab);
                done_units += (double)n;
                tool_progress_update(&prog, done_units, total_units, "tok", "ctx %zu: prefill %s", C, P[i].name);
            }
            at += n;
            if (tool_interrupted()) interrupted = 1;
        }
        /* generation: rounds of about G / rounds steps, interleaved */
        for (int r = 0; r < o.rounds && !interrupted; r++) {
            size_t s0 = G * (size_t)r / (size_t)o.rounds, s1 = G * (size_t)(r + 1) / (size_t)o.rounds;
            if (s1 == s0) continue;
            for (int j = 0; j < np; j++) {
                int i = r % 2 ? np - 1 - j : j;
                if (P[i].dead) continue;
                double t0 = tool_now();
                for (size_t s = s0; s < s1 && !P[i].dead; s++) {
                    if ((rc = kvq_session_eval(P[i].s, &P[i].next, 1, logits, 0))) fail(&P[i], "decode", rc);
                    else P[i].next = argmax(logits, mc->n_vocab);
                }
                rc = 0;
                double dt = tool_now() - t0;
                P[i].gen_t += dt;
                P[i].round_ms[P[i].n_round_ms++] = 1e3 * dt / (double)(s1 - s0);
                done_units += (double)(s1 - s0);
                tool_progress_update(&prog, done_units, total_units, "tok", "ctx %zu: generate %s", C, P[i].name);
            }
            if (tool_interrupted()) interrupted = 1;
        }
        if (interrupted) break;
        pos = C;
        tool_progress_clear(&prog);
        /* results */
        double f16_pre = P[0].pre_t > 0 ? (double)Pn / P[0].pre_t : 0, f16_gen = P[0].gen_t > 0 ? (double)G / P[0].gen_t : 0;
        size_t f16_bytes = kvq_cache_memory_bytes(kvq_session_cache(P[0].s));
        for (int i = 0; i < np; i++) {
            kvq_cache *c = kvq_session_cache(P[i].s);
            size_t bpt = kvq_cache_bytes_per_token(c), kvb = kvq_cache_memory_bytes(c);
            double bits = tool_bits_per_value(bpt, mc);
            double bk = 0, bv = 0;
            tool_policy_bits(&P[i].pol, mc->head_dim, &bk, &bv);
            double pre = P[i].pre_t > 0 ? (double)Pn / P[i].pre_t : 0, gen = P[i].gen_t > 0 ? (double)G / P[i].gen_t : 0;
            qsort(P[i].round_ms, (size_t)P[i].n_round_ms, sizeof(double), cmp_double);
            double med = P[i].n_round_ms ? P[i].round_ms[P[i].n_round_ms / 2] : 0;
            if (o.json) {
                printf("{\"tool\":\"bench\",\"model\":\"%s\",\"arch\":\"%s\",\"n_layers\":%d,\"n_head_kv\":%d,\"head_dim\":%d,"
                       "\"threads\":%d,\"kernels\":\"%s\",\"text\":\"%s\",\"ctx\":%zu,",
                       mname, mc->arch, mc->n_layers, mc->n_head_kv, mc->head_dim, o.threads,
                       kvq_session_kernels(P[i].s), textname, C);
                tool_policy_json(&P[i].pol, stdout);
                printf(",\"weights\":\"%s\"", P[i].wlabel[0] ? P[i].wlabel : (o.weights ? o.weights : "stored"));
                if (P[i].dead) {
                    printf(",\"error\":\"%s\"}\n", P[i].err);
                    continue;
                }
                printf(",\"prefill_tokens\":%zu,\"prefill_tok_s\":%.2f,\"prefill_speedup\":%.4f,\"gen_tokens\":%zu,"
                       "\"gen_tok_s\":%.2f,\"gen_speedup\":%.4f,\"gen_ms_median\":%.3f,\"rounds\":%d,"
                       "\"kv_bytes_per_token\":%zu,\"f16_kv_bytes_per_token\":%zu,\"bits_per_value\":%.4f,"
                       "\"bits_k\":%.4f,\"bits_v\":%.4f,\"bits_per_value_all_layers\":%.4f,\"kv_bytes\":%zu,"
                       "\"f16_kv_bytes\":%zu}\n",
                       Pn, pre, f16_pre > 0 && pre > 0 ? pre / f16_pre : 0, G, gen, f16_gen > 0 ? gen / f16_gen : 0, med,
                       o.rounds, bpt, f16_bpt, 0.5 * (bk + bv), bk, bv, bits, kvb, f16_bytes);
            } else if (P[i].dead) {
                printf("%-7zu %-34s error: %s\n", C, P[i].name, P[i].err);
            } else {
                printf("%-7zu %-34s %10.1f %6.2f %9.1f %6.2f %9zu %6.2f %11.2f\n", C, P[i].name, pre,
                       f16_pre > 0 ? pre / f16_pre : 0, gen, f16_gen > 0 ? gen / f16_gen : 0, bpt, bits,
                       (double)kvb / 1048576.0);
            }
        }
        fflush(stdout);
    }
    tool_progress_clear(&prog);
    if (interrupted) {
        fprintf(stderr, "kvq bench: interrupted (results of the finished context lengths are above)\n");
        ret = 130;
    } else ret = 0;
    rc = 0;
done:
    if (rc) fprintf(stderr, "kvq bench: %s\n", kvq_strerror(rc));
    for (int i = 0; i < np; i++) kvq_session_free(P[i].s);
    free(P);
    for (int i = 0; i < nextra; i++) kvq_model_free(extra[i]);
    kvq_pool_free(pool);
    kvq_model_free(m);
    free(logits);
    free(ids);
    return ret;
}
