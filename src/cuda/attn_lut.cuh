/*
 * Lookup tables of the attention kernels (docs/CUDA.md): codes -> f16x2
 * centroids in shared memory.
 *   4-bit: a byte -> (c[lo nibble], c[hi nibble]), replicated per lane (lane l
 *          reads column l: conflict-free); rows of 128 bytes (classic kernel:
 *          address = byte * 128 + 4l, PRMT + IMAD) or 256 bytes (the wide
 *          table of attn_kernel_wide: address = one PRMT, byte << 8 | 4l);
 *   2-bit: a nibble -> (c[n & 3], c[n >> 2]); or, for tq-mse:2 K and V sharing one
 *          table at d = 128 (LUT_W2X), a byte -> both nibbles' pairs replicated per lane
 *          in rows of 256 bytes (64 KiB): lane l's (low pair, high pair) at byte << 8 | 8l
 *          (address = one PRMT, one conflict-free 8-byte load);
 *   3-bit: a 6-bit index of two codes (attn_tq3.cuh: la | lb << 2 | ha << 4 | hb << 5, code =
 *          low 2 bits | high bit << 2) -> (c[code a], c[code b]), replicated per lane in rows
 *          of 256 bytes (lane l at index * 256 + 4l: the index byte to bits 8..15 and 4l to bits
 *          0..7 of the address in one PRMT), conflict-free; K's table in the rows' first halves,
 *          V's in their second halves (LUT3_K, LUT3_V: 16 KiB at offset 0 of the LUT region);
 *   1-bit and QJL signs: a nibble -> four values.
 */
#ifndef KVQ_ATTN_LUT_CUH
#define KVQ_ATTN_LUT_CUH

#include "attn_bits.cuh"
#include "attn_params.cuh"

namespace kvqa {

constexpr int LUT4_BYTES = 256 * 32 * 4; /* 4-bit table, rows of 128 bytes */
constexpr int WROW = 256;                /* bytes per row of the wide table */
constexpr int WLUT = 256 * WROW;         /* 64 KiB */
constexpr int LUT_W2X = 22;              /* LutDesc.w of the 2-bit byte table (WLUT bytes) */
constexpr int LUT_W2H = 23;              /* the tests' name of the 2-bit byte table of 16 lanes' copies (build_lut2x<16>) */
constexpr int LUT3_BYTES = 64 * WROW;    /* the 3-bit tables: 64 rows of 256 bytes at offset 0 of the LUT region */
constexpr int LUT3_K = 0, LUT3_V = 128;  /* K's and V's 3-bit table: the rows' first and second halves */

/* byte b of w looked up in a table of 128-byte rows */
template <int B> KVQ_HD uint32_t lut4w(const uint8_t *L, uint32_t w, int lane4) {
#ifdef __CUDA_ARCH__
    /* on the device: the byte isolated (one PRMT / LOP3 / SHF), then byte * 128 + (table's
     * shared address + lane4) in one IMAD, the base being loop-invariant: 2 integer
     * instructions per lookup (was shift, mask-or, add), and one of them on the FMA pipe */
    /* (in one asm: the compiler would otherwise turn the byte * 128 back into shift and mask) */
    const uint32_t base = (uint32_t)__cvta_generic_to_shared(L) + (uint32_t)lane4;
    uint32_t v;
    asm("{\n\t.reg .b32 t;\n\tprmt.b32 t, %1, 0, %3;\n\tmad.lo.u32 t, t, 128, %2;\n\tld.shared.b32 %0, [t];\n\t}"
        : "=r"(v)
        : "r"(w), "r"(base), "n"(0x4440 + B));
    return v;
#else
    const uint32_t off = (B == 0 ? (w << 7) : (w >> (8 * B - 7))) & 0x7f80u;
    return ld32(L + (off | (uint32_t)lane4));
#endif
}
/* byte b of w looked up in the wide table (at the start of shared memory): the address is one
 * PRMT, byte B of w to bits 8..15 and lane4 to bits 0..7 */
template <int B> __device__ __forceinline__ uint32_t lut4x(const uint8_t *lut, uint32_t w, uint32_t lane4) {
    uint32_t a;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(w), "r"(lane4), "n"(0x5504 | (B << 4)));
    return *(const uint32_t *)(lut + a);
}
/* byte B of w looked up in the 2-bit byte table (LUT_W2X, at the start of shared memory): the
 * pairs of its low and high nibbles for lane l side by side at byte * 256 + 8l; lane8 = 8l. The
 * address is one PRMT (byte B of w to bits 8..15, lane8 to bits 0..7) and both pairs one 8-byte
 * load: 2 instructions a byte. A half warp's 16 lanes read 128 contiguous bytes of their rows'
 * banks (bank 2l mod 32, 2l + 1): the load's two wavefronts, no conflict. (Session 12's layout had
 * the pairs side by side read by two 4-byte loads: lanes l and l + 16 in one bank, two wavefronts
 * a load, the kernel bound by the shared-memory pipe; session 13's put the high pair 128 bytes on,
 * conflict-free but 3 instructions a byte; docs/RESULTS.md.) */
template <int B> KVQ_HD uint2 lut2x(const uint8_t *lut, uint32_t w, uint32_t lane8) {
#ifdef __CUDA_ARCH__
    uint32_t a;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(w), "r"(lane8), "n"(0x5504 | (B << 4)));
    return *(const uint2 *)(lut + a);
#else
    const uint32_t a = (((w >> (8 * B)) & 0xffu) << 8) | lane8;
    return ld64(lut + a);
#endif
}
/* lut2x of byte b of w, b a constant after unrolling (0..3) */
KVQ_HD uint2 lut2xb(const uint8_t *lut, uint32_t w, int b, uint32_t lane8) {
    return b == 0 ? lut2x<0>(lut, w, lane8) : b == 1 ? lut2x<1>(lut, w, lane8) : b == 2 ? lut2x<2>(lut, w, lane8)
                                                                                 : lut2x<3>(lut, w, lane8);
}
/* The 2-bit byte table of centroids c (4 entries) with COPIES lanes' copies a row: byte b's (low
 * pair, high pair) for lane l at dst + b * 256 + 8 (l % COPIES), by 16-byte stores of two lanes'
 * copies (COPIES / 2 a row), the block's nthreads threads striding over them. COPIES = 32: the
 * whole 256-byte rows (lane8 = 8l); 16: the wide 4/2 and 2/4 kernels' table in the rows' second
 * halves (dst = table + 128; lane8 = 8 (l & 15): an 8-byte load is served per half warp, so lanes
 * l and l + 16 may share a column). */
template <int COPIES> __device__ __forceinline__ void build_lut2x(uint8_t *dst, const float *c, int nthreads) {
    static_assert(COPIES == 32 || COPIES == 16, "a row holds 32 or 16 lanes' copies");
    constexpr int PER_ROW = COPIES / 2, SHIFT = COPIES == 32 ? 4 : 3; /* 16-byte stores a row, log2 */
    for (int e = threadIdx.x; e < 256 * PER_ROW; e += nthreads) {
        const int byte = e >> SHIFT, lo = byte & 15, hi = byte >> 4;
        const uint32_t a = pack2(c[lo & 3], c[lo >> 2]), b = pack2(c[hi & 3], c[hi >> 2]);
        *(uint4 *)(dst + byte * WROW + (e & (PER_ROW - 1)) * 16) = make_uint4(a, b, a, b);
    }
}
/* byte B of w (a 6-bit index) looked up in the 3-bit table T (LUT3_K or LUT3_V from the LUT region's
 * start): entry of lane l at byte * 256 + 4l, that offset one PRMT (B constant after unrolling;
 * lane4 = 4l); ptxas adds the region's shared address by an IMAD.IADD (sm_90, nvcc 13.0), the
 * table's offset goes into the LDS: 3 instructions a lookup, as lut4w */
KVQ_HD uint32_t lut3(const uint8_t *T, uint32_t w, int B, uint32_t lane4) {
    return ld32(T + prmt(w, lane4, 0x5504u | ((uint32_t)B << 4)));
}
/* The 3-bit table of centroids c (8 entries) at dst (LUT3_K or LUT3_V): entry i = (c[(i & 3) | (i >> 4 & 1) << 2],
 * c[(i >> 2 & 3) | (i >> 5) << 2]) in bytes 0..127 of row i (dst + 256 i), by 512 16-byte stores (4 lanes'
 * copies each). */
KVQ_HD uint32_t lut3_entry(const float *c, int i) {
    return pack2(c[(i & 3) | ((i >> 2) & 4)], c[((i >> 2) & 3) | ((i >> 3) & 4)]);
}
__device__ __forceinline__ void build_lut3(uint8_t *dst, const float *c, int nthreads) {
    for (int e = threadIdx.x; e < 64 * 8; e += nthreads) {
        const uint32_t v = lut3_entry(c, e >> 3);
        *(uint4 *)(dst + (e >> 3) * WROW + (e & 7) * 16) = make_uint4(v, v, v, v);
    }
}
/* nibble -> (c[n & 3], c[n >> 2]) */
KVQ_HD uint32_t lut2(const uint8_t *L, uint32_t nib) { return ld32(L + (nib << 2)); }
/* nibble -> (c[b0], c[b1]), (c[b2], c[b3]) */
KVQ_HD uint2 lut1(const uint8_t *L, uint32_t nib) { return ld64(L + (nib << 3)); }

/* The 4-bit table of centroids c with rows of ROW bytes, by 16-byte stores of 4 lanes'
 * copies of an entry, the block's nthreads threads striding over the 2048 stores. */
template <int ROW> __device__ __forceinline__ void build_lut4(uint8_t *dst, const float *c, int nthreads) {
    for (int e = threadIdx.x; e < 256 * 8; e += nthreads) {
        const int byte = e >> 3;
        const uint32_t v = pack2(c[byte & 15], c[byte >> 4]);
        const int off = ROW == 128 ? 16 * e : byte * ROW + (e & 7) * 16; /* the same for ROW = 128 */
        *(uint4 *)(dst + off) = make_uint4(v, v, v, v);
    }
}

/* The layer's tables (p.lut) at their offsets in lut (the classic kernel). */
__device__ __forceinline__ void build_luts(uint8_t *lut, const AttnParams &p) {
    for (int i = 0; i < p.nlut; i++) {
        const LutDesc &L = p.lut[i];
        uint32_t *dst = (uint32_t *)(lut + L.off);
        if (L.w == 4) {
            build_lut4<128>(lut + L.off, L.c, blockDim.x);
        } else if (L.w == LUT_W2X) {
            build_lut2x<32>(lut + L.off, L.c, blockDim.x);
        } else if (L.w == 3) {
            build_lut3(lut + L.off, L.c, blockDim.x);
        } else if (L.w == 2) {
            for (int n = threadIdx.x; n < 16; n += blockDim.x) dst[n] = pack2(L.c[n & 3], L.c[n >> 2]);
        } else {
            for (int n = threadIdx.x; n < 16; n += blockDim.x) {
                float c[4];
                for (int b = 0; b < 4; b++) {
                    const int bit = (n >> b) & 1;
                    c[b] = L.w == 0 ? (bit ? 1.f : -1.f) : L.c[bit];
                }
                dst[2 * n] = pack2(c[0], c[1]);
                dst[2 * n + 1] = pack2(c[2], c[3]);
            }
        }
    }
}

} /* namespace kvqa */

#endif
