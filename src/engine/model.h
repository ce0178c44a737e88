/*
 * Transformer models read from GGUF (llama, qwen2, gemma3) and the forward
 * pass over a kvq_cache.
 *
 * model: hyperparameters (kvq_model_config) and weight views into the GGUF
 *        mapping (no copy, except small 1-D vectors converted to f32).
 * session: one sequence: a kvq_cache, the run state (activation buffers) and
 *        the position. kvq_session_eval() runs a batch of tokens (prefill)
 *        or one token (decode) and returns logits.
 *
 * Architecture conventions (llama.cpp's, checked in docs/MODELS.md):
 *   llama  pre-norm RMSNorm, SwiGLU, RoPE "normal" (adjacent pairs 2i, 2i+1)
 *   qwen2  as llama + biases on q/k/v, RoPE "neox" (pairs i, i + n_rot/2)
 *   gemma3 embeddings x sqrt(n_embd), RMSNorm weights as stored (+1 already
 *          folded in by the converter), QK-norm before RoPE, post-attention
 *          and post-FFN norms, GeGLU (tanh GELU), neox RoPE with base 10000
 *          on sliding-window layers (layer il is local iff il % 6 < 5),
 *          attention scale 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the
 *          62-layer 27B model), keys cached after RoPE.
 */
#ifndef KVQ_ENGINE_MODEL_H
#define KVQ_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"
#include "gguf.h"
#include "kvq.h"
#include "kvq_engine.h"
#include "tokenizer.h"



typedef enum kvq_arch { KVQ_ARCH_LLAMA = 0, KVQ_ARCH_QWEN2 = 1, KVQ_ARCH_GEMMA3 = 2 } kvq_arch;
typedef enum kvq_rope_type { KVQ_ROPE_NORM = 0, KVQ_ROPE_NEOX = 2 } kvq_rope_type;
typedef enum kvq_act { KVQ_ACT_SILU = 0, KVQ_ACT_GELU_TANH = 1 } kvq_act;

typedef struct kvq_model_config {
    kvq_arch arch;
    char arch_name[32];       /* general.architecture */
    char name[96];            /* general.name (may be empty) */
    int n_layers;
    int n_embd;
    int n_ff;
    int n_head, n_head_kv;
    int head_dim;             /* attention.key_length (= value_length) */
    int n_vocab;
    int n_ctx_train;          /* context_length */
    int n_rot;                /* rotated dims per head (rope.dimension_count) */
    kvq_rope_type rope_type;
    float rope_base;          /* rope.freq_base (global layers) */
    float rope_base_swa;      /* sliding-window layers */
    float rope_freq_scale;    /* 1 / rope.scaling.factor (linear), global layers */
    float norm_eps;
    float attn_scale;         /* multiplies q.k */
    float embd_scale;         /* multiplies the token embeddings */
    float final_softcap;      /* 0: none; else logits = c * tanh(logits / c) */
    kvq_act act;
    int qk_norm;              /* per-head RMSNorm of q and k */
    int post_norms;           /* post-attention and post-FFN RMSNorm */
    int qkv_bias;
    int sliding_window[KVQ_MAX_LAYERS]; /* per layer, 0 = global */
    int n_swa;                /* attention.sliding_window (0 if none) */
} kvq_model_config;

typedef struct kvq_layer {
    kvq_ggml_matrix wq, wk, wv, wo;           /* (n_head*hd, n_embd), (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    kvq_ggml_matrix w_gate, w_up, w_down;     /* (n_ff, n_embd) x2, (n_embd, n_ff) */
    const float *attn_norm, *ffn_norm;    /* (n_embd) */
    const float *q_norm, *k_norm;         /* (head_dim), gemma3 */
    const float *post_attn_norm, *post_ffw_norm; /* (n_embd), gemma3 */
    const float *bq, *bk, *bv;            /* biases, qwen2 */
} kvq_layer;

struct kvq_model {
    kvq_gguf_file *gguf;          /* owned: the weights point into its mapping */
    kvq_tokenizer *tok;           /* owned; NULL when the file has no tokenizer */
    kvq_model_config cfg;
    kvq_ggml_matrix tok_embd;     /* (n_vocab, n_embd) */
    kvq_ggml_matrix output;       /* (n_vocab, n_embd); token_embd when tied */
    int tied_output;
    const float *output_norm; /* (n_embd) */
    const float *rope_freqs;  /* (n_rot/2) frequency divisors or NULL */
    kvq_layer *layers;        /* (n_layers) */
    float *owned;             /* f32 copies of the 1-D tensors */
    size_t n_weight_bytes;    /* bytes of all weight tensors */
    int type_count[GGML_TYPE_COUNT]; /* tensors per ggml type */
    /* kvq-coded weights (kvq_model_quantize_weights; model_weights.c) */
    struct kvq_wmat **wmats;  /* owned, n_wmats of them */
    char (*wmat_names)[64];   /* their tensor names */
    int n_wmats;
    int n_coded_tensors;      /* tensors computed from codes (a tied output counts once) */
    char weights_spec[64];    /* "tq-mse:4@64"-like, "" when none */
    uint64_t weights_seed;    /* the plans' seed */
};

/* kvq_model_load (include/kvq_engine.h) opens the file and calls this; it
 * takes ownership of g on success. The tokenizer is built when the file has
 * the tokenizer.ggml.* keys (m->tok stays NULL otherwise). */
int kvq_model_from_gguf(kvq_model **out, kvq_gguf_file *g, char *err, size_t err_cap);

/* Frees the coded weights (model_weights.c). */
void kvq_model_free_weights(kvq_model *m);
/* Adopts a coded matrix read from the file (model.c's loader): the model
 * owns w from then on, also on failure (KVQ_ERR_NOMEM). */
int kvq_model_adopt_wmat(kvq_model *m, struct kvq_wmat *w, const char *name);
/* The name of the stats tensor of a calibrated coded tensor (docs/FORMAT.md):
 * "X.weight" -> "X" KVQ_STATS_SUFFIX, another name + KVQ_STATS_SUFFIX; the
 * name is n bytes (not NUL-terminated). 0, or -1 if it does not fit cap. */
#define KVQ_STATS_SUFFIX ".kvq_stats"
int kvq_stats_tensor_name(const char *name, size_t n, char *out, size_t cap);
/* 1 if the n bytes of name end with KVQ_STATS_SUFFIX. */
int kvq_is_stats_tensor(const char *name, size_t n);

/* "norm" / "neox". */
const char *kvq_rope_type_name(kvq_rope_type t);

/* ------------------------------------------------------------------------ */
/* Sessions                                                                 */
/* ------------------------------------------------------------------------ */
/* Sessions: include/kvq_engine.h (kvq_session_create, kvq_session_eval, ...). */
/* The model a session runs. */
const kvq_model *kvq_session_model(const kvq_session *s);

#endif
