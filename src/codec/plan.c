/*
 * Plans: creation (methods and wrappers through their tables, registry.c),
 * clones, freeing, the accessors. Spec strings: spec.c; the batched API:
 * batch.c; helpers of the methods: method_helpers.c.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"

/* ---- plans ------------------------------------------------------------------ */
/* The wrapper the options select (the first in the table), and how many do. */
static const kvq_wrapper *wrapper_of(const kvq_plan_opts *o, int *count) {
    const kvq_wrapper *w = NULL;
    *count = 0;
    for (size_t i = 0; i < kvq_n_wrappers; i++)
        if (kvq_wrappers[i]->selected(o)) {
            if (!w) w = kvq_wrappers[i];
            ++*count;
        }
    return w;
}

/* One more reference to p (a plan sharing it as its inner plan); kvq_plan_free drops one. */
static kvq_plan *plan_ref(kvq_plan *p) {
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

/*
 * A plan of method m with options o. Plain: the method's init. Wrapped: the
 * wrapper calibrates (or copies the tables of src, a clone's source), the
 * inner plan of m is built here with the options, dim and seed the wrapper
 * gives (or is `shared`, an inner plan built so before: kvq_plan_create_like),
 * then the wrapper attaches its record and kernels around it.
 */
static int plan_new(kvq_plan **out, const kvq_method *m, kvq_plan_opts o, int dim, uint64_t seed, const float *calib,
                    size_t n_calib, kvq_isa isa, const kvq_plan *src, const float *stats, kvq_plan *shared) {
    if (dim < KVQ_DIM_MIN || dim > KVQ_DIM_MAX || dim % 8) return KVQ_ERR_UNSUPPORTED_DIM;
    if (m->max_bits > 0) {
        if (o.bits < 0) o.bits = m->default_bits;
        if (o.bits < m->min_bits || o.bits > m->max_bits) return KVQ_ERR_BITS_RANGE;
    }
    if (o.m && (o.m < 8 || o.m > 4096 || o.m % 8)) return KVQ_ERR_INVALID_ARG;
    /* +m=M sizes a QJL sketch: only qjl and tq-prod have one */
    if (o.m && strcmp(m->name, "qjl") && strcmp(m->name, "tq-prod")) return KVQ_ERR_INVALID_ARG;
    int nw, rc, idim = 0;
    const kvq_wrapper *w = wrapper_of(&o, &nw);
    kvq_plan_opts io;
    uint64_t iseed = 0;
    if (w && (rc = w->inner(&o, dim, seed, &io, &idim, &iseed)) != KVQ_OK) return rc;
    kvq_isa best = kvq_cpu_isa();
    if (isa == KVQ_ISA_BEST) isa = best;
    if (isa > best) return KVQ_ERR_UNSUPPORTED;
    kvq_plan *p = calloc(1, sizeof *p);
    if (!p) return KVQ_ERR_NOMEM;
    atomic_init(&p->refs, 1);
    p->m = m;
    p->d = dim;
    p->seed = seed;
    p->o = o;
    p->bits = m->max_bits > 0 ? o.bits : 0;
    p->isa = isa;
    p->vnni = isa == KVQ_ISA_AVX512 && kvq_cpu_has_int8_dot();
    p->can_decode = 1;
    p->rec.kind = KVQ_LAY_NONE;
    if (nw > 1) { /* one wrapper per plan */
        rc = KVQ_ERR_INVALID_ARG;
    } else if (w) {
        p->w = w;
        rc = w->calibrate(p, calib, n_calib, src, stats);
        if (!rc && shared) { /* built from io, idim, iseed before (the same options, dim, seed and ISA) */
            if (shared->d != idim || shared->seed != iseed || shared->isa != isa || shared->m != m) rc = KVQ_ERR_STATE;
            else p->inner = plan_ref(shared), p->inner_shared = 1;
        } else if (!rc) {
            rc = plan_new(&p->inner, m, io, idim, iseed, NULL, 0, isa, NULL, NULL, NULL);
        }
        if (!rc) rc = w->attach(p);
    } else {
        rc = m->init(p);
    }
    if (rc) {
        kvq_plan_free(p);
        return rc;
    }
    p->own_code_bytes = p->code_bytes; /* before a wrapper around p widens them */
    p->own_qfloats = p->qfloats;
    spec_canonical(p);
    *out = p;
    return KVQ_OK;
}

static int plan_build(kvq_plan **out, const char *spec, int dim, uint64_t seed, const float *calib, size_t n_calib,
                      kvq_isa isa, const kvq_plan *src, const float *stats) {
    if (!out || !spec) return KVQ_ERR_NULL;
    if (dim < KVQ_DIM_MIN || dim > KVQ_DIM_MAX || dim % 8) return KVQ_ERR_UNSUPPORTED_DIM;
    /* n_calib rows of dim floats must be addressable */
    if (n_calib && (size_t)dim * sizeof(float) > SIZE_MAX / n_calib) return KVQ_ERR_OVERFLOW;
    const kvq_method *m;
    kvq_plan_opts o;
    int rc = spec_parse(spec, &m, &o);
    if (rc) return rc;
    return plan_new(out, m, o, dim, seed, calib, n_calib, isa, src, stats, NULL);
}

int kvq_plan_create(kvq_plan **out, const char *spec, int dim, uint64_t seed, const float *calib, size_t n_calib) {
    return plan_build(out, spec, dim, seed, calib, n_calib, KVQ_ISA_BEST, NULL, NULL);
}

int kvq_spec_stats_floats(const char *spec, int dim, size_t *n) {
    if (!spec || !n) return KVQ_ERR_NULL;
    if (dim < KVQ_DIM_MIN || dim > KVQ_DIM_MAX || dim % 8) return KVQ_ERR_UNSUPPORTED_DIM;
    const kvq_method *m;
    kvq_plan_opts o;
    int rc = spec_parse(spec, &m, &o), nw;
    if (rc) return rc;
    const kvq_wrapper *w = wrapper_of(&o, &nw);
    *n = w && w->needs_calib ? w->stats_floats(&o, dim) : 0;
    return KVQ_OK;
}

size_t kvq_plan_stats_floats(const kvq_plan *plan) {
    return plan && plan->w && plan->w->needs_calib ? plan->w->stats_floats(&plan->o, plan->d) : 0;
}

int kvq_plan_stats(const kvq_plan *plan, float *out, size_t n) {
    if (!plan || (!out && n)) return KVQ_ERR_NULL;
    if (n != kvq_plan_stats_floats(plan)) return KVQ_ERR_INVALID_ARG;
    if (n) plan->w->stats_get(plan, out);
    return KVQ_OK;
}

int kvq_plan_create_from_stats(kvq_plan **out, const char *spec, int dim, uint64_t seed, const float *stats,
                               size_t n_stats) {
    if (!out || !spec || (!stats && n_stats)) return KVQ_ERR_NULL;
    size_t want = 0;
    int rc = kvq_spec_stats_floats(spec, dim, &want);
    if (rc) return rc;
    if (n_stats != want) return KVQ_ERR_INVALID_ARG;
    return plan_build(out, spec, dim, seed, NULL, 0, KVQ_ISA_BEST, NULL, want ? stats : NULL);
}

/* A calibrated plan of like's method, options, dim, seed and ISA, from calib or stats, sharing like's inner plan. */
static int plan_like(kvq_plan **out, const kvq_plan *like, const float *calib, size_t n_calib, const float *stats) {
    if (!like->w || !like->w->needs_calib || !like->inner) return KVQ_ERR_INVALID_ARG;
    if (n_calib && (size_t)like->d * sizeof(float) > SIZE_MAX / n_calib) return KVQ_ERR_OVERFLOW;
    /* the inner plan is immutable once its wrapper is built: sharing it writes only its atomic count */
    return plan_new(out, like->m, like->o, like->d, like->seed, calib, n_calib, like->isa, NULL, stats, like->inner);
}

int kvq_plan_create_like(kvq_plan **out, const kvq_plan *like, const float *calib, size_t n_calib) {
    if (!out || !like || (!calib && n_calib)) return KVQ_ERR_NULL;
    return plan_like(out, like, calib, n_calib, NULL);
}

int kvq_plan_create_like_from_stats(kvq_plan **out, const kvq_plan *like, const float *stats, size_t n_stats) {
    if (!out || !like || !stats) return KVQ_ERR_NULL;
    if (!like->w || !like->w->needs_calib) return KVQ_ERR_INVALID_ARG;
    if (n_stats != kvq_plan_stats_floats(like)) return KVQ_ERR_INVALID_ARG;
    return plan_like(out, like, NULL, 0, stats);
}

int kvq_plan_clone_isa(kvq_plan **out, const kvq_plan *plan, kvq_isa isa) {
    if (!out || !plan) return KVQ_ERR_NULL;
    if (isa != KVQ_ISA_SCALAR && isa != KVQ_ISA_AVX2 && isa != KVQ_ISA_AVX512 && isa != KVQ_ISA_BEST)
        return KVQ_ERR_INVALID_ARG;
    return plan_build(out, plan->spec, plan->d, plan->seed, NULL, 0, isa, plan, NULL);
}

int kvq_spec_needs_calibration(const char *spec, int *needs) {
    if (!spec || !needs) return KVQ_ERR_NULL;
    const kvq_method *m;
    kvq_plan_opts o;
    int rc = spec_parse(spec, &m, &o);
    if (rc) return rc;
    int nw;
    const kvq_wrapper *w = wrapper_of(&o, &nw);
    *needs = w && w->needs_calib;
    return KVQ_OK;
}

void kvq_plan_free(kvq_plan *p) {
    if (!p) return;
    /* the last reference frees (acq_rel: every use by other holders happens before) */
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) > 1) return;
    if (p->w) p->w->fini(p); /* the wrapper's tables; p->m's init never ran on p */
    else if (p->m && p->m->fini) p->m->fini(p);
    rot_free(&p->rot);
    free(p->S);
    kvq_plan_free(p->inner);
    free(p);
}

const char *kvq_plan_spec(const kvq_plan *p) { return p ? p->spec : ""; }
int kvq_plan_dim(const kvq_plan *p) { return p ? p->d : 0; }
size_t kvq_plan_code_bytes(const kvq_plan *p) { return p ? p->code_bytes : 0; }
double kvq_plan_bits_per_value(const kvq_plan *p) { return p ? (double)p->code_bytes * 8.0 / p->d : 0; }
int kvq_plan_can_decode(const kvq_plan *p) { return p ? p->can_decode : 0; }
size_t kvq_plan_query_floats(const kvq_plan *p) { return p ? p->qfloats : 0; }
kvq_isa kvq_plan_isa(const kvq_plan *p) { return p ? p->isa : KVQ_ISA_SCALAR; }

