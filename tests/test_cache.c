/*
 * KV cache and fused attention: every method as K and as V against a
 * float64 reference computed from the records the cache holds (decoded with
 * kvq_decode, or scored with kvq_score for key-only keys), f32/f16 caches
 * against float64 attention on the raw inputs, SIMD = scalar, N threads = 1
 * thread, the same rows in one call or many (bit for bit, every ISA), window
 * and sliding-window boundaries, truncate, batching,
 * memory accounting, bad arguments.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "codec/codec_internal.h"
#include "cpu.h"
#include "kvq.h"
#include "testutil.h"
#include "cache_ref.h"

/* float64 attention on raw float inputs (k, v: len x H x d token-major). */
static void ref_raw(const float *k, const float *v, int H, int d, const float *q, size_t nq, int HQ, size_t pos0,
                    float scale, double *out) {
    const int G = HQ / H;
    double *logit = malloc((pos0 + nq) * sizeof *logit);
    for (size_t t = 0; t < nq; t++) {
        for (int hq = 0; hq < HQ; hq++) {
            int h = hq / G;
            const float *qr = q + (t * HQ + hq) * d;
            double mx = -INFINITY, sum = 0, *o = out + (t * HQ + hq) * d;
            for (size_t p = 0; p <= pos0 + t; p++) {
                double s = 0;
                for (int i = 0; i < d; i++) s += (double)qr[i] * k[(p * H + h) * d + i];
                logit[p] = s * scale;
                if (logit[p] > mx) mx = logit[p];
            }
            for (int i = 0; i < d; i++) o[i] = 0;
            for (size_t p = 0; p <= pos0 + t; p++) {
                double w = exp(logit[p] - mx);
                sum += w;
                for (int i = 0; i < d; i++) o[i] += w * v[(p * H + h) * d + i];
            }
            for (int i = 0; i < d; i++) o[i] /= sum;
        }
    }
    free(logit);
}

/* ---- every method as K and as V --------------------------------------------- */
static const char *const SPECS[] = {"f32", "f16", "bf16", "q8", "q4", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4",
                                    "tq-prod:3", "qjl", "rvq:1", "rvq:2", "tq-mse:4+outliers=8"};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])
#define MAX_SPECS 32

/* The list above plus any registry method it does not name (e.g. polar). */
static int spec_list(const char **out) {
    int n = 0;
    for (size_t i = 0; i < NSPECS; i++) out[n++] = SPECS[i];
    for (size_t m = 0; m < kvq_n_methods && n < MAX_SPECS; m++) {
        const char *name = kvq_methods[m]->name;
        int named = 0;
        for (size_t i = 0; i < NSPECS; i++) {
            size_t l = strlen(name);
            named |= !strncmp(SPECS[i], name, l) && (SPECS[i][l] == 0 || SPECS[i][l] == ':' || SPECS[i][l] == '+');
        }
        if (!named) out[n++] = name;
    }
    return n;
}

static int spec_can_decode(const char *spec, int d) {
    kvq_plan *p;
    float *z = calloc((size_t)d, sizeof *z);
    int ok = kvq_plan_create(&p, spec, d, 1, z, 1) == KVQ_OK;
    free(z);
    if (!ok) return 0;
    int r = kvq_plan_can_decode(p);
    kvq_plan_free(p);
    return r;
}

/*
 * One configuration: appends ctx tokens (in a few batches), then checks a
 * decode step at the last position and a short causal prefill against the
 * float64 reference from the cache's records.
 */
static void check_policy(const char *ks, const char *vs, int d, int H, int G, size_t ctx, int window, kvq_pool *pool,
                         tu_rng *rng) {
    kvq_cache_config cfg = cr_base_cfg(1, H, d, ks, vs);
    cfg.f16_window = window;
    kvq_cache *c;
    int rc = kvq_cache_create(&c, &cfg);
    CHECK(rc == KVQ_OK, "create k=%s v=%s d=%d: %s", ks, vs, d, kvq_strerror(rc));
    if (rc) return;
    const size_t row = (size_t)H * d;
    float *k = cr_gauss(rng, ctx * row, 1.0), *v = cr_gauss(rng, ctx * row, 1.0);
    /* a few outlier channels, so that +outliers has something to find */
    for (size_t i = 0; i < ctx * (size_t)H; i++) k[i * d + 3] *= 6, k[i * d + d - 5] *= 4;
    size_t done = 0, step = ctx / 3 + 1;
    while (done < ctx) {
        size_t n = ctx - done < step ? ctx - done : step;
        CHECK_OK(kvq_cache_append(c, 0, k + done * row, v + done * row, n));
        done += n;
    }
    CHECK(kvq_cache_len(c, 0) == ctx, "len");
    const int HQ = H * G;
    const size_t nq_pre = ctx < 5 ? ctx : 5;
    float *q = cr_gauss(rng, nq_pre * HQ * (size_t)d, 1.0);
    float *out = malloc(nq_pre * HQ * (size_t)d * sizeof *out);
    double *ref = malloc(nq_pre * HQ * (size_t)d * sizeof *ref);
    const float scale = 1.0f / sqrtf((float)d);
    /* decode step */
    CHECK_OK(kvq_cache_attend(c, 0, q, 1, HQ, ctx - 1, scale, out, pool));
    cr_ref_from_cache(c, 0, q, 1, HQ, ctx - 1, scale, 0, ref);
    double e = cr_worst_row_err(out, ref, (size_t)HQ, d);
    CHECK(e < 2e-4, "decode k=%s v=%s d=%d H=%d G=%d ctx=%zu W=%d: rel err %.3g", ks, vs, d, H, G, ctx, window, e);
    /* prefill of the last nq_pre positions */
    CHECK_OK(kvq_cache_attend(c, 0, q, nq_pre, HQ, ctx - nq_pre, scale, out, pool));
    cr_ref_from_cache(c, 0, q, nq_pre, HQ, ctx - nq_pre, scale, 0, ref);
    e = cr_worst_row_err(out, ref, nq_pre * HQ, d);
    CHECK(e < 2e-4, "prefill k=%s v=%s d=%d H=%d G=%d ctx=%zu W=%d: rel err %.3g", ks, vs, d, H, G, ctx, window, e);
    free(k);
    free(v);
    free(q);
    free(out);
    free(ref);
    kvq_cache_free(c);
}

static void test_methods(kvq_pool *pool) {
    const char *specs[MAX_SPECS];
    int ns = spec_list(specs);
    static const int dims[] = {64, 128, 256};
    static const int groups[] = {1, 3, 4, 8};
    static const size_t ctxs[] = {1, 7, 100, 4097};
    tu_rng rng = {1234};
    int combo = 0;
    for (int i = 0; i < ns; i++) {
        for (int asv = 0; asv < 2; asv++) {
            if (asv && !spec_can_decode(specs[i], 128)) continue;
            for (int ci = 0; ci < 4; ci++, combo++) {
                /* a sample of the (dim, group, ctx) product: every ctx for
                 * every method, dims and groups rotating */
                int d = dims[(combo + i) % 3], G = groups[(combo / 3 + asv) % 4];
                size_t ctx = ctxs[ci];
                if (ctx > 1000 && d == 256) d = 128; /* keep the test short */
                int H = ctx > 1000 ? 1 : 2;
                const char *ks = asv ? "f16" : specs[i], *vs = asv ? specs[i] : "q8";
                check_policy(ks, vs, d, H, G, ctx, 0, pool, &rng);
            }
        }
    }
    /* asymmetric pairs and the f16 window */
    check_policy("q8", "tq-mse:4", 128, 2, 4, 300, 0, pool, &rng);
    check_policy("tq-mse:4", "tq-mse:3", 128, 2, 4, 300, 16, pool, &rng);
    check_policy("tq-prod:3", "tq-mse:2", 64, 3, 3, 700, 33, pool, &rng);
    check_policy("tq-mse:4+outliers=8", "tq-mse:4+outliers=8", 128, 2, 2, 400, 8, pool, &rng);
    check_policy("tq-mse:4+chscale", "tq-mse:3+chscale", 64, 3, 3, 300, 8, pool, &rng);
    /* dims that are not powers of two (Haar rotations), the largest dim, large groups */
    check_policy("tq-mse:3", "tq-mse:4", 96, 1, 5, 300, 0, pool, &rng);
    check_policy("q8", "tq-mse:2", 80, 2, 16, 200, 4, pool, &rng);
    check_policy("tq-mse:4", "f16", 512, 1, 65, 150, 0, pool, &rng);
}

/* ---- a whole causal prefill in one call (many query blocks, pages, window) ---- */
static void test_prefill(kvq_pool *pool) {
    tu_rng rng = {29};
    const int H = 2, d = 64, G = 3, HQ = H * G;
    const size_t n = 700, row = (size_t)H * d, on = n * HQ * (size_t)d;
    kvq_cache_config cfg = cr_base_cfg(1, H, d, "tq-mse:4", "tq-mse:3");
    cfg.f16_window = 37;
    kvq_cache *c;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    float *k = cr_gauss(&rng, n * row, 1.0), *v = cr_gauss(&rng, n * row, 1.0), *q = cr_gauss(&rng, on, 2.0);
    float *out = malloc(on * sizeof *out);
    double *ref = malloc(on * sizeof *ref);
    CHECK_OK(kvq_cache_append(c, 0, k, v, n));
    CHECK_OK(kvq_cache_attend(c, 0, q, n, HQ, 0, 0.125f, out, pool));
    cr_ref_from_cache(c, 0, q, n, HQ, 0, 0.125f, 0, ref);
    double e = cr_worst_row_err(out, ref, n * HQ, d);
    CHECK(e < 2e-4, "whole prefill: rel err %.3g", e);
    /* the first token sees only itself: its output is its own value */
    const uint8_t *kr, *vr;
    const kvq_plan *kp, *vp;
    float v0[64];
    CHECK_OK(cache_locate(c, 0, 1, 0, &kr, &kp, &vr, &vp));
    CHECK_OK(kvq_decode(vp, vr, 1, v0));
    CHECK(tu_rel_l2(out + (size_t)(1 * G) * d, v0, (size_t)d) < 1e-5, "position 0 attends to itself");
    free(k);
    free(v);
    free(q);
    free(out);
    free(ref);
    kvq_cache_free(c);
}

/* ---- f32 / f16 caches against float64 attention on the raw inputs ---------- */
static void test_raw(kvq_pool *pool) {
    tu_rng rng = {99};
    static const char *const specs[] = {"f32", "f16"};
    for (int s = 0; s < 2; s++) {
        for (int cfgi = 0; cfgi < 3; cfgi++) {
            int d = cfgi == 0 ? 64 : cfgi == 1 ? 128 : 256, H = 2, G = cfgi == 2 ? 1 : 4;
            size_t ctx = cfgi == 1 ? 3000 : 257;
            kvq_cache_config cfg = cr_base_cfg(2, H, d, specs[s], specs[s]);
            kvq_cache *c;
            CHECK_OK(kvq_cache_create(&c, &cfg));
            const size_t row = (size_t)H * d;
            float *k = cr_gauss(&rng, ctx * row, 2.0), *v = cr_gauss(&rng, ctx * row, 1.0);
            CHECK_OK(kvq_cache_append(c, 1, k, v, ctx));
            const int HQ = H * G;
            const size_t nq = 3;
            float *q = cr_gauss(&rng, nq * HQ * (size_t)d, 1.0), *out = malloc(nq * HQ * (size_t)d * sizeof *out);
            double *ref = malloc(nq * HQ * (size_t)d * sizeof *ref);
            float scale = 1.0f / sqrtf((float)d);
            CHECK_OK(kvq_cache_attend(c, 1, q, nq, HQ, ctx - nq, scale, out, pool));
            ref_raw(k, v, H, d, q, nq, HQ, ctx - nq, scale, ref);
            double e = cr_rel_err(out, ref, nq * HQ * (size_t)d);
            CHECK(e < 1e-3, "%s cache vs raw float64, d=%d ctx=%zu: rel err %.3g", specs[s], d, ctx, e);
            if (s == 0) CHECK(e < 1e-5, "f32 cache vs raw float64 d=%d: rel err %.3g", d, e);
            free(k);
            free(v);
            free(q);
            free(out);
            free(ref);
            kvq_cache_free(c);
        }
    }
}

/* ---- SIMD = scalar, N threads = 1 thread ------------------------------------- */
static void run_policy(const kvq_cache_config *cfg, const float *k, const float *v, size_t ctx, const float *q, size_t nq,
                       int HQ, kvq_pool *pool, float *out) {
    kvq_cache *c;
    CHECK_OK(kvq_cache_create(&c, cfg));
    if (!c) return;
    CHECK_OK(kvq_cache_append(c, 0, k, v, ctx));
    CHECK_OK(kvq_cache_attend(c, 0, q, nq, HQ, ctx - nq, 1.0f / sqrtf((float)cfg->head_dim), out, pool));
    kvq_cache_free(c);
}

static void test_simd_threads(kvq_pool *pool2, kvq_pool *pool3) {
    static const char *const pairs[][2] = {{"f16", "f16"},      {"tq-mse:4", "tq-mse:4"}, {"tq-mse:2", "tq-mse:3"},
                                           {"q8", "q4"},        {"tq-prod:3", "rvq:2"},   {"qjl", "bf16"},
                                           {"f32", "tq-mse:1"}, {"tq-mse:4+outliers=8", "q8"}};
    tu_rng rng = {7};
    const int H = 2, G = 4, HQ = H * G;
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        int d = pi % 2 ? 128 : 64;
        size_t ctx = pi % 3 == 0 ? 5000 : 600, nq = pi % 2 ? 1 : 4;
        const size_t row = (size_t)H * d, on = nq * HQ * (size_t)d;
        float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0), *q = cr_gauss(&rng, on, 1.5);
        float *o1 = malloc(on * sizeof *o1), *o2 = malloc(on * sizeof *o2), *o3 = malloc(on * sizeof *o3),
              *os = malloc(on * sizeof *os);
        kvq_cache_config cfg = cr_base_cfg(1, H, d, pairs[pi][0], pairs[pi][1]);
        cfg.f16_window = pi % 4 == 1 ? 20 : 0;
        run_policy(&cfg, k, v, ctx, q, nq, HQ, NULL, o1);
        run_policy(&cfg, k, v, ctx, q, nq, HQ, pool2, o2);
        run_policy(&cfg, k, v, ctx, q, nq, HQ, pool3, o3);
        cfg.reference_kernels = 1;
        run_policy(&cfg, k, v, ctx, q, nq, HQ, pool2, os);
        double e2 = tu_rel_l2(o2, o1, on), e3 = tu_rel_l2(o3, o1, on), es = tu_rel_l2(o1, os, on);
        CHECK(e2 <= 1e-6 && e3 <= 1e-6, "threads k=%s v=%s: 2 threads %.3g, 3 threads %.3g", pairs[pi][0], pairs[pi][1], e2, e3);
        /* tq-family values (tq-mse, rvq) accumulate with 16-bit weights on
         * AVX-512 VNNI (tq_vnni_x86.c): each weight moves by <= 2^-17 of its
         * run's largest, i.e. ~4e-6 of the largest weight in RMS; the output,
         * an average normalised by l = sum of weights, sees that times
         * max weight / mean weight (~10-30 for these queries): measured
         * 4-6e-5, bound 3e-4 (the codecs' own errors are 1e-1; a wrong token,
         * coordinate or scale would be O(1)). test_tq_vnni checks the kernel
         * against an exact emulation to 1e-6. q8 / q4 values the same way
         * (qblk_vnni_x86.c, weights per row, run and block; test_qblk_vnni). */
        const int int_v = kvq_cpu_has_int8_dot() && (!strncmp(pairs[pi][1], "tq-mse", 6) || !strncmp(pairs[pi][1], "rvq", 3) ||
                                                     !strncmp(pairs[pi][1], "q8", 2) || !strncmp(pairs[pi][1], "q4", 2));
        CHECK(es <= (int_v ? 3e-4 : 1e-5), "SIMD vs scalar k=%s v=%s d=%d: rel err %.3g", pairs[pi][0], pairs[pi][1], d, es);
        free(k);
        free(v);
        free(q);
        free(o1);
        free(o2);
        free(o3);
        free(os);
    }
}

/* ---- softmax kernels: SIMD vs reference -------------------------------------- */
static void test_softmax(void) {
    tu_rng rng = {5};
    for (int isa = KVQ_ISA_AVX2; isa <= (int)kvq_cpu_isa(); isa++) {
        for (size_t n = 1; n < 300; n += 37) {
            float a[300], b[300];
            for (size_t i = 0; i < n; i++) a[i] = b[i] = (float)(5 * tu_gauss(&rng));
            if (n > 3) a[2] = b[2] = -INFINITY;
            float ma = 1.5f, la = 2.0f, mb = 1.5f, lb = 2.0f;
            float al = softmax_block_ref(a, n, &ma, &la), bl = softmax_block(b, n, &mb, &lb, (kvq_isa)isa);
            CHECK(ma == mb && fabsf(la - lb) <= 1e-6f * la && fabsf(al - bl) <= 1e-6f * al, "softmax isa %d n %zu", isa, n);
            for (size_t i = 0; i < n; i++) CHECK(fabsf(a[i] - b[i]) <= 1e-6f * fabsf(a[i]) + 1e-30f, "exp isa %d i %zu", isa, i);
        }
        float x[40], y[40];
        for (int i = 0; i < 40; i++) x[i] = -100.0f + 2.5f * i;
        x[0] = -INFINITY;
        if (isa == KVQ_ISA_AVX2) vexp_avx2(x, y, 40);
        else vexp_avx512(x, y, 40);
        for (int i = 0; i < 40; i++) {
            float r = x[i] < -87.0f ? 0.0f : expf(x[i]);
            CHECK(fabsf(y[i] - r) <= 2e-7f * r, "vexp isa %d x %g: %g vs %g", isa, x[i], y[i], r);
        }
    }
}

/* ---- batch invariance: a row's result does not depend on its block's end ----- */
/* A query row sees its block [a, e) cut at its own position in a decode call
 * (n = pos + 1 - a scores) and whole, with the future masked to -inf, in a
 * prefill tile; both must give the same weights bit for bit, on every ISA
 * (the AVX2 tail once went through libm expf, the body through the
 * polynomial: batch-size dependent logits on AVX2-only CPUs). */
static void test_softmax_invariance(void) {
    tu_rng rng = {17};
    for (int isa = KVQ_ISA_SCALAR; isa <= (int)kvq_cpu_isa(); isa++) {
        int bad = 0;
        for (size_t n = 1; n <= 40; n++) {
            for (int st = 0; st < 2; st++) {
                float a[48], b[48];
                for (size_t i = 0; i < 48; i++) a[i] = b[i] = i < n ? (float)(3 * tu_gauss(&rng)) : -INFINITY;
                if (n > 5) a[1] = b[1] = -INFINITY; /* a sliding-window mask in front */
                float ma = st ? 0.7f : -INFINITY, la = st ? 3.0f : 0.0f, mb = ma, lb = la;
                float al = softmax_block(a, n, &ma, &la, (kvq_isa)isa);
                float bl = softmax_block(b, 48, &mb, &lb, (kvq_isa)isa);
                if (memcmp(&al, &bl, sizeof al) || memcmp(&ma, &mb, sizeof ma) || memcmp(&la, &lb, sizeof la) ||
                    memcmp(a, b, n * sizeof *a))
                    bad++;
                for (size_t i = n; i < 48; i++) bad += b[i] != 0.0f;
            }
        }
        CHECK(bad == 0, "softmax isa %d: %d blocks whose weights depend on the block's length", isa, bad);
    }
}

/* The same rows attended in one prefill call, in calls of 7 and 24 query
 * tokens and one token at a time (decode): bit-identical outputs, for every
 * ISA of this CPU (KVQ_ISA lowers the cache's) and a sample of methods. */
static void test_batch_invariance(kvq_pool *pool) {
    static const char *const pairs[][2] = {{"f16", "f16"}, {"f32", "bf16"}, {"q8", "q8"}, {"q4", "q4"},
                                           {"tq-mse:4", "tq-mse:3"}, {"tq-prod:3", "rvq:2"}, {"qjl", "tq-mse:2"},
                                           {"polar", "tq-mse:4+outliers=8"}};
    const char *env = getenv("KVQ_ISA");
    char saved[32] = "";
    if (env) snprintf(saved, sizeof saved, "%s", env);
    const kvq_isa top = kvq_cpu_isa();
    tu_rng rng = {23};
    const int H = 2, d = 64, G = 3, HQ = H * G;
    const size_t ctx = 300, row = (size_t)H * d, qrow = (size_t)HQ * d; /* two pages: blocks of 256 and 44 */
    float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0), *q = cr_gauss(&rng, ctx * qrow, 1.5);
    float *all = malloc(ctx * qrow * sizeof *all), *part = malloc(ctx * qrow * sizeof *part);
    for (int isa = KVQ_ISA_SCALAR; isa <= (int)top; isa++) {
        if (isa == KVQ_ISA_SCALAR) setenv("KVQ_ISA", "scalar", 1);
        else if (isa == KVQ_ISA_AVX2 && top > KVQ_ISA_AVX2) setenv("KVQ_ISA", "avx2", 1);
        else if (env) setenv("KVQ_ISA", saved, 1);
        else unsetenv("KVQ_ISA");
        for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
            kvq_cache_config cfg = cr_base_cfg(1, H, d, pairs[pi][0], pairs[pi][1]);
            kvq_cache *c = NULL;
            CHECK_OK(kvq_cache_create(&c, &cfg));
            if (!c) continue;
            CHECK(c->isa == (kvq_isa)isa, "cache isa %d, wanted %d", (int)c->isa, isa);
            CHECK_OK(kvq_cache_append(c, 0, k, v, ctx));
            CHECK_OK(kvq_cache_attend(c, 0, q, ctx, HQ, 0, 0.125f, all, pool));
            static const size_t steps[] = {24, 7, 1};
            for (int si = 0; si < 3; si++) {
                for (size_t p = 0; p < ctx; p += steps[si]) {
                    size_t nq = ctx - p < steps[si] ? ctx - p : steps[si];
                    CHECK_OK(kvq_cache_attend(c, 0, q + p * qrow, nq, HQ, p, 0.125f, part + p * qrow, pool));
                }
                size_t first = ctx;
                for (size_t p = 0; p < ctx && first == ctx; p++)
                    if (memcmp(all + p * qrow, part + p * qrow, qrow * sizeof *all)) first = p;
                CHECK(first == ctx, "isa %d k=%s v=%s: calls of %zu query tokens differ from one prefill call from position %zu",
                      isa, pairs[pi][0], pairs[pi][1], steps[si], first);
            }
            kvq_cache_free(c);
        }
    }
    if (env) setenv("KVQ_ISA", saved, 1);
    else unsetenv("KVQ_ISA");
    free(k);
    free(v);
    free(q);
    free(all);
    free(part);
}

/* ---- f16 window: which positions are f16, and what the others hold ----------- */
static void test_window(void) {
    tu_rng rng = {11};
    const int H = 3, d = 64, W = 10;
    kvq_cache_config cfg = cr_base_cfg(1, H, d, "tq-mse:3", "q8");
    cfg.f16_window = W;
    kvq_cache *c, *cb;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    CHECK_OK(kvq_cache_create(&cb, &cfg));
    const size_t ctx = 531, row = (size_t)H * d;
    float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0);
    for (size_t p = 0; p < ctx; p++) CHECK_OK(kvq_cache_append(c, 0, k + p * row, v + p * row, 1));
    CHECK_OK(kvq_cache_append(cb, 0, k, v, 200));
    CHECK_OK(kvq_cache_append(cb, 0, k + 200 * row, v + 200 * row, ctx - 200));
    uint8_t enc[1024];
    uint16_t h16[KVQ_DIM_MAX];
    for (size_t p = 0; p < ctx; p++) {
        for (int h = 0; h < H; h++) {
            const uint8_t *kr, *vr, *kr2, *vr2;
            const kvq_plan *kp, *vp, *kp2, *vp2;
            CHECK_OK(cache_locate(c, 0, h, p, &kr, &kp, &vr, &vp));
            CHECK_OK(cache_locate(cb, 0, h, p, &kr2, &kp2, &vr2, &vp2));
            int in_window = p >= ctx - W;
            CHECK(!strcmp(kvq_plan_spec(kp), in_window ? "f16" : "tq-mse:3"), "pos %zu K plan %s", p, kvq_plan_spec(kp));
            CHECK(!strcmp(kvq_plan_spec(vp), in_window ? "f16" : "q8"), "pos %zu V plan %s", p, kvq_plan_spec(vp));
            /* the record is the encoding of the token's f16 value */
            for (int i = 0; i < d; i++) h16[i] = kvq_f32_to_f16(k[p * row + (size_t)h * d + i]);
            CHECK_OK(kvq_encode(kp, h16, KVQ_DTYPE_F16, 1, enc));
            CHECK(!memcmp(enc, kr, kvq_plan_code_bytes(kp)), "pos %zu head %d: K record", p, h);
            for (int i = 0; i < d; i++) h16[i] = kvq_f32_to_f16(v[p * row + (size_t)h * d + i]);
            CHECK_OK(kvq_encode(vp, h16, KVQ_DTYPE_F16, 1, enc));
            CHECK(!memcmp(enc, vr, kvq_plan_code_bytes(vp)), "pos %zu head %d: V record", p, h);
            /* batching does not matter */
            CHECK(!memcmp(kr, kr2, kvq_plan_code_bytes(kp)) && !memcmp(vr, vr2, kvq_plan_code_bytes(vp)),
                  "pos %zu: batch vs token by token", p);
        }
    }
    kvq_cache_free(c);
    kvq_cache_free(cb);
    free(k);
    free(v);
}

/* ---- kvq_cache_append_pool: the same records for any pool ----------------------- */
static void test_append_pool(kvq_pool *pool2, kvq_pool *pool3) {
    static const struct { const char *k, *v; int window, sink; } P[] = {
        {"tq-mse:5+chscale", "tcq:3", 0, 1}, {"tcq:4+chscale", "tcq:4", 0, 1}, {"tq-mse:4", "tq-mse:4", 0, 0},
        {"tcq:2", "q8", 7, 0},               {"tq-mse:4+outliers=8", "tcq:3", 0, 0}};
    static const size_t batches[] = {1, 37, 128, 3, 1, 200, 17};
    tu_rng rng = {31};
    const int H = 3, d = 64;
    const size_t ctx = 387, row = (size_t)H * d;
    float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0);
    for (size_t pi = 0; pi < sizeof P / sizeof *P; pi++) {
        kvq_cache_config cfg = cr_base_cfg(1, H, d, P[pi].k, P[pi].v);
        cfg.f16_window = P[pi].window;
        cfg.sink_tokens = P[pi].sink;
        kvq_cache *c[3] = {NULL, NULL, NULL};
        kvq_pool *pools[3] = {NULL, pool2, pool3};
        for (int i = 0; i < 3; i++) {
            CHECK_OK(kvq_cache_create(&c[i], &cfg));
            if (!c[i]) goto next;
            for (size_t p = 0, b = 0; p < ctx; b++) {
                size_t n = batches[b % (sizeof batches / sizeof *batches)];
                if (n > ctx - p) n = ctx - p;
                CHECK_OK(kvq_cache_append_pool(c[i], 0, k + p * row, v + p * row, n, pools[i]));
                p += n;
            }
        }
        for (size_t p = 0; p < ctx; p++)
            for (int h = 0; h < H; h++) {
                const uint8_t *kr[3], *vr[3];
                const kvq_plan *kp[3], *vp[3];
                for (int i = 0; i < 3; i++) CHECK_OK(cache_locate(c[i], 0, h, p, &kr[i], &kp[i], &vr[i], &vp[i]));
                for (int i = 1; i < 3; i++)
                    CHECK(!memcmp(kr[0], kr[i], kvq_plan_code_bytes(kp[0])) &&
                              !memcmp(vr[0], vr[i], kvq_plan_code_bytes(vp[0])),
                          "k=%s v=%s pos %zu head %d: pool of %d vs none", P[pi].k, P[pi].v, p, h, i + 1);
            }
    next:
        for (int i = 0; i < 3; i++) kvq_cache_free(c[i]);
    }
    free(k);
    free(v);
}

/* ---- sliding-window layers ----------------------------------------------------- */
static void test_sliding(kvq_pool *pool) {
    tu_rng rng = {13};
    const int H = 2, d = 64, G = 2, HQ = H * G, SW = 100;
    const int sw[3] = {SW, 0, SW};
    for (int comp = 0; comp < 2; comp++) {
        kvq_cache_config cfg = cr_base_cfg(3, H, d, "tq-mse:4", "tq-mse:4");
        cfg.sliding_window = sw;
        cfg.compress_sliding = comp;
        cfg.f16_window = comp ? 7 : 0;
        kvq_cache *c;
        CHECK_OK(kvq_cache_create(&c, &cfg));
        const size_t ctx = 1000, row = (size_t)H * d;
        float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0);
        size_t done = 0;
        size_t peak = 0;
        while (done < ctx) { /* uneven batches, decode-like at the end */
            size_t n = done < 600 ? 150 : done < 900 ? 13 : 1;
            if (n > ctx - done) n = ctx - done;
            for (int l = 0; l < 3; l++) CHECK_OK(kvq_cache_append(c, l, k + done * row, v + done * row, n));
            done += n;
            /* prefill check for the batch just appended, on layer 0 */
            if (n > 1 || done == ctx) {
                float *q = cr_gauss(&rng, n * HQ * (size_t)d, 1.0), *out = malloc(n * HQ * (size_t)d * sizeof *out);
                double *ref = malloc(n * HQ * (size_t)d * sizeof *ref);
                CHECK_OK(kvq_cache_attend(c, 0, q, n, HQ, done - n, 0.125f, out, pool));
                cr_ref_from_cache(c, 0, q, n, HQ, done - n, 0.125f, SW, ref);
                double e = cr_worst_row_err(out, ref, n * HQ, d);
                CHECK(e < 2e-4, "sliding comp=%d done=%zu n=%zu: rel err %.3g", comp, done, n, e);
                free(q);
                free(out);
                free(ref);
            }
            size_t b = store_bytes(c, &c->layers[0]);
            if (done > 600 && b > peak) peak = b;
        }
        /* plans: f16 unless compressed; window positions f16 */
        const uint8_t *kr, *vr;
        const kvq_plan *kp, *vp;
        CHECK_OK(cache_locate(c, 0, 1, ctx - 50, &kr, &kp, &vr, &vp));
        CHECK(!strcmp(kvq_plan_spec(kp), comp ? "tq-mse:4" : "f16"), "sliding plan %s", kvq_plan_spec(kp));
        CHECK_OK(cache_locate(c, 1, 1, 3, &kr, &kp, &vr, &vp));
        CHECK(!strcmp(kvq_plan_spec(kp), "tq-mse:4"), "global layer plan %s", kvq_plan_spec(kp));
        /* old positions are gone; memory stays near the window */
        CHECK(cache_locate(c, 0, 0, 10, &kr, &kp, &vr, &vp) == KVQ_ERR_INVALID_ARG, "evicted position");
        const cache_layer *L = &c->layers[0];
        size_t bound = ((SW + 2 * L->page_tokens) / L->page_tokens + CACHE_MAX_SPARE) * L->page_bytes +
                       L->tail_cap * (size_t)H * 4 * d;
        CHECK(peak <= bound, "sliding memory %zu > %zu", peak, bound);
        /* a query whose window was dropped is refused */
        float q[4 * 64], out[4 * 64];
        for (int i = 0; i < 4 * 64; i++) q[i] = 0.1f;
        CHECK(kvq_cache_attend(c, 0, q, 1, HQ, 300, 0.125f, out, pool) == KVQ_ERR_STATE, "evicted window");
        CHECK(kvq_cache_truncate(c, 300) == KVQ_ERR_STATE, "truncate into dropped window");
        CHECK(kvq_cache_len(c, 0) == ctx, "failed truncate changed nothing");
        CHECK_OK(kvq_cache_truncate(c, ctx - 3));
        CHECK_OK(kvq_cache_attend(c, 0, q, 1, HQ, ctx - 4, 0.125f, out, pool));
        kvq_cache_free(c);
        free(k);
        free(v);
    }
}

/* ---- truncate then re-append = never appended ---------------------------------- */
static void test_truncate(kvq_pool *pool) {
    tu_rng rng = {17};
    static const char *const pairs[][2] = {{"tq-mse:4", "tq-mse:2"}, {"f16", "f16"}, {"tq-mse:4+outliers=8", "q8"}};
    const int H = 2, d = 64, G = 3, HQ = H * G;
    for (size_t pi = 0; pi < 3; pi++) {
        for (int W = 0; W <= 12; W += 12) {
            kvq_cache_config cfg = cr_base_cfg(2, H, d, pairs[pi][0], pairs[pi][1]);
            cfg.f16_window = W;
            cfg.outlier_calib_tokens = 64;
            kvq_cache *a, *b;
            CHECK_OK(kvq_cache_create(&a, &cfg));
            CHECK_OK(kvq_cache_create(&b, &cfg));
            const size_t n0 = 500, n1 = 40, row = (size_t)H * d;
            float *k = cr_gauss(&rng, (n0 + n1) * row, 1.0), *v = cr_gauss(&rng, (n0 + n1) * row, 1.0);
            float *k2 = cr_gauss(&rng, n1 * row, 1.0), *v2 = cr_gauss(&rng, n1 * row, 1.0);
            for (int l = 0; l < 2; l++) {
                CHECK_OK(kvq_cache_append(a, l, k, v, n0 + n1));   /* a: n0 + n1 tokens, then back to n0 */
                CHECK_OK(kvq_cache_append(b, l, k, v, n0));        /* b: only n0 */
            }
            size_t mem_b = kvq_cache_memory_bytes(b);
            CHECK_OK(kvq_cache_truncate(a, n0));
            CHECK(kvq_cache_len(a, 0) == n0 && kvq_cache_len(a, 1) == n0, "len after truncate");
            if (W == 0) CHECK(kvq_cache_memory_bytes(a) == mem_b, "memory after truncate %zu vs %zu", kvq_cache_memory_bytes(a), mem_b);
            for (int l = 0; l < 2; l++) {
                CHECK_OK(kvq_cache_append(a, l, k2, v2, n1));
                CHECK_OK(kvq_cache_append(b, l, k2, v2, n1));
            }
            const size_t nq = 4, on = nq * HQ * (size_t)d;
            float *q = cr_gauss(&rng, on, 1.0), *oa = malloc(on * sizeof *oa), *ob = malloc(on * sizeof *ob);
            for (int l = 0; l < 2; l++) {
                CHECK_OK(kvq_cache_attend(a, l, q, nq, HQ, n0 + n1 - nq, 0.125f, oa, pool));
                CHECK_OK(kvq_cache_attend(b, l, q, nq, HQ, n0 + n1 - nq, 0.125f, ob, pool));
                CHECK(!memcmp(oa, ob, on * sizeof *oa), "truncate+re-append k=%s W=%d layer %d: rel %.3g", pairs[pi][0], W,
                      l, tu_rel_l2(oa, ob, on));
            }
            CHECK(kvq_cache_memory_bytes(a) == kvq_cache_memory_bytes(b), "memory");
            /* clear empties everything, and the cache works again */
            kvq_cache_clear(a);
            CHECK(kvq_cache_memory_bytes(a) == 0 && kvq_cache_len(a, 0) == 0, "clear");
            CHECK_OK(kvq_cache_append(a, 0, k, v, 3));
            CHECK_OK(kvq_cache_attend(a, 0, q, 1, HQ, 2, 0.125f, oa, pool));
            free(k);
            free(v);
            free(k2);
            free(v2);
            free(q);
            free(oa);
            free(ob);
            kvq_cache_free(a);
            kvq_cache_free(b);
        }
    }
}

/* ---- +outliers calibration: f16 until the calibration rows are complete ---------- */
static void test_outliers(void) {
    tu_rng rng = {19};
    const int H = 2, d = 128;
    kvq_cache_config cfg = cr_base_cfg(1, H, d, "tq-mse:4+outliers=8", "tq-mse:3+outliers=16");
    cfg.outlier_calib_tokens = 50;
    kvq_cache *c;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    const size_t row = (size_t)H * d;
    float *k = cr_gauss(&rng, 200 * row, 1.0), *v = cr_gauss(&rng, 200 * row, 1.0);
    for (size_t i = 0; i < 200; i++) { /* head 0: channels 10..17 loud; head 1: 100..107 */
        for (int j = 0; j < 8; j++) k[i * row + 10 + j] *= 20, k[i * row + d + 100 + j] *= 20;
    }
    const uint8_t *kr, *vr;
    const kvq_plan *kp, *vp;
    CHECK_OK(kvq_cache_append(c, 0, k, v, 49));
    CHECK_OK(cache_locate(c, 0, 0, 0, &kr, &kp, &vr, &vp));
    CHECK(!strcmp(kvq_plan_spec(kp), "f16") && !strcmp(kvq_plan_spec(vp), "f16"), "uncalibrated: f16");
    size_t m49 = kvq_cache_memory_bytes(c);
    CHECK_OK(kvq_cache_append(c, 0, k + 49 * row, v + 49 * row, 151));
    CHECK(kvq_cache_memory_bytes(c) < m49 * 4 / 3 * 200 / 49, "memory after calibration");
    for (int h = 0; h < H; h++) {
        CHECK_OK(cache_locate(c, 0, h, 0, &kr, &kp, &vr, &vp));
        CHECK(!strcmp(kvq_plan_spec(kp), "tq-mse:4+outliers=8"), "calibrated K plan %s", kvq_plan_spec(kp));
        CHECK(kp->ch_out[0] == (h ? 100 : 10) && kp->ch_out[7] == (h ? 107 : 17), "head %d outlier channels %d..%d", h,
              kp->ch_out[0], kp->ch_out[7]);
        CHECK(!strcmp(kvq_plan_spec(vp), "tq-mse:3+outliers=16"), "calibrated V plan %s", kvq_plan_spec(vp));
    }
    kvq_cache_free(c);
    free(k);
    free(v);
}

/* ---- memory accounting -------------------------------------------------------- */
static void test_memory(void) {
    tu_rng rng = {23};
    const int H = 4, d = 128;
    const int f16l[1] = {2};
    kvq_cache_config cfg = cr_base_cfg(3, H, d, "tq-mse:4", "tq-mse:2");
    cfg.f16_layers = f16l;
    cfg.n_f16_layers = 1;
    cfg.f16_window = 32;
    kvq_cache *c;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    CHECK(kvq_cache_memory_bytes(c) == 0, "empty cache holds nothing");
    const size_t kb = 2 + 64, vb = 2 + 32, fb = 256;
    CHECK(kvq_cache_bytes_per_token(c) == (size_t)H * (2 * (kb + vb) + 2 * fb), "bytes per token %zu",
          kvq_cache_bytes_per_token(c));
    const size_t ctx = 1000, row = (size_t)H * d;
    float *k = cr_gauss(&rng, ctx * row, 1.0), *v = cr_gauss(&rng, ctx * row, 1.0);
    for (int l = 0; l < 3; l++) CHECK_OK(kvq_cache_append(c, l, k, v, ctx));
    /* compressed layers: positions [0, 968) in ceil(968/256) = 4 pages, a 32-token f16 ring;
     * the f16 layer: 1000 tokens in 4 pages of f16 */
    size_t expect = 2 * (4 * 256 * H * (kb + vb) + 32 * H * 2 * fb) + 4 * 256 * H * 2 * fb;
    CHECK(kvq_cache_memory_bytes(c) == expect, "memory %zu, expected %zu", kvq_cache_memory_bytes(c), expect);
    kvq_cache_free(c);
    free(k);
    free(v);
}

/* ---- bad arguments ------------------------------------------------------------- */
static void test_errors(void) {
    kvq_cache *c = NULL;
    kvq_cache_config cfg = cr_base_cfg(2, 2, 64, "tq-mse:4", "qjl");
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_NO_DECODE, "key-only V");
    cfg.v_spec = "tq-prod:3";
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_NO_DECODE, "tq-prod as V");
    cfg.v_spec = "bogus";
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_UNKNOWN_METHOD, "unknown method");
    cfg.v_spec = "tq-mse:9";
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_BITS_RANGE, "bits range");
    cfg.v_spec = NULL;
    CHECK(kvq_cache_create(NULL, &cfg) == KVQ_ERR_NULL && kvq_cache_create(&c, NULL) == KVQ_ERR_NULL, "NULL");
    cfg.head_dim = 20;
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_UNSUPPORTED_DIM, "dim");
    cfg.head_dim = 64;
    cfg.n_layers = 0;
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_INVALID_ARG, "no layers");
    cfg.n_layers = 2;
    int bad_layer = 5;
    cfg.f16_layers = &bad_layer;
    cfg.n_f16_layers = 1;
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_INVALID_ARG, "f16 layer out of range");
    cfg.f16_layers = NULL;
    cfg.n_f16_layers = 0;
    cfg.f16_window = -1;
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_INVALID_ARG, "negative window");
    cfg.f16_window = 0;
    CHECK(c == NULL, "out untouched on error");
    CHECK_OK(kvq_cache_create(&c, &cfg));
    float k[4 * 2 * 64] = {0}, v[4 * 2 * 64] = {0}, q[8 * 64] = {0}, out[8 * 64];
    for (int i = 0; i < 4 * 2 * 64; i++) k[i] = v[i] = (float)(i % 7) - 3;
    CHECK(kvq_cache_append(NULL, 0, k, v, 1) == KVQ_ERR_NULL, "append NULL cache");
    CHECK(kvq_cache_append(c, 0, NULL, v, 1) == KVQ_ERR_NULL, "append NULL k");
    CHECK(kvq_cache_append(c, 2, k, v, 1) == KVQ_ERR_INVALID_ARG && kvq_cache_append(c, -1, k, v, 1) == KVQ_ERR_INVALID_ARG,
          "append layer out of range");
    k[5] = NAN;
    CHECK(kvq_cache_append(c, 0, k, v, 1) == KVQ_ERR_NONFINITE && kvq_cache_len(c, 0) == 0, "NaN refused, nothing appended");
    k[5] = 1;
    CHECK_OK(kvq_cache_append(c, 0, k, v, 4));
    CHECK(kvq_cache_attend(NULL, 0, q, 1, 4, 0, 1, out, NULL) == KVQ_ERR_NULL, "attend NULL cache");
    CHECK(kvq_cache_attend(c, 0, NULL, 1, 4, 0, 1, out, NULL) == KVQ_ERR_NULL, "attend NULL q");
    CHECK(kvq_cache_attend(c, 0, q, 1, 4, 0, 1, NULL, NULL) == KVQ_ERR_NULL, "attend NULL out");
    CHECK(kvq_cache_attend(c, 2, q, 1, 4, 0, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "attend layer out of range");
    CHECK(kvq_cache_attend(c, 0, q, 1, 3, 0, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "n_q_heads not a multiple");
    CHECK(kvq_cache_attend(c, 0, q, 1, 0, 0, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "no query heads");
    CHECK(kvq_cache_attend(c, 0, q, 1, 4, 4, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "pos beyond len");
    CHECK(kvq_cache_attend(c, 0, q, 2, 4, 3, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "last query beyond len");
    CHECK(kvq_cache_attend(c, 1, q, 1, 4, 0, 1, out, NULL) == KVQ_ERR_INVALID_ARG, "empty layer");
    CHECK(kvq_cache_attend(c, 0, q, 1, 4, 0, NAN, out, NULL) == KVQ_ERR_INVALID_ARG, "NaN scale");
    CHECK_OK(kvq_cache_attend(c, 0, q, 0, 4, 0, 1, out, NULL));
    CHECK_OK(kvq_cache_attend(c, 0, q, 2, 4, 2, 1, out, NULL));
    /* a NaN/Inf query (or one whose product with scale overflows) is
     * refused before anything is written (it returned KVQ_OK with NaN rows) */
    const float bad_q[] = {NAN, INFINITY, -INFINITY, 3e38f};
    for (int b = 0; b < 4; b++)
        for (int at = 0; at < 2 * 4 * 64; at += 2 * 4 * 64 - 1) { /* first and last value of 2 tokens x 4 heads */
            float q2[2 * 4 * 64], o2[2 * 4 * 64];
            for (int i = 0; i < 2 * 4 * 64; i++) {
                q2[i] = 0.5f;
                o2[i] = -7.0f;
            }
            q2[at] = bad_q[b];
            float sc = b == 3 ? 10.0f : 1.0f;
            CHECK(kvq_cache_attend(c, 0, q2, 2, 4, 2, sc, o2, NULL) == KVQ_ERR_NONFINITE, "query %g at %d accepted",
                  bad_q[b], at);
            int untouched = 1;
            for (int i = 0; i < 2 * 4 * 64; i++) untouched &= o2[i] == -7.0f;
            CHECK(untouched, "output written for a refused query");
        }
    {
        float q2[4 * 64], o2[4 * 64];
        for (int i = 0; i < 4 * 64; i++) q2[i] = 1e30f;
        CHECK_OK(kvq_cache_attend(c, 0, q2, 1, 4, 3, 1e-20f, o2, NULL)); /* large but finite once scaled */
        int finite = 1;
        for (int i = 0; i < 4 * 64; i++) finite &= isfinite(o2[i]) != 0;
        CHECK(finite, "finite query, finite output");
    }
    CHECK(kvq_cache_truncate(NULL, 0) == KVQ_ERR_NULL, "truncate NULL");
    CHECK_OK(kvq_cache_truncate(c, 100)); /* beyond len: nothing to drop */
    CHECK(kvq_cache_len(c, 0) == 4 && kvq_cache_len(c, 9) == 0 && kvq_cache_len(NULL, 0) == 0, "len");
    /* values that do not fit f16 storage */
    kvq_cache *cf;
    kvq_cache_config cf16 = cr_base_cfg(1, 2, 64, "f16", "f16");
    CHECK_OK(kvq_cache_create(&cf, &cf16));
    k[0] = 1e6f;
    CHECK(kvq_cache_append(cf, 0, k, v, 1) == KVQ_ERR_RANGE && kvq_cache_len(cf, 0) == 0, "f16 range");
    kvq_cache_free(cf);
    kvq_cache_free(c);
    kvq_cache_free(NULL);
    kvq_cache_clear(NULL);
    CHECK(kvq_cache_memory_bytes(NULL) == 0 && kvq_cache_bytes_per_token(NULL) == 0, "NULL sizes");
}

int main(void) {
    kvq_pool *p2, *p3;
    CHECK_OK(kvq_pool_create(&p2, 2));
    CHECK_OK(kvq_pool_create(&p3, 3));
    test_softmax();
    test_softmax_invariance();
    test_batch_invariance(p2);
    test_errors();
    test_memory();
    test_window();
    test_append_pool(p2, p3);
    test_outliers();
    test_raw(p2);
    test_truncate(p2);
    test_sliding(p2);
    test_prefill(p2);
    test_simd_threads(p2, p3);
    test_methods(p2);
    kvq_pool_free(p2);
    kvq_pool_free(p3);
    return tu_finish("test_cache");
}
