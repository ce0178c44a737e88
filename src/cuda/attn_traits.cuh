/*
 * Kernel traits: the K and V formats (record fields, stages, decoders,
 * scales, coordinate maps; checked against the codec's layouts by
 * test_cuda) and the tile shapes of the two kernels (warps per block,
 * pipeline stages, shared memory).
 */
#ifndef KVQ_ATTN_TRAITS_CUH
#define KVQ_ATTN_TRAITS_CUH

#include "attn_decode.cuh"

namespace kvqa {

/* ---- K formats ---------------------------------------------------------------- */
/* Each: record fields (NF, SIZE, OFF, BYTES); NSTAGE stages, each a decoded
 * set of D values scored on query set qset(stage) (offset qoff(set) in the
 * prepared query; coordinate map kcoord(set, ...)) and multiplied by
 * kscale(stage) per token after the MMA. */
/* The formats of F16, Q8 and tq-mse:2/4 take the head dim DD (64, 128, 256; issue 17); the
 * others are d = 128 only. HD: the format's head dim (the kernels' D). */
template <int DD> struct KF16T {
    static constexpr int HD = DD, NF = 1, BYTES = 2 * DD, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[1] = {2 * DD}, OFF[1] = {0};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_f16(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *, const AttnParams &, int r, int qq, int,
                              uint32_t kb[DD / 8]) {
        kdec_f16<DD>(t, r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *, int, int, const AttnParams &) { return make_float2(1.f, 1.f); }
    KVQ_HD static float kscale1(const uint8_t *, int, int, const AttnParams &) { return 1.f; }
};
template <int DD> struct KQ8T {
    static constexpr int HD = DD, NF = 2, BYTES = 2 * (DD / 32) + DD, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2 * (DD / 32), DD}, OFF[2] = {0, 2 * (DD / 32)};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_q8<DD>(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *, const AttnParams &, int r, int qq, int,
                              uint32_t kb[DD / 8]) {
        kdec_q8<DD>(t, t + 16 * (2 * (DD / 32)), r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *, int, int, const AttnParams &) { return make_float2(1.f, 1.f); }
    KVQ_HD static float kscale1(const uint8_t *, int, int, const AttnParams &) { return 1.f; }
};
/* tq-mse:W */
template <int W, int DD = 128> struct KTQ {
    static constexpr int HD = DD, NF = 2, BYTES = 2 + DD * W / 8, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, DD * W / 8}, OFF[2] = {0, 2};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_w<W, DD>(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &p, int r, int qq, int lane4,
                              uint32_t kb[DD / 8]) {
        kdec_w<W, DD>(t + 16 * 2, lut + p.klut[0], r, qq, lane4, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int, int t0, const AttnParams &) { return scale_pair(t, t0); }
    KVQ_HD static float kscale1(const uint8_t *t, int, int tok, const AttnParams &) { return scale_one(t, tok); }
};
/* tq-mse:2 at d = 128 read through the 2-bit byte table (LUT_W2X at offset 0 of shared memory,
 * K and V sharing it; the wide kernel attn_kernel_wide<2>): the fields, maps and scales of KTQ<2>,
 * 8-byte lookups of whole bytes */
struct KTQ2X : KTQ<2> {
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &, int r, int qq, int lane4,
                              uint32_t kb[D / 8]) {
        kdec2x(t + 16 * 2, lut, r, qq, 2u * (uint32_t)lane4, kb);
    }
    /* tokens r and r + 8 at once (the wide kernel): kdec2x's registers of both */
    KVQ_HD static void decode_pair(const uint8_t *t, const uint8_t *lut, int r, int qq, uint32_t lane8, uint32_t kb0[16],
                                   uint32_t kb1[16]) {
        kdec2x_pair(t + 16 * 2, lut, r, qq, lane8, kb0, kb1);
    }
};
/* tq-mse:2 K at d = 128 through the byte table of 16 lanes' copies in the rows' second halves
 * (build_lut2x<16>; the wide 2/4 kernel): lane l reads column l & 15 */
struct KTQ2H : KTQ2X {
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &, int r, int qq, int lane4,
                              uint32_t kb[D / 8]) {
        kdec2x(t + 16 * 2, lut + 128, r, qq, 2u * ((uint32_t)lane4 & 60u), kb);
    }
    KVQ_HD static void decode_pair(const uint8_t *t, const uint8_t *lut, int r, int qq, uint32_t lane8, uint32_t kb0[16],
                                   uint32_t kb1[16]) {
        kdec2x_pair(t + 16 * 2, lut + 128, r, qq, lane8 & 0x78u, kb0, kb1);
    }
};
/* rvq:W: two tq stages on the same rotated query */
template <int W> struct KRVQ {
    static constexpr int HD = D, NF = 4, BYTES = 4 + 2 * (D * W / 8), NQS = 1, NSTAGE = 2;
    static constexpr int SIZE[4] = {2, 2, D * W / 8, D * W / 8}, OFF[4] = {0, 2, 4, 4 + D * W / 8};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_w<W>(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int st, const uint8_t *lut, const AttnParams &p, int r, int qq,
                              int lane4, uint32_t kb[16]) {
        kdec_w<W>(t + 16 * (4 + st * (D * W / 8)), lut + p.klut[st], r, qq, lane4, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int st, int t0, const AttnParams &) {
        return scale_pair(t + 16 * 2 * st, t0);
    }
    KVQ_HD static float kscale1(const uint8_t *t, int st, int tok, const AttnParams &) {
        return scale_one(t + 16 * 2 * st, tok);
    }
};
/* tq-prod: tq-mse:W stage on q~ + QJL signs of the residual on S q~ */
template <int W> struct KTP {
    static constexpr int HD = D, NF = 4, BYTES = 4 + D * W / 8 + D / 8, NQS = 2, NSTAGE = 2;
    static constexpr int SIZE[4] = {2, D * W / 8, 2, D / 8}, OFF[4] = {0, 2, 2 + D * W / 8, 4 + D * W / 8};
    KVQ_HD static constexpr int qoff(int set) { return set ? D : 0; }
    KVQ_HD static constexpr int qset(int st) { return st; }
    KVQ_HD static int kcoord(int set, int qq, int reg, int h) {
        return set ? kcoord_sign(qq, reg, h) : kcoord_w<W>(qq, reg, h);
    }
    KVQ_HD static void decode(const uint8_t *t, int st, const uint8_t *lut, const AttnParams &p, int r, int qq,
                              int lane4, uint32_t kb[16]) {
        if (st == 0) kdec_w<W>(t + 16 * 2, lut + p.klut[0], r, qq, lane4, kb);
        else kdec1(t + 16 * (4 + D * W / 8), lut + p.klut[1], r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int st, int t0, const AttnParams &p) {
        if (st == 0) return scale_pair(t, t0);
        const float2 rn = scale_pair(t + 16 * (2 + D * W / 8), t0);
        return make_float2(p.kconst * rn.x, p.kconst * rn.y);
    }
    KVQ_HD static float kscale1(const uint8_t *t, int st, int tok, const AttnParams &p) {
        if (st == 0) return scale_one(t, tok);
        return p.kconst * scale_one(t + 16 * (2 + D * W / 8), tok);
    }
};
/* qjl: signs of S k on S q */
struct KQJL {
    static constexpr int HD = D, NF = 2, BYTES = 2 + D / 8, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, D / 8}, OFF[2] = {0, 2};
    KVQ_HD static constexpr int qoff(int) { return D; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_sign(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &p, int r, int qq, int,
                              uint32_t kb[16]) {
        kdec1(t + 16 * 2, lut + p.klut[0], r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int, int t0, const AttnParams &p) {
        const float2 n = scale_pair(t, t0);
        return make_float2(p.kconst * n.x, p.kconst * n.y);
    }
    KVQ_HD static float kscale1(const uint8_t *t, int, int tok, const AttnParams &p) {
        return p.kconst * scale_one(t, tok);
    }
};

/* ---- V formats ---------------------------------------------------------------- */
/* Each: NSTAGE stages; load() reads the lane's codes once per tile,
 * decode() gives the A fragment of m-tile mt of a stage, vscale() the
 * per-token scale folded into P for that stage. */
/* f16: lane (g, qq) takes the 16-byte chunks g + 8j (j < DD/64) of its tokens */
template <int DD> struct VF16T {
    static constexpr int HD = DD, NF = 1, BYTES = 2 * DD, NSTAGE = 1;
    static constexpr int SIZE[1] = {2 * DD}, OFF[1] = {0};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return 8 * (g + 8 * (mt >> 2)) + 2 * (mt & 3) + rh; }
    struct Regs {
        uint4 x[4][DD / 64];
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int tk = vtok(qq, k);
KVQ_UNROLL
            for (int j = 0; j < DD / 64; j++) r.x[k][j] = ld128(t + faddr<2 * DD>(tk, 16 * (g + 8 * j)));
        }
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *, const AttnParams &, int, int mt, uint32_t a[4]) {
        uint32_t u[4];
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const uint4 &v = r.x[k][mt >> 2];
            const int wi = mt & 3;
            u[k] = wi == 0 ? v.x : wi == 1 ? v.y : wi == 2 ? v.z : v.w;
        }
        vpack(a, u[0], u[1], u[2], u[3]);
    }
    KVQ_HD static float2 vscale(const uint8_t *, int, int) { return make_float2(1.f, 1.f); }
    KVQ_HD static float vscale1(const uint8_t *, int, int) { return 1.f; }
};
/* q8: lane (g, qq) takes bytes [g DD/8, (g + 1) DD/8) of its tokens (one scale block) */
template <int DD> struct VQ8T {
    static constexpr int HD = DD, NF = 2, BYTES = 2 * (DD / 32) + DD, NSTAGE = 1;
    static constexpr int SIZE[2] = {2 * (DD / 32), DD}, OFF[2] = {0, 2 * (DD / 32)};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return (DD / 8) * g + 2 * mt + rh; }
    struct Regs {
        uint32_t x[4][DD / 32];
        __half2 s[4];
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool val[2][2], Regs &r) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int tk = vtok(qq, k);
            ldf<DD, DD / 8>(t + 16 * (2 * (DD / 32)), tk, (DD / 8) * g, r.x[k]);
            const uint16_t sb = *(const uint16_t *)(t + faddr<2 * (DD / 32)>(tk, 2 * ((DD / 8) * g / 32)));
            r.s[k] = bits2h(val[k >> 1][k & 1] ? (uint32_t)sb * 0x10001u : 0u);
        }
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *, const AttnParams &, int, int mt, uint32_t a[4]) {
        uint32_t u[4];
KVQ_UNROLL
        for (int k = 0; k < 4; k++) u[k] = h2bits(__hmul2(i8pair(r.x[k][mt >> 1], mt & 1), r.s[k]));
        vpack(a, u[0], u[1], u[2], u[3]);
    }
    KVQ_HD static float2 vscale(const uint8_t *, int, int) { return make_float2(1.f, 1.f); }
    KVQ_HD static float vscale1(const uint8_t *, int, int) { return 1.f; }
};
template <int W, int DD = 128> struct VTQ {
    static constexpr int HD = DD, NF = 2, BYTES = 2 + DD * W / 8, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, DD * W / 8}, OFF[2] = {0, 2};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return vcoord_w<W, DD>(g, mt, rh); }
    struct Regs {
        VStage<W, DD> st;
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) { r.st.load(t + 16 * 2, g, qq); }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *lut, const AttnParams &p, int lane4, int mt,
                              uint32_t a[4]) {
        r.st.decode(lut + p.vlut[0], lane4, mt, a);
    }
    KVQ_HD static float2 vscale(const uint8_t *t, int, int t0) { return scale_pair(t, t0); }
    KVQ_HD static float vscale1(const uint8_t *t, int, int tok) { return scale_one(t, tok); }
};
/* tq-mse:2 V at d = 128 through the byte table (KTQ2X) */
struct VTQ2X : VTQ<2> {
    KVQ_HD static int vcoord(int g, int mt, int rh) { return vcoord2x(g, mt, rh); }
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
        r.st.load2x(t + 16 * 2, vword2_off(g, qq));
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *lut, const AttnParams &, int lane4, int mt,
                              uint32_t a[4]) {
        r.st.decode2x(lut, 2u * (uint32_t)lane4, mt, a);
    }
};
/* tq-mse:2 V at d = 128 through the byte table of 16 lanes' copies in the rows' second halves
 * (build_lut2x<16>; the wide 4/2 kernel): lane l reads column l & 15 */
struct VTQ2H : VTQ2X {
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *lut, const AttnParams &, int lane4, int mt,
                              uint32_t a[4]) {
        r.st.decode2x(lut + 128, 2u * ((uint32_t)lane4 & 60u), mt, a);
    }
};
template <int W> struct VRVQ {
    static constexpr int HD = D, NF = 4, BYTES = 4 + 2 * (D * W / 8), NSTAGE = 2;
    static constexpr int SIZE[4] = {2, 2, D * W / 8, D * W / 8}, OFF[4] = {0, 2, 4, 4 + D * W / 8};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return vcoord_w<W>(g, mt, rh); }
    struct Regs {
        VStage<W> st[2];
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
        r.st[0].load(t + 16 * 4, g, qq);
        r.st[1].load(t + 16 * (4 + D * W / 8), g, qq);
    }
    KVQ_HD static void decode(const Regs &r, int stg, const uint8_t *lut, const AttnParams &p, int lane4, int mt,
                              uint32_t a[4]) {
        if (stg == 0) r.st[0].decode(lut + p.vlut[0], lane4, mt, a);
        else r.st[1].decode(lut + p.vlut[1], lane4, mt, a);
    }
    KVQ_HD static float2 vscale(const uint8_t *t, int stg, int t0) { return scale_pair(t + 16 * 2 * stg, t0); }
    KVQ_HD static float vscale1(const uint8_t *t, int stg, int tok) { return scale_one(t + 16 * 2 * stg, tok); }
};

using KF16 = KF16T<128>;
using KQ8 = KQ8T<128>;
using VF16 = VF16T<128>;
using VQ8 = VQ8T<128>;

/* ---- tile shapes ------------------------------------------------------------ */
/* The classic kernel for a (K, V) pair: 16-token tiles of TILE bytes, NW warps, STAGES deep
 * (each warp its own stages); the block merge reuses the stage region. */
template <class KF, class VF> struct Traits {
    static_assert(KF::HD == VF::HD, "K and V of one head dim");
    static constexpr int D = KF::HD;
    static constexpr int TILE = 16 * (KF::BYTES + VF::BYTES);
    static constexpr int NW = TILE <= 2560 ? 8 : 4;
    static constexpr int STAGES = NW * 4 * TILE <= 80 * 1024 ? 4 : 3;
    static constexpr int STAGE_BYTES = NW * STAGES * TILE;
    static constexpr int MERGE_BYTES = (2 * NW * QPB + NW * QPB * D) * 4;
    static constexpr int SMEM = STAGE_BYTES > MERGE_BYTES ? STAGE_BYTES : MERGE_BYTES; /* after the LUTs */
};

/* The wide-table kernels (attn_kernel_wide.cuh; tq-mse:KW K and tq-mse:VW V: 4/4, 2/2, 4/2, 2/4): the
 * 64 KiB table region of 256-byte rows (attn_lut.cuh), then per warp and stage OUT bytes: K scales
 * (at 0), K codes (at KC), V scales (at VS), and but for 4/4 the V codes (at VC; 2/2: the classic
 * kernel's tile of tq-mse:2/2). 4/4: the table rows' second halves hold the stages' V codes (stage
 * slot (warp, stage): 8 half rows; HOLES). Up to TPW tiles per warp of a chunk (32 per page register
 * of a lane). */
template <int KW, int VW> struct WTraits {
    static constexpr bool HOLES = KW == 4 && VW == 4;
    static constexpr int NW = 8, TPW = 64;
    static constexpr int LUT = KW == 3 ? LUT3_BYTES : WLUT; /* the table region (3/3: attn_tq3.cuh's 16 KiB) */
    static constexpr int KC = 32, VS = 32 + 16 * (D * KW / 8), VC = VS + 32;
    static constexpr int OUT = HOLES ? VS + 32 : VC + 16 * (D * VW / 8);
    static constexpr int STAGES = KW == VW ? 4 : 3; /* 4/2: 4 stages would not fit 2 blocks an SM */
    static constexpr int SMEM = LUT + NW * STAGES * OUT;
};
/* The generic kernel (attn_kernel_gen.cuh): tiles of GT tokens, GNT threads; its shared memory
 * for head dim d and K rows of klen values (queries, rows, probabilities, rescales, codebooks). */
constexpr int GT = 32, GNT = 128, GNW = GNT / 32;
static_assert(2 * GNW == QPB, "a warp of the generic kernel takes two query heads of the group");
KVQ_HD int gen_smem_floats(int d, int klen) {
    const int buf = GT * (klen + 1 > d ? klen + 1 : d);
    return QPB * klen + buf + QPB * GT + QPB + 4 * 256;
}
static_assert(WTraits<4, 4>::NW * WTraits<4, 4>::STAGES * 8 <= 256, "V code slots: 8 half rows each");
static_assert(WTraits<4, 4>::TPW == 64 && WTraits<2, 2>::TPW == 64 && WTraits<4, 2>::TPW == 64 && WTraits<2, 4>::TPW == 64,
              "two page registers per lane");
static_assert(Traits<KTQ<4>, VTQ<4>>::MERGE_BYTES <= WTraits<4, 4>::NW * WTraits<4, 4>::STAGES * WTraits<4, 4>::OUT &&
                  Traits<KTQ<2>, VTQ<2>>::MERGE_BYTES <= WTraits<2, 2>::NW * WTraits<2, 2>::STAGES * WTraits<2, 2>::OUT &&
                  Traits<KTQ<4>, VTQ<2>>::MERGE_BYTES <= WTraits<4, 2>::NW * WTraits<4, 2>::STAGES * WTraits<4, 2>::OUT &&
                  Traits<KTQ<2>, VTQ<4>>::MERGE_BYTES <= WTraits<2, 4>::NW * WTraits<2, 4>::STAGES * WTraits<2, 4>::OUT,
              "the wide kernels' block merge fits their stage region");
static_assert(WTraits<2, 2>::OUT == Traits<KTQ2X, VTQ2X>::TILE && WTraits<2, 2>::VS == 16 * KTQ2X::BYTES,
              "2/2: the classic kernel's tile of tq-mse:2/2");
static_assert(2 * (WTraits<4, 2>::SMEM + 1024) <= 228 * 1024 && 2 * (WTraits<2, 4>::SMEM + 1024) <= 228 * 1024,
              "4/2, 2/4: 2 blocks an SM (H100 / H200: 228 KB)");

} /* namespace kvqa */

#endif
