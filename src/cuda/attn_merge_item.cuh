/*
 * The merge of a work item by its last block (issue 17 item 2: the merge kernel's launch and wait
 * were ~7 us of a ~30 us step at batch 1). Every main-pass block writes its chunk's partial state
 * (block_merge), then counts itself done on the item's counter (AttnParams.cnt, zeroed by prep);
 * the block that finds itself last (the threadfence-then-atomic pattern of the CUDA programming
 * guide's "memory fence functions") reads every chunk's state of its item from L2 and merges it,
 * one warp per query head: M = max m_c, L = sum 2^(m_c - M) l_c, acc likewise (exactly the merge
 * kernel's sums, in chunk order), then the V plan's inverse rotation and calibration, O = acc / L.
 * Used when there is no f16 window pass (its state would come from another launch) on the
 * tensor-core kernels with a two-round Hadamard V rotation or none; the merge kernel (attn.cu)
 * does the rest.
 */
#ifndef KVQ_ATTN_MERGE_ITEM_CUH
#define KVQ_ATTN_MERGE_ITEM_CUH

#include "attn_block.cuh"

namespace kvqa {

/* The two-round Hadamard rotation of a plan (signs D1, D2; rs = 1 / sqrt d) of the DD
 * values y in shared memory, on one warp: lane holds y[lane E .. lane E + E), E = DD / 32, with
 * its signs s1 = D1, s2 = D2 in registers; the butterflies of fwht_warp (shuffles), so no block
 * barrier (the block-wide transform it replaced took 7 barrier pairs a round: most of the
 * merge's latency at batch 1). Forward (the query, prep): y = H (s2 rs . H (s1 rs . y));
 * inverse (the output, merge): y = s1 rs . H (s2 rs . H y). Same operations in the same order
 * as the block transform: the same floats. */
template <int DD, bool INV>
__device__ __forceinline__ void hadamard2_warp(float *y, const float *s1, const float *s2, float rs, int lane) {
    constexpr int E = DD / 32;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = y[lane * E + e];
    if (!INV)
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = v[e] * s1[e] * rs;
    fwht_warp<E>(v, lane);
#pragma unroll
    for (int e = 0; e < E; e++) v[e] *= s2[e] * rs;
    fwht_warp<E>(v, lane);
    if (INV)
#pragma unroll
        for (int e = 0; e < E; e++) v[e] *= s1[e] * rs;
#pragma unroll
    for (int e = 0; e < E; e++) y[lane * E + e] = v[e];
}
/* Loads lane's signs of the two rounds (sg: 2 DD floats, D1 then D2) for hadamard2_warp. */
template <int DD> __device__ __forceinline__ void hadamard2_signs(const float *sg, int lane, float *s1, float *s2) {
#pragma unroll
    for (int e = 0; e < DD / 32; e++) s1[e] = sg[lane * (DD / 32) + e], s2[e] = sg[DD + lane * (DD / 32) + e];
}
__host__ __device__ constexpr bool pow2_dim(int d) { return (d & (d - 1)) == 0; }

/* The merge of query q of item (s, h, qg) over its nused chunks, by one warp (lane: coordinates
 * lane E .. lane E + E of the output, E = DD / 32); the chunks' states read past L1 (__ldcg: other
 * SMs wrote them in this launch). */
template <int DD>
__device__ __forceinline__ void merge_query_warp(const AttnParams &p, int s, int h, int qg, int q, int nused, int lane) {
    constexpr int E = DD / 32;
    const MergeParams &mp = p.mrg;
    const int SFd = state_floats(DD);
    const float *base = p.part + (size_t)(((s * p.H + h) * p.QG + qg) * (p.nchunk + 1)) * SFd;
    const int hq = h * p.G + qg * QPB + q;
    /* lane's chunks' (m, l): the first 32 kept in registers (one round of loads), more re-read */
    float m0 = -INFINITY, l0 = 0.f, M = -INFINITY;
    if (lane < nused) m0 = __ldcg(base + (size_t)lane * SFd + q), l0 = __ldcg(base + (size_t)lane * SFd + QPB + q);
    M = m0;
    for (int ch = lane + 32; ch < nused; ch += 32) M = fmaxf(M, __ldcg(base + (size_t)ch * SFd + q));
    for (int o = 16; o; o >>= 1) M = fmaxf(M, __shfl_xor_sync(KVQ_FULL_MASK, M, o));
    float acc[E], L = 0.f;
#pragma unroll
    for (int e = 0; e < E; e++) acc[e] = 0.f;
    for (int c0 = 0; c0 < nused; c0 += 32) {
        const int ch = c0 + lane;
        float m = m0, l = l0;
        if (c0 > 0) m = ch < nused ? __ldcg(base + (size_t)ch * SFd + q) : -INFINITY, l = ch < nused ? __ldcg(base + (size_t)ch * SFd + QPB + q) : 0.f;
        const float w = m != -INFINITY ? exp2f(m - M) : 0.f;
        L += w * l;
        /* every used chunk's state is written (finite; 0 where its block saw no token): no branch,
         * so the unrolled loads are all in flight at once */
        const int n = min(32, nused - c0);
#pragma unroll 8
        for (int j = 0; j < n; j++) {
            const float wj = __shfl_sync(KVQ_FULL_MASK, w, j);
            const float *v = base + (size_t)(c0 + j) * SFd + 2 * QPB + q * DD + lane * E;
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] += wj * __ldcg(v + e);
        }
    }
    for (int o = 16; o; o >>= 1) L += __shfl_xor_sync(KVQ_FULL_MASK, L, o);
    const int th = h % mp.tabh;
    if constexpr (pow2_dim(DD)) {
        if (mp.rot == 1) { /* x = s1 . H (s2 . H y / sqrt d) / sqrt d, in registers */
            float s1[E], s2[E];
            hadamard2_signs<DD>(mp.signs + (size_t)th * 2 * DD, lane, s1, s2);
            fwht_warp<E>(acc, lane);
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] *= s2[e] * mp.rs;
            fwht_warp<E>(acc, lane);
#pragma unroll
            for (int e = 0; e < E; e++) acc[e] *= s1[e] * mp.rs;
        }
    }
    float *out = mp.out + ((size_t)s * p.HQ + hq) * DD + lane * E;
    const float *mu = mp.vcal ? mp.vcal + (size_t)(h % mp.vnh) * 4 * DD + lane * E : NULL;
#pragma unroll
    for (int e = 0; e < E; e++) {
        float r = acc[e];
        if (mu) r = r * mu[3 * DD + e] + L * mu[e]; /* calibrated V: (unrotated acc) / a + W mean */
        out[e] = L > 0 ? r / L : 0.f;
    }
}

/* After block_merge: counts the block done on its item; the last one merges the item (one warp per
 * query head). Every block of an item with positions calls it (those with no tile of the sequence
 * return before, and are not counted: nused is the sequence's chunk count). */
template <int DD, int NW>
__device__ __forceinline__ void item_merge_last(const AttnParams &p, const Item &it, int lane, int warp) {
    __shared__ int last;
    const int nused = (p.main_len[it.s] + 16 * p.chunk_tiles - 1) / (16 * p.chunk_tiles);
    /* the block's writes, ordered by the barrier, published by one thread's (cumulative) fence before
     * the count, as CUTLASS's split-K semaphore does (a fence on every thread was the first version) */
    __syncthreads();
    if (threadIdx.x == 0) {
        const int item = (it.s * p.H + it.h) * p.QG + it.qgrp;
        __threadfence();
        last = atomicAdd(p.cnt + item, 1) == nused - 1;
        if (last) __threadfence(); /* the other blocks' states, after their counts */
    }
    __syncthreads();
    if (!last) return;
    for (int q = warp; q < it.GQ; q += NW) merge_query_warp<DD>(p, it.s, it.h, it.qgrp, q, nused, lane);
}

/* An item of a sequence with no position (main_len 0): its chunk-0 block writes the item's
 * outputs as zeros (what the merge kernel writes for it). */
template <int DD, int NW> __device__ __forceinline__ void item_zero(const AttnParams &p, const Item &it) {
    if (it.chunk != 0 || p.main_len[it.s] != 0) return;
    for (int i = threadIdx.x; i < it.GQ * DD; i += NW * 32) {
        const int hq = it.h * p.G + it.qgrp * QPB + i / DD;
        p.mrg.out[((size_t)it.s * p.HQ + hq) * DD + i % DD] = 0.f;
    }
}

} /* namespace kvqa */

#endif
