/*
 * Sampler tests: greedy = argmax, top-k = 1 = greedy, determinism for a seed,
 * the sampled distribution against softmax(logits / T), top-k / top-p / min-p
 * exclusion sets, repetition penalty, argument errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "kvq.h"
#include "testutil.h"

static int32_t sample1(kvq_sampler *s, const float *logits) {
    int32_t id = -1;
    CHECK_OK(kvq_sampler_sample(s, logits, &id));
    return id;
}

static void test_greedy(void) {
    enum { N = 1000 };
    static float logits[N];
    tu_rng r = {7};
    for (int i = 0; i < N; i++) logits[i] = (float)tu_gauss(&r);
    logits[123] = 10.0f;
    kvq_sampler_params p = kvq_sampler_default_params();
    kvq_sampler s;
    CHECK_OK(kvq_sampler_init(&s, &p, N));
    CHECK(sample1(&s, logits) == 123, "greedy = argmax");
    logits[50] = 10.0f; /* tie: lowest id */
    CHECK(sample1(&s, logits) == 50, "greedy tie -> lowest id");
    kvq_sampler_release(&s);

    /* top-k = 1 at a high temperature is still the argmax */
    p.temperature = 5.0f;
    p.top_k = 1;
    p.seed = 99;
    CHECK_OK(kvq_sampler_init(&s, &p, N));
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= sample1(&s, logits) == 50;
    CHECK(ok, "top-k 1 = greedy");
    kvq_sampler_release(&s);
    kvq_sampler_release(&s); /* twice is fine */
    kvq_sampler_release(NULL);
}

static void test_determinism(void) {
    enum { N = 5000 };
    static float logits[N];
    tu_rng r = {11};
    for (int i = 0; i < N; i++) logits[i] = 2.0f * (float)tu_gauss(&r);
    kvq_sampler_params p = kvq_sampler_default_params();
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.seed = 1234;
    kvq_sampler a, b, c;
    CHECK_OK(kvq_sampler_init(&a, &p, N));
    CHECK_OK(kvq_sampler_init(&b, &p, N));
    p.seed = 4321;
    CHECK_OK(kvq_sampler_init(&c, &p, N));
    int same = 1, differ = 0;
    int32_t first[64];
    for (int i = 0; i < 64; i++) {
        int32_t x = sample1(&a, logits), y = sample1(&b, logits), z = sample1(&c, logits);
        first[i] = x;
        same &= x == y;
        differ |= x != z;
    }
    CHECK(same, "same seed, same tokens");
    CHECK(differ, "another seed, other tokens");
    kvq_sampler_reset(&a, 1234);
    int again = 1;
    for (int i = 0; i < 64; i++) again &= sample1(&a, logits) == first[i];
    CHECK(again, "reset restarts the sequence");
    kvq_sampler_release(&a);
    kvq_sampler_release(&b);
    kvq_sampler_release(&c);
}

/* Frequencies over many draws vs the expected probabilities (|z| < 5). */
static void check_distribution(const char *name, const kvq_sampler_params *p, const float *logits,
                               const double *want, int n, int draws) {
    kvq_sampler s;
    CHECK_OK(kvq_sampler_init(&s, p, (size_t)n));
    int *cnt = calloc((size_t)n, sizeof *cnt);
    for (int i = 0; i < draws; i++) {
        int32_t id = sample1(&s, logits);
        if (id >= 0 && id < n) cnt[id]++;
    }
    for (int i = 0; i < n; i++) {
        double f = (double)cnt[i] / draws;
        double sd = sqrt(want[i] * (1 - want[i]) / draws) + 1e-12;
        if (want[i] == 0) CHECK(cnt[i] == 0, "%s: token %d excluded but drawn %d times", name, i, cnt[i]);
        else CHECK(fabs(f - want[i]) / sd < 5.0, "%s: token %d freq %.4f want %.4f", name, i, f, want[i]);
    }
    free(cnt);
    kvq_sampler_release(&s);
}

static void softmax(const float *l, const int *keep, int n, double temp, double *out) {
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        if (keep[i] && l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) z += keep[i] ? exp((l[i] - mx) / temp) : 0;
    for (int i = 0; i < n; i++) out[i] = keep[i] ? exp((l[i] - mx) / temp) / z : 0;
}

static void test_distributions(void) {
    enum { N = 6 };
    /* probabilities at T = 1: about .47 .26 .14 .07 .04 .02 (sorted by id) */
    const float logits[N] = {2.0f, 1.4f, 0.8f, 0.1f, -0.5f, -1.3f};
    int keep[N];
    double want[N];
    kvq_sampler_params p = kvq_sampler_default_params();
    p.seed = 42;
    const int draws = 200000;

    p.temperature = 0.7f;
    for (int i = 0; i < N; i++) keep[i] = 1;
    softmax(logits, keep, N, 0.7, want);
    check_distribution("temperature 0.7", &p, logits, want, N, draws);

    p.temperature = 1.5f;
    p.top_k = 3;
    for (int i = 0; i < N; i++) keep[i] = i < 3;
    softmax(logits, keep, N, 1.5, want);
    check_distribution("top-k 3", &p, logits, want, N, draws);

    /* top-p 0.8 at T = 1: cumulative .47 .73 .87 -> the first three stay */
    p.top_k = 0;
    p.top_p = 0.8f;
    p.temperature = 1.0f;
    double full[N];
    for (int i = 0; i < N; i++) keep[i] = 1;
    softmax(logits, keep, N, 1.0, full);
    double cum = 0;
    for (int i = 0; i < N; i++) {
        keep[i] = cum < 0.8;
        cum += full[i];
    }
    CHECK(keep[0] && keep[1] && keep[2] && !keep[3], "top-p expectation");
    softmax(logits, keep, N, 1.0, want);
    check_distribution("top-p 0.8", &p, logits, want, N, draws);

    /* min-p 0.2: keep p_i >= 0.2 p_max, i.e. logit >= 2 + ln 0.2 = 0.39 -> ids 0..2 */
    p.top_p = 1.0f;
    p.min_p = 0.2f;
    p.temperature = 2.0f;
    for (int i = 0; i < N; i++) keep[i] = logits[i] >= 2.0f + logf(0.2f);
    CHECK(keep[2] && !keep[3], "min-p expectation");
    softmax(logits, keep, N, 2.0, want);
    check_distribution("min-p 0.2", &p, logits, want, N, draws);

    /* all three: top-k 5, top-p 0.9 (over the 5: .47 .73 .87 .94 -> 4), min-p 0.1 (-> 4 stay: logit >= -0.30) */
    p.top_k = 5;
    p.top_p = 0.9f;
    p.min_p = 0.1f;
    p.temperature = 1.0f;
    for (int i = 0; i < N; i++) keep[i] = i < 4;
    softmax(logits, keep, N, 1.0, want);
    check_distribution("top-k+top-p+min-p", &p, logits, want, N, draws);
}

static const float *qsort_logits;
static int cmp_desc(const void *a, const void *b) {
    float x = qsort_logits[*(const int *)a], y = qsort_logits[*(const int *)b];
    return x > y ? -1 : x < y ? 1 : 0;
}

static void test_exclusion_large(void) {
    /* on a large vocabulary the survivors are exactly the expected sets */
    enum { N = 20000 };
    static float logits[N];
    tu_rng r = {5};
    for (int i = 0; i < N; i++) logits[i] = 3.0f * (float)tu_gauss(&r);
    /* order of ids by logit */
    float thr_k;
    {
        static float sorted[N];
        memcpy(sorted, logits, sizeof sorted);
        for (int i = 0; i < 20; i++) { /* partial selection of the top 20 */
            int b = i;
            for (int j = i + 1; j < N; j++)
                if (sorted[j] > sorted[b]) b = j;
            float t = sorted[i];
            sorted[i] = sorted[b];
            sorted[b] = t;
        }
        thr_k = sorted[19];
    }
    kvq_sampler_params p = kvq_sampler_default_params();
    p.temperature = 3.0f;
    p.top_k = 20;
    p.seed = 3;
    kvq_sampler s;
    CHECK_OK(kvq_sampler_init(&s, &p, N));
    int ok = 1;
    for (int i = 0; i < 2000; i++) ok &= logits[sample1(&s, logits)] >= thr_k;
    CHECK(ok, "top-k 20 keeps only the 20 best");
    kvq_sampler_release(&s);

    /* top-p on the whole vocabulary: rank of every draw against a full sort.
     * At a high temperature the survivors are drawn almost uniformly, so the
     * last one of the nucleus shows up too. */
    {
        static int rank[N], order[N];
        for (int i = 0; i < N; i++) order[i] = i;
        qsort_logits = logits;
        qsort(order, N, sizeof order[0], cmp_desc);
        for (int i = 0; i < N; i++) rank[order[i]] = i;
        const float tps[2] = {0.3f, 0.9f};
        for (int q = 0; q < 2; q++) {
            double mx0 = logits[order[0]], z = 0, cum = 0;
            for (int i = 0; i < N; i++) z += exp(logits[i] - mx0);
            int m_exp = N;
            for (int i = 0; i < N; i++) {
                cum += exp(logits[order[i]] - mx0);
                if (cum >= tps[q] * z) {
                    m_exp = i + 1;
                    break;
                }
            }
            p.top_k = 0;
            p.top_p = tps[q];
            p.temperature = 1000.0f;
            CHECK_OK(kvq_sampler_init(&s, &p, N));
            int max_rank = -1;
            for (int i = 0; i < 6 * m_exp + 200; i++) {
                int rk = rank[sample1(&s, logits)];
                if (rk > max_rank) max_rank = rk;
            }
            CHECK(max_rank >= m_exp - 2 && max_rank <= m_exp, "top-p %.2f: last kept rank %d, nucleus %d",
                  (double)tps[q], max_rank, m_exp);
            printf("  top-p %.2f: nucleus %d, highest rank drawn %d\n", (double)tps[q], m_exp, max_rank);
            kvq_sampler_release(&s);
        }
        p.top_p = 1.0f;
        p.temperature = 3.0f;
    }

    p.top_k = 0;
    p.min_p = 0.3f;
    float mx = -INFINITY;
    for (int i = 0; i < N; i++) mx = fmaxf(mx, logits[i]);
    CHECK_OK(kvq_sampler_init(&s, &p, N));
    ok = 1;
    for (int i = 0; i < 2000; i++) ok &= logits[sample1(&s, logits)] >= mx + logf(0.3f);
    CHECK(ok, "min-p keeps only p >= 0.3 p_max");
    kvq_sampler_release(&s);
}

static void test_penalty(void) {
    const float logits[4] = {3.0f, 2.9f, -1.0f, -1.1f};
    kvq_sampler_params p = kvq_sampler_default_params();
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 2;
    kvq_sampler s;
    CHECK_OK(kvq_sampler_init(&s, &p, 4));
    CHECK(sample1(&s, logits) == 0, "no history");
    CHECK_OK(kvq_sampler_accept(&s, 0));
    CHECK_OK(kvq_sampler_accept(&s, 0)); /* twice: penalized once (3/1.5 = 2 < 2.9) */
    CHECK(sample1(&s, logits) == 1, "penalized token 0 -> 1");
    CHECK_OK(kvq_sampler_accept(&s, 1)); /* window {0, 1}: 2.0 vs 1.93 */
    CHECK(sample1(&s, logits) == 0, "both penalized");
    CHECK_OK(kvq_sampler_accept(&s, 2));
    CHECK_OK(kvq_sampler_accept(&s, 2)); /* window {2, 2}: 0 back to 3.0 */
    CHECK(sample1(&s, logits) == 0, "window slides");
    /* negative logits are multiplied: -1 * 1.5 = -1.5 < -1.1 */
    const float neg[2] = {-1.0f, -1.1f};
    kvq_sampler s2;
    CHECK_OK(kvq_sampler_init(&s2, &p, 2));
    CHECK_OK(kvq_sampler_accept(&s2, 0));
    CHECK(sample1(&s2, neg) == 1, "negative logit penalized by multiplication");
    CHECK(kvq_sampler_accept(&s2, 2) == KVQ_ERR_INVALID_ARG, "accept out of range");
    kvq_sampler_release(&s);
    kvq_sampler_release(&s2);
}

static void test_errors(void) {
    kvq_sampler_params p = kvq_sampler_default_params();
    kvq_sampler s;
    CHECK(kvq_sampler_init(&s, &p, 0) == KVQ_ERR_INVALID_ARG, "n_vocab 0");
    CHECK(kvq_sampler_init(NULL, &p, 4) == KVQ_ERR_NULL, "NULL sampler");
    p.repeat_penalty = 0;
    CHECK(kvq_sampler_init(&s, &p, 4) == KVQ_ERR_INVALID_ARG, "penalty 0");
    p = kvq_sampler_default_params();
    p.temperature = NAN;
    CHECK(kvq_sampler_init(&s, &p, 4) == KVQ_ERR_INVALID_ARG, "NaN temperature");
    p = kvq_sampler_default_params();
    p.temperature = 1.0f;
    CHECK_OK(kvq_sampler_init(&s, &p, 3));
    int32_t id;
    const float bad[3] = {0.0f, NAN, 1.0f};
    CHECK(kvq_sampler_sample(&s, bad, &id) == KVQ_ERR_NONFINITE, "NaN logit");
    const float masked[3] = {-INFINITY, -INFINITY, -INFINITY};
    CHECK(kvq_sampler_sample(&s, masked, &id) == KVQ_ERR_NONFINITE, "all masked");
    const float one[3] = {-INFINITY, 0.5f, -INFINITY};
    int ok = 1;
    for (int i = 0; i < 50; i++) ok &= sample1(&s, one) == 1;
    CHECK(ok, "masked tokens are never drawn");
    CHECK(kvq_sampler_sample(&s, NULL, &id) == KVQ_ERR_NULL, "NULL logits");
    kvq_sampler_release(&s);
}

/* The sequences of two seeds, pinned (taken before the RNG moved to
 * src/common/rng.h, issue 14): the seeding and the draws never change. */
static void test_pinned(void) {
    enum { N = 1000 };
    static float logits[N];
    static const int32_t want[2][16] = {{946, 17, 893, 595, 982, 233, 745, 369, 854, 465, 233, 907, 209, 233, 378, 41},
                                        {568, 366, 799, 364, 568, 369, 369, 906, 431, 799, 19, 747, 19, 982, 832, 993}};
    tu_rng r = {5};
    for (int i = 0; i < N; i++) logits[i] = 2.0f * (float)tu_gauss(&r);
    kvq_sampler_params p = kvq_sampler_default_params();
    p.temperature = 1.0f;
    p.seed = 777;
    for (int k = 0; k < 2; k++) {
        if (k == 1) p.top_k = 40, p.top_p = 0.9f, p.seed = 1;
        kvq_sampler s;
        CHECK_OK(kvq_sampler_init(&s, &p, N));
        int same = 1;
        for (int i = 0; i < 16; i++) same &= sample1(&s, logits) == want[k][i];
        CHECK(same, "pinned sequence %d", k);
        kvq_sampler_release(&s);
    }
}

int main(void) {
    test_greedy();
    test_determinism();
    test_pinned();
    test_distributions();
    test_exclusion_large();
    test_penalty();
    test_errors();
    return tu_finish("test_sampler");
}
