/*
 * Encode rate of one method, one thread (public API only): kvq_encode of N
 * Gaussian rows per call (f32, or the same values as f16 / bf16), each call
 * timed; min and median per-call time per vector, and the min of the
 * thread's CPU time per vector (on a loaded machine the wall clock counts
 * the time other processes hold the core). Per-call timing keeps the
 * minimum meaningful on a shared, noisy machine. Used for the encode figures
 * of docs/RESULTS.md (issue 2). Not built by CMake:
 *
 *   gcc -O2 -Iinclude bench/encode_rate.c build/libkvq.a -lm -lpthread -o build/encode_rate
 *   build/encode_rate SPEC DIM [DTYPE [N [CALLS]]]   e.g. build/encode_rate tq-mse:4 128 f32 4096 300
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvq.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double uniform(unsigned long long *s) { /* xorshift64, (0, 1) */
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SPEC DIM [f32|f16|bf16 [N [CALLS]]]\n", argv[0]);
        return 2;
    }
    const char *spec = argv[1], *dts = argc > 3 ? argv[3] : "f32";
    int d = atoi(argv[2]);
    size_t n = argc > 4 ? (size_t)atol(argv[4]) : 4096;
    int calls = argc > 5 ? atoi(argv[5]) : 300;
    kvq_dtype dt = !strcmp(dts, "f16") ? KVQ_DTYPE_F16 : !strcmp(dts, "bf16") ? KVQ_DTYPE_BF16 : KVQ_DTYPE_F32;
    kvq_plan *p = NULL;
    int rc = kvq_plan_create(&p, spec, d, 1, NULL, 0);
    if (rc) {
        fprintf(stderr, "%s: %s\n", spec, kvq_strerror(rc));
        return 1;
    }
    float *x = malloc(n * d * sizeof *x);
    uint16_t *h = malloc(n * d * sizeof *h);
    uint8_t *codes = malloc(n * kvq_plan_code_bytes(p));
    double *t = malloc((size_t)calls * sizeof *t);
    if (!x || !h || !codes || !t || calls < 1) return 1;
    unsigned long long s = 88172645463325252ull;
    for (size_t i = 0; i + 1 < n * d; i += 2) { /* Box-Muller */
        double r = sqrt(-2 * log(uniform(&s))), a = 6.283185307179586 * uniform(&s);
        x[i] = (float)(r * cos(a));
        x[i + 1] = (float)(r * sin(a));
    }
    for (size_t i = 0; i < n * d; i++) h[i] = dt == KVQ_DTYPE_F16 ? kvq_f32_to_f16(x[i]) : kvq_f32_to_bf16(x[i]);
    const void *in = dt == KVQ_DTYPE_F32 ? (const void *)x : (const void *)h;
    double cmin = 1e30;
    for (int k = 0; k < calls; k++) {
        double t0 = now(), c0 = cpu_now();
        rc = kvq_encode(p, in, dt, n, codes);
        t[k] = (now() - t0) / (double)n;
        double c = (cpu_now() - c0) / (double)n;
        if (c < cmin) cmin = c;
        if (rc) {
            fprintf(stderr, "encode: %s\n", kvq_strerror(rc));
            return 1;
        }
    }
    qsort(t, (size_t)calls, sizeof *t, cmp_double);
    printf("%s d=%d %s, %zu rows per call, %d calls: min %.1f ns/vector (%.2f M/s), median %.1f ns (%.2f M/s), "
           "min cpu %.1f ns (%.0f /s)\n",
           kvq_plan_spec(p), d, dts, n, calls, t[0] * 1e9, 1e-6 / t[0], t[calls / 2] * 1e9, 1e-6 / t[calls / 2],
           cmin * 1e9, 1 / cmin);
    free(x);
    free(h);
    free(codes);
    free(t);
    kvq_plan_free(p);
    return 0;
}
