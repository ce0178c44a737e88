/*
 * A program that uses an installed kvq as any other would: the public headers
 * and the libraries, found through pkg-config or find_package(kvq)
 * (scripts/check-install.sh builds and runs it both ways, and as a subproject).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvq.h"
#include "kvq_engine.h"

#define DIM 64
#define N 100

static int check(int rc, const char *what) {
    if (rc) fprintf(stderr, "consumer: %s: %s\n", what, kvq_strerror(rc));
    return rc;
}

int main(void) {
    if (kvq_version_number() != KVQ_VERSION_NUMBER) {
        fprintf(stderr, "consumer: header version %d, library %u\n", KVQ_VERSION_NUMBER, kvq_version_number());
        return 1;
    }
    /* a codec round trip */
    static float x[N * DIM], y[N * DIM];
    for (int i = 0; i < N * DIM; i++) x[i] = sinf(0.37f * (float)i) + 0.25f * cosf(1.3f * (float)i);
    kvq_plan *plan = NULL;
    if (check(kvq_plan_create(&plan, "tq-mse:4", DIM, 7, NULL, 0), "plan")) return 1;
    unsigned char *codes = malloc(N * kvq_plan_code_bytes(plan));
    if (!codes || check(kvq_encode(plan, x, KVQ_DTYPE_F32, N, codes), "encode") ||
        check(kvq_decode(plan, codes, N, y), "decode"))
        return 1;
    double err = 0, ref = 0;
    for (int i = 0; i < N * DIM; i++) { err += (x[i] - y[i]) * (x[i] - y[i]); ref += x[i] * x[i]; }
    /* a cache from a policy string, attention on the codes */
    kvq_policy pol;
    char why[256];
    if (kvq_policy_parse(&pol, "q8/tq-mse:4,w=16", why, sizeof why)) { fprintf(stderr, "consumer: %s\n", why); return 1; }
    kvq_cache_config cfg = {0};
    cfg.n_layers = 1;
    cfg.n_kv_heads = 1;
    cfg.head_dim = DIM;
    kvq_policy_to_cache_config(&pol, &cfg);
    kvq_cache *cache = NULL;
    float out[DIM];
    if (check(kvq_cache_create(&cache, &cfg), "cache") || check(kvq_cache_append(cache, 0, x, x, N), "append") ||
        check(kvq_cache_attend(cache, 0, x + (N - 1) * DIM, 1, 1, N - 1, 0.125f, out, NULL), "attend"))
        return 1;
    /* the engine's sampler (no model needed) */
    kvq_sampler_params sp = kvq_sampler_default_params();
    kvq_sampler *smp = NULL;
    int32_t tok = -1;
    float logits[4] = {0.1f, 2.0f, -1.0f, 0.5f};
    if (check(kvq_sampler_create(&smp, &sp, 4), "sampler") || check(kvq_sampler_sample(smp, logits, &tok), "sample"))
        return 1;
    printf("kvq %u: tq-mse:4 rel. MSE %.4f (%.3f bits), cache %zu bytes for %zu tokens, greedy token %d\n",
           kvq_version_number(), err / ref, kvq_plan_bits_per_value(plan), kvq_cache_memory_bytes(cache),
           kvq_cache_len(cache, 0), (int)tok);
    int ok = err / ref < 0.02 && tok == 1;
    kvq_sampler_free(smp);
    kvq_cache_free(cache);
    free(codes);
    kvq_plan_free(plan);
    return ok ? 0 : 1;
}
