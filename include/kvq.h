/*
 * kvq — KV-cache compression for LLM inference.
 *
 * kvq compresses attention keys and values to 1..8 bits per value (rotation +
 * Lloyd-Max scalar codebooks: TurboQuant, QJL, PolarQuant, RVQ, an outlier
 * two-stream variant and scalar int8/int4 baselines) and computes attention
 * directly on the compressed codes.
 *
 * Conventions
 *  - Every function that can fail returns an int status: KVQ_OK (0) or a
 *    negative KVQ_ERR_* code; kvq_strerror() names it. The library never
 *    prints, exits or aborts. On error, output arguments are left untouched
 *    unless the function says otherwise.
 *  - Objects are opaque, created by *_create and released by *_free (free
 *    accepts NULL). There is no global mutable state: a plan is immutable
 *    once created and may be shared read-only by any number of threads.
 *  - Vectors are rows of `dim` values, row-major; a batch of n rows is
 *    n * dim contiguous values.
 */
#ifndef KVQ_H
#define KVQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every public function carries KVQ_API: libkvq is built with
 * -fvisibility=hidden and exports these alone (all named kvq_*). */
#if defined(_WIN32) && defined(KVQ_BUILDING_SHARED)
#define KVQ_API __declspec(dllexport)
#elif defined(_WIN32) && defined(KVQ_USING_SHARED)
#define KVQ_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define KVQ_API __attribute__((visibility("default")))
#else
#define KVQ_API
#endif

#define KVQ_VERSION_MAJOR 0
#define KVQ_VERSION_MINOR 1
#define KVQ_VERSION_PATCH 0
#define KVQ_VERSION_NUMBER (KVQ_VERSION_MAJOR * 10000 + KVQ_VERSION_MINOR * 100 + KVQ_VERSION_PATCH)

/* Runtime version, KVQ_VERSION_NUMBER of the linked library. */
KVQ_API unsigned kvq_version_number(void);

/* ------------------------------------------------------------------------ */
/* Errors (fixed numeric values)                                             */
/* ------------------------------------------------------------------------ */
enum kvq_status {
    KVQ_OK = 0,
    KVQ_ERR_NULL = -1,              /* a required pointer is NULL */
    KVQ_ERR_INVALID_ARG = -2,       /* an argument is out of its domain */
    KVQ_ERR_UNSUPPORTED_DIM = -3,   /* head dim not supported by the method */
    KVQ_ERR_BITS_RANGE = -4,        /* bit width out of the method's range */
    KVQ_ERR_UNKNOWN_METHOD = -5,    /* method spec could not be parsed */
    KVQ_ERR_NONFINITE = -6,         /* input contains NaN or Inf */
    KVQ_ERR_RANGE = -7,             /* a value does not fit the stored format */
    KVQ_ERR_OVERFLOW = -8,          /* a size computation overflows */
    KVQ_ERR_NOMEM = -9,             /* allocation failed */
    KVQ_ERR_NO_DECODE = -10,        /* method has no reconstruction (key-only) */
    KVQ_ERR_NEEDS_CALIBRATION = -11,/* method needs calibration vectors */
    KVQ_ERR_IO = -12,               /* file could not be opened/read/written */
    KVQ_ERR_FORMAT = -13,           /* file is not in the expected format */
    KVQ_ERR_TRUNCATED = -14,        /* file or buffer is shorter than declared */
    KVQ_ERR_UNSUPPORTED = -15,      /* valid request this build cannot serve */
    KVQ_ERR_STATE = -16,            /* call not valid in the object's state */
    KVQ_ERR_CHECKSUM = -17,         /* stored checksum does not match */
};

/* Human-readable name of a status code (never NULL). */
KVQ_API const char *kvq_strerror(int status);

/* ------------------------------------------------------------------------ */
/* Element types of input vectors                                            */
/* ------------------------------------------------------------------------ */
typedef enum kvq_dtype { KVQ_DTYPE_F32 = 0, KVQ_DTYPE_F16 = 1, KVQ_DTYPE_BF16 = 2 } kvq_dtype;

/* Size in bytes of one element of dtype, 0 if unknown. */
KVQ_API size_t kvq_dtype_size(kvq_dtype dtype);
/* sizeof of a public struct of this header by name ("kvq_cache_config",
 * "kvq_policy", "kvq_method_info"), 0 for another name: bindings that mirror
 * a struct check their layout against it (python/kvq/_lib.py). */
KVQ_API size_t kvq_struct_size(const char *name);

/* IEEE half / bfloat16 conversions (round to nearest even; NaN kept). */
KVQ_API uint16_t kvq_f32_to_f16(float x);
KVQ_API float kvq_f16_to_f32(uint16_t h);
KVQ_API uint16_t kvq_f32_to_bf16(float x);
KVQ_API float kvq_bf16_to_f32(uint16_t h);

/* ------------------------------------------------------------------------ */
/* CPU feature dispatch                                                      */
/* ------------------------------------------------------------------------ */
typedef enum kvq_isa {
    KVQ_ISA_SCALAR = 0, /* portable C reference */
    KVQ_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KVQ_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ */
    KVQ_ISA_BEST = 99,  /* best the running CPU supports */
} kvq_isa;

/* Best ISA the running CPU supports (checked with cpuid at run time). */
KVQ_API kvq_isa kvq_cpu_isa(void);
/* Name of an ISA ("scalar", "avx2", "avx512"). */
KVQ_API const char *kvq_isa_name(kvq_isa isa);
/* 1 if the running CPU has AVX-512 VNNI (8-bit dot products; 0 under KVQ_NO_X86). */
KVQ_API int kvq_cpu_has_avx512vnni(void);

/* ------------------------------------------------------------------------ */
/* Thread pool (create once, reuse for every call that takes one)            */
/* ------------------------------------------------------------------------ */
typedef struct kvq_pool kvq_pool;
/* Task callback: task in [0, ntasks), thread in [0, kvq_pool_size). */
typedef void (*kvq_task_fn)(void *arg, int task, int thread);
/* Creates a pool of nthreads threads in all (the caller counts as one). */
KVQ_API int kvq_pool_create(kvq_pool **out, int nthreads);
KVQ_API void kvq_pool_free(kvq_pool *pool);
/* Number of threads (1 for a NULL pool). */
KVQ_API int kvq_pool_size(const kvq_pool *pool);
/*
 * Runs fn for every task in [0, ntasks) on the pool's threads, the caller
 * included, and returns when all are done. A NULL pool runs them inline.
 * One region at a time per pool: the pool is not re-entrant.
 */
KVQ_API int kvq_pool_run(kvq_pool *pool, kvq_task_fn fn, void *arg, int ntasks);

/* ------------------------------------------------------------------------ */
/* Codec plans                                                               */
/* ------------------------------------------------------------------------ */
/*
 * A plan is everything precomputed for one (method spec, head dim, seed):
 * rotation, codebooks, projection matrices, kernel choice. Build it once,
 * share it read-only.
 *
 * Method specs (see docs/METHODS.md):
 *   f32 f16 bf16 q8 q4
 *   tq-mse:B   (B = 1..8)       rotation + B-bit Lloyd-Max per coordinate
 *   tq-prod:B  (B = 2..8)       tq-mse:(B-1) + QJL sign sketch of the residual
 *   qjl        qjl:M            QJL sign sketch of the key (key-only; M = +m=M)
 *   polar      polar:B          PolarQuant, 4 levels
 *   rvq:B      (B = 1..4)       two-stage residual scalar codebooks (2B bits)
 * Options appended with '+':
 *   +m=M          QJL projection size (default M = dim)
 *   +outliers=K   two-stream: K highest-variance channels as int8
 *   +norot        no rotation (ablation)
 *   +scale=norm   store the vector norm instead of the least-squares scale
 *   +scale32      store scales/norms as f32 instead of f16
 *   +cb=gauss     Gaussian codebook instead of the exact sphere density
 *   +center       subtract the calibration rows' per-channel mean first
 *                 (added back exactly in scores and decode; needs calib)
 *   +chscale      +center, then scale channel c by (sigma_c / rms sigma)^-1/2
 *                 (half whitening of the calibration rows; needs calib)
 * (+outliers with +center or +chscale is refused: KVQ_ERR_INVALID_ARG.)
 */
typedef struct kvq_plan kvq_plan;

/* Supported head dims: 32 <= dim <= 512, dim % 8 == 0. */
#define KVQ_DIM_MIN 32
#define KVQ_DIM_MAX 512

/*
 * Creates a plan. calib (n_calib rows of dim floats, may be NULL) is used only
 * by methods that learn from data (+outliers: channels of highest variance;
 * +center / +chscale: channel means and deviations); such a method with no
 * calibration rows returns KVQ_ERR_NEEDS_CALIBRATION, with NaN/Inf in them
 * KVQ_ERR_NONFINITE, with a mean whose norm exceeds 2^100 KVQ_ERR_RANGE.
 */
KVQ_API int kvq_plan_create(kvq_plan **out, const char *spec, int dim, uint64_t seed,
                    const float *calib, size_t n_calib);
KVQ_API void kvq_plan_free(kvq_plan *plan);

/* 1 if the method needs calibration rows (kvq_plan_create's calib). */
KVQ_API int kvq_spec_needs_calibration(const char *spec, int *needs);

/*
 * A calibrated plan's state (what kvq_plan_create fitted to its calibration
 * rows) as floats, to store it and build the same plan later without the
 * rows. +center: the channel means (dim floats); +chscale: the means, the
 * channel scales a and their inverses 1 / a (3 x dim); +outliers=K: the K
 * outlier channels, ascending (K floats). Non-calibrated specs: 0 floats.
 */
/* Floats of the state of spec at dim (KVQ_ERR_UNSUPPORTED_DIM, spec errors). */
KVQ_API int kvq_spec_stats_floats(const char *spec, int dim, size_t *n);
/* Floats of plan's state (kvq_spec_stats_floats of its spec and dim). */
KVQ_API size_t kvq_plan_stats_floats(const kvq_plan *plan);
/* Copies plan's state into out (n must be kvq_plan_stats_floats: KVQ_ERR_INVALID_ARG otherwise). */
KVQ_API int kvq_plan_stats(const kvq_plan *plan, float *out, size_t n);
/*
 * The plan kvq_plan_create(spec, dim, seed, rows) built, from its state
 * (kvq_plan_stats) instead of the rows: the same tables bit for bit, so the
 * same codes, scores and decodes. n_stats must be kvq_spec_stats_floats
 * (KVQ_ERR_INVALID_ARG otherwise; 0 for non-calibrated specs: a plain plan).
 * Values no calibration can give are refused: KVQ_ERR_NONFINITE (NaN/Inf),
 * KVQ_ERR_RANGE (a mean beyond 2^100, a scale outside [1/16, 16] or an
 * inverse that is not 1 / a, an outlier channel that is not a whole number
 * in [0, dim) or out of ascending order).
 */
KVQ_API int kvq_plan_create_from_stats(kvq_plan **out, const char *spec, int dim, uint64_t seed,
                                       const float *stats, size_t n_stats);

/*
 * A calibrated plan of like's spec, dim, seed and ISA fitted to other rows
 * (kvq_plan_create_like: calib as kvq_plan_create's) or built from other
 * stats (kvq_plan_create_like_from_stats: n_stats = kvq_plan_stats_floats
 * of like), sharing like's method tables instead of building them again:
 * the inner plan of +center / +chscale / +outliers (rotation, Lloyd-Max
 * codebook: a tq-mse codebook solve takes milliseconds) is immutable and
 * reference-counted, so the plans may be used by any threads and freed in
 * any order. The result equals kvq_plan_create(kvq_plan_spec(like), dim,
 * seed, calib, n_calib) (resp. kvq_plan_create_from_stats) bit for bit, for
 * one calibration's cost (one plan per block position of a weight matrix:
 * docs/METHODS.md "Weights"). KVQ_ERR_INVALID_ARG if like's spec is not
 * calibrated (nothing to refit: use like) or n_stats is not that count; the
 * calibration errors of kvq_plan_create / kvq_plan_create_from_stats.
 */
KVQ_API int kvq_plan_create_like(kvq_plan **out, const kvq_plan *like, const float *calib, size_t n_calib);
KVQ_API int kvq_plan_create_like_from_stats(kvq_plan **out, const kvq_plan *like, const float *stats,
                                            size_t n_stats);

/* Canonical spec string of the plan ("tq-mse:4"). */
KVQ_API const char *kvq_plan_spec(const kvq_plan *plan);
KVQ_API int kvq_plan_dim(const kvq_plan *plan);
/* Every byte stored for one vector (codes, scales, norms). */
KVQ_API size_t kvq_plan_code_bytes(const kvq_plan *plan);
/* code_bytes * 8 / dim. */
KVQ_API double kvq_plan_bits_per_value(const kvq_plan *plan);
/* 1 if kvq_decode reconstructs vectors, 0 for key-only methods. */
KVQ_API int kvq_plan_can_decode(const kvq_plan *plan);
/* Number of floats of a prepared query (kvq_query_prepare). */
KVQ_API size_t kvq_plan_query_floats(const kvq_plan *plan);
/* Kernel ISA the plan dispatches to. */
KVQ_API kvq_isa kvq_plan_isa(const kvq_plan *plan);
/*
 * Copy of plan using kernels of another ISA (KVQ_ISA_SCALAR: the reference,
 * to verify results). Fails with KVQ_ERR_UNSUPPORTED if the CPU lacks it.
 */
KVQ_API int kvq_plan_clone_isa(kvq_plan **out, const kvq_plan *plan, kvq_isa isa);

/*
 * The methods of the registry, for listings and messages (the CLI's errors
 * and --help): i in [0, kvq_method_count()). A method with max_bits 0 takes
 * no width (f16, q8, ...); otherwise NAME:B with B in [min_bits, max_bits]
 * and NAME alone meaning NAME:default_bits. colon_rows: NAME:N sets the QJL
 * projection size, not a width (qjl:M). KVQ_ERR_NULL / KVQ_ERR_RANGE (i out
 * of range).
 */
typedef struct kvq_method_info {
    const char *name; /* "tq-mse" (static storage) */
    int min_bits, max_bits, default_bits;
    int colon_rows;
} kvq_method_info;
KVQ_API int kvq_method_count(void);
KVQ_API int kvq_method_get(int i, kvq_method_info *out);

/* ------------------------------------------------------------------------ */
/* Batched codec                                                             */
/* ------------------------------------------------------------------------ */
/*
 * Encodes n rows (n * dim values of dtype) into n * code_bytes bytes.
 * Returns KVQ_ERR_NONFINITE if any value is NaN/Inf (f32 input: checked for
 * the whole batch before any code is written), KVQ_ERR_RANGE if a scale does
 * not fit its stored format (f16 scales: 65504; +scale32: 2^100, the bound
 * under which every decode stays finite, so a row whose norm exceeds
 * FLT_MAX is refused) or a value does not (f16 and bf16 methods); on error
 * `codes` may be partly written (f16/bf16 input, range errors) but the input
 * is never modified.
 */
KVQ_API int kvq_encode(const kvq_plan *plan, const void *x, kvq_dtype dtype, size_t n, void *codes);

/* Decodes n codes into n * dim floats. KVQ_ERR_NO_DECODE for key-only methods. */
KVQ_API int kvq_decode(const kvq_plan *plan, const void *codes, size_t n, float *out);

/*
 * Prepares a query for scoring: writes kvq_plan_query_floats(plan) floats,
 * an opaque row (the rotated query, its QJL projection for sketch-based
 * methods, 8-bit copies for the integer scores of tq-mse <= 4 bits, q8, q4,
 * and the 8-bit pair tables of polar / polar:3). KVQ_ERR_NONFINITE (and
 * qprep untouched) if q holds a NaN or Inf.
 */
KVQ_API int kvq_query_prepare(const kvq_plan *plan, const float *q, float *qprep);

/*
 * Inner products <q, k_i> estimated from codes, for nq prepared queries
 * (qprep rows of kvq_plan_query_floats floats) against n codes:
 * scores[j * n + i] = est <q_j, k_i>. The codes are never decoded to a buffer.
 * KVQ_ERR_OVERFLOW if nq * query_floats or nq * n does not fit in size_t.
 */
KVQ_API int kvq_score(const kvq_plan *plan, const float *qprep, size_t nq, const void *codes, size_t n,
              float *scores);

/*
 * acc[j * dim + c] += sum_i p[j * n + i] * v_i[c] in the plan's rotated
 * domain, for nq weight rows. Call kvq_unrotate once on each finished row.
 * KVQ_ERR_OVERFLOW if nq * n or nq * dim does not fit in size_t.
 */
KVQ_API int kvq_accumulate(const kvq_plan *plan, const float *p, size_t nq, const void *codes, size_t n,
                   float *acc);

/* Maps a row of the rotated domain back: out = R^T * acc (in place allowed). */
KVQ_API int kvq_unrotate(const kvq_plan *plan, const float *acc, float *out);

/* ------------------------------------------------------------------------ */
/* Compressed KV cache with fused attention (src/cache/)                     */
/* ------------------------------------------------------------------------ */
/*
 * One cache per model: per layer, all KV heads in one paged structure. Keys
 * are appended after RoPE. Positions are absolute token indices; all layers
 * hold the same number of tokens once a step has been appended everywhere.
 * Layout, policies and memory accounting: docs/CACHE.md. A cache is used by
 * one caller at a time (attend keeps its scratch in the cache).
 */
typedef struct kvq_cache kvq_cache;

typedef struct kvq_cache_config {
    int n_layers;              /* > 0 */
    int n_kv_heads;            /* > 0 */
    int head_dim;              /* KVQ_DIM_MIN..KVQ_DIM_MAX, multiple of 8 */
    const char *k_spec;        /* method for keys, NULL = "f16" */
    const char *v_spec;        /* method for values, NULL = "f16" (key-only methods refused) */
    int f16_window;            /* the W most recent tokens stay f16 (0 = none) */
    const int *f16_layers;     /* layers kept entirely in f16 (may be NULL); -1 = the last, -2 ... */
    int n_f16_layers;
    const int *sliding_window; /* per-layer local-attention window, 0 = global (NULL = all global) */
    int compress_sliding;      /* 0 (default): sliding-window layers stay f16 */
    int outlier_calib_tokens;  /* tokens seen before +outliers channels are chosen (0 = 128) */
    uint64_t seed;             /* seed of rotations/projections (per layer and head derived from it) */
    int reference_kernels;     /* 1: the scalar reference kernels everywhere (slow; to verify results); 0: best for the CPU */
    int sink_tokens;           /* the first N positions of each global compressed layer stay f16 for good
                                  (attention sinks; 0 = none, at most KVQ_SINK_MAX) */
} kvq_cache_config;

#define KVQ_SINK_MAX 1024 /* most sink tokens a cache keeps in f16 */

/*
 * Creates an empty cache. Spec errors are reported as by kvq_plan_create;
 * KVQ_ERR_NO_DECODE if v_spec is a key-only method (qjl, tq-prod);
 * KVQ_ERR_INVALID_ARG for counts/windows out of range (sink_tokens outside
 * 0..KVQ_SINK_MAX) or an f16 layer index out of [-n_layers, n_layers).
 */
KVQ_API int kvq_cache_create(kvq_cache **out, const kvq_cache_config *cfg);
KVQ_API void kvq_cache_free(kvq_cache *cache);

/*
 * Appends ntok tokens to one layer: k and v are ntok x n_kv_heads x head_dim
 * floats (token-major). O(1) amortised per token (paged storage). All or
 * nothing: KVQ_ERR_NONFINITE (NaN/Inf), KVQ_ERR_RANGE (a value stored as f16
 * exceeds 65504, or a scale does not fit), KVQ_ERR_NOMEM leave the cache as
 * it was. KVQ_ERR_INVALID_ARG for a layer out of range.
 */
KVQ_API int kvq_cache_append(kvq_cache *cache, int layer, const float *k, const float *v, size_t ntok);
/* kvq_cache_append with the encoding into the main store spread over a pool
 * (per head, K and V, chunks of positions; NULL: single thread). The cache
 * is the same, byte for byte, whatever the pool's size. */
KVQ_API int kvq_cache_append_pool(kvq_cache *cache, int layer, const float *k, const float *v, size_t ntok,
                                  kvq_pool *pool);

/*
 * Attention for nq consecutive query tokens at absolute positions
 * pos0 .. pos0+nq-1 of one layer, causal (token t sees positions <= pos0+t,
 * and only the last `window` positions on sliding-window layers):
 * q and out are nq x n_q_heads x head_dim floats; n_q_heads is a multiple of
 * n_kv_heads (grouped-query attention). scale multiplies q.k (usually
 * 1/sqrt(head_dim)). The positions must already be in the cache. pool may
 * be NULL (single thread). Scores are computed from the codes; the cache is
 * never decoded into a full temporary buffer. Results do not depend on the
 * pool's size. Errors: KVQ_ERR_INVALID_ARG for a layer out of range,
 * n_q_heads not a positive multiple of n_kv_heads, pos0 + nq > len, a
 * non-finite scale; KVQ_ERR_STATE if a sliding-window layer already dropped
 * positions the first query needs.
 */
KVQ_API int kvq_cache_attend(kvq_cache *cache, int layer, const float *q, size_t nq, int n_q_heads, size_t pos0,
                     float scale, float *out, kvq_pool *pool);

/* Number of tokens held by a layer (positions 0..len-1 are addressable). */
KVQ_API size_t kvq_cache_len(const kvq_cache *cache, int layer);
/*
 * Drops every position >= pos in all layers (rewinding a conversation).
 * KVQ_ERR_STATE (and nothing changes) if a sliding-window layer already
 * dropped positions a query at pos would need.
 */
KVQ_API int kvq_cache_truncate(kvq_cache *cache, size_t pos);
/* Drops everything (keeps the configuration). */
KVQ_API void kvq_cache_clear(kvq_cache *cache);
/* Exact bytes held for K/V data: codes, scales, f16 windows, ring buffers. */
KVQ_API size_t kvq_cache_memory_bytes(const kvq_cache *cache);
/* Bytes one token costs across all layers once it is compressed (K+V). */
KVQ_API size_t kvq_cache_bytes_per_token(const kvq_cache *cache);
/*
 * Memory planning (the cache's contents are not used, only its
 * configuration): the bytes kvq_cache_memory_bytes() reports once n_tokens
 * positions were appended to every layer of an empty cache of this
 * configuration in batches of `batch` tokens (the last one shorter; 0 = one
 * batch). *at: after the last append; *peak (may be NULL): the most it
 * reported after any of those appends (sliding-window layers drop and
 * recycle pages). Exact (same page, spare and ring rules as the cache);
 * O(1) without sliding-window layers, else O(n_tokens / batch). Errors:
 * KVQ_ERR_NULL, KVQ_ERR_OVERFLOW (does not fit in size_t), KVQ_ERR_NOMEM.
 */
KVQ_API int kvq_cache_memory_plan(const kvq_cache *cache, size_t n_tokens, size_t batch, size_t *at, size_t *peak);

/* ------------------------------------------------------------------------ */
/* Cache policies: one string for everything a cache stores how (docs/CACHE.md) */
/* ------------------------------------------------------------------------ */
/*
 * A policy is a comma-separated list of fields; the first may be a shorthand:
 *
 *   SPEC                 keys and values with the same method      tq-mse:4
 *   KSPEC/VSPEC          keys / values                              q8/tq-mse:4
 *   k=SPEC  v=SPEC       the same, field by field                   k=tq-prod:3,v=q8
 *   w=N                  f16 window of the N most recent tokens     tq-mse:3,w=128
 *   f16layers=L;L;...    layers kept in f16; negative counts from   q4,f16layers=0;-1
 *                        the end (-1 = last layer)
 *   sliding=0|1          compress sliding-window layers too (Gemma 3;
 *                        default 0: only global layers are compressed)
 *   calib=N              tokens kept f16 until the per-head +center /
 *                        +chscale / +outliers plans are calibrated on them
 *                        (default 128), then encoded like the others
 *   sink=N               the first N positions stay f16 for good      tq-mse:4,sink=1
 *                        (attention sinks: the first token draws much
 *                        of the attention; global layers only)
 *
 * SPEC is a method spec (kvq_plan_create; it never holds ',' or '/'); a
 * missing K or V means f16. The canonical name (kvq_policy_name) is the
 * shortest form with the fields in the order above.
 */
#define KVQ_POLICY_SPEC_MAX 80 /* longest method spec + 1 */
#define KVQ_POLICY_MAX_F16 64  /* f16 layers one policy lists */
#define KVQ_POLICY_NAME_MAX 256

typedef struct kvq_policy {
    char k_spec[KVQ_POLICY_SPEC_MAX];     /* key method ("f16" by default) */
    char v_spec[KVQ_POLICY_SPEC_MAX];     /* value method */
    int f16_window;                       /* f16 window (0 = none) */
    int f16_layers[KVQ_POLICY_MAX_F16];   /* as written (negative: from the end) */
    int n_f16_layers;
    int compress_sliding;                 /* 1: sliding-window layers compressed too */
    int calib_tokens;                     /* calibration tokens (0 = the cache's default) */
    int sink_tokens;                      /* f16 sink tokens at the start (0 = none) */
} kvq_policy;

/* f16 keys and values, no window, no f16 layers. */
KVQ_API void kvq_policy_init(kvq_policy *p);
/*
 * Parses a policy string into *p (*p untouched on error). Every method spec
 * is checked as kvq_plan_create would (the head dim aside) and a key-only
 * method for values is refused. Errors: KVQ_ERR_NULL; KVQ_ERR_INVALID_ARG (a
 * malformed field), or the spec's own error (KVQ_ERR_UNKNOWN_METHOD,
 * KVQ_ERR_BITS_RANGE, KVQ_ERR_NO_DECODE, ...), with the reason in err.
 */
KVQ_API int kvq_policy_parse(kvq_policy *p, const char *s, char *err, size_t err_cap);
/* Canonical name into buf (NUL-terminated); KVQ_ERR_RANGE if it was truncated. */
KVQ_API int kvq_policy_name(const kvq_policy *p, char *buf, size_t cap);
/*
 * Sets the policy fields of a cache configuration (k_spec, v_spec,
 * f16_window, f16_layers, n_f16_layers, compress_sliding,
 * outlier_calib_tokens, sink_tokens); cfg then points into p, which must outlive
 * kvq_cache_create. The other fields are left as they are.
 */
KVQ_API void kvq_policy_to_cache_config(const kvq_policy *p, kvq_cache_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
