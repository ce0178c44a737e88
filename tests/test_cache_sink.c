/*
 * The f16 attention sink (policy sink=S, kvq_cache_config.sink_tokens): the
 * first S positions of every global compressed layer are kept as their f16
 * values for good, never encoded (IntactKV, Liu et al. 2024: the KV of the
 * first "pivot" tokens kept lossless; StreamingLLM, Xiao et al. 2023, on why
 * the first token draws much of the attention).
 * Checks: the records (f16 below S, the main plan's encoding from S on,
 * through the f16 window and calibration too), batching invariance,
 * attention against the float64 reference from the records (decode,
 * prefill over the sink), memory = kvq_cache_memory_plan, truncate below S,
 * sliding layers without a sink, the policy field and bad values.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "cache_ref.h"
#include "kvq.h"
#include "testutil.h"

typedef struct {
    const char *ks, *vs;
    int sink, window, calib;
} sink_case;

/* The record of position p, head h is what the cache must hold for it. */
static void check_records(const kvq_cache *c, const sink_case *sc, const float *k, const float *v, size_t ctx, int H,
                          int d, const char *what) {
    const size_t row = (size_t)H * d;
    uint8_t enc[4096];
    uint16_t h16[KVQ_DIM_MAX];
    int bad = 0;
    for (size_t p = 0; p < ctx && bad < 3; p++) {
        for (int h = 0; h < H && bad < 3; h++) {
            const uint8_t *kr, *vr;
            const kvq_plan *kp, *vp;
            CHECK_OK(cache_locate(c, 0, h, p, &kr, &kp, &vr, &vp));
            const int f16 = p < (size_t)sc->sink || p + (size_t)sc->window >= ctx;
            const int kf16 = f16 || !strcmp(sc->ks, "f16");
            if (kf16 != !strcmp(kvq_plan_spec(kp), "f16") || f16 != !strcmp(kvq_plan_spec(vp), "f16")) {
                CHECK(0, "%s: pos %zu head %d held as %s/%s", what, p, h, kvq_plan_spec(kp), kvq_plan_spec(vp));
                bad++;
                continue;
            }
            /* a token that passed through the f16 tail (a window, or waiting
             * for calibration) is encoded from its f16 value, else from f32 */
            const int calibrated = strchr(sc->ks, '+') != NULL;
            const size_t calib = sc->calib ? (size_t)sc->calib : 128;
            const int via_f16 = sc->window > 0 || (calibrated && p < calib);
            for (int kv = 0; kv < 2; kv++) {
                const float *x = (kv ? v : k) + p * row + (size_t)h * d;
                const kvq_plan *pl = kv ? vp : kp;
                for (int i = 0; i < d; i++) h16[i] = kvq_f32_to_f16(x[i]);
                if (via_f16 || !strcmp(kvq_plan_spec(pl), "f16")) CHECK_OK(kvq_encode(pl, h16, KVQ_DTYPE_F16, 1, enc));
                else CHECK_OK(kvq_encode(pl, x, KVQ_DTYPE_F32, 1, enc));
                if (memcmp(enc, kv ? vr : kr, kvq_plan_code_bytes(pl))) {
                    CHECK(0, "%s: pos %zu head %d: %s record differs", what, p, h, kv ? "V" : "K");
                    bad++;
                }
            }
        }
    }
}

static void fill(kvq_cache *c, const float *k, const float *v, size_t from, size_t to, size_t step, size_t row) {
    for (size_t p = from; p < to;) {
        size_t n = to - p < step ? to - p : step;
        CHECK_OK(kvq_cache_append(c, 0, k + p * row, v + p * row, n));
        p += n;
    }
}

static void test_case(const sink_case *sc, kvq_pool *pool, tu_rng *rng) {
    const int H = 2, d = 64, G = 3, HQ = H * G;
    const size_t ctx = 640, row = (size_t)H * d;
    char what[160];
    snprintf(what, sizeof what, "k=%s v=%s sink=%d w=%d calib=%d", sc->ks, sc->vs, sc->sink, sc->window, sc->calib);
    kvq_cache_config cfg = cr_base_cfg(1, H, d, sc->ks, sc->vs);
    cfg.sink_tokens = sc->sink;
    cfg.f16_window = sc->window;
    cfg.outlier_calib_tokens = sc->calib;
    float *k = cr_gauss(rng, ctx * row, 1.0), *v = cr_gauss(rng, ctx * row, 1.0);
    for (int h = 0; h < H; h++) /* a sink-like first token: large key, small value */
        for (int i = 0; i < d; i++) k[(size_t)h * d + i] *= 8, v[(size_t)h * d + i] *= 0.1f;
    kvq_cache *a, *b;
    CHECK_OK(kvq_cache_create(&a, &cfg));
    CHECK_OK(kvq_cache_create(&b, &cfg));
    fill(a, k, v, 0, ctx, 1, row);
    fill(b, k, v, 0, ctx, 97, row);
    check_records(a, sc, k, v, ctx, H, d, what);
    check_records(b, sc, k, v, ctx, H, d, what);
    size_t at = 0;
    CHECK_OK(kvq_cache_memory_plan(a, ctx, 1, &at, NULL));
    CHECK(at == kvq_cache_memory_bytes(a), "%s: memory %zu, planned %zu", what, kvq_cache_memory_bytes(a), at);
    CHECK_OK(kvq_cache_memory_plan(b, ctx, 97, &at, NULL));
    CHECK(at == kvq_cache_memory_bytes(b), "%s: memory (batches) %zu, planned %zu", what, kvq_cache_memory_bytes(b), at);

    /* attention: decode at the end, prefill of the last 5 and of the first 8 (over the sink) */
    const size_t nq = 8;
    float *q = cr_gauss(rng, nq * HQ * (size_t)d, 1.0), *out = malloc(nq * HQ * (size_t)d * sizeof *out);
    double *ref = malloc(nq * HQ * (size_t)d * sizeof *ref);
    const float scale = 1.0f / sqrtf((float)d);
    const size_t pos0s[3] = {ctx - 1, ctx - 5, 0}, nqs[3] = {1, 5, nq};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(kvq_cache_attend(a, 0, q, nqs[i], HQ, pos0s[i], scale, out, pool));
        cr_ref_from_cache(a, 0, q, nqs[i], HQ, pos0s[i], scale, 0, ref);
        double e = cr_worst_row_err(out, ref, nqs[i] * HQ, d);
        CHECK(e < 2e-4, "%s: attention of %zu rows at %zu: rel err %.3g", what, nqs[i], pos0s[i], e);
    }

    /* truncate into the sink, then append again: the same records as a fresh fill */
    const size_t cut = sc->sink > 1 ? (size_t)sc->sink / 2 : 1;
    CHECK_OK(kvq_cache_truncate(b, cut));
    fill(b, k, v, cut, ctx, 200, row);
    check_records(b, sc, k, v, ctx, H, d, what);
    CHECK_OK(kvq_cache_attend(b, 0, q, 1, HQ, ctx - 1, scale, out, pool));
    cr_ref_from_cache(b, 0, q, 1, HQ, ctx - 1, scale, 0, ref);
    CHECK(cr_worst_row_err(out, ref, HQ, d) < 2e-4, "%s: attention after truncate", what);
    free(q);
    free(out);
    free(ref);
    kvq_cache_free(a);
    kvq_cache_free(b);
    free(k);
    free(v);
}

/* Memory against the plan for short fills (n < S: the sink alone) and sliding layers (no sink). */
static void test_memory(void) {
    const int sliding[3] = {0, 64, 0};
    for (int sink = 1; sink <= 300; sink += 299) {
        kvq_cache_config cfg = cr_base_cfg(3, 2, 64, "tq-mse:4", "tq-mse:2");
        cfg.sink_tokens = sink;
        cfg.sliding_window = sliding;
        cfg.compress_sliding = 1;
        kvq_cache *c;
        CHECK_OK(kvq_cache_create(&c, &cfg));
        CHECK(kvq_cache_memory_bytes(c) == 0, "empty cache holds nothing");
        tu_rng rng = {5};
        const size_t row = 2 * 64;
        float *k = cr_gauss(&rng, 700 * row, 1.0), *v = cr_gauss(&rng, 700 * row, 1.0);
        size_t len = 0;
        const size_t steps[4] = {1, 150, 300, 249};
        for (int i = 0; i < 4; i++) {
            for (int l = 0; l < 3; l++) CHECK_OK(kvq_cache_append(c, l, k + len * row, v + len * row, steps[i]));
            len += steps[i];
            size_t at = 0;
            CHECK_OK(cache_memory_plan_sim(c, len, 0, &at, NULL)); /* one batch: the same pages as any batching here */
            size_t want = 0;
            CHECK_OK(kvq_cache_memory_plan(c, len, 0, &want, NULL));
            CHECK(at == want, "sink %d len %zu: simulated %zu, closed form %zu", sink, len, at, want);
        }
        /* the sliding layer (1) encodes its first token; the global ones keep it f16 */
        const uint8_t *kr, *vr;
        const kvq_plan *kp, *vp;
        CHECK_OK(cache_locate(c, 0, 0, 0, &kr, &kp, &vr, &vp));
        CHECK(!strcmp(kvq_plan_spec(kp), "f16"), "global layer: sink position held as %s", kvq_plan_spec(kp));
        kvq_cache_free(c);
        free(k);
        free(v);
    }
}

static void test_policy_and_errors(void) {
    kvq_policy p;
    char err[256], name[KVQ_POLICY_NAME_MAX];
    CHECK_OK(kvq_policy_parse(&p, "tq-mse:4+chscale/tq-mse:4,sink=1", err, sizeof err));
    CHECK(p.sink_tokens == 1, "sink parsed as %d", p.sink_tokens);
    CHECK_OK(kvq_policy_name(&p, name, sizeof name));
    CHECK(!strcmp(name, "tq-mse:4+chscale/tq-mse:4,sink=1"), "canonical name %s", name);
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    kvq_policy_to_cache_config(&p, &cfg);
    CHECK(cfg.sink_tokens == 1, "policy to config: sink %d", cfg.sink_tokens);
    const char *bad[] = {"q8,sink=-1", "q8,sink=1025", "q8,sink=", "q8,sink=x", "q8,sink=1x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kvq_policy_init(&p);
        p.sink_tokens = 7;
        int rc = kvq_policy_parse(&p, bad[i], err, sizeof err);
        CHECK(rc == KVQ_ERR_INVALID_ARG && p.sink_tokens == 7 && strstr(err, "sink"), "'%s': %d '%s'", bad[i], rc, err);
    }
    kvq_cache *c = NULL;
    kvq_cache_config bc = cr_base_cfg(1, 1, 64, "q8", "q8");
    bc.sink_tokens = -1;
    CHECK(kvq_cache_create(&c, &bc) == KVQ_ERR_INVALID_ARG && !c, "sink -1 refused");
    bc.sink_tokens = KVQ_SINK_MAX + 1;
    CHECK(kvq_cache_create(&c, &bc) == KVQ_ERR_INVALID_ARG && !c, "sink beyond KVQ_SINK_MAX refused");
}

int main(void) {
    kvq_pool *pool;
    CHECK_OK(kvq_pool_create(&pool, 2));
    tu_rng rng = {77};
    const sink_case cases[] = {
        {"tq-mse:3", "q8", 1, 0, 0},
        {"tq-mse:4", "tq-mse:2", 4, 10, 0},
        {"q4", "tq-mse:4", 300, 0, 0},       /* beyond a page (256 tokens) */
        {"tq-mse:4+chscale", "tq-mse:4", 1, 0, 0}, /* calibrated keys: the sink passes through the tail */
        {"tq-mse:4+chscale", "q8", 200, 16, 100},  /* calibration ends inside the sink */
        {"f16", "q8", 2, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_case(&cases[i], pool, &rng);
    test_memory();
    test_policy_and_errors();
    kvq_pool_free(pool);
    return tu_finish("test_cache_sink");
}
