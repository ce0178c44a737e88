/*
 * kvq_cache_memory_plan against real appends: for global and sliding-window
 * layers, f16 layers, f16 windows, +outliers calibration and several batch
 * patterns, the planned bytes after every append equal
 * kvq_cache_memory_bytes() of a cache that really received those tokens,
 * and the planned peak equals the largest value observed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache_internal.h"
#include "kvq.h"
#include "testutil.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * The closed form against the step-by-step simulation on random
 * configurations: several sliding windows per cache, f16 windows,
 * calibration, f16 layers, batches from 1 to the whole run.
 */
static void random_configs(tu_rng *r) {
    static const char *const specs[] = {"f16", "q8", "tq-mse:3", "tq-mse:4+outliers=8", "rvq:1", "q4+chscale"};
    int bad = 0;
    for (int it = 0; it < 300 && bad < 5; it++) {
        int sliding[8], f16l[2];
        kvq_cache_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_layers = 1 + (int)(tu_next(r) % 8);
        cfg.n_kv_heads = 1 + (int)(tu_next(r) % 3);
        cfg.head_dim = 64;
        cfg.k_spec = specs[tu_next(r) % 6];
        cfg.v_spec = specs[tu_next(r) % 6];
        cfg.f16_window = (tu_next(r) % 3) ? (int)(tu_next(r) % 300) : 0;
        cfg.compress_sliding = (int)(tu_next(r) % 2);
        cfg.outlier_calib_tokens = (int)(tu_next(r) % 400);
        cfg.sink_tokens = (tu_next(r) % 3) ? 0 : (int)(tu_next(r) % 300); /* an f16 sink, also beyond a page */
        for (int l = 0; l < cfg.n_layers; l++) {
            uint64_t x = tu_next(r) % 6;
            sliding[l] = x == 0 ? 0 : x == 1 ? 1 : x == 2 ? 64 : (int)(1 + tu_next(r) % 700);
        }
        cfg.sliding_window = sliding;
        if (tu_next(r) % 3 == 0) {
            f16l[0] = 0;
            f16l[1] = -1;
            cfg.f16_layers = f16l;
            cfg.n_f16_layers = 2;
        }
        kvq_cache *c = NULL;
        int rc = kvq_cache_create(&c, &cfg);
        CHECK(rc == KVQ_OK, "random config %d: create %d", it, rc);
        if (rc) continue;
        const size_t n = 1 + (size_t)(tu_next(r) % 30000);
        const uint64_t bx = tu_next(r) % 5;
        const size_t batch = bx == 0 ? 1 : bx == 1 ? 0 : bx == 2 ? 64 : 1 + (size_t)(tu_next(r) % (bx == 3 ? 300 : n));
        size_t a1 = 0, p1 = 0, a2 = 0, p2 = 0, a3 = 0;
        int r1 = kvq_cache_memory_plan(c, n, batch, &a1, &p1);
        int r2 = cache_memory_plan_sim(c, n, batch, &a2, &p2);
        int r3 = kvq_cache_memory_plan(c, n, batch, &a3, NULL);
        if (r1 || r2 || r3 || a1 != a2 || p1 != p2 || a3 != a2) {
            CHECK(0, "random config %d (%d layers, window %d, calib %d, sink %d, %s/%s) n %zu batch %zu: plan %zu/%zu (%d), "
                  "simulated %zu/%zu (%d)", it, cfg.n_layers, cfg.f16_window, cfg.outlier_calib_tokens, cfg.sink_tokens, cfg.k_spec,
                  cfg.v_spec, n, batch, a1, p1, r1, a2, p2, r2);
            bad++;
        }
        kvq_cache_free(c);
    }
}

/*
 * Huge counts with sliding-window layers: it looped over every batch (2^40
 * iterations for 2^40 tokens one at a time, SIZE_MAX never returned). Now
 * bounded: a sliding layer's bytes repeat every page of tokens once it
 * evicts, so the figure at 2^40 equals the simulated one at 2^20 (the same
 * phase), plus the global layers in closed form.
 */
static void huge_counts(void) {
    static const int gemma_like[6] = {512, 512, 512, 512, 512, 0};
    static const int sliding_only[2] = {512, 1000};
    for (int mixed = 0; mixed < 2; mixed++) {
        kvq_cache_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.n_layers = mixed ? 6 : 2;
        cfg.n_kv_heads = 1;
        cfg.head_dim = 64;
        cfg.k_spec = cfg.v_spec = "tq-mse:4";
        cfg.f16_window = 32;
        cfg.compress_sliding = 1;
        cfg.sliding_window = mixed ? gemma_like : sliding_only;
        kvq_cache *c = NULL;
        CHECK_OK(kvq_cache_create(&c, &cfg));
        if (!c) continue;
        const size_t big = (size_t)1 << 40, small = (size_t)1 << 20;
        for (size_t batch = 1; batch <= 64; batch *= 4) {
            size_t at = 0, peak = 0, sa = 0, sp = 0, ra = 0, rp = 0;
            double t0 = now_s();
            CHECK_OK(kvq_cache_memory_plan(c, big, batch, &at, &peak));
            double dt = now_s() - t0;
            CHECK(dt < 2.0, "2^40 tokens, batch %zu: %.3f s", batch, dt);
            CHECK_OK(cache_memory_plan_sim(c, small, batch, &sa, &sp));
            CHECK_OK(kvq_cache_memory_plan(c, small, batch, &ra, &rp));
            CHECK(ra == sa && rp == sp, "2^20 tokens batch %zu: %zu/%zu vs simulated %zu/%zu", batch, ra, rp, sa, sp);
            if (!mixed) {
                CHECK(at == sa && peak == sp, "sliding only, 2^40 tokens batch %zu: %zu/%zu, at 2^20 %zu/%zu", batch,
                      at, peak, sa, sp);
            } else { /* the global layer's share grows, the sliding layers' is periodic */
                size_t ga = 0, gs = 0;
                int global[1] = {0};
                kvq_cache_config g = cfg;
                g.n_layers = 1;
                g.sliding_window = global;
                kvq_cache *cg = NULL;
                CHECK_OK(kvq_cache_create(&cg, &g));
                CHECK_OK(kvq_cache_memory_plan(cg, big, batch, &ga, NULL));
                CHECK_OK(kvq_cache_memory_plan(cg, small, batch, &gs, NULL));
                kvq_cache_free(cg);
                CHECK(at - ga == sa - gs, "gemma-like 2^40 batch %zu: %zu (global %zu), at 2^20 %zu (%zu)", batch, at,
                      ga, sa, gs);
                /* the peak: near the end, within the sliding layers' swing */
                const size_t swing = 5 * (CACHE_MAX_SPARE + 2) * c->layers[0].page_bytes;
                CHECK(peak >= at && peak - at <= swing, "gemma-like 2^40 batch %zu: peak %zu at %zu", batch, peak, at);
            }
        }
        /* the appends the cache refuses (n > SIZE_MAX / 4) are refused here too, at once */
        size_t at = 0, peak = 0;
        double t0 = now_s();
        CHECK(kvq_cache_memory_plan(c, SIZE_MAX, 1, &at, &peak) == KVQ_ERR_OVERFLOW, "SIZE_MAX tokens");
        CHECK(kvq_cache_memory_plan(c, SIZE_MAX / 4 + 1, 1, &at, NULL) == KVQ_ERR_OVERFLOW, "SIZE_MAX / 4 + 1 tokens");
        CHECK(kvq_cache_memory_plan(c, SIZE_MAX / 4, 0, &at, NULL) == KVQ_ERR_OVERFLOW, "one batch beyond append's limit");
        int rc = kvq_cache_memory_plan(c, SIZE_MAX / 4, 1, &at, &peak);
        CHECK(mixed ? rc == KVQ_ERR_OVERFLOW : rc == KVQ_OK, "SIZE_MAX / 4 tokens one at a time: %d", rc);
        CHECK(now_s() - t0 < 2.0, "huge counts took %.3f s", now_s() - t0);
        kvq_cache_free(c);
    }
}

typedef struct {
    const char *name, *k, *v;
    int layers, H, d, window, compress_sliding;
    const int *sliding; /* per layer or NULL */
    const int *f16;
    int n_f16;
} scenario;

/* Appends n tokens in batches of `batch`, checking the plan after each. */
static void run(const scenario *s, size_t n, size_t batch, tu_rng *r) {
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = s->layers;
    cfg.n_kv_heads = s->H;
    cfg.head_dim = s->d;
    cfg.k_spec = s->k;
    cfg.v_spec = s->v;
    cfg.f16_window = s->window;
    cfg.sliding_window = s->sliding;
    cfg.compress_sliding = s->compress_sliding;
    cfg.f16_layers = s->f16;
    cfg.n_f16_layers = s->n_f16;
    cfg.outlier_calib_tokens = 40;
    cfg.seed = 7;
    kvq_cache *c = NULL;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    if (!c) return;
    const size_t row = (size_t)s->H * s->d;
    float *k = malloc(batch * row * sizeof *k), *v = malloc(batch * row * sizeof *v);
    size_t done = 0, seen_peak = 0, at = 0, peak = 0;
    CHECK_OK(kvq_cache_memory_plan(c, 0, batch, &at, &peak));
    CHECK(at == 0 && peak == 0, "%s: empty plan %zu %zu", s->name, at, peak);
    int bad = 0;
    while (done < n && !bad) {
        size_t nt = n - done < batch ? n - done : batch;
        for (size_t i = 0; i < nt * row; i++) {
            k[i] = (float)tu_gauss(r);
            v[i] = (float)tu_gauss(r);
        }
        for (int l = 0; l < s->layers; l++) CHECK_OK(kvq_cache_append(c, l, k, v, nt));
        done += nt;
        size_t real = kvq_cache_memory_bytes(c);
        if (real > seen_peak) seen_peak = real;
        int rc = kvq_cache_memory_plan(c, done, batch, &at, &peak);
        size_t at_only = 0;
        int rc2 = kvq_cache_memory_plan(c, done, batch, &at_only, NULL);
        if (rc || rc2 || at != real || peak != seen_peak || at_only != real) {
            CHECK(0, "%s batch %zu after %zu tokens: planned %zu (no peak: %zu) peak %zu, real %zu peak %zu", s->name,
                  batch, done, at, at_only, peak, real, seen_peak);
            bad = 1;
        }
    }
    free(k);
    free(v);
    kvq_cache_free(c);
}

int main(void) {
    tu_rng r = {2024};
    static const int gemma_like[6] = {40, 40, 40, 40, 40, 0};
    static const int all_sliding[3] = {24, 70, 300};
    static const int f16_first_last[2] = {0, 5};
    const scenario S[] = {
        {"f16 global", "f16", "f16", 2, 2, 32, 0, 0, NULL, NULL, 0},
        {"tq-mse:4 global", "tq-mse:4", "tq-mse:4", 2, 2, 64, 0, 0, NULL, NULL, 0},
        {"q8/tq-mse:3 window 33", "q8", "tq-mse:3", 2, 1, 64, 33, 0, NULL, NULL, 0},
        {"outliers window 10", "tq-mse:4+outliers=8", "tq-mse:4", 2, 2, 64, 10, 0, NULL, NULL, 0},
        {"outliers no window", "q4", "tq-mse:2+outliers=8", 1, 2, 64, 0, 0, NULL, NULL, 0},
        {"hybrid f16 sliding", "tq-mse:4", "tq-mse:4", 6, 1, 32, 0, 0, gemma_like, NULL, 0},
        {"hybrid compressed sliding w 16", "tq-mse:3", "q8", 6, 1, 32, 16, 1, gemma_like, NULL, 0},
        {"hybrid outliers sliding", "tq-mse:4+outliers=8", "tq-mse:4", 6, 1, 64, 50, 1, gemma_like, NULL, 0},
        {"f16 layers + sliding", "q4", "q4", 6, 2, 32, 5, 1, gemma_like, f16_first_last, 2},
        {"all sliding", "rvq:1", "rvq:1", 3, 1, 32, 100, 1, all_sliding, NULL, 0},
    };
    const size_t batches[] = {1, 7, 64, 256, 333};
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++)
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            size_t n = batches[b] == 1 ? 700 : 1500;
            run(&S[i], n, batches[b], &r);
        }

    /* one batch of everything; large counts (no appends) are consistent */
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = 6;
    cfg.n_kv_heads = 1;
    cfg.head_dim = 32;
    cfg.k_spec = cfg.v_spec = "tq-mse:4";
    cfg.sliding_window = gemma_like;
    kvq_cache *c = NULL;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    size_t a1 = 0, a2 = 0, p1 = 0;
    CHECK_OK(kvq_cache_memory_plan(c, 1000000, 256, &a1, &p1));
    CHECK_OK(kvq_cache_memory_plan(c, 2000000, 256, &a2, NULL));
    CHECK(a2 > a1 && p1 >= a1, "growth %zu -> %zu, peak %zu", a1, a2, p1);
    CHECK(kvq_cache_memory_plan(NULL, 1, 1, &a1, NULL) == KVQ_ERR_NULL, "NULL cache");
    CHECK(kvq_cache_memory_plan(c, 1, 1, NULL, NULL) == KVQ_ERR_NULL, "NULL at");
    CHECK(kvq_cache_memory_plan(c, SIZE_MAX / 2, 0, &a1, NULL) == KVQ_ERR_OVERFLOW, "overflow");
    kvq_cache_free(c);
    random_configs(&r);
    huge_counts();
    return tu_finish("test_cache_memplan");
}
