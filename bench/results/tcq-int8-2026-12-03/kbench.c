/* tcq score kernel microbench: cycles (rdtsc) per weight of kvq_score over n records, nq queries */
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>
#include "kvq.h"
int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "tcq:4";
    int d = argc > 2 ? atoi(argv[2]) : 256, nq = argc > 3 ? atoi(argv[3]) : 1;
    size_t n = 256; int reps = argc > 4 ? atoi(argv[4]) : 200;
    kvq_plan *p; if (kvq_plan_create(&p, spec, d, 7, NULL, 0)) return 1;
    size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    float *x = malloc(n * d * 4), *q = malloc(nq * d * 4), *qp = malloc(nq * qf * 4), *s = malloc(nq * n * 4);
    uint8_t *c = malloc(n * cb);
    srand(1); for (size_t i = 0; i < n * d; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < nq * d; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
    kvq_encode(p, x, KVQ_DTYPE_F32, n, c);
    for (int j = 0; j < nq; j++) kvq_query_prepare(p, q + j * d, qp + j * qf);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        unsigned long long t0 = __rdtsc();
        for (int i = 0; i < reps; i++) kvq_score(p, qp, nq, c, n, s);
        double cyc = (double)(__rdtsc() - t0) / reps / (n * d);
        if (cyc < best) best = cyc;
    }
    printf("%s d=%d nq=%d: %.4f ticks/weight (%.4f per weight per query) s0=%g\n", spec, d, nq, best, best / nq, s[0]);
    return 0;
}
