/*
 * Decoders of the staged codes into MMA operands (f16x2 registers), and the
 * coordinate maps that say which coordinate each register half holds.
 * Coordinates are permuted freely between the lanes, so that every lane
 * reads its codes with one vector load and one lookup per byte or nibble;
 * the query fragments are built in the same permutation (kcoord) and the
 * block merge writes O back through it (vcoord).
 *   K side: token r, quarter qq of the record -> 16 registers, the B-layout
 *           of one m16n8k16 k-step pair per register pair (attn_block.cuh
 *           kmma_t takes two tokens' registers as the A fragment);
 *   V side: lane (g, qq) decodes coordinates of group g for its tokens
 *           2qq, 2qq+1, 2qq+8, 2qq+9 (vtok), m-tile mt -> the A fragment.
 */
#ifndef KVQ_ATTN_DECODE_CUH
#define KVQ_ATTN_DECODE_CUH

#include "attn_lut.cuh"
#include "attn_tile.cuh"

namespace kvqa {

/* The codes of a token pair interleaved field by field (S = 2 or 4 bits): x0 gets the even
 * fields of both (x0's in the low S bits of each 2S), x1 the odd ones; one shift and one
 * bitwise select (LOP3) per word. */
template <int S> KVQ_HD void interleave(uint32_t &x0, uint32_t &x1) {
    constexpr uint32_t m = S == 4 ? 0x0f0f0f0fu : 0x33333333u;
    const uint32_t a = x0, b = x1;
    x0 = bitsel(m, a, b << S);
    x1 = bitsel(m, a >> S, b);
}
/* ---- K side: token r, quarter qq -> DD/8 f16x2 registers ---------------------- */
/* Every decoder is written for head dim DD = 64, 128 or 256 (default 128): lane quarter qq
 * reads the qq-th quarter of each field's bytes, so the maps below are the d = 128 maps with
 * the field sizes scaled (issue 17: the tensor-core kernels at head dims 64 and 256). */
/* Loads n = 4, 8, 16 or 32 bytes (4-byte aligned, a multiple of 16 at 32) as n / 4 words. */
template <int N> KVQ_HD void ldw(const uint8_t *f, uint32_t w[N / 4]) {
    static_assert(N == 4 || N == 8 || N == 16 || N == 32, "ldw: 4, 8, 16 or 32 bytes");
    if constexpr (N == 4) {
        w[0] = ld32(f);
    } else if constexpr (N == 8) {
        const uint2 v = ld64(f);
        w[0] = v.x, w[1] = v.y;
    } else {
KVQ_UNROLL
        for (int i = 0; i < N / 16; i++) {
            const uint4 v = ld128(f + 16 * i);
            w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
        }
    }
}
/* Bytes b..b+N of token r of a staged field of R bytes a token (N = 32: two 16-byte reads). */
template <int R, int N> KVQ_HD void ldf(const uint8_t *f, int r, int b, uint32_t w[N / 4]) {
    if constexpr (N == 32) {
        ldw<16>(f + faddr<R>(r, b), w);
        ldw<16>(f + faddr<R>(r, b + 16), w + 4);
    } else {
        ldw<N>(f + faddr<R>(r, b), w);
    }
}

/* 4-bit strided (DD/8 bytes of the DD/2): byte j -> (coord j, j + DD/2) */
template <int DD = 128> KVQ_HD void kdec4(const uint8_t *f, const uint8_t *L, int r, int qq, int lane4, uint32_t kb[DD / 8]) {
    uint32_t w[DD / 32];
    ldf<DD / 2, DD / 8>(f, r, qq * (DD / 8), w);
KVQ_UNROLL
    for (int i = 0; i < DD / 32; i++) {
        kb[4 * i] = lut4w<0>(L, w[i], lane4);
        kb[4 * i + 1] = lut4w<1>(L, w[i], lane4);
        kb[4 * i + 2] = lut4w<2>(L, w[i], lane4);
        kb[4 * i + 3] = lut4w<3>(L, w[i], lane4);
    }
}
template <int DD = 128> KVQ_HD int kcoord4(int qq, int reg, int h) { return (DD / 8) * qq + reg + (DD / 2) * h; }

/* 2-bit strided (DD/16 bytes of the DD/4): low nibble of byte j -> (j, j + DD/4), high ->
 * (j + DD/2, j + 3DD/4) */
template <int DD = 128> KVQ_HD void kdec2(const uint8_t *f, const uint8_t *L, int r, int qq, uint32_t kb[DD / 8]) {
    uint32_t w[DD / 64];
    ldf<DD / 4, DD / 16>(f, r, qq * (DD / 16), w);
KVQ_UNROLL
    for (int i = 0; i < DD / 64; i++)
KVQ_UNROLL
        for (int b = 0; b < 4; b++) {
            const uint32_t byte = (w[i] >> (8 * b)) & 0xffu;
            kb[2 * (4 * i + b)] = lut2(L, byte & 15u);
            kb[2 * (4 * i + b) + 1] = lut2(L, byte >> 4);
        }
}
/* The same registers from the 2-bit byte table (LUT_W2X, d = 128): per byte one PRMT for the
 * address of its two nibbles' pairs and one 8-byte load (lut2x); lane8 = 8 * lane */
KVQ_HD void kdec2x(const uint8_t *f, const uint8_t *L, int r, int qq, uint32_t lane8, uint32_t kb[16]) {
    uint32_t w[2];
    ldf<D / 4, D / 16>(f, r, qq * (D / 16), w);
KVQ_UNROLL
    for (int i = 0; i < 2; i++) {
        const uint2 e0 = lut2x<0>(L, w[i], lane8), e1 = lut2x<1>(L, w[i], lane8);
        const uint2 e2 = lut2x<2>(L, w[i], lane8), e3 = lut2x<3>(L, w[i], lane8);
        kb[8 * i + 0] = e0.x, kb[8 * i + 1] = e0.y, kb[8 * i + 2] = e1.x, kb[8 * i + 3] = e1.y;
        kb[8 * i + 4] = e2.x, kb[8 * i + 5] = e2.y, kb[8 * i + 6] = e3.x, kb[8 * i + 7] = e3.y;
    }
}
/* Tokens r and r + 8 (the score MMA's rows g, g + 8) at once from the byte table, for the wide
 * kernel: the two tokens' words nibble-interleaved (interleave<4>: byte b of lo = token r's low
 * nibble of byte b, then token r + 8's; hi: the high nibbles), so that one lookup (lut2x: the pairs
 * of the byte's two nibbles) is (kb0[j], kb1[j]) = the A fragment's (a0, a1) or (a2, a3) of kmma_t,
 * the two registers the MMA reads, as they are (two lookups of one token's byte gave (kb0[j],
 * kb0[j + 1]): ptxas moved every register into place, ~35 moves a tile). The registers and the map
 * (kcoord2) are kdec2x's of each token. */
KVQ_HD void kdec2x_pair(const uint8_t *f, const uint8_t *L, int r, int qq, uint32_t lane8, uint32_t kb0[16],
                        uint32_t kb1[16]) {
    uint32_t w0[2], w1[2];
    ldf<D / 4, D / 16>(f, r, qq * (D / 16), w0);
    ldf<D / 4, D / 16>(f, r + 8, qq * (D / 16), w1);
KVQ_UNROLL
    for (int i = 0; i < 2; i++) {
        uint32_t lo = w0[i], hi = w1[i];
        interleave<4>(lo, hi);
KVQ_UNROLL
        for (int b = 0; b < 4; b++) {
            const uint2 e = lut2xb(L, lo, b, lane8), o = lut2xb(L, hi, b, lane8);
            kb0[8 * i + 2 * b] = e.x, kb1[8 * i + 2 * b] = e.y;
            kb0[8 * i + 2 * b + 1] = o.x, kb1[8 * i + 2 * b + 1] = o.y;
        }
    }
}
template <int DD = 128> KVQ_HD int kcoord2(int qq, int reg, int h) {
    return (DD / 16) * qq + reg / 2 + (DD / 4) * (2 * (reg % 2) + h);
}

/* 1-bit (4 bytes of the D/8): nibble -> 4 coordinates (strided: j + 16k; signs: 8j + k); d = 128 only */
KVQ_HD void kdec1(const uint8_t *f, const uint8_t *L, int r, int qq, uint32_t kb[16]) {
    const uint32_t w = ld32(f + faddr<D / 8>(r, qq * 4));
KVQ_UNROLL
    for (int b = 0; b < 4; b++)
KVQ_UNROLL
        for (int n = 0; n < 2; n++) {
            const uint2 e = lut1(L, (w >> (8 * b + 4 * n)) & 15u);
            kb[4 * b + 2 * n] = e.x;
            kb[4 * b + 2 * n + 1] = e.y;
        }
}
KVQ_HD int kbit1(int reg, int h) { return 4 * ((reg / 2) % 2) + 2 * (reg % 2) + h; }
KVQ_HD int kcoord1(int qq, int reg, int h) { return (4 * qq + reg / 4) + (D / 8) * kbit1(reg, h); }
KVQ_HD int kcoord_sign(int qq, int reg, int h) { return 8 * (4 * qq + reg / 4) + kbit1(reg, h); }

/* f16 values (chunks qq + 4i, i < DD/32, of the 2DD bytes) */
template <int DD = 128> KVQ_HD void kdec_f16(const uint8_t *f, int r, int qq, uint32_t kb[DD / 8]) {
KVQ_UNROLL
    for (int i = 0; i < DD / 32; i++) {
        const uint4 v = ld128(f + faddr<2 * DD>(r, (qq + 4 * i) * 16));
        kb[4 * i] = v.x, kb[4 * i + 1] = v.y, kb[4 * i + 2] = v.z, kb[4 * i + 3] = v.w;
    }
}
KVQ_HD int kcoord_f16(int qq, int reg, int h) { return 8 * (qq + 4 * (reg / 4)) + 2 * (reg % 4) + h; }

/* int8 pair (bytes 2*pair, 2*pair+1 of w) -> exact f16x2 */
KVQ_HD __half2 i8pair(uint32_t w, int pair) {
    const uint32_t t = w ^ 0x80808080u;
    const uint32_t h = prmt(t, 0x64646464u, pair ? 0x4342u : 0x4140u);
    return __hsub2(bits2h(h), bits2h(0x64806480u));
}
/* q8: quarter qq = bytes [qq DD/4, (qq + 1) DD/4) (d = 128: block qq of 32), each 16-byte
 * chunk with its block's scale folded in */
template <int DD = 128> KVQ_HD void kdec_q8(const uint8_t *fs, const uint8_t *fv, int r, int qq, uint32_t kb[DD / 8]) {
    __half2 s2 = bits2h(0u);
KVQ_UNROLL
    for (int c = 0; c < DD / 64; c++) {
        const int b0 = qq * (DD / 4) + 16 * c;
        if (c % 2 == 0) { /* a block of 32 bytes: one scale for two chunks */
            const uint16_t sbits = *(const uint16_t *)(fs + faddr<2 * (DD / 32)>(r, 2 * (b0 / 32)));
            s2 = bits2h((uint32_t)sbits * 0x10001u);
        }
        const uint4 v = ld128(fv + faddr<DD>(r, b0));
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
KVQ_UNROLL
        for (int i = 0; i < 4; i++)
KVQ_UNROLL
            for (int p = 0; p < 2; p++) kb[8 * c + 2 * i + p] = h2bits(__hmul2(i8pair(w[i], p), s2));
    }
}
template <int DD = 128> KVQ_HD int kcoord_q8(int qq, int reg, int h) { return (DD / 4) * qq + 2 * reg + h; }

/* Scale of token t of a 2-byte scale field (R = 2). */
KVQ_HD float scale_one(const uint8_t *f, int t) { return hlo((uint32_t) * (const uint16_t *)(f + 2 * t)); }

/* Scales of tokens t, t+1 (t even) of a 2-byte scale field (R = 2). */
KVQ_HD float2 scale_pair(const uint8_t *f, int t) {
    const uint32_t u = ld32(f + 2 * t);
    return make_float2(hlo(u), hhi(u));
}

template <int W, int DD = 128>
KVQ_HD void kdec_w(const uint8_t *f, const uint8_t *L, int r, int qq, int lane4, uint32_t kb[DD / 8]) {
    static_assert(DD == 128 || W != 1, "1-bit stages: d = 128 only");
    static_assert(W == 1 || W == 2 || W == 4, "3-bit stages: KTQ3 (attn_tq3.cuh)");
    if constexpr (W == 4) kdec4<DD>(f, L, r, qq, lane4, kb);
    else if constexpr (W == 2) kdec2<DD>(f, L, r, qq, kb);
    else kdec1(f, L, r, qq, kb);
}
template <int W, int DD = 128> KVQ_HD int kcoord_w(int qq, int reg, int h) {
    return W == 4 ? kcoord4<DD>(qq, reg, h) : W == 2 ? kcoord2<DD>(qq, reg, h) : kcoord1(qq, reg, h);
}

/* ---- V side: lane (g, qq) decodes coordinates of group g for tokens
 * 2qq, 2qq+1, 2qq+8, 2qq+9 (k = 0..3); m-tile mt rows g, g+8 <-> vcoord(g, mt, 0/1).
 * A fragment: a[0] = (row g; tokens k0, k1), a[1] = (row g+8; k0, k1),
 *             a[2] = (row g; k2, k3),        a[3] = (row g+8; k2, k3). */
KVQ_HD void vpack(uint32_t a[4], uint32_t u0, uint32_t u1, uint32_t u2, uint32_t u3) {
    a[0] = prmt(u0, u1, 0x5410u);
    a[1] = prmt(u0, u1, 0x7632u);
    a[2] = prmt(u2, u3, 0x5410u);
    a[3] = prmt(u2, u3, 0x7632u);
}
KVQ_HD int vtok(int qq, int k) { return 2 * qq + (k & 1) + 8 * (k >> 1); }

/* 4-bit V codes of the lane's tokens (k0, k1 | k2, k3; 8 bytes each): the nibbles of a pair
 * interleaved, so that a byte holds one coordinate of both tokens: its lookup (c[lo], c[hi])
 * is the A register as it is (no byte permutes to pair the tokens). x[2p][j]: low nibbles
 * (coordinate 8g + 4j + b), x[2p + 1][j]: high nibbles (+ 64), byte b of word j. */
template <int NWD = 2> KVQ_HD void interleave4(uint32_t x[4][NWD]) {
KVQ_UNROLL
    for (int pr = 0; pr < 2; pr++)
KVQ_UNROLL
        for (int j = 0; j < NWD; j++) interleave<4>(x[2 * pr][j], x[2 * pr + 1][j]);
}

/* Offset of lane (g, qq)'s V word of token 2qq in a staged 32-byte field (2-bit codes, d = 128):
 * faddr<32>(2qq + e + 8h, 4g) = 64qq + 4g + 256h + 32 (e ^ (qq >> 1)), the swizzle (swz_of(32, t) =
 * 2 ((t >> 2) & 1) chunks) being qq >> 1 for all four tokens; e = 1 is this offset ^ 32 */
KVQ_HD uint32_t vword2_off(int g, int qq) { return (uint32_t)(64 * qq + 4 * g + 32 * (qq >> 1)); }

/* One LUT stage of W bits at head dim DD: the lane's code bytes of its 4 tokens (4-bit: DD/16
 * bytes at g DD/16 of the DD/2; 2-bit: DD/32 bytes at g DD/32 of the DD/4; 1-bit: d = 128). */
template <int W, int DD = 128> struct VStage {
    static_assert(DD == 128 || W != 1, "1-bit stages: d = 128 only");
    static_assert(W == 1 || W == 2 || W == 4, "3-bit stages: VTQ3 (attn_tq3.cuh)");
    static constexpr int NWD = W == 4 ? DD / 64 : W == 2 ? (DD >= 128 ? DD / 128 : 1) : 1;
    uint32_t x[4][NWD];
    KVQ_HD void load(const uint8_t *f, int g, int qq) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int t = vtok(qq, k);
            if constexpr (W == 4) {
                ldw<DD / 16>(f + faddr<DD / 2>(t, (DD / 16) * g), x[k]);
            } else if constexpr (W == 2) {
                if constexpr (DD == 64) x[k][0] = *(const uint16_t *)(f + faddr<DD / 4>(t, 2 * g));
                else ldw<DD / 32>(f + faddr<DD / 4>(t, (DD / 32) * g), x[k]);
            } else {
                x[k][0] = *(const uint16_t *)(f + faddr<D / 8>(t, 2 * g));
            }
        }
        if constexpr (W == 4) interleave4<NWD>(x);
        if constexpr (W == 2) {
            /* 2-bit: as the 4-bit codes, a nibble holds one coordinate of both tokens (code of k0
             * in its low two bits): its lookup (c[lo], c[hi]) is the A register. x[2p]: even
             * fields (coordinate of mt's low half), x[2p + 1]: odd fields, nibble mt. */
KVQ_UNROLL
            for (int pr = 0; pr < 2; pr++)
KVQ_UNROLL
                for (int j = 0; j < NWD; j++) interleave<2>(x[2 * pr][j], x[2 * pr + 1][j]);
        }
    }
    /* load() of 2-bit codes at d = 128 from the lane's offset v0 = vword2_off(g, qq) (the
     * wide kernel: one lane constant, the four words at v0, v0 ^ 32, and 256 bytes on) */
    KVQ_HD void load2x(const uint8_t *f, uint32_t v0) {
        static_assert(W == 2 && DD == 128, "the byte table: 2-bit stages at d = 128");
        const uint32_t v1 = v0 ^ 32u;
        x[0][0] = ld32(f + v0), x[1][0] = ld32(f + v1), x[2][0] = ld32(f + v0 + 256), x[3][0] = ld32(f + v1 + 256);
        interleave<2>(x[0][0], x[1][0]);
        interleave<2>(x[2][0], x[3][0]);
    }
    KVQ_HD void decode(const uint8_t *L, int lane4, int mt, uint32_t a[4]) const {
        if constexpr (W == 4) {
            /* a0 = (row g: low nibbles; k0, k1), a1 = (row g + 8: high; k0, k1), a2, a3: k2, k3 */
KVQ_UNROLL
            for (int i = 0; i < 4; i++) {
                const uint32_t w = x[i][mt >> 2];
                const int b = mt & 3;
                a[i] = b == 0 ? lut4w<0>(L, w, lane4) : b == 1 ? lut4w<1>(L, w, lane4) : b == 2 ? lut4w<2>(L, w, lane4)
                                                                                             : lut4w<3>(L, w, lane4);
            }
        } else if constexpr (W == 2) {
            /* the interleaved words (load): a0 = x[0] (row g; k0, k1), a1 = x[1] (row g + 8), a2, a3: k2, k3 */
KVQ_UNROLL
            for (int i = 0; i < 4; i++) a[i] = lut2(L, (x[i][mt >> 3] >> (4 * (mt & 7))) & 15u);
        } else {
            uint32_t u[4];
KVQ_UNROLL
            for (int k = 0; k < 4; k++) {
                const uint2 e = lut1(L, (x[k][0] >> (4 * (mt >> 1))) & 15u);
                u[k] = (mt & 1) ? e.y : e.x;
            }
            vpack(a, u[0], u[1], u[2], u[3]);
        }
    }
    /* 2-bit at d = 128 from the byte table (LUT_W2X): byte mt / 2 of the interleaved words
     * x[mt & 1] (tokens k0, k1) and x[2 + (mt & 1)] (k2, k3), whose nibbles are rows g and g + 8
     * of m-tile mt (vcoord2x): one lookup (lut2x, 8 bytes) is (a0, a1), another (a2, a3), the
     * registers the MMA reads as they are; lane8 = 8 * lane */
    KVQ_HD void decode2x(const uint8_t *L, uint32_t lane8, int mt, uint32_t a[4]) const {
        static_assert(W == 2 && DD == 128, "the byte table: 2-bit stages at d = 128");
        const uint32_t w0 = x[mt & 1][0], w1 = x[2 + (mt & 1)][0];
        const int b = mt >> 1;
        const uint2 e = lut2xb(L, w0, b, lane8), o = lut2xb(L, w1, b, lane8);
        a[0] = e.x, a[1] = e.y, a[2] = o.x, a[3] = o.y;
    }
};
/* The V map of decode2x (d = 128): byte b = mt / 2 of x[j] (j = mt & 1) holds fields 4b + j (low
 * nibble: row g) and 4b + 2 + j (high: row g + 8) of the lane's word, byte 4g + b of the 2-bit
 * strided codes, slots j and 2 + j: coordinates 4g + b + 32 (j + 2 rh) */
KVQ_HD int vcoord2x(int g, int mt, int rh) { return 4 * g + (mt >> 1) + 32 * ((mt & 1) + 2 * rh); }
template <int W, int DD = 128> KVQ_HD int vcoord_w(int g, int mt, int rh) {
    return W == 4 ? (DD / 16) * g + mt + (DD / 2) * rh
         : W == 2 ? (DD / 32) * g + mt / 2 + (DD / 4) * (2 * (mt % 2) + rh)
                  : (2 * g + mt / 4) + (D / 8) * (4 * ((mt / 2) % 2) + 2 * (mt % 2) + rh);
}

} /* namespace kvqa */

#endif
