/*
 * kvq memplan: per cache policy, the longest context that fits in a memory
 * budget (weights + KV cache + runtime buffers), and the KV bytes at a few
 * context lengths. Nothing is run through the model.
 *
 *   weights   the GGUF file's size: the engine maps the whole file and
 *             prefaults it at load, so it is all resident (the weights plus
 *             metadata and the tokenizer's strings)
 *   kv        kvq_cache_memory_plan() on the session's own cache: exact
 *             (pages and the f16 ring counted whole, sliding-window layers
 *             simulated), for a prompt appended in chunks of --batch tokens
 *             (the engine's n_batch); the peak over the run is used
 *   runtime   an estimate: the session's activation buffers (the shapes of
 *             src/engine/forward.c alloc_state for n_batch rows), one row of
 *             logits, the cache's attention workspace (prefill tiles per
 *             thread and, for decode at ctx, the split-K states of
 *             ceil(ctx / 2048) chunks per KV head), page tables, plus
 *             --overhead (default 64 MiB) for the tokenizer, plans, thread
 *             stacks and allocator slack
 *
 * max_ctx is the largest n with weights + kv_peak(n) + runtime(n) <= --mem
 * (binary search; capped at 2^31); max_ctx_model caps it at the model's
 * training context.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "policy.h"
#include "args.h"
#include "tools.h"

#define MAX_POLICIES 64
#define MAX_POINTS 16
#define CTX_CAP ((size_t)1 << 31)

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq memplan [-m MODEL] --mem SIZE [--policies \"P1 P2 ...\"] [options]\n"
            "  Longest context that fits in SIZE per cache policy (weights + KV cache + runtime\n"
            "  buffers) and the KV bytes at a few context lengths. Policies: tools/policy.h.\n"
            "  -m, --model MODEL GGUF model (default: SmolLM2)\n"
            "  --mem SIZE        budget: 16GiB, 16G (= GiB), 512MiB, 8GB (= 8e9), bytes\n"
            "  --policies LIST   policies separated by spaces or '|' (repeatable; default f16)\n"
            "  --policy P        one more policy\n"
            "  --points LIST     context lengths for the KV table (default 4K,32K,128K)\n"
            "  -b, --batch N     prompt tokens per forward chunk (default 256, the engine's)\n"
            "  -t, --threads T   threads, for the attention workspace (default 2)\n"
            "  --overhead SIZE   fixed allowance for tokenizer, plans, stacks (default 64MiB)\n"
            "  --json            one JSON object per policy\n");
}

/* "16GiB" "16G" "1.5GB" "512MiB" "1000000": bytes; -1 if malformed. */
static double parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    double unit = 1;
    const char *u = end;
    int p = 0;
    switch (*u) {
    case 'k': case 'K': p = 1; break;
    case 'm': case 'M': p = 2; break;
    case 'g': case 'G': p = 3; break;
    case 't': case 'T': p = 4; break;
    case 0: break;
    default: return -1;
    }
    if (p) u++;
    int decimal = 0;
    if (!strcmp(u, "iB") || !strcmp(u, "i") || !*u) decimal = 0;
    else if (!strcmp(u, "B")) decimal = p > 0;
    else return -1;
    for (int i = 0; i < p; i++) unit *= decimal ? 1000.0 : 1024.0;
    return v * unit;
}

static size_t al16(size_t x) { return (x + 15) & ~(size_t)15; }

typedef struct {
    size_t state;     /* activation buffers + logits row */
    size_t prefill_ws;/* attention workspace of a prefill chunk */
    size_t overhead;
    int H, G, d, threads;
    size_t qf;        /* prepared query floats of the K plan */
} runtime_model;

/* Attention workspace (floats -> bytes) of a decode step at ctx n (src/cache/attend.c shapes). */
static size_t decode_ws(const runtime_model *r, size_t n) {
    size_t G = (size_t)r->G, d = (size_t)r->d, H = (size_t)r->H;
    size_t rmax = G, state = al16(2 * rmax + 2 * rmax * d + 2);
    size_t scratch = al16(rmax * 256 + state + d + rmax * (d + r->qf));
    size_t nchunk = (n + 2047) / 2048;
    if (nchunk < 1) nchunk = 1;
    size_t need = (size_t)r->threads * scratch;
    if (nchunk > 1) need += al16(H * G * d) + al16(H * G * r->qf) + H * nchunk * state;
    return 4 * need;
}

static size_t runtime_bytes(const runtime_model *r, size_t n, int n_layers) {
    size_t ws = decode_ws(r, n);
    if (r->prefill_ws > ws) ws = r->prefill_ws;
    size_t pages = (n + 63) / 64 + 8; /* page tables: pointers, grown by doubling (64: the smallest page) */
    return r->state + ws + (size_t)n_layers * 2 * pages * sizeof(void *) + r->overhead;
}

static int build_runtime(const kvq_model *m, const kvq_session *s, const char *kspec, int batch, int threads,
                         size_t overhead, runtime_model *r) {
    const size_t B = (size_t)batch;
    kvq_model_info c_info;
    kvq_model_get_info(m, &c_info);
    const kvq_model_info *c = &c_info;
    memset(r, 0, sizeof *r);
    r->state = kvq_session_state_bytes(s) + 4 * (size_t)c->n_vocab; /* activations + one logits row */
    r->H = c->n_head_kv;
    r->G = c->n_head / c->n_head_kv;
    r->d = c->head_dim;
    r->threads = threads;
    r->overhead = overhead;
    int calib = 0;
    int rc = kvq_spec_needs_calibration(kspec, &calib);
    if (rc) return rc;
    float *zero = calloc((size_t)c->head_dim, sizeof *zero);
    if (!zero) return KVQ_ERR_NOMEM;
    kvq_plan *p = NULL;
    rc = kvq_plan_create(&p, kspec, c->head_dim, 0, calib ? zero : NULL, calib ? 1 : 0);
    free(zero);
    if (rc) return rc;
    size_t qf = kvq_plan_query_floats(p);
    kvq_plan_free(p);
    r->qf = qf > 2 * (size_t)c->head_dim ? qf : 2 * (size_t)c->head_dim; /* the f16 tail's rows too */
    /* prefill: tasks of up to 64 query rows, one scratch per thread, no split-K */
    size_t G = (size_t)r->G, d = (size_t)r->d, qt = G >= 64 ? 1 : 64 / G;
    if (qt > B) qt = B;
    size_t rmax = qt * G, state = al16(2 * rmax + 2 * rmax * d + 2);
    r->prefill_ws = 4 * (size_t)threads * al16(rmax * 256 + state + d + rmax * (d + r->qf));
    return KVQ_OK;
}

typedef struct {
    size_t weights, kv, kv_peak, runtime, total;
} mem_at;

static int eval_at(const kvq_cache *c, const runtime_model *r, int n_layers, size_t weights, size_t n, size_t batch,
                   mem_at *out) {
    int rc = kvq_cache_memory_plan(c, n, batch, &out->kv, &out->kv_peak);
    if (rc) return rc;
    out->weights = weights;
    out->runtime = runtime_bytes(r, n, n_layers);
    out->total = weights + out->kv_peak + out->runtime;
    return KVQ_OK;
}

/* What the option callbacks fill. */
typedef struct {
    tool_policy *pols;
    int npol, user_pols;
    long *points;
    int npoints;
    double *mem, *overhead;
} mp_args;

static int on_size(void *user, const char *name, const char *val, char *err, size_t cap) {
    mp_args *a = user;
    double v = parse_size(val);
    if (v < 0 || (v == 0 && !strcmp(name, "--mem"))) {
        snprintf(err, cap, "'%s': not a size (e.g. 16GiB, 16G = GiB, 512MiB, 8GB = 8e9, or bytes%s)", val,
                 !strcmp(name, "--mem") ? "; more than 0" : "");
        return -1;
    }
    *(!strcmp(name, "--mem") ? a->mem : a->overhead) = v;
    return 0;
}

static int on_points(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name;
    mp_args *a = user;
    int n = tool_parse_long_list(val, 1, 1L << 31, a->points, MAX_POINTS, err, cap);
    if (n < 0) return -1;
    a->npoints = n;
    return 0;
}

static int on_policies(void *user, const char *name, const char *val, char *err, size_t cap) {
    mp_args *a = user;
    if (!a->user_pols) a->npol = 0; /* the user's list replaces the default (f16 is added back first) */
    a->user_pols = 1;
    char why[768] = "";
    int n = !strcmp(name, "--policy") ? (tool_policy_parse(val, &a->pols[a->npol], why, sizeof why) ? -1 : 1)
                                      : tool_policy_list(val, a->pols + a->npol, MAX_POLICIES - a->npol, why, sizeof why);
    if (n < 0) {
        snprintf(err, cap, "'%s': %s", val, why);
        return -1;
    }
    a->npol += n;
    return 0;
}

int cmd_memplan(int argc, char **argv) {
    const char *model = NULL;
    double mem = -1, overhead = 64.0 * 1048576;
    long points[MAX_POINTS] = {4096, 32768, 131072};
    int npoints = 3, batch = 256, threads = 2, json = 0, npol = 0;
    tool_policy *pols = calloc(MAX_POLICIES, sizeof *pols);
    if (!pols) return 1;
    tool_policy_init(&pols[npol++]);
    mp_args ma = {pols, 1, 0, points, 3, &mem, &overhead};
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &model},
        {.names = "--mem|--overhead", .kind = TOOL_ARG_FN, .fn = on_size, .user = &ma},
        {.names = "--points", .kind = TOOL_ARG_FN, .fn = on_points, .user = &ma},
        {.names = "--policies|--policy", .kind = TOOL_ARG_FN, .fn = on_policies, .user = &ma},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_INT, .dst = &batch, .min = 1, .max = 65536},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &threads, .min = 1, .max = 256},
        {.names = "--json", .kind = TOOL_ARG_SET, .dst = &json},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "memplan", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) { free(pols); return pr < 0 ? 0 : pr; }
    npol = ma.npol;
    npoints = ma.npoints;
    if (mem <= 0) {
        free(pols);
        return tool_usage_error("memplan", "--mem SIZE is required (e.g. 16GiB, 512MiB, 8GB)");
    }
    char def[4096];
    if (!model) {
        if (tool_default_model(def, sizeof def, 1)) {
            fprintf(stderr, "kvq memplan: no -m given and the default model could not be installed\n");
            free(pols);
            return 1;
        }
        model = def;
    }
    char err[512];
    kvq_model *m = NULL;
    if (kvq_model_load(&m, model, err, sizeof err)) { fprintf(stderr, "kvq memplan: %s\n", err); free(pols); return 1; }
    struct stat st;
    if (stat(model, &st)) { fprintf(stderr, "kvq memplan: %s: cannot stat\n", model); kvq_model_free(m); free(pols); return 1; }
    const size_t weights = (size_t)st.st_size;
    kvq_model_info mc_info;
    kvq_model_get_info(m, &mc_info);
    const kvq_model_info *mc = &mc_info;
    char mname[128];
    {
        const char *b = strrchr(model, '/');
        snprintf(mname, sizeof mname, "%.100s", b ? b + 1 : model);
    }
    /* f16 first, once */
    if (ma.user_pols) {
        int has = 0;
        for (int i = 0; i < npol; i++) {
            char nm[TOOL_POLICY_NAME];
            tool_policy_name(&pols[i], nm, sizeof nm);
            has |= !strcmp(nm, "f16");
        }
        if (!has && npol < MAX_POLICIES) {
            memmove(pols + 1, pols, (size_t)npol * sizeof *pols);
            tool_policy_init(&pols[0]);
            npol++;
        }
    }
    const size_t f16_bpt = (size_t)mc->n_layers * (size_t)mc->n_head_kv * (size_t)mc->head_dim * 4;
    const size_t ctx_model = mc->n_ctx_train > 0 ? (size_t)mc->n_ctx_train : CTX_CAP;
    const size_t budget = mem >= (double)SIZE_MAX ? SIZE_MAX : (size_t)mem;
    if (!json) {
        printf("model %s (%s): weights %.1f MiB, budget %.2f GiB, context %zu, prompt chunks of %d, %d threads\n", mname,
               mc->arch, (double)weights / 1048576.0, (double)budget / 1073741824.0, ctx_model, batch, threads);
        printf("%-34s %9s %6s %9s %16s %12s %10s", "policy", "B/token", "bits", "x f16@long", "max_ctx", "memory alone",
               "runtime");
        for (int j = 0; j < npoints; j++) printf(" %9ld%s", points[j] >= 1024 && points[j] % 1024 == 0 ? points[j] / 1024 : points[j],
                                                 points[j] >= 1024 && points[j] % 1024 == 0 ? "K" : " ");
        printf("   (KV MiB at ctx)\n");
    }
    int ret = 0;
    for (int i = 0; i < npol; i++) {
        char name[TOOL_POLICY_NAME];
        tool_policy_name(&pols[i], name, sizeof name);
        kvq_session_params sp = kvq_session_default_params();
        sp.n_batch = batch;
        kvq_session *s = NULL;
        runtime_model rt;
        int rc = 0;
        if (tool_policy_session_params(&pols[i], mc->n_layers, &sp, err, sizeof err)) {
            fprintf(stderr, "kvq memplan: policy %s: %s\n", name, err);
            ret = 2;
            continue;
        }
        if ((rc = kvq_session_create(&s, m, &sp, NULL)) || (rc = build_runtime(m, s, pols[i].k_spec, batch, threads, (size_t)overhead, &rt))) {
            fprintf(stderr, "kvq memplan: policy %s: %s\n", name, kvq_strerror(rc));
            kvq_session_free(s);
            ret = 2;
            continue;
        }
        const kvq_cache *c = kvq_session_cache(s);
        size_t bpt = kvq_cache_bytes_per_token(c);
        double bits = tool_bits_per_value(bpt, mc);
        double bk = 0, bv = 0;
        tool_policy_bits(&pols[i], mc->head_dim, &bk, &bv);
        /* marginal cost of a token at long context (sliding-window layers no longer grow) */
        size_t k64 = 0, k128 = 0;
        double long_bpt = 0;
        if (!kvq_cache_memory_plan(c, 65536, (size_t)batch, &k64, NULL) &&
            !kvq_cache_memory_plan(c, 131072, (size_t)batch, &k128, NULL))
            long_bpt = (double)(k128 - k64) / 65536.0;
        int n_global = 0;
        for (int l = 0; l < mc->n_layers; l++) n_global += mc->sliding_window[l] == 0;
        double f16_long = 4.0 * n_global * mc->n_head_kv * mc->head_dim;
        double long_x = long_bpt > 0 ? f16_long / long_bpt : 0;
        /* largest n with total(n) <= budget: doubling, then bisection */
        mem_at at0, a;
        size_t lo = 0, hi = 1024, max_ctx = 0;
        int capped = 0;
        rc = eval_at(c, &rt, mc->n_layers, weights, 0, (size_t)batch, &at0);
        if (!rc && at0.total <= budget) {
            while (!rc) {
                if ((rc = eval_at(c, &rt, mc->n_layers, weights, hi, (size_t)batch, &a))) break;
                if (a.total > budget) break;
                lo = hi;
                if (hi >= CTX_CAP) { capped = 1; break; }
                hi *= 2;
            }
            while (!rc && !capped && hi - lo > 1) {
                size_t mid = lo + (hi - lo) / 2;
                if ((rc = eval_at(c, &rt, mc->n_layers, weights, mid, (size_t)batch, &a))) break;
                if (a.total <= budget) lo = mid;
                else hi = mid;
            }
            max_ctx = lo;
        }
        if (rc == KVQ_ERR_OVERFLOW) rc = 0; /* past size_t: did not fit */
        mem_at amax = at0;
        if (!rc) rc = eval_at(c, &rt, mc->n_layers, weights, max_ctx, (size_t)batch, &amax);
        if (rc) {
            fprintf(stderr, "kvq memplan: policy %s: %s\n", name, kvq_strerror(rc));
            kvq_session_free(s);
            ret = 1;
            continue;
        }
        size_t max_model = max_ctx < ctx_model ? max_ctx : ctx_model;
        /* why max_model is what it is */
        const char *why = max_ctx == 0 ? "nothing fits" : max_ctx >= ctx_model ? "model" : "memory";
        char note[256] = "";
        if (max_ctx == 0)
            snprintf(note, sizeof note, "weights %.1f MiB + runtime %.1f MiB at ctx 0 %s the budget %.1f MiB",
                     (double)weights / 1048576.0, (double)at0.runtime / 1048576.0,
                     at0.total > budget ? "exceed" : "leave no room for one token in", (double)budget / 1048576.0);
        if (json) {
            printf("{\"tool\":\"memplan\",\"model\":\"%s\",\"arch\":\"%s\",\"n_layers\":%d,\"n_head_kv\":%d,\"head_dim\":%d,"
                   "\"n_ctx_train\":%d,",
                   mname, mc->arch, mc->n_layers, mc->n_head_kv, mc->head_dim, mc->n_ctx_train);
            tool_policy_json(&pols[i], stdout);
            printf(",\"mem_bytes\":%zu,\"weights_bytes\":%zu,\"kv_bytes_per_token\":%zu,\"f16_kv_bytes_per_token\":%zu,"
                   "\"bits_per_value\":%.4f,\"bits_k\":%.4f,\"bits_v\":%.4f,\"bits_per_value_all_layers\":%.4f,"
                   "\"kv_bytes_per_token_long\":%.1f,\"f16_kv_bytes_per_token_long\":%.1f,\"compression_long\":%.4f,\"batch\":%d,\"threads\":%d,\"overhead_bytes\":%zu,\"max_ctx\":%zu,"
                   "\"max_ctx_capped\":%s,\"max_ctx_model\":%zu,\"max_ctx_limit\":\"%s\",\"runtime_bytes_at_max\":%zu,"
                   "\"kv_bytes_at_max\":%zu,\"points\":[",
                   budget, weights, bpt, f16_bpt, 0.5 * (bk + bv), bk, bv, bits, long_bpt, f16_long, long_x, batch, threads, (size_t)overhead, max_ctx, capped ? "true" : "false",
                   max_model, why, amax.runtime, amax.kv_peak);
            for (int j = 0; j < npoints && !rc; j++) {
                mem_at p;
                rc = eval_at(c, &rt, mc->n_layers, weights, (size_t)points[j], (size_t)batch, &p);
                if (rc == KVQ_ERR_OVERFLOW) { rc = 0; continue; }
                printf("%s{\"ctx\":%ld,\"kv_bytes\":%zu,\"kv_peak_bytes\":%zu,\"runtime_bytes\":%zu,\"total_bytes\":%zu,"
                       "\"fits\":%s}",
                       j ? "," : "", points[j], p.kv, p.kv_peak, p.runtime, p.total, p.total <= budget ? "true" : "false");
            }
            printf("]}\n");
        } else {
            char mx[48], mm[32];
            snprintf(mx, sizeof mx, "%zu (%s)", max_model, why);
            snprintf(mm, sizeof mm, "%s%zu", capped ? ">" : "", max_ctx);
            printf("%-34s %9zu %6.2f %9.2f %16s %12s %9.1fM", name, bpt, bits, long_x, mx, mm,
                   (double)amax.runtime / 1048576.0);
            for (int j = 0; j < npoints && !rc; j++) {
                mem_at p;
                rc = eval_at(c, &rt, mc->n_layers, weights, (size_t)points[j], (size_t)batch, &p);
                if (rc == KVQ_ERR_OVERFLOW) { rc = 0; printf(" %10s", "-"); continue; }
                printf(" %10.1f", (double)p.kv / 1048576.0);
            }
            printf("\n");
            if (note[0]) printf("  %s: %s\n", name, note);
        }
        if (rc) { fprintf(stderr, "kvq memplan: policy %s: %s\n", name, kvq_strerror(rc)); ret = 1; }
        fflush(stdout);
        kvq_session_free(s);
    }
    if (!json)
        printf("bits: all layers as stored per token; x f16@long: f16 / this policy, marginal bytes of a token between 64K and 128K\n"
               "max_ctx: the longest context that fits weights + KV (peak, prompt in chunks of %d) + runtime estimate\n"
               "in the budget, at most the model's own context %zu (the limit in parentheses); memory alone: without\n"
               "that cap\n", batch, ctx_model);
    kvq_model_free(m);
    free(pols);
    return ret;
}
