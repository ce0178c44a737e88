/*
 * A staged tile of the classic kernel (attn_kernel.cuh): 16 tokens' records
 * in shared memory, field-major (field f at 16 * OFF[f], R = SIZE[f] bytes
 * per token), each field XOR-swizzled by its row size so that the K-side
 * (token x quarter) and V-side (coordinate group x token) reads are free of
 * bank conflicts; and the cp.async copies that fill it from a page or from
 * the f16 rows of the window pass (the sink, the window ring). A field may be staged in two regions (tq-mse:3: its
 * 2-bit and 1-bit sub-fields, each swizzled as a field of its own size; the
 * format's SPLIT), or, when its size is neither a multiple nor a divisor of
 * 16 bytes (tq-mse:3 at d = 64: 24 bytes), linearly.
 */
#ifndef KVQ_ATTN_TILE_CUH
#define KVQ_ATTN_TILE_CUH

#include <type_traits>

#include "attn_params.cuh"

namespace kvqa {

/* The XOR swizzle (in 16-byte chunks) of token t's row in a field region of R bytes per token; a
 * function of R at run time too (the tests stage tiles with it). */
__host__ __device__ __forceinline__ constexpr int swz_of(int R, int t) {
    return R == 32    ? ((t >> 2) & 1) << 1
         : R == 64    ? (t & 6)
         : R == 128   ? (t & 7)
         : R == 256   ? ((t & 6) ^ ((t & 1) << 2))
         : R == 512   ? (t & 7) /* f16 rows at d = 256 */
                      : 0;
}
template <int R> __host__ __device__ __forceinline__ int swz(int t) { return swz_of(R, t); }
/* Byte offset of byte b (a read never crosses 16 bytes) of token t in a field region of R bytes per token. */
template <int R> __host__ __device__ __forceinline__ int faddr(int t, int b) {
    if (R < 16) return t * R + b;
    const int k = t * (R / 16) + (b >> 4);
    return ((k ^ swz<R>(t)) << 4) | (b & 15);
}

/* Staged chunk of source chunk c of a field of R bytes a token (16 tokens contiguous in the page),
 * and the token tok of its first byte (the chunk is copied when tok is valid):
 *   R < 16 (a divisor): chunk c holds tokens 16c/R.., as in the page;
 *   R % 16 != 0 otherwise (24): linear, as in the page (token t at byte R t);
 *   RA = 0: chunk c of token c / (R/16), swizzled by swz_of(R, tok);
 *   RA > 0 (split): the token's first RA bytes in region A (RA bytes a token, swz_of(RA, tok)),
 *           the other RB = R - RA in region B after it (at chunk RA, swz_of(RB, tok)). */
__host__ __device__ __forceinline__ int stage_chunk(int R, int RA, int c, int &tok) {
    if (R < 16 || R % 16) {
        tok = 16 * c / R;
        return c;
    }
    const int n = R / 16, k = c % n;
    tok = c / n;
    if (RA == 0) return c ^ swz_of(R, tok);
    const int na = RA / 16, nb = n - na;
    return k < na ? (tok * na + k) ^ swz_of(RA, tok) : RA + ((tok * nb + k - na) ^ swz_of(R - RA, tok));
}

/* SPLIT[f] of a format (bytes of field f's region A; 0: one region), 0 for formats without SPLIT;
 * field_split<F, f> the same as a constant for device code. */
template <class F, class = void> struct FieldSplit {
    static constexpr int at(int) { return 0; }
};
template <class F> struct FieldSplit<F, std::void_t<decltype(F::SPLIT)>> {
    static constexpr int at(int f) { return F::SPLIT[f]; }
};
template <class F, int I> constexpr int field_split = FieldSplit<F>::at(I);

template <int R, int RA = 0>
__device__ __forceinline__ void load_field(uint8_t *dst, const uint8_t *src, int nvalid, int lane) {
    /* 16 tokens x R bytes, contiguous in global, in 16-byte chunks (stage_chunk) */
#pragma unroll
    for (int c = lane; c < R; c += 32) {
        int tok;
        const int pc = stage_chunk(R, RA, c, tok);
        kvq_cp_async16(dst + 16 * pc, src + 16 * c, tok < nvalid ? 16 : 0);
    }
}
template <class F, int I = 0>
__device__ __forceinline__ void load_record_fields(uint8_t *dst, const uint8_t *run, int P, int slot0, int nvalid, int lane) {
    if constexpr (I < F::NF) {
        /* the field's offset in the run in 32 bits (< 2^31: P slots of one head's records) */
        constexpr int off = F::OFF[I], size = F::SIZE[I];
        load_field<size, field_split<F, I>>(dst + 16 * off, run + (uint32_t)(off * P + slot0 * size), nvalid, lane);
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
