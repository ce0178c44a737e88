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

/* Shape checks and the plans; calib (when the spec needs it) gives block b's
 * rows through calib_fn. */
typedef int (*calib_fn)(void *user, int b, float **rows, size_t *n);

static int wmat_init(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                     calib_fn cal, void *cal_user, char *err, size_t cap) {
    if (!out || !spec) return KVQ_ERR_NULL;
    *out = NULL;
    if (rows < 1 || cols < 1) return fail(err, cap, KVQ_ERR_INVALID_ARG, "empty matrix (%lld x %lld)", (long long)rows, (long long)cols);
    if (!block) block = kvq_wmat_default_block(cols);
    if (block < KVQ_DIM_MIN || block > KVQ_DIM_MAX || block % 8 || cols % block)
        return fail(err, cap, KVQ_ERR_INVALID_ARG,
                    "rows of %lld values cannot be cut into blocks of %d (a multiple of 8 in [%d, %d] dividing the row)",
                    (long long)cols, block, KVQ_DIM_MIN, KVQ_DIM_MAX);
    int needs = 0;
    int rc = kvq_spec_needs_calibration(spec, &needs);
    if (rc) return fail(err, cap, rc, "weight spec '%s': %s", spec, kvq_strerror(rc));
    if (needs && !cal)
        return fail(err, cap, KVQ_ERR_NEEDS_CALIBRATION, "weight spec '%s' is calibrated: it needs the source weights", spec);
    kvq_wmat *w = calloc(1, sizeof *w);
    if (!w) return KVQ_ERR_NOMEM;
    w->rows = rows;
    w->cols = cols;
    w->block = block;
    w->nb = (int)(cols / block);
    w->nplans = needs ? w->nb : 1;
    w->plans = calloc((size_t)w->nplans, sizeof *w->plans);
    if (!w->plans) { kvq_wmat_free(w); return KVQ_ERR_NOMEM; }
    for (int i = 0; i < w->nplans; i++) {
        float *crow = NULL;
        size_t nc = 0;
        if (needs && (rc = cal(cal_user, i, &crow, &nc))) { kvq_wmat_free(w); return fail(err, cap, rc, "calibration rows: %s", kvq_strerror(rc)); }
        rc = kvq_plan_create(&w->plans[i], spec, block, seed, crow, nc);
        free(crow);
        if (rc) {
            kvq_wmat_free(w);
            return fail(err, cap, rc, "weight spec '%s' at block %d: %s", spec, block, kvq_strerror(rc));
        }
    }
    if (!kvq_plan_can_decode(w->plans[0])) {
        kvq_wmat_free(w);
        return fail(err, cap, KVQ_ERR_NO_DECODE, "weight spec '%s' is key-only (it cannot reconstruct weights)", spec);
    }
    w->code_bytes = kvq_plan_code_bytes(w->plans[0]);
    w->qfloats = kvq_plan_query_floats(w->plans[0]);
    size_t n = (size_t)w->nb * (size_t)rows;
    if (n > SIZE_MAX / w->code_bytes) { kvq_wmat_free(w); return fail(err, cap, KVQ_ERR_OVERFLOW, "matrix too large"); }
    if (cal) { /* coded here: the codes are ours */
        w->owned = malloc(n * w->code_bytes);
        if (!w->owned) { kvq_wmat_free(w); return fail(err, cap, KVQ_ERR_NOMEM, "out of memory for %zu bytes of codes", n * w->code_bytes); }
        w->codes = w->owned;
    }
    *out = w;
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

/* Calibration rows of block b: up to CALIB_ROWS_MAX rows spread evenly. */
typedef struct { const kvq_ggml_matrix *src; int block; } calib_src;

static int calib_rows(void *user, int b, float **rows, size_t *n) {
    const calib_src *c = user;
    int64_t R = c->src->rows, take = R < CALIB_ROWS_MAX ? R : CALIB_ROWS_MAX;
    float *full = malloc(sizeof(float) * (size_t)c->src->cols);
    float *out = malloc(sizeof(float) * (size_t)take * (size_t)c->block);
    if (!full || !out) { free(full); free(out); return KVQ_ERR_NOMEM; }
    for (int64_t i = 0; i < take; i++) {
        int64_t r = i * R / take;
        int rc = dequant_rows(c->src, r, 1, full);
        if (rc) { free(full); free(out); return rc; }
        memcpy(out + (size_t)i * (size_t)c->block, full + (size_t)b * (size_t)c->block, sizeof(float) * (size_t)c->block);
    }
    free(full);
    *rows = out;
    *n = (size_t)take;
    return KVQ_OK;
}

int kvq_wmat_create(kvq_wmat **out, const kvq_ggml_matrix *src, const char *spec, int block, uint64_t seed,
                    kvq_pool *pool, char *err, size_t cap) {
    if (!out || !src || !spec || !src->data) return KVQ_ERR_NULL;
    if (!kvq_ggml_type_supported(src->type))
        return fail(err, cap, KVQ_ERR_UNSUPPORTED, "source weights of ggml type %d cannot be read", (int)src->type);
    if (!block) block = kvq_wmat_default_block(src->cols);
    calib_src cs = {src, block};
    kvq_wmat *w = NULL;
    int rc = wmat_init(&w, src->rows, src->cols, spec, block, seed, calib_rows, &cs, err, cap);
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

int kvq_wmat_from_codes(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                        const void *codes, size_t n_bytes, char *err, size_t cap) {
    if (!out || !spec || !codes) return KVQ_ERR_NULL;
    kvq_wmat *w = NULL;
    int rc = wmat_init(&w, rows, cols, spec, block, seed, NULL, NULL, err, cap);
    if (rc) return rc;
    if (n_bytes != kvq_wmat_code_bytes(w)) {
        size_t want = kvq_wmat_code_bytes(w);
        kvq_wmat_free(w);
        return fail(err, cap, KVQ_ERR_FORMAT, "%zu bytes of codes, %s at %lld x %lld (block %d) needs %zu", n_bytes, spec,
                    (long long)rows, (long long)cols, block, want);
    }
    w->codes = codes;
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

int kvq_wmat_matmul(const kvq_wmat *w, kvq_pool *pool, const float *X, int64_t ntok, float *Y, int64_t ldy) {
    if (!w || !X || !Y) return KVQ_ERR_NULL;
    if (ntok < 1 || ldy < w->rows) return KVQ_ERR_INVALID_ARG;
    int nth = kvq_pool_size(pool);
    /* about 4 tasks per thread, within [SCORE_ROWS_MIN, SCORE_ROWS_MAX] rows */
    int64_t per = (w->rows + 4 * nth - 1) / (4 * nth);
    if (per < SCORE_ROWS_MIN) per = SCORE_ROWS_MIN;
    if (per > SCORE_ROWS_MAX) per = SCORE_ROWS_MAX;
    if ((uint64_t)ntok > SIZE_MAX / 4 / ((size_t)w->nb * w->qfloats * sizeof(float))) return KVQ_ERR_OVERFLOW;
    mm_job j = {.w = w, .X = X, .ntok = ntok, .Y = Y, .ldy = ldy, .rows_per_task = per};
    atomic_init(&j.rc, KVQ_OK);
    j.qp = malloc(sizeof(float) * (size_t)w->nb * (size_t)ntok * w->qfloats);
    j.tmp = malloc(sizeof(float) * (size_t)nth * (size_t)ntok * (size_t)per);
    int rc = (!j.qp || !j.tmp) ? KVQ_ERR_NOMEM : KVQ_OK;
    if (!rc) rc = kvq_pool_run(pool, prep_task, &j, (int)ntok);
    if (!rc) rc = atomic_load(&j.rc);
    if (!rc) rc = kvq_pool_run(pool, score_task, &j, (int)((w->rows + per - 1) / per));
    free(j.qp);
    free(j.tmp);
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
