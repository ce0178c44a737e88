/*
 * A staged tile of the classic kernel (attn_kernel.cuh): 16 tokens' records
 * in shared memory, field-major (field f at 16 * OFF[f], R = SIZE[f] bytes
 * per token), each field XOR-swizzled by its row size so that the K-side
 * (token x quarter) and V-side (coordinate group x token) reads are free of
 * bank conflicts; and the cp.async copies that fill it from a page or from
 * the f16 rows of the window pass (the sink, the window ring).
 */
#ifndef KVQ_ATTN_TILE_CUH
#define KVQ_ATTN_TILE_CUH

#include "attn_params.cuh"

namespace kvqa {

template <int R> __host__ __device__ __forceinline__ int swz(int t) {
    return R == 32    ? ((t >> 2) & 1) << 1
         : R == 64    ? (t & 6)
         : R == 128   ? (t & 7)
         : R == 256   ? ((t & 6) ^ ((t & 1) << 2))
         : R == 512   ? (t & 7) /* f16 rows at d = 256 */
                      : 0;
}
/* Byte offset of byte b (a read never crosses 16 bytes) of token t in a field region of R bytes per token. */
template <int R> __host__ __device__ __forceinline__ int faddr(int t, int b) {
    if (R < 16) return t * R + b;
    const int k = t * (R / 16) + (b >> 4);
    return ((k ^ swz<R>(t)) << 4) | (b & 15);
}

template <int R> __device__ __forceinline__ void load_field(uint8_t *dst, const uint8_t *src, int nvalid, int lane) {
    /* 16 tokens x R bytes, contiguous in global; chunk c holds token c/(R/16) (R >= 16) or 16/R tokens */
#pragma unroll
    for (int c = lane; c < R; c += 32) {
        const int tok = R >= 16 ? c / (R / 16) : (c * 16) / R;
        const int pc = R >= 16 ? (c ^ swz<R>(tok)) : c;
        kvq_cp_async16(dst + 16 * pc, src + 16 * c, tok < nvalid ? 16 : 0);
    }
}
template <class F, int I = 0>
__device__ __forceinline__ void load_record_fields(uint8_t *dst, const uint8_t *run, int P, int slot0, int nvalid, int lane) {
    if constexpr (I < F::NF) {
        /* the field's offset in the run in 32 bits (< 2^31: P slots of one head's records) */
        constexpr int off = F::OFF[I], size = F::SIZE[I];
        load_field<size>(dst + 16 * off, run + (uint32_t)(off * P + slot0 * size), nvalid, lane);
        load_record_fields<F, I + 1>(dst, run, P, slot0, nvalid, lane);
    }
}

/* Row i of the window pass (the f16 rows of a sequence: its sink's, then its ring's) of stored sequence
 * r, KV head h, K (kv = 0) or V, rows of rowb bytes. sl = sink_len, base = main_len: rows [0, sl) are the
 * sink's rows 0..sl-1; row i >= sl is position sl + main_len + (i - sl) = base + i of the sequence, at
 * ring slot (base + i) % W. */
__device__ __forceinline__ const uint8_t *f16_row(const AttnParams &p, int r, int h, int kv, int sl, int base, int i,
                                                  int rowb) {
    const size_t head = ((size_t)r * 2 + kv) * p.H + h;
    if (i < sl) return p.sink + (head * p.S + i) * rowb;
    return p.window + (head * p.W + (base + i) % p.W) * rowb;
}

/* f16 rows (head dim DD) of the window pass: token t of the tile is row i0 + t (f16_row) */
template <int DD = 128>
__device__ __forceinline__ void load_f16_rows(uint8_t *dst, const AttnParams &p, int r, int h, int kv, int sl, int base,
                                              int i0, int nvalid, int lane) {
    constexpr int CPT = 2 * DD / 16; /* 16-byte chunks a row */
#pragma unroll 1
    for (int c = lane; c < 16 * CPT; c += 32) {
        const int tok = c / CPT, cc = c % CPT;
        const int t = tok < nvalid ? tok : 0; /* a masked token copies nothing (size 0) from a valid row */
        const uint8_t *src = f16_row(p, r, h, kv, sl, base, i0 + t, 2 * DD) + 16 * cc;
        kvq_cp_async16(dst + 16 * (c ^ swz<2 * DD>(tok)), src, tok < nvalid ? 16 : 0);
    }
}

} /* namespace kvqa */

#endif
