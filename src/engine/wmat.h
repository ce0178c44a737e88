/*
 * Weight matrices coded with kvq's own codecs (issue 16): each row of `cols`
 * values is cut into nb = cols / B blocks of B values; block b of every row
 * is one codec record of a plan of dimension B (rotation + quantizer, as for
 * a cached key). The product with an activation x is, block by block,
 *
 *     y[r] = sum_b <W[r, bB..bB+B), x[bB..bB+B)> = sum_b <R W_rb, R x_b>,
 *
 * because a rotation R preserves inner products: the activation block is
 * rotated (and for tq-mse and tcq rounded to int8, one scale per block) ONCE by kvq_query_prepare and
 * then scored against the codes of every row by kvq_score, the codec's fused
 * scoring kernel (scalar reference + AVX2 / AVX-512 paths, tested there); no
 * weight is decoded to a buffer. This is the cache's q.k on codes with the
 * weight rows in the role of the keys.
 *
 * Layout: block-major, codes[(b * rows + r) * code_bytes], so one kvq_score
 * call scores a run of rows of one block against all tokens of a batch.
 * Bits per weight: code_bytes * 8 / B, every stored byte counted (codes and
 * the per-record scale / norm); the plan's tables (rotation signs,
 * codebook) are per matrix and rebuilt from spec and seed (no stored
 * bytes); a calibrated matrix's stats are stored and counted apart
 * (kvq_wmat_stats_bytes).
 *
 * Calibrated specs (+center, +chscale, +outliers) fit one plan per block
 * position b on the matrix's own block-b vectors (a sample of the rows,
 * dequantized once per matrix); other specs use one plan for every block.
 * The plans of one matrix share one inner plan (rotation, codebook: built
 * once, kvq_plan_create_like). The stats each plan is fitted to are rounded
 * to f16, and for +chscale the inverse scales recomputed from the rounded
 * scales (1 / a is not stored): the plans are exactly those a file holding
 * 16-bit stats rebuilds (format version 3, docs/FORMAT.md), at 2 bytes per
 * stored stat, mean and a: 32 / rows bits per weight for +chscale.
 * A calibrated matrix's plans are saved as their stats (kvq_wmat_stats16,
 * nb x kvq_wmat_stored_per floats) and rebuilt from them exactly
 * (kvq_wmat_for_codes16; kvq_wmat_for_codes: the f32 stats of version 2).
 * The inner plans' tables are not stored (the spec and seed rebuild them):
 * a matrix costs its codes and its stored stats, nothing else.
 */
#ifndef KVQ_ENGINE_WMAT_H
#define KVQ_ENGINE_WMAT_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_types.h"
#include "kvq.h"

typedef struct kvq_wmat {
    int64_t rows, cols;
    int block;            /* values per record (B) */
    int nb;               /* cols / block */
    int calibrated;       /* the spec fits its plans to the source rows (one per block position) */
    int nplans;           /* 1, or nb for calibrated specs */
    kvq_plan **plans;     /* (nplans) */
    size_t code_bytes;    /* per record */
    size_t qfloats;       /* floats of one prepared activation block */
    const uint8_t *codes; /* (nb, rows, code_bytes): owned, or borrowed (kvq_wmat_from_codes) */
    uint8_t *owned;       /* codes when coded here, else NULL */
    int stats16;          /* calibrated: 1 if the stats are f16 values, stored as such (coded here, or a
                             version-3 file); 0: the f32 stats of a version-2 file */
} kvq_wmat;

/* The block width used when a spec names none: the largest power of two
 * <= 256 (and >= KVQ_DIM_MIN) dividing cols, 0 if there is none. */
int kvq_wmat_default_block(int64_t cols);

/*
 * Splits "SPEC[@B]" into the codec spec (written to spec, cap bytes) and the
 * block width (0 when absent). KVQ_ERR_INVALID_ARG for a malformed @B.
 */
int kvq_wmat_parse_spec(const char *s, char *spec, size_t cap, int *block, char *err, size_t err_cap);

/*
 * Codes the matrix src (any supported ggml type: each row dequantized to f32
 * first) with codec spec `spec`, block width block (0: default), plan seed
 * `seed`. Errors (reason in err): KVQ_ERR_INVALID_ARG (a block that does
 * not divide the rows or is outside the codec's dims), the codec's errors
 * (bad spec, KVQ_ERR_NO_DECODE for key-only methods, KVQ_ERR_NONFINITE,
 * KVQ_ERR_RANGE), KVQ_ERR_NOMEM.
 */
int kvq_wmat_create(kvq_wmat **out, const kvq_ggml_matrix *src, const char *spec, int block, uint64_t seed,
                    kvq_pool *pool, char *err, size_t err_cap);

/*
 * A coded matrix in two steps, for codes the caller already has (e.g. a
 * tensor of a GGUF file written by kvq quantize). kvq_wmat_for_codes builds
 * the plans from spec, block (0: default) and seed, for a calibrated spec
 * from stats (n_stats = nb x kvq_spec_stats_floats(spec, block) floats, plan
 * b's at b x that: kvq_wmat_stats of the coded matrix; KVQ_ERR_INVALID_ARG
 * for another count or stats given to a plain spec, the codec's errors of
 * kvq_plan_create_from_stats for values no calibration gives, the block
 * position named in err; KVQ_ERR_NEEDS_CALIBRATION without them); the
 * matrix has no codes yet, kvq_wmat_code_bytes says how many it needs.
 * kvq_wmat_set_codes then borrows them (they must outlive the matrix; no
 * copy): KVQ_ERR_FORMAT if n_bytes is not that size. *out is written on
 * success only.
 */
int kvq_wmat_for_codes(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                       const float *stats, size_t n_stats, char *err, size_t err_cap);
int kvq_wmat_set_codes(kvq_wmat *w, const void *codes, size_t n_bytes, char *err, size_t err_cap);
/* Both steps for a non-calibrated spec (*out untouched on failure). */
int kvq_wmat_from_codes(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                        const void *codes, size_t n_bytes, char *err, size_t err_cap);

/*
 * The same from 16-bit stats (a version-3 file): per block position
 * kvq_wmat_stored_per(spec, block) f16 values, the stats of
 * kvq_plan_stats less +chscale's inverse scales (recomputed as the float of
 * 1 / a from the f16 a). Errors as kvq_wmat_for_codes'.
 */
int kvq_wmat_for_codes16(kvq_wmat **out, int64_t rows, int64_t cols, const char *spec, int block, uint64_t seed,
                         const uint16_t *stats16, size_t n16, char *err, size_t err_cap);
/* Values stored per block position in 16 bits: kvq_spec_stats_floats, less
 * the B inverse scales of +chscale (3B -> 2B); 0 for a plain spec or a bad one. */
size_t kvq_wmat_stored_per(const char *spec, int block);
/* Stored 16-bit values of a matrix (nb x stored_per), 0 when not calibrated. */
size_t kvq_wmat_stored16(const kvq_wmat *w);
/* Its stored 16-bit stats (n = kvq_wmat_stored16; KVQ_ERR_STATE if w->stats16 is 0). */
int kvq_wmat_stats16(const kvq_wmat *w, uint16_t *out, size_t n);
/* Bytes its stats cost stored: 2 x stored16 (stats16), else 4 x stats_floats (version 2). */
size_t kvq_wmat_stats_bytes(const kvq_wmat *w);

/* Floats of the plans' stats: nb x kvq_plan_stats_floats, 0 when not calibrated. */
size_t kvq_wmat_stats_floats(const kvq_wmat *w);
/* The plans' stats, block position by block position (n = kvq_wmat_stats_floats). */
int kvq_wmat_stats(const kvq_wmat *w, float *out, size_t n);
void kvq_wmat_free(kvq_wmat *w);

/* Bytes of the codes (what the weights cost). */
size_t kvq_wmat_code_bytes(const kvq_wmat *w);
/* Bits per weight: code_bytes * 8 / block. */
double kvq_wmat_bits(const kvq_wmat *w);

/* Row r decoded to cols floats (the embedding lookup of a coded token_embd). */
int kvq_wmat_row(const kvq_wmat *w, int64_t r, float *out);

/* Scratch of kvq_wmat_matmul (prepared activations, score tiles), grown on
 * demand and reused across calls: one per session (not shared between
 * threads calling at once). Zero-initialise; kvq_wmat_ws_free releases. */
typedef struct kvq_wmat_ws {
    float *qp;
    size_t qp_floats;
    float *tmp;
    size_t tmp_floats;
} kvq_wmat_ws;
void kvq_wmat_ws_free(kvq_wmat_ws *ws);

/*
 * Y[t * ldy + r] = sum_c W[r, c] X[t * cols + c] for t < ntok, r < rows, from
 * the codes (see above), with scratch in ws (NULL: allocated for this call).
 * Activations with NaN/Inf give KVQ_ERR_NONFINITE.
 */
int kvq_wmat_matmul(const kvq_wmat *w, kvq_pool *pool, kvq_wmat_ws *ws, const float *X, int64_t ntok, float *Y,
                    int64_t ldy);

/*
 * Float64 reference of the same product from the decoded weights (tests):
 * every row decoded, products summed in double.
 */
int kvq_wmat_matmul_ref(const kvq_wmat *w, const float *X, int64_t ntok, double *Y);

#endif
