/*
 * tq-mse:3 on the classic kernel (issue 17): the K and V formats KTQ3<DD> and VTQ3<DD>
 * (head dims 64, 128, 256), their coordinate maps and decoders.
 *
 * Bytes (the CPU codec's, src/codec/bitpack.c strided_pack): the record is an f16 scale and
 * DD * 3 / 8 bytes of indices, code = lo | hi << 2: first the 2-bit sub-field (DD/4 bytes, byte j
 * holds lo of coordinates j + (DD/4) s in bits 2s, 2s + 1, s = 0..3), then the 1-bit sub-field
 * (DD/8 bytes, byte j holds hi of coordinates j + (DD/8) k in bit k, k = 0..7). Hence the hi bit
 * of coordinate j + (DD/4) s (j < DD/4) is bit (j / (DD/8)) + 2s of 1-bit byte j mod DD/8: a run
 * of 2-bit bytes and a run of 1-bit bytes line up byte for byte, the hi bits of slot s at bit
 * e + 2s (e = 0 for the runs in the first half of the 2-bit sub-field, 1 in the second).
 *
 * Staging (attn_tile.cuh stage_chunk): at d = 128 and 256 the sub-fields are whole 16-byte
 * chunks of the token, staged as two regions (SPLIT) swizzled as 2-bit (DD/4 bytes a token) and
 * 1-bit (DD/8) fields, so the K (token x quarter) and V (group x token) reads are those of the
 * 2- and 1-bit formats; at d = 64 (24 bytes a token) the field is staged linearly.
 *
 * Decode: tq3_index turns two 2-bit words (x0, x1: lo codes of the same bytes of two runs) and
 * their two 1-bit words (h0, h1) into 4 words of 6-bit indices, byte b of o[s] = the codes of
 * slot s of byte b of x0 (a) and of x1 (b) as la | lb << 2 | ha << 4 | hb << 5 (18 integer
 * instructions for 16 indices); each index is one lookup (lut3: PRMT, base add, LDS) of the f16x2
 * pair (c[a], c[b]) in K's or V's 3-bit table (attn_lut.cuh, LUT3_K / LUT3_V). K pairs two
 * coordinates of one token (x0, x1: two runs of the lane's quarter), V one coordinate of the two
 * tokens of a pair (x0, x1: the same run of both), which is the A register of the value MMA as it is.
 */
#ifndef KVQ_ATTN_TQ3_CUH
#define KVQ_ATTN_TQ3_CUH

#include "attn_traits.cuh"

namespace kvqa {

/* The 6-bit indices of the codes of x0 / x1 (lo bits, 4 slots a byte) and h0 / h1 (their hi
 * bits at e + 2s): byte b of o[s] = la | lb << 2 | ha << 4 | hb << 5 of slot s of byte b. */
KVQ_HD void tq3_index(uint32_t x0, uint32_t x1, uint32_t h0, uint32_t h1, int e, uint32_t o[4]) {
    const uint32_t a = bitsel(0x33333333u, x0, x1 << 2); /* nibbles (la, lb) of slots 0 | 2 */
    const uint32_t b = bitsel(0x33333333u, x0 >> 2, x1); /* slots 1 | 3 */
    const uint32_t y = bitsel(0x55555555u, h0 >> e, h1 << (1 - e)); /* (ha, hb) of slot s at bits 2s, 2s + 1 */
    const uint32_t ym = y & 0x33333333u, yn = (y >> 2) & 0x33333333u; /* slots 0 | 2, 1 | 3 */
    o[0] = bitsel(0x0f0f0f0fu, a, ym << 4);
    o[1] = bitsel(0x0f0f0f0fu, b, yn << 4);
    o[2] = bitsel(0x0f0f0f0fu, a >> 4, ym);
    o[3] = bitsel(0x0f0f0f0fu, b >> 4, yn);
}

/* Byte b of the 2-bit (lo) and 1-bit (hi) sub-fields of staged token t (from the field's start). */
template <int DD> KVQ_HD int tq3_lo(int t, int b) {
    if constexpr (DD == 64) return 24 * t + b;
    else return faddr<DD / 4>(t, b);
}
template <int DD> KVQ_HD int tq3_hi(int t, int b) {
    if constexpr (DD == 64) return 24 * t + 16 + b;
    else return 16 * (DD / 4) + faddr<DD / 8>(t, b);
}
/* N = 2, 4, 8 or 16 staged bytes as words (N = 2: the low half of w[0]) */
template <int N> KVQ_HD void tq3_ld(const uint8_t *f, uint32_t *w) {
    if constexpr (N == 2) w[0] = *(const uint16_t *)f;
    else ldw<N>(f, w);
}

/* K: lane quarter qq of token r reads NB = DD/16 bytes of each sub-field (2-bit bytes NB qq.., their
 * hi bits in 1-bit bytes NB (qq & 1).., e = qq >> 1); word pair pr of them (at d = 64 the one word
 * and its upper half) gives 4 PB registers: register (4 pr + s) PB + b = (x0, x1) of slot s, byte b. */
template <int DD> struct KTQ3 : KTQ<3, DD> {
    static constexpr int NB = DD / 16, PB = DD == 64 ? 2 : 4, NP = DD == 64 ? 1 : NB / 8;
    static constexpr int SPLIT[2] = {0, DD == 64 ? 0 : DD / 4};
    KVQ_HD static int kcoord(int, int qq, int reg, int h) {
        const int b = reg % PB, s = (reg / PB) % 4, pr = reg / (4 * PB);
        return NB * qq + 2 * PB * pr + PB * h + b + (DD / 4) * s;
    }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &p, int r, int qq, int lane4,
                              uint32_t kb[DD / 8]) {
        const uint8_t *f = t + 16 * 2, *T = lut + LUT3_K;
        uint32_t x[NB / 4], hb[NB / 4];
        tq3_ld<NB>(f + tq3_lo<DD>(r, NB * qq), x);
        tq3_ld<NB>(f + tq3_hi<DD>(r, NB * (qq & 1)), hb);
KVQ_UNROLL
        for (int pr = 0; pr < NP; pr++) {
            uint32_t o[4];
            if constexpr (DD == 64) tq3_index(x[0], x[0] >> 16, hb[0], hb[0] >> 16, qq >> 1, o);
            else tq3_index(x[2 * pr], x[2 * pr + 1], hb[2 * pr], hb[2 * pr + 1], qq >> 1, o);
KVQ_UNROLL
            for (int s = 0; s < 4; s++)
KVQ_UNROLL
                for (int b = 0; b < PB; b++) kb[(4 * pr + s) * PB + b] = lut3(T, o[s], b, (uint32_t)lane4);
        }
    }
};

/* V: lane (g, qq) reads NB = DD/32 bytes of each sub-field of its tokens (2-bit bytes NB g.., hi bits
 * in 1-bit bytes NB (g & 3).., e = g >> 2): coordinates NB g + 4w + b + (DD/4) s of word w (b < PB);
 * m-tile mt rows g / g + 8 = bytes b, b + 1 (b = 2 (mt % (PB/2))) of slot s = (mt / (PB/2)) / NWD. */
template <int DD> struct VTQ3 : VTQ<3, DD> {
    static constexpr int NB = DD / 32, NWD = NB >= 4 ? NB / 4 : 1, PB = NB >= 4 ? 4 : NB;
    static constexpr int SPLIT[2] = {0, DD == 64 ? 0 : DD / 4};
    KVQ_HD static int vcoord(int g, int mt, int rh) {
        const int q = mt / (PB / 2), b = 2 * (mt % (PB / 2)) + rh, w = q % NWD, s = q / NWD;
        return NB * g + 4 * w + b + (DD / 4) * s;
    }
    struct Regs {
        uint32_t o[2][NWD][4]; /* token pair (k0, k1 | k2, k3), word, slot */
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
        const uint8_t *f = t + 16 * 2;
KVQ_UNROLL
        for (int pr = 0; pr < 2; pr++) {
            uint32_t x[2][NWD], h[2][NWD];
KVQ_UNROLL
            for (int k = 0; k < 2; k++) {
                const int tk = vtok(qq, 2 * pr + k);
                tq3_ld<NB>(f + tq3_lo<DD>(tk, NB * g), x[k]);
                tq3_ld<NB>(f + tq3_hi<DD>(tk, NB * (g & 3)), h[k]);
            }
KVQ_UNROLL
            for (int w = 0; w < NWD; w++) tq3_index(x[0][w], x[1][w], h[0][w], h[1][w], g >> 2, r.o[pr][w]);
        }
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *lut, const AttnParams &p, int lane4, int mt,
                              uint32_t a[4]) {
        const uint8_t *T = lut + LUT3_V;
        const int q = mt / (PB / 2), b = 2 * (mt % (PB / 2)), w = q % NWD, s = q / NWD;
        a[0] = lut3(T, r.o[0][w][s], b, (uint32_t)lane4);
        a[1] = lut3(T, r.o[0][w][s], b + 1, (uint32_t)lane4);
        a[2] = lut3(T, r.o[1][w][s], b, (uint32_t)lane4);
        a[3] = lut3(T, r.o[1][w][s], b + 1, (uint32_t)lane4);
    }
};

} /* namespace kvqa */

#endif
