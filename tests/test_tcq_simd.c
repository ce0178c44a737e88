/*
 * tcq's SIMD kernels against the scalar references (tcq_kernels.h):
 *   - the forward recursion: the arrays M_t and the final costs bit for bit
 *     (src/codec/tcq_kernels_x86.c, AVX2 and AVX-512, vs tcq_kernels.c), k = 1..4, on random
 *     inputs, constrained and free starts, many lengths;
 *   - the whole encoder through the public API: a plan of each ISA
 *     (kvq_plan_clone_isa) gives the SAME codes as the scalar plan, for
 *     k = 1..4, dims 32..512 (Hadamard and dense rotations, +norot), odd
 *     batch sizes, zero and tiny rows;
 *   - score, accumulate and decode on the same codes within 1e-5 relative
 *     (the float sums may be ordered differently), n = 1..130 keys, nq =
 *     1..11 queries, d = 32 .. 512;
 *   - the AVX-512 kernels (with and without VNNI: KVQ_NO_VNNI) bit for bit
 *     the AVX2 ones (tcq_kernels_x86.c), scores and accumulators.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kvq.h"
#include "codec/tcq_kernels.h"
#include "testutil.h"

static void test_forward(int k, int T, long c, tu_rng *r) {
#if KVQ_X86
    static float f[1u << 12];
    for (uint32_t s = 0; s < (1u << 12); s++) f[s] = (float)tcq_value(s);
    tcq_code tc = {12, k, f};
    const size_t R = (size_t)1 << (12 - k), S = 1u << 12;
    float *Ma = malloc(tcq_scratch_bytes(&tc, T)), *Mb = malloc(tcq_scratch_bytes(&tc, T));
    float *Ca = malloc(S * 4), *Cb = malloc(S * 4), u[512];
    for (int t = 0; t < T; t++) u[t] = (float)(tu_gauss(r) * (t % 7 == 3 ? 3.0 : 1.0));
    if (T > 2) u[1] = 0.0f, u[2] = f[77]; /* exact zeros of the cost */
    memset(Ma, 0, tcq_scratch_bytes(&tc, T));
    memset(Mb, 0, tcq_scratch_bytes(&tc, T));
    tcq_m0(&tc, c, Ma);
    tcq_m0(&tc, c, Mb);
    tcq_forward_ref(&tc, u, T, Ma, Ca);
    tcq_forward_avx2(&tc, u, T, Mb, Cb);
    CHECK(!memcmp(Ma, Mb, (size_t)T * R * 4) && !memcmp(Ca, Cb, S * 4), "forward k=%d T=%d c=%ld: AVX2 != reference", k,
          T, c);
    if (kvq_cpu_isa() >= KVQ_ISA_AVX512) {
        float *Md = malloc(tcq_scratch_bytes(&tc, T)), *Cd = malloc(S * 4);
        memset(Md, 0, tcq_scratch_bytes(&tc, T));
        tcq_m0(&tc, c, Md);
        tcq_forward_avx512(&tc, u, T, Md, Cd);
        CHECK(!memcmp(Ma, Md, (size_t)T * R * 4) && !memcmp(Ca, Cd, S * 4),
              "forward k=%d T=%d c=%ld: AVX-512 != reference", k, T, c);
        free(Md);
        free(Cd);
    }
    uint32_t sa[512], sb[512], e = tcq_argmin(&tc, Ca, c < 0 ? -1 : c);
    CHECK(tcq_argmin(&tc, Ca, -1) == tcq_argmin_all_avx2(&tc, Ca), "argmin k=%d T=%d", k, T);
    Ca[100] = Ca[3000] = -1.0f; /* equal minima: the first */
    CHECK(tcq_argmin_all_avx2(&tc, Ca) == 100 && tcq_argmin(&tc, Ca, -1) == 100, "argmin ties");
    tcq_traceback_ref(&tc, u, Ma, T, e, sa);
    tcq_traceback_avx2(&tc, u, Mb, T, e, sb);
    CHECK(!memcmp(sa, sb, (size_t)T * 4), "traceback k=%d T=%d", k, T);
    free(Ma);
    free(Mb);
    free(Ca);
    free(Cb);
#else
    (void)k, (void)T, (void)c, (void)r;
#endif
}

static void test_plan(const char *spec, int d, size_t n, int nq, kvq_isa isa, tu_rng *r) {
    kvq_plan *fast = NULL, *ref = NULL, *p = NULL;
    CHECK_OK(kvq_plan_create(&p, spec, d, 3, NULL, 0));
    if (!p) return;
    CHECK_OK(kvq_plan_clone_isa(&fast, p, isa));
    CHECK_OK(kvq_plan_clone_isa(&ref, p, KVQ_ISA_SCALAR));
    kvq_plan_free(p);
    if (!fast || !ref) {
        kvq_plan_free(fast);
        kvq_plan_free(ref);
        return;
    }
    const size_t cb = kvq_plan_code_bytes(ref), qf = kvq_plan_query_floats(ref);
    float *x = malloc(n * d * 4), *q = malloc((size_t)nq * d * 4), *qp = malloc(nq * qf * 4);
    float *sr = malloc(nq * n * 4), *sf = malloc(nq * n * 4), *w = malloc(nq * n * 4);
    float *ar = calloc((size_t)nq * d, 4), *af = calloc((size_t)nq * d, 4), *dr = malloc(n * d * 4), *df = malloc(n * d * 4);
    uint8_t *cr = malloc(n * cb), *cf = malloc(n * cb);
    for (size_t i = 0; i < n * d; i++) x[i] = (float)tu_gauss(r);
    if (n > 2) {
        memset(x + d, 0, (size_t)d * 4);                               /* a zero row */
        for (int c = 0; c < d; c++) x[2 * d + c] = (float)(1e-30 * tu_gauss(r)); /* a tiny one */
    }
    for (int i = 0; i < nq * d; i++) q[i] = (float)tu_gauss(r);
    for (size_t i = 0; i < nq * n; i++) w[i] = (float)tu_uniform(r);
    CHECK_OK(kvq_encode(ref, x, KVQ_DTYPE_F32, n, cr));
    CHECK_OK(kvq_encode(fast, x, KVQ_DTYPE_F32, n, cf));
    CHECK(!memcmp(cr, cf, n * cb), "%s d=%d n=%zu isa=%s: codes differ from the reference's", spec, d, n,
          kvq_isa_name(isa));
    for (int j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(ref, q + j * d, qp + j * qf));
    CHECK_OK(kvq_score(ref, qp, nq, cr, n, sr));
    CHECK_OK(kvq_score(fast, qp, nq, cr, n, sf));
    /* integer dots with the 8-bit query: bit for bit the reference's on every ISA */
    CHECK(!memcmp(sf, sr, nq * n * 4), "%s d=%d n=%zu nq=%d isa=%s%s: scores != the reference's", spec, d, n, nq,
          kvq_isa_name(isa), getenv("KVQ_NO_VNNI") ? " (no vnni)" : "");
    if (n * cb > 0) { /* the codes at the very end of an allocation (loads must not pass it), odd offset */
        uint8_t *big = malloc(n * cb + 1);
        float *se = malloc(nq * n * 4);
        memcpy(big + 1, cr, n * cb);
        CHECK_OK(kvq_score(fast, qp, nq, big + 1, n, se));
        CHECK(!memcmp(se, sr, nq * n * 4), "%s d=%d n=%zu nq=%d isa=%s: scores at an array end differ", spec, d, n,
              nq, kvq_isa_name(isa));
        free(big);
        free(se);
    }
    double e;
    CHECK_OK(kvq_accumulate(ref, w, nq, cr, n, ar));
    CHECK_OK(kvq_accumulate(fast, w, nq, cr, n, af));
    e = tu_rel_l2(af, ar, (size_t)nq * d);
    CHECK(e < 1e-5, "%s d=%d n=%zu nq=%d isa=%s accumulate rel diff %.3g", spec, d, n, nq, kvq_isa_name(isa), e);
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512) { /* bit for bit the AVX2 kernels */
        kvq_plan *a2 = NULL;
        CHECK_OK(kvq_plan_clone_isa(&a2, fast, KVQ_ISA_AVX2));
        if (a2) {
            float *s2 = malloc(nq * n * 4), *acc2 = calloc((size_t)nq * d, 4), *acc5 = calloc((size_t)nq * d, 4);
            CHECK_OK(kvq_score(a2, qp, nq, cr, n, s2));
            CHECK(!memcmp(s2, sf, nq * n * 4), "%s d=%d n=%zu nq=%d %s: AVX-512 scores != AVX2's", spec, d, n, nq,
                  getenv("KVQ_NO_VNNI") ? "no vnni" : "vnni");
            for (size_t i = 0; i < (size_t)nq * d; i++) acc2[i] = acc5[i] = (float)(i % 5) - 2.0f;
            CHECK_OK(kvq_accumulate(a2, w, nq, cr, n, acc2));
            CHECK_OK(kvq_accumulate(fast, w, nq, cr, n, acc5));
            CHECK(!memcmp(acc2, acc5, (size_t)nq * d * 4), "%s d=%d n=%zu nq=%d %s: AVX-512 accumulate != AVX2's", spec,
                  d, n, nq, getenv("KVQ_NO_VNNI") ? "no vnni" : "vnni");
            free(s2);
            free(acc2);
            free(acc5);
        }
        kvq_plan_free(a2);
    }
#endif
    CHECK_OK(kvq_decode(ref, cr, n, dr));
    CHECK_OK(kvq_decode(fast, cr, n, df));
    CHECK(tu_rel_l2(df, dr, n * d) < 1e-6, "%s d=%d isa=%s decode", spec, d, kvq_isa_name(isa));
    free(x); free(q); free(qp); free(sr); free(sf); free(w); free(ar); free(af); free(dr); free(df); free(cr); free(cf);
    kvq_plan_free(fast);
    kvq_plan_free(ref);
}

/* The 8-bit query: tcq_query8_avx2's bytes and floats are the reference's (random q~, an all-zero one,
 * and values whose products land on .5: lrint's ties to even). */
static void test_query8(int d, tu_rng *r) {
#if KVQ_X86
    float a[2 * KVQ_DIM_MAX + 2], b[2 * KVQ_DIM_MAX + 2];
    for (int pass = 0; pass < 3; pass++) {
        for (int t = 0; t < d; t++)
            a[t] = pass == 0 ? (float)tu_gauss(r) : pass == 1 ? 0.f : (float)((int)(tu_next(r) % 255) - 127) * 0.25f;
        if (pass == 2) a[0] = 63.5f; /* m = 63.5: q~ * 2 lands on every half integer */
        memcpy(b, a, sizeof(float) * (size_t)d);
        memset(a + d, 0x5a, sizeof(float) * ((size_t)d + 2));
        memset(b + d, 0x5a, sizeof(float) * ((size_t)d + 2));
        tcq_query8_ref(d, a);
        tcq_query8_avx2(d, b);
        CHECK(!memcmp(a, b, sizeof(float) * (2 * (size_t)d + 2)), "query8 d=%d pass %d: AVX2 != reference", d, pass);
    }
#else
    (void)d, (void)r;
#endif
}

int main(void) {
    tu_rng r = {1313};
    kvq_isa best = kvq_cpu_isa();
    if (best >= KVQ_ISA_AVX2)
        for (int k = 1; k <= 4; k++) {
            static const int Ts[] = {2, 3, 9, 31, 64, 100, 128, 257};
            for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++) {
                test_forward(k, Ts[i], -1, &r);
                test_forward(k, Ts[i], (long)(tu_next(&r) % (1u << (12 - k))), &r);
            }
        }
    if (best >= KVQ_ISA_AVX2)
        for (int d = 8; d <= KVQ_DIM_MAX; d += d < 64 ? 8 : 56) test_query8(d, &r);
    static const int dims[] = {32, 64, 80, 96, 128, 136, 256, 512};
    static const size_t ns[] = {1, 3, 7, 17, 33, 130};
    static const int nqs[] = {1, 2, 3, 4, 8, 11};
    int count = 0;
    /* AVX-512 twice: with VNNI where the CPU has it, and without (KVQ_NO_VNNI, read at plan creation) */
    const int top = (int)best + (best >= KVQ_ISA_AVX512 && kvq_cpu_has_int8_dot());
    for (int pass = KVQ_ISA_AVX2; pass <= top; pass++) {
        const int isa = pass > KVQ_ISA_AVX512 ? KVQ_ISA_AVX512 : pass;
        if (pass == KVQ_ISA_AVX512 && top > KVQ_ISA_AVX512) setenv("KVQ_NO_VNNI", "1", 1);
        else unsetenv("KVQ_NO_VNNI");
        for (int k = 1; k <= 4; k++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
                char spec[32];
                snprintf(spec, sizeof spec, "tcq:%d%s", k, di % 3 == 1 ? "+norot" : "");
                size_t n = dims[di] >= 256 ? ns[(k + di) % 3] : ns[(k + di) % 6];
                test_plan(spec, dims[di], n, nqs[(k + di + pass) % 6], (kvq_isa)isa, &r);
                count++;
            }
        /* the score kernels' record groups (4, 2 and the tails) and query chunks (1..8, 9..11),
         * f32 scales, the hot dims of weights (block 256, 128, 64) */
        static const int hot[] = {64, 128, 256};
        for (int k = 1; k <= 4; k++)
            for (size_t di = 0; di < 3; di++)
                for (size_t n = 1; n <= 9; n += 4) {
                    char spec[32];
                    snprintf(spec, sizeof spec, "tcq:%d%s", k, n == 5 ? "+scale32" : "");
                    test_plan(spec, hot[di], n, (int)(1 + (tu_next(&r) % 11)), (kvq_isa)isa, &r);
                    count++;
                }
        /* many queries (AVX-512 VNNI from 8: the records in the lanes, 16 a block, the queries 8 a
         * pass): record tails 1..15, query tails 1..7, every width */
        static const size_t nbig[] = {1, 16, 17, 40};
        static const int qbig[] = {8, 13, 23, 64};
        for (int k = 1; k <= 4; k++)
            for (size_t di = 0; di < 3; di++) {
                char spec[32];
                snprintf(spec, sizeof spec, "tcq:%d%s", k, di == 1 ? "+scale32" : "");
                test_plan(spec, hot[di], nbig[(k + di) % 4], qbig[(k + di + pass) % 4], (kvq_isa)isa, &r);
                count++;
            }
        test_plan("tcq:3", 512, 33, 19, (kvq_isa)isa, &r);
        test_plan("tcq:2+norot", 96, 18, 17, (kvq_isa)isa, &r);
        count += 2;
    }
    unsetenv("KVQ_NO_VNNI");
    printf("cpu isa: %s, %d spec/dim/isa combinations\n", kvq_isa_name(best), count);
    return tu_finish("test_tcq_simd");
}
