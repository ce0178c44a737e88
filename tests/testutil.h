/* Minimal test helpers: CHECK macros that count failures, a seeded RNG. */
#ifndef KVQ_TESTUTIL_H
#define KVQ_TESTUTIL_H
#include <stdint.h>
#include <stdio.h>

extern int tu_failures;
extern int tu_checks;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        tu_checks++;                                                            \
        if (!(cond)) {                                                          \
            tu_failures++;                                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
        }                                                                       \
    } while (0)

#define CHECK_OK(expr)                                                          \
    do {                                                                        \
        int _rc = (expr);                                                       \
        CHECK(_rc == 0, "%s returned %d (%s)", #expr, _rc, kvq_strerror(_rc));  \
    } while (0)

/* Prints a summary line and returns the process exit code. */
int tu_finish(const char *name);

/* splitmix64-seeded xoshiro-like generator, caller-owned. */
typedef struct { uint64_t s; } tu_rng;
uint64_t tu_next(tu_rng *r);
double tu_uniform(tu_rng *r);   /* [0, 1) */
double tu_gauss(tu_rng *r);     /* N(0, 1) */
double tu_laplace(tu_rng *r);   /* unit-variance Laplacian */

/* nq rows of n attention-like weights for kernel tests: exp(2.5 g),
 * a few large and many tiny; row 1 all zeros, row 2 below 1e-30; with neg,
 * one negative weight in the middle of the last row (kernels must take
 * that row and run on their float path). */
void tu_softmax_weights(tu_rng *r, float *w, size_t nq, size_t n, int neg);

/* |a - b| / |b| (L2, in double; |a - b| when b is zero). */
double tu_rel_l2(const float *a, const float *b, size_t n);
#endif
