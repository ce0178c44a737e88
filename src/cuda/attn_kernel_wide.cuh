/*
 * The wide-table kernels: tq-mse:KW keys and tq-mse:VW values at d = 128
 * (docs/CUDA.md): 4/4 and 2/2 with one codebook, 4/2 and 2/4; tq-mse:3/3.
 *   4/4: the 4-bit table has rows of 256 bytes (byte b at b * 256, the
 *   lanes' copies in the first 128 bytes), so that a lookup's shared address
 *   is one PRMT: (byte << 8) | 4 * lane, the table's base an immediate /
 *   uniform register of the LDS (2 instructions per lookup instead of 3). The
 *   second halves of the rows (32 KiB) hold the V codes of the stages: stage
 *   slot (warp, stage) takes 8 half rows, half row j the tokens 2j, 2j + 1,
 *   rotated by 32 * (j % 4) bytes (no bank conflict in the V-side reads: a
 *   half warp reads 16 distinct 8-byte words). K codes are stored linearly
 *   (conflict-free as they are), with the K and V scales, in the stage region
 *   after the table (WTraits<4, 4>).
 *   2/2: the 2-bit byte table (64 KiB, attn_lut.cuh lut2x: a byte -> its two
 *   nibbles' centroid pairs, one PRMT and one 8-byte load); the stages after
 *   it hold the classic kernel's tile of tq-mse:2/2 (fields swizzled as
 *   there, attn_tile.cuh: K scales, K codes, V scales, V codes), read by the
 *   byte table's decoders (KTQ2X::decode_pair: tokens g and g + 8 at once;
 *   VStage<2>::decode2x), whose 8-byte lookups are the MMA's register pairs.
 *   4/2 and 2/4: the 4-bit side as 4/4 (its table in the rows' first
 *   halves), the 2-bit side as 2/2 from a byte table of 16 lanes' copies in
 *   the rows' second halves (an 8-byte load is served per half warp: lanes l
 *   and l + 16 may share a column); both fields staged (the classic tile's
 *   swizzles); 3 stages (4 would not let 2 blocks fit an SM).
 *   3/3: the classic kernel's 3-bit tables (attn_tq3.cuh: K's and V's in the
 *   first and second halves of 64 rows of 256 bytes, 16 KiB) and tile (the
 *   2-bit and 1-bit sub-fields in two regions), read by KTQ3 / VTQ3; the wide
 *   skeleton's copies, masks and softmax.
 * A tile is fetched by cp.async at per-lane constant offsets, one 64-bit
 * base per field (4/4: 5 per lane, K codes 2, V codes 2 into the holes,
 * lanes 0..3 the scales; 2/2: 3; 4/2, 2/4: 4; 3/3: 5; ~50 instructions per tile instead
 * of the classic kernel's ~85); tokens past the end are copied too (their
 * scores are masked, their V weights 0; the page holds them). Query columns
 * >= G are not masked (their query is 0, so are their scores; the merge
 * never reads them) and the running max starts finite (OnlineSoftmax<true>).
 * The tables are built while the prep kernel ends (a programmatic dependent).
 */
#ifndef KVQ_ATTN_KERNEL_WIDE_CUH
#define KVQ_ATTN_KERNEL_WIDE_CUH

#include <type_traits>

#include "attn_block.cuh"
#include "attn_tq3.cuh"

namespace kvqa {

static_assert(WTraits<3, 3>::OUT == Traits<KTQ3<D>, VTQ3<D>>::TILE && WTraits<3, 3>::VS == 16 * KTQ3<D>::BYTES &&
                  Traits<KTQ3<D>, VTQ3<D>>::MERGE_BYTES <= WTraits<3, 3>::NW * WTraits<3, 3>::STAGES * WTraits<3, 3>::OUT,
              "3/3: the classic kernel's tile of tq-mse:3/3; the block merge fits the stages");

template <int KW, int VW> /* a template: defined in the K format's translation unit */
__global__ void __launch_bounds__(WTraits<KW, VW>::NW * 32, 2) attn_kernel_wide(const AttnParams p) {
    static_assert(((KW == 4 || KW == 2) && (VW == 4 || VW == 2)) || (KW == 3 && VW == 3),
                  "the wide kernels: tq-mse:4 / tq-mse:2 K and V, tq-mse:3/3");
    /* the formats whose maps the kernel keeps (the query's coordinates, O's) */
    typedef typename std::conditional<KW == 4, KTQ<4>, typename std::conditional<KW == 2, KTQ<2>, KTQ3<D>>::type>::type KF;
    typedef typename std::conditional<VW == 4, VTQ<4>, typename std::conditional<VW == 2, VTQ2X, VTQ3<D>>::type>::type VF;
    typedef WTraits<KW, VW> T;
    constexpr int NW = T::NW, STAGES = T::STAGES, OUT = T::OUT;
    constexpr int CBK = D * KW / 8, CBV = D * VW / 8; /* code bytes a token */
    constexpr bool HOLES = T::HOLES; /* 4/4: the V codes in the table rows' second halves */
    extern __shared__ uint4 smem_u4[];
    uint8_t *smem = (uint8_t *)smem_u4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qq = lane & 3;
    const uint32_t lane4 = (uint32_t)lane * 4;
    const Item it = block_item(p);
    const int s = it.s, h = it.h;
    const int len = p.main_len[s];
    const int t_begin = it.chunk * p.chunk_tiles, t_end = min((len + 15) >> 4, t_begin + p.chunk_tiles);
    if (t_begin >= t_end) return;

    /* the tables (overlapping the prep kernel), then the prepared queries: a mixed pair has the
     * 4-bit table in the rows' first halves and the 2-bit byte table (16 lanes' copies) in their
     * second halves (p.lut[0]: K's, p.lut[1]: V's) */
    if constexpr (KW == 3) {
        build_lut3(smem + LUT3_K, p.lut[0].c, NW * 32); /* 3/3: attn_tq3.cuh's tables (16 KiB) */
        build_lut3(smem + LUT3_V, p.lut[1].c, NW * 32);
    } else if constexpr (KW == 4) build_lut4<WROW>(smem, p.lut[0].c, NW * 32);
    else if constexpr (VW == 2) build_lut2x<32>(smem, p.lut[0].c, NW * 32);
    else build_lut2x<16>(smem + 128, p.lut[0].c, NW * 32);
    if constexpr (KW == 4 && VW == 2) build_lut2x<16>(smem + 128, p.lut[1].c, NW * 32);
    if constexpr (KW == 2 && VW == 4) build_lut4<WROW>(smem, p.lut[1].c, NW * 32);
    pdl_wait();
    uint32_t qa[D / 16][2];
    const int qi = h * p.G + it.qgrp * QPB + g;
    load_query<KF>(qa, p.qprep + ((size_t)s * p.HQ + qi) * p.qf, g < it.GQ, qq, 0);
    uint8_t *outs = smem + T::LUT + warp * STAGES * OUT; /* this warp's stages (4/4: K codes and scales) */
    const uint32_t holes = 128u + (uint32_t)(warp * STAGES * 8) * WROW; /* 4/4: its V code slots (offsets) */
    __syncthreads(); /* table ready */

    const int my_n = warp_tiles(t_begin, t_end, warp, NW);
    /* per lane: the page base (pages + page * page_bytes) and first slot of two of the warp's
     * tiles (tile i is held by lane i % 32, in register i / 32) */
    const uint8_t *my_page0 = p.pages, *my_page1 = p.pages;
    int my_slot0 = 0, my_slot1 = 0;
    unsigned long long pgoff;
    if (lane < my_n) {
        tile_page(p, it.r, t_begin + warp + lane * NW, pgoff, my_slot0);
        my_page0 = p.pages + pgoff;
    }
    if (lane + 32 < my_n) {
        tile_page(p, it.r, t_begin + warp + (lane + 32) * NW, pgoff, my_slot1);
        my_page1 = p.pages + pgoff;
    }
    const uint32_t kfield = (uint32_t)(h * p.krun), vfield = (uint32_t)(p.kv_off_v + h * p.vrun);
    /* cp.async only, per-lane constant offsets, one 64-bit base per field: the 16 tokens' codes
     * of a field are 16 * CB contiguous bytes of the page, lane l copies bytes 16l (+ 512) */
    const uint32_t sbase = smem_addr(smem), obase = smem_addr(outs);
    /* 2-bit fields: chunk l (token l / 2) swizzled as the classic tile's 32-byte fields (faddr<32>) */
    const uint32_t c2 = 16u * (uint32_t)(lane ^ ((lane >> 2) & 2));
    /* 3-bit fields (48 bytes a token, the 2-bit and 1-bit sub-fields in two regions): chunks l and,
     * for l < 16, l + 32, where stage_chunk puts them */
    int tok3;
    const uint32_t c3a = 16u * (uint32_t)stage_chunk(D * 3 / 8, D / 4, lane, tok3);
    const uint32_t c3b = 16u * (uint32_t)stage_chunk(D * 3 / 8, D / 4, lane < 16 ? lane + 32 : lane, tok3);
    const uint32_t dk = obase + T::KC + (KW == 4 ? 16 * lane : KW == 3 ? c3a : c2);
    /* 4-bit V staged (2/4): chunks l and l + 32 (tokens l / 4, + 8) swizzled as the classic 64-byte fields */
    const uint32_t c4 = 16u * (uint32_t)(lane ^ ((lane >> 2) & 6));
    const uint32_t dv = HOLES ? sbase + holes + (lane >> 3) * WROW + (((lane & 7) * 16 + 32 * ((lane >> 3) & 3)) & 127)
                              : obase + T::VC + (VW == 4 ? c4 : VW == 3 ? c3a : c2);
    const uint32_t ds = obase + (lane < 2 ? 16 * lane : T::VS + 16 * (lane & 1));
    const uint32_t ksrc = kfield + 2 * p.P + 16 * lane, vsrc = vfield + 2 * p.P + 16 * lane;
    const uint32_t ssrc = (lane < 2 ? kfield : vfield) + 16 * (lane & 1);
    auto issue = [&](int i) {
        if (i < my_n) {
            const int st = i % STAGES;
            const bool hi = i >= 32;
            const uint8_t *mp0 = hi ? my_page1 : my_page0;
            const int ms0 = hi ? my_slot1 : my_slot0;
            const uint8_t *pg = (const uint8_t *)__shfl_sync(KVQ_FULL_MASK, (unsigned long long)mp0, i & 31);
            const int slot0 = __shfl_sync(KVQ_FULL_MASK, ms0, i & 31);
            const uint8_t *kc = pg + (ksrc + slot0 * CBK), *vc = pg + (vsrc + slot0 * CBV);
            const uint32_t ok = st * OUT, ov = HOLES ? st * (8 * WROW) : ok, v2 = HOLES ? 4 * WROW : 512;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk + ok), "l"(kc) : "memory");
            if constexpr (KW == 4)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk + ok + 512), "l"(kc + 512) : "memory");
            if constexpr (KW == 3)
                if (lane < 16)
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(obase + T::KC + c3b + ok), "l"(kc + 512)
                                 : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dv + ov), "l"(vc) : "memory");
            if constexpr (VW == 4)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dv + ov + v2), "l"(vc + 512)
                             : "memory");
            if constexpr (VW == 3)
                if (lane < 16)
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(obase + T::VC + c3b + ov), "l"(vc + 512)
                                 : "memory");
            if (lane < 4)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(ds + ok), "l"(pg + (ssrc + slot0 * 2))
                             : "memory");
        }
        kvq_cp_async_commit();
    };

    float O[D / 16][4];
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) O[mt][0] = O[mt][1] = O[mt][2] = O[mt][3] = 0.f;
    OnlineSoftmax<true> sm;
    int rem = len - 16 * (t_begin + warp); /* tokens from this warp's next tile on */
    /* 4/4: the V-side words of this lane (tokens 2qq, 2qq + 1, 2qq + 8, 2qq + 9; group g) */
    const uint32_t vu = (uint32_t)((8 * g + 32 * qq) & 127);
    const uint32_t va = holes + qq * WROW + vu, vb = holes + qq * WROW + (vu ^ 64u);
    /* 2-bit sides: the byte table's column (K), the V words */
    const uint32_t lane8 = 2 * lane4, v2off = T::VC + vword2_off(g, qq);

#pragma unroll 1
    for (int i = 0; i < STAGES - 1; i++) issue(i);
#pragma unroll 1
    for (int i = 0; i < my_n; i++) {
        const int st = i % STAGES;
        kvq_cp_async_wait<STAGES - 2>();
        __syncwarp();
        const uint8_t *tk = outs + st * OUT, *tv = tk + T::VS;
        const int nvalid = min(16, rem);
        rem -= 16 * NW;
        const bool tv0 = g < nvalid, tv1 = g + 8 < nvalid;
        float sc[4];
        {
            uint32_t kb0[16], kb1[16];
            if constexpr (KW == 4) {
                const uint4 v0 = ld128(tk + T::KC + g * (D / 2) + qq * 16);
                const uint4 v1 = ld128(tk + T::KC + (g + 8) * (D / 2) + qq * 16);
                const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w1[4] = {v1.x, v1.y, v1.z, v1.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    kb0[4 * k] = lut4x<0>(smem, w0[k], lane4);
                    kb0[4 * k + 1] = lut4x<1>(smem, w0[k], lane4);
                    kb0[4 * k + 2] = lut4x<2>(smem, w0[k], lane4);
                    kb0[4 * k + 3] = lut4x<3>(smem, w0[k], lane4);
                    kb1[4 * k] = lut4x<0>(smem, w1[k], lane4);
                    kb1[4 * k + 1] = lut4x<1>(smem, w1[k], lane4);
                    kb1[4 * k + 2] = lut4x<2>(smem, w1[k], lane4);
                    kb1[4 * k + 3] = lut4x<3>(smem, w1[k], lane4);
                }
            } else if constexpr (KW == 3) {
                KF::decode(tk, 0, smem, p, g, qq, (int)lane4, kb0);
                KF::decode(tk, 0, smem, p, g + 8, qq, (int)lane4, kb1);
            } else if constexpr (VW == 2) {
                KTQ2X::decode_pair(tk, smem, g, qq, lane8, kb0, kb1);
            } else {
                KTQ2H::decode_pair(tk, smem, g, qq, lane8, kb0, kb1);
            }
            float a[4];
            kmma_t(a, qa, kb0, kb1);
            const float g0 = scale_one(tk, g), g1 = scale_one(tk, g + 8);
            sc[0] = tv0 ? g0 * a[0] : -INFINITY;
            sc[1] = tv0 ? g0 * a[1] : -INFINITY;
            sc[2] = tv1 ? g1 * a[2] : -INFINITY;
            sc[3] = tv1 ? g1 * a[3] : -INFINITY;
        }
        float pr[4];
        sm.step(sc, O, pr);
        {
            /* P (V's scale folded in; 0 for masked tokens) transposed to the B fragment */
            auto pfrag = [&](uint32_t &b0, uint32_t &b1) {
                const float w0 = tv0 ? scale_one(tv, g) : 0.f, w1 = tv1 ? scale_one(tv, g + 8) : 0.f;
                b0 = kvq_movmatrix_t(pack2(pr[0] * w0, pr[1] * w0));
                b1 = kvq_movmatrix_t(pack2(pr[2] * w1, pr[3] * w1));
            };
            uint32_t b0, b1;
            if constexpr (VW == 4) {
                /* V codes of the lane's tokens (k0, k1 | k2, k3), nibbles of a pair interleaved:
                 * 4/4 from the holes, 2/4 from the classic tile's field (VStage<4>) */
                uint32_t x[4][2];
                if constexpr (HOLES) {
                    const uint8_t *hv = smem + st * 8 * WROW;
                    const uint2 e0 = ld64(hv + va), e1 = ld64(hv + vb), e2 = ld64(hv + va + 4 * WROW),
                                e3 = ld64(hv + vb + 4 * WROW);
                    x[0][0] = e0.x, x[0][1] = e0.y, x[1][0] = e1.x, x[1][1] = e1.y;
                    x[2][0] = e2.x, x[2][1] = e2.y, x[3][0] = e3.x, x[3][1] = e3.y;
                    interleave4(x);
                } else {
                    VStage<4> vs4;
                    vs4.load(tk + T::VC, g, qq);
#pragma unroll
                    for (int k = 0; k < 4; k++) x[k][0] = vs4.x[k][0], x[k][1] = vs4.x[k][1];
                }
                pfrag(b0, b1);
#pragma unroll
                for (int mt = 0; mt < D / 16; mt++) {
                    uint32_t a[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const uint32_t w = x[k][mt >> 2];
                        const int b = mt & 3;
                        a[k] = b == 0 ? lut4x<0>(smem, w, lane4) : b == 1 ? lut4x<1>(smem, w, lane4)
                             : b == 2 ? lut4x<2>(smem, w, lane4) : lut4x<3>(smem, w, lane4);
                    }
                    kvq_mma16816(O[mt], a, b0, b1);
                }
            } else {
                /* the classic tile's V record: 3/3 through attn_tq3.cuh (the indices of the lane's token
                 * pairs), 2-bit through the byte table (tokens 2qq, 2qq + 1, 2qq + 8, 2qq + 9 of group g at
                 * the lane's offset; VTQ2X's map, VTQ2H's table for 4/2) */
                typedef typename std::conditional<VW == 3, VF,
                                                  typename std::conditional<KW == 2, VTQ2X, VTQ2H>::type>::type VFD;
                typename VFD::Regs vr;
                if constexpr (VW == 3) VF::load(tv, g, qq, nullptr, vr);
                else vr.st.load2x(tk, v2off);
                pfrag(b0, b1);
#pragma unroll
                for (int mt = 0; mt < D / 16; mt++) {
                    uint32_t a[4];
                    VFD::decode(vr, 0, smem, p, (int)lane4, mt, a);
                    kvq_mma16816(O[mt], a, b0, b1);
                }
            }
        }
        __syncwarp();
        issue(i + STAGES - 1);
    }
    block_merge<VF, NW>(smem + T::LUT, p, it, false, sm, O, lane, warp);
}

} /* namespace kvqa */

#endif
