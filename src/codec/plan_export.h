/*
 * Read-only view of a plan's tables, for backends that upload them (the
 * CUDA backend: rotation signs, codebooks, QJL matrix). Pointers stay valid
 * while the plan lives; nothing is copied.
 */
#ifndef KVQ_PLAN_EXPORT_H
#define KVQ_PLAN_EXPORT_H

#include <stddef.h>

#include "kvq.h"
#include "layouts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvq_plan_tables {
    int kind;          /* enum kvq_layout_kind (KVQ_LAY_NONE: f32, bf16, q4, polar, +outliers); for +center /
                          +chscale every field but mu and chscale is the inner plan's (its records are the plan's) */
    int d;             /* head dim */
    int bits;          /* index bits of the tq stage (tq-mse b, tq-prod b-1, rvq b), else 0 */
    int m;             /* QJL rows (tq-prod, qjl), else 0 */
    int scale_bytes;   /* 2 (f16) or 4 (+scale32) */
    int scale_norm;    /* +scale=norm */
    int rot;           /* 0 none, 1 two-round Hadamard, 2 dense */
    const float *signs;   /* rot 1: 2 x d signs (s1 then s2) */
    const float *rot_mat; /* rot 2: d x d row-major Q (y = Q x) */
    int n1;               /* levels of codebook 1 (0 if none) */
    const float *c1, *t1; /* centroids (n1), boundaries (n1 - 1) */
    int n2;               /* rvq stage 2 codebook */
    const float *c2, *t2;
    const float *S;       /* QJL matrix, m x d row-major */
    size_t code_bytes;
    /* +center / +chscale (m_center.c): 4 x d floats, the mean, a * mean rotated into the inner plan's
     * domain, the channel scales a and their inverses 1 / a (all 1 without +chscale); NULL otherwise */
    const float *mu;
    int chscale;
} kvq_plan_tables;

/* Fills t; KVQ_ERR_NULL for NULL arguments. Never fails otherwise (kind may be KVQ_LAY_NONE).
 * Exported by libkvq.so (KVQ_API) for libkvq-cuda.so, which is linked to it and built from the
 * same tree; not part of the public API (no public header declares it). */
KVQ_API int kvq_plan_export(const kvq_plan *plan, kvq_plan_tables *t);

#ifdef __cplusplus
}
#endif

#endif
