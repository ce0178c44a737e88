/*
 * kvq attn-bench: decode-step attention on a compressed cache against the
 * f16 cache, side by side in one process on the same data (DESIGN.md §7).
 * One layer of the given shape is filled to each context length; per ctx:
 *   ms_per_step      median over rounds of one decode step (all query heads)
 *   f16_ms_per_step  the same for the f16 cache, timed in the same rounds
 *   speedup          f16_ms_per_step / ms_per_step
 *   rel_err          |o - o_f32| / |o_f32| over all heads of 8 queries, o_f32
 *                    from an f32 cache holding the same vectors
 *   kv_bytes, f16_kv_bytes  kvq_cache_memory_bytes of the two caches
 * With --prefill N also the time of one causal prefill call for the last N
 * positions (prefill_ms, f16_prefill_ms, prefill_speedup).
 * Timing interleaves the two caches (order alternating per round) because
 * the machine is shared and noisy; only the ratio is meaningful.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "vecfile.h"
#include "args.h"
#include "tools.h"

#define MAX_CTX 32
#define N_ERR_QUERIES 8

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq attn-bench --cache-k SPEC --cache-v SPEC --dim D --q-heads HQ --kv-heads HKV --ctx N[,N...]\n"
            "                      [--threads T] [--window W] [--rounds R] [--prefill N] [--data FILE [--vdata FILE]]\n"
            "                      [--seed S] [--json]\n"
            "  Decode-step attention time of the cache policy vs the f16 cache (same run, same data),\n"
            "  output error vs an f32 cache, and memory. Data: Gaussian, or vectors from a vector file\n"
            "  (keys; values from --vdata, else from the same file); queries are rows of the key data.\n");
}

typedef struct { uint64_t s; } rng;
static uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rgauss(rng *r) {
    double u1 = ((double)(rnext(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rnext(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

typedef struct {
    int d, hkv;
    rng r;
    const float *kx, *vx; /* file data or NULL */
    size_t kn, vn, voff;
} source;

/* Rows for tokens [t0, t0 + n): n x hkv x d floats. */
static void fill_rows(source *s, size_t t0, size_t n, float *k, float *v) {
    const size_t row = (size_t)s->hkv * s->d;
    for (size_t t = 0; t < n; t++) {
        for (int h = 0; h < s->hkv; h++) {
            float *kd = k + t * row + (size_t)h * s->d, *vd = v + t * row + (size_t)h * s->d;
            if (s->kx) {
                size_t i = ((t0 + t) * s->hkv + h) % s->kn, j = ((t0 + t) * s->hkv + h + s->voff) % s->vn;
                memcpy(kd, s->kx + i * s->d, (size_t)s->d * sizeof *kd);
                memcpy(vd, s->vx + j * s->d, (size_t)s->d * sizeof *vd);
            } else {
                for (int c = 0; c < s->d; c++) kd[c] = (float)rgauss(&s->r);
                for (int c = 0; c < s->d; c++) vd[c] = (float)rgauss(&s->r);
            }
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Seconds per call of attend (nq query tokens ending at the last position), over `reps` calls. */
static double time_steps(kvq_cache *c, const float *q, size_t nq, int hq, size_t ctx, float scale, float *out,
                         kvq_pool *pool, int reps, int *rc) {
    double t0 = tool_now();
    for (int i = 0; i < reps && !*rc; i++) *rc = kvq_cache_attend(c, 0, q, nq, hq, ctx - nq, scale, out, pool);
    return (tool_now() - t0) / reps;
}

/* Median seconds per call of the two caches, timed in alternating order. */
static void time_pair(kvq_cache *a, kvq_cache *b, const float *q, size_t nq, int hq, size_t ctx, float scale, float *out,
                      kvq_pool *pool, int rounds, double *ta, double *tb, double *scr, int *reps_out, int *rc) {
    double one = time_steps(b, q, nq, hq, ctx, scale, out, pool, 1, rc);
    int reps = one > 0 ? (int)(0.02 / one) + 1 : 1;
    if (reps > 1000) reps = 1000;
    double *sa = scr, *sb = scr + rounds;
    for (int r = 0; r < rounds && !*rc; r++) {
        if (r % 2 == 0) {
            sb[r] = time_steps(b, q, nq, hq, ctx, scale, out, pool, reps, rc);
            sa[r] = time_steps(a, q, nq, hq, ctx, scale, out, pool, reps, rc);
        } else {
            sa[r] = time_steps(a, q, nq, hq, ctx, scale, out, pool, reps, rc);
            sb[r] = time_steps(b, q, nq, hq, ctx, scale, out, pool, reps, rc);
        }
    }
    qsort(sa, (size_t)rounds, sizeof *sa, cmp_double);
    qsort(sb, (size_t)rounds, sizeof *sb, cmp_double);
    *ta = sa[rounds / 2];
    *tb = sb[rounds / 2];
    *reps_out = reps;
}

typedef struct { long *ctx; int n; } ctx_list;

static int on_ctx(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name;
    ctx_list *c = user;
    int n = tool_parse_long_list(val, 1, 1L << 28, c->ctx, MAX_CTX, err, cap);
    if (n < 0) return -1;
    c->n = n;
    return 0;
}

int cmd_attn_bench(int argc, char **argv) {
    const char *ks = NULL, *vs = NULL, *data = NULL, *vdata = NULL;
    int d = 0, hq = 0, hkv = 0, threads = 1, window = 0, rounds = 9, json = 0, prefill = 0;
    long ctxs[MAX_CTX];
    int nctx = 0;
    uint64_t seed = 1;
    ctx_list cl = {ctxs, 0};
    const tool_opt opts[] = {
        {.names = "--cache-k", .kind = TOOL_ARG_STR, .dst = &ks},
        {.names = "--cache-v", .kind = TOOL_ARG_STR, .dst = &vs},
        {.names = "--dim", .kind = TOOL_ARG_INT, .dst = &d, .min = KVQ_DIM_MIN, .max = KVQ_DIM_MAX},
        {.names = "--q-heads", .kind = TOOL_ARG_INT, .dst = &hq, .min = 1, .max = 1024},
        {.names = "--kv-heads", .kind = TOOL_ARG_INT, .dst = &hkv, .min = 1, .max = 1024},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &threads, .min = 1, .max = 256},
        {.names = "--window", .kind = TOOL_ARG_INT, .dst = &window, .min = 0, .max = 1 << 28},
        {.names = "--rounds", .kind = TOOL_ARG_INT, .dst = &rounds, .min = 1, .max = 1000},
        {.names = "--prefill", .kind = TOOL_ARG_INT, .dst = &prefill, .min = 0, .max = 1 << 28},
        {.names = "--data", .kind = TOOL_ARG_STR, .dst = &data},
        {.names = "--vdata", .kind = TOOL_ARG_STR, .dst = &vdata},
        {.names = "--seed", .kind = TOOL_ARG_U64, .dst = &seed},
        {.names = "--ctx|-c", .kind = TOOL_ARG_FN, .fn = on_ctx, .user = &cl},
        {.names = "--json", .kind = TOOL_ARG_SET, .dst = &json},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "attn-bench", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    nctx = cl.n;
    if (!ks || !vs || !d || !hq || !hkv || !nctx)
        return tool_usage_error("attn-bench", "--cache-k, --cache-v, --dim, --q-heads, --kv-heads and --ctx are required");
    if (hq % hkv) return tool_usage_error("attn-bench", "--q-heads %d is not a multiple of --kv-heads %d", hq, hkv);
    for (int i = 1; i < nctx; i++) /* ascending: the caches grow from one ctx to the next */
        for (int j = i; j > 0 && ctxs[j - 1] > ctxs[j]; j--) { long t = ctxs[j]; ctxs[j] = ctxs[j - 1]; ctxs[j - 1] = t; }

    source src = {d, hkv, {seed}, NULL, NULL, 0, 0, 0};
    float *kfile = NULL, *vfile = NULL;
    int rc = 0, reported = 0;
    if (data) {
        kvq_vecfile_info info;
        if ((rc = kvq_vecfile_read(data, &info, &kfile))) { fprintf(stderr, "attn-bench: %s: %s\n", data, kvq_strerror(rc)); return 1; }
        if ((int)info.dim != d || info.count == 0) { fprintf(stderr, "attn-bench: %s has dim %u, --dim is %d\n", data, info.dim, d); free(kfile); return 1; }
        src.kx = kfile;
        src.kn = info.count;
        src.vx = kfile;
        src.vn = info.count;
        src.voff = info.count / 2;
        if (vdata) {
            if ((rc = kvq_vecfile_read(vdata, &info, &vfile)) || (int)info.dim != d || info.count == 0) {
                fprintf(stderr, "attn-bench: %s: %s\n", vdata, rc ? kvq_strerror(rc) : "wrong dim or empty");
                free(kfile);
                free(vfile);
                return 1;
            }
            src.vx = vfile;
            src.vn = info.count;
            src.voff = 0;
        }
    }

    kvq_pool *pool = NULL;
    kvq_cache *ours = NULL, *f16 = NULL, *f32 = NULL;
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = 1;
    cfg.n_kv_heads = hkv;
    cfg.head_dim = d;
    cfg.seed = seed;
    cfg.k_spec = ks;
    cfg.v_spec = vs;
    cfg.f16_window = window;
    const size_t row = (size_t)hkv * d, qn = (size_t)hq * d, batch = 512;
    float *kb = malloc(batch * row * sizeof *kb), *vb = malloc(batch * row * sizeof *vb);
    const size_t nqmax = (size_t)(prefill > N_ERR_QUERIES ? prefill : N_ERR_QUERIES);
    float *q = malloc(nqmax * qn * sizeof *q), *o = malloc(nqmax * qn * sizeof *o), *of = malloc(qn * sizeof *of);
    double *scr = malloc(2 * (size_t)rounds * sizeof *scr);
    if (!kb || !vb || !q || !o || !of || !scr) { rc = KVQ_ERR_NOMEM; goto done; }
    if ((rc = kvq_pool_create(&pool, threads))) goto done;
    if ((rc = kvq_cache_create(&ours, &cfg))) {
        fprintf(stderr, "attn-bench: cache k=%s v=%s: %s\n", ks, vs, kvq_strerror(rc));
        reported = 1;
        goto done;
    }
    cfg.k_spec = cfg.v_spec = "f16";
    cfg.f16_window = 0;
    if ((rc = kvq_cache_create(&f16, &cfg))) goto done;
    cfg.k_spec = cfg.v_spec = "f32";
    if ((rc = kvq_cache_create(&f32, &cfg))) goto done;
    /* queries: Gaussian, or rows of the key data */
    rng qr = {seed ^ 0x5155455259ull};
    for (size_t i = 0; i < nqmax * (size_t)hq; i++) {
        float *qd = q + i * d;
        if (src.kx) memcpy(qd, src.kx + (rnext(&qr) % src.kn) * d, (size_t)d * sizeof *qd);
        else for (int c = 0; c < d; c++) qd[c] = (float)rgauss(&qr);
    }
    const float scale = 1.0f / sqrtf((float)d);
    if (!json)
        printf("%-8s %-22s %-22s %12s %14s %8s %9s %12s %14s\n", "ctx", "k", "v", "ms_per_step", "f16_ms_per_step",
               "speedup", "rel_err", "kv_bytes", "f16_kv_bytes");
    size_t have = 0;
    for (int ci = 0; ci < nctx && !rc; ci++) {
        const size_t ctx = (size_t)ctxs[ci];
        while (have < ctx && !rc) {
            size_t n = ctx - have < batch ? ctx - have : batch;
            fill_rows(&src, have, n, kb, vb);
            if (!(rc = kvq_cache_append(ours, 0, kb, vb, n)) && !(rc = kvq_cache_append(f16, 0, kb, vb, n)))
                rc = kvq_cache_append(f32, 0, kb, vb, n);
            have += n;
        }
        if (rc) break;
        /* accuracy: 8 decode steps at the last position */
        double e2 = 0, r2 = 0;
        for (int i = 0; i < N_ERR_QUERIES && !rc; i++) {
            if ((rc = kvq_cache_attend(ours, 0, q + i * qn, 1, hq, ctx - 1, scale, o, pool))) break;
            if ((rc = kvq_cache_attend(f32, 0, q + i * qn, 1, hq, ctx - 1, scale, of, pool))) break;
            for (size_t j = 0; j < qn; j++) {
                e2 += ((double)o[j] - of[j]) * ((double)o[j] - of[j]);
                r2 += (double)of[j] * of[j];
            }
        }
        if (rc) break;
        /* timing: reps per round so that a round of one cache takes ~20 ms */
        double ts, tf, pts = 0, ptf = 0;
        int reps, preps = 0;
        time_pair(ours, f16, q, 1, hq, ctx, scale, o, pool, rounds, &ts, &tf, scr, &reps, &rc);
        size_t np = (size_t)prefill < ctx ? (size_t)prefill : ctx;
        if (!rc && np) time_pair(ours, f16, q, np, hq, ctx, scale, o, pool, rounds, &pts, &ptf, scr, &preps, &rc);
        if (rc) break;
        double m = 1e3 * ts, mf = 1e3 * tf, err = r2 > 0 ? sqrt(e2 / r2) : 0;
        size_t kvb = kvq_cache_memory_bytes(ours), fb = kvq_cache_memory_bytes(f16);
        if (json) {
            printf("{\"tool\":\"attn-bench\",\"k\":\"%s\",\"v\":\"%s\",\"dim\":%d,\"q_heads\":%d,\"kv_heads\":%d,"
                   "\"threads\":%d,\"window\":%d,\"data\":\"%s\",\"ctx\":%zu,\"ms_per_step\":%.4f,\"f16_ms_per_step\":%.4f,"
                   "\"speedup\":%.3f,\"rel_err\":%.5f,\"kv_bytes\":%zu,\"f16_kv_bytes\":%zu,\"rounds\":%d,\"reps\":%d",
                   ks, vs, d, hq, hkv, threads, window, data ? data : "gauss", ctx, m, mf, mf / m, err, kvb, fb, rounds, reps);
            if (np)
                printf(",\"prefill_tokens\":%zu,\"prefill_ms\":%.3f,\"f16_prefill_ms\":%.3f,\"prefill_speedup\":%.3f", np,
                       1e3 * pts, 1e3 * ptf, ptf / pts);
            printf("}\n");
        } else {
            printf("%-8zu %-22s %-22s %12.4f %14.4f %8.2f %9.5f %12zu %14zu", ctx, ks, vs, m, mf, mf / m, err, kvb, fb);
            if (np) printf("   prefill %zu: %.3f ms vs f16 %.3f ms (%.2fx)", np, 1e3 * pts, 1e3 * ptf, ptf / pts);
            printf("\n");
        }
        fflush(stdout);
    }
done:
    if (rc && !reported) fprintf(stderr, "attn-bench: %s\n", kvq_strerror(rc));
    kvq_cache_free(ours);
    kvq_cache_free(f16);
    kvq_cache_free(f32);
    kvq_pool_free(pool);
    free(kb);
    free(vb);
    free(q);
    free(o);
    free(of);
    free(scr);
    free(kfile);
    free(vfile);
    return rc ? 1 : 0;
}
