/*
 * The public codec entry points against sizes no buffer can have and
 * non-finite queries, for every method (with and without a wrapper) and
 * every ISA the CPU runs: they must return an error before any kernel
 * touches memory (run under ASan in CI: an over-read is a failure even if
 * the return code were right).
 *   kvq_score       nq * query_floats, nq * n (scores), n * code_bytes
 *   kvq_accumulate  nq * dim (accumulators), nq * n (weights), n * code_bytes
 *   kvq_encode / kvq_decode   n * dim, n * code_bytes
 *   kvq_plan_create n_calib * dim
 *   kvq_query_prepare  NaN / Inf anywhere in q: KVQ_ERR_NONFINITE, qprep untouched
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "testutil.h"

static const char *SPECS[] = {"f32",      "f16",         "bf16",          "q8",     "q4",     "tq-mse:1",
                              "tq-mse:2", "tq-mse:3",    "tq-mse:4",      "tq-mse:8", "tq-prod:2", "tq-prod:3",
                              "tq-prod:8", "qjl",        "polar",         "polar:3", "polar:6", "rvq:1",
                              "rvq:2",    "tq-mse:4+outliers=16", "q8+outliers=16", "tq-mse:3+center",
                              "tq-prod:3+chscale", "polar+center"};
#define NSPECS (sizeof SPECS / sizeof *SPECS)
#define D 128
#define NCAL 16

static void check_plan(const kvq_plan *p, const char *spec, const char *isa) {
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    const int dec = kvq_plan_can_decode(p);
    uint8_t *codes = calloc(4, cb);
    float *qp = calloc(4 * qf, sizeof *qp), sc[16] = {0}, acc[4 * D] = {0}, w[16] = {0}, x[4 * D];
    tu_rng r = {7};
    for (int i = 0; i < 4 * D; i++) x[i] = (float)tu_gauss(&r);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 4, codes));
    for (int j = 0; j < 4; j++) CHECK_OK(kvq_query_prepare(p, x + j * D, qp + j * qf));
    /* each a count whose byte size overflows size_t by construction */
    const size_t qrows[] = {SIZE_MAX / 8, SIZE_MAX / 2, SIZE_MAX / qf + 1, SIZE_MAX / (4 * qf) + 1, SIZE_MAX};
    const size_t drows[] = {SIZE_MAX / 8, SIZE_MAX / 2, SIZE_MAX / (4 * D) + 1, SIZE_MAX}; /* n * dim floats */
    const size_t nrows[] = {SIZE_MAX / 2 + 1, SIZE_MAX / cb + 1, SIZE_MAX};                /* n floats, n records */
    for (size_t h = 0; h < sizeof qrows / sizeof *qrows; h++) {
        int rc = kvq_score(p, qp, qrows[h], codes, 1, sc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_score nq = %zu gave %d", spec, isa, qrows[h], rc);
    }
    for (size_t h = 0; h < sizeof drows / sizeof *drows; h++) {
        const size_t m = drows[h];
        int rc = kvq_encode(p, x, KVQ_DTYPE_F32, m, codes);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_encode n = %zu gave %d", spec, isa, m, rc);
        rc = kvq_encode(p, x, KVQ_DTYPE_F16, m, codes);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_encode f16 n = %zu gave %d", spec, isa, m, rc);
        if (!dec) continue;
        rc = kvq_accumulate(p, w, m, codes, 1, acc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_accumulate nq = %zu gave %d", spec, isa, m, rc);
        rc = kvq_decode(p, codes, m, acc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_decode n = %zu gave %d", spec, isa, m, rc);
    }
    for (size_t h = 0; h < sizeof nrows / sizeof *nrows; h++) {
        const size_t m = nrows[h];
        int rc = kvq_score(p, qp, 1, codes, m, sc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_score n = %zu gave %d", spec, isa, m, rc);
        if (!dec) continue;
        rc = kvq_accumulate(p, w, 1, codes, m, acc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_accumulate n = %zu gave %d", spec, isa, m, rc);
    }
    /* nq * n fits but the score rows (nq * n floats) do not */
    int rc = kvq_score(p, qp, (size_t)1 << 40, codes, (size_t)1 << 23, sc);
    CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_score 2^63 scores gave %d", spec, isa, rc);
    if (dec) {
        rc = kvq_accumulate(p, w, (size_t)1 << 40, codes, (size_t)1 << 23, acc);
        CHECK(rc == KVQ_ERR_OVERFLOW, "%s %s: kvq_accumulate 2^63 weights gave %d", spec, isa, rc);
    }
    /* a query with one non-finite value anywhere: an error, the prepared row untouched */
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    const int at[4] = {0, 1, D / 2 + 3, D - 1};
    float *out = malloc(qf * sizeof *out);
    for (int b = 0; b < 3; b++)
        for (int a = 0; a < 4; a++) {
            float q[D];
            memcpy(q, x, sizeof q);
            q[at[a]] = bad[b];
            memset(out, 0x5a, qf * sizeof *out);
            rc = kvq_query_prepare(p, q, out);
            int untouched = 1;
            for (size_t i = 0; i < qf * sizeof *out; i++) untouched &= ((const uint8_t *)out)[i] == 0x5a;
            CHECK(rc == KVQ_ERR_NONFINITE && untouched, "%s %s: query with %g at %d gave %d (output %s)", spec, isa,
                  (double)bad[b], at[a], rc, untouched ? "untouched" : "written");
        }
    free(out);
    free(codes);
    free(qp);
}

int main(void) {
    float cal[NCAL * D];
    tu_rng r = {11};
    for (int i = 0; i < NCAL * D; i++) cal[i] = (float)tu_gauss(&r);
    const kvq_isa best = kvq_cpu_isa();
    for (size_t s = 0; s < NSPECS; s++) {
        kvq_plan *base;
        int rc = kvq_plan_create(&base, SPECS[s], D, 5, cal, NCAL);
        CHECK(rc == 0, "%s: %s", SPECS[s], kvq_strerror(rc));
        if (rc) continue;
        for (int isa = KVQ_ISA_SCALAR; isa <= (int)best; isa++) {
            kvq_plan *p;
            CHECK_OK(kvq_plan_clone_isa(&p, base, (kvq_isa)isa));
            check_plan(p, SPECS[s], kvq_isa_name((kvq_isa)isa));
            kvq_plan_free(p);
        }
        kvq_plan_free(base);
        /* calibration rows whose size does not fit */
        kvq_plan *q = NULL;
        rc = kvq_plan_create(&q, SPECS[s], D, 5, cal, SIZE_MAX / 64);
        CHECK(rc == KVQ_ERR_OVERFLOW && q == NULL, "%s: n_calib SIZE_MAX/64 gave %d", SPECS[s], rc);
    }
    return tu_finish("test_codec_misuse");
}
