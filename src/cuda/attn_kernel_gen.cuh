/*
 * The generic decode attention kernel (docs/CUDA.md, "The generic kernel"):
 * every head dim D of the backend (32, 64, 96, 128, 256) and every record
 * the encoder writes (f16, q8, tq-mse:1..8, rvq, tq-prod, qjl, tcq:1..4, f16
 * or f32 scales), for the pairs the tensor-core kernels (attn_kernel.cuh,
 * attn_kernel_wide.cuh) do not serve. Scores and values in f32 (no f16
 * rounding of the query, the codes or the probabilities).
 *
 * Same work items, grid, split-K chunks and partial states as the classic
 * kernel: one block of GNT threads per (sequence, KV head, group of <= 8
 * query heads, chunk). Per tile of GT = 32 tokens:
 *   1. K decode: warp w decodes tokens w, w + 4, ... (lane = coordinate) from
 *      the field-major page (or the f16 rows of the sink and ring) into a row of f32 in
 *      shared memory: the values the prepared query is dotted with
 *      (tq-prod: D centroid values, then m scaled signs on S q~);
 *   2. scores and the online softmax: warp w takes queries w and w + 4, lane
 *      = token; a row of Klen + 1 floats, so the lanes' reads are conflict-free;
 *   3. V decode into the same buffer (rows of D floats; masked tokens 0);
 *   4. O[q][c] = alpha_q O[q][c] + sum_t p[q][t] V[t][c], GNT threads over
 *      the (query, coordinate) pairs.
 * The rotated query and O stay in the methods' rotated domains; the merge
 * (attn.cu) applies the inverse rotation.
 */
#ifndef KVQ_ATTN_KERNEL_GEN_CUH
#define KVQ_ATTN_KERNEL_GEN_CUH

#include "attn_block.cuh"
#include "tcq_value.cuh"

namespace kvqa {

/* A scale of sb bytes (2: f16, 4: f32) at any byte address (host-callable: test_cuda checks the
 * decoders below on the host against the CPU codec). */
KVQ_HD float gen_scale(const uint8_t *f, int sb) {
    if (sb == 4) {
        const uint32_t u = (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    return __half2float(__ushort_as_half((unsigned short)(f[0] | f[1] << 8)));
}

/* Index of coordinate c of a b-bit strided field of head dim D (layouts.h, kvq_strided_width). */
template <int D> KVQ_HD int gen_index(const uint8_t *f, int b, int c) {
    int v = 0, shift = 0;
KVQ_UNROLL
    for (int k = 0; k < 3; k++) {
        const int w = kvq_strided_width(b, k);
        if (!w) break;
        const int S = w == 4 ? D / 2 : w == 2 ? D / 4 : D / 8;
        const int j = w == 4 ? c % (D / 2) : w == 2 ? c % (D / 4) : c % (D / 8);
        const int sub = w == 4 ? c / (D / 2) : w == 2 ? c / (D / 4) : c / (D / 8);
        v |= ((f[j] >> (sub * w)) & ((1 << w) - 1)) << shift;
        f += S;
        shift += w;
    }
    return v;
}

/* tcq (m_tcq.c, tcq_kernels.h): state s_j of a record's circular bitstream of D k bits, the
 * 12-bit window from bit (D-1-j) k (bytes read modulo the stream's D k / 8: tcq_stream_pad), and
 * its value tcq_value_dev(s) (tcq_value.cuh: the CPU's tcq_value, constants from codec/tcq_code.h). */
template <int D> KVQ_HD uint32_t gen_tcq_state(const uint8_t *f, int k, int j) {
    const int nb = D * k / 8, pos = (D - 1 - j) * k, i0 = pos >> 3;
    uint32_t w = 0;
KVQ_UNROLL
    for (int i = 0; i < 3; i++) w |= (uint32_t)f[(i0 + i) % nb] << (8 * i);
    return (w >> (pos & 7)) & 4095u; /* pos & 7 <= 7: bits up to 19 of the 24 read */
}

/* Value j of the row a record gives (K: scored against the prepared query from F.qoff; V: the
 * rotated-domain value of coordinate j). The record's field f lies at run + off[f] * P + slot *
 * size[f] (field-major page; a window row: P = slot = 0). c1, c2: F's codebooks (shared). */
template <int D>
KVQ_HD float gen_value(const GenFmt &F, const uint8_t *run, int P, int slot, int j, float kconst, const float *c1,
                       const float *c2) {
#define KVQ_GEN_FLD(f) (run + (uint32_t)(F.off[f] * P + slot * F.size[f]))
    switch (F.kind) {
    case KVQ_LAY_F16: {
        const uint8_t *f = KVQ_GEN_FLD(0) + 2 * j;
        return __half2float(__ushort_as_half((unsigned short)(f[0] | f[1] << 8)));
    }
    case KVQ_LAY_Q8: return gen_scale(KVQ_GEN_FLD(0) + 2 * (j / KVQ_Q8_BLOCK), 2) * (float)(int8_t)KVQ_GEN_FLD(1)[j];
    case KVQ_LAY_TQ: return gen_scale(KVQ_GEN_FLD(0), F.sb) * c1[gen_index<D>(KVQ_GEN_FLD(1), F.bits, j)];
    case KVQ_LAY_RVQ:
        return gen_scale(KVQ_GEN_FLD(0), F.sb) * c1[gen_index<D>(KVQ_GEN_FLD(2), F.bits, j)] +
               gen_scale(KVQ_GEN_FLD(1), F.sb) * c2[gen_index<D>(KVQ_GEN_FLD(3), F.bits, j)];
    case KVQ_LAY_TQPROD: {
        if (j < D) return gen_scale(KVQ_GEN_FLD(0), F.sb) * c1[gen_index<D>(KVQ_GEN_FLD(1), F.bits, j)];
        j -= D;
        const int bit = (KVQ_GEN_FLD(3)[j >> 3] >> (j & 7)) & 1;
        return kconst * gen_scale(KVQ_GEN_FLD(2), F.sb) * (bit ? 1.f : -1.f);
    }
    case KVQ_LAY_QJL: {
        const int bit = (KVQ_GEN_FLD(1)[j >> 3] >> (j & 7)) & 1;
        return kconst * gen_scale(KVQ_GEN_FLD(0), F.sb) * (bit ? 1.f : -1.f);
    }
    case KVQ_LAY_TCQ: return gen_scale(KVQ_GEN_FLD(0), F.sb) * tcq_value_dev(gen_tcq_state<D>(KVQ_GEN_FLD(1), F.bits, j));
    }
    return 0.f;
#undef KVQ_GEN_FLD
}

/* Where token tok of the item lives: the run of its head's records and its slot (pages), or its
 * f16 row of the window pass (f16_row: the sink's, then the ring's; P = 0, slot 0). */
__device__ __forceinline__ const uint8_t *gen_token(const AttnParams &p, const Item &it, bool win, int tok, bool vside,
                                                    int &slot) {
    if (win) {
        slot = 0;
        const int sl = p.sink_len ? p.sink_len[it.s] : 0;
        return f16_row(p, it.r, it.h, vside ? 1 : 0, sl, p.main_len[it.s], tok, 2 * p.d);
    }
    const int pi = tok / p.P;
    slot = tok - pi * p.P;
    const unsigned long long pg = (unsigned long long)p.block_table[(size_t)it.r * p.max_pages + pi] * p.page_bytes;
    return vside ? p.pages + pg + p.kv_off_v + (size_t)it.h * p.vrun : p.pages + pg + (size_t)it.h * p.krun;
}

template <int D> __global__ void __launch_bounds__(GNT) attn_kernel_gen(const AttnParams p) {
    extern __shared__ float gsm[];
    constexpr int NACC = (QPB * D + GNT - 1) / GNT;
    const bool win = p.gen_win != 0;
    const GenFmt &KF = p.gk, &VF = p.gv;
    const int KL = KF.len, KR = KL + 1, P = win ? 0 : p.P;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const Item it = block_item(p);
    int t_begin, t_end;
    if (win) {
        t_begin = 0;
        t_end = (p.sink_len ? p.sink_len[it.s] : 0) + (p.win_len ? p.win_len[it.s] : 0); /* the f16 rows */
    } else {
        const int ctok = 16 * p.chunk_tiles;
        t_begin = it.chunk * ctok;
        t_end = min(p.main_len[it.s], t_begin + ctok);
    }
    if (t_begin >= t_end) return; /* the merge kernel knows which chunks exist */

    float *qs = gsm;                                  /* [QPB][KL] the group's queries */
    float *buf = qs + QPB * KL;                       /* [GT][KR] K rows, then [GT][D] V rows */
    float *pb = buf + GT * (KR > D ? KR : D);         /* [QPB][GT] probabilities */
    float *ab = pb + QPB * GT;                        /* [QPB] rescale of O */
    float *kc1 = ab + QPB, *kc2 = kc1 + 256, *vc1 = kc2 + 256, *vc2 = vc1 + 256; /* codebooks */
    for (int i = tid; i < KF.n1; i += GNT) kc1[i] = KF.c1[i];
    for (int i = tid; i < KF.n2; i += GNT) kc2[i] = KF.c2[i];
    for (int i = tid; i < VF.n1; i += GNT) vc1[i] = VF.c1[i];
    for (int i = tid; i < VF.n2; i += GNT) vc2[i] = VF.c2[i];
    {
        const int q0 = it.h * p.G + it.qgrp * QPB;
        for (int i = tid; i < it.GQ * KL; i += GNT) {
            const int q = i / KL, j = i - q * KL;
            const size_t row = (size_t)it.s * p.HQ + q0 + q;
            qs[i] = win ? p.qraw[row * D + j] : p.qprep[row * p.qf + KF.qoff + j];
        }
    }
    __syncthreads();

    float mq[2] = {-INFINITY, -INFINITY}, lq[2] = {0.f, 0.f}; /* queries warp, warp + GNW */
    float acc[NACC];
#pragma unroll
    for (int j = 0; j < NACC; j++) acc[j] = 0.f;

#pragma unroll 1
    for (int tok0 = t_begin; tok0 < t_end; tok0 += GT) {
        const int nvalid = min(GT, t_end - tok0);
        /* 1. K rows */
        for (int t = warp; t < nvalid; t += GNW) {
            int slot;
            const uint8_t *run = gen_token(p, it, win, tok0 + t, false, slot);
            float *row = buf + t * KR;
            for (int j = lane; j < KL; j += 32) row[j] = gen_value<D>(KF, run, P, slot, j, p.kconst, kc1, kc2);
        }
        __syncthreads();
        /* 2. scores and the online softmax (base 2: log2 e is in the query) */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int q = warp + GNW * r;
            if (q >= it.GQ) continue;
            float sc = -INFINITY;
            if (lane < nvalid) {
                const float *row = buf + lane * KR, *qv = qs + q * KL;
                float a = 0.f;
                for (int j = 0; j < KL; j++) a = fmaf(row[j], qv[j], a);
                sc = a;
            }
            float mx = sc;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(KVQ_FULL_MASK, mx, o));
            const float mn = fmaxf(mq[r], mx);
            const float al = mn == -INFINITY ? 1.f : exp2f(mq[r] - mn);
            const float pr = sc == -INFINITY ? 0.f : exp2f(sc - mn);
            float ps = pr;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(KVQ_FULL_MASK, ps, o);
            lq[r] = lq[r] * al + ps;
            mq[r] = mn;
            pb[q * GT + lane] = pr;
            if (lane == 0) ab[q] = al;
        }
        __syncthreads(); /* the K rows are read, p and alpha written */
        /* 3. V rows (masked tokens 0: their probability is 0, a garbage value must not make NaN) */
        for (int t = warp; t < GT; t += GNW) {
            float *row = buf + t * D;
            if (t < nvalid) {
                int slot;
                const uint8_t *run = gen_token(p, it, win, tok0 + t, true, slot);
                for (int c = lane; c < D; c += 32) row[c] = gen_value<D>(VF, run, P, slot, c, 0.f, vc1, vc2);
            } else {
                for (int c = lane; c < D; c += 32) row[c] = 0.f;
            }
        }
        __syncthreads();
        /* 4. O = alpha O + P V */
#pragma unroll
        for (int j = 0; j < NACC; j++) {
            const int idx = tid + GNT * j, q = idx / D, c = idx - q * D;
            if (idx < QPB * D && q < it.GQ) {
                float a = acc[j] * ab[q];
                const float *pq = pb + q * GT;
#pragma unroll 8
                for (int t = 0; t < GT; t++) a = fmaf(pq[t], buf[t * D + c], a);
                acc[j] = a;
            }
        }
        __syncthreads(); /* before the next tile overwrites the rows and p */
    }
    /* the partial state of the chunk (or of the window) */
    const int slot = (((it.s * p.H + it.h) * p.QG + it.qgrp) * (p.nchunk + 1)) + (win ? p.nchunk : it.chunk);
    float *out = p.part + (size_t)slot * p.sf;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int q = warp + GNW * r;
        if (q < it.GQ && lane == 0) {
            out[q] = mq[r];
            out[QPB + q] = lq[r];
        }
    }
#pragma unroll
    for (int j = 0; j < NACC; j++) {
        const int idx = tid + GNT * j, q = idx / D, c = idx - q * D;
        if (idx < QPB * D && q < it.GQ) out[2 * QPB + q * D + c] = acc[j];
    }
}

} /* namespace kvqa */

#endif
