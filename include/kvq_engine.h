/*
 * kvq engine — a small GGUF inference engine (llama, qwen2, gemma3) whose
 * attention runs on a kvq compressed KV cache. libkvq-engine, on top of
 * libkvq (include/kvq.h); docs/ENGINE.md describes the forward pass.
 *
 * Objects (opaque; *_free accepts NULL):
 *   kvq_gguf_file  a GGUF file mapped read-only, for inspection
 *   kvq_model      hyperparameters, weights (views into the mapped file) and
 *                  the tokenizer; immutable once loaded, shared read-only by
 *                  any number of sessions and threads
 *   kvq_session    one sequence: its kvq_cache, activation buffers, position
 *   kvq_sampler    token sampler with its own seeded RNG
 *
 * Conventions are libkvq's: functions return KVQ_OK or a negative KVQ_ERR_*
 * (kvq_strerror names it); functions that take `err, err_cap` also write a
 * one-line reason there (NUL-terminated, truncated to err_cap; err may be
 * NULL). Nothing prints, exits or aborts; there is no global mutable state.
 * A session (and a sampler) is used by one thread at a time.
 */
#ifndef KVQ_ENGINE_H
#define KVQ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* GGUF files (read-only inspection)                                         */
/* ------------------------------------------------------------------------ */
typedef struct kvq_gguf_file kvq_gguf_file;

typedef struct kvq_gguf_info {
    uint32_t version;     /* 2 or 3 */
    uint32_t alignment;   /* of the tensor data */
    uint64_t n_kv;        /* metadata keys */
    uint64_t n_tensors;
    uint64_t data_offset; /* first byte of the tensor data */
    uint64_t file_size;
} kvq_gguf_info;

typedef struct kvq_gguf_tensor_info {
    char name[128];       /* truncated (NUL-terminated) if longer */
    uint32_t type;        /* ggml type id (kvq_ggml_type_name) */
    uint32_t n_dims;      /* 1..4 */
    uint64_t ne[4];       /* elements per dimension, ne[0] innermost */
    uint64_t n_bytes;
    uint64_t offset;      /* from data_offset */
} kvq_gguf_tensor_info;

/* Maps and validates a GGUF file. KVQ_ERR_IO, KVQ_ERR_FORMAT, KVQ_ERR_TRUNCATED. */
KVQ_API int kvq_gguf_open(kvq_gguf_file **out, const char *path);
KVQ_API void kvq_gguf_close(kvq_gguf_file *g);
/* Header figures of an open file. */
KVQ_API int kvq_gguf_get_info(const kvq_gguf_file *g, kvq_gguf_info *out);
/* Tensor i (0 <= i < n_tensors); KVQ_ERR_INVALID_ARG out of range. */
KVQ_API int kvq_gguf_get_tensor(const kvq_gguf_file *g, uint64_t i, kvq_gguf_tensor_info *out);
/*
 * The string value of metadata key `key` into buf (NUL-terminated).
 * KVQ_ERR_INVALID_ARG if the key is missing, KVQ_ERR_FORMAT if it is not a
 * string, KVQ_ERR_RANGE if it does not fit (buf holds the truncated text).
 */
KVQ_API int kvq_gguf_get_string(const kvq_gguf_file *g, const char *key, char *buf, size_t cap);
/* Name of a ggml tensor type ("q4_0", "f16", ...); "?" when unknown. */
KVQ_API const char *kvq_ggml_type_name(uint32_t type);

/* ------------------------------------------------------------------------ */
/* Models                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct kvq_model kvq_model;

#define KVQ_MAX_LAYERS 512     /* layers a model may have */
#define KVQ_GGML_TYPE_SLOTS 64 /* entries of kvq_model_info.type_count */

typedef struct kvq_model_info {
    char arch[32];            /* general.architecture: "llama", "qwen2", "gemma3" */
    char name[96];            /* general.name ("" if none) */
    int n_layers;
    int n_embd;
    int n_ff;
    int n_head, n_head_kv;    /* query heads, key/value heads (grouped-query attention) */
    int head_dim;
    int n_vocab;
    int n_ctx_train;          /* trained context length (0 if unknown) */
    int n_rot;                /* rotated dims per head */
    int rope_neox;            /* 1: neox pairs (i, i + n_rot/2); 0: adjacent pairs */
    float rope_base, rope_base_swa, rope_freq_scale;
    int has_rope_freqs;       /* per-frequency factors stored */
    int n_swa;                /* sliding-window size (0: none) */
    int n_swa_layers;         /* layers with a sliding window */
    const int *sliding_window;/* (n_layers) per layer: window, 0 = global (points into the model) */
    float norm_eps, attn_scale, embd_scale, final_softcap;
    int gelu;                 /* 1: GeGLU (tanh GELU); 0: SwiGLU */
    int qk_norm, post_norms, qkv_bias, tied_output;
    int has_tokenizer;        /* the file carries a tokenizer (tokenize/detokenize work) */
    int has_chat_template;    /* tokenizer.chat_template present (an instruct model) */
    int add_bos;              /* kvq_tokenize(add_special = 1) starts with BOS */
    int32_t bos, eos;         /* special tokens (-1 if none) */
    uint64_t n_weight_bytes;  /* all weight tensors (coded ones at their coded size) */
    int type_count[KVQ_GGML_TYPE_SLOTS]; /* tensors per ggml type id (last slot: ids >= 63) */
    int n_coded;              /* tensors computed from kvq codes (kvq_model_quantize_weights) */
    double coded_bits;        /* their bits per weight, every stored byte counted (codes, calibrated plans' stats; 0 if none) */
    char weights_spec[64];    /* their spec ("" if none) */
} kvq_model_info;

/*
 * sizeof of a public struct of this header, by name ("kvq_model_info",
 * "kvq_session_params", "kvq_sampler_params", "kvq_gguf_info",
 * "kvq_gguf_tensor_info"); 0 for another name. Bindings that mirror a struct
 * (python/kvq/_lib.py) check their layout's size against it when they load
 * the library.
 */
KVQ_API size_t kvq_engine_struct_size(const char *name);

/*
 * Loads a model: maps the file, reads the hyperparameters, checks every
 * tensor's presence, shape and type, and builds the tokenizer when the file
 * has one. Errors: KVQ_ERR_IO (missing or unreadable file, a directory),
 * KVQ_ERR_FORMAT / KVQ_ERR_TRUNCATED (bad file, missing or misshaped tensor),
 * KVQ_ERR_UNSUPPORTED (architecture or weight type), KVQ_ERR_NOMEM; the
 * reason goes to err.
 */
KVQ_API int kvq_model_load(kvq_model **out, const char *path, char *err, size_t err_cap);
KVQ_API void kvq_model_free(kvq_model *m);
KVQ_API int kvq_model_get_info(const kvq_model *m, kvq_model_info *out);
/*
 * Re-codes the model's weight matrices with a kvq codec, in memory (issue 16;
 * docs/METHODS.md "Weights"): spec "METHOD[@B]" is a codec spec that can
 * reconstruct (tq-mse:4, tq-mse:3+chscale, q8, ...) and B the values per
 * rotated block of a row (default: the largest power of two <= 256 dividing
 * the row). Each row's block is one codec record; products are computed on
 * the codes (the activation block rotated once, then the codec's fused
 * score). Tensors whose name contains one of the comma-separated items of
 * keep stay as stored (NULL: KVQ_WEIGHTS_KEEP_DEFAULT; "none": code them
 * all). seed: the plans' rotations. Call before creating sessions. Errors
 * (reason naming the tensor in err, model unchanged): KVQ_ERR_INVALID_ARG
 * (a block that does not divide a row, weights already coded), the codec's
 * errors for the spec (KVQ_ERR_NO_DECODE for key-only methods),
 * KVQ_ERR_NOMEM.
 */
#define KVQ_WEIGHTS_KEEP_DEFAULT "token_embd,output"
KVQ_API int kvq_model_quantize_weights(kvq_model *m, const char *spec, const char *keep, uint64_t seed,
                                       kvq_pool *pool, char *err, size_t err_cap);
/*
 * Writes the model as a GGUF file (kvq quantize): the source file's metadata
 * and tensors, the coded ones as kvq-coded tensors (docs/FORMAT.md "Coded
 * weights in GGUF") that kvq_model_load reads back; readers that do not know
 * kvq's tensor type refuse the file. Written to PATH.tmp and renamed, so a
 * failure leaves no half file. Calibrated specs (+center, +chscale,
 * +outliers) are saved with their plans' statistics as an f16 tensor beside
 * each matrix (kvq.weights.version 3; a model loaded from a version-2 file,
 * f32 statistics, is saved as version 2). KVQ_ERR_UNSUPPORTED for a source tensor
 * whose type this writer cannot size or a name too long for its stats
 * tensor; KVQ_ERR_IO; the reason in err.
 */
KVQ_API int kvq_model_save(const kvq_model *m, const char *path, char *err, size_t err_cap);
/* The sliding window of a layer (0: global attention), -1 if layer is out of range. */
KVQ_API int kvq_model_layer_window(const kvq_model *m, int layer);
/* The model's file (for metadata and tensors). */
KVQ_API const kvq_gguf_file *kvq_model_gguf(const kvq_model *m);

/* ------------------------------------------------------------------------ */
/* Tokenizer (the model's)                                                   */
/* ------------------------------------------------------------------------ */
/*
 * Tokenizes text[0..len) (UTF-8). add_special: BOS/EOS as the model adds
 * them; parse_special: control tokens written in the text ("<|im_start|>")
 * become their ids. Writes at most cap ids and the total count to *n_out;
 * KVQ_ERR_RANGE with *n_out = the count needed when they do not fit.
 * KVQ_ERR_UNSUPPORTED if the model has no tokenizer.
 */
KVQ_API int kvq_tokenize(const kvq_model *m, const char *text, size_t len, int add_special, int parse_special,
                         int32_t *out, size_t cap, size_t *n_out);
/*
 * The bytes of one token for streaming output (a UTF-8 character can span
 * tokens; control tokens give 0 bytes). Writes at most cap bytes (no NUL) and
 * their count to *n_out; KVQ_ERR_RANGE with *n_out = the size needed.
 * KVQ_ERR_INVALID_ARG for an id out of range.
 */
KVQ_API int kvq_token_to_piece(const kvq_model *m, int32_t id, char *buf, size_t cap, size_t *n_out);
/* 1 if id ends generation (EOS, end-of-turn), else 0. */
KVQ_API int kvq_token_is_eog(const kvq_model *m, int32_t id);
/*
 * One user turn and the assistant's prefix in the model's chat format
 * (ChatML for SmolLM2/Qwen2, Gemma turns for Gemma). system: NULL for the
 * template's default, "" for none. Tokenize the result with add_special = 1,
 * parse_special = 1. Writes the text and a NUL; KVQ_ERR_RANGE with *n_out =
 * length when cap < length + 1; KVQ_ERR_UNSUPPORTED: no known format.
 */
KVQ_API int kvq_chat_format(const kvq_model *m, const char *system, const char *user, char *buf, size_t cap,
                            size_t *n_out);

/* ------------------------------------------------------------------------ */
/* Sessions                                                                  */
/* ------------------------------------------------------------------------ */
typedef struct kvq_session kvq_session;

/* Called after each layer's Q/K/V are computed (queries and keys after their
 * norms and RoPE), before K/V enter the cache: q is (ntok, n_head * head_dim),
 * k and v are (ntok, n_head_kv * head_dim). */
typedef void (*kvq_kv_hook)(void *user, int layer, size_t pos0, const float *q, const float *k, const float *v,
                            size_t ntok);
/* Called after each layer's attention output is computed from the cache
 * (before the output projection): attn_out is (ntok, width), width =
 * n_head * head_dim, for positions pos0 .. pos0+ntok-1. */
typedef void (*kvq_attn_hook)(void *user, int layer, size_t pos0, const float *attn_out, size_t ntok, int width);

typedef struct kvq_session_params {
    const char *k_spec, *v_spec;  /* cache methods (NULL = f16) */
    int f16_window;               /* the W most recent tokens stay f16 */
    const int *f16_layers;        /* layers kept f16 (negative: from the end); copied */
    int n_f16_layers;
    int compress_sliding;         /* 1: sliding-window layers compressed too */
    int calib_tokens;             /* tokens kept f16 until per-head plans calibrate (0 = 128) */
    uint64_t seed;                /* cache rotations/projections */
    int n_batch;                  /* tokens per forward chunk (0 = 256) */
    kvq_isa isa;                  /* weight kernels (KVQ_ISA_BEST) */
    int f32_acts;                 /* 1: quantized weights dotted with f32 activations (no q8 rounding) */
    kvq_kv_hook kv_hook;          /* optional (NULL = none) */
    void *kv_hook_user;
    kvq_attn_hook attn_hook;      /* optional (NULL = none) */
    void *attn_hook_user;
    int sink_tokens;              /* the first N positions stay f16 for good (attention sinks; 0 = none) */
} kvq_session_params;

/* Defaults: f16 cache, no window, n_batch 256, best kernels, q8 activations. */
KVQ_API kvq_session_params kvq_session_default_params(void);
/* Sets the cache fields of *p (k_spec .. calib_tokens, sink_tokens) from a policy, which must outlive the session's creation. */
KVQ_API void kvq_session_params_set_policy(kvq_session_params *p, const kvq_policy *policy);

/*
 * A session over model m (which must outlive it). pool may be NULL (one
 * thread); it is used by every eval. Errors: cache errors as
 * kvq_cache_create (a bad spec, an f16 layer out of range),
 * KVQ_ERR_UNSUPPORTED (isa), KVQ_ERR_NOMEM.
 */
KVQ_API int kvq_session_create(kvq_session **out, const kvq_model *m, const kvq_session_params *p, kvq_pool *pool);
KVQ_API void kvq_session_free(kvq_session *s);

/*
 * Runs n tokens at positions pos .. pos+n-1 (pos = tokens already evaluated)
 * as one batch (in chunks of n_batch). logits: NULL (none computed), or
 * (all_logits ? n : 1) x n_vocab floats: every position's, or the last one's.
 * Errors: KVQ_ERR_INVALID_ARG (token id out of range, n == 0), cache errors
 * (e.g. KVQ_ERR_RANGE if a value does not fit the f16 cache). On error the
 * session's position is unchanged.
 */
KVQ_API int kvq_session_eval(kvq_session *s, const int32_t *tokens, size_t n, float *logits, int all_logits);
/* Tokens evaluated so far. */
KVQ_API size_t kvq_session_pos(const kvq_session *s);
/* Forgets positions >= pos (KVQ_ERR_STATE: a sliding-window layer already dropped what pos needs). */
KVQ_API int kvq_session_truncate(kvq_session *s, size_t pos);
/* The session's cache (memory figures, kvq_cache_len, ...); owned by the session. */
KVQ_API kvq_cache *kvq_session_cache(kvq_session *s);
/* Names of the weight kernels in use ("avx512-vnni q8 acts"). */
KVQ_API const char *kvq_session_kernels(const kvq_session *s);
/* Bytes of the session's activation buffers (the run state beside the cache). */
KVQ_API size_t kvq_session_state_bytes(const kvq_session *s);

/* ------------------------------------------------------------------------ */
/* Sampling and generation                                                   */
/* ------------------------------------------------------------------------ */
/*
 * Steps, in llama.cpp's default order: repetition penalty over the last
 * repeat_last_n accepted tokens; temperature <= 0 (or top_k == 1): argmax;
 * top-k; top-p; min-p; sample from softmax(logit / temperature).
 */
typedef struct kvq_sampler_params {
    float temperature;    /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off (must be > 0) */
    int repeat_last_n;    /* window of the penalty (0: off) */
    uint64_t seed;
} kvq_sampler_params;

typedef struct kvq_sampler kvq_sampler;

/* Greedy, everything off, seed 0. */
KVQ_API kvq_sampler_params kvq_sampler_default_params(void);
/* The defaults of `kvq run`: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalty (last 64). */
KVQ_API kvq_sampler_params kvq_sampler_run_params(void);
/* Errors: KVQ_ERR_INVALID_ARG (n_vocab 0, NaN parameters, repeat_penalty <= 0, ...), KVQ_ERR_NOMEM. */
KVQ_API int kvq_sampler_create(kvq_sampler **out, const kvq_sampler_params *p, size_t n_vocab);
KVQ_API void kvq_sampler_free(kvq_sampler *s);
/* Forgets the accepted tokens and restarts the RNG from seed. */
KVQ_API void kvq_sampler_reset(kvq_sampler *s, uint64_t seed);
/* Records a token (prompt or generated) for the repetition penalty. */
KVQ_API int kvq_sampler_accept(kvq_sampler *s, int32_t token);
/* Picks the next token from logits[0..n_vocab) (not modified); does not accept it.
 * KVQ_ERR_NONFINITE when a logit is NaN or all are -inf. */
KVQ_API int kvq_sampler_sample(kvq_sampler *s, const float *logits, int32_t *out);

/* Why kvq_generate stopped. */
typedef enum kvq_stop {
    KVQ_STOP_LENGTH = 0,   /* max_tokens generated */
    KVQ_STOP_EOG = 1,      /* an end-of-generation token was sampled (not emitted) */
    KVQ_STOP_CONTEXT = 2,  /* the model's trained context is full */
    KVQ_STOP_CALLBACK = 3, /* the callback returned non-zero */
} kvq_stop;

/* Receives each generated token; return non-zero to stop. */
typedef int (*kvq_token_fn)(void *user, int32_t token);

/*
 * Generation as `kvq run` does it: accepts the prompt's tokens into the
 * sampler, evaluates them, then repeatedly samples a token, stops at an
 * end-of-generation token, hands it to on_token (may be NULL), accepts it and
 * evaluates it, until max_tokens are generated or the trained context is
 * full. The session continues from its position (the prompt follows what
 * was evaluated before). *n_out (may be NULL): tokens generated; *stop (may
 * be NULL): why it stopped. Errors as kvq_session_eval and
 * kvq_sampler_sample; KVQ_ERR_INVALID_ARG for an empty prompt (the first
 * logits come from it).
 */
KVQ_API int kvq_generate(kvq_session *s, kvq_sampler *smp, const int32_t *prompt, size_t n_prompt, size_t max_tokens,
                         kvq_token_fn on_token, void *user, size_t *n_out, kvq_stop *stop);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_ENGINE_H */
