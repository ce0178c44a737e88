/* kvq_plan_export: a read-only view of a plan's tables (plan_export.h). */
#include <string.h>

#include "codec_internal.h"
#include "plan_export.h"

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
    if (p->inner) return KVQ_OK; /* +outliers */
    const char *name = p->m->name;
    if (!strcmp(name, "f16")) t->kind = KVQ_LAY_F16;
    else if (!strcmp(name, "q8")) t->kind = KVQ_LAY_Q8;
    else if (!strcmp(name, "tq-mse")) t->kind = KVQ_LAY_TQ, t->bits = p->bits;
    else if (!strcmp(name, "tq-prod")) t->kind = KVQ_LAY_TQPROD, t->bits = p->bits - 1;
    else if (!strcmp(name, "qjl")) t->kind = KVQ_LAY_QJL;
    else if (!strcmp(name, "rvq")) t->kind = KVQ_LAY_RVQ, t->bits = p->bits;
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
        t->m = p->qjl_m;
        t->S = p->S;
    }
    return KVQ_OK;
}
