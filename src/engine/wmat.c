/*
 * Weight matrices on kvq codes: coding (dequantize -> encode per block),
 * decoding a row, and the product with a batch of activations on the codes
 * (wmat.h).
 */
#include "wmat.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errfmt.h"

#define fail kvq_errf

/* Rows per coding / scoring task. */
#define CODE_ROWS 64
#define SCORE_ROWS_MIN 32
#define SCORE_ROWS_MAX 256
/* Calibration rows at most (spread evenly over the matrix). */
#define CALIB_ROWS_MAX 8192

int kvq_wmat_default_block(int64_t cols) {
    for (int b = 256; b >= KVQ_DIM_MIN; b /= 2)
        if (cols % b == 0) return b;
    return 0;
}

int kvq_wmat_parse_spec(const char *s, char *spec, size_t cap, int *block, char *err, size_t err_cap) {
    if (!s || !spec || !block) return KVQ_ERR_NULL;
    const char *at = strchr(s, '@');
    size_t n = at ? (size_t)(at - s) : strlen(s);
    if (n == 0) return fail(err, err_cap, KVQ_ERR_INVALID_ARG, "weight spec '%s': no method before '@'", s);
    if (n >= cap) return fail(err, err_cap, KVQ_ERR_INVALID_ARG, "weight spec '%s' is too long", s);
    memcpy(spec, s, n);
    spec[n] = 0;
    *block = 0;
    if (at) {
        char *end = NULL;
        long b = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end || b < KVQ_DIM_MIN || b > KVQ_DIM_MAX || b % 8)
            return fail(err, err_cap, KVQ_ERR_INVALID_ARG,
                        "weight spec '%s': block after '@' must be a multiple of 8 in [%d, %d]", s, KVQ_DIM_MIN,
                        KVQ_DIM_MAX);
        *block = (int)b;
    }
    return KVQ_OK;
}

static const kvq_plan *plan_of(const kvq_wmat *w, int b) { return w->plans[w->nplans == 1 ? 0 : b]; }

void kvq_wmat_free(kvq_wmat *w) {
    if (!w) return;
    if (w->plans)
        for (int i = 0; i < w->nplans; i++) kvq_plan_free(w->plans[i]);
    free(w->plans);
    free(w->owned);
    free(w);
}

size_t kvq_wmat_code_bytes(const kvq_wmat *w) { return w ? (size_t)w->nb * (size_t)w->rows * w->code_bytes : 0; }

double kvq_wmat_bits(const kvq_wmat *w) { return w ? (double)w->code_bytes * 8.0 / (double)w->block : 0.0; }

/* Where a calibrated spec's plans come from: sample rows of the matrix (n x
 * cols, coding) or the plans' stats (nb x stats floats, a saved file). */
typedef struct {
    const float *sample;
    size_t n_sample;
    const float *stats;
    size_t n_stats;
    int stats16;          /* the stats are f16 values (kvq_wmat_for_codes16) */
} plan_src;

/* ---- 16-bit stats (wmat.h) ------------------------------------------------ */
/* +chscale's plan stats are 3B floats (means, scales a, inverses 1 / a: kvq.h); 16-bit storage drops the
 * inverses. +center (B means) and +outliers=K (K channels < 512, exact in f16) store all. */
static size_t stored_of(size_t per, int B) { return per == 3 * (size_t)B ? 2 * (size_t)B : per; }

size_t kvq_wmat_stored_per(const char *spec, int block) {
    size_t per = 0;
    if (!spec || kvq_spec_stats_floats(spec, block, &per)) return 0;
    return stored_of(per, block);
}

/* One plan's stats (per floats) from its stored f16 values: +chscale's inverses as the float of 1 / a
 * (a 0 gives 0: refused by the plan with the scale, KVQ_ERR_RANGE). */
static void expand16(const uint16_t *in, size_t per, int B, float *out) {
    const size_t ns = stored_of(per, B);
    for (size_t k = 0; k < ns; k++) out[k] = kvq_f16_to_f32(in[k]);
    if (ns == per) return;
    for (int c = 0; c < B; c++) {
        const double a = out[B + c];
        out[2 * B + c] = a != 0.0 ? (float)(1.0 / a) : 0.0f;
    }
}

/* A fitted plan (*p) replaced by the plan of its stats rounded to f16 (what a file stores), sharing its inner
 * plan; KVQ_ERR_RANGE for a stat beyond f16 (|mean| > 65504). */
static int plan_round16(kvq_plan **p, size_t per, int B) {
    float st[3 * KVQ_DIM_MAX];
    uint16_t h[3 * KVQ_DIM_MAX];
    int rc = kvq_plan_stats(*p, st, per);
    const size_t ns = stored_of(per, B);
    for (size_t k = 0; !rc && k < ns; k++) {
        h[k] = kvq_f32_to_f16(st[k]);
        if (!isfinite(kvq_f16_to_f32(h[k]))) rc = KVQ_ERR_RANGE;
    }
    kvq_plan *q = NULL;
    if (!rc) {
        expand16(h, per, B, st);
        rc = kvq_plan_create_like_from_stats(&q, *p, st, per);
    }
    kvq_plan_free(*p);
    *p = q;
    return rc;
}

/* Plan creation. Calibrated specs: plan 0 is built in full (its inner plan:
 * rotation, codebook — a tq-mse:4 codebook solve is ~4 ms at B = 64), then
 * the other block positions over the pool, one task each, sharing plan 0's
 * inner plan (kvq_plan_create_like: only the calibration runs, the same
 * plans bit for bit as kvq_plan_create would give). */
typedef struct {
    kvq_wmat *w;
    const char *spec;
    uint64_t seed;
    const plan_src *ps;
    size_t per;           /* stats floats per plan */
    int *rcs;             /* (nplans) each plan's result */
} plan_job;

static void plan_task(void *arg, int i, int thread) {
    (void)thread;
    plan_job *j = arg;
    kvq_wmat *w = j->w;
    const plan_src *ps = j->ps;
    const size_t B = (size_t)w->block;
    const kvq_plan *like = i ? w->plans[0] : NULL; /* plan 0 is built before the others */
    int rc;
    if (w->calibrated && ps->stats) {
        const float *st = ps->stats + (size_t)i * j->per;
        rc = like ? kvq_plan_create_like_from_stats(&w->plans[i], like, st, j->per)
                  : kvq_plan_create_from_stats(&w->plans[i], j->spec, w->block, j->seed, st, j->per);
    } else if (w->calibrated) { /* block i of the sample rows */
        float *blk = malloc(sizeof(float) * ps->n_sample * B);
        if (!blk) rc = KVQ_ERR_NOMEM;
        else {
            for (size_t r = 0; r < ps->n_sample; r++)
                memcpy(blk + r * B, ps->sample + r * (size_t)w->cols + (size_t)i * B, sizeof(float) * B);
            rc = like ? kvq_plan_create_like(&w->plans[i], like, blk, ps->n_sample)
                      : kvq_plan_create(&w->plans[i], j->spec, w->block, j->seed, blk, ps->n_sample);
            free(blk);
            if (!rc) rc = plan_round16(&w->plans[i], j->per, w->block);
        }
    } else {
        rc = kvq_plan_create(&w->plans[i], j->spec, w->block, j->seed, NULL, 0);
    }
    j->rcs[i] = rc;
}

/* plan_task 1..nplans-1 (plan 0 is task 0, run first) */
static void plan_task_rest(void *arg, int i, int thread) { plan_task(arg, i + 1, thread); }

/* Shape checks and the plans (one per block position for calibrated specs,
 * built over pool); own: allocate the codes. *out is written on success only. */
static int wmat_init(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                     const plan_src *ps, int own, kvq_pool *pool, char *err, size_t cap) {
    if (!out || !spec) return KVQ_ERR_NULL;
    if (rows < 1 || cols < 1) return fail(err, cap, KVQ_ERR_INVALID_ARG, "empty matrix (%lld x %lld)", (long long)rows, (long long)cols);
    if (!block) block = kvq_wmat_default_block(cols);
    if (block < KVQ_DIM_MIN || block > KVQ_DIM_MAX || block % 8 || cols % block)
        return fail(err, cap, KVQ_ERR_INVALID_ARG,
                    "rows of %lld values cannot be cut into blocks of %d (a multiple of 8 in [%d, %d] dividing the row)",
                    (long long)cols, block, KVQ_DIM_MIN, KVQ_DIM_MAX);
    int needs = 0;
    size_t per = 0; /* stats floats per block position */
    int rc = kvq_spec_needs_calibration(spec, &needs);
    if (!rc) rc = kvq_spec_stats_floats(spec, block, &per);
    if (rc) return fail(err, cap, rc, "weight spec '%s': %s", spec, kvq_strerror(rc));
    const int nb = (int)(cols / block);
    if (needs && !ps->sample && !ps->stats)
        return fail(err, cap, KVQ_ERR_NEEDS_CALIBRATION,
                    "weight spec '%s' is calibrated: it needs the source weights or the plans' stats", spec);
    if (ps->stats && (size_t)nb * per != ps->n_stats)
        return fail(err, cap, KVQ_ERR_INVALID_ARG, "%zu stats floats; '%s' in %d blocks of %d needs %d x %zu", ps->n_stats,
                    spec, nb, block, nb, per);
    kvq_wmat *w = calloc(1, sizeof *w);
    if (!w) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    w->rows = rows;
    w->cols = cols;
    w->block = block;
    w->nb = nb;
    w->calibrated = needs;
    w->stats16 = needs && (ps->sample || ps->stats16);
    w->nplans = needs ? nb : 1;
    w->plans = calloc((size_t)w->nplans, sizeof *w->plans);
    plan_job j = {.w = w, .spec = spec, .seed = seed, .ps = ps, .per = per};
    j.rcs = calloc((size_t)w->nplans, sizeof *j.rcs);
    if (!w->plans || !j.rcs) { free(j.rcs); kvq_wmat_free(w); return fail(err, cap, KVQ_ERR_NOMEM, "out of memory"); }
    plan_task(&j, 0, 0);
    rc = j.rcs[0] || w->nplans == 1 ? KVQ_OK : kvq_pool_run(pool, plan_task_rest, &j, w->nplans - 1);
    int bad = -1;
    for (int i = 0; !rc && i < w->nplans && bad < 0; i++)
        if (j.rcs[i]) bad = i, rc = j.rcs[i];
    free(j.rcs);
    if (rc) {
        kvq_wmat_free(w);
        if (bad < 0) return fail(err, cap, rc, "building the plans: %s", kvq_strerror(rc));
        if (needs && ps->stats)
            return fail(err, cap, rc, "the stats of block position %d (values %zu..%zu): %s", bad, (size_t)bad * per,
                        (size_t)(bad + 1) * per - 1, kvq_strerror(rc));
        return fail(err, cap, rc, "weight spec '%s' at block %d: %s", spec, block, kvq_strerror(rc));
    }
    if (!kvq_plan_can_decode(w->plans[0])) {
        kvq_wmat_free(w);
        return fail(err, cap, KVQ_ERR_NO_DECODE, "weight spec '%s' is key-only (it cannot reconstruct weights)", spec);
    }
    w->code_bytes = kvq_plan_code_bytes(w->plans[0]);
    w->qfloats = kvq_plan_query_floats(w->plans[0]);
    size_t n = (size_t)w->nb * (size_t)rows;
    if (n > SIZE_MAX / w->code_bytes) { kvq_wmat_free(w); return fail(err, cap, KVQ_ERR_OVERFLOW, "matrix too large"); }
    if (own) { /* coded here: the codes are ours */
        w->owned = malloc(n * w->code_bytes);
        if (!w->owned) { kvq_wmat_free(w); return fail(err, cap, KVQ_ERR_NOMEM, "out of memory for %zu bytes of codes", n * w->code_bytes); }
        w->codes = w->owned;
    }
    *out = w;
    return KVQ_OK;
}

size_t kvq_wmat_stats_floats(const kvq_wmat *w) {
    return w && w->calibrated ? (size_t)w->nb * kvq_plan_stats_floats(w->plans[0]) : 0;
}

int kvq_wmat_stats(const kvq_wmat *w, float *out, size_t n) {
    if (!w || (!out && n)) return KVQ_ERR_NULL;
    if (n != kvq_wmat_stats_floats(w)) return KVQ_ERR_INVALID_ARG;
    if (!n) return KVQ_OK;
    const size_t per = n / (size_t)w->nb;
    for (int b = 0; b < w->nb; b++) {
        int rc = kvq_plan_stats(w->plans[b], out + (size_t)b * per, per);
        if (rc) return rc;
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Coding                                                                   */
/* ------------------------------------------------------------------------ */
typedef struct {
    const kvq_ggml_matrix *src;
    kvq_wmat *w;
    atomic_int rc;          /* first error */
    atomic_llong bad_row;   /* first row of the task that failed */
} code_job;

static int dequant_rows(const kvq_ggml_matrix *src, int64_t r0, int64_t nr, float *dst) {
    for (int64_t i = 0; i < nr; i++) {
        int rc = kvq_ggml_dequant_row(src->type, (const uint8_t *)src->data + (size_t)(r0 + i) * src->row_bytes,
                                      dst + (size_t)i * (size_t)src->cols, src->cols);
        if (rc) return rc;
    }
    return KVQ_OK;
}

static void code_task(void *arg, int task, int thread) {
    (void)thread;
    code_job *j = arg;
    kvq_wmat *w = j->w;
    int64_t r0 = (int64_t)task * CODE_ROWS, nr = w->rows - r0 < CODE_ROWS ? w->rows - r0 : CODE_ROWS;
    size_t B = (size_t)w->block;
    float *full = malloc(sizeof(float) * (size_t)nr * (size_t)w->cols);
    float *blk = malloc(sizeof(float) * (size_t)nr * B);
    int rc = (!full || !blk) ? KVQ_ERR_NOMEM : dequant_rows(j->src, r0, nr, full);
    for (int b = 0; !rc && b < w->nb; b++) {
        for (int64_t i = 0; i < nr; i++) memcpy(blk + (size_t)i * B, full + (size_t)i * (size_t)w->cols + (size_t)b * B, sizeof(float) * B);
        rc = kvq_encode(plan_of(w, b), blk, KVQ_DTYPE_F32, (size_t)nr, w->owned + ((size_t)b * (size_t)w->rows + (size_t)r0) * w->code_bytes);
    }
    free(full);
    free(blk);
    int zero = 0;
    if (rc && atomic_compare_exchange_strong(&j->rc, &zero, rc)) atomic_store(&j->bad_row, (long long)r0);
}

/* The calibration sample: up to CALIB_ROWS_MAX rows spread evenly over the
 * matrix, dequantized once (every block position's plan is fitted on its
 * block of these rows). */
static int calib_sample(const kvq_ggml_matrix *src, float **rows, size_t *n) {
    int64_t R = src->rows, take = R < CALIB_ROWS_MAX ? R : CALIB_ROWS_MAX;
    float *out = malloc(sizeof(float) * (size_t)take * (size_t)src->cols);
    if (!out) return KVQ_ERR_NOMEM;
    for (int64_t i = 0; i < take; i++) {
        int rc = dequant_rows(src, i * R / take, 1, out + (size_t)i * (size_t)src->cols);
        if (rc) { free(out); return rc; }
    }
    *rows = out;
    *n = (size_t)take;
    return KVQ_OK;
}

int kvq_wmat_create(kvq_wmat **out, const kvq_ggml_matrix *src, const char *spec, int block, uint64_t seed,
                    kvq_pool *pool, char *err, size_t cap) {
    if (!out || !src || !spec || !src->data) return KVQ_ERR_NULL;
    if (!kvq_ggml_type_supported(src->type))
        return fail(err, cap, KVQ_ERR_UNSUPPORTED, "source weights of ggml type %d cannot be read", (int)src->type);
    int needs = 0;
    int rc = kvq_spec_needs_calibration(spec, &needs);
    if (rc) return fail(err, cap, rc, "weight spec '%s': %s", spec, kvq_strerror(rc));
    plan_src ps = {0};
    float *sample = NULL;
    if (needs && (rc = calib_sample(src, &sample, &ps.n_sample)))
        return fail(err, cap, rc, "calibration rows: %s", kvq_strerror(rc));
    ps.sample = sample;
    kvq_wmat *w = NULL;
    rc = wmat_init(&w, src->rows, src->cols, spec, block, seed, &ps, 1, pool, err, cap);
    free(sample);
    if (rc) return rc;
    code_job j = {.src = src, .w = w};
    atomic_init(&j.rc, KVQ_OK);
    atomic_init(&j.bad_row, 0);
    rc = kvq_pool_run(pool, code_task, &j, (int)((w->rows + CODE_ROWS - 1) / CODE_ROWS));
    if (!rc) rc = atomic_load(&j.rc);
    if (rc) {
        kvq_wmat_free(w);
        if (rc == KVQ_ERR_NONFINITE || rc == KVQ_ERR_RANGE)
            return fail(err, cap, rc, "rows %lld..%lld: %s", atomic_load(&j.bad_row), atomic_load(&j.bad_row) + CODE_ROWS - 1,
                        kvq_strerror(rc));
        return fail(err, cap, rc, "coding the weights: %s", kvq_strerror(rc));
    }
    *out = w;
    return KVQ_OK;
}

int kvq_wmat_for_codes(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                       const float *stats, size_t n_stats, char *err, size_t cap) {
    if (!out || !spec || (!stats && n_stats)) return KVQ_ERR_NULL;
    plan_src ps = {.stats = n_stats ? stats : NULL, .n_stats = n_stats};
    return wmat_init(out, rows, cols, spec, block, seed, &ps, 0, NULL, err, cap);
}

int kvq_wmat_for_codes16(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                         const uint16_t *stats16, size_t n16, char *err, size_t cap) {
    if (!out || !spec || !stats16) return KVQ_ERR_NULL;
    if (!block) block = kvq_wmat_default_block(cols);
    size_t per = 0, ns;
    if (cols < 1 || block < KVQ_DIM_MIN || block > KVQ_DIM_MAX || block % 8 || cols % block)
        return fail(err, cap, KVQ_ERR_INVALID_ARG, "rows of %lld values cannot be cut into blocks of %d",
                    (long long)cols, block);
    int rc = kvq_spec_stats_floats(spec, block, &per);
    if (rc) return fail(err, cap, rc, "weight spec '%s': %s", spec, kvq_strerror(rc));
    if (!per) return fail(err, cap, KVQ_ERR_INVALID_ARG, "16-bit stats given to '%s', which is not calibrated", spec);
    const size_t nb = (size_t)(cols / block), st16 = stored_of(per, block);
    if (n16 != nb * st16)
        return fail(err, cap, KVQ_ERR_INVALID_ARG, "%zu 16-bit stats; '%s' in %zu blocks of %d needs %zu x %zu", n16,
                    spec, nb, block, nb, st16);
    ns = nb * per;
    float *st = malloc(sizeof(float) * ns);
    if (!st) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    for (size_t b = 0; b < nb; b++) expand16(stats16 + b * st16, per, block, st + b * per);
    plan_src ps = {.stats = st, .n_stats = ns, .stats16 = 1};
    rc = wmat_init(out, rows, cols, spec, block, seed, &ps, 0, NULL, err, cap);
    free(st);
    return rc;
}

size_t kvq_wmat_stored16(const kvq_wmat *w) {
    return w && w->calibrated ? (size_t)w->nb * stored_of(kvq_plan_stats_floats(w->plans[0]), w->block) : 0;
}

int kvq_wmat_stats16(const kvq_wmat *w, uint16_t *out, size_t n) {
    if (!w || (!out && n)) return KVQ_ERR_NULL;
    if (n != kvq_wmat_stored16(w)) return KVQ_ERR_INVALID_ARG;
    if (!n) return KVQ_OK;
    if (!w->stats16) return KVQ_ERR_STATE;
    const size_t per = kvq_plan_stats_floats(w->plans[0]), st16 = n / (size_t)w->nb;
    float st[3 * KVQ_DIM_MAX];
    for (int b = 0; b < w->nb; b++) {
        int rc = kvq_plan_stats(w->plans[b], st, per);
        if (rc) return rc;
        for (size_t k = 0; k < st16; k++) out[(size_t)b * st16 + k] = kvq_f32_to_f16(st[k]); /* exact: f16 values */
    }
    return KVQ_OK;
}

size_t kvq_wmat_stats_bytes(const kvq_wmat *w) {
    if (!w || !w->calibrated) return 0;
    return w->stats16 ? 2 * kvq_wmat_stored16(w) : 4 * kvq_wmat_stats_floats(w);
}

int kvq_wmat_set_codes(kvq_wmat *w, const void *codes, size_t n_bytes, char *err, size_t cap) {
    if (!w || !codes) return KVQ_ERR_NULL;
    if (w->owned) return fail(err, cap, KVQ_ERR_STATE, "the matrix owns its codes");
    if (n_bytes != kvq_wmat_code_bytes(w))
        return fail(err, cap, KVQ_ERR_FORMAT, "%zu bytes of codes, %lld x %lld in blocks of %d needs %zu", n_bytes,
                    (long long)w->rows, (long long)w->cols, w->block, kvq_wmat_code_bytes(w));
    w->codes = codes;
    return KVQ_OK;
}

int kvq_wmat_from_codes(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                        const void *codes, size_t n_bytes, char *err, size_t cap) {
    if (!out || !spec || !codes) return KVQ_ERR_NULL;
    kvq_wmat *w = NULL;
    int rc = kvq_wmat_for_codes(&w, rows, cols, spec, block, seed, NULL, 0, err, cap);
    if (rc) return rc;
    if ((rc = kvq_wmat_set_codes(w, codes, n_bytes, err, cap))) {
        kvq_wmat_free(w);
        return rc; /* *out untouched */
    }
    *out = w;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Decoding, products                                                       */
/* ------------------------------------------------------------------------ */
int kvq_wmat_row(const kvq_wmat *w, int64_t r, float *out) {
    if (!w || !out) return KVQ_ERR_NULL;
    if (r < 0 || r >= w->rows) return KVQ_ERR_INVALID_ARG;
    for (int b = 0; b < w->nb; b++) {
        int rc = kvq_decode(plan_of(w, b), w->codes + ((size_t)b * (size_t)w->rows + (size_t)r) * w->code_bytes, 1,
                            out + (size_t)b * (size_t)w->block);
        if (rc) return rc;
    }
    return KVQ_OK;
}

typedef struct {
    const kvq_wmat *w;
    const float *X;
    int64_t ntok;
    float *qp;          /* (nb, ntok, qfloats) */
    float *Y;
    int64_t ldy;
    int64_t rows_per_task;
    float *tmp;         /* (threads, ntok * rows_per_task) */
    atomic_int rc;      /* a preparation error (NaN/Inf activations) */
} mm_job;

static void prep_task(void *arg, int task, int thread) {
    (void)thread;
    mm_job *j = arg;
    const kvq_wmat *w = j->w;
    int64_t t = task;
    for (int b = 0; b < w->nb; b++) {
        int rc = kvq_query_prepare(plan_of(w, b), j->X + (size_t)t * (size_t)w->cols + (size_t)b * (size_t)w->block,
                                   j->qp + ((size_t)b * (size_t)j->ntok + (size_t)t) * w->qfloats);
        if (rc) {
            atomic_store(&j->rc, rc);
            return;
        }
    }
}

static void score_task(void *arg, int task, int thread) {
    mm_job *j = arg;
    const kvq_wmat *w = j->w;
    int64_t r0 = (int64_t)task * j->rows_per_task;
    int64_t nr = w->rows - r0 < j->rows_per_task ? w->rows - r0 : j->rows_per_task;
    float *tmp = j->tmp + (size_t)thread * (size_t)j->ntok * (size_t)j->rows_per_task;
    for (int b = 0; b < w->nb; b++) {
        /* arguments are checked by the caller: kvq_score cannot fail here */
        (void)kvq_score(plan_of(w, b), j->qp + (size_t)b * (size_t)j->ntok * w->qfloats, (size_t)j->ntok,
                        w->codes + ((size_t)b * (size_t)w->rows + (size_t)r0) * w->code_bytes, (size_t)nr, tmp);
        for (int64_t t = 0; t < j->ntok; t++) {
            float *y = j->Y + (size_t)t * (size_t)j->ldy + (size_t)r0;
            const float *s = tmp + (size_t)t * (size_t)nr;
            if (b == 0) memcpy(y, s, sizeof(float) * (size_t)nr);
            else
                for (int64_t i = 0; i < nr; i++) y[i] += s[i];
        }
    }
}

void kvq_wmat_ws_free(kvq_wmat_ws *ws) {
    if (!ws) return;
    free(ws->qp);
    free(ws->tmp);
    ws->qp = ws->tmp = NULL;
    ws->qp_floats = ws->tmp_floats = 0;
}

/* *buf holds at least n floats (grown, never shrunk; contents not kept). */
static int ws_reserve(float **buf, size_t *have, size_t n) {
    if (*have >= n) return KVQ_OK;
    float *p = malloc(sizeof(float) * n);
    if (!p) return KVQ_ERR_NOMEM;
    free(*buf);
    *buf = p;
    *have = n;
    return KVQ_OK;
}

int kvq_wmat_matmul(const kvq_wmat *w, kvq_pool *pool, kvq_wmat_ws *ws, const float *X, int64_t ntok, float *Y,
                    int64_t ldy) {
    if (!w || !X || !Y) return KVQ_ERR_NULL;
    if (ntok < 1 || ldy < w->rows) return KVQ_ERR_INVALID_ARG;
    int nth = kvq_pool_size(pool);
    /* about 4 tasks per thread, within [SCORE_ROWS_MIN, SCORE_ROWS_MAX] rows */
    int64_t per = (w->rows + 4 * nth - 1) / (4 * nth);
    if (per < SCORE_ROWS_MIN) per = SCORE_ROWS_MIN;
    if (per > SCORE_ROWS_MAX) per = SCORE_ROWS_MAX;
    if ((uint64_t)ntok > SIZE_MAX / 4 / ((size_t)w->nb * w->qfloats * sizeof(float))) return KVQ_ERR_OVERFLOW;
    kvq_wmat_ws local = {0};
    if (!ws) ws = &local; /* no workspace given: one for this call */
    mm_job j = {.w = w, .X = X, .ntok = ntok, .Y = Y, .ldy = ldy, .rows_per_task = per};
    atomic_init(&j.rc, KVQ_OK);
    int rc = ws_reserve(&ws->qp, &ws->qp_floats, (size_t)w->nb * (size_t)ntok * w->qfloats);
    if (!rc) rc = ws_reserve(&ws->tmp, &ws->tmp_floats, (size_t)nth * (size_t)ntok * (size_t)per);
    j.qp = ws->qp;
    j.tmp = ws->tmp;
    if (!rc) rc = kvq_pool_run(pool, prep_task, &j, (int)ntok);
    if (!rc) rc = atomic_load(&j.rc);
    if (!rc) rc = kvq_pool_run(pool, score_task, &j, (int)((w->rows + per - 1) / per));
    kvq_wmat_ws_free(&local);
    return rc;
}

int kvq_wmat_matmul_ref(const kvq_wmat *w, const float *X, int64_t ntok, double *Y) {
    if (!w || !X || !Y) return KVQ_ERR_NULL;
    float *row = malloc(sizeof(float) * (size_t)w->cols);
    if (!row) return KVQ_ERR_NOMEM;
    for (int64_t r = 0; r < w->rows; r++) {
        int rc = kvq_wmat_row(w, r, row);
        if (rc) { free(row); return rc; }
        for (int64_t t = 0; t < ntok; t++) {
            double s = 0.0;
            for (int64_t c = 0; c < w->cols; c++) s += (double)row[c] * (double)X[(size_t)t * (size_t)w->cols + (size_t)c];
            Y[(size_t)t * (size_t)w->rows + (size_t)r] = s;
        }
    }
    free(row);
    return KVQ_OK;
}
