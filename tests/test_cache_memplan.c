/*
 * kvq_cache_memory_plan against real appends: for global and sliding-window
 * layers, f16 layers, f16 windows, +outliers calibration and several batch
 * patterns, the planned bytes after every append equal
 * kvq_cache_memory_bytes() of a cache that really received those tokens,
 * and the planned peak equals the largest value observed.
 */
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "testutil.h"

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
    return tu_finish("test_cache_memplan");
}
