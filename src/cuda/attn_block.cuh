/*
 * The parts of a block's work that both kernels share (attn_kernel.cuh,
 * attn_kernel_wide.cuh): the work item of the block, the block-table entry of
 * a tile, the query fragments, the score MMA with the tokens as its rows,
 * and the epilogue that merges the warps' states into one partial state.
 */
#ifndef KVQ_ATTN_BLOCK_CUH
#define KVQ_ATTN_BLOCK_CUH

#include "attn_softmax.cuh"
#include "attn_traits.cuh"

namespace kvqa {

/* The block's work item: sequence s, KV head h, group qgrp of GQ <= 8 query heads, chunk
 * (grid: x = chunk, y = KV head x group, z = sequence); r: the block-table row and window ring
 * of sequence s (p.seq_map[s], or s). */
struct Item {
    int s, r, h, qgrp, chunk, GQ;
};
__device__ __forceinline__ Item block_item(const AttnParams &p) {
    Item it;
    it.s = blockIdx.z;
    it.r = p.seq_map ? p.seq_map[it.s] : it.s;
    const int hg = blockIdx.y;
    it.h = hg / p.QG;
    it.qgrp = hg - it.h * p.QG;
    it.chunk = blockIdx.x;
    it.GQ = min(QPB, p.G - it.qgrp * QPB);
    return it;
}
/* How many of the tiles [t_begin, t_end) warp w of NW takes (w, w + NW, ...). */
__device__ __forceinline__ int warp_tiles(int t_begin, int t_end, int warp, int NW) {
    return t_end - t_begin > warp ? (t_end - t_begin - warp + NW - 1) / NW : 0;
}
/* Block-table entry of tile `tile` of block-table row s: the byte offset of its page in the pool and
 * the slot of its first token (held per lane: no division or 64-bit multiply per tile). */
__device__ __forceinline__ void tile_page(const AttnParams &p, int s, int tile, unsigned long long &pgoff, int &slot) {
    const int pos = tile * 16, pi = pos / p.P;
    pgoff = (unsigned long long)p.block_table[(size_t)s * p.max_pages + pi] * p.page_bytes;
    slot = pos - pi * p.P;
}

/* Query fragment (the B operand of the score MMA) of query set `set` of KF: row g of the group
 * (q: its prepared query; has: g < GQ, else zeros), this lane's coordinates (KF::kcoord). */
template <class KF>
__device__ __forceinline__ void load_query(uint32_t qa[KF::HD / 16][2], const float *q, bool has, int qq, int set) {
#pragma unroll
    for (int ks = 0; ks < KF::HD / 16; ks++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int reg = 2 * ks + j;
            const float lo = has ? q[KF::kcoord(set, qq, reg, 0)] : 0.f;
            const float hi = has ? q[KF::kcoord(set, qq, reg, 1)] : 0.f;
            qa[ks][j] = pack2(lo, hi);
        }
}

/* Scores with the tokens as the MMA's rows: S (16 tokens x 8 queries) = K x Q~^T.
 * The A fragment of K takes the two tokens' decoded B-layout registers as they are
 * (a0/a2: token g, a1/a3: token g + 8); Q~ is the B operand (same registers as the
 * A fragment it was). Even and odd k-steps in two accumulators (shorter chains).
 * acc: c0 = (token g, query 2qq), c1 = (g, 2qq + 1), c2 = (g + 8, 2qq), c3 = (g + 8, 2qq + 1). */
template <int DD = 128>
__device__ __forceinline__ void kmma_t(float acc[4], const uint32_t qa[DD / 16][2], const uint32_t kb0[DD / 8],
                                       const uint32_t kb1[DD / 8]) {
    float e[4] = {0.f, 0.f, 0.f, 0.f}, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < DD / 16; ks++) {
        const uint32_t a[4] = {kb0[2 * ks], kb1[2 * ks], kb0[2 * ks + 1], kb1[2 * ks + 1]};
        kvq_mma16816((ks & 1) ? o : e, a, qa[ks][0], qa[ks][1]);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j] = e[j] + o[j];
}


/* After a warp's last tile: its copies drained, its softmax finished; then the block's warps
 * merge their (m, l, O) in shared memory (region: the stages, no longer in use) and write one
 * partial state of the chunk (or of the window). */
template <class VF, int NW, bool FINITE>
__device__ __forceinline__ void block_merge(uint8_t *region, const AttnParams &p, const Item &it, bool win,
                                            OnlineSoftmax<FINITE> &sm, const float O[VF::HD / 16][4], int lane, int warp) {
    constexpr int D = VF::HD; /* head dim (partial states of state_floats(D) floats) */
    kvq_cp_async_wait<0>();
    sm.finish();
    __syncthreads(); /* every warp is done with its stages */
    const int g = lane >> 2, qq = lane & 3;
    float *wm = (float *)region, *wl = wm + NW * QPB, *wo = wl + NW * QPB;
    if (g == 0) {
        wm[warp * QPB + 2 * qq] = sm.m[0];
        wm[warp * QPB + 2 * qq + 1] = sm.m[1];
        wl[warp * QPB + 2 * qq] = sm.l[0];
        wl[warp * QPB + 2 * qq + 1] = sm.l[1];
    }
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) wo[(warp * QPB + 2 * qq + (e & 1)) * D + VF::vcoord(g, mt, e >> 1)] = O[mt][e];
    __syncthreads();
    const int slot = (((it.s * p.H + it.h) * p.QG + it.qgrp) * (p.nchunk + 1)) + (win ? p.nchunk : it.chunk);
    float *out = p.part + (size_t)slot * state_floats(D);
    for (int idx = threadIdx.x; idx < it.GQ * D; idx += NW * 32) {
        const int q = idx / D, c = idx - q * D;
        float M = -INFINITY;
        for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w * QPB + q]);
        float acc = 0.f;
        if (M != -INFINITY)
            for (int w = 0; w < NW; w++) {
                const float mw = wm[w * QPB + q];
                if (mw != -INFINITY) acc += exp2f(mw - M) * wo[(w * QPB + q) * D + c];
            }
        out[2 * QPB + q * D + c] = acc;
        if (c == 0) {
            float L = 0.f;
            if (M != -INFINITY)
                for (int w = 0; w < NW; w++) {
                    const float mw = wm[w * QPB + q];
                    if (mw != -INFINITY) L += exp2f(mw - M) * wl[w * QPB + q];
                }
            out[q] = M;
            out[QPB + q] = L;
        }
    }
}

} /* namespace kvqa */

#endif
