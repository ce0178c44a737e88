/*
 * The online softmax of a warp (base 2: log2(e) is folded into the query),
 * written once for both kernels. A lane holds the scores of tokens g, g + 8
 * for its queries 2qq, 2qq + 1 (the score MMA's accumulator) and O's columns
 * for the same queries, so the rescale needs no shuffle. The warp-wide max is
 * formed only when a vote finds a score above its query's running max (rare
 * after the first tiles): then the maxima are reduced across the warp
 * (3 shuffles per query) and O and l rescaled.
 * FINITE: the running max starts at -1e30 instead of -inf, so 2^(s - m) needs
 * no -inf guard (a first score forces the rescale, alpha = 2^-huge = 0 of the
 * empty O and l); a warp that saw no token ends with -inf again (finish).
 * Without it, masked query columns (all scores -inf) keep m = -inf safely.
 */
#ifndef KVQ_ATTN_SOFTMAX_CUH
#define KVQ_ATTN_SOFTMAX_CUH

#include "attn_bits.cuh"
#include "attn_params.cuh"

namespace kvqa {

template <bool FINITE> struct OnlineSoftmax {
    static constexpr float M0 = FINITE ? -1e30f : -INFINITY;
    float m[2] = {M0, M0}, l[2] = {0.f, 0.f}; /* running max and sum of the lane's two queries */

    /* sc: (token g, query 2qq), (g, 2qq + 1), (g + 8, 2qq), (g + 8, 2qq + 1), masked = -inf;
     * rescales O (all MT = d/16 m-tiles of the V MMA's accumulator, taken by reference so that
     * MT is the caller's head dim: a fixed D / 16 rescaled only half of O at d = 256, issue 17)
     * on a new max; pr = 2^(sc - m). */
    template <int MT> __device__ __forceinline__ void step(const float sc[4], float (&O)[MT][4], float pr[4]) {
        const float t0 = fmaxf(sc[0], sc[2]), t1 = fmaxf(sc[1], sc[3]);
        if (__any_sync(KVQ_FULL_MASK, t0 > m[0] || t1 > m[1])) {
            float x0 = t0, x1 = t1;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                x0 = fmaxf(x0, __shfl_xor_sync(KVQ_FULL_MASK, x0, o));
                x1 = fmaxf(x1, __shfl_xor_sync(KVQ_FULL_MASK, x1, o));
            }
            const float n0 = fmaxf(m[0], x0), n1 = fmaxf(m[1], x1);
            const float al0 = FINITE ? ex2(m[0] - n0) : n0 == -INFINITY ? 1.f : ex2(m[0] - n0);
            const float al1 = FINITE ? ex2(m[1] - n1) : n1 == -INFINITY ? 1.f : ex2(m[1] - n1);
            l[0] *= al0;
            l[1] *= al1;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                O[mt][0] *= al0;
                O[mt][1] *= al1;
                O[mt][2] *= al0;
                O[mt][3] *= al1;
            }
            m[0] = n0;
            m[1] = n1;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float mj = m[j & 1];
            pr[j] = FINITE ? ex2(sc[j] - mj) : mj == -INFINITY ? 0.f : ex2(sc[j] - mj);
        }
        l[0] += pr[0] + pr[2];
        l[1] += pr[1] + pr[3];
    }

    /* after the last tile: the lane's sums over the warp's tokens (every lane holds them) */
    __device__ __forceinline__ void finish() {
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            l[0] += __shfl_xor_sync(KVQ_FULL_MASK, l[0], o);
            l[1] += __shfl_xor_sync(KVQ_FULL_MASK, l[1], o);
        }
        if (FINITE) {
            if (m[0] == M0) m[0] = -INFINITY;
            if (m[1] == M0) m[1] = -INFINITY;
        }
    }
};

} /* namespace kvqa */

#endif
