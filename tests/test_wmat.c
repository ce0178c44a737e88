/*
 * Weight matrices on kvq codes (src/engine/wmat.c): reconstruction error
 * against the source and the codec's bounds, the product on the codes
 * against a float64 product of the decoded rows (within the int8 rounding
 * bound of the prepared activations), batch and thread invariance, and every
 * bad input.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ggml_types.h"
#include "engine/wmat.h"
#include "testutil.h"

typedef struct {
    const char *spec;
    double rel_mse_max; /* relative MSE of the decoded weights on Gaussian rows */
    int int8_acts;      /* activations rounded to int8 per block (tq-mse <= 4, q8, q4) */
    int batch_exact;    /* one token scores bit for bit as in a batch (not +outliers: its one-query
                           kernel sums in another order, within float rounding of the batch one) */
} spec_case;

/* Bounds: docs/RESULTS.md codec table (Gaussian rows, d = 64) with 20% margin
 * for the small matrices here; q8: 8-bit absmax per block. */
static const spec_case SPECS[] = {
    {"tq-mse:4", 0.0089 * 1.2, 1, 1},
    {"tq-mse:2", 0.118 * 1.2, 1, 1},
    {"tq-mse:3+chscale", 0.035 * 1.3, 1, 1},
    {"q8", 1e-4, 1, 1},
    {"tq-mse:5", 0.0025 * 1.3, 0, 1},
    {"tq-mse:4+outliers=8", 0.0089 * 1.2, 1, 0},
    {"tq-mse:4+center", 0.0089 * 1.2, 1, 1},
};

static float *gauss_matrix(tu_rng *r, int64_t rows, int64_t cols) {
    float *w = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (float)tu_gauss(r) * 0.05f;
    return w;
}

static kvq_ggml_matrix f32_matrix(const float *w, int64_t rows, int64_t cols) {
    kvq_ggml_matrix m = {w, GGML_TYPE_F32, rows, cols, sizeof(float) * (size_t)cols, NULL};
    return m;
}

static void one_case(const spec_case *sc, int64_t rows, int64_t cols, int block, kvq_pool *pool, tu_rng *r) {
    float *w = gauss_matrix(r, rows, cols);
    kvq_ggml_matrix src = f32_matrix(w, rows, cols);
    kvq_wmat *q = NULL;
    char err[256] = "";
    int rc = kvq_wmat_create(&q, &src, sc->spec, block, 7, pool, err, sizeof err);
    CHECK(rc == KVQ_OK, "%s %lldx%lld: %s", sc->spec, (long long)rows, (long long)cols, err);
    if (rc) { free(w); return; }
    int B = q->block;
    CHECK(B > 0 && cols % B == 0, "block %d", B);
    CHECK(kvq_wmat_code_bytes(q) == (size_t)q->nb * (size_t)rows * q->code_bytes, "bytes");

    /* reconstruction */
    float *row = malloc(sizeof(float) * (size_t)cols);
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows; i++) {
        CHECK_OK(kvq_wmat_row(q, i, row));
        for (int64_t c = 0; c < cols; c++) {
            double d = (double)row[c] - (double)w[i * cols + c];
            num += d * d;
            den += (double)w[i * cols + c] * w[i * cols + c];
        }
    }
    CHECK(num / den <= sc->rel_mse_max, "%s B=%d: relative MSE %.5f > %.5f", sc->spec, B, num / den, sc->rel_mse_max);

    /* product vs float64 of the decoded rows */
    int64_t ntok = 5;
    float *x = malloc(sizeof(float) * (size_t)(ntok * cols));
    for (int64_t i = 0; i < ntok * cols; i++) x[i] = (float)tu_gauss(r);
    x[3] = 25.0f; /* an outlier activation */
    float *y = malloc(sizeof(float) * (size_t)(ntok * rows));
    double *yr = malloc(sizeof(double) * (size_t)(ntok * rows));
    CHECK_OK(kvq_wmat_matmul(q, pool, NULL, x, ntok, y, rows));
    CHECK_OK(kvq_wmat_matmul_ref(q, x, ntok, yr));
    int bad = 0;
    for (int64_t t = 0; t < ntok && !bad; t++)
        for (int64_t i = 0; i < rows && !bad; i++) {
            /* per block: |<w, x> - <w, x~>| <= |R w|_1 * max|R x| / 254 <= sqrt(B) |w| |x| / 254
             * for round-to-nearest int8 with scale max/127; plus float rounding */
            CHECK_OK(kvq_wmat_row(q, i, row));
            double tol = 0, mag = 0;
            for (int b = 0; b < q->nb; b++) {
                double nw = 0, nx = 0;
                for (int c = b * B; c < (b + 1) * B; c++) {
                    nw += (double)row[c] * row[c];
                    nx += (double)x[t * cols + c] * x[t * cols + c];
                }
                tol += (sc->int8_acts ? sqrt((double)B) / 254.0 : 0.0) * sqrt(nw * nx);
                mag += sqrt(nw * nx);
            }
            tol += 1e-5 * mag + 1e-6;
            double e = fabs((double)y[t * rows + i] - yr[t * rows + i]);
            if (e > tol) {
                bad = 1;
                CHECK(0, "%s B=%d row %lld tok %lld: |%g - %g| = %g > %g", sc->spec, B, (long long)i, (long long)t,
                      y[t * rows + i], yr[t * rows + i], e, tol);
            }
        }
    tu_checks++;

    /* one token at a time and one thread give the same bits, with a workspace reused across calls of
     * growing and shrinking sizes */
    float *y1 = malloc(sizeof(float) * (size_t)(ntok * rows));
    kvq_wmat_ws ws = {0};
    int same = 1;
    for (int64_t t = 0; t < ntok; t++) {
        CHECK_OK(kvq_wmat_matmul(q, NULL, t % 2 ? &ws : NULL, x + t * cols, 1, y1, rows));
        if (sc->batch_exact) same &= !memcmp(y1, y + t * rows, sizeof(float) * (size_t)rows);
        CHECK_OK(kvq_wmat_matmul(q, pool, &ws, x, t + 1, y1, rows));
        same &= !memcmp(y1, y, sizeof(float) * (size_t)((t + 1) * rows));
    }
    kvq_wmat_ws_free(&ws);
    kvq_wmat_ws_free(&ws); /* twice: harmless */
    CHECK(same, "%s: batch of %lld / one thread / a reused workspace differs from one token at a time", sc->spec,
          (long long)ntok);

    /* codes round-trip through kvq_wmat_from_codes (non-calibrated specs) */
    int calibrated = 0;
    CHECK_OK(kvq_spec_needs_calibration(sc->spec, &calibrated));
    CHECK(q->calibrated == calibrated && (size_t)q->nplans == (calibrated ? (size_t)q->nb : 1), "%s: calibrated %d",
          sc->spec, q->calibrated);
    if (calibrated) {
        /* the codes are those of one plan per block position fitted on that block of the rows (the sample
         * is every row here: rows < 8192), and the plans rebuilt from their stats give the same products */
        float *blk = malloc(sizeof(float) * (size_t)(rows * B));
        uint8_t *ref = malloc(kvq_wmat_code_bytes(q));
        for (int b = 0; b < q->nb; b++) {
            for (int64_t i = 0; i < rows; i++) memcpy(blk + i * B, w + i * cols + (int64_t)b * B, sizeof(float) * (size_t)B);
            kvq_plan *pf = NULL, *pb = NULL;
            CHECK_OK(kvq_plan_create(&pf, sc->spec, B, 7, blk, (size_t)rows));
            /* its stats as a file holds them: f16, +chscale's inverses 1 / a recomputed from the f16 a */
            size_t per = kvq_plan_stats_floats(pf);
            float *sb = malloc(sizeof(float) * per);
            CHECK_OK(kvq_plan_stats(pf, sb, per));
            const int chs = per == 3 * (size_t)B;
            for (size_t k = 0; k < (chs ? 2 * (size_t)B : per); k++) sb[k] = kvq_f16_to_f32(kvq_f32_to_f16(sb[k]));
            if (chs)
                for (int c = 0; c < B; c++) sb[2 * B + c] = (float)(1.0 / (double)sb[B + c]);
            CHECK_OK(kvq_plan_create_from_stats(&pb, sc->spec, B, 7, sb, per));
            if (pb) CHECK_OK(kvq_encode(pb, blk, KVQ_DTYPE_F32, (size_t)rows, ref + (size_t)b * (size_t)rows * q->code_bytes));
            free(sb);
            kvq_plan_free(pf);
            kvq_plan_free(pb);
        }
        CHECK(!memcmp(ref, q->codes, kvq_wmat_code_bytes(q)), "%s %lldx%lld: codes differ from per-block plans",
              sc->spec, (long long)rows, (long long)cols);
        size_t ns = kvq_wmat_stats_floats(q), per = 0;
        CHECK_OK(kvq_spec_stats_floats(sc->spec, B, &per));
        CHECK(ns == per * (size_t)q->nb && ns > 0, "%s: %zu stats floats", sc->spec, ns);
        float *st = malloc(sizeof(float) * ns);
        CHECK_OK(kvq_wmat_stats(q, st, ns));
        CHECK(kvq_wmat_stats(q, st, ns - 1) == KVQ_ERR_INVALID_ARG, "stats count");
        kvq_wmat *q2 = NULL;
        CHECK_OK(kvq_wmat_for_codes(&q2, rows, cols, sc->spec, B, 7, st, ns, err, sizeof err));
        if (q2) {
            CHECK(q2->codes == NULL && kvq_wmat_code_bytes(q2) == kvq_wmat_code_bytes(q), "for_codes: no codes yet");
            CHECK(kvq_wmat_set_codes(q2, q->codes, kvq_wmat_code_bytes(q) + 1, err, sizeof err) == KVQ_ERR_FORMAT,
                  "long codes");
            CHECK_OK(kvq_wmat_set_codes(q2, q->codes, kvq_wmat_code_bytes(q), err, sizeof err));
            float *y2 = malloc(sizeof(float) * (size_t)(ntok * rows + cols)), *st2 = malloc(sizeof(float) * ns);
            CHECK_OK(kvq_wmat_matmul(q2, pool, NULL, x, ntok, y2, rows));
            CHECK(!memcmp(y2, y, sizeof(float) * (size_t)(ntok * rows)), "%s: plans from stats give other products",
                  sc->spec);
            CHECK_OK(kvq_wmat_row(q2, rows - 1, y2));
            CHECK_OK(kvq_wmat_row(q, rows - 1, row));
            CHECK(!memcmp(y2, row, sizeof(float) * (size_t)cols), "%s: plans from stats decode otherwise", sc->spec);
            CHECK_OK(kvq_wmat_stats(q2, st2, ns));
            CHECK(!memcmp(st, st2, sizeof(float) * ns), "%s: stats of the rebuilt plans differ", sc->spec);
            free(y2);
            free(st2);
            kvq_wmat_free(q2);
            q2 = NULL;
        }
        /* the 16-bit stats (format version 3): what kvq_wmat_stats gives, rounded; the plans rebuilt from them
         * give the same products */
        CHECK(q->stats16 == 1, "%s: coded here, the stats are f16 values", sc->spec);
        size_t n16 = kvq_wmat_stored16(q), st16 = kvq_wmat_stored_per(sc->spec, B);
        CHECK(n16 == st16 * (size_t)q->nb && st16 == (per == 3 * (size_t)B ? 2 * (size_t)B : per),
              "%s: %zu stored values", sc->spec, n16);
        CHECK(kvq_wmat_stats_bytes(q) == 2 * n16, "%s: stats bytes", sc->spec);
        uint16_t *h = malloc(sizeof(uint16_t) * n16);
        CHECK_OK(kvq_wmat_stats16(q, h, n16));
        CHECK(kvq_wmat_stats16(q, h, n16 + 1) == KVQ_ERR_INVALID_ARG, "stats16 count");
        for (int b = 0; b < q->nb; b++)
            for (size_t k = 0; k < st16; k++)
                CHECK(kvq_f16_to_f32(h[(size_t)b * st16 + k]) == st[(size_t)b * per + k], "%s: stat %d/%zu not f16",
                      sc->spec, b, k);
        kvq_wmat *q3 = NULL;
        CHECK_OK(kvq_wmat_for_codes16(&q3, rows, cols, sc->spec, B, 7, h, n16, err, sizeof err));
        if (q3) {
            CHECK_OK(kvq_wmat_set_codes(q3, q->codes, kvq_wmat_code_bytes(q), err, sizeof err));
            float *y3 = malloc(sizeof(float) * (size_t)(ntok * rows));
            CHECK_OK(kvq_wmat_matmul(q3, pool, NULL, x, ntok, y3, rows));
            CHECK(!memcmp(y3, y, sizeof(float) * (size_t)(ntok * rows)), "%s: plans from 16-bit stats differ",
                  sc->spec);
            CHECK(q3->stats16 == 1 && kvq_wmat_stats_bytes(q3) == 2 * n16, "%s: 16-bit stats read", sc->spec);
            free(y3);
            kvq_wmat_free(q3);
        }
        kvq_wmat *k16 = q;
        CHECK(kvq_wmat_for_codes16(&q, rows, cols, sc->spec, B, 7, h, n16 - 1, err, sizeof err) == KVQ_ERR_INVALID_ARG &&
                  q == k16, "%s: 16-bit stats count", sc->spec);
        CHECK(kvq_wmat_for_codes16(&q, rows, cols, "tq-mse:4", B, 7, h, n16, err, sizeof err) == KVQ_ERR_INVALID_ARG &&
                  q == k16, "16-bit stats for a plain spec");
        uint16_t h0 = h[0];
        h[0] = 0x7c00; /* +inf */
        CHECK(kvq_wmat_for_codes16(&q, rows, cols, sc->spec, B, 7, h, n16, err, sizeof err) == KVQ_ERR_NONFINITE &&
                  q == k16, "%s: Inf in 16-bit stats: %s", sc->spec, err);
        h[0] = h0;
        free(h);
        /* version-2 stats (f32): counted 4 bytes each */
        if (q2 == NULL) CHECK_OK(kvq_wmat_for_codes(&q2, rows, cols, sc->spec, B, 7, st, ns, err, sizeof err));
        if (q2) {
            CHECK(q2->stats16 == 0 && kvq_wmat_stats_bytes(q2) == 4 * ns, "%s: f32 stats bytes", sc->spec);
            uint16_t *h2 = malloc(sizeof(uint16_t) * n16);
            CHECK(kvq_wmat_stats16(q2, h2, n16) == KVQ_ERR_STATE, "%s: f32 stats have no 16-bit form", sc->spec);
            free(h2);
            kvq_wmat_free(q2);
        }
        /* hostile stats: refused, the block position named, *out untouched */
        kvq_wmat *keep = q;
        CHECK(kvq_wmat_for_codes(&q, rows, cols, sc->spec, B, 7, st, ns - 1, err, sizeof err) == KVQ_ERR_INVALID_ARG &&
                  q == keep, "%s: stats count", sc->spec);
        CHECK(kvq_wmat_for_codes(&q, rows, cols, sc->spec, B, 7, NULL, 0, err, sizeof err) ==
                  KVQ_ERR_NEEDS_CALIBRATION && q == keep, "%s: no stats", sc->spec);
        size_t at = ns - 1;
        float saved = st[at];
        st[at] = NAN;
        CHECK(kvq_wmat_for_codes(&q, rows, cols, sc->spec, B, 7, st, ns, err, sizeof err) == KVQ_ERR_NONFINITE &&
                  q == keep && strstr(err, "block position") != NULL, "%s: NaN stats: %s", sc->spec, err);
        st[at] = 1e31f; /* a mean beyond 2^100 (+center), an inverse scale (+chscale), an outlier channel
                         * (+outliers) no calibration gives */
        CHECK(kvq_wmat_for_codes(&q, rows, cols, sc->spec, B, 7, st, ns, err, sizeof err) == KVQ_ERR_RANGE && q == keep,
              "%s: out-of-range stats: %s", sc->spec, err);
        st[at] = saved;
        CHECK(kvq_wmat_set_codes(q, q->codes, kvq_wmat_code_bytes(q), err, sizeof err) == KVQ_ERR_STATE,
              "owned codes are not replaced");
        free(st);
        free(ref);
        free(blk);
    } else {
        kvq_wmat *q2 = NULL;
        CHECK_OK(kvq_wmat_from_codes(&q2, rows, cols, sc->spec, B, 7, q->codes, kvq_wmat_code_bytes(q), err, sizeof err));
        if (q2) {
            float *y2 = malloc(sizeof(float) * (size_t)(ntok * rows));
            CHECK_OK(kvq_wmat_matmul(q2, pool, NULL, x, ntok, y2, rows));
            CHECK(!memcmp(y2, y, sizeof(float) * (size_t)(ntok * rows)), "%s: from_codes differs", sc->spec);
            free(y2);
            kvq_wmat_free(q2);
        }
        CHECK(kvq_wmat_from_codes(&q2, rows, cols, sc->spec, B, 7, q->codes, kvq_wmat_code_bytes(q) - 1, err,
                                  sizeof err) == KVQ_ERR_FORMAT, "short codes");
    }
    free(y1);
    free(x);
    free(y);
    free(yr);
    free(row);
    free(w);
    kvq_wmat_free(q);
}

static void bad_inputs(void) {
    tu_rng r = {11};
    char err[256], spec[64];
    int block = -1;
    CHECK_OK(kvq_wmat_parse_spec("tq-mse:4@128", spec, sizeof spec, &block, err, sizeof err));
    CHECK(!strcmp(spec, "tq-mse:4") && block == 128, "parse %s %d", spec, block);
    CHECK_OK(kvq_wmat_parse_spec("q8", spec, sizeof spec, &block, err, sizeof err));
    CHECK(!strcmp(spec, "q8") && block == 0, "parse q8");
    const char *bad[] = {"tq-mse:4@", "tq-mse:4@12", "tq-mse:4@100", "tq-mse:4@64x", "@64", "tq-mse:4@1024"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(kvq_wmat_parse_spec(bad[i], spec, sizeof spec, &block, err, sizeof err) == KVQ_ERR_INVALID_ARG, "%s", bad[i]);
    CHECK(kvq_wmat_default_block(576) == 64 && kvq_wmat_default_block(640) == 128 && kvq_wmat_default_block(1536) == 256 &&
              kvq_wmat_default_block(100) == 0 && kvq_wmat_default_block(48) == 0,
          "default blocks");

    float *w = gauss_matrix(&r, 8, 96);
    kvq_ggml_matrix src = f32_matrix(w, 8, 96);
    kvq_wmat *q = NULL;
    CHECK(kvq_wmat_create(&q, &src, "tq-mse:4", 64, 1, NULL, err, sizeof err) == KVQ_ERR_INVALID_ARG && !q, "64 !| 96");
    CHECK(kvq_wmat_create(&q, &src, "qjl", 0, 1, NULL, err, sizeof err) == KVQ_ERR_NO_DECODE && !q, "key-only: %s", err);
    CHECK(kvq_wmat_create(&q, &src, "nosuch:4", 0, 1, NULL, err, sizeof err) != KVQ_OK && !q, "bad spec");
    kvq_ggml_matrix odd = f32_matrix(w, 8, 100);
    CHECK(kvq_wmat_create(&q, &odd, "tq-mse:4", 0, 1, NULL, err, sizeof err) == KVQ_ERR_INVALID_ARG && !q, "cols 100");
    w[5] = NAN;
    CHECK(kvq_wmat_create(&q, &src, "tq-mse:4", 0, 1, NULL, err, sizeof err) == KVQ_ERR_NONFINITE && !q, "NaN weight: %s", err);
    w[5] = 0.0f;
    CHECK_OK(kvq_wmat_create(&q, &src, "tq-mse:4", 0, 1, NULL, err, sizeof err));
    float x[96], y[8];
    for (int i = 0; i < 96; i++) x[i] = 1.0f;
    CHECK(kvq_wmat_matmul(q, NULL, NULL, x, 1, y, 7) == KVQ_ERR_INVALID_ARG, "ldy < rows");
    CHECK(kvq_wmat_matmul(q, NULL, NULL, x, 0, y, 8) == KVQ_ERR_INVALID_ARG, "ntok 0");
    x[40] = INFINITY;
    CHECK(kvq_wmat_matmul(q, NULL, NULL, x, 1, y, 8) == KVQ_ERR_NONFINITE, "Inf activation");
    float st[3 * 32 * 3] = {0};
    kvq_wmat *q0 = q;
    CHECK(kvq_wmat_for_codes(&q, 8, 96, "tq-mse:4", 32, 1, st, 96, err, sizeof err) == KVQ_ERR_INVALID_ARG && q == q0,
          "stats for a plain spec");
    CHECK(kvq_wmat_for_codes(&q, 8, 96, "tq-mse:4+chscale", 32, 1, NULL, 5, err, sizeof err) == KVQ_ERR_NULL && q == q0,
          "NULL stats");
    CHECK(kvq_wmat_row(q, 8, y) == KVQ_ERR_INVALID_ARG && kvq_wmat_row(q, -1, y) == KVQ_ERR_INVALID_ARG, "row range");
    CHECK(kvq_wmat_from_codes(&q, 8, 96, "tq-mse:4+chscale", 32, 1, w, 100, err, sizeof err) == KVQ_ERR_NEEDS_CALIBRATION,
          "calibrated from codes");
    kvq_wmat_free(q);
    free(w);
}

int main(void) {
    tu_rng r = {1234};
    kvq_pool *pool = NULL;
    CHECK_OK(kvq_pool_create(&pool, 3));
    const int64_t shapes[][3] = {{5, 64, 0}, {37, 192, 0}, {130, 576, 0}, {70, 1536, 0}, {33, 640, 64}, {300, 256, 128}};
    for (size_t s = 0; s < sizeof SPECS / sizeof *SPECS; s++)
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
            one_case(&SPECS[s], shapes[k][0], shapes[k][1], (int)shapes[k][2], pool, &r);
    bad_inputs();
    kvq_pool_free(pool);
    return tu_finish("test_wmat");
}
