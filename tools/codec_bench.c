/*
 * kvq codec-bench: quality, honest size and speed of every codec method on
 * Gaussian, Laplacian or dumped K/V vectors. One JSON object per method with
 * --json. Metrics (DESIGN.md §7):
 *   bits_per_value  every stored byte of a vector (scales, norms) * 8 / d
 *   cosine          mean cos(x, x̂)
 *   rel_mse         mean |x - x̂|^2 / |x|^2 (null for key-only methods)
 *   rd_gap_db       10 log10(rel_mse / 2^(-2 bits_per_value)): the gap to the
 *                   Gaussian rate-distortion bound (rd_bound.h; null without
 *                   rel_mse or when rel_mse is 0)
 *   ip_rel_err      mean |est - <q,k>| / (|q| |k|) over 16 Gaussian queries per key
 *   ip_bias         sum (est - true) * true / sum true^2 (0: unbiased)
 *   encode/decode_vectors_per_s  one thread, batched calls
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "vecfile.h"
#include "rd_bound.h"
#include "args.h"
#include "tools.h"

#define NQ 16

static const char *ALL_METHODS[] = {
    "f32", "f16", "bf16", "q8", "q4",
    "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "tq-mse:5", "tq-mse:6", "tq-mse:7", "tq-mse:8",
    "tq-prod:2", "tq-prod:3", "tq-prod:4", "tq-prod:5", "tq-prod:6", "tq-prod:7", "tq-prod:8",
    "qjl", "polar", "rvq:1", "rvq:2",
    "tq-mse:2+outliers=8", "tq-mse:3+outliers=8", "tq-mse:4+outliers=8", "q8+outliers=8",
    "tcq:2", "tcq:3", "tcq:4",
};

typedef struct { uint64_t s; } rng;
static uint64_t rnext(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double runif(rng *r) { return ((double)(rnext(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double rgauss(rng *r) { return sqrt(-2 * log(runif(r))) * cos(2 * M_PI * runif(r)); }
static double rlaplace(rng *r) {
    double u = runif(r) - 0.5, m = -log(1 - 2 * fabs(u)) / sqrt(2.0);
    return u < 0 ? -m : m;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq codec-bench --method SPEC|all --dim D --n N [--data gauss|laplace|FILE] [--seed S] [--json]\n"
            "  FILE: a vector file (docs/FORMAT.md), e.g. from kvq dump-kv; --dim must match it\n"
            "  --dim D: 32..512, a multiple of 8 (default 128); --n N: 1..10000000 (default 20000);\n"
            "  --method all: every method of the registry at its widths\n");
}

typedef struct {
    double bits, cosine, rel_mse, ip_rel_err, ip_bias, enc_rate, dec_rate;
    int has_mse, ok;
} result;

static int bench_one(const char *spec, int d, size_t n, const float *x, uint64_t seed, result *res, char *err, size_t errcap) {
    memset(res, 0, sizeof *res);
    kvq_plan *p = NULL;
    size_t ncal = n < 256 ? n : 256;
    int rc = kvq_plan_create(&p, spec, d, seed, x, ncal);
    if (rc) { snprintf(err, errcap, "%s", kvq_strerror(rc)); return rc; }
    size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    uint8_t *codes = malloc(n * cb);
    float *dec = malloc(n * (size_t)d * sizeof *dec);
    float *q = malloc((size_t)NQ * d * sizeof *q), *qp = malloc(NQ * qf * sizeof *qp);
    float *scores = malloc((size_t)NQ * n * sizeof *scores);
    if (!codes || !dec || !q || !qp || !scores) { rc = KVQ_ERR_NOMEM; goto done; }
    res->bits = kvq_plan_bits_per_value(p);
    /* encode speed: repeat until >= 0.2 s */
    double t0 = tool_now(), el;
    size_t reps = 0;
    do {
        rc = kvq_encode(p, x, KVQ_DTYPE_F32, n, codes);
        if (rc) { snprintf(err, errcap, "encode: %s", kvq_strerror(rc)); goto done; }
        reps++;
    } while ((el = tool_now() - t0) < 0.2);
    res->enc_rate = (double)(reps * n) / el;
    res->has_mse = kvq_plan_can_decode(p);
    if (res->has_mse) {
        t0 = tool_now();
        reps = 0;
        do {
            kvq_decode(p, codes, n, dec);
            reps++;
        } while ((el = tool_now() - t0) < 0.2);
        res->dec_rate = (double)(reps * n) / el;
        double cs = 0, ms = 0;
        for (size_t i = 0; i < n; i++) {
            const float *a = x + i * d, *b = dec + i * d;
            double xx = 0, yy = 0, xy = 0, ee = 0;
            for (int c = 0; c < d; c++) {
                xx += (double)a[c] * a[c];
                yy += (double)b[c] * b[c];
                xy += (double)a[c] * b[c];
                ee += ((double)a[c] - b[c]) * ((double)a[c] - b[c]);
            }
            cs += xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : (xx == yy ? 1 : 0);
            ms += xx > 0 ? ee / xx : 0;
        }
        res->cosine = cs / n;
        res->rel_mse = ms / n;
    }
    /* inner products with 16 Gaussian queries */
    rng r = {seed ^ 0x5155455259ull};
    double qn[NQ];
    for (int j = 0; j < NQ; j++) {
        double s = 0;
        for (int c = 0; c < d; c++) {
            q[j * d + c] = (float)rgauss(&r);
            s += (double)q[j * d + c] * q[j * d + c];
        }
        qn[j] = sqrt(s);
        kvq_query_prepare(p, q + j * d, qp + j * qf);
    }
    rc = kvq_score(p, qp, NQ, codes, n, scores);
    if (rc) { snprintf(err, errcap, "score: %s", kvq_strerror(rc)); goto done; }
    double rel = 0, num = 0, den = 0, cs = 0;
    for (size_t i = 0; i < n; i++) {
        const float *k = x + i * d;
        double kn = 0;
        for (int c = 0; c < d; c++) kn += (double)k[c] * k[c];
        kn = sqrt(kn);
        for (int j = 0; j < NQ; j++) {
            double t = 0;
            for (int c = 0; c < d; c++) t += (double)q[j * d + c] * k[c];
            double e = scores[(size_t)j * n + i];
            if (kn > 0) rel += fabs(e - t) / (qn[j] * kn);
            num += (e - t) * t;
            den += t * t;
        }
    }
    (void)cs;
    res->ip_rel_err = rel / ((double)n * NQ);
    res->ip_bias = den > 0 ? num / den : 0;
    if (!res->has_mse) { /* cosine of key-only methods: not defined */
        res->cosine = NAN;
    }
    res->ok = 1;
done:
    free(codes);
    free(dec);
    free(q);
    free(qp);
    free(scores);
    kvq_plan_free(p);
    return rc;
}

int cmd_codec_bench(int argc, char **argv) {
    const char *method = "all", *data = "gauss";
    long d = 128, n = 20000;
    uint64_t seed = 1;
    int json = 0;
    const tool_opt opts[] = {
        {.names = "--method", .kind = TOOL_ARG_STR, .dst = &method},
        {.names = "--dim", .kind = TOOL_ARG_LONG, .dst = &d, .min = KVQ_DIM_MIN, .max = KVQ_DIM_MAX},
        {.names = "--n", .kind = TOOL_ARG_LONG, .dst = &n, .min = 1, .max = 10000000},
        {.names = "--data", .kind = TOOL_ARG_STR, .dst = &data},
        {.names = "--seed", .kind = TOOL_ARG_U64, .dst = &seed},
        {.names = "--json", .kind = TOOL_ARG_SET, .dst = &json},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "codec-bench", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if (d % 8) return tool_usage_error("codec-bench", "--dim %ld: not a multiple of 8 (accepted: %d..%d, multiples of 8)", d, KVQ_DIM_MIN, KVQ_DIM_MAX);
    float *x = NULL;
    if (!strcmp(data, "gauss") || !strcmp(data, "laplace")) {
        x = malloc((size_t)n * d * sizeof *x);
        if (!x) { fprintf(stderr, "codec-bench: out of memory\n"); return 1; }
        rng r = {seed * 0x2545f4914f6cdd1dull + 7};
        int lap = !strcmp(data, "laplace");
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] = (float)(lap ? rlaplace(&r) : rgauss(&r));
    } else {
        kvq_vecfile_info info;
        int rc = kvq_vecfile_read(data, &info, &x);
        if (rc) { fprintf(stderr, "codec-bench: %s: %s\n", data, kvq_strerror(rc)); return 1; }
        if ((long)info.dim != d) {
            fprintf(stderr, "codec-bench: %s holds dim %u vectors, not %ld\n", data, info.dim, d);
            free(x);
            return 1;
        }
        if ((long)info.count < n) n = (long)info.count;
    }
    const char *one[1] = {method};
    const char **list = one;
    size_t nlist = 1;
    if (!strcmp(method, "all")) { list = ALL_METHODS; nlist = sizeof ALL_METHODS / sizeof *ALL_METHODS; }
    if (!json)
        printf("%-22s %6s %8s %9s %7s %10s %9s %12s %12s\n", "method", "bits", "cosine", "rel_mse", "dB_D(R)",
               "ip_rel_err", "ip_bias", "enc_vec/s", "dec_vec/s");
    int failures = 0;
    for (size_t m = 0; m < nlist; m++) {
        result r;
        char err[128] = "";
        int rc = bench_one(list[m], (int)d, (size_t)n, x, seed, &r, err, sizeof err);
        if (rc) {
            if (rc == KVQ_ERR_UNKNOWN_METHOD && list == ALL_METHODS) continue; /* not in this build */
            fprintf(stderr, "codec-bench: %s: %s\n", list[m], err);
            failures++;
            continue;
        }
        double gap = r.has_mse ? tool_rd_gap_db(r.rel_mse, r.bits) : NAN;
        int has_gap = isfinite(gap);
        if (json) {
            printf("{\"method\":\"%s\",\"dim\":%ld,\"bits_per_value\":%.4f,", list[m], d, r.bits);
            if (r.has_mse) printf("\"cosine\":%.6f,\"rel_mse\":%.6f,", r.cosine, r.rel_mse);
            else printf("\"cosine\":null,\"rel_mse\":null,");
            if (has_gap) printf("\"rd_gap_db\":%.4f,", gap);
            else printf("\"rd_gap_db\":null,");
            printf("\"ip_rel_err\":%.6f,\"ip_bias\":%.6f,\"encode_vectors_per_s\":%.0f,", r.ip_rel_err, r.ip_bias, r.enc_rate);
            if (r.has_mse) printf("\"decode_vectors_per_s\":%.0f}\n", r.dec_rate);
            else printf("\"decode_vectors_per_s\":null}\n");
        } else {
            char cs[16] = "-", ms[16] = "-", ds[16] = "-", gs[16] = "-";
            if (has_gap) snprintf(gs, sizeof gs, "%.2f", gap);
            if (r.has_mse) {
                snprintf(cs, sizeof cs, "%.5f", r.cosine);
                snprintf(ms, sizeof ms, "%.5f", r.rel_mse);
                snprintf(ds, sizeof ds, "%.3g", r.dec_rate);
            }
            printf("%-22s %6.3f %8s %9s %7s %10.5f %9.4f %12.3g %12s\n", list[m], r.bits, cs, ms, gs, r.ip_rel_err,
                   r.ip_bias, r.enc_rate, ds);
        }
        fflush(stdout);
    }
    free(x);
    return failures ? 1 : 0;
}
