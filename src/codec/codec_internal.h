/*
 * Internal codec structures: the plan, the method and wrapper tables,
 * shared helpers. A method is one file (m_*.c) exporting one `kvq_method`
 * row; a wrapper (+outliers, +center) one file exporting one `kvq_wrapper`
 * row; registry.c lists the rows, and plan.c reaches methods and wrappers
 * only through them. Everything a method precomputes lives in the plan,
 * which is immutable after creation and shared read-only by threads.
 */
#ifndef KVQ_CODEC_INTERNAL_H
#define KVQ_CODEC_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvq.h"
#include "layouts.h" /* record layouts, shared with CUDA */
#include "rng.h" /* kvq_rng: the seeded streams of rotations and projections */

#define KVQ_MAX_LEVELS 256

/* ---- rotation (rotation.c) --------------------------------------------- */
typedef enum { ROT_NONE = 0, ROT_HADAMARD = 1, ROT_DENSE = 2 } rot_kind;

typedef struct kvq_rotation {
    rot_kind kind;
    int d;
    float *signs; /* 2 x d, +-1: the two Hadamard rounds' signs s1, s2 */
    float *mat;   /* d x d row-major orthogonal Q (dense): y = Q x */
    float *mat_t; /* Q^T, row-major, for the inverse */
    kvq_isa isa;
} kvq_rotation;

/* Seeded rotation for dim d: Hadamard if d is a power of two, else Haar. */
int rot_init(kvq_rotation *r, int d, uint64_t seed, int enabled, kvq_isa isa);
void rot_free(kvq_rotation *r);
/* y = R x (y may equal x). */
void rot_apply(const kvq_rotation *r, const float *x, float *y);
/* x = R^T y (x may equal y). */
void rot_apply_inv(const kvq_rotation *r, const float *y, float *x);
/* In-place unnormalised fast Walsh-Hadamard transform, n a power of two. */
void fwht_ref(float *x, int n);
void fwht_avx2(float *x, int n);
void fwht_avx512(float *x, int n);

/* y = M x for row-major rows x cols M, cols % 8 == 0 (matvec.c). */
void matvec(const float *m, int rows, int cols, const float *x, float *y, kvq_isa isa);

/* ---- Lloyd-Max codebooks (lloyd_max.c) ---------------------------------- */
typedef enum { DENS_GAUSS = 0, DENS_LAPLACE = 1, DENS_SPHERE = 2 } kvq_density;

typedef struct kvq_codebook {
    int bits, n;                       /* n = 2^bits levels */
    float c[KVQ_MAX_LEVELS];           /* centroids, ascending */
    float t[KVQ_MAX_LEVELS];           /* t[i] = boundary between c[i] and c[i+1], i < n-1; t[n-1] = +inf */
    double mse;                        /* E[(X - Q(X))^2] under the density (before snapping) */
    /* int8 grid (cb_snap_int8, codebooks of <= 16 levels): c[i] = cscale * c8[i]
     * exactly, ci[i] = (float)c8[i]; used by the integer score kernels. */
    int snapped;
    /* guess of a coordinate's index, g = clamp(floor(x * ga + gb), 0, n-1),
     * verified at creation to be off by at most one everywhere (guess_ok);
     * the SIMD encoder then needs two compares instead of a binary search */
    int guess_ok;
    float ga, gb;
    float cscale;
    float ci[32];   /* 32: SIMD loads read two 16-entry halves */
    int8_t c8[16];
} kvq_codebook;

/* Moves the centroids of a <= 16-level codebook onto the grid
 * cscale * {-127..127}, cscale = max|c| / 127, and recomputes the boundaries
 * (midpoints). The MSE cost is below 0.5% at 4 bits (grid step 0.02 against
 * a quantization error of std 0.1); in exchange scores are exact integer dot
 * products of 8-bit queries and 8-bit centroids (tq_kernels.h). */
void cb_snap_int8(kvq_codebook *cb);
/* Sets ga, gb and guess_ok (called by cb_snap_int8). */
void cb_prepare_guess(kvq_codebook *cb);

/* Solves Lloyd-Max for 2^bits levels of the density (d used by DENS_SPHERE:
 * density of sqrt(d) * (a coordinate of a uniform point on S^{d-1})). */
int lloyd_max_solve(kvq_codebook *cb, kvq_density dens, int bits, int d);
/* Index of the nearest centroid: number of boundaries below x, branch-free. */
static inline int cb_quantize(const kvq_codebook *cb, float x) {
    int idx = 0;
    for (int step = cb->n >> 1; step > 0; step >>= 1) idx += (x > cb->t[idx + step - 1]) ? step : 0;
    return idx;
}

/* ---- bit packing (bitpack.c) -------------------------------------------- */
/* LSB-first contiguous bitstream of n fields of b bits (1 <= b <= 8). */
void bits_pack(const uint8_t *idx, size_t n, int b, uint8_t *out);
void bits_unpack(const uint8_t *in, size_t n, int b, uint8_t *idx);
size_t bits_bytes(size_t n, int b);
/*
 * "Strided" layout used by the rotated methods (d % 8 == 0): the b bits of an
 * index are split into sub-fields of 4, 2 and 1 bits (low bits first: b=3 is
 * 2+1, b=5 is 4+1, b=6 is 4+2, b=7 is 4+2+1, b=8 is 4+4). A w-bit sub-field
 * occupies d*w/8 bytes in which byte j holds, in its bit field k (bits
 * k*w..k*w+w-1), the index of coordinate j + k*(d*w/8). A 16-byte load thus
 * yields 16 consecutive coordinates per field with one shift and mask.
 */
void strided_pack(const uint8_t *idx, int d, int b, uint8_t *out);
void strided_unpack(const uint8_t *in, int d, int b, uint8_t *idx);

/* ---- the plan ------------------------------------------------------------ */
typedef struct kvq_plan kvq_plan;
typedef struct kvq_method kvq_method;
typedef struct kvq_wrapper kvq_wrapper;

/* Kernels of one plan (chosen per ISA at creation). Codes are records of
 * code_bytes; queries are prepared rows of qfloats; accumulators are rows of
 * d floats in the rotated domain. */
typedef int (*enc_fn)(const kvq_plan *p, const float *x, uint8_t *code);
/* n finite f32 rows at once (optional; kvq_encode falls back to enc_fn per row) */
typedef int (*enc_rows_fn)(const kvq_plan *p, const float *x, size_t n, uint8_t *codes);
typedef void (*dec_fn)(const kvq_plan *p, const uint8_t *code, float *y_rot);
typedef void (*prep_fn)(const kvq_plan *p, const float *q, float *qp);
typedef void (*score_fn)(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                         float *scores);
typedef void (*accum_fn)(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n,
                         float *acc);

typedef struct kvq_plan_opts {
    int bits;       /* -1: method default */
    int m;          /* QJL rows, 0 = d */
    int outliers;   /* K, 0 = none */
    int norot;
    int scale_norm; /* 1: store the norm, 0: least-squares scale */
    int scale32;    /* f32 scales */
    int cb_gauss;   /* Gaussian codebook instead of sphere */
    int center;     /* +center: subtract the calibrated per-channel mean */
    int chscale;    /* +chscale: +center, then scale channel c by (sigma_c / rms sigma)^-1/2 */
} kvq_plan_opts;

struct kvq_plan {
    const kvq_method *m;   /* the method (of the inner plan, for a wrapper) */
    const kvq_wrapper *w;  /* the wrapper around the inner plan, NULL for a plain method */
    char spec[80];
    int d;
    uint64_t seed;
    kvq_plan_opts o;
    int bits;          /* resolved bit width */
    kvq_isa isa;
    int vnni;          /* AVX-512 VNNI + VBMI integer kernels allowed (isa == AVX512) */
    kvq_layout rec;    /* record layout (layouts.h); KVQ_LAY_NONE for +outliers, whose file describes it */
    size_t code_bytes; /* bytes from one record to the next: rec.bytes (an inner plan: the outer record's) */
    size_t qfloats;    /* floats of a prepared query */
    int can_decode;
    int rotated;       /* accumulators live in rot's domain */
    kvq_rotation rot;
    kvq_codebook cb;   /* main codebook */
    kvq_codebook cb2;  /* second codebook (rvq stage 2, polar levels...) */
    float *S;          /* QJL projection, qjl_m x d row-major, N(0,1) */
    int qjl_m;
    void *priv;        /* method-private tables */
    kvq_plan *inner;   /* a wrapper's plan of the method (+outliers: for the non-outlier channels);
                          shared by the plans of kvq_plan_create_like (inner_shared = 1) */
    int inner_shared;  /* 1: p->inner is another plan's too: attach reads it, never writes it */
    size_t own_code_bytes, own_qfloats; /* this plan's own record and prepared row, before a wrapper
                          widens code_bytes / qfloats to its strides (wrapper_inner_strides) */
    atomic_int refs;   /* references: 1 at creation, +1 per plan sharing this one as its inner plan */
    int *ch_out;       /* +outliers: K outlier channels, ascending */
    int *ch_in;        /* +outliers: d - K other channels, ascending */
    float *mu;         /* +center: 4 x d floats: the mean, the scaled mean in the inner plan's domain,
                          the channel scales a and 1 / a (all 1 without +chscale) */
    enc_fn encode;
    enc_rows_fn encode_rows; /* NULL: encode row by row */
    dec_fn decode;     /* NULL for key-only methods */
    prep_fn prep;
    score_fn score;
    accum_fn accum;    /* NULL for key-only methods */
};

struct kvq_method {
    const char *name;
    int min_bits, max_bits, default_bits; /* 0,0,0: no bits argument */
    int (*init)(kvq_plan *p);             /* sets rec, code_bytes (plan_layout), qfloats, kernels, tables */
    void (*fini)(kvq_plan *p);            /* frees priv (may be NULL) */
    int colon_rows;                       /* 1: "name:N" sets the QJL rows m (qjl:M), not the bits */
};

/*
 * A wrapper turns a plan of any method into another (+outliers=K: K int8
 * channels beside an inner plan of dim d - K; +center, +chscale: a
 * calibrated mean and channel scales around an inner plan of dim d).
 * plan.c calls, in order: inner (before the plan exists: the inner plan's
 * options, dim and seed; KVQ_ERR_INVALID_ARG for options out of range),
 * calibrate (the calibration rows, or the tables of src when cloning),
 * then builds p->inner, then attach (record, prepared rows, kernels around
 * p->inner). unrotate serves kvq_unrotate; fini frees what calibrate and
 * attach allocated (on a partly built plan too).
 */
struct kvq_wrapper {
    const char *name;                        /* its option ("+outliers"), for messages */
    int needs_calib;                         /* 1: kvq_plan_create needs calibration rows */
    int (*selected)(const kvq_plan_opts *o); /* 1: the options ask for this wrapper */
    int (*inner)(const kvq_plan_opts *o, int d, uint64_t seed, kvq_plan_opts *io, int *id, uint64_t *iseed);
    /* from the calibration rows, src's tables (a clone), or stats (kvq_plan_create_from_stats: the floats of
     * stats_get, checked: KVQ_ERR_NONFINITE / KVQ_ERR_RANGE for values no calibration gives) */
    int (*calibrate)(kvq_plan *p, const float *calib, size_t n_calib, const kvq_plan *src, const float *stats);
    int (*attach)(kvq_plan *p);
    int (*unrotate)(const kvq_plan *p, const float *acc, float *out);
    void (*fini)(kvq_plan *p);
    /* the calibrated state as floats (kvq_plan_stats): how many for options o at dim d, and a plan's */
    size_t (*stats_floats)(const kvq_plan_opts *o, int d);
    void (*stats_get)(const kvq_plan *p, float *out);
};

extern const kvq_method *const kvq_methods[];
extern const size_t kvq_n_methods;
const kvq_method *kvq_method_find(const char *name);
extern const kvq_wrapper *const kvq_wrappers[];
extern const size_t kvq_n_wrappers;

/* ---- spec strings (spec.c) ------------------------------------------------- */
/* spec := name [":" int] { "+" opt ["=" int | "=" word] }: the method row and
 * the options (bits -1: the method's default). */
int spec_parse(const char *spec, const kvq_method **m, kvq_plan_opts *o);
/* p->spec from p's method, bits and options. */
void spec_canonical(kvq_plan *p);

/* ---- helpers shared by methods (method_helpers.c) ----------------------- */
/* Sets p->rec = kvq_layout_make(kind, d, bits, m, scale bytes) and
 * code_bytes from it; KVQ_ERR_UNSUPPORTED_DIM if the layout has no bytes. */
int plan_layout(kvq_plan *p, int kind, int bits, int m);
/* Stores a positive scale in 2 bytes (f16) or 4 (f32) at dst; KVQ_ERR_RANGE
 * beyond its range (KVQ_SCALE16_MAX, KVQ_SCALE32_MAX: layouts.h) or NaN. */
int scale_store(const kvq_plan *p, uint8_t *dst, float s);
/* Sets the strides the inner plan's kernels step by (its records and prepared
 * rows are parts of p's: code_bytes / qfloats of p->inner) on an inner plan
 * built for p; on a shared one (inner_shared) only checks that they are
 * already those (a shared inner plan is never written): KVQ_ERR_STATE if not. */
int wrapper_inner_strides(kvq_plan *p, size_t code_bytes, size_t qfloats);
/* A wrapper's kernels around p->inner: decode and accumulate only when the
 * inner plan decodes (can_decode is the inner plan's). */
void wrapper_kernels(kvq_plan *p, enc_fn enc, dec_fn dec, prep_fn prep, score_fn score, accum_fn accum);
/* Per-channel mean and variance of calibration rows. */
int calib_moments(const float *calib, size_t n_calib, int d, double *mean, double *var);
static inline size_t scale_bytes(const kvq_plan *p) { return p->o.scale32 ? 4 : 2; }
float scale_load(const kvq_plan *p, const uint8_t *src);

/* Generic kernels built on decode: score/accumulate by decoding one record at
 * a time into a d-float stack buffer (the reference for every method). */
void generic_prep_rot(const kvq_plan *p, const float *q, float *qp);
void generic_score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores);
void generic_accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);


/* QJL sketch (qjl_sketch.c): m sign bits of S*r packed LSB-first. */
void qjl_project(const kvq_plan *p, const float *x, float *out); /* out = S x (m floats) */
void qjl_signs(const kvq_plan *p, const float *r, uint8_t *bits);
/* sum_j sign_j * sq_j for m packed signs */
float qjl_signed_sum(const uint8_t *bits, const float *sq, int m);
int qjl_init_matrix(kvq_plan *p);
/* Records holding a norm and m sign bits at fixed offsets (qjl, tq-prod). */
typedef struct qjl_layout {
    size_t stride, norm_off, sign_off;
    int m, scale32;
    float k;  /* sqrt(pi/2) / m */
    int add;  /* 1: add to scores, 0: store */
} qjl_layout;
/* scores[j*n + i] (+)= k |r_i| sum_j sign_ij sq_j, sq rows qstride apart. */
void qjl_scores(const qjl_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                float *scores, kvq_isa isa);
void qjl_scores_ref(const qjl_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                    float *scores);

#endif
