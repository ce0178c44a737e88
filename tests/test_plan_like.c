/*
 * kvq_plan_create_like / kvq_plan_create_like_from_stats: a calibrated plan
 * refitted around another plan's inner plan (rotation, codebook) equals the
 * plan kvq_plan_create builds from the same rows, bit for bit (stats, codes,
 * decodes, scores, accumulations), shares that inner plan (one copy, freed
 * with its last holder, in any order), can be built by many threads at once,
 * and refuses what kvq_plan_create refuses.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "kvq.h"
#include "testutil.h"

typedef struct {
    const char *spec;
    int d;
} like_case;

/* tq-mse (Lloyd-Max codebook), the trellis, a dense (non-power-of-two) rotation, each wrapper */
static const like_case CASES[] = {
    {"tq-mse:4+chscale", 64},  {"tq-mse:4+center", 128},     {"tcq:4+chscale", 64},
    {"tq-mse:3+chscale", 96},  {"tq-mse:4+outliers=8", 64},  {"tq-mse:2+outliers=16", 128},
    {"q8+center", 64},
};

static float *rows_of(tu_rng *r, size_t n, int d, double shift) {
    float *x = malloc(sizeof(float) * n * (size_t)d);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < d; c++) /* channel c: mean shift * c / d, deviation 1 + c % 7 */
            x[i * (size_t)d + (size_t)c] = (float)(shift * c / d + (1 + c % 7) * tu_gauss(r));
    return x;
}

/* p and q give the same bytes and floats for everything a plan computes. */
static void same_plan(const kvq_plan *p, const kvq_plan *q, const float *x, size_t n, const char *what) {
    const int d = kvq_plan_dim(p);
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    CHECK(cb == kvq_plan_code_bytes(q) && qf == kvq_plan_query_floats(q) && d == kvq_plan_dim(q) &&
              !strcmp(kvq_plan_spec(p), kvq_plan_spec(q)) && kvq_plan_isa(p) == kvq_plan_isa(q),
          "%s: shape", what);
    size_t ns = kvq_plan_stats_floats(p);
    float *s1 = malloc(sizeof(float) * (ns + 1)), *s2 = malloc(sizeof(float) * (ns + 1));
    CHECK(ns == kvq_plan_stats_floats(q) && ns > 0, "%s: %zu stats", what, ns);
    CHECK_OK(kvq_plan_stats(p, s1, ns));
    CHECK_OK(kvq_plan_stats(q, s2, ns));
    CHECK(!memcmp(s1, s2, sizeof(float) * ns), "%s: stats differ", what);
    uint8_t *c1 = malloc(cb * n), *c2 = malloc(cb * n);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, c1));
    CHECK_OK(kvq_encode(q, x, KVQ_DTYPE_F32, n, c2));
    CHECK(!memcmp(c1, c2, cb * n), "%s: codes differ", what);
    float *y1 = malloc(sizeof(float) * n * (size_t)d), *y2 = malloc(sizeof(float) * n * (size_t)d);
    if (kvq_plan_can_decode(p)) {
        CHECK_OK(kvq_decode(p, c1, n, y1));
        CHECK_OK(kvq_decode(q, c1, n, y2));
        CHECK(!memcmp(y1, y2, sizeof(float) * n * (size_t)d), "%s: decodes differ", what);
    }
    /* 3 queries: the first rows, scored against every code */
    const size_t nq = 3;
    float *q1 = malloc(sizeof(float) * nq * qf), *q2 = malloc(sizeof(float) * nq * qf);
    float *sc1 = malloc(sizeof(float) * nq * n), *sc2 = malloc(sizeof(float) * nq * n);
    for (size_t j = 0; j < nq; j++) {
        CHECK_OK(kvq_query_prepare(p, x + j * (size_t)d, q1 + j * qf));
        CHECK_OK(kvq_query_prepare(q, x + j * (size_t)d, q2 + j * qf));
    }
    CHECK(!memcmp(q1, q2, sizeof(float) * nq * qf), "%s: prepared queries differ", what);
    CHECK_OK(kvq_score(p, q1, nq, c1, n, sc1));
    CHECK_OK(kvq_score(q, q1, nq, c1, n, sc2));
    CHECK(!memcmp(sc1, sc2, sizeof(float) * nq * n), "%s: scores differ", what);
    if (kvq_plan_can_decode(p)) {
        float *a1 = calloc(nq * (size_t)d, sizeof(float)), *a2 = calloc(nq * (size_t)d, sizeof(float));
        for (size_t i = 0; i < nq * n; i++) sc1[i] = (float)(i % 5) * 0.25f; /* weights */
        CHECK_OK(kvq_accumulate(p, sc1, nq, c1, n, a1));
        CHECK_OK(kvq_accumulate(q, sc1, nq, c1, n, a2));
        for (size_t j = 0; j < nq; j++) {
            CHECK_OK(kvq_unrotate(p, a1 + j * (size_t)d, a1 + j * (size_t)d));
            CHECK_OK(kvq_unrotate(q, a2 + j * (size_t)d, a2 + j * (size_t)d));
        }
        CHECK(!memcmp(a1, a2, sizeof(float) * nq * (size_t)d), "%s: accumulations differ", what);
        free(a1);
        free(a2);
    }
    free(q1), free(q2), free(sc1), free(sc2), free(y1), free(y2), free(c1), free(c2), free(s1), free(s2);
}

/* Many block positions' plans at once, as kvq_wmat builds them. */
typedef struct {
    const kvq_plan *like;
    const float *calib; /* (n_tasks, n, d) */
    size_t n;
    int d;
    kvq_plan **out;
    int *rcs;
} par_job;

static void par_task(void *arg, int i, int thread) {
    (void)thread;
    par_job *j = arg;
    j->rcs[i] = kvq_plan_create_like(&j->out[i], j->like, j->calib + (size_t)i * j->n * (size_t)j->d, j->n);
}

static void one_case(const like_case *lc, kvq_pool *pool, tu_rng *r) {
    const int d = lc->d;
    const size_t n = 200;
    char what[96];
    float *a = rows_of(r, n, d, 3.0), *b = rows_of(r, n, d, -5.0), *x = rows_of(r, n, d, 1.0);
    kvq_plan *like = NULL, *ref = NULL, *p = NULL, *ps = NULL;
    CHECK_OK(kvq_plan_create(&like, lc->spec, d, 11, a, n));
    CHECK_OK(kvq_plan_create(&ref, lc->spec, d, 11, b, n));
    CHECK_OK(kvq_plan_create_like(&p, like, b, n));
    if (!like || !ref || !p) goto out;
    CHECK(p->inner == like->inner && p->inner_shared && !like->inner_shared, "%s: the inner plan is shared",
          lc->spec);
    CHECK(atomic_load(&like->inner->refs) == 2 && atomic_load(&like->refs) == 1, "%s: references", lc->spec);
    snprintf(what, sizeof what, "%s d=%d like", lc->spec, d);
    same_plan(p, ref, x, n, what);
    /* from stats: the refitted plan's stats around like's inner plan */
    size_t ns = kvq_plan_stats_floats(ref);
    float *st = malloc(sizeof(float) * ns);
    CHECK_OK(kvq_plan_stats(ref, st, ns));
    CHECK_OK(kvq_plan_create_like_from_stats(&ps, like, st, ns));
    if (ps) {
        snprintf(what, sizeof what, "%s d=%d like_from_stats", lc->spec, d);
        same_plan(ps, ref, x, n, what);
        CHECK(atomic_load(&like->inner->refs) == 3, "%s: three holders", lc->spec);
    }
    CHECK(kvq_plan_create_like_from_stats(&ps, like, st, ns - 1) == KVQ_ERR_INVALID_ARG, "%s: stats count", lc->spec);
    CHECK(kvq_plan_create_like_from_stats(&ps, like, NULL, ns) == KVQ_ERR_NULL, "%s: NULL stats", lc->spec);
    st[0] = NAN;
    kvq_plan *keep = ps;
    CHECK(kvq_plan_create_like_from_stats(&ps, like, st, ns) == KVQ_ERR_NONFINITE && ps == keep, "%s: NaN stats",
          lc->spec);
    free(st);
    /* the calibration errors of kvq_plan_create, *out untouched */
    keep = p;
    CHECK(kvq_plan_create_like(&p, like, NULL, 0) == KVQ_ERR_NEEDS_CALIBRATION && p == keep, "%s: no rows", lc->spec);
    CHECK(kvq_plan_create_like(&p, like, NULL, 3) == KVQ_ERR_NULL && p == keep, "%s: NULL rows", lc->spec);
    float saved = b[5];
    b[5] = INFINITY;
    CHECK(kvq_plan_create_like(&p, like, b, n) == KVQ_ERR_NONFINITE && p == keep, "%s: Inf rows", lc->spec);
    b[5] = saved;
    CHECK(atomic_load(&like->inner->refs) == 3, "%s: failed builds keep no reference", lc->spec);

    /* like freed first: p and ps keep the inner plan (ASan: no use after free) */
    kvq_plan_free(like);
    like = NULL;
    CHECK(atomic_load(&p->inner->refs) == 2, "%s: two holders left", lc->spec);
    snprintf(what, sizeof what, "%s d=%d after like freed", lc->spec, d);
    same_plan(p, ref, x, n, what);
    /* a plan built like p (whose inner plan is shared) shares the same one */
    kvq_plan *p2 = NULL;
    CHECK_OK(kvq_plan_create_like(&p2, p, b, n));
    if (p2) {
        CHECK(p2->inner == p->inner && atomic_load(&p->inner->refs) == 3, "%s: like of a like", lc->spec);
        kvq_plan_free(p2);
    }
    /* a clone for another ISA builds its own inner plan and equals the scalar clone of the reference */
    kvq_plan *c1 = NULL, *c2 = NULL;
    CHECK_OK(kvq_plan_clone_isa(&c1, p, KVQ_ISA_SCALAR));
    CHECK_OK(kvq_plan_clone_isa(&c2, ref, KVQ_ISA_SCALAR));
    if (c1 && c2) {
        CHECK(c1->inner != p->inner && !c1->inner_shared, "%s: a clone owns its inner plan", lc->spec);
        snprintf(what, sizeof what, "%s d=%d scalar clones", lc->spec, d);
        same_plan(c1, c2, x, n, what);
    }
    kvq_plan_free(c1);
    kvq_plan_free(c2);

    /* 24 block positions over the pool at once, each equal to its own kvq_plan_create */
    enum { NT = 24 };
    float *cal = malloc(sizeof(float) * NT * n * (size_t)d);
    for (int t = 0; t < NT; t++) {
        float *rows = rows_of(r, n, d, (double)t - 10.0);
        memcpy(cal + (size_t)t * n * (size_t)d, rows, sizeof(float) * n * (size_t)d);
        free(rows);
    }
    kvq_plan *outs[NT] = {0};
    int rcs[NT] = {0};
    par_job j = {.like = p, .calib = cal, .n = n, .d = d, .out = outs, .rcs = rcs};
    CHECK_OK(kvq_pool_run(pool, par_task, &j, NT));
    CHECK(atomic_load(&p->inner->refs) == 2 + NT, "%s: %d holders after the parallel build", lc->spec, 2 + NT);
    for (int t = 0; t < NT; t++) {
        CHECK(rcs[t] == KVQ_OK && outs[t] && outs[t]->inner == p->inner, "%s: task %d: %d", lc->spec, t, rcs[t]);
        if (t % 8 == 0 && outs[t]) {
            kvq_plan *own = NULL;
            CHECK_OK(kvq_plan_create(&own, lc->spec, d, 11, cal + (size_t)t * n * (size_t)d, n));
            snprintf(what, sizeof what, "%s d=%d parallel %d", lc->spec, d, t);
            if (own) same_plan(outs[t], own, x, n, what);
            kvq_plan_free(own);
        }
    }
    for (int t = NT - 1; t >= 0; t--) kvq_plan_free(outs[t]);
    free(cal);
out:
    kvq_plan_free(ps);
    kvq_plan_free(p);
    kvq_plan_free(ref);
    kvq_plan_free(like);
    free(a), free(b), free(x);
}

static void plain_refused(void) {
    kvq_plan *plain = NULL, *p = NULL;
    float rows[64 * 4] = {0};
    CHECK_OK(kvq_plan_create(&plain, "tq-mse:4", 64, 1, NULL, 0));
    CHECK(kvq_plan_create_like(&p, plain, rows, 4) == KVQ_ERR_INVALID_ARG && !p, "a plain plan has nothing to refit");
    CHECK(kvq_plan_create_like_from_stats(&p, plain, rows, 0) == KVQ_ERR_INVALID_ARG && !p, "plain from stats");
    CHECK(kvq_plan_create_like(NULL, plain, rows, 4) == KVQ_ERR_NULL, "NULL out");
    CHECK(kvq_plan_create_like(&p, NULL, rows, 4) == KVQ_ERR_NULL, "NULL like");
    CHECK(kvq_plan_create_like_from_stats(&p, NULL, rows, 4) == KVQ_ERR_NULL, "NULL like (stats)");
    kvq_plan_free(plain);
}

int main(void) {
    tu_rng r = {0x5eed1e};
    kvq_pool *pool = NULL;
    CHECK_OK(kvq_pool_create(&pool, 4));
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) one_case(&CASES[i], pool, &r);
    plain_refused();
    kvq_pool_free(pool);
    return tu_finish("test_plan_like");
}
