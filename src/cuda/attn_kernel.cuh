/*
 * The classic fused split-K decode attention kernel (docs/CUDA.md), for
 * every (K, V) format pair and the f16 window pass (WIN: the sink and ring rows).
 *
 * Work item = (sequence, KV head, group of <= 8 query heads, chunk of the
 * context); one block of NW warps per item. Each warp walks tiles of 16
 * tokens of its item (warp w takes tiles w, w + NW, ...), staged into shared
 * memory by cp.async (STAGES deep, private to the warp; attn_tile.cuh), and
 * for each tile:
 *   scores  S (16 tokens x 8 queries) = K x Q~^T, the tokens as the rows of
 *           m16n8k16 tensor-core MMAs (K the A operand, the f16 query in
 *           registers the B operand); K codes are turned into f16 by table
 *           lookups (attn_decode.cuh), record scales applied after the MMA;
 *   softmax online (attn_softmax.cuh), masked tokens and queries -inf;
 *   values  O^T (16 coordinates x 8 queries) += V^T x P^T: the probabilities
 *           stay in registers (P packed to f16, V's record scale folded in,
 *           transposed to the B fragment by movmatrix).
 * The rotated query and O stay in the method's rotated domain; the merge
 * kernel (attn.cu) combines the chunks exactly and applies one inverse
 * rotation per head.
 */
#ifndef KVQ_ATTN_KERNEL_CUH
#define KVQ_ATTN_KERNEL_CUH

#include "attn_block.cuh"

namespace kvqa {

template <class KF, class VF, int NW, int STAGES, bool WIN>
__global__ void __launch_bounds__(NW * 32, (NW == 8 && KF::NQS == 1 && KF::HD <= 128) ? 2 : 1) attn_kernel(const AttnParams p) {
    extern __shared__ uint4 smem_u4[];
    uint8_t *smem = (uint8_t *)smem_u4;
    constexpr int TILE = Traits<KF, VF>::TILE, D = KF::HD; /* head dim 64, 128 or 256 */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qq = lane & 3, lane4 = lane * 4;
    const Item it = block_item(p);
    const int s = it.s, h = it.h;

    int t_begin, t_end, pos_base = 0, end_pos, sl = 0;
    if (WIN) { /* the f16 rows: the sink's, then the ring's (f16_row) */
        sl = p.sink_len ? p.sink_len[s] : 0;
        const int nf = sl + (p.win_len ? p.win_len[s] : 0);
        pos_base = p.main_len[s];
        t_begin = 0;
        t_end = (nf + 15) >> 4;
        end_pos = nf; /* rows of the window pass */
    } else {
        const int len = p.main_len[s];
        t_begin = it.chunk * p.chunk_tiles;
        t_end = min((len + 15) >> 4, t_begin + p.chunk_tiles);
        end_pos = len;
    }
    if (t_begin >= t_end) return; /* the merge kernel knows which chunks exist */

    uint8_t *lut = smem;
    build_luts(lut, p);

    uint32_t qa[KF::NQS][D / 16][2];
    {
        const int qi = h * p.G + it.qgrp * QPB + g;
#pragma unroll
        for (int set = 0; set < KF::NQS; set++)
            load_query<KF>(qa[set],
                           WIN ? p.qraw + ((size_t)s * p.HQ + qi) * D
                               : p.qprep + ((size_t)s * p.HQ + qi) * p.qf + KF::qoff(set),
                           g < it.GQ, qq, set);
    }
    __syncthreads(); /* LUTs ready */

    uint8_t *stage = smem + p.lut_bytes + warp * STAGES * TILE;
    const int my_n = warp_tiles(t_begin, t_end, warp, NW);

    /* block-table entries of this warp's tiles, one per lane (chunk_tiles <= 32 * NW) */
    unsigned long long my_pgoff = 0;
    int my_slot = 0;
    if (!WIN && lane < my_n) tile_page(p, it.r, t_begin + warp + lane * NW, my_pgoff, my_slot);
    const uint8_t *kbase = p.pages + (size_t)h * p.krun, *vbase = p.pages + p.kv_off_v + (size_t)h * p.vrun;
    auto issue = [&](int i) {
        if (i < my_n) {
            uint8_t *dst = stage + (i % STAGES) * TILE;
            const int tile = t_begin + warp + i * NW;
            const int pos0 = tile * 16, nvalid = min(16, end_pos - pos0);
            if (WIN) {
                load_f16_rows<D>(dst, p, it.r, h, 0, sl, pos_base, pos0, nvalid, lane);
                load_f16_rows<D>(dst + 16 * KF::BYTES, p, it.r, h, 1, sl, pos_base, pos0, nvalid, lane);
            } else {
                const unsigned long long pgoff = __shfl_sync(KVQ_FULL_MASK, my_pgoff, i & 31);
                const int slot0 = __shfl_sync(KVQ_FULL_MASK, my_slot, i & 31);
                load_record_fields<KF>(dst, kbase + pgoff, p.P, slot0, nvalid, lane);
                load_record_fields<VF>(dst + 16 * KF::BYTES, vbase + pgoff, p.P, slot0, nvalid, lane);
            }
        }
        kvq_cp_async_commit();
    };

    float O[D / 16][4];
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) O[mt][0] = O[mt][1] = O[mt][2] = O[mt][3] = 0.f;
    OnlineSoftmax<false> sm;
    /* this lane's queries 2qq, 2qq + 1 (the score accumulator's and O's columns) */
    const bool qv0 = 2 * qq < it.GQ, qv1 = 2 * qq + 1 < it.GQ;

#pragma unroll 1
    for (int i = 0; i < STAGES - 1; i++) issue(i);
#pragma unroll 1
    for (int i = 0; i < my_n; i++) {
        kvq_cp_async_wait<STAGES - 2>();
        __syncwarp();
        const uint8_t *tk = stage + (i % STAGES) * TILE, *tv = tk + 16 * KF::BYTES;
        const int tile = t_begin + warp + i * NW;
        const int nvalid = min(16, end_pos - tile * 16);
        const bool tv0 = g < nvalid, tv1 = g + 8 < nvalid; /* this lane's score tokens g, g + 8 */
        /* scores S (16 tokens x 8 queries): the tokens are the MMA rows (8 MMAs per stage) */
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int stg = 0; stg < KF::NSTAGE; stg++) {
            uint32_t kb0[D / 8], kb1[D / 8];
            KF::decode(tk, stg, lut, p, g, qq, lane4, kb0);
            KF::decode(tk, stg, lut, p, 8 + g, qq, lane4, kb1);
            float a[4];
            kmma_t<D>(a, qa[KF::qset(stg)], kb0, kb1);
            const float g0 = KF::kscale1(tk, stg, g, p), g1 = KF::kscale1(tk, stg, g + 8, p);
            sc[0] += g0 * a[0];
            sc[1] += g0 * a[1];
            sc[2] += g1 * a[2];
            sc[3] += g1 * a[3];
        }
        sc[0] = (tv0 && qv0) ? sc[0] : -INFINITY;
        sc[1] = (tv0 && qv1) ? sc[1] : -INFINITY;
        sc[2] = (tv1 && qv0) ? sc[2] : -INFINITY;
        sc[3] = (tv1 && qv1) ? sc[3] : -INFINITY;
        float pr[4];
        sm.step(sc, O, pr);
        {
            /* validity of the V-side tokens 2qq, 2qq + 1 | 8 + 2qq, 9 + 2qq (q8 scales) */
            bool val[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                val[nt][0] = nt * 8 + 2 * qq < nvalid;
                val[nt][1] = nt * 8 + 2 * qq + 1 < nvalid;
            }
            typename VF::Regs vr;
            VF::load(tv, g, qq, val, vr);
#pragma unroll
            for (int stg = 0; stg < VF::NSTAGE; stg++) {
                /* P (token x query, V's token scale folded in; a masked token's scale may be
                 * garbage: 0) transposed to the B fragment P^T by movmatrix */
                const float w0 = tv0 ? VF::vscale1(tv, stg, g) : 0.f, w1 = tv1 ? VF::vscale1(tv, stg, g + 8) : 0.f;
                const uint32_t b0 = kvq_movmatrix_t(pack2(pr[0] * w0, pr[1] * w0));
                const uint32_t b1 = kvq_movmatrix_t(pack2(pr[2] * w1, pr[3] * w1));
#pragma unroll
                for (int mt = 0; mt < D / 16; mt++) {
                    uint32_t a[4];
                    VF::decode(vr, stg, lut, p, lane4, mt, a);
                    kvq_mma16816(O[mt], a, b0, b1);
                }
            }
        }
        __syncwarp();
        issue(i + STAGES - 1);
    }
    block_merge<VF, NW>(smem + p.lut_bytes, p, it, WIN, sm, O, lane, warp);
}

} /* namespace kvqa */

#endif
