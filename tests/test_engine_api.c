/*
 * The public engine API (include/kvq_engine.h) as a user sees it, on the
 * default model (skipped when it is not installed, except under CI=true):
 * model figures, GGUF inspection, tokenize / detokenize round trips, chat
 * prompts, kvq_generate against a hand-written eval + sample loop (greedy and
 * seeded), stop reasons, and every bad argument as a status code.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq.h"
#include "kvq_engine.h"
#include "testutil.h"

typedef struct {
    int32_t toks[64];
    size_t n;
    size_t stop_after; /* 0: never */
} collect;

static int on_token(void *user, int32_t t) {
    collect *c = user;
    if (c->n < 64) c->toks[c->n] = t;
    c->n++;
    return c->stop_after && c->n >= c->stop_after;
}

/* The loop kvq_generate documents, written out with the public calls. */
static int manual_generate(const kvq_model *m, const kvq_sampler_params *sp, const int32_t *prompt, size_t np,
                           size_t max, int32_t *out, size_t *n_out) {
    kvq_model_info mi;
    kvq_model_get_info(m, &mi);
    kvq_session *s = NULL;
    kvq_sampler *smp = NULL;
    float *logits = malloc(sizeof(float) * (size_t)mi.n_vocab);
    int rc = logits ? kvq_session_create(&s, m, NULL, NULL) : KVQ_ERR_NOMEM;
    if (!rc) rc = kvq_sampler_create(&smp, sp, (size_t)mi.n_vocab);
    for (size_t i = 0; !rc && i < np; i++) rc = kvq_sampler_accept(smp, prompt[i]);
    if (!rc) rc = kvq_session_eval(s, prompt, np, logits, 0);
    size_t n = 0;
    while (!rc && n < max) {
        int32_t t;
        if ((rc = kvq_sampler_sample(smp, logits, &t)) || kvq_token_is_eog(m, t)) break;
        out[n++] = t;
        if ((rc = kvq_sampler_accept(smp, t)) || n == max) break;
        rc = kvq_session_eval(s, &t, 1, logits, 0);
    }
    *n_out = n;
    kvq_sampler_free(smp);
    kvq_session_free(s);
    free(logits);
    return rc;
}

static void test_info(const kvq_model *m) {
    kvq_model_info mi;
    CHECK_OK(kvq_model_get_info(m, &mi));
    CHECK(!strcmp(mi.arch, "llama") && mi.n_layers == 30 && mi.n_head == 9 && mi.n_head_kv == 3 &&
              mi.head_dim == 64 && mi.n_vocab == 49152 && mi.n_ctx_train == 8192 && mi.has_tokenizer &&
              mi.has_chat_template && mi.tied_output && !mi.rope_neox && mi.n_swa_layers == 0,
          "SmolLM2 figures: %s %d layers %d/%d heads d %d vocab %d ctx %d", mi.arch, mi.n_layers, mi.n_head,
          mi.n_head_kv, mi.head_dim, mi.n_vocab, mi.n_ctx_train);
    CHECK(mi.sliding_window && mi.sliding_window[0] == 0 && kvq_model_layer_window(m, 29) == 0 &&
              kvq_model_layer_window(m, 30) == -1 && kvq_model_layer_window(m, -1) == -1,
          "layer windows");
    int tensors = 0;
    for (int t = 0; t < KVQ_GGML_TYPE_SLOTS; t++) tensors += mi.type_count[t];
    const kvq_gguf_file *g = kvq_model_gguf(m);
    kvq_gguf_info gi;
    CHECK_OK(kvq_gguf_get_info(g, &gi));
    CHECK(gi.version == 3 && (int)gi.n_tensors == tensors && gi.file_size == 98362432, "gguf v%u, %llu tensors (%d)",
          gi.version, (unsigned long long)gi.n_tensors, tensors);
    kvq_gguf_tensor_info ti;
    CHECK_OK(kvq_gguf_get_tensor(g, 0, &ti));
    CHECK(ti.name[0] && ti.n_dims >= 1 && ti.n_bytes > 0 && strcmp(kvq_ggml_type_name(ti.type), "?"), "tensor 0");
    CHECK(kvq_gguf_get_tensor(g, gi.n_tensors, &ti) == KVQ_ERR_INVALID_ARG, "tensor out of range");
    char buf[64], tiny[4];
    CHECK_OK(kvq_gguf_get_string(g, "general.architecture", buf, sizeof buf));
    CHECK(!strcmp(buf, "llama"), "general.architecture = %s", buf);
    CHECK(kvq_gguf_get_string(g, "general.architecture", tiny, sizeof tiny) == KVQ_ERR_RANGE && !strcmp(tiny, "lla"),
          "truncated string");
    CHECK(kvq_gguf_get_string(g, "no.such.key", buf, sizeof buf) == KVQ_ERR_INVALID_ARG, "missing key");
    CHECK(kvq_gguf_get_string(g, "llama.block_count", buf, sizeof buf) == KVQ_ERR_FORMAT, "not a string");
}

static void test_tokenizer(const kvq_model *m) {
    const char *text = "The capital of France is Paris. Émile wrote 42 lines.";
    int32_t ids[64];
    size_t n = 0;
    CHECK_OK(kvq_tokenize(m, text, strlen(text), 0, 0, ids, 64, &n));
    char out[256];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pn = 0;
        CHECK_OK(kvq_token_to_piece(m, ids[i], out + len, sizeof out - len, &pn));
        len += pn;
    }
    CHECK(len == strlen(text) && !memcmp(out, text, len), "detokenized '%.*s'", (int)len, out);
    size_t need = 0;
    CHECK(kvq_tokenize(m, text, strlen(text), 0, 0, ids, 2, &need) == KVQ_ERR_RANGE && need == n, "too small");
    char piece[1];
    size_t pn = 0;
    CHECK(kvq_token_to_piece(m, 49152, piece, 1, &pn) == KVQ_ERR_INVALID_ARG, "id out of range");
    CHECK(kvq_token_to_piece(m, -1, piece, 1, &pn) == KVQ_ERR_INVALID_ARG, "negative id");
    char chat[512];
    CHECK_OK(kvq_chat_format(m, "", "Hi", chat, sizeof chat, &need));
    CHECK(strstr(chat, "<|im_start|>user\nHi<|im_end|>") && strstr(chat, "<|im_start|>assistant\n"), "ChatML: %s", chat);
    CHECK(kvq_chat_format(m, NULL, "Hi", chat, 4, &need) == KVQ_ERR_RANGE && need > 4, "chat prompt too small");
    CHECK(kvq_token_is_eog(m, 2) == 1 && kvq_token_is_eog(m, 100) == 0, "<|im_end|> (2) ends generation");
}

static void test_generate(const kvq_model *m) {
    static const int32_t prompt[] = {504, 3575, 282, 4649, 314}; /* "The capital of France is" */
    const size_t np = 5;
    kvq_sampler_params modes[2] = {kvq_sampler_default_params(), kvq_sampler_run_params()};
    modes[1].seed = 1234;
    for (int mode = 0; mode < 2; mode++) {
        int32_t ref[16];
        size_t nref = 0;
        CHECK_OK(manual_generate(m, &modes[mode], prompt, np, 12, ref, &nref));
        kvq_session *s = NULL;
        kvq_sampler *smp = NULL;
        CHECK_OK(kvq_session_create(&s, m, NULL, NULL));
        CHECK_OK(kvq_sampler_create(&smp, &modes[mode], 49152));
        collect c = {{0}, 0, 0};
        size_t n = 0;
        kvq_stop why = KVQ_STOP_CALLBACK;
        CHECK_OK(kvq_generate(s, smp, prompt, np, 12, on_token, &c, &n, &why));
        CHECK(n == nref && c.n == n && !memcmp(c.toks, ref, n * sizeof *ref), "%s: kvq_generate = the loop (%zu/%zu)",
              mode ? "sampled" : "greedy", n, nref);
        CHECK(why == (n == 12 ? KVQ_STOP_LENGTH : KVQ_STOP_EOG), "stop reason %d", (int)why);
        CHECK(kvq_session_pos(s) == np + (n ? n - 1 : 0), "position %zu", kvq_session_pos(s));
        kvq_sampler_free(smp);
        kvq_session_free(s);
    }
    /* the callback stops it; then bad arguments */
    kvq_session *s = NULL;
    kvq_sampler *smp = NULL;
    kvq_sampler_params gp = kvq_sampler_default_params();
    CHECK_OK(kvq_session_create(&s, m, NULL, NULL));
    CHECK_OK(kvq_sampler_create(&smp, &gp, 49152));
    collect c = {{0}, 0, 3};
    size_t n = 0;
    kvq_stop why = KVQ_STOP_LENGTH;
    CHECK_OK(kvq_generate(s, smp, prompt, np, 12, on_token, &c, &n, &why));
    CHECK(n == 3 && why == KVQ_STOP_CALLBACK, "callback stop: %zu tokens, reason %d", n, (int)why);
    CHECK(kvq_generate(s, smp, prompt, 0, 4, NULL, NULL, &n, &why) == KVQ_ERR_INVALID_ARG, "empty prompt");
    CHECK(kvq_generate(NULL, smp, prompt, np, 4, NULL, NULL, NULL, NULL) == KVQ_ERR_NULL, "NULL session");
    CHECK(kvq_generate(s, NULL, prompt, np, 4, NULL, NULL, NULL, NULL) == KVQ_ERR_NULL, "NULL sampler");
    const int32_t bad[] = {49152};
    size_t pos = kvq_session_pos(s);
    CHECK(kvq_generate(s, smp, bad, 1, 4, NULL, NULL, &n, &why) == KVQ_ERR_INVALID_ARG && kvq_session_pos(s) == pos,
          "token out of range: position kept");
    kvq_sampler_free(smp);
    kvq_session_free(s);
    /* samplers: bad parameters */
    kvq_sampler_params bp = kvq_sampler_run_params();
    bp.repeat_penalty = 0;
    CHECK(kvq_sampler_create(&smp, &bp, 10) == KVQ_ERR_INVALID_ARG, "repeat_penalty 0");
    CHECK(kvq_sampler_create(&smp, &gp, 0) == KVQ_ERR_INVALID_ARG, "empty vocabulary");
    CHECK(kvq_sampler_create(NULL, &gp, 10) == KVQ_ERR_NULL, "NULL out");
    /* sessions from a policy, with a spec error */
    kvq_policy pol;
    CHECK_OK(kvq_policy_parse(&pol, "tq-mse:4+chscale/tq-mse:4,w=16,f16layers=-1", NULL, 0));
    kvq_session_params p = kvq_session_default_params();
    kvq_session_params_set_policy(&p, &pol);
    CHECK_OK(kvq_session_create(&s, m, &p, NULL));
    CHECK(s && kvq_session_state_bytes(s) > 0 && kvq_cache_bytes_per_token(kvq_session_cache(s)) < 30 * 3 * 64 * 4,
          "compressed session");
    kvq_session_free(s);
    p.k_spec = "tq-mse:9";
    s = NULL;
    CHECK(kvq_session_create(&s, m, &p, NULL) == KVQ_ERR_BITS_RANGE && !s, "bad spec");
}

static void test_load_errors(const char *dir) {
    kvq_model *m = NULL;
    char err[256] = "";
    CHECK(kvq_model_load(&m, "/nonexistent/model.gguf", err, sizeof err) == KVQ_ERR_IO && !m && strstr(err, "/nonexistent"),
          "missing file: %s", err);
    CHECK(kvq_model_load(&m, dir, err, sizeof err) == KVQ_ERR_IO && !m, "a directory: %s", err);
    CHECK(kvq_model_load(NULL, dir, err, sizeof err) == KVQ_ERR_NULL, "NULL out");
    kvq_gguf_file *g = NULL;
    CHECK(kvq_gguf_open(&g, "/nonexistent.gguf") == KVQ_ERR_IO && !g, "gguf missing");
    kvq_model_info mi;
    CHECK(kvq_model_get_info(NULL, &mi) == KVQ_ERR_NULL, "NULL model");
    kvq_model_free(NULL);
    kvq_gguf_close(NULL);
    kvq_sampler_free(NULL);
    kvq_session_free(NULL);
}

int main(void) {
    const char *root = getenv("KVQ_ROOT");
    char path[1100], dir[1024];
    snprintf(dir, sizeof dir, "%s/models", root ? root : ".");
    snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (access(path, R_OK) != 0) {
        const char *ci = getenv("CI");
        printf("%s: %s not installed (scripts/fetch-models.sh)\n", ci && !strcmp(ci, "true") ? "FAIL" : "skip", path);
        return ci && !strcmp(ci, "true") ? 1 : 77;
    }
    kvq_model *m = NULL;
    char err[256] = "";
    CHECK_OK(kvq_model_load(&m, path, err, sizeof err));
    if (!m) { fprintf(stderr, "%s\n", err); return tu_finish("test_engine_api"); }
    test_info(m);
    test_tokenizer(m);
    test_generate(m);
    test_load_errors(dir);
    kvq_model_free(m);
    return tu_finish("test_engine_api");
}
