/* microbench: tcq score with nq queries at once (new: records in the lanes from 16) vs in chunks of 8
 * (what the kernel did before for every nq); ticks per weight and query, best of R rounds, alternated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <x86intrin.h>
#include "kvq.h"
static unsigned long long now(void) { return __rdtsc(); }
int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "tcq:4";
    int acc_mode = argc > 4 && !strcmp(argv[4], "acc");
    int d = argc > 2 ? atoi(argv[2]) : 256, n = argc > 3 ? atoi(argv[3]) : 192;
    kvq_plan *p;
    if (kvq_plan_create(&p, spec, d, 1, NULL, 0)) return 1;
    size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    float *x = malloc(sizeof(float) * n * d);
    srand(1);
    for (int i = 0; i < n * d; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    unsigned char *codes = malloc(cb * n);
    kvq_encode(p, x, KVQ_DTYPE_F32, n, codes);
    int nqs[] = {1, 4, 7, 8, 16, 64, 256};
    for (int qi = 0; qi < 7; qi++) {
        int nq = nqs[qi];
        float *q = malloc(sizeof(float) * nq * d), *qp = malloc(sizeof(float) * nq * qf), *s = malloc(sizeof(float) * nq * n);
        for (int i = 0; i < nq * d; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
        for (int j = 0; j < nq; j++) kvq_query_prepare(p, q + j * d, qp + j * qf);
        float *ac = calloc((size_t)nq * d, sizeof(float));
        for (int i = 0; i < nq * n; i++) s[i] = (float)rand() / RAND_MAX;
        double best_a = 1e30, best_b = 1e30;
        int reps = 20000000 / (n * d * nq) + 1;
        for (int r = 0; r < 7; r++) {
            unsigned long long t0 = now();
            if (acc_mode) for (int k = 0; k < reps; k++) kvq_accumulate(p, s, nq, codes, n, ac);
            else for (int k = 0; k < reps; k++) kvq_score(p, qp, nq, codes, n, s);
            unsigned long long t1 = now();
            for (int k = 0; k < reps; k++)
                for (int j = 0; j < nq; j += 8) {
                    if (acc_mode) kvq_accumulate(p, s + j * n, nq - j < 8 ? nq - j : 8, codes, n, ac + (size_t)j * d);
                    else kvq_score(p, qp + j * qf, nq - j < 8 ? nq - j : 8, codes, n, s + j * n);
                }
            unsigned long long t2 = now();
            double a = (double)(t1 - t0) / reps / n / d / nq, b = (double)(t2 - t1) / reps / n / d / nq;
            if (a < best_a) best_a = a;
            if (b < best_b) best_b = b;
        }
        printf("{\"op\":\"%s\",\"spec\":\"%s\",\"d\":%d,\"n\":%d,\"nq\":%d,\"ticks_per_wq_all\":%.4f,\"ticks_per_wq_chunks8\":%.4f,\"ratio\":%.2f}\n",
               acc_mode ? "accumulate" : "score", spec, d, n, nq, best_a, best_b, best_b / best_a);
        free(q); free(qp); free(s); free(ac);
    }
    return 0;
}
