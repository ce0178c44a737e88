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

#define KVQ_MAX_LAYERS 512

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
    ggml_matrix wq, wk, wv, wo;           /* (n_head*hd, n_embd), (n_kv*hd, n_embd) x2, (n_embd, n_head*hd) */
    ggml_matrix w_gate, w_up, w_down;     /* (n_ff, n_embd) x2, (n_embd, n_ff) */
    const float *attn_norm, *ffn_norm;    /* (n_embd) */
    const float *q_norm, *k_norm;         /* (head_dim), gemma3 */
    const float *post_attn_norm, *post_ffw_norm; /* (n_embd), gemma3 */
    const float *bq, *bk, *bv;            /* biases, qwen2 */
} kvq_layer;

typedef struct kvq_model {
    gguf_file *gguf;          /* owned: the weights point into its mapping */
    kvq_model_config cfg;
    ggml_matrix tok_embd;     /* (n_vocab, n_embd) */
    ggml_matrix output;       /* (n_vocab, n_embd); token_embd when tied */
    int tied_output;
    const float *output_norm; /* (n_embd) */
    const float *rope_freqs;  /* (n_rot/2) frequency divisors or NULL */
    kvq_layer *layers;        /* (n_layers) */
    float *owned;             /* f32 copies of the 1-D tensors */
    size_t n_weight_bytes;    /* bytes of all weight tensors */
    int type_count[GGML_TYPE_COUNT]; /* tensors per ggml type */
} kvq_model;

/*
 * Loads a model: maps the file (prefaulting its pages), reads the
 * hyperparameters and checks every tensor's presence, shape and type. Errors: KVQ_ERR_IO, KVQ_ERR_FORMAT /
 * KVQ_ERR_TRUNCATED (bad file or missing/misshaped tensor),
 * KVQ_ERR_UNSUPPORTED (architecture or weight type), KVQ_ERR_NOMEM.
 * err (may be NULL) receives a one-line reason.
 */
int kvq_model_load(kvq_model **out, const char *path, char *err, size_t err_cap);
/* The same from an already opened file; takes ownership of g on success. */
int kvq_model_from_gguf(kvq_model **out, gguf_file *g, char *err, size_t err_cap);
void kvq_model_free(kvq_model *m);

/* "norm" / "neox". */
const char *kvq_rope_type_name(kvq_rope_type t);

/* ------------------------------------------------------------------------ */
/* Sessions                                                                 */
/* ------------------------------------------------------------------------ */
typedef struct kvq_session kvq_session;

/* Called after each layer's Q/K/V are computed (queries and keys after their
 * norms and RoPE), before K/V enter the cache: q is (ntok, n_head * head_dim),
 * k and v are (ntok, n_head_kv * head_dim). */
typedef void (*kvq_kv_hook)(void *user, int layer, size_t pos0, const float *q, const float *k, const float *v,
                            size_t ntok);
/* Called after each layer's attention output is computed from the cache (before
 * the output projection): attn_out is (ntok, width), width = n_head * head_dim,
 * for positions pos0 .. pos0+ntok-1 (used by kvq kld for per-layer errors). */
typedef void (*kvq_attn_hook)(void *user, int layer, size_t pos0, const float *attn_out, size_t ntok, int width);

typedef struct kvq_session_params {
    const char *k_spec, *v_spec;  /* cache methods (NULL = f16) */
    int f16_window;
    const int *f16_layers;        /* copied */
    int n_f16_layers;
    int compress_sliding;
    int calib_tokens;             /* tokens kept f16 until per-head plans calibrate (0 = 128) */
    uint64_t seed;
    int n_batch;                  /* tokens per forward chunk (0 = 256) */
    kvq_isa isa;                  /* weight kernels (KVQ_ISA_BEST) */
    int f32_acts;                 /* 1: quantized weights dotted with f32 activations (no q8 rounding) */
    kvq_kv_hook kv_hook;
    void *kv_hook_user;
    kvq_attn_hook attn_hook;      /* optional (NULL = none) */
    void *attn_hook_user;
} kvq_session_params;

/* Defaults: f16 cache, no window, n_batch 256, best kernels, q8 activations. */
kvq_session_params kvq_session_default_params(void);

/*
 * A session over model m (which must outlive it). pool may be NULL (one
 * thread); it is used by every eval. Errors: cache spec errors as
 * kvq_cache_create, KVQ_ERR_UNSUPPORTED (isa), KVQ_ERR_NOMEM.
 */
int kvq_session_create(kvq_session **out, const kvq_model *m, const kvq_session_params *p, kvq_pool *pool);
void kvq_session_free(kvq_session *s);

/*
 * Runs n tokens at positions pos .. pos+n-1 (pos = tokens already evaluated)
 * as one batch (in chunks of n_batch). logits: NULL (none computed), or
 * (all_logits ? n : 1) x n_vocab floats: every position's, or the last one's.
 * Errors: KVQ_ERR_INVALID_ARG (token id out of range, n == 0), cache errors
 * (e.g. KVQ_ERR_RANGE if a value does not fit the f16 cache). On error the
 * session's position is unchanged and the cache is truncated back to it;
 * that can only fail when a sliding-window layer already dropped positions
 * the next query needs (then kvq_session_truncate returns KVQ_ERR_STATE and
 * the session should be discarded).
 */
int kvq_session_eval(kvq_session *s, const int32_t *tokens, size_t n, float *logits, int all_logits);

size_t kvq_session_pos(const kvq_session *s);
/* Forgets positions >= pos. */
int kvq_session_truncate(kvq_session *s, size_t pos);
kvq_cache *kvq_session_cache(kvq_session *s);
const char *kvq_session_kernels(const kvq_session *s);

#endif
