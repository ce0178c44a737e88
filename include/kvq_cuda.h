/*
 * kvq_cuda — the optional CUDA backend of kvq (built when nvcc is found,
 * library kvq_cuda; docs/CUDA.md).
 *
 * It encodes K/V rows on the GPU into the same bytes as the CPU codec and
 * computes decode attention directly on compressed, paged KV caches:
 *   - kvq_cuda_plan: a device copy of a CPU plan's tables (rotation signs,
 *     codebooks, QJL matrix), made from a kvq_plan;
 *   - kvq_cuda_encode: rows -> records (byte-identical to kvq_encode with the
 *     plan's scalar reference kernels);
 *   - kvq_cuda_layer: one attention layer's policy (K plan, V plan, heads,
 *     page size, f16 window, f16 sink); pages, window rings and sinks are
 *     device buffers the caller owns, block tables say which pages a sequence
 *     uses;
 *   - kvq_cuda_attend: one decode step for a batch of sequences of different
 *     lengths: fused split-K attention on the codes, exact merge of the
 *     chunks, one inverse rotation per head.
 *
 * Conventions: as kvq.h (int status, KVQ_OK or KVQ_ERR_*; nothing prints or
 * exits). Every pointer documented as "device" is CUDA device memory.
 * `stream` is a cudaStream_t (NULL = default stream); calls are asynchronous
 * on it unless stated. Errors found by kernels (NaN input, a scale out of
 * f16 range) are written to `dev_status` (a device int, may be NULL): the
 * first nonzero KVQ_ERR_* code wins; set it to 0 before the call.
 * Served: encode at head dims that are multiples of 32 from 32 to 512 (q8,
 * f16: any multiple of 8; non-powers of two with the dense rotation);
 * attention at head dims 32, 64, 96, 128, 256 with K in f16, q8,
 * tq-mse:1..8, rvq:1..4, tq-prod, qjl (m <= 2d) and V in f16, q8,
 * tq-mse:1..8, rvq:1..4, f16 or f32 scales (tensor-core kernels at d = 128 for
 * tq-mse/rvq:1/2/4, tq-prod:2/3/5, qjl with m = d, f16 scales; a generic f32
 * kernel for the rest, docs/CUDA.md), each of them also calibrated (+center,
 * +chscale: one mean and channel scales per KV head). Other dims:
 * KVQ_ERR_UNSUPPORTED_DIM; other methods (+outliers, q4, polar, ...):
 * KVQ_ERR_UNSUPPORTED.
 */
#ifndef KVQ_CUDA_H
#define KVQ_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a CUDA device is usable, 0 otherwise (no error code: a query). */
KVQ_API int kvq_cuda_device_count(void);

/* ------------------------------------------------------------------------ */
/* Plans on the device                                                       */
/* ------------------------------------------------------------------------ */
typedef struct kvq_cuda_plan kvq_cuda_plan;

/*
 * Uploads the tables of a CPU plan (which may be freed afterwards).
 * KVQ_ERR_UNSUPPORTED for methods the backend does not serve (f32, bf16, q4,
 * polar, +outliers) or dims it does not serve; KVQ_ERR_NOMEM if a device
 * allocation fails. Synchronous. A calibrated plan (+center, +chscale) is
 * served with its mean and channel scales for every head.
 */
KVQ_API int kvq_cuda_plan_create(kvq_cuda_plan **out, const kvq_plan *plan);
/*
 * One device plan from n_heads calibrated CPU plans of one spec and dim
 * (+center or +chscale; each fitted to one KV head's rows and seeded per head,
 * as the C cache makes one plan per head): the codebooks once, each head's
 * rotation, QJL matrix, mean and channel scales. Vector v of kvq_cuda_encode
 * is coded with plans[v % n_heads] (rows token-major, heads inner: the layout
 * of kvq_cuda_store_pages); a layer's K or V plan has 1 or n_kv_heads heads.
 * KVQ_ERR_INVALID_ARG if the plans are not calibrated or are of different
 * methods; otherwise as kvq_cuda_plan_create.
 */
KVQ_API int kvq_cuda_plan_create_heads(kvq_cuda_plan **out, const kvq_plan *const *plans, int n_heads);
KVQ_API void kvq_cuda_plan_free(kvq_cuda_plan *plan);
/* Record bytes (kvq_plan_code_bytes of the source plan). */
KVQ_API size_t kvq_cuda_plan_code_bytes(const kvq_cuda_plan *plan);

/*
 * Encodes n rows (device, n x dim values of dtype F32 or F16) into n
 * contiguous records (device, n x code_bytes), the same bytes as the CPU
 * codec's scalar reference. Kernel errors go to dev_status.
 */
KVQ_API int kvq_cuda_encode(const kvq_cuda_plan *plan, const void *x, kvq_dtype dtype, size_t n, void *codes, int *dev_status,
                    void *stream);

/* ------------------------------------------------------------------------ */
/* Paged layers and decode attention                                         */
/* ------------------------------------------------------------------------ */
/*
 * Page layout. A page holds P token slots of all H KV heads: K then V, per
 * head a run of P records stored field-major (field f of slot s at
 * run + off[f] * P + s * size[f], offsets/sizes of src/codec/layouts.h):
 *   K run of head h: page + h * P * kb,  V run: page + H * P * kb + h * P * vb
 * page_bytes = H * P * (kb + vb) (the CPU cache's page size for P slots).
 * Page p of the pool starts at pool + p * page_bytes.
 * The f16 window: a ring of W slots per (sequence, K/V, head): position pos
 * of sequence s lives at ring + (((s * 2 + kv) * H + h) * W + pos % W) * d f16.
 * The f16 sink (policy sink=S: the first S positions stay f16 for good):
 * S rows per (sequence, K/V, head), unrotated like the window: position
 * pos < S of sequence s at sink + (((s * 2 + kv) * H + h) * S + pos) * d f16.
 * With a sink the pages hold the positions from S on: position pos >= S is
 * stored at page position pos - S (block table entry (pos - S) / P, slot
 * (pos - S) % P); nothing of the first S positions goes to the pages.
 */
typedef struct kvq_cuda_layer kvq_cuda_layer;

typedef struct kvq_cuda_layer_config {
    const kvq_cuda_plan *k; /* K method */
    const kvq_cuda_plan *v; /* V method (key-only methods refused: KVQ_ERR_NO_DECODE) */
    int n_kv_heads;         /* H > 0 */
    int n_q_heads;          /* a positive multiple of H (grouped-query attention) */
    int page_tokens;        /* P, a positive multiple of 16 */
    int window;             /* W: f16 window slots per sequence (0 = none) */
    int sink;               /* S: f16 sink rows per sequence (0 = none, at most KVQ_SINK_MAX) */
} kvq_cuda_layer_config;

/* The plans must outlive the layer. KVQ_ERR_UNSUPPORTED for a pair the kernels do not serve;
 * KVQ_ERR_INVALID_ARG for a per-head plan whose head count is not n_kv_heads, or a sink outside
 * 0..KVQ_SINK_MAX. */
KVQ_API int kvq_cuda_layer_create(kvq_cuda_layer **out, const kvq_cuda_layer_config *cfg);
KVQ_API void kvq_cuda_layer_free(kvq_cuda_layer *layer);
/* Bytes of one page (all heads, K and V). */
KVQ_API size_t kvq_cuda_layer_page_bytes(const kvq_cuda_layer *layer);
/* Bytes of the f16 window rings of n_seq sequences. */
KVQ_API size_t kvq_cuda_layer_window_bytes(const kvq_cuda_layer *layer, int n_seq);
/* Bytes of the f16 sinks of n_seq sequences (0 without a sink). */
KVQ_API size_t kvq_cuda_layer_sink_bytes(const kvq_cuda_layer *layer, int n_seq);

/*
 * Encodes ntok tokens of K (kv = 0) or V (kv = 1) into pages: x (device) is
 * ntok x H x d values of dtype, token i goes to slot dst[i] (device int32:
 * page * P + slot in page) of every head; a negative dst[i] stores nothing
 * (padding entries of a slot mapping, as vLLM's -1).
 */
KVQ_API int kvq_cuda_store_pages(const kvq_cuda_layer *layer, int kv, void *pages, const void *x, kvq_dtype dtype, size_t ntok,
                         const int32_t *dst, int *dev_status, void *stream);
/*
 * Writes ntok tokens as f16 into the window rings: token i belongs to
 * sequence seq[i] at position pos[i] (device int32 arrays; a negative seq[i]
 * or pos[i] stores nothing: padding entries). Values beyond the f16 range
 * set KVQ_ERR_RANGE.
 */
KVQ_API int kvq_cuda_store_window(const kvq_cuda_layer *layer, int kv, void *window, const void *x, kvq_dtype dtype,
                          size_t ntok, const int32_t *seq, const int32_t *pos, int *dev_status, void *stream);
/*
 * Writes ntok tokens as f16 into the sinks, as kvq_cuda_store_window does into
 * the rings: token i at position pos[i] of sequence seq[i]; a token whose
 * pos[i] is not below the layer's sink S, or whose seq[i] or pos[i] is
 * negative, stores nothing (so every appended token may be passed).
 * KVQ_ERR_INVALID_ARG for a layer without a sink.
 */
KVQ_API int kvq_cuda_store_sink(const kvq_cuda_layer *layer, int kv, void *sink, const void *x, kvq_dtype dtype,
                                size_t ntok, const int32_t *seq, const int32_t *pos, int *dev_status, void *stream);

/* One decode step of a batch of sequences. */
typedef struct kvq_cuda_batch {
    int n_seq;
    const void *pages;          /* device page pool */
    const int32_t *block_table; /* device, n_seq x max_pages: page of page positions [i*P, (i+1)*P) */
    int max_pages;
    /* A sequence's positions, in order: the first sink_len in the sink, the next main_len in pages (page
     * positions [0, main_len)), the next win_len in the window ring (slot = position % W). */
    const int32_t *main_len;    /* device, n_seq */
    const int32_t *win_len;     /* device, n_seq, or NULL (= 0) */
    const void *window;         /* device window rings, or NULL */
    int max_main_len;           /* host: >= every main_len (sizes the grid) */
    const int32_t *seq_map;     /* device, n_seq, or NULL (= identity): sequence s reads block-table row, window
                                   ring and sink seq_map[s] (queries, lengths and outputs stay per s): several rows of
                                   one stored sequence, e.g. causal prefill rows with main_len = t + 1 */
    const int32_t *sink_len;    /* device, n_seq, or NULL (= 0): at most the layer's S; main_len > 0 needs
                                   sink_len = S (page position 0 is position S) */
    const void *sink;           /* device sinks, or NULL */
} kvq_cuda_batch;

/*
 * out[s][hq][:] = softmax(scale * q . K) V for the query q[s][hq][:] of each
 * sequence (device, n_seq x n_q_heads x d floats, same for out) over all its
 * positions: sink, pages, window. A sequence with no position gets zeros.
 * KVQ_ERR_INVALID_ARG for win_len without window rings (or a layer without a
 * window), sink_len without sinks (or a layer without a sink).
 * The layer keeps a device workspace, grown on demand (the growth
 * synchronises; kvq_cuda_layer_reserve grows it ahead): calls on one layer
 * must not overlap. While `stream` is being captured into a CUDA graph a
 * growth is refused with KVQ_ERR_STATE (nothing is launched), so a captured
 * call never allocates or synchronises.
 */
KVQ_API int kvq_cuda_attend(kvq_cuda_layer *layer, const kvq_cuda_batch *batch, const float *q, float scale, float *out,
                    void *stream);

/*
 * Decode path without allocation or synchronisation (CUDA-graph safe).
 *
 * kvq_cuda_attend_workspace_bytes: device workspace bytes enough for any
 * batch of at most n_seq sequences whose max_main_len is at most
 * max_main_len (0 for invalid arguments). A bound: the split-K chunking
 * depends on the batch, the bound takes its finest chunks.
 *
 * kvq_cuda_layer_reserve: grows the layer's own workspace to that bound
 * (synchronous; KVQ_ERR_NOMEM if the allocation fails). Afterwards
 * kvq_cuda_attend on such batches launches its kernels and nothing else.
 *
 * kvq_cuda_attend_ws: kvq_cuda_attend on a caller's workspace (device,
 * 16-byte aligned, workspace_bytes at least the need of this batch, which
 * kvq_cuda_attend_workspace_bytes(layer, n_seq, max_main_len) bounds;
 * KVQ_ERR_INVALID_ARG otherwise). The layer is only read: calls on one
 * layer may overlap when their workspaces and outputs differ. The kernels
 * read block_table, main_len and win_len on the device, so one captured
 * call (max_main_len on the host sizes its grid: capture it with the
 * capacity) serves every later length up to max_main_len.
 */
KVQ_API size_t kvq_cuda_attend_workspace_bytes(const kvq_cuda_layer *layer, int n_seq, int max_main_len);
KVQ_API int kvq_cuda_layer_reserve(kvq_cuda_layer *layer, int n_seq, int max_main_len);
KVQ_API int kvq_cuda_attend_ws(const kvq_cuda_layer *layer, const kvq_cuda_batch *batch, const float *q, float scale,
                               float *out, void *workspace, size_t workspace_bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_CUDA_H */
