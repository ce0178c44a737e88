/* Helpers shared by the cache tests (tests/cache_ref.c). */
#ifndef KVQ_TEST_CACHE_REF_H
#define KVQ_TEST_CACHE_REF_H

#include <stddef.h>

#include "kvq.h"
#include "testutil.h"

/* n floats of N(0, sd^2) (malloc'ed). */
float *cr_gauss(tu_rng *r, size_t n, double sd);
/* A cache configuration of layers x H heads x d with methods ks / vs, seed 42. */
kvq_cache_config cr_base_cfg(int layers, int H, int d, const char *ks, const char *vs);
/* Relative L2 error of a vs b over n values. */
double cr_rel_err(const float *a, const double *b, size_t n);
/* Worst relative L2 error over rows of d values. */
double cr_worst_row_err(const float *a, const double *b, size_t rows, int d);
/* 1 if the plan scores with 8-bit queries (its scores are its own estimator). */
int cr_int_scores(const kvq_plan *p);
/* float64 attention of nq queries at pos0.. from the cache's own records
 * (out: nq x HQ x d), the reference of kvq_cache_attend. */
void cr_ref_from_cache(const kvq_cache *c, int layer, const float *q, size_t nq, int HQ, size_t pos0, float scale,
                       int sliding, double *out);
#endif
