/* kvq_plan_export: a read-only view of a plan's tables (plan_export.h). */
#include <string.h>

#include "codec_internal.h"
#include "plan_export.h"

extern const kvq_wrapper kvq_wrapper_center;

int kvq_plan_export(const kvq_plan *p, kvq_plan_tables *t) {
    if (!p || !t) return KVQ_ERR_NULL;
    memset(t, 0, sizeof *t);
    t->d = p->d;
    t->scale_bytes = (int)scale_bytes(p);
    t->scale_norm = p->o.scale_norm;
    t->code_bytes = p->code_bytes;
    t->rot = p->rot.kind == ROT_HADAMARD ? 1 : p->rot.kind == ROT_DENSE ? 2 : 0;
    t->signs = p->rot.signs;
    t->rot_mat = p->rot.mat;
    t->kind = KVQ_LAY_NONE;
    if (p->w == &kvq_wrapper_center && p->inner && !p->inner->inner) {
        /* +center / +chscale: the inner plan's tables (its records are this plan's), and the mean and scales */
        const int rc = kvq_plan_export(p->inner, t);
        t->mu = p->mu;
        t->chscale = p->o.chscale;
        return rc;
    }
    if (p->inner) return KVQ_OK; /* +outliers */
    if (p->rec.kind < 0 || (p->rec.kind >= KVQ_LAY_N_CUDA && p->rec.kind != KVQ_LAY_TCQ))
        return KVQ_OK; /* host-only records (tcq: read by the CUDA backend too) */
    t->kind = p->rec.kind;
    t->bits = p->rec.bits;
    if (t->kind == KVQ_LAY_TQ || t->kind == KVQ_LAY_TQPROD || t->kind == KVQ_LAY_RVQ) {
        t->n1 = p->cb.n;
        t->c1 = p->cb.c;
        t->t1 = p->cb.t;
    }
    if (t->kind == KVQ_LAY_RVQ) {
        t->n2 = p->cb2.n;
        t->c2 = p->cb2.c;
        t->t2 = p->cb2.t;
    }
    if (t->kind == KVQ_LAY_TQPROD || t->kind == KVQ_LAY_QJL) {
        t->m = p->rec.m; /* p->qjl_m */
        t->S = p->S;
    }
    return KVQ_OK;
}
