/*
 * The public engine API of include/kvq_engine.h that is not a thin name for
 * an internal function: model figures, the model's tokenizer, GGUF
 * inspection, samplers as objects, policies for sessions, generation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "wmat.h"
#include "sampler.h"
#include "tokenizer.h"

/* ---- GGUF inspection ------------------------------------------------------ */
int kvq_gguf_get_info(const kvq_gguf_file *g, kvq_gguf_info *out) {
    if (!g || !out) return KVQ_ERR_NULL;
    memset(out, 0, sizeof *out);
    out->version = kvq_gguf_version(g);
    out->alignment = kvq_gguf_alignment(g);
    out->n_kv = kvq_gguf_n_kv(g);
    out->n_tensors = kvq_gguf_n_tensors(g);
    out->data_offset = kvq_gguf_data_offset(g);
    out->file_size = kvq_gguf_file_size(g);
    return KVQ_OK;
}

int kvq_gguf_get_tensor(const kvq_gguf_file *g, uint64_t i, kvq_gguf_tensor_info *out) {
    if (!g || !out) return KVQ_ERR_NULL;
    if (i >= kvq_gguf_n_tensors(g)) return KVQ_ERR_INVALID_ARG;
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, (size_t)i);
    memset(out, 0, sizeof *out);
    size_t n = t->name.len < sizeof out->name - 1 ? t->name.len : sizeof out->name - 1;
    memcpy(out->name, t->name.ptr, n);
    out->type = t->type;
    out->n_dims = t->n_dims;
    for (uint32_t d = 0; d < t->n_dims && d < 4; d++) out->ne[d] = t->ne[d];
    out->n_bytes = t->n_bytes;
    out->offset = t->offset;
    return KVQ_OK;
}

int kvq_gguf_get_string(const kvq_gguf_file *g, const char *key, char *buf, size_t cap) {
    if (!g || !key || !buf) return KVQ_ERR_NULL;
    if (!cap) return KVQ_ERR_RANGE;
    buf[0] = 0;
    if (!kvq_gguf_find_kv(g, key)) return KVQ_ERR_INVALID_ARG;
    kvq_gguf_str s;
    if (kvq_gguf_get_str(g, key, &s)) return KVQ_ERR_FORMAT;
    size_t n = s.len < cap - 1 ? s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return n < s.len ? KVQ_ERR_RANGE : KVQ_OK;
}

/* ---- models ---------------------------------------------------------------- */
int kvq_model_get_info(const kvq_model *m, kvq_model_info *out) {
    if (!m || !out) return KVQ_ERR_NULL;
    const kvq_model_config *c = &m->cfg;
    memset(out, 0, sizeof *out);
    memcpy(out->arch, c->arch_name, sizeof out->arch);
    out->arch[sizeof out->arch - 1] = 0;
    memcpy(out->name, c->name, sizeof out->name);
    out->name[sizeof out->name - 1] = 0;
    out->n_layers = c->n_layers;
    out->n_embd = c->n_embd;
    out->n_ff = c->n_ff;
    out->n_head = c->n_head;
    out->n_head_kv = c->n_head_kv;
    out->head_dim = c->head_dim;
    out->n_vocab = c->n_vocab;
    out->n_ctx_train = c->n_ctx_train;
    out->n_rot = c->n_rot;
    out->rope_neox = c->rope_type == KVQ_ROPE_NEOX;
    out->rope_base = c->rope_base;
    out->rope_base_swa = c->rope_base_swa;
    out->rope_freq_scale = c->rope_freq_scale;
    out->has_rope_freqs = m->rope_freqs != NULL;
    out->n_swa = c->n_swa;
    for (int l = 0; l < c->n_layers; l++) out->n_swa_layers += c->sliding_window[l] > 0;
    out->sliding_window = c->sliding_window;
    out->norm_eps = c->norm_eps;
    out->attn_scale = c->attn_scale;
    out->embd_scale = c->embd_scale;
    out->final_softcap = c->final_softcap;
    out->gelu = c->act == KVQ_ACT_GELU_TANH;
    out->qk_norm = c->qk_norm;
    out->post_norms = c->post_norms;
    out->qkv_bias = c->qkv_bias;
    out->tied_output = m->tied_output;
    out->has_tokenizer = m->tok != NULL;
    out->has_chat_template = kvq_gguf_find_kv(m->gguf, "tokenizer.chat_template") != NULL;
    out->bos = m->tok ? kvq_tok_bos(m->tok) : -1;
    out->eos = m->tok ? kvq_tok_eos(m->tok) : -1;
    if (m->tok && out->bos >= 0) { /* does encoding a text add BOS? */
        int32_t ids[8];
        size_t n = 0;
        out->add_bos = kvq_tok_encode(m->tok, "a", 1, 1, 0, ids, 8, &n) == KVQ_OK && n > 0 && ids[0] == out->bos;
    }
    out->n_weight_bytes = m->n_weight_bytes;
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        out->type_count[t < KVQ_GGML_TYPE_SLOTS ? t : KVQ_GGML_TYPE_SLOTS - 1] += m->type_count[t];
    out->n_coded = m->n_coded_tensors;
    double bytes = 0.0, values = 0.0;
    for (int i = 0; i < m->n_wmats; i++) {
        bytes += (double)kvq_wmat_code_bytes(m->wmats[i]) + (double)kvq_wmat_stats_bytes(m->wmats[i]);
        values += (double)m->wmats[i]->rows * (double)m->wmats[i]->cols;
    }
    out->coded_bits = values > 0.0 ? bytes * 8.0 / values : 0.0;
    snprintf(out->weights_spec, sizeof out->weights_spec, "%s", m->weights_spec);
    return KVQ_OK;
}

int kvq_model_layer_window(const kvq_model *m, int layer) {
    if (!m || layer < 0 || layer >= m->cfg.n_layers) return -1;
    return m->cfg.sliding_window[layer];
}

const kvq_gguf_file *kvq_model_gguf(const kvq_model *m) { return m ? m->gguf : NULL; }

/* ---- the model's tokenizer -------------------------------------------------- */
int kvq_tokenize(const kvq_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                 size_t cap, size_t *n_out) {
    if (!m || (!text && len) || !n_out || (!out && cap)) return KVQ_ERR_NULL;
    if (!m->tok) return KVQ_ERR_UNSUPPORTED;
    return kvq_tok_encode(m->tok, text ? text : "", len, add_special, parse_special, out, cap, n_out);
}

int kvq_token_to_piece(const kvq_model *m, int32_t id, char *buf, size_t cap, size_t *n_out) {
    if (!m || !n_out || (!buf && cap)) return KVQ_ERR_NULL;
    if (!m->tok) return KVQ_ERR_UNSUPPORTED;
    return kvq_tok_decode_piece(m->tok, id, buf, cap, n_out);
}

int kvq_token_is_eog(const kvq_model *m, int32_t id) { return m && m->tok ? kvq_tok_is_eog(m->tok, id) : 0; }

int kvq_chat_format(const kvq_model *m, const char *system, const char *user, char *buf, size_t cap, size_t *n_out) {
    if (!m || !user || !n_out || (!buf && cap)) return KVQ_ERR_NULL;
    if (!m->tok) return KVQ_ERR_UNSUPPORTED;
    return kvq_tok_chat_format(m->tok, m->cfg.arch_name, system, user, buf, cap, n_out);
}

/* ---- sessions ------------------------------------------------------------------ */
void kvq_session_params_set_policy(kvq_session_params *p, const kvq_policy *policy) {
    if (!p || !policy) return;
    kvq_cache_config cc;
    memset(&cc, 0, sizeof cc);
    kvq_policy_to_cache_config(policy, &cc); /* the one mapping of policy fields */
    p->k_spec = cc.k_spec;
    p->v_spec = cc.v_spec;
    p->f16_window = cc.f16_window;
    p->f16_layers = cc.f16_layers;
    p->n_f16_layers = cc.n_f16_layers;
    p->compress_sliding = cc.compress_sliding;
    p->calib_tokens = cc.outlier_calib_tokens;
    p->sink_tokens = cc.sink_tokens;
}

/* ---- samplers ------------------------------------------------------------------ */
kvq_sampler_params kvq_sampler_run_params(void) {
    kvq_sampler_params p = kvq_sampler_default_params();
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    return p;
}

int kvq_sampler_create(kvq_sampler **out, const kvq_sampler_params *p, size_t n_vocab) {
    if (!out || !p) return KVQ_ERR_NULL;
    kvq_sampler *s = calloc(1, sizeof *s);
    if (!s) return KVQ_ERR_NOMEM;
    int rc = kvq_sampler_init(s, p, n_vocab);
    if (rc) { free(s); return rc; }
    *out = s;
    return KVQ_OK;
}

void kvq_sampler_free(kvq_sampler *s) {
    if (!s) return;
    kvq_sampler_release(s);
    free(s);
}

/* ---- generation -------------------------------------------------------------- */
int kvq_generate(kvq_session *s, kvq_sampler *smp, const int32_t *prompt, size_t n_prompt, size_t max_tokens,
                 kvq_token_fn on_token, void *user, size_t *n_out, kvq_stop *stop) {
    if (!s || !smp || (!prompt && n_prompt)) return KVQ_ERR_NULL;
    if (n_prompt == 0) return KVQ_ERR_INVALID_ARG; /* the first logits come from the prompt */
    const kvq_model *m = kvq_session_model(s);
    const size_t n_vocab = (size_t)m->cfg.n_vocab;
    const size_t ctx_max = m->cfg.n_ctx_train > 0 ? (size_t)m->cfg.n_ctx_train : SIZE_MAX;
    if (n_out) *n_out = 0;
    if (stop) *stop = KVQ_STOP_LENGTH;
    float *logits = malloc(sizeof(float) * n_vocab);
    if (!logits) return KVQ_ERR_NOMEM;
    int rc = KVQ_OK;
    for (size_t i = 0; i < n_prompt && !rc; i++) rc = kvq_sampler_accept(smp, prompt[i]);
    if (!rc) rc = kvq_session_eval(s, prompt, n_prompt, logits, 0);
    size_t done = 0;
    kvq_stop why = KVQ_STOP_LENGTH;
    while (!rc && done < max_tokens) {
        int32_t next;
        if ((rc = kvq_sampler_sample(smp, logits, &next))) break;
        if (kvq_token_is_eog(m, next)) { why = KVQ_STOP_EOG; break; }
        int halt = on_token ? on_token(user, next) : 0;
        if ((rc = kvq_sampler_accept(smp, next))) break;
        done++;
        if (halt) { why = KVQ_STOP_CALLBACK; break; }
        if (done == max_tokens) break;
        if (kvq_session_pos(s) >= ctx_max) { why = KVQ_STOP_CONTEXT; break; }
        rc = kvq_session_eval(s, &next, 1, logits, 0);
    }
    free(logits);
    if (n_out) *n_out = done;
    if (stop) *stop = why;
    return rc;
}

size_t kvq_engine_struct_size(const char *name) {
    if (!name) return 0;
    if (!strcmp(name, "kvq_model_info")) return sizeof(kvq_model_info);
    if (!strcmp(name, "kvq_session_params")) return sizeof(kvq_session_params);
    if (!strcmp(name, "kvq_sampler_params")) return sizeof(kvq_sampler_params);
    if (!strcmp(name, "kvq_gguf_info")) return sizeof(kvq_gguf_info);
    if (!strcmp(name, "kvq_gguf_tensor_info")) return sizeof(kvq_gguf_tensor_info);
    return 0;
}
