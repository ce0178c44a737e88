/*
 * Per-record time of the score and accumulate kernels of one method, one
 * thread (public API only): kvq_score / kvq_accumulate of NQ prepared rows
 * against 64 runs of 256 records (16384 records, L2-resident at d <= 128),
 * best of 150 passes. Used for the kernel figures of docs/RESULTS.md
 * (issue 3). Not built by CMake:
 *
 *   gcc -O2 -Iinclude bench/kernel_ns.c build/libkvq.a -lm -lpthread -o build/kernel_ns
 *   build/kernel_ns SPEC DIM NQ        e.g. build/kernel_ns tq-mse:2 128 4
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kvq.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: kernel_ns SPEC DIM NQ\n");
        return 2;
    }
    const char *spec = argv[1];
    const int d = atoi(argv[2]), nq = atoi(argv[3]);
    const size_t N = 256, P = 64;
    float *x = malloc(sizeof(float) * d * N * P);
    srand(1);
    for (size_t i = 0; i < (size_t)d * N * P; i++) x[i] = (float)((rand() / (double)RAND_MAX - 0.5) * 3);
    int needs = 0;
    kvq_plan *p;
    if (kvq_spec_needs_calibration(spec, &needs) || kvq_plan_create(&p, spec, d, 7, needs ? x : NULL, needs ? 256 : 0)) {
        fprintf(stderr, "%s: no plan\n", spec);
        return 1;
    }
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    unsigned char *codes = malloc(cb * N * P);
    float *q = malloc(sizeof(float) * qf * nq), *S = malloc(sizeof(float) * nq * N);
    float *acc = calloc((size_t)nq * d, sizeof(float));
    if (kvq_encode(p, x, KVQ_DTYPE_F32, N * P, codes)) return 1;
    for (int j = 0; j < nq; j++) kvq_query_prepare(p, x + (size_t)j * d, q + (size_t)j * qf);
    double bs = 1e9, ba = 1e9;
    for (int rep = 0; rep < 150; rep++) {
        double t0 = now();
        for (size_t k = 0; k < P; k++) kvq_score(p, q, nq, codes + k * N * cb, N, S);
        double t1 = now();
        for (size_t i = 0; i < (size_t)nq * N; i++) S[i] = 1.0f / 256; /* softmax-like weights */
        if (kvq_plan_can_decode(p))
            for (size_t k = 0; k < P; k++) kvq_accumulate(p, S, nq, codes + k * N * cb, N, acc);
        double t2 = now();
        if (t1 - t0 < bs) bs = t1 - t0;
        if (t2 - t1 < ba) ba = t2 - t1;
    }
    printf("%-22s d=%3d nq=%d  score %6.2f ns/record  accumulate %6.2f ns/record\n", spec, d, nq, bs * 1e9 / (N * P),
           kvq_plan_can_decode(p) ? ba * 1e9 / (N * P) : 0.0);
    kvq_plan_free(p);
    free(x);
    free(codes);
    free(q);
    free(S);
    free(acc);
    return 0;
}
