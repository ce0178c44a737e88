/*
 * The tail-biting Viterbi encoder of tcq and the kernel per ISA
 * (tcq_kernels.h): the only file of the family that names both the
 * scalar references (tcq_kernels.c) and the AVX2 kernels (tcq_kernels_x86.c).
 *
 * Tail-biting (QTIP sec. 3.1): the bitstream is circular, so the state
 * before value 0 is made of the last bits of the stream and a record holds
 * exactly T k bits: the path is a cycle, s_0 = ((s_{T-1} << k) | b_0) mod S.
 * Pass 1 is a free Viterbi pass over u_0 .. u_{T-1}: a path P that is a
 * valid cycle everywhere except at the seam, P_{T-1} -> P_0. Pass 2 solves
 * again a window of n = 2 W + 1 values around the seam, u_{T-W} .. u_{T-1},
 * u_0 .. u_W, from the fixed state P_{T-W-1} (its successors: the states
 * whose top L-k bits are P_{T-W-1} mod R) to the fixed state P_W, so that
 * the path, pass 2's in the window and P outside it, is a valid cycle; it
 * is the best such cycle that agrees with P outside the window. W =
 * TCQ_WMUL ceil(L/k) (>= the ceil(L/k) steps after which every state is
 * reachable): survivors of a trellis merge within a few constraint
 * lengths, so the window loses little against the best cycle
 * (docs/METHODS.md, tcq) and the encoder does T + 2 W + 1 steps. When the
 * window would cover the whole cycle (2 W + 2 > T) pass 2 is QTIP's: all T
 * values, s_0's top L-k bits fixed to P_{T-1} mod R, s_{T-1} any state
 * with those low bits.
 */
#include <string.h>

#include "kvq.h"
#include "tcq_kernels.h"

#define TCQ_WMUL 4
#define TCQ_NMAX KVQ_DIM_MAX /* n = 2 W + 1 < T */

int tcq_window(const tcq_code *tc, int T) {
    const int lk = (tc->L + tc->k - 1) / tc->k, w = TCQ_WMUL * lk;
    return w <= (T - 2) / 2 ? w : (T - 2) / 2 >= lk ? (T - 2) / 2 : 0;
}

/* Pass over u[0..T-1] from start groups c (all if c < 0), ending in `end`
 * (or, end < 0, the best state among those with s & (R-1) == c2, all if
 * c2 < 0): the path's states into st. */
static void pass(const tcq_code *tc, const float *u, int T, long c, long end, long c2, float *M, float *C,
                 uint32_t *st, kvq_isa isa) {
    tcq_m0(tc, c, M);
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX2) {
        if (isa >= KVQ_ISA_AVX512) tcq_forward_avx512(tc, u, T, M, C);
        else tcq_forward_avx2(tc, u, T, M, C);
        const uint32_t e = end >= 0 ? (uint32_t)end : c2 < 0 ? tcq_argmin_all_avx2(tc, C) : tcq_argmin(tc, C, c2);
        tcq_traceback_avx2(tc, u, M, T, e, st);
        return;
    }
#endif
    (void)isa;
    tcq_forward_ref(tc, u, T, M, C);
    tcq_traceback_ref(tc, u, M, T, end >= 0 ? (uint32_t)end : tcq_argmin(tc, C, c2), st);
}

void tcq_encode_path(const tcq_code *tc, const float *u, int T, void *scratch, uint32_t *st, kvq_isa isa) {
    const uint32_t Rm = (1u << (tc->L - tc->k)) - 1;
    float *C = scratch, *M = C + ((size_t)1 << tc->L);
    memset(M + (size_t)T * (1u << (tc->L - tc->k)), 0, 8 * sizeof *M); /* the slack the AVX2 loads may read */
    pass(tc, u, T, -1, -1, -1, M, C, st, isa);
    const int W = tcq_window(tc, T);
    if (W == 0) { /* the whole cycle */
        const long c = (long)(st[T - 1] & Rm);
        pass(tc, u, T, c, -1, c, M, C, st, isa);
        return;
    }
    const int n = 2 * W + 1;
    float v[TCQ_NMAX];
    uint32_t sw[TCQ_NMAX];
    for (int i = 0; i < n; i++) v[i] = u[(T - W + i) % T];
    pass(tc, v, n, (long)(st[T - W - 1] & Rm), (long)st[W], -1, M, C, sw, isa);
    for (int i = 0; i < n; i++) st[(T - W + i) % T] = sw[i];
}

void tcq_values(const tcq_code *tc, const uint8_t *bits, int T, float *v, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX2) { tcq_values_avx2(tc, bits, T, v); return; }
#endif
    (void)isa;
    tcq_values_ref(tc, bits, T, v);
}

void tcq_query8(int d, float *qp, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX2 && d % 8 == 0) { tcq_query8_avx2(d, qp); return; }
#endif
    (void)isa;
    tcq_query8_ref(d, qp);
}

void tcq_score(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
               float *scores, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512) { tcq_score_avx512(R, qp, qstride, nq, codes, n, scores); return; }
    if (isa >= KVQ_ISA_AVX2) { tcq_score_avx2(R, qp, qstride, nq, codes, n, scores); return; }
#endif
    (void)isa;
    tcq_score_ref(R, qp, qstride, nq, codes, n, scores);
}

void tcq_accum(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc,
               kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512) { tcq_accum_avx512(R, w, nq, codes, n, acc); return; }
    if (isa >= KVQ_ISA_AVX2) { tcq_accum_avx2(R, w, nq, codes, n, acc); return; }
#endif
    (void)isa;
    tcq_accum_ref(R, w, nq, codes, n, acc);
}
