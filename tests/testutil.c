#include "testutil.h"

#include <math.h>

#include "rng.h" /* src/common: the library's splitmix64 */

int tu_failures = 0;
int tu_checks = 0;

int tu_finish(const char *name) {
    printf("%s: %d checks, %d passed, %d failed\n", name, tu_checks, tu_checks - tu_failures, tu_failures);
    return tu_failures ? 1 : 0;
}

uint64_t tu_next(tu_rng *r) { return kvq_splitmix64(&r->s); }

double tu_uniform(tu_rng *r) { return kvq_unit53(tu_next(r)); }

double tu_gauss(tu_rng *r) {
    double u1 = tu_uniform(r), u2 = tu_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double tu_laplace(tu_rng *r) {
    /* inverse CDF of Laplace(0, b), b = 1/sqrt(2) for unit variance */
    double u = tu_uniform(r) - 0.5;
    double mag = -log(1.0 - 2.0 * fabs(u) + 1e-300) / sqrt(2.0);
    return u < 0 ? -mag : mag;
}

void tu_softmax_weights(tu_rng *r, float *w, size_t nq, size_t n, int neg) {
    for (size_t j = 0; j < nq; j++)
        for (size_t i = 0; i < n; i++) {
            float v = (float)exp(2.5 * tu_gauss(r));
            if (j == 1) v = 0;
            if (j == 2) v = (float)(1e-30 * tu_uniform(r));
            w[j * n + i] = v;
        }
    if (neg) w[(nq - 1) * n + n / 2] = -0.5f;
}

double tu_rel_l2(const float *a, const float *b, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}
