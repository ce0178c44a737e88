/*
 * The engine on the real default model (SmolLM2, skipped when not
 * installed): prefill in one batch, in chunks and token by token give the
 * same logits (bit for bit with q8 activations on every ISA); truncate +
 * re-evaluate reproduces them; greedy generation of
 * a known prompt; a compressed cache stays close to f16; bad inputs and
 * damaged model files are clean errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ggml_types.h"
#include "engine/model.h"
#include "engine/tok_gguf.h"
#include "kvq.h"
#include "testutil.h"

static double max_rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / (den + 1e-30);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Logits of every position, evaluated in chunks of `chunk` tokens (0 = all at once). */
static int eval_chunks(const kvq_model *m, const kvq_session_params *p, kvq_pool *pool, const int32_t *t, int n,
                       int chunk, float *out) {
    kvq_session *s = NULL;
    int rc = kvq_session_create(&s, m, p, pool);
    if (rc) return rc;
    size_t V = (size_t)m->cfg.n_vocab;
    for (int i = 0; i < n && !rc; i += chunk ? chunk : n) {
        int k = chunk && n - i > chunk ? chunk : n - i;
        rc = kvq_session_eval(s, t + i, (size_t)k, out + (size_t)i * V, 1);
    }
    kvq_session_free(s);
    return rc;
}

static void test_consistency(const kvq_model *m, kvq_pool *pool) {
    /* "The capital of France is Paris. The capital of Germany is" */
    static const int32_t toks[] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314};
    const int n = 12;
    size_t V = (size_t)m->cfg.n_vocab;
    float *a = malloc(sizeof(float) * V * n), *b = malloc(sizeof(float) * V * n), *c = malloc(sizeof(float) * V * n);
    kvq_session_params p = kvq_session_default_params();
    p.k_spec = p.v_spec = "f32";
    p.f32_acts = 1;
    CHECK_OK(eval_chunks(m, &p, pool, toks, n, 0, a));
    CHECK_OK(eval_chunks(m, &p, pool, toks, n, 5, b));
    CHECK_OK(eval_chunks(m, &p, pool, toks, n, 1, c));
    double e1 = max_rel(b, a, V * n), e2 = max_rel(c, a, V * n);
    CHECK(e1 < 1e-5, "chunks of 5 vs one batch: %g", e1);
    CHECK(e2 < 1e-5, "token by token vs one batch: %g", e2);
    CHECK(argmax(a + 4 * V, (int)V) == 7042, "' Paris' after 'France is' (got %d)", argmax(a + 4 * V, (int)V));
    CHECK(argmax(a + 11 * V, (int)V) == 11452, "' Berlin' after 'Germany is' (got %d)", argmax(a + 11 * V, (int)V));

    /* fast path: int8 activations, f16 cache: same predictions, logits close */
    kvq_session_params q = kvq_session_default_params();
    CHECK_OK(eval_chunks(m, &q, pool, toks, n, 0, b));
    CHECK(argmax(b + 4 * V, (int)V) == 7042 && argmax(b + 11 * V, (int)V) == 11452, "q8 activations: Paris/Berlin");
    double e3 = max_rel(b, a, V * n);
    CHECK(e3 < 0.1, "q8 activations vs f32: %g", e3);
    printf("consistency: chunks %.1e, token by token %.1e, q8 activations + f16 cache %.1e\n", e1, e2, e3);

    /* truncate and re-evaluate */
    kvq_session *s = NULL;
    CHECK_OK(kvq_session_create(&s, m, &p, pool));
    if (s) {
        CHECK_OK(kvq_session_eval(s, toks, 8, NULL, 0));
        CHECK_OK(kvq_session_truncate(s, 6));
        CHECK(kvq_session_pos(s) == 6, "pos after truncate");
        CHECK_OK(kvq_session_eval(s, toks + 6, 6, c, 1));
        double e4 = max_rel(c, a + 6 * V, V * 6);
        CHECK(e4 < 1e-5, "truncate + re-eval: %g", e4);
        int32_t bad = m->cfg.n_vocab;
        CHECK(kvq_session_eval(s, &bad, 1, NULL, 0) == KVQ_ERR_INVALID_ARG, "token out of range");
        CHECK(kvq_session_eval(s, toks, 0, NULL, 0) == KVQ_ERR_INVALID_ARG, "empty batch");
        CHECK(kvq_session_pos(s) == 12, "position unchanged by refused calls");
        kvq_session_free(s);
    }
    free(a);
    free(b);
    free(c);
}

/* The fast path (q8 activations, f16 / tq-mse:4 cache) on every ISA of this
 * CPU (weights: the session's isa, cache: KVQ_ISA): one batch, chunks of 5 and
 * token by token give the same logits bit for bit. Both are quantizers (q8
 * activations, f16 or 4-bit codes): a difference of one float rounding
 * anywhere flips codes and moves the logits by 1e-1 (ppl by 1e-2), so the
 * check is exact. Exception: where the weight kernels have row-block
 * kernels (dotr, AVX-512 VNNI), batches of >= 2 tokens use them and single
 * tokens the single-row kernels, which sum in another float order; token by
 * token is then checked for the same argmax everywhere and logits within
 * that rounding-flip scale (0.25 of the largest logit). */
static void test_batch_isas(const kvq_model *m, kvq_pool *pool) {
    static const int32_t toks[] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314};
    const int n = 12;
    size_t V = (size_t)m->cfg.n_vocab;
    float *a = malloc(sizeof(float) * V * n), *b = malloc(sizeof(float) * V * n);
    const char *env = getenv("KVQ_ISA");
    char saved[32] = "";
    if (env) snprintf(saved, sizeof saved, "%s", env);
    const kvq_isa top = kvq_cpu_isa();
    static const char *const specs[] = {"f16", "tq-mse:4"};
    for (int isa = KVQ_ISA_SCALAR; isa <= (int)top; isa++) {
        if (isa == KVQ_ISA_SCALAR) setenv("KVQ_ISA", "scalar", 1);
        else if (isa == KVQ_ISA_AVX2 && top > KVQ_ISA_AVX2) setenv("KVQ_ISA", "avx2", 1);
        else if (env) setenv("KVQ_ISA", saved, 1);
        else unsetenv("KVQ_ISA");
        for (int si = 0; si < 2; si++) {
            kvq_session_params p = kvq_session_default_params();
            p.isa = isa == (int)top ? KVQ_ISA_BEST : (kvq_isa)isa;
            p.k_spec = p.v_spec = specs[si];
            CHECK_OK(eval_chunks(m, &p, pool, toks, n, 0, a));
            static const int chunks[] = {5, 1};
            for (int ci = 0; ci < 2; ci++) {
                CHECK_OK(eval_chunks(m, &p, pool, toks, n, chunks[ci], b));
                int first = n;
                for (int t = 0; t < n && first == n; t++)
                    if (memcmp(a + (size_t)t * V, b + (size_t)t * V, V * sizeof *a)) first = t;
                const kvq_ggml_kernels *kk = kvq_ggml_kernels_for(p.isa);
                if (chunks[ci] == 1 && kk && kk->dotr[GGML_TYPE_Q4_1] /* SmolLM2: Q4_1 */) {
                    double e = max_rel(b, a, V * n);
                    int same = 1;
                    for (int t = 0; t < n; t++) same &= argmax(a + (size_t)t * V, (int)V) == argmax(b + (size_t)t * V, (int)V);
                    CHECK(e < 0.25 && same, "isa %d %s cache: token by token vs one batch (row-block kernels): %g, argmax %s", isa,
                          specs[si], e, same ? "same" : "differs");
                    continue;
                }
                CHECK(first == n, "isa %d %s cache, q8 activations: chunks of %d differ from one batch from position %d (%g)",
                      isa, specs[si], chunks[ci], first, max_rel(b, a, V * n));
            }
        }
    }
    if (env) setenv("KVQ_ISA", saved, 1);
    else unsetenv("KVQ_ISA");
    free(a);
    free(b);
}

static void test_compressed_cache(const kvq_model *m, kvq_pool *pool) {
    static const int32_t toks[] = {504, 3575, 282, 4649, 314, 7042, 30, 378, 3575, 282, 4521, 314};
    const int n = 12;
    size_t V = (size_t)m->cfg.n_vocab;
    float *a = malloc(sizeof(float) * V * n), *b = malloc(sizeof(float) * V * n);
    kvq_session_params p = kvq_session_default_params();
    CHECK_OK(eval_chunks(m, &p, pool, toks, n, 0, a));
    p.k_spec = "tq-mse:4";
    p.v_spec = "tq-mse:4";
    int rc = eval_chunks(m, &p, pool, toks, n, 3, b);
    CHECK(rc == KVQ_OK, "tq-mse:4 cache: %s", kvq_strerror(rc));
    if (!rc) {
        CHECK(argmax(b + 11 * V, (int)V) == 11452, "tq-mse:4 cache still says ' Berlin'");
        printf("tq-mse:4 cache vs f16: max rel logit difference %.3f\n", max_rel(b, a, V * n));
    }
    p.k_spec = "nonsense";
    kvq_session *s = NULL;
    CHECK(kvq_session_create(&s, m, &p, pool) == KVQ_ERR_UNKNOWN_METHOD, "bad cache spec refused");
    CHECK(s == NULL, "no session on error");
    free(a);
    free(b);
}

static void test_tokenizer_glue(const kvq_model *m) {
    kvq_tokenizer *tok = NULL;
    CHECK_OK(kvq_tok_create_from_gguf(&tok, m->gguf));
    if (!tok) return;
    int32_t ids[64];
    size_t n = 0;
    const char *text = "The capital of France is";
    CHECK_OK(kvq_tok_encode(tok, text, strlen(text), 1, 0, ids, 64, &n));
    static const int32_t want[] = {504, 3575, 282, 4649, 314};
    CHECK(n == 5 && !memcmp(ids, want, sizeof want), "tokens of the prompt (n=%zu)", n);
    CHECK(kvq_tok_n_tokens(tok) == (size_t)m->cfg.n_vocab, "vocabulary size");
    kvq_tok_free(tok);
}

static void test_damaged(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t len = 4 << 20;
    uint8_t *buf = malloc(len);
    len = fread(buf, 1, len, f);
    fclose(f);
    char tmp[] = "/tmp/kvq_test_engine_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) { free(buf); return; }
    CHECK(write(fd, buf, len) == (ssize_t)len, "write");
    close(fd);
    kvq_model *m = NULL;
    char err[256] = "";
    int rc = kvq_model_load(&m, tmp, err, sizeof err);
    CHECK(rc == KVQ_ERR_TRUNCATED && m == NULL, "truncated model: rc=%d (%s)", rc, err);
    unlink(tmp);
    CHECK(kvq_model_load(&m, "/nonexistent/model.gguf", err, sizeof err) == KVQ_ERR_IO, "missing model");
    free(buf);
}

int main(void) {
    const char *root = getenv("KVQ_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
    if (access(path, R_OK) != 0) {
        printf("skip: %s not installed (scripts/fetch-models.sh)\n", path);
        return tu_finish("test_engine");
    }
    kvq_model *m = NULL;
    char err[256] = "";
    CHECK_OK(kvq_model_load(&m, path, err, sizeof err));
    if (!m) {
        fprintf(stderr, "%s\n", err);
        return tu_finish("test_engine");
    }
    CHECK(m->cfg.n_layers == 30 && m->cfg.n_head == 9 && m->cfg.n_head_kv == 3 && m->cfg.head_dim == 64 &&
              m->cfg.rope_type == KVQ_ROPE_NORM && m->tied_output,
          "SmolLM2 hyperparameters");
    kvq_pool *pool = NULL;
    CHECK_OK(kvq_pool_create(&pool, 2));
    test_tokenizer_glue(m);
    test_consistency(m, pool);
    test_compressed_cache(m, pool);
    test_batch_isas(m, pool);
    test_damaged(path);
    kvq_pool_free(pool);
    kvq_model_free(m);
    return tu_finish("test_engine");
}
