/*
 * The forward pass: a batch of tokens (prefill) or one token (decode)
 * through every block, K/V written to and attention read from the kvq_cache.
 *
 * Where the time goes: the matrix products (kvq_ggml_matmul_multi: weights read
 * once per batch, activations quantized once per matrix input) and the
 * attention on the cache (kvq_cache_attend). The rest (norms, RoPE, the
 * activation) is O(n_embd + n_ff) per token and runs over the pool by token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "wmat.h"
#include "ops.h"

/* ------------------------------------------------------------------------ */
/* Run state                                                                */
/* ------------------------------------------------------------------------ */
typedef struct kvq_run_state {
    int n_batch;       /* rows allocated in every buffer below */
    float *x;          /* (n_batch, n_embd) residual stream */
    float *xb;         /* (n_batch, n_embd) normalised block input */
    float *q;          /* (n_batch, n_head * head_dim) queries (after QK-norm and RoPE) */
    float *k;          /* (n_batch, n_head_kv * head_dim) keys (after RoPE) */
    float *v;          /* (n_batch, n_head_kv * head_dim) values */
    float *att;        /* (n_batch, n_head * head_dim) attention output */
    float *proj;       /* (n_batch, n_embd) output of attn_output / ffn_down */
    float *hb;         /* (n_batch, n_ff) gate, then act(gate) * up */
    float *hb2;        /* (n_batch, n_ff) up */
    float *rope_cs;    /* (n_batch, n_rot) cos/sin pairs of the batch positions, global layers */
    float *rope_cs_swa;/* (n_batch, n_rot) the same with the sliding-window layers' base */
    void *q8;          /* (n_batch, q8a row of max(n_embd, n_head*head_dim, n_ff)) quantized activations */
    double *inv_freq;  /* (n_rot/2) rope frequencies, global layers */
    double *inv_freq_swa; /* (n_rot/2) sliding-window layers */
    kvq_wmat_ws wws;   /* kvq-coded matrices' scratch (kvq_wmat_matmul), grown on demand */
} kvq_run_state;

struct kvq_session {
    const kvq_model *m;
    kvq_session_params p;
    int *f16_layers;      /* copy of p.f16_layers */
    kvq_cache *cache;
    kvq_pool *pool;
    const kvq_ggml_kernels *kern;
    const kvq_ops *ops;
    kvq_run_state s;
    size_t pos;           /* tokens evaluated */
};

kvq_session_params kvq_session_default_params(void) {
    kvq_session_params p;
    memset(&p, 0, sizeof p);
    p.n_batch = 256;
    p.isa = KVQ_ISA_BEST;
    return p;
}

static void free_state(kvq_run_state *s) {
    free(s->x); free(s->xb); free(s->q); free(s->k); free(s->v); free(s->att); free(s->proj);
    free(s->hb); free(s->hb2); free(s->rope_cs); free(s->rope_cs_swa); free(s->q8);
    free(s->inv_freq); free(s->inv_freq_swa);
    kvq_wmat_ws_free(&s->wws);
    memset(s, 0, sizeof *s);
}

static int alloc_state(kvq_run_state *s, const kvq_model *m, int n_batch) {
    const kvq_model_config *c = &m->cfg;
    size_t B = (size_t)n_batch, E = (size_t)c->n_embd, Q = (size_t)c->n_head * (size_t)c->head_dim;
    size_t KV = (size_t)c->n_head_kv * (size_t)c->head_dim, F = (size_t)c->n_ff, R = (size_t)c->n_rot;
    size_t widest = E > Q ? E : Q;
    if (F > widest) widest = F;
    s->n_batch = n_batch;
    s->x = malloc(B * E * sizeof(float));
    s->xb = malloc(B * E * sizeof(float));
    s->q = malloc(B * Q * sizeof(float));
    s->k = malloc(B * KV * sizeof(float));
    s->v = malloc(B * KV * sizeof(float));
    s->att = malloc(B * Q * sizeof(float));
    s->proj = malloc(B * E * sizeof(float));
    s->hb = malloc(B * F * sizeof(float));
    s->hb2 = malloc(B * F * sizeof(float));
    s->rope_cs = malloc(B * R * sizeof(float));
    s->rope_cs_swa = malloc(B * R * sizeof(float));
    s->q8 = malloc(B * kvq_ggml_q8a_row_bytes((int64_t)widest));
    s->inv_freq = malloc(R / 2 * sizeof(double));
    s->inv_freq_swa = malloc(R / 2 * sizeof(double));
    if (!s->x || !s->xb || !s->q || !s->k || !s->v || !s->att || !s->proj || !s->hb || !s->hb2 || !s->rope_cs ||
        !s->rope_cs_swa || !s->q8 || !s->inv_freq || !s->inv_freq_swa) {
        free_state(s);
        return KVQ_ERR_NOMEM;
    }
    kvq_rope_freqs(s->inv_freq, c->n_rot, c->rope_base, c->rope_freq_scale, m->rope_freqs);
    kvq_rope_freqs(s->inv_freq_swa, c->n_rot, c->rope_base_swa, 1.0, m->rope_freqs);
    return KVQ_OK;
}

int kvq_session_create(kvq_session **out, const kvq_model *m, const kvq_session_params *params, kvq_pool *pool) {
    if (!out || !m) return KVQ_ERR_NULL;
    kvq_session_params p = params ? *params : kvq_session_default_params();
    if (p.n_batch <= 0) p.n_batch = 256;
    if (p.n_batch > 65536 || p.n_f16_layers < 0 || (p.n_f16_layers && !p.f16_layers)) return KVQ_ERR_INVALID_ARG;
    const kvq_ggml_kernels *kern = kvq_ggml_kernels_for(p.isa);
    if (!kern) return KVQ_ERR_UNSUPPORTED;
    kvq_session *S = calloc(1, sizeof *S);
    if (!S) return KVQ_ERR_NOMEM;
    S->m = m;
    S->pool = pool;
    S->kern = kern;
    S->ops = kvq_ops_for(p.isa);
    if (p.n_f16_layers) {
        S->f16_layers = malloc(sizeof(int) * (size_t)p.n_f16_layers);
        if (!S->f16_layers) { free(S); return KVQ_ERR_NOMEM; }
        memcpy(S->f16_layers, p.f16_layers, sizeof(int) * (size_t)p.n_f16_layers);
        p.f16_layers = S->f16_layers;
    }
    S->p = p;
    const kvq_model_config *c = &m->cfg;
    kvq_cache_config cc;
    memset(&cc, 0, sizeof cc);
    cc.n_layers = c->n_layers;
    cc.n_kv_heads = c->n_head_kv;
    cc.head_dim = c->head_dim;
    cc.k_spec = p.k_spec;
    cc.v_spec = p.v_spec;
    cc.f16_window = p.f16_window;
    cc.f16_layers = p.f16_layers;
    cc.n_f16_layers = p.n_f16_layers;
    cc.compress_sliding = p.compress_sliding;
    cc.outlier_calib_tokens = p.calib_tokens;
    cc.sink_tokens = p.sink_tokens;
    cc.seed = p.seed;
    int any_swa = 0;
    for (int l = 0; l < c->n_layers; l++) any_swa |= c->sliding_window[l] > 0;
    cc.sliding_window = any_swa ? c->sliding_window : NULL;
    int rc = kvq_cache_create(&S->cache, &cc);
    if (!rc) rc = alloc_state(&S->s, m, p.n_batch);
    if (rc) { kvq_session_free(S); return rc; }
    *out = S;
    return KVQ_OK;
}

void kvq_session_free(kvq_session *S) {
    if (!S) return;
    kvq_cache_free(S->cache);
    free_state(&S->s);
    free(S->f16_layers);
    free(S);
}

size_t kvq_session_pos(const kvq_session *S) { return S ? S->pos : 0; }
const kvq_model *kvq_session_model(const kvq_session *S) { return S->m; }

size_t kvq_session_state_bytes(const kvq_session *S) {
    if (!S) return 0;
    const kvq_model_config *c = &S->m->cfg;
    size_t B = (size_t)S->s.n_batch, E = (size_t)c->n_embd, Q = (size_t)c->n_head * (size_t)c->head_dim;
    size_t KV = (size_t)c->n_head_kv * (size_t)c->head_dim, F = (size_t)c->n_ff, R = (size_t)c->n_rot;
    size_t widest = E > Q ? E : Q;
    if (F > widest) widest = F;
    /* alloc_state's buffers: x xb proj (E), q att (Q), k v (KV), hb hb2 (F), two rope tables (R), the q8 row, two
     * inverse-frequency tables (R/2 doubles) */
    return 4 * B * (3 * E + 2 * Q + 2 * KV + 2 * F + 2 * R) + B * kvq_ggml_q8a_row_bytes((int64_t)widest) +
           2 * (R / 2) * sizeof(double);
}
kvq_cache *kvq_session_cache(kvq_session *S) { return S ? S->cache : NULL; }
const char *kvq_session_kernels(const kvq_session *S) { return S ? S->kern->name : ""; }

int kvq_session_truncate(kvq_session *S, size_t pos) {
    if (!S) return KVQ_ERR_NULL;
    int rc = kvq_cache_truncate(S->cache, pos);
    if (rc) return rc;
    if (pos < S->pos) S->pos = pos;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Per-token element-wise steps, run over the pool (a few tokens per task)   */
/* ------------------------------------------------------------------------ */
typedef enum {
    STEP_ATTN_NORM,   /* xb = rmsnorm(x, attn_norm) */
    STEP_QKV,         /* biases, QK-norm, RoPE on q and k */
    STEP_ATTN_RESID,  /* x += post_norm(proj) */
    STEP_FFN_NORM,    /* xb = rmsnorm(x, ffn_norm) */
    STEP_ACT,         /* hb = act(hb) * hb2 */
    STEP_FFN_RESID,   /* x += post_norm(proj) */
} step_kind;

typedef struct { kvq_session *S; int layer; step_kind kind; int ntok, per_task; } step_job;

static void add_bias(float *x, const float *b, int n) {
    if (b)
        for (int i = 0; i < n; i++) x[i] += b[i];
}

static void step_token(const step_job *j, int t);

static void step_task(void *arg, int task, int thread) {
    (void)thread;
    const step_job *j = arg;
    int t0 = task * j->per_task, t1 = t0 + j->per_task < j->ntok ? t0 + j->per_task : j->ntok;
    for (int t = t0; t < t1; t++) step_token(j, t);
}

static void step_token(const step_job *j, int t) {
    kvq_session *S = j->S;
    const kvq_model *m = S->m;
    const kvq_model_config *c = &m->cfg;
    const kvq_layer *L = &m->layers[j->layer];
    kvq_run_state *s = &S->s;
    int E = c->n_embd, hd = c->head_dim, F = c->n_ff;
    int Q = c->n_head * hd, KV = c->n_head_kv * hd;
    float *x = s->x + (size_t)t * E, *xb = s->xb + (size_t)t * E, *proj = s->proj + (size_t)t * E;
    switch (j->kind) {
    case STEP_ATTN_NORM: kvq_rmsnorm(xb, x, L->attn_norm, E, c->norm_eps); break;
    case STEP_FFN_NORM: kvq_rmsnorm(xb, x, L->ffn_norm, E, c->norm_eps); break;
    case STEP_QKV: {
        float *q = s->q + (size_t)t * Q, *k = s->k + (size_t)t * KV, *v = s->v + (size_t)t * KV;
        add_bias(q, L->bq, Q);
        add_bias(k, L->bk, KV);
        add_bias(v, L->bv, KV);
        const float *cs = (c->sliding_window[j->layer] ? s->rope_cs_swa : s->rope_cs) + (size_t)t * c->n_rot;
        int neox = c->rope_type == KVQ_ROPE_NEOX;
        for (int h = 0; h < c->n_head; h++) {
            if (L->q_norm) kvq_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, c->norm_eps);
            kvq_rope_apply(q + h * hd, cs, c->n_rot, neox);
        }
        for (int h = 0; h < c->n_head_kv; h++) {
            if (L->k_norm) kvq_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, c->norm_eps);
            kvq_rope_apply(k + h * hd, cs, c->n_rot, neox);
        }
        break;
    }
    case STEP_ATTN_RESID:
    case STEP_FFN_RESID: {
        const float *pn = j->kind == STEP_ATTN_RESID ? L->post_attn_norm : L->post_ffw_norm;
        if (pn) kvq_rmsnorm(proj, proj, pn, E, c->norm_eps);
        for (int i = 0; i < E; i++) x[i] += proj[i];
        break;
    }
    case STEP_ACT: {
        float *a = s->hb + (size_t)t * F, *b = s->hb2 + (size_t)t * F;
        if (c->act == KVQ_ACT_GELU_TANH) S->ops->gelu_mul(a, b, F);
        else S->ops->silu_mul(a, b, F);
        break;
    }
    }
}

static int step(kvq_session *S, int layer, step_kind kind, int ntok) {
    /* about 4 tasks per thread: a token's step is too small to be a task */
    int nth = kvq_pool_size(S->pool), per = (ntok + 4 * nth - 1) / (4 * nth);
    step_job j = {S, layer, kind, ntok, per};
    return kvq_pool_run(S->pool, step_task, &j, (ntok + per - 1) / per);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */
/* ------------------------------------------------------------------------ */
/* Products of nm matrices with the same activations: ggml-typed ones in one
 * parallel region (kvq_ggml_matmul_multi), kvq-coded ones on their codes
 * (kvq_wmat_matmul; their activation rounding is the codec's — tq-mse and
 * tcq score with an 8-bit activation per block — so f32_acts does not
 * apply to them). */
static int matmul_multi(kvq_session *S, const kvq_ggml_matrix *const *W, int nm, const float *X, int ntok,
                        float *const *Y, const int64_t *ldy) {
    const kvq_ggml_matrix *Wg[4];
    float *Yg[4];
    int64_t lg[4];
    int ng = 0;
    for (int i = 0; i < nm && i < 4; i++) {
        if (W[i]->coded) {
            int rc = kvq_wmat_matmul(W[i]->coded, S->pool, &S->s.wws, X, ntok, Y[i], ldy[i]);
            if (rc) return rc;
        } else {
            Wg[ng] = W[i];
            Yg[ng] = Y[i];
            lg[ng++] = ldy[i];
        }
    }
    if (!ng) return KVQ_OK;
    kvq_ggml_acts A;
    kvq_ggml_acts_init(&A, X, ntok, W[0]->cols, S->s.q8);
    A.f32_only = S->p.f32_acts;
    return kvq_ggml_matmul_multi(S->kern, S->pool, Wg, ng, &A, Yg, lg);
}

static int matmul(kvq_session *S, const kvq_ggml_matrix *W, const float *X, int ntok, float *Y) {
    int64_t ldy = W->rows;
    return matmul_multi(S, &W, 1, X, ntok, &Y, &ldy);
}

/* One chunk of ntok <= n_batch tokens at positions S->pos ... */
static int forward_chunk(kvq_session *S, const int32_t *tok, int ntok, float *logits, int all_logits) {
    const kvq_model *m = S->m;
    const kvq_model_config *c = &m->cfg;
    kvq_run_state *s = &S->s;
    int E = c->n_embd, hd = c->head_dim, Q = c->n_head * hd, KV = c->n_head_kv * hd, F = c->n_ff;
    int rc;

    /* embeddings (rows of token_embd, whatever their type) */
    for (int t = 0; t < ntok; t++) {
        float *x = s->x + (size_t)t * E;
        if (m->tok_embd.coded) rc = kvq_wmat_row(m->tok_embd.coded, tok[t], x);
        else
            rc = kvq_ggml_dequant_row(m->tok_embd.type,
                                      (const uint8_t *)m->tok_embd.data + (size_t)tok[t] * m->tok_embd.row_bytes, x, E);
        if (rc) return rc;
        if (c->embd_scale != 1.0f)
            for (int i = 0; i < E; i++) x[i] *= c->embd_scale;
    }
    for (int t = 0; t < ntok; t++) {
        double p = (double)(S->pos + (size_t)t);
        kvq_rope_table(s->rope_cs + (size_t)t * c->n_rot, p, s->inv_freq, c->n_rot);
        kvq_rope_table(s->rope_cs_swa + (size_t)t * c->n_rot, p, s->inv_freq_swa, c->n_rot);
    }

    for (int l = 0; l < c->n_layers; l++) {
        const kvq_layer *L = &m->layers[l];
        /* attention */
        if ((rc = step(S, l, STEP_ATTN_NORM, ntok))) return rc;
        {
            const kvq_ggml_matrix *W[3] = {&L->wq, &L->wk, &L->wv};
            float *Y[3] = {s->q, s->k, s->v};
            int64_t ldy[3] = {Q, KV, KV};
            if ((rc = matmul_multi(S, W, 3, s->xb, ntok, Y, ldy))) return rc;
        }
        if ((rc = step(S, l, STEP_QKV, ntok))) return rc;
        if (S->p.kv_hook) S->p.kv_hook(S->p.kv_hook_user, l, S->pos, s->q, s->k, s->v, (size_t)ntok);
        /* the encoding over the pool for prefill chunks only: a decode step's
         * 2 x n_kv_heads rows are too few tasks (on a loaded 2-core box a
         * pool of 2 made a 1-token append of SmolLM2's tcq:3 values 1.5x
         * slower; docs/RESULTS.md) */
        if ((rc = kvq_cache_append_pool(S->cache, l, s->k, s->v, (size_t)ntok, ntok >= 16 ? S->pool : NULL))) return rc;
        if ((rc = kvq_cache_attend(S->cache, l, s->q, (size_t)ntok, c->n_head, S->pos, c->attn_scale, s->att, S->pool)))
            return rc;
        if (S->p.attn_hook) S->p.attn_hook(S->p.attn_hook_user, l, S->pos, s->att, (size_t)ntok, Q);
        if ((rc = matmul(S, &L->wo, s->att, ntok, s->proj))) return rc;
        if ((rc = step(S, l, STEP_ATTN_RESID, ntok))) return rc;
        /* feed-forward */
        if ((rc = step(S, l, STEP_FFN_NORM, ntok))) return rc;
        {
            const kvq_ggml_matrix *W[2] = {&L->w_gate, &L->w_up};
            float *Y[2] = {s->hb, s->hb2};
            int64_t ldy[2] = {F, F};
            if ((rc = matmul_multi(S, W, 2, s->xb, ntok, Y, ldy))) return rc;
        }
        if ((rc = step(S, l, STEP_ACT, ntok))) return rc;
        if ((rc = matmul(S, &L->w_down, s->hb, ntok, s->proj))) return rc;
        if ((rc = step(S, l, STEP_FFN_RESID, ntok))) return rc;
    }

    if (logits) {
        int first = all_logits ? 0 : ntok - 1, rows = ntok - first;
        for (int t = first; t < ntok; t++)
            kvq_rmsnorm(s->xb + (size_t)(t - first) * E, s->x + (size_t)t * E, m->output_norm, E, c->norm_eps);
        if ((rc = matmul(S, &m->output, s->xb, rows, logits))) return rc;
        if (c->final_softcap > 0.0f) {
            float cap = c->final_softcap;
            for (size_t i = 0; i < (size_t)rows * (size_t)c->n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
        }
    }
    return KVQ_OK;
}

int kvq_session_eval(kvq_session *S, const int32_t *tokens, size_t n, float *logits, int all_logits) {
    if (!S || !tokens) return KVQ_ERR_NULL;
    if (n == 0) return KVQ_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= S->m->cfg.n_vocab) return KVQ_ERR_INVALID_ARG;
    size_t V = (size_t)S->m->cfg.n_vocab, done = 0;
    size_t pos0 = S->pos;
    while (done < n) {
        int ntok = (int)(n - done < (size_t)S->s.n_batch ? n - done : (size_t)S->s.n_batch);
        int last = done + (size_t)ntok == n;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + done * V;
        else if (logits && last) lg = logits;
        int rc = forward_chunk(S, tokens + done, ntok, lg, all_logits);
        if (rc) {
            /* drop what layers appended; fails only if a sliding window
             * already dropped positions pos0 needs (then discard the session) */
            S->pos = pos0;
            (void)kvq_cache_truncate(S->cache, pos0);
            return rc;
        }
        S->pos += (size_t)ntok;
        done += (size_t)ntok;
    }
    return KVQ_OK;
}
