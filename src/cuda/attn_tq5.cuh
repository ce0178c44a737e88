/*
 * tq-mse:5 keys on the classic kernel (issue 17; the README's tq-mse:5+chscale): the K format
 * KTQ5<DD> (head dims 128 and 256), its coordinate map and decoder.
 *
 * Bytes (the CPU codec's, src/codec/bitpack.c strided_pack): the record is an f16 scale and
 * DD * 5 / 8 bytes of indices, code = lo | hi << 4: first the 4-bit sub-field (DD/2 bytes, byte j
 * holds lo of coordinates j and j + DD/2 in its low and high nibble), then the 1-bit sub-field
 * (DD/8 bytes, byte i holds hi of coordinates i + (DD/8) k in bit k). Lane quarter qq reads the
 * 4-bit bytes j = (DD/8) qq + i, i < DD/8, as tq-mse:4 does (kcoord4); the hi bits of byte j's two
 * coordinates are bits qq and qq + 4 of 1-bit byte i, so the lane reads the whole 1-bit sub-field
 * of its token (DD/8 bytes) and its 4-bit run pairs with it byte for byte.
 *
 * Lookup by symmetry: the Lloyd-Max codebook is mirrored (lloyd_max.c: c[31 - i] = -c[i] exactly),
 * so with m[i] = c[16 + i] the value of code lo | hi << 4 is m[lo] for hi = 1 and -m[15 - lo] =
 * -m[lo ^ 15] for hi = 0. A byte of lo codes whose hi bits are 0 gets its nibbles flipped (XOR
 * 0x0f / 0xf0), is looked up in the ordinary 4-bit table built from m (attn_lut.cuh, 256 pairs
 * replicated per lane: the same 32 KiB and lookup as tq-mse:4), and the f16 sign bits of those
 * halves are set (XOR 0x8000 / 0x80000000): -f16(m) = f16(-m), so the registers are exactly the
 * f16 centroids, as for the other formats. Per 4 registers (a word of the run): 10 integer
 * instructions for the flags and flips, then per register the lookup (PRMT, IMAD, LDS) and the
 * sign (PRMT, LOP3): 30 against tq-mse:4's 12.
 *
 * Staging: the sub-fields are whole 16-byte chunks of the token (64 + 16 bytes at d = 128, 128 + 32
 * at 256), staged as two regions (SPLIT, attn_tile.cuh stage_chunk): the 4-bit one swizzled as
 * tq-mse:4's field, the 1-bit one as a field of DD/8 bytes (8 tokens' 16-byte rows in one
 * wavefront at d = 128: the four quarter lanes of a token read the same row).
 */
#ifndef KVQ_ATTN_TQ5_CUH
#define KVQ_ATTN_TQ5_CUH

#include "attn_traits.cuh"

namespace kvqa {

/* Four registers (c[code a], c[code b]) of the 4-bit word w (bytes: lo codes a | b << 4) and the
 * word h of their 1-bit bytes (hi of a at bit e, of b at bit e + 4), from the 4-bit table L of m.
 * (e = qq differs between the lanes of a warp: a shift by a register, not a branch.) */
KVQ_HD void tq5_word(const uint8_t *L, uint32_t w, uint32_t h, int e, int lane4, uint32_t kb[4]) {
    const uint32_t n = ~h;
    const uint32_t fa = (n >> e) & 0x01010101u, fb = (n >> (e + 4)) & 0x01010101u; /* 1: a negative code */
    const uint32_t x = w ^ (fa * 0x0fu) ^ (fb * 0xf0u);                         /* lo ^ 15 where negative */
    const uint32_t sa = fa << 7, sb = fb << 7;                                   /* the flags at bit 7 of each byte */
    kb[0] = lut4w<0>(L, x, lane4) ^ (prmt(sa, sb, 0x4000u) & 0x80008000u);
    kb[1] = lut4w<1>(L, x, lane4) ^ (prmt(sa, sb, 0x5010u) & 0x80008000u);
    kb[2] = lut4w<2>(L, x, lane4) ^ (prmt(sa, sb, 0x6020u) & 0x80008000u);
    kb[3] = lut4w<3>(L, x, lane4) ^ (prmt(sa, sb, 0x7030u) & 0x80008000u);
}

/* K: lane quarter qq of token r: the 4-bit bytes (DD/8) qq .. + DD/8 (word i = bytes 4i..4i+3 of
 * the run) and the 1-bit sub-field's DD/8 bytes (word i: the same positions); registers as
 * tq-mse:4's (kcoord4). */
template <int DD> struct KTQ5 : KTQ<5, DD> {
    static_assert(DD == 128 || DD == 256, "tq-mse:5 keys: whole 16-byte sub-fields (wired at d = 128)");
    static constexpr int SPLIT[2] = {0, DD / 2};
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord4<DD>(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &p, int r, int qq, int lane4,
                              uint32_t kb[DD / 8]) {
        const uint8_t *f = t + 16 * 2, *L = lut + p.klut[0];
        uint32_t w[DD / 32], h[DD / 32];
        ldf<DD / 2, DD / 8>(f, r, qq * (DD / 8), w);
        ldf<DD / 8, DD / 8>(f + 16 * (DD / 2), r, 0, h);
KVQ_UNROLL
        for (int i = 0; i < DD / 32; i++) tq5_word(L, w[i], h[i], qq, lane4, kb + 4 * i);
    }
};

} /* namespace kvqa */

#endif
