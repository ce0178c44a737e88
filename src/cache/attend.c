/*
 * Fused attention on the compressed cache (DESIGN.md §4).
 *
 * Rows: for KV head h, query token t and head g of its group of G query
 * heads, row t * G + g. Queries are scaled and prepared once per row (the
 * main plan's rotation / projection; the f16 plan needs none), then the
 * work is split into tasks (KV head, block of query tokens, context chunk):
 *   for each block of <= 256 cached tokens (a run of records of one page or
 *   of the f16 tail) that some row of the task may see:
 *     scores of all those rows from the codes (one kvq_score call, so each
 *     code is read once per group), causal / sliding-window mask,
 *     online softmax (running max m and sum l per row),
 *     values accumulated with the softmax weights (kvq_accumulate) in the
 *     rotated domain of the block's plan: one accumulator for the main store
 *     and one for f16 runs, both rescaled together.
 * A row's output is (R_v^T acc_main + acc_f16) / l: one inverse rotation per
 * row. Long contexts with few rows are split into chunks (split-K /
 * flash-decoding); each chunk keeps (m, l, acc) and a second pass merges
 * them exactly. The split depends only on the shapes, never on the number
 * of threads, so results are identical for any pool.
 * Prefill (nq > 1) runs the same code: the cache is tiled in blocks, never
 * decoded as a whole.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

typedef struct attn_job {
    const kvq_cache *c;
    const cache_layer *L;
    const float *q;
    float *out;
    size_t nq, pos0;
    int HQ, G, d;
    float scale;
    kvq_isa isa;
    size_t qt, nqb;         /* query tokens per task, number of query blocks */
    size_t nchunk, chunk0;  /* context chunks per (head, block) and where chunk 0 starts */
    size_t rmax;            /* rows per task at most */
    size_t qf;              /* floats of a row prepared for the main plan */
    int has_main;           /* main-store records are visible */
    float *qmain, *qf16;    /* split-K: prepared rows, head h, row r at (h * nq * G + r) */
    float *partial;         /* nchunk > 1: one state per task */
    float *scratch;         /* per thread: scores, a state, a row, prepared rows of a task */
    size_t state_floats, scratch_floats;
    atomic_int err;
} attn_job;

/* State of a task: m[rmax], l[rmax], accM[rmax * d], accF[rmax * d], used[2]. */
typedef struct { float *m, *l, *accM, *accF, *used; } attn_state;

static attn_state state_at(const attn_job *J, float *base) {
    attn_state s;
    s.m = base;
    s.l = base + J->rmax;
    s.accM = base + 2 * J->rmax;
    s.accF = s.accM + J->rmax * (size_t)J->d;
    s.used = s.accF + J->rmax * (size_t)J->d;
    return s;
}

static void state_init(const attn_job *J, attn_state *s, size_t rows) {
    for (size_t r = 0; r < rows; r++) {
        s->m[r] = -INFINITY;
        s->l[r] = 0;
    }
    memset(s->accM, 0, rows * (size_t)J->d * sizeof(float));
    memset(s->accF, 0, rows * (size_t)J->d * sizeof(float));
    s->used[0] = s->used[1] = 0;
}

/* First position a query at absolute position p may see. */
static size_t row_lo(const cache_layer *L, size_t p) {
    return L->sliding && p + 1 > (size_t)L->sliding ? p + 1 - (size_t)L->sliding : 0;
}

static void set_err(attn_job *J, int rc) {
    int z = 0;
    if (rc) atomic_compare_exchange_strong(&J->err, &z, rc);
}

/* ---- queries: scaled (f16 runs) and prepared for the main plan ------------ */
/* Rows of query tokens [t0, t1) of head h into qh (d floats each) and qm (qf each). */
static void prep_rows(attn_job *J, int h, size_t t0, size_t t1, float *qh, float *qm) {
    const int G = J->G, d = J->d;
    const kvq_plan *kp = J->has_main ? layer_kplan(J->L, h) : NULL;
    for (size_t t = t0; t < t1; t++) {
        for (int g = 0; g < G; g++) {
            size_t r = (t - t0) * G + g;
            const float *src = J->q + (t * J->HQ + (size_t)h * G + g) * d;
            float *dst = qh + r * d;
            for (int i = 0; i < d; i++) dst[i] = src[i] * J->scale;
            if (kp) set_err(J, kvq_query_prepare(kp, dst, qm + r * J->qf));
        }
    }
}

/* Split-K phase 1: rows of (head, query block) into the shared buffers, once. */
static void prep_task(void *arg, int task, int thread) {
    (void)thread;
    attn_job *J = arg;
    const int h = task / (int)J->nqb;
    const size_t t0 = (size_t)(task % (int)J->nqb) * J->qt, t1 = t0 + J->qt < J->nq ? t0 + J->qt : J->nq;
    const size_t r0 = ((size_t)h * J->nq + t0) * J->G;
    prep_rows(J, h, t0, t1, J->qf16 + r0 * J->d, J->qmain + r0 * J->qf);
}

/* ---- output of finished rows ------------------------------------------------ */
static void finish_rows(attn_job *J, const attn_state *s, int h, size_t t0, size_t rows, float *tmp) {
    const int d = J->d, G = J->G;
    const kvq_plan *vp = layer_vplan(J->L, h);
    for (size_t r = 0; r < rows; r++) {
        size_t t = t0 + r / G;
        int g = (int)(r % G);
        float *o = J->out + (t * J->HQ + (size_t)h * G + g) * d;
        float inv = s->l[r] > 0 ? 1.0f / s->l[r] : 0.0f;
        if (s->used[0]) set_err(J, kvq_unrotate(vp, s->accM + r * d, tmp));
        else memset(tmp, 0, (size_t)d * sizeof *tmp);
        if (s->used[1]) {
            const float *f = s->accF + r * d;
            for (int i = 0; i < d; i++) o[i] = (tmp[i] + f[i]) * inv;
        } else {
            for (int i = 0; i < d; i++) o[i] = tmp[i] * inv;
        }
    }
}

/* ---- phase 2: one (head, query block, chunk) ------------------------------- */
static void attn_task(void *arg, int task, int thread) {
    attn_job *J = arg;
    const cache_layer *L = J->L;
    const int G = J->G, d = J->d;
    const size_t ci = (size_t)task % J->nchunk, hb = (size_t)task / J->nchunk;
    const int h = (int)(hb / J->nqb);
    const size_t t0 = (hb % J->nqb) * J->qt, t1 = t0 + J->qt < J->nq ? t0 + J->qt : J->nq;
    const size_t rows = (t1 - t0) * G, pos0 = J->pos0;
    float *scr = J->scratch + (size_t)thread * J->scratch_floats;
    float *S = scr, *tmp = scr + J->rmax * CACHE_BLOCK_TOKENS + J->state_floats;
    attn_state st = state_at(J, J->nchunk > 1 ? J->partial + (size_t)task * J->state_floats : scr + J->rmax * CACHE_BLOCK_TOKENS);
    state_init(J, &st, rows);
    /* the task's query rows: prepared once by phase 1 (split-K, rows shared by
     * chunks), else here (each row belongs to exactly one task) */
    const float *qm, *qh;
    if (J->nchunk > 1) {
        const size_t r0 = ((size_t)h * J->nq + t0) * G;
        qm = J->qmain + r0 * J->qf;
        qh = J->qf16 + r0 * d;
    } else {
        float *ph = tmp + d, *pm = ph + J->rmax * (size_t)d;
        prep_rows(J, h, t0, t1, ph, pm);
        qh = ph;
        qm = pm;
    }

    size_t a = row_lo(L, pos0 + t0), b = pos0 + t1;
    if (J->nchunk > 1) {
        size_t ca = J->chunk0 + ci * CACHE_CHUNK_TOKENS, cb = ca + CACHE_CHUNK_TOKENS;
        if (a < ca) a = ca;
        if (b > cb) b = cb;
    }
    while (a < b) {
        cache_seg seg;
        store_segment(J->c, L, h, a, b, &seg);
        const size_t n = seg.n < CACHE_BLOCK_TOKENS ? seg.n : CACHE_BLOCK_TOKENS, e = a + n;
        /* rows that see part of [a, e): pos_t >= a and row_lo(pos_t) < e */
        size_t ta = a > pos0 + t0 ? a - pos0 : t0, tb = t1;
        if (L->sliding) {
            size_t lim = e - 1 + (size_t)L->sliding; /* pos_t <= lim - 1 */
            size_t tl = lim > pos0 ? lim - pos0 : 0;
            if (tb > tl) tb = tl;
        }
        if (ta < tb) {
            const size_t ra = (ta - t0) * G, nr = (tb - ta) * G;
            const float *qr = seg.dom == DOM_MAIN ? qm + (ta - t0) * G * J->qf : qh + (ta - t0) * G * d;
            set_err(J, kvq_score(seg.kp, qr, nr, seg.k, n, S));
            for (size_t i = 0; i < nr; i++) {
                const size_t r = ra + i, pt = pos0 + t0 + r / G, lo = row_lo(L, pt);
                float *s = S + i * n;
                if (pt + 1 < e)
                    for (size_t j = pt + 1 - a; j < n; j++) s[j] = -INFINITY;
                if (lo > a)
                    for (size_t j = 0; j < lo - a && j < n; j++) s[j] = -INFINITY;
                float alpha = softmax_block(s, n, &st.m[r], &st.l[r], J->isa);
                if (alpha != 1.0f) {
                    if (st.used[0]) vscale(st.accM + r * d, (size_t)d, alpha, J->isa);
                    if (st.used[1]) vscale(st.accF + r * d, (size_t)d, alpha, J->isa);
                }
            }
            float *acc = (seg.dom == DOM_MAIN ? st.accM : st.accF) + ra * d;
            set_err(J, kvq_accumulate(seg.vp, S, nr, seg.v, n, acc));
            st.used[seg.dom] = 1;
        }
        a = e;
    }
    if (J->nchunk == 1) finish_rows(J, &st, h, t0, rows, tmp);
}

/* ---- phase 3: exact merge of the chunks of one (head, query block) --------- */
static void merge_task(void *arg, int task, int thread) {
    attn_job *J = arg;
    const int G = J->G, d = J->d, h = task / (int)J->nqb;
    const size_t t0 = (size_t)(task % (int)J->nqb) * J->qt, t1 = t0 + J->qt < J->nq ? t0 + J->qt : J->nq;
    const size_t rows = (t1 - t0) * G;
    float *scr = J->scratch + (size_t)thread * J->scratch_floats;
    attn_state out = state_at(J, scr + J->rmax * CACHE_BLOCK_TOKENS);
    float *tmp = scr + J->rmax * CACHE_BLOCK_TOKENS + J->state_floats;
    state_init(J, &out, rows);
    for (size_t ci = 0; ci < J->nchunk; ci++) {
        attn_state p = state_at(J, J->partial + ((size_t)task * J->nchunk + ci) * J->state_floats);
        out.used[0] = out.used[0] || p.used[0];
        out.used[1] = out.used[1] || p.used[1];
    }
    for (size_t r = 0; r < rows; r++) {
        float M = -INFINITY;
        for (size_t ci = 0; ci < J->nchunk; ci++) {
            const float *pm = J->partial + ((size_t)task * J->nchunk + ci) * J->state_floats;
            if (pm[r] > M) M = pm[r];
        }
        float l = 0, *am = out.accM + r * d, *af = out.accF + r * d;
        for (size_t ci = 0; ci < J->nchunk; ci++) {
            attn_state p = state_at(J, J->partial + ((size_t)task * J->nchunk + ci) * J->state_floats);
            if (p.m[r] == -INFINITY) continue; /* the chunk holds nothing this row sees */
            float w = expf(p.m[r] - M);
            l += w * p.l[r];
            if (p.used[0]) for (int i = 0; i < d; i++) am[i] += w * p.accM[r * d + i];
            if (p.used[1]) for (int i = 0; i < d; i++) af[i] += w * p.accF[r * d + i];
        }
        out.m[r] = M;
        out.l[r] = l;
    }
    finish_rows(J, &out, h, t0, rows, tmp);
}

/* 64-byte aligned float offsets inside the workspace */
static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

int kvq_cache_attend(kvq_cache *c, int layer, const float *q, size_t nq, int n_q_heads, size_t pos0, float scale,
                     float *out, kvq_pool *pool) {
    if (!c) return KVQ_ERR_NULL;
    if (layer < 0 || layer >= c->n_layers || n_q_heads <= 0 || n_q_heads % c->H || !isfinite(scale))
        return KVQ_ERR_INVALID_ARG;
    if (nq == 0) return KVQ_OK;
    if (!q || !out) return KVQ_ERR_NULL;
    const cache_layer *L = &c->layers[layer];
    if (pos0 > L->len || nq > L->len - pos0) return KVQ_ERR_INVALID_ARG;
    if (row_lo(L, pos0) < L->base) return KVQ_ERR_STATE; /* dropped from a sliding window */
    /* the queries, before anything is written: NaN/Inf, or a product with
     * scale beyond float, would make every score of the row NaN */
    const size_t row_floats = (size_t)n_q_heads * (size_t)c->d;
    if (nq > SIZE_MAX / sizeof(float) / row_floats) return KVQ_ERR_OVERFLOW;
    for (size_t i = 0; i < nq * row_floats; i++)
        if (!isfinite(q[i]) || !isfinite(q[i] * scale)) return KVQ_ERR_NONFINITE;

    attn_job J;
    memset(&J, 0, sizeof J);
    J.c = c;
    J.L = L;
    J.q = q;
    J.out = out;
    J.nq = nq;
    J.pos0 = pos0;
    J.HQ = n_q_heads;
    J.G = n_q_heads / c->H;
    J.d = c->d;
    J.scale = scale;
    J.isa = c->isa;
    atomic_init(&J.err, 0);
    const int H = c->H, G = J.G, d = c->d;
    J.qt = G >= CACHE_TASK_ROWS ? 1 : CACHE_TASK_ROWS / (size_t)G;
    if (J.qt > nq) J.qt = nq;
    J.nqb = (nq + J.qt - 1) / J.qt;
    J.rmax = J.qt * (size_t)G;
    const size_t lo = row_lo(L, pos0), end = pos0 + nq;
    J.has_main = L->main_end > lo && L->ready;
    J.qf = J.has_main ? kvq_plan_query_floats(layer_kplan(L, 0)) : 0;
    J.nchunk = 1;
    if ((size_t)H * J.nqb < 16) {
        J.chunk0 = lo / CACHE_CHUNK_TOKENS * CACHE_CHUNK_TOKENS;
        J.nchunk = (end - J.chunk0 + CACHE_CHUNK_TOKENS - 1) / CACHE_CHUNK_TOKENS;
    }
    const int T = kvq_pool_size(pool);
    const size_t ntask = (size_t)H * J.nqb * J.nchunk;
    if (ntask > (size_t)0x7fffffff || nq > SIZE_MAX / 64 / ((size_t)n_q_heads * (d + 64))) return KVQ_ERR_OVERFLOW;
    J.state_floats = al16(2 * J.rmax + 2 * J.rmax * (size_t)d + 2);
    J.scratch_floats = al16(J.rmax * CACHE_BLOCK_TOKENS + J.state_floats + (size_t)d + J.rmax * ((size_t)d + J.qf));
    const size_t rows_all = J.nchunk > 1 ? (size_t)H * nq * G : 0;
    const size_t n16 = al16(rows_all * d), nm = al16(rows_all * J.qf);
    const size_t np = J.nchunk > 1 ? ntask * J.state_floats : 0;
    const size_t need = n16 + nm + np + (size_t)T * J.scratch_floats;
    if (need > c->ws_floats) {
        free(c->ws);
        c->ws = aligned_alloc(64, al16(need) * sizeof(float));
        c->ws_floats = c->ws ? al16(need) : 0;
        if (!c->ws) return KVQ_ERR_NOMEM;
    }
    J.qf16 = c->ws;
    J.qmain = c->ws + n16;
    J.partial = c->ws + n16 + nm;
    J.scratch = c->ws + n16 + nm + np;

    const int nprep = H * (int)J.nqb;
    if (J.nchunk > 1) /* few rows (split-K is only used when heads x query blocks < 16) */
        for (int t = 0; t < nprep; t++) prep_task(&J, t, 0);
    int rc = kvq_pool_run(pool, attn_task, &J, (int)ntask);
    if (!rc && J.nchunk > 1) rc = kvq_pool_run(pool, merge_task, &J, nprep);
    if (!rc) rc = atomic_load(&J.err);
    return rc;
}
