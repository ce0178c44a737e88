/*
 * tcq:k on the classic kernel (issue 17): the K and V formats KTCQ<KB, DD> and VTCQ<KB, DD> (KB = k
 * bits a value), their coordinate maps and decoders. No table: the code is computed.
 *
 * Bytes (m_tcq.c, codec/tcq_kernels.h): the record is an f16 scale gamma and a stream of DD k bits
 * (N = DD k / 32 words, LSB first); value t is gamma f(s_t), s_t the 12-bit window of the stream from
 * bit (DD - 1 - t) k, read circularly (tail-biting). With the position j = DD - 1 - t, state j starts
 * at bit j k: a run of consecutive positions is a run of shifts of a few words.
 * f(s) = (bytesum(h) - 510) / sqrt(21845), h = s TCQ_MUL + TCQ_ADD mod 2^32 (QTIP's "1MAD", Tseng et
 * al. 2024, sec. 3.1; codec/tcq_code.h).
 *
 * Decode of a value (tcq_pair: two values, one f16x2 register): the state by one shift (a funnel
 * shift across two words when the window straddles them) and one mask; h by one IMAD; the f16 bits of
 * 1024 + bytesum(h) by one dp4a, 0x6400 + bytesum (bytesum <= 1020 < 1024: the f16 integers of
 * [1024, 2048) have unit spacing, so these bits are the exact value); two values packed by one PRMT
 * and one HSUB2 of (1534, 1534): bytesum - 510 exactly (an integer, |x| <= 510). The factor
 * 1 / sqrt(21845) = TCQ_INV_SD goes into the record scale (K: the token's score scale, after the MMA;
 * V: the scale folded into P), so the f16 operands are exact and the one rounding left is f32.
 *
 * Maps (a lane may own any coordinates, the query fragments and the merge follow kcoord / vcoord):
 *   K: quarter qq of token r takes positions DD/4 qq + 2 reg + h (reg < DD/8): the bits from
 *      DD/4 qq k, its own DD k / 128 words and the next quarter's first (mod N: the last quarter's
 *      windows run into the stream's start);
 *   V: group g takes positions DD/8 g + 2 mt + rh (m-tile mt, row half rh) of each of its 4 tokens.
 * A run that does not start on a word (d = 128: V at odd k; d = 64: K at odd k, V at k < 4) is
 * loaded one word longer and aligned by a funnel shift per word, once per tile.
 * Staging: the stream is one field of DD k / 8 bytes a token, swizzled as the other fields of its
 * size (32, 64: as tq-mse:2 / tq-mse:4 at d = 128; 48 and 96: linear, as any size that is not a
 * power of two; 24 at d = 64: linear, as tq-mse:3's).
 */
#ifndef KVQ_ATTN_TCQ_CUH
#define KVQ_ATTN_TCQ_CUH

#include "attn_traits.cuh"
#include "tcq_value.cuh"

namespace kvqa {

/* (hi:lo) >> sh, the low word (sh < 32; one SHF) */
KVQ_HD uint32_t funnel_r(uint32_t lo, uint32_t hi, int sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, (unsigned)sh);
#else
    return (uint32_t)(((((uint64_t)hi) << 32) | lo) >> (sh & 31));
#endif
}
/* The f16 bits of 1024 + bytesum(s TCQ_MUL + TCQ_ADD) (one IMAD, one dp4a) */
KVQ_HD uint32_t tcq_h16(uint32_t s) {
    const uint32_t h = s * TCQ_MUL + TCQ_ADD;
#ifdef __CUDA_ARCH__
    return __dp4a(h, 0x01010101u, 0x6400u);
#else
    return 0x6400u + (h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24);
#endif
}
/* f16x2 (bytesum - 510 of state s0, of s1) = (f(s0), f(s1)) / TCQ_INV_SD exactly (0x65fe: 1534.0) */
KVQ_HD uint32_t tcq_pair(uint32_t s0, uint32_t s1) {
    const uint32_t x = prmt(tcq_h16(s0), tcq_h16(s1), 0x5410u);
#ifdef __CUDA_ARCH__
    /* sub.f16x2 on the word itself: through __half2 (bits2h, h2bits) ptxas split and re-packed the
     * halves, 2 more instructions a pair */
    uint32_t d;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(0x65fe65feu));
    return d;
#else
    return h2bits(__hsub2(bits2h(x), bits2h(0x65fe65feu)));
#endif
}
/* The 12-bit state at bit o of the words w (o a constant once unrolled) */
KVQ_HD uint32_t tcq_state(const uint32_t *w, int o) {
    const int i = o >> 5, sh = o & 31;
    return (sh <= 20 ? w[i] >> sh : funnel_r(w[i], w[i + 1], sh)) & 4095u;
}

/* The staged stream of DD k bits a token: R bytes, N words; byte address of word j of token t. */
template <int DD, int KB> struct TcqField {
    static constexpr int R = DD * KB / 8, N = R / 4;
    KVQ_HD static int addr(int t, int j) {
        if constexpr (R % 16 != 0) return R * t + 4 * j; /* 24, 8: linear */
        else return faddr<R>(t, 4 * j);
    }
    /* NV words of token t from word j (no wrap; j a multiple of NV: one vector load for 2, 4, 8) */
    template <int NV> KVQ_HD static void words(const uint8_t *f, int t, int j, uint32_t *w) {
        if constexpr (NV == 8 && R % 16 == 0) { /* two chunks, each where the swizzle puts it */
            ldw<16>(f + addr(t, j), w);
            ldw<16>(f + addr(t, j + 4), w + 4);
        } else if constexpr ((NV == 2 || NV == 4) && R % 16 == 0) {
            ldw<4 * NV>(f + addr(t, j), w);
        } else {
KVQ_UNROLL
            for (int i = 0; i < NV; i++) w[i] = ld32(f + addr(t, j + i));
        }
    }
    /* NA words of token t's stream from bit b on (mod the stream), for a run of NP positions starting
     * at a multiple of NP: its own NV words by one load when b is word-aligned (AL), else NA + 1
     * words aligned by funnel shifts */
    template <int NP, int NA> KVQ_HD static void run(const uint8_t *f, int t, int idx, uint32_t w[NA]) {
        constexpr int RB = NP * KB; /* bits of a run */
        const int b = RB * idx;
        if constexpr (RB % 32 == 0) {
            constexpr int NV = RB / 32;
            words<NV>(f, t, NV * idx, w);
KVQ_UNROLL
            for (int i = NV; i < NA; i++) {
                const int j = NV * idx + i;
                w[i] = ld32(f + addr(t, j >= N ? j - N : j));
            }
        } else {
            const int j0 = b >> 5, e = b & 31;
            uint32_t x[NA + 1];
KVQ_UNROLL
            for (int i = 0; i <= NA; i++) {
                const int j = j0 + i;
                x[i] = ld32(f + addr(t, j >= N ? j - N : j));
            }
KVQ_UNROLL
            for (int i = 0; i < NA; i++) w[i] = funnel_r(x[i], x[i + 1], e);
        }
    }
};
/* Words a run of NP positions of KB bits reads: its windows end at bit (NP - 1) KB + 12 */
constexpr int tcq_run_words(int NP, int KB) { return ((NP - 1) * KB + 12 + 31) / 32; }

/* K: token r, quarter qq -> DD/8 registers, register reg = positions DD/4 qq + 2 reg (+ 1) */
template <int KB, int DD = 128> struct KTCQ {
    typedef TcqField<DD, KB> F;
    static constexpr int HD = DD, NF = 2, BYTES = 2 + F::R, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, F::R}, OFF[2] = {0, 2};
    static constexpr int NP = DD / 4, NA = tcq_run_words(NP, KB);
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return DD - 1 - (NP * qq + 2 * reg + h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *, const AttnParams &, int r, int qq, int,
                              uint32_t kb[DD / 8]) {
        uint32_t w[NA];
        F::template run<NP, NA>(t + 16 * 2, r, qq, w);
KVQ_UNROLL
        for (int reg = 0; reg < DD / 8; reg++)
            kb[reg] = tcq_pair(tcq_state(w, 2 * reg * KB), tcq_state(w, (2 * reg + 1) * KB));
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int, int t0, const AttnParams &) {
        const float2 s = scale_pair(t, t0);
        return make_float2(s.x * TCQ_INV_SD, s.y * TCQ_INV_SD);
    }
    KVQ_HD static float kscale1(const uint8_t *t, int, int tok, const AttnParams &) {
        return scale_one(t, tok) * TCQ_INV_SD;
    }
};

/* V: lane (g, qq) -> positions DD/8 g + 2 mt + rh of its tokens k0..k3 (vtok); one register holds one
 * position of two tokens (a0 = (row g; k0, k1), a1 = (row g + 8), a2, a3: k2, k3) */
template <int KB, int DD = 128> struct VTCQ {
    typedef TcqField<DD, KB> F;
    static constexpr int HD = DD, NF = 2, BYTES = 2 + F::R, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, F::R}, OFF[2] = {0, 2};
    static constexpr int NP = DD / 8, NA = tcq_run_words(NP, KB);
    KVQ_HD static int vcoord(int g, int mt, int rh) { return DD - 1 - (NP * g + 2 * mt + rh); }
    struct Regs {
        uint32_t w[4][NA]; /* token k's run, aligned */
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) F::template run<NP, NA>(t + 16 * 2, vtok(qq, k), g, r.w[k]);
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *, const AttnParams &, int, int mt, uint32_t a[4]) {
        const int o0 = 2 * mt * KB, o1 = o0 + KB;
        a[0] = tcq_pair(tcq_state(r.w[0], o0), tcq_state(r.w[1], o0));
        a[1] = tcq_pair(tcq_state(r.w[0], o1), tcq_state(r.w[1], o1));
        a[2] = tcq_pair(tcq_state(r.w[2], o0), tcq_state(r.w[3], o0));
        a[3] = tcq_pair(tcq_state(r.w[2], o1), tcq_state(r.w[3], o1));
    }
    KVQ_HD static float2 vscale(const uint8_t *t, int, int t0) {
        const float2 s = scale_pair(t, t0);
        return make_float2(s.x * TCQ_INV_SD, s.y * TCQ_INV_SD);
    }
    KVQ_HD static float vscale1(const uint8_t *t, int, int tok) { return scale_one(t, tok) * TCQ_INV_SD; }
};

} /* namespace kvqa */

#endif
