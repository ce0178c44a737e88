/*
 * Fused split-K decode attention on compressed, paged KV (docs/CUDA.md).
 *
 * Work item = (sequence, KV head, group of <= 8 query heads, chunk of the
 * context); one block of NW warps per item. Each warp walks tiles of 16
 * tokens of its item (warp w takes tiles w, w + NW, ...), staged into shared
 * memory by cp.async (STAGES deep, private to the warp), and for each tile:
 *   scores  S (16 tokens x 8 queries) = K x Q~^T, the tokens as the rows of
 *           m16n8k16 tensor-core MMAs (K the A operand, the f16 query in
 *           registers the B operand: one MMA per 16 coordinates); K codes
 *           are turned into f16 by table lookups (4-bit: a byte -> two
 *           centroids, table replicated per lane, conflict-free; 2- and
 *           1-bit: a nibble table), record scales applied after the MMA;
 *   softmax online (running max / sum per query, base 2: log2(e) is folded
 *           into the query; the warp max is formed only when a vote finds a
 *           score above its running max), masked tokens -inf;
 *   values  O^T (16 coordinates x 8 queries) += V^T x P^T: the probabilities
 *           stay in registers (P packed to f16, V's record scale folded in,
 *           transposed to the B fragment by movmatrix).
 * The rotated query and O stay in the method's rotated domain; the merge
 * kernel (attn.cu) combines the chunks exactly and applies one inverse
 * rotation per head. Coordinates are permuted freely between the lanes
 * (kcoord/vcoord give the map), so every lane reads its codes with one
 * vector load and one lookup per byte or nibble.
 * Shared-memory tiles are XOR-swizzled per field row size so that both the
 * K-side (token x quarter) and V-side (coordinate group x token pair) reads
 * are free of bank conflicts.
 */
#ifndef KVQ_ATTN_CUH
#define KVQ_ATTN_CUH

#include <type_traits>

#include "cuda_internal.cuh"

#ifndef KVQ_ATTN_PDL
#define KVQ_ATTN_PDL 1 /* programmatic dependent launches: prep -> wide-table main pass, -> merge */
#endif
#ifndef KVQ_ATTN_WIDE
#define KVQ_ATTN_WIDE 1 /* the wide-table kernel for tq-mse:4 K and V with one codebook */
#endif

namespace kvqa {

constexpr int D = 128;                  /* head dim of the attention kernels */
constexpr int QPB = 8;                  /* query heads per block */
constexpr int SF = 2 * QPB + QPB * D;   /* floats of a partial state: m[8], l[8], acc[8][D] */
constexpr int LUT4_BYTES = 256 * 32 * 4;

struct LutDesc {
    int off; /* byte offset in the LUT region */
    int w;   /* 4, 2, 1; 0 = signs {-1, +1} */
    const float *c;
};

struct AttnParams {
    int n_seq, H, HQ, G, QG;
    int P, max_pages, W;
    unsigned long long page_bytes, kv_off_v, krun, vrun;
    const uint8_t *pages;
    const int32_t *block_table, *main_len, *win_len;
    const uint8_t *window;
    const float *qprep; /* [n_seq][HQ][qf]: rotated query, then S q~ */
    int qf;
    const float *qraw;  /* [n_seq][HQ][D]: scaled query (window) */
    float *part;        /* partial states, (nchunk + 1) per (seq, head, group) */
    int nchunk, chunk_tiles;
    int nlut;
    LutDesc lut[4];
    int klut[2], vlut[2]; /* LUT offsets of the K / V stages */
    float kconst;         /* QJL sqrt(pi/2)/m */
    int lut_bytes;        /* stage buffers start here */
    int wide;             /* 4-bit K and V sharing one table: the wide-table kernel (attn_kernel_w4) */
    int pdl;              /* the device takes programmatic dependent launches (sm_90+) */
};

/* ---- tile addressing ---------------------------------------------------- */
template <int R> __host__ __device__ __forceinline__ int swz(int t) {
    return R == 32 ? ((t >> 2) & 1) << 1 : R == 64 ? (t & 6) : R == 128 ? (t & 7) : R == 256 ? ((t & 6) ^ ((t & 1) << 2)) : 0;
}
/* Byte offset of byte b (a read never crosses 16 bytes) of token t in a field region of R bytes per token. */
template <int R> __host__ __device__ __forceinline__ int faddr(int t, int b) {
    if (R < 16) return t * R + b;
    const int k = t * (R / 16) + (b >> 4);
    return ((k ^ swz<R>(t)) << 4) | (b & 15);
}

#define KVQ_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define KVQ_UNROLL _Pragma("unroll")
#else
#define KVQ_UNROLL
#endif

KVQ_HD uint32_t ld32(const uint8_t *p) { return *(const uint32_t *)p; }
KVQ_HD uint2 ld64(const uint8_t *p) { return *(const uint2 *)p; }
KVQ_HD uint4 ld128(const uint8_t *p) { return *(const uint4 *)p; }
KVQ_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
    return __byte_perm(a, b, sel);
#else
    const uint64_t x = ((uint64_t)b << 32) | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((x >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}
KVQ_HD uint32_t h2bits(__half2 h) {
    const __half2_raw r = h;
    return (uint32_t)r.x | ((uint32_t)r.y << 16);
}
KVQ_HD __half2 bits2h(uint32_t u) {
    __half2_raw r;
    r.x = (unsigned short)(u & 0xffffu);
    r.y = (unsigned short)(u >> 16);
    return __half2(r);
}
KVQ_HD uint32_t pack2(float lo, float hi) { return h2bits(__floats2half2_rn(lo, hi)); }
KVQ_HD float hlo(uint32_t u) { return __low2float(bits2h(u)); }
KVQ_HD float hhi(uint32_t u) { return __high2float(bits2h(u)); }
/* 2^x by the MUFU (ex2.approx.ftz: results under 2^-126 flush to 0; x <= 0 here) */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* ---- lookups ------------------------------------------------------------------ */
/* byte -> (c[lo nibble], c[hi nibble]) in f16x2; the table is replicated per lane */
KVQ_HD uint32_t lut4(const uint8_t *L, uint32_t byte, int lane4) { return ld32(L + ((byte << 7) | (uint32_t)lane4)); }
/* byte b of w looked up: the shift and mask give byte * 128 directly, OR-ed with the lane's column */
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
/* nibble -> (c[n & 3], c[n >> 2]) */
KVQ_HD uint32_t lut2(const uint8_t *L, uint32_t nib) { return ld32(L + (nib << 2)); }
/* nibble -> (c[b0], c[b1]), (c[b2], c[b3]) */
KVQ_HD uint2 lut1(const uint8_t *L, uint32_t nib) { return ld64(L + (nib << 3)); }

/* ---- K-side decoders: token r, quarter qq -> D/8 f16x2 registers ------------ */
/* 4-bit strided (16 bytes of the D/2): byte j -> (coord j, j + 64) */
KVQ_HD void kdec4(const uint8_t *f, const uint8_t *L, int r, int qq, int lane4, uint32_t kb[16]) {
    const uint4 v = ld128(f + faddr<D / 2>(r, qq * 16));
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
KVQ_UNROLL
    for (int i = 0; i < 4; i++) {
        kb[4 * i] = lut4w<0>(L, w[i], lane4);
        kb[4 * i + 1] = lut4w<1>(L, w[i], lane4);
        kb[4 * i + 2] = lut4w<2>(L, w[i], lane4);
        kb[4 * i + 3] = lut4w<3>(L, w[i], lane4);
    }
}
KVQ_HD int kcoord4(int qq, int reg, int h) { return 16 * qq + reg + 64 * h; }

/* 2-bit strided (8 bytes of the D/4): low nibble of byte j -> (j, j+32), high -> (j+64, j+96) */
KVQ_HD void kdec2(const uint8_t *f, const uint8_t *L, int r, int qq, uint32_t kb[16]) {
    const uint2 v = ld64(f + faddr<D / 4>(r, qq * 8));
    const uint32_t w[2] = {v.x, v.y};
KVQ_UNROLL
    for (int i = 0; i < 2; i++)
KVQ_UNROLL
        for (int b = 0; b < 4; b++) {
            const uint32_t byte = (w[i] >> (8 * b)) & 0xffu;
            kb[2 * (4 * i + b)] = lut2(L, byte & 15u);
            kb[2 * (4 * i + b) + 1] = lut2(L, byte >> 4);
        }
}
KVQ_HD int kcoord2(int qq, int reg, int h) { return 8 * qq + reg / 2 + 32 * (2 * (reg % 2) + h); }

/* 1-bit (4 bytes of the D/8): nibble -> 4 coordinates (strided: j + 16k; signs: 8j + k) */
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

/* f16 values (chunks qq + 4i of the 2D bytes) */
KVQ_HD void kdec_f16(const uint8_t *f, int r, int qq, uint32_t kb[16]) {
KVQ_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint4 v = ld128(f + faddr<2 * D>(r, (qq + 4 * i) * 16));
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
/* q8: quarter qq = block qq (D = 128: 4 blocks of 32), scale folded in */
KVQ_HD void kdec_q8(const uint8_t *fs, const uint8_t *fv, int r, int qq, uint32_t kb[16]) {
    const uint16_t sbits = *(const uint16_t *)(fs + faddr<2 * (D / 32)>(r, 2 * qq));
    const __half2 s2 = bits2h((uint32_t)sbits * 0x10001u);
    const uint4 v0 = ld128(fv + faddr<D>(r, qq * 32)), v1 = ld128(fv + faddr<D>(r, qq * 32 + 16));
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
KVQ_UNROLL
    for (int i = 0; i < 8; i++)
KVQ_UNROLL
        for (int p = 0; p < 2; p++) kb[2 * i + p] = h2bits(__hmul2(i8pair(w[i], p), s2));
}
KVQ_HD int kcoord_q8(int qq, int reg, int h) { return 32 * qq + 2 * reg + h; }

/* Scores with the tokens as the MMA's rows: S (16 tokens x 8 queries) = K x Q~^T.
 * The A fragment of K takes the two tokens' decoded B-layout registers as they are
 * (a0/a2: token g, a1/a3: token g + 8); Q~ is the B operand (same registers as the
 * A fragment it was). Even and odd k-steps in two accumulators (shorter chains).
 * acc: c0 = (token g, query 2qq), c1 = (g, 2qq + 1), c2 = (g + 8, 2qq), c3 = (g + 8, 2qq + 1). */
__device__ __forceinline__ void kmma_t(float acc[4], const uint32_t qa[D / 16][2], const uint32_t kb0[16],
                                       const uint32_t kb1[16]) {
    float e[4] = {0.f, 0.f, 0.f, 0.f}, o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const uint32_t a[4] = {kb0[2 * ks], kb1[2 * ks], kb0[2 * ks + 1], kb1[2 * ks + 1]};
        kvq_mma16816((ks & 1) ? o : e, a, qa[ks][0], qa[ks][1]);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j] = e[j] + o[j];
}

/* Scale of token t of a 2-byte scale field (R = 2). */
KVQ_HD float scale_one(const uint8_t *f, int t) { return hlo((uint32_t) * (const uint16_t *)(f + 2 * t)); }

/* Scales of tokens t, t+1 (t even) of a 2-byte scale field (R = 2). */
KVQ_HD float2 scale_pair(const uint8_t *f, int t) {
    const uint32_t u = ld32(f + 2 * t);
    return make_float2(hlo(u), hhi(u));
}

template <int W> KVQ_HD void kdec_w(const uint8_t *f, const uint8_t *L, int r, int qq, int lane4, uint32_t kb[16]) {
    if (W == 4) kdec4(f, L, r, qq, lane4, kb);
    else if (W == 2) kdec2(f, L, r, qq, kb);
    else kdec1(f, L, r, qq, kb);
}
template <int W> KVQ_HD int kcoord_w(int qq, int reg, int h) {
    return W == 4 ? kcoord4(qq, reg, h) : W == 2 ? kcoord2(qq, reg, h) : kcoord1(qq, reg, h);
}

/* ---- K formats ---------------------------------------------------------------- */
/* Each: record fields (NF, SIZE, OFF, BYTES); NSTAGE stages, each a decoded
 * set of D values scored on query set qset(stage) (offset qoff(set) in the
 * prepared query; coordinate map kcoord(set, ...)) and multiplied by
 * kscale(stage) per token after the MMA. */
struct KF16 {
    static constexpr int NF = 1, BYTES = 2 * D, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[1] = {2 * D}, OFF[1] = {0};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_f16(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *, const AttnParams &, int r, int qq, int,
                              uint32_t kb[16]) {
        kdec_f16(t, r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *, int, int, const AttnParams &) { return make_float2(1.f, 1.f); }
    KVQ_HD static float kscale1(const uint8_t *, int, int, const AttnParams &) { return 1.f; }
};
struct KQ8 {
    static constexpr int NF = 2, BYTES = 2 * (D / 32) + D, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2 * (D / 32), D}, OFF[2] = {0, 2 * (D / 32)};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_q8(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *, const AttnParams &, int r, int qq, int,
                              uint32_t kb[16]) {
        kdec_q8(t, t + 16 * (2 * (D / 32)), r, qq, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *, int, int, const AttnParams &) { return make_float2(1.f, 1.f); }
    KVQ_HD static float kscale1(const uint8_t *, int, int, const AttnParams &) { return 1.f; }
};
/* tq-mse:W */
template <int W> struct KTQ {
    static constexpr int NF = 2, BYTES = 2 + D * W / 8, NQS = 1, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, D * W / 8}, OFF[2] = {0, 2};
    KVQ_HD static constexpr int qoff(int) { return 0; }
    KVQ_HD static constexpr int qset(int) { return 0; }
    KVQ_HD static int kcoord(int, int qq, int reg, int h) { return kcoord_w<W>(qq, reg, h); }
    KVQ_HD static void decode(const uint8_t *t, int, const uint8_t *lut, const AttnParams &p, int r, int qq, int lane4,
                              uint32_t kb[16]) {
        kdec_w<W>(t + 16 * 2, lut + p.klut[0], r, qq, lane4, kb);
    }
    KVQ_HD static float2 kscale(const uint8_t *t, int, int t0, const AttnParams &) { return scale_pair(t, t0); }
    KVQ_HD static float kscale1(const uint8_t *t, int, int tok, const AttnParams &) { return scale_one(t, tok); }
};
/* rvq:W: two tq stages on the same rotated query */
template <int W> struct KRVQ {
    static constexpr int NF = 4, BYTES = 4 + 2 * (D * W / 8), NQS = 1, NSTAGE = 2;
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
    static constexpr int NF = 4, BYTES = 4 + D * W / 8 + D / 8, NQS = 2, NSTAGE = 2;
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
    static constexpr int NF = 2, BYTES = 2 + D / 8, NQS = 1, NSTAGE = 1;
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

/* One LUT stage of W bits: the lane's code bytes of its 4 tokens. */
template <int W> struct VStage {
    uint32_t x[4][W == 4 ? 2 : 1];
    KVQ_HD void load(const uint8_t *f, int g, int qq) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int t = vtok(qq, k);
            if (W == 4) {
                const uint2 v = ld64(f + faddr<D / 2>(t, 8 * g));
                x[k][0] = v.x;
                x[k][W == 4 ? 1 : 0] = v.y;
            } else if (W == 2) {
                x[k][0] = ld32(f + faddr<D / 4>(t, 4 * g));
            } else {
                x[k][0] = *(const uint16_t *)(f + faddr<D / 8>(t, 2 * g));
            }
        }
        if (W == 2) {
            /* 2-bit: likewise, a nibble holds one coordinate of both tokens (code of k0 in its
             * low two bits): its lookup (c[lo], c[hi]) is the A register. x[2p]: even fields
             * (coordinate of mt's low half), x[2p + 1]: odd fields, nibble mt. */
KVQ_UNROLL
            for (int pr = 0; pr < 2; pr++) {
                const uint32_t x0 = x[2 * pr][0], x1 = x[2 * pr + 1][0];
                x[2 * pr][0] = (x0 & 0x33333333u) | ((x1 << 2) & 0xccccccccu);
                x[2 * pr + 1][0] = ((x0 >> 2) & 0x33333333u) | (x1 & 0xccccccccu);
            }
        }
        if (W == 4) {
            /* 4-bit: the nibbles of a token pair (k0, k1 | k2, k3) interleaved, so that a byte
             * holds one coordinate of both tokens: its lookup (c[lo], c[hi]) is the A register
             * as it is (no byte permutes to pair the tokens). x[2p][j]: low nibbles (coordinate
             * 8g + 4j + b), x[2p + 1][j]: high nibbles (+ 64), byte b of word j. */
KVQ_UNROLL
            for (int pr = 0; pr < 2; pr++)
KVQ_UNROLL
                for (int j = 0; j < (W == 4 ? 2 : 1); j++) {
                    const uint32_t x0 = x[2 * pr][j], x1 = x[2 * pr + 1][j];
                    x[2 * pr][j] = (x0 & 0x0f0f0f0fu) | ((x1 << 4) & 0xf0f0f0f0u);
                    x[2 * pr + 1][j] = ((x0 >> 4) & 0x0f0f0f0fu) | (x1 & 0xf0f0f0f0u);
                }
        }
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
            for (int i = 0; i < 4; i++) a[i] = lut2(L, (x[i][0] >> (4 * mt)) & 15u);
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
};
template <int W> KVQ_HD int vcoord_w(int g, int mt, int rh) {
    return W == 4 ? 8 * g + mt + 64 * rh
         : W == 2 ? 4 * g + mt / 2 + 32 * (2 * (mt % 2) + rh)
                  : (2 * g + mt / 4) + (D / 8) * (4 * ((mt / 2) % 2) + 2 * (mt % 2) + rh);
}

/* V formats: NSTAGE stages; load() reads the lane's codes once per tile,
 * decode() gives the A fragment of m-tile mt of a stage, vscale() the
 * per-token scale folded into P for that stage. */
struct VF16 {
    static constexpr int NF = 1, BYTES = 2 * D, NSTAGE = 1;
    static constexpr int SIZE[1] = {2 * D}, OFF[1] = {0};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return (mt < 4 ? 8 * g + 2 * mt : 64 + 8 * g + 2 * (mt - 4)) + rh; }
    struct Regs {
        uint4 x[4][2];
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int tk = vtok(qq, k);
            r.x[k][0] = ld128(t + faddr<2 * D>(tk, 16 * g));
            r.x[k][1] = ld128(t + faddr<2 * D>(tk, 16 * (g + 8)));
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
struct VQ8 {
    static constexpr int NF = 2, BYTES = 2 * (D / 32) + D, NSTAGE = 1;
    static constexpr int SIZE[2] = {2 * (D / 32), D}, OFF[2] = {0, 2 * (D / 32)};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return 16 * g + 2 * mt + rh; }
    struct Regs {
        uint4 x[4];
        __half2 s[4];
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool val[2][2], Regs &r) {
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int tk = vtok(qq, k);
            r.x[k] = ld128(t + 16 * (2 * (D / 32)) + faddr<D>(tk, 16 * g));
            const uint16_t sb = *(const uint16_t *)(t + faddr<2 * (D / 32)>(tk, 2 * (g >> 1)));
            r.s[k] = bits2h(val[k >> 1][k & 1] ? (uint32_t)sb * 0x10001u : 0u);
        }
    }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *, const AttnParams &, int, int mt, uint32_t a[4]) {
        uint32_t u[4];
KVQ_UNROLL
        for (int k = 0; k < 4; k++) {
            const int wi = mt >> 1;
            const uint32_t w = wi == 0 ? r.x[k].x : wi == 1 ? r.x[k].y : wi == 2 ? r.x[k].z : r.x[k].w;
            u[k] = h2bits(__hmul2(i8pair(w, mt & 1), r.s[k]));
        }
        vpack(a, u[0], u[1], u[2], u[3]);
    }
    KVQ_HD static float2 vscale(const uint8_t *, int, int) { return make_float2(1.f, 1.f); }
    KVQ_HD static float vscale1(const uint8_t *, int, int) { return 1.f; }
};
template <int W> struct VTQ {
    static constexpr int NF = 2, BYTES = 2 + D * W / 8, NSTAGE = 1;
    static constexpr int SIZE[2] = {2, D * W / 8}, OFF[2] = {0, 2};
    KVQ_HD static int vcoord(int g, int mt, int rh) { return vcoord_w<W>(g, mt, rh); }
    struct Regs {
        VStage<W> st;
    };
    KVQ_HD static void load(const uint8_t *t, int g, int qq, const bool (*)[2], Regs &r) { r.st.load(t + 16 * 2, g, qq); }
    KVQ_HD static void decode(const Regs &r, int, const uint8_t *lut, const AttnParams &p, int lane4, int mt,
                              uint32_t a[4]) {
        r.st.decode(lut + p.vlut[0], lane4, mt, a);
    }
    KVQ_HD static float2 vscale(const uint8_t *t, int, int t0) { return scale_pair(t, t0); }
    KVQ_HD static float vscale1(const uint8_t *t, int, int tok) { return scale_one(t, tok); }
};
template <int W> struct VRVQ {
    static constexpr int NF = 4, BYTES = 4 + 2 * (D * W / 8), NSTAGE = 2;
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

/* ---- LUT construction ------------------------------------------------------ */
__device__ __forceinline__ void build_luts(uint8_t *lut, const AttnParams &p) {
    for (int i = 0; i < p.nlut; i++) {
        const LutDesc &L = p.lut[i];
        uint32_t *dst = (uint32_t *)(lut + L.off);
        if (L.w == 4) {
            /* 16-byte stores: 4 lanes' copies of an entry at once */
            for (int e = threadIdx.x; e < 256 * 8; e += blockDim.x) {
                const int byte = e >> 3;
                const uint32_t v = pack2(L.c[byte & 15], L.c[byte >> 4]);
                ((uint4 *)dst)[e] = make_uint4(v, v, v, v);
            }
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

/* ---- tile loading ---------------------------------------------------------------- */
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

/* f16 rows of the window ring: token t of the tile at ring slot (pos0 + t) % W */
__device__ __forceinline__ void load_window(uint8_t *dst, const uint8_t *ring, int W, int pos0, int nvalid, int lane) {
#pragma unroll 1
    for (int c = lane; c < 16 * 16; c += 32) {
        const int tok = c >> 4, cc = c & 15;
        const uint8_t *src = ring;
        if (tok < nvalid) src = ring + (size_t)((pos0 + tok) % W) * (2 * D) + 16 * cc;
        kvq_cp_async16(dst + 16 * (c ^ swz<2 * D>(tok)), src, tok < nvalid ? 16 : 0);
    }
}

/* The block's warps merge their (m, l, O) in shared memory (region: the stages, no longer
 * in use) and write one partial state of the chunk (or of the window). */
template <class VF, int NW>
__device__ __forceinline__ void block_merge(uint8_t *region, const AttnParams &p, int s, int h, int qgrp, int chunk,
                                            int GQ, bool win, const float m_run[2], const float l_run[2],
                                            const float O[D / 16][4], int lane, int warp) {
    const int g = lane >> 2, qq = lane & 3;
    float *wm = (float *)region, *wl = wm + NW * QPB, *wo = wl + NW * QPB;
    if (g == 0) {
        wm[warp * QPB + 2 * qq] = m_run[0];
        wm[warp * QPB + 2 * qq + 1] = m_run[1];
        wl[warp * QPB + 2 * qq] = l_run[0];
        wl[warp * QPB + 2 * qq + 1] = l_run[1];
    }
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) wo[(warp * QPB + 2 * qq + (e & 1)) * D + VF::vcoord(g, mt, e >> 1)] = O[mt][e];
    __syncthreads();
    const int slot = (((s * p.H + h) * p.QG + qgrp) * (p.nchunk + 1)) + (win ? p.nchunk : chunk);
    float *out = p.part + (size_t)slot * SF;
    for (int idx = threadIdx.x; idx < GQ * D; idx += NW * 32) {
        const int q = idx / D, c = idx - q * D;
        float M = -INFINITY;
        for (int w = 0; w < NW; w++) M = fmaxf(M, wm[w * QPB + q]);
        float acc = 0.f;
        if (M != -INFINITY)
            for (int w = 0; w < NW; w++) {
                const float mw = wm[w * QPB + q];
                if (mw != -INFINITY) acc += exp2f(mw - M) * wo[(w * QPB + q) * D + c];
            }
        out[2 * QPB + q * D + c] = acc;
        if (c == 0) {
            float L = 0.f;
            if (M != -INFINITY)
                for (int w = 0; w < NW; w++) {
                    const float mw = wm[w * QPB + q];
                    if (mw != -INFINITY) L += exp2f(mw - M) * wl[w * QPB + q];
                }
            out[q] = M;
            out[QPB + q] = L;
        }
    }
}

/* ---- the kernel ------------------------------------------------------------------------ */
template <class KF, class VF, int NW, int STAGES, bool WIN>
__global__ void __launch_bounds__(NW * 32, (NW == 8 && KF::NQS == 1) ? 2 : 1) attn_kernel(const AttnParams p) {
    extern __shared__ uint4 smem_u4[];
    uint8_t *smem = (uint8_t *)smem_u4;
    constexpr int TILE = 16 * (KF::BYTES + VF::BYTES);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qq = lane & 3, lane4 = lane * 4;
    const int s = blockIdx.z, hg = blockIdx.y, h = hg / p.QG, qgrp = hg - h * p.QG, chunk = blockIdx.x;
    const int GQ = min(QPB, p.G - qgrp * QPB);

    int t_begin, t_end, pos_base = 0, end_pos;
    if (WIN) {
        const int wl = p.win_len ? p.win_len[s] : 0;
        pos_base = p.main_len[s];
        t_begin = 0;
        t_end = (wl + 15) >> 4;
        end_pos = wl; /* positions relative to pos_base */
    } else {
        const int len = p.main_len[s];
        t_begin = chunk * p.chunk_tiles;
        t_end = min((len + 15) >> 4, t_begin + p.chunk_tiles);
        end_pos = len;
    }
    if (t_begin >= t_end) return; /* the merge kernel knows which chunks exist */

    uint8_t *lut = smem;
    build_luts(lut, p);

    /* query fragments: row g of the group, this lane's coordinates */
    uint32_t qa[KF::NQS][D / 16][2];
    {
        const int qi = h * p.G + qgrp * QPB + g;
        const bool has = g < GQ;
#pragma unroll
        for (int set = 0; set < KF::NQS; set++) {
            const float *q = WIN ? p.qraw + ((size_t)s * p.HQ + qi) * D
                                 : p.qprep + ((size_t)s * p.HQ + qi) * p.qf + KF::qoff(set);
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int reg = 2 * ks + j;
                    const float lo = has ? q[KF::kcoord(set, qq, reg, 0)] : 0.f;
                    const float hi = has ? q[KF::kcoord(set, qq, reg, 1)] : 0.f;
                    qa[set][ks][j] = pack2(lo, hi);
                }
        }
    }
    __syncthreads(); /* LUTs ready */

    uint8_t *stage = smem + p.lut_bytes + warp * STAGES * TILE;
    const int my_n = t_end - t_begin > warp ? (t_end - t_begin - warp + NW - 1) / NW : 0;

    const uint8_t *ring_k = nullptr, *ring_v = nullptr;
    /* block-table entries of this warp's tiles, one per lane (chunk_tiles <= 32 * NW) */
    /* as the page's byte offset, and the slot of the tile's first token (no division or
     * 64-bit multiply per tile) */
    unsigned long long my_pgoff = 0;
    int my_slot = 0;
    if (!WIN && lane < my_n) {
        const int pos = (t_begin + warp + lane * NW) * 16, pi = pos / p.P;
        my_pgoff = (unsigned long long)p.block_table[(size_t)s * p.max_pages + pi] * p.page_bytes;
        my_slot = pos - pi * p.P;
    }
    const uint8_t *kbase = p.pages + (size_t)h * p.krun, *vbase = p.pages + p.kv_off_v + (size_t)h * p.vrun;
    if (WIN) {
        ring_k = p.window + ((size_t)(s * 2 + 0) * p.H + h) * p.W * (2 * D);
        ring_v = p.window + ((size_t)(s * 2 + 1) * p.H + h) * p.W * (2 * D);
    }
    auto issue = [&](int i) {
        if (i < my_n) {
            uint8_t *dst = stage + (i % STAGES) * TILE;
            const int tile = t_begin + warp + i * NW;
            const int pos0 = tile * 16, nvalid = min(16, end_pos - pos0);
            if (WIN) {
                load_window(dst, ring_k, p.W, pos_base + pos0, nvalid, lane);
                load_window(dst + 16 * KF::BYTES, ring_v, p.W, pos_base + pos0, nvalid, lane);
            } else {
                const unsigned long long pgoff = __shfl_sync(KVQ_FULL_MASK, my_pgoff, i & 31);
                const int slot0 = __shfl_sync(KVQ_FULL_MASK, my_slot, i & 31);
                load_record_fields<KF>(dst, kbase + pgoff, p.P, slot0, nvalid, lane);
                load_record_fields<VF>(dst + 16 * KF::BYTES, vbase + pgoff, p.P, slot0, nvalid, lane);
            }
        }
        kvq_cp_async_commit();
    };

    float O[D / 16][4];
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) O[mt][0] = O[mt][1] = O[mt][2] = O[mt][3] = 0.f;
    /* this lane's queries 2qq, 2qq + 1 (the score accumulator's and O's columns) */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    const bool qv0 = 2 * qq < GQ, qv1 = 2 * qq + 1 < GQ;

#pragma unroll 1
    for (int i = 0; i < STAGES - 1; i++) issue(i);
#pragma unroll 1
    for (int i = 0; i < my_n; i++) {
        kvq_cp_async_wait<STAGES - 2>();
        __syncwarp();
        const uint8_t *tk = stage + (i % STAGES) * TILE, *tv = tk + 16 * KF::BYTES;
        const int tile = t_begin + warp + i * NW;
        const int nvalid = min(16, end_pos - tile * 16);
        const bool tv0 = g < nvalid, tv1 = g + 8 < nvalid; /* this lane's score tokens g, g + 8 */
        /* scores S (16 tokens x 8 queries): the tokens are the MMA rows (8 MMAs per stage) */
        float sc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int stg = 0; stg < KF::NSTAGE; stg++) {
            uint32_t kb0[16], kb1[16];
            KF::decode(tk, stg, lut, p, g, qq, lane4, kb0);
            KF::decode(tk, stg, lut, p, 8 + g, qq, lane4, kb1);
            float a[4];
            kmma_t(a, qa[KF::qset(stg)], kb0, kb1);
            const float g0 = KF::kscale1(tk, stg, g, p), g1 = KF::kscale1(tk, stg, g + 8, p);
            sc[0] += g0 * a[0];
            sc[1] += g0 * a[1];
            sc[2] += g1 * a[2];
            sc[3] += g1 * a[3];
        }
        sc[0] = (tv0 && qv0) ? sc[0] : -INFINITY;
        sc[1] = (tv0 && qv1) ? sc[1] : -INFINITY;
        sc[2] = (tv1 && qv0) ? sc[2] : -INFINITY;
        sc[3] = (tv1 && qv1) ? sc[3] : -INFINITY;
        /* online softmax: the warp-wide max is only formed when some score exceeds its
         * query's running max (a vote; rare after a few tiles), then O and l are rescaled */
        const float t0 = fmaxf(sc[0], sc[2]), t1 = fmaxf(sc[1], sc[3]);
        if (__any_sync(KVQ_FULL_MASK, t0 > m_run[0] || t1 > m_run[1])) {
            float x0 = t0, x1 = t1;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                x0 = fmaxf(x0, __shfl_xor_sync(KVQ_FULL_MASK, x0, o));
                x1 = fmaxf(x1, __shfl_xor_sync(KVQ_FULL_MASK, x1, o));
            }
            const float n0 = fmaxf(m_run[0], x0), n1 = fmaxf(m_run[1], x1);
            const float al0 = n0 == -INFINITY ? 1.f : ex2(m_run[0] - n0);
            const float al1 = n1 == -INFINITY ? 1.f : ex2(m_run[1] - n1);
            l_run[0] *= al0;
            l_run[1] *= al1;
#pragma unroll
            for (int mt = 0; mt < D / 16; mt++) {
                O[mt][0] *= al0;
                O[mt][1] *= al1;
                O[mt][2] *= al0;
                O[mt][3] *= al1;
            }
            m_run[0] = n0;
            m_run[1] = n1;
        }
        float pr[4];
        pr[0] = m_run[0] == -INFINITY ? 0.f : ex2(sc[0] - m_run[0]);
        pr[1] = m_run[1] == -INFINITY ? 0.f : ex2(sc[1] - m_run[1]);
        pr[2] = m_run[0] == -INFINITY ? 0.f : ex2(sc[2] - m_run[0]);
        pr[3] = m_run[1] == -INFINITY ? 0.f : ex2(sc[3] - m_run[1]);
        l_run[0] += pr[0] + pr[2];
        l_run[1] += pr[1] + pr[3];
        {
            /* validity of the V-side tokens 2qq, 2qq + 1 | 8 + 2qq, 9 + 2qq (q8 scales) */
            bool val[2][2];
#pragma unroll
            for (int nt = 0; nt < 2; nt++) {
                val[nt][0] = nt * 8 + 2 * qq < nvalid;
                val[nt][1] = nt * 8 + 2 * qq + 1 < nvalid;
            }
            typename VF::Regs vr;
            VF::load(tv, g, qq, val, vr);
#pragma unroll
            for (int stg = 0; stg < VF::NSTAGE; stg++) {
                /* P (token x query, V's token scale folded in; a masked token's scale may be
                 * garbage: 0) transposed to the B fragment P^T by movmatrix */
                const float w0 = tv0 ? VF::vscale1(tv, stg, g) : 0.f, w1 = tv1 ? VF::vscale1(tv, stg, g + 8) : 0.f;
                const uint32_t b0 = kvq_movmatrix_t(pack2(pr[0] * w0, pr[1] * w0));
                const uint32_t b1 = kvq_movmatrix_t(pack2(pr[2] * w1, pr[3] * w1));
#pragma unroll
                for (int mt = 0; mt < D / 16; mt++) {
                    uint32_t a[4];
                    VF::decode(vr, stg, lut, p, lane4, mt, a);
                    kvq_mma16816(O[mt], a, b0, b1);
                }
            }
        }
        __syncwarp();
        issue(i + STAGES - 1);
    }
    kvq_cp_async_wait<0>();
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        l_run[0] += __shfl_xor_sync(KVQ_FULL_MASK, l_run[0], o);
        l_run[1] += __shfl_xor_sync(KVQ_FULL_MASK, l_run[1], o);
    }
    __syncthreads(); /* every warp is done with its stages: reuse them for the block merge */
    block_merge<VF, NW>(smem + p.lut_bytes, p, s, h, qgrp, chunk, GQ, WIN, m_run, l_run, O, lane, warp);
}

/* ---- tq-mse:4 keys and values sharing one codebook: the wide-table kernel ---------------
 * The 4-bit table has rows of 256 bytes (byte b at b * 256, the lanes' copies in the first
 * 128 bytes), so that a lookup's shared address is one PRMT: (byte << 8) | 4 * lane, the
 * table's base an immediate / uniform register of the LDS (2 instructions per lookup
 * instead of 3). The second halves of the rows (32 KiB) hold the V codes of the stages:
 * stage slot (warp, stage) takes 8 half rows, half row j the tokens 2j, 2j + 1, rotated by
 * 32 * (j % 4) bytes (no bank conflict in the V-side reads: a half warp reads 16 distinct
 * 8-byte words). K codes are stored linearly (conflict-free as they are), with the K and V
 * scales, in the stage region after the table. A tile is fetched by 5 cp.async per lane
 * (one 64-bit base per field, per-lane constant offsets: ~50 instructions per tile instead
 * of ~85). -DKVQ_ATTN_BULK=1: the K scales, K codes and V scales by 3 bulk copies of lane 0
 * (cp.async.bulk on one mbarrier per stage, the V codes' cp.async arriving on it too); the
 * bulk copies take uniform registers, so each costs an ELECT loop of ~18 instructions. */
#ifndef KVQ_ATTN_BULK
#define KVQ_ATTN_BULK 0
#endif
constexpr int WROW = 256;                    /* bytes per row of the wide table */
constexpr int WLUT = 256 * WROW;             /* 64 KiB */
constexpr int W_OUT = 16 * (2 + D / 2 + 2);  /* per tile outside the table: K scales, K codes, V scales */
constexpr int W_KC = 32, W_VS = 16 * (2 + D / 2);
constexpr int W_BYTES = 16 * 2 * (2 + D / 2); /* bytes of a tile */
constexpr int W_NW = 8, W_STAGES = 4;
#ifndef KVQ_ATTN_W4_EARLY
#define KVQ_ATTN_W4_EARLY 0 /* 1: issue the first tiles before the table build (A/B: 1-2% slower) */
#endif
#if KVQ_ATTN_W4_EARLY && KVQ_ATTN_BULK
#error "KVQ_ATTN_W4_EARLY needs the mbarriers initialised first: not with KVQ_ATTN_BULK"
#endif
#ifndef KVQ_ATTN_W4_TPW
#define KVQ_ATTN_W4_TPW 64
#endif
constexpr int W4_TPW = KVQ_ATTN_W4_TPW; /* most tiles per warp of a chunk (32 per page register) */
static_assert(W_NW * W_STAGES * 8 <= 256, "V code slots: 8 half rows each");

#ifndef KVQ_ATTN_W4_FAST
#define KVQ_ATTN_W4_FAST 2 /* 0: as the classic kernel; 1: one-LOP3 interleave, no query mask; 2: finite initial max */
#endif
/* m ? a : b, bitwise (one LOP3) */
__device__ __forceinline__ uint32_t bitsel(uint32_t m, uint32_t a, uint32_t b) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xCA;" : "=r"(d) : "r"(m), "r"(a), "r"(b));
    return d;
}
template <int B> __device__ __forceinline__ uint32_t lut4x(const uint8_t *lut, uint32_t w, uint32_t lane4) {
    uint32_t a;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(a) : "r"(w), "r"(lane4), "n"(0x5504 | (B << 4)));
    return *(const uint32_t *)(lut + a);
}
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint32_t bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n\t.reg .pred P1;\n"
        "WAIT_%=:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
        "@P1 bra DONE_%=;\n\t"
        "bra WAIT_%=;\n"
        "DONE_%=:\n\t}" ::"r"(bar),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

template <int UNUSED = 0> /* a template: defined in every K format's translation unit */
__global__ void __launch_bounds__(W_NW * 32, 2) attn_kernel_w4(const AttnParams p) {
    constexpr int NW = W_NW, STAGES = W_STAGES;
    extern __shared__ uint4 smem_u4[];
    uint8_t *smem = (uint8_t *)smem_u4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, qq = lane & 3;
    const uint32_t lane4 = (uint32_t)lane * 4;
    const int s = blockIdx.z, hg = blockIdx.y, h = hg / p.QG, qgrp = hg - h * p.QG, chunk = blockIdx.x;
    const int GQ = min(QPB, p.G - qgrp * QPB);
    const int len = p.main_len[s];
    const int t_begin = chunk * p.chunk_tiles, t_end = min((len + 15) >> 4, t_begin + p.chunk_tiles);
    if (t_begin >= t_end) return;

    uint32_t qa[D / 16][2];
    /* the table, the prepared queries (after the prep kernel) */
    auto setup = [&]() {
        {   /* the wide table: 16-byte stores of 4 lanes' copies */
            const float *c = p.lut[0].c;
            for (int e = threadIdx.x; e < 256 * 8; e += NW * 32) {
                const int byte = e >> 3;
                const uint32_t v = pack2(c[byte & 15], c[byte >> 4]);
                *(uint4 *)(smem + byte * WROW + (e & 7) * 16) = make_uint4(v, v, v, v);
            }
        }
#if KVQ_ATTN_PDL
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("griddepcontrol.wait;" ::: "memory"); /* the prepared queries (prep kernel) */
#endif
#endif
        {
            const int qi = h * p.G + qgrp * QPB + g;
            const bool has = g < GQ;
            const float *q = p.qprep + ((size_t)s * p.HQ + qi) * p.qf;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int reg = 2 * ks + j;
                    const float lo = has ? q[kcoord4(qq, reg, 0)] : 0.f;
                    const float hi = has ? q[kcoord4(qq, reg, 1)] : 0.f;
                    qa[ks][j] = pack2(lo, hi);
                }
        }
    };
#if !KVQ_ATTN_W4_EARLY
    setup();
#endif
    uint8_t *outs = smem + WLUT + warp * STAGES * W_OUT;      /* this warp's K codes and scales */
    const uint32_t holes = 128u + (uint32_t)(warp * STAGES * 8) * WROW; /* its V code slots (offsets) */
#if KVQ_ATTN_BULK
    const uint32_t bar0 = smem_addr(smem + WLUT + NW * STAGES * W_OUT) + warp * STAGES * 8;
    if (lane == 0) {
#pragma unroll
        for (int i = 0; i < STAGES; i++) mbar_init(bar0 + 8 * i, 33);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#endif
#if !KVQ_ATTN_W4_EARLY
    __syncthreads(); /* table and barriers ready */
#endif

    const int my_n = t_end - t_begin > warp ? (t_end - t_begin - warp + NW - 1) / NW : 0;
    /* per lane: the page base (pages + page * page_bytes) and first slot of one of the warp's tiles */
    /* (W4_TPW / 32 tiles per lane: tile i is held by lane i % 32, in register i / 32) */
    static_assert(W4_TPW == 32 || W4_TPW == 64, "tiles per warp");
    const uint8_t *my_page0 = p.pages, *my_page1 = p.pages;
    int my_slot0 = 0, my_slot1 = 0;
    if (lane < my_n) {
        const int pos = (t_begin + warp + lane * NW) * 16, pi = pos / p.P;
        my_page0 = p.pages + (unsigned long long)p.block_table[(size_t)s * p.max_pages + pi] * p.page_bytes;
        my_slot0 = pos - pi * p.P;
    }
    if (W4_TPW > 32 && lane + 32 < my_n) {
        const int pos = (t_begin + warp + (lane + 32) * NW) * 16, pi = pos / p.P;
        my_page1 = p.pages + (unsigned long long)p.block_table[(size_t)s * p.max_pages + pi] * p.page_bytes;
        my_slot1 = pos - pi * p.P;
    }
    const uint32_t kfield = (uint32_t)(h * p.krun), vfield = (uint32_t)(p.kv_off_v + h * p.vrun);
#if KVQ_ATTN_BULK
    /* the V codes by cp.async (2 per lane, into the holes; the lane's copies arrive on the
     * stage's mbarrier when complete), the K scales, K codes and V scales by 3 bulk copies of
     * lane 0 (expect_tx): the mbarrier counts 32 + 1 arrivals and the bulk bytes */
    const uint32_t sbase = smem_addr(smem);
    const uint32_t dv = sbase + holes + (lane >> 3) * WROW + (((lane & 7) * 16 + 32 * ((lane >> 3) & 3)) & 127);
    const uint32_t vsrc = vfield + 2 * p.P + 16 * lane;
    auto issue = [&](int i) {
        if (i < my_n) {
            const int st = i % STAGES;
            const bool hi = W4_TPW > 32 && i >= 32;
            const uint8_t *mp0 = hi ? my_page1 : my_page0;
            const int ms0 = hi ? my_slot1 : my_slot0;
            const uint8_t *pg = (const uint8_t *)__shfl_sync(KVQ_FULL_MASK, (unsigned long long)mp0, i & 31);
            const int slot0 = __shfl_sync(KVQ_FULL_MASK, ms0, i & 31);
            const uint32_t bar = bar0 + 8 * st;
            const uint8_t *vc = pg + (vsrc + slot0 * (D / 2));
            const uint32_t d = dv + st * (8 * WROW);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(vc) : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d + 4 * WROW), "l"(vc + 512) : "memory");
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
            if (lane == 0) {
                const uint32_t o = smem_addr(outs) + st * W_OUT;
                mbar_expect(bar, W_OUT);
                bulk_g2s(o, pg + (kfield + slot0 * 2), 32, bar);
                bulk_g2s(o + W_KC, pg + (kfield + 2 * p.P + slot0 * (D / 2)), 16 * (D / 2), bar);
                bulk_g2s(o + W_VS, pg + (vfield + slot0 * 2), 32, bar);
            }
        }
    };
#else
    /* cp.async only: 5 per lane (K codes 2, V codes 2 into the holes, lanes 0..3 the scales),
     * per-lane constant offsets, one 64-bit base per field */
    const uint32_t sbase = smem_addr(smem), obase = smem_addr(outs);
    const uint32_t dk = obase + W_KC + 16 * lane;
    const uint32_t dv = sbase + holes + (lane >> 3) * WROW + (((lane & 7) * 16 + 32 * ((lane >> 3) & 3)) & 127);
    const uint32_t ds = obase + (lane < 2 ? 16 * lane : W_VS + 16 * (lane & 1));
    const uint32_t ksrc = kfield + 2 * p.P + 16 * lane, vsrc = vfield + 2 * p.P + 16 * lane;
    const uint32_t ssrc = (lane < 2 ? kfield : vfield) + 16 * (lane & 1);
    auto issue = [&](int i) {
        if (i < my_n) {
            const int st = i % STAGES;
            const bool hi = W4_TPW > 32 && i >= 32;
            const uint8_t *mp0 = hi ? my_page1 : my_page0;
            const int ms0 = hi ? my_slot1 : my_slot0;
            const uint8_t *pg = (const uint8_t *)__shfl_sync(KVQ_FULL_MASK, (unsigned long long)mp0, i & 31);
            const int slot0 = __shfl_sync(KVQ_FULL_MASK, ms0, i & 31);
            const uint8_t *kc = pg + (ksrc + slot0 * (D / 2)), *vc = pg + (vsrc + slot0 * (D / 2));
            const uint32_t ok = st * W_OUT, ov = st * (8 * WROW);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk + ok), "l"(kc) : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dk + ok + 512), "l"(kc + 512) : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dv + ov), "l"(vc) : "memory");
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dv + ov + 4 * WROW), "l"(vc + 512) : "memory");
            if (lane < 4)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(ds + ok), "l"(pg + (ssrc + slot0 * 2))
                             : "memory");
        }
        kvq_cp_async_commit();
    };
#endif

    float O[D / 16][4];
#pragma unroll
    for (int mt = 0; mt < D / 16; mt++) O[mt][0] = O[mt][1] = O[mt][2] = O[mt][3] = 0.f;
#if KVQ_ATTN_W4_FAST >= 2
    /* the running max starts finite (-1e30): a first score above it forces the rescale
     * (alpha = 2^-huge = 0 of the empty O and l), so 2^(s - m) needs no -inf guard;
     * back to -inf at the end for a warp that saw no token */
    constexpr float M0 = -1e30f;
#else
    constexpr float M0 = -INFINITY;
#endif
    float m_run[2] = {M0, M0}, l_run[2] = {0.f, 0.f};
    int rem = len - 16 * (t_begin + warp); /* tokens from this warp's next tile on */
#if KVQ_ATTN_W4_FAST
    (void)GQ;
#else
    const bool qv0 = 2 * qq < GQ, qv1 = 2 * qq + 1 < GQ;
#endif
    /* the V-side words of this lane (tokens 2qq, 2qq + 1, 2qq + 8, 2qq + 9; group g) */
    const uint32_t vu = (uint32_t)((8 * g + 32 * qq) & 127);
    const uint32_t va = holes + qq * WROW + vu, vb = holes + qq * WROW + (vu ^ 64u);

#pragma unroll 1
    for (int i = 0; i < STAGES - 1; i++) issue(i);
#if KVQ_ATTN_W4_EARLY
    /* the first tiles' copies are in flight while the table is built */
    setup();
    __syncthreads();
#endif
#pragma unroll 1
    for (int i = 0; i < my_n; i++) {
        const int st = i % STAGES;
#if KVQ_ATTN_BULK
        mbar_wait(bar0 + 8 * st, (uint32_t)(i / STAGES) & 1u);
#else
        kvq_cp_async_wait<STAGES - 2>();
        __syncwarp();
#endif
        const uint8_t *tk = outs + st * W_OUT, *tv = tk + W_VS;
        const int nvalid = min(16, rem);
        rem -= 16 * NW;
        const bool tv0 = g < nvalid, tv1 = g + 8 < nvalid;
        float sc[4];
        {
            uint32_t kb0[16], kb1[16];
            const uint4 v0 = ld128(tk + W_KC + g * (D / 2) + qq * 16);
            const uint4 v1 = ld128(tk + W_KC + (g + 8) * (D / 2) + qq * 16);
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
            float a[4];
            kmma_t(a, qa, kb0, kb1);
            const float g0 = scale_one(tk, g), g1 = scale_one(tk, g + 8);
#if KVQ_ATTN_W4_FAST
            /* query columns >= GQ are not masked: their query is 0, so are their scores (finite,
             * a running max of 0 after the first tile); the merge never reads them */
            sc[0] = tv0 ? g0 * a[0] : -INFINITY;
            sc[1] = tv0 ? g0 * a[1] : -INFINITY;
            sc[2] = tv1 ? g1 * a[2] : -INFINITY;
            sc[3] = tv1 ? g1 * a[3] : -INFINITY;
#else
            sc[0] = (tv0 && qv0) ? g0 * a[0] : -INFINITY;
            sc[1] = (tv0 && qv1) ? g0 * a[1] : -INFINITY;
            sc[2] = (tv1 && qv0) ? g1 * a[2] : -INFINITY;
            sc[3] = (tv1 && qv1) ? g1 * a[3] : -INFINITY;
#endif
        }
        const float t0 = fmaxf(sc[0], sc[2]), t1 = fmaxf(sc[1], sc[3]);
        if (__any_sync(KVQ_FULL_MASK, t0 > m_run[0] || t1 > m_run[1])) {
            float x0 = t0, x1 = t1;
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                x0 = fmaxf(x0, __shfl_xor_sync(KVQ_FULL_MASK, x0, o));
                x1 = fmaxf(x1, __shfl_xor_sync(KVQ_FULL_MASK, x1, o));
            }
            const float n0 = fmaxf(m_run[0], x0), n1 = fmaxf(m_run[1], x1);
#if KVQ_ATTN_W4_FAST >= 2
            const float al0 = ex2(m_run[0] - n0), al1 = ex2(m_run[1] - n1);
#else
            const float al0 = n0 == -INFINITY ? 1.f : ex2(m_run[0] - n0);
            const float al1 = n1 == -INFINITY ? 1.f : ex2(m_run[1] - n1);
#endif
            l_run[0] *= al0;
            l_run[1] *= al1;
#pragma unroll
            for (int mt = 0; mt < D / 16; mt++) {
                O[mt][0] *= al0;
                O[mt][1] *= al1;
                O[mt][2] *= al0;
                O[mt][3] *= al1;
            }
            m_run[0] = n0;
            m_run[1] = n1;
        }
        float pr[4];
#if KVQ_ATTN_W4_FAST >= 2
        pr[0] = ex2(sc[0] - m_run[0]);
        pr[1] = ex2(sc[1] - m_run[1]);
        pr[2] = ex2(sc[2] - m_run[0]);
        pr[3] = ex2(sc[3] - m_run[1]);
#else
        pr[0] = m_run[0] == -INFINITY ? 0.f : ex2(sc[0] - m_run[0]);
        pr[1] = m_run[1] == -INFINITY ? 0.f : ex2(sc[1] - m_run[1]);
        pr[2] = m_run[0] == -INFINITY ? 0.f : ex2(sc[2] - m_run[0]);
        pr[3] = m_run[1] == -INFINITY ? 0.f : ex2(sc[3] - m_run[1]);
#endif
        l_run[0] += pr[0] + pr[2];
        l_run[1] += pr[1] + pr[3];
        {
            /* V codes of the lane's tokens (k0, k1 | k2, k3), nibbles of a pair interleaved as in VStage<4> */
            const uint8_t *hv = smem + st * 8 * WROW;
            uint32_t x[4][2];
            {
                const uint2 e0 = ld64(hv + va), e1 = ld64(hv + vb), e2 = ld64(hv + va + 4 * WROW),
                            e3 = ld64(hv + vb + 4 * WROW);
                x[0][0] = e0.x, x[0][1] = e0.y, x[1][0] = e1.x, x[1][1] = e1.y;
                x[2][0] = e2.x, x[2][1] = e2.y, x[3][0] = e3.x, x[3][1] = e3.y;
            }
#pragma unroll
            for (int pr2 = 0; pr2 < 2; pr2++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint32_t x0 = x[2 * pr2][j], x1 = x[2 * pr2 + 1][j];
#if KVQ_ATTN_W4_FAST
                    /* one shift and one bitwise select (LOP3 0xCA: m ? a : b) per word */
                    x[2 * pr2][j] = bitsel(0x0f0f0f0fu, x0, x1 << 4);
                    x[2 * pr2 + 1][j] = bitsel(0x0f0f0f0fu, x0 >> 4, x1);
#else
                    x[2 * pr2][j] = (x0 & 0x0f0f0f0fu) | ((x1 << 4) & 0xf0f0f0f0u);
                    x[2 * pr2 + 1][j] = ((x0 >> 4) & 0x0f0f0f0fu) | (x1 & 0xf0f0f0f0u);
#endif
                }
            const float w0 = tv0 ? scale_one(tv, g) : 0.f, w1 = tv1 ? scale_one(tv, g + 8) : 0.f;
            const uint32_t b0 = kvq_movmatrix_t(pack2(pr[0] * w0, pr[1] * w0));
            const uint32_t b1 = kvq_movmatrix_t(pack2(pr[2] * w1, pr[3] * w1));
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
        }
        __syncwarp();
        issue(i + STAGES - 1);
    }
#if !KVQ_ATTN_BULK
    kvq_cp_async_wait<0>();
#endif
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        l_run[0] += __shfl_xor_sync(KVQ_FULL_MASK, l_run[0], o);
        l_run[1] += __shfl_xor_sync(KVQ_FULL_MASK, l_run[1], o);
    }
    __syncthreads();
#if KVQ_ATTN_W4_FAST >= 2
    if (m_run[0] == M0) m_run[0] = -INFINITY;
    if (m_run[1] == M0) m_run[1] = -INFINITY;
#endif
    block_merge<VTQ<4>, NW>(smem + WLUT, p, s, h, qgrp, chunk, GQ, false, m_run, l_run, O, lane, warp);
}

/* Launch configuration of a (K, V) pair: NW warps, STAGES deep. */
template <class KF, class VF> struct Cfg {
    static constexpr int TILE = 16 * (KF::BYTES + VF::BYTES);
    static constexpr int NW = TILE <= 2560 ? 8 : 4;
    static constexpr int STAGES = NW * 4 * TILE <= 80 * 1024 ? 4 : 3;
    static constexpr int STAGE_BYTES = NW * STAGES * TILE;
    static constexpr int MERGE_BYTES = (2 * NW * QPB + NW * QPB * D) * 4;
    static constexpr int SMEM = STAGE_BYTES > MERGE_BYTES ? STAGE_BYTES : MERGE_BYTES;
};

typedef int (*launch_fn)(const AttnParams &p, int do_launch, cudaStream_t st, int *nw_out, int *smem_out,
                         int *occ_out);

/* Launches the main pass; with launch == 0 it only reports the block size, the
 * dynamic shared memory (for lut_bytes of LUTs) and the resident blocks per SM. */
template <class KF, class VF>
int launch(const AttnParams &p, int do_launch, cudaStream_t st, int *nw_out, int *smem_out, int *occ_out) {
    typedef Cfg<KF, VF> C;
#if KVQ_ATTN_WIDE
    if constexpr (std::is_same<KF, KTQ<4>>::value && std::is_same<VF, VTQ<4>>::value) {
        if (p.wide) { /* one 4-bit table for K and V: the wide-table kernel */
            const int smem = WLUT + W_NW * W_STAGES * (W_OUT + 8);
            auto k = attn_kernel_w4<0>;
            if (nw_out) *nw_out = W_NW;
            if (smem_out) *smem_out = smem;
            if (!do_launch) {
                KVQ_CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                if (occ_out) KVQ_CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ_out, k, W_NW * 32, smem));
                return KVQ_OK;
            }
            dim3 grid(p.nchunk, p.H * p.QG, p.n_seq);
#if KVQ_ATTN_PDL
            if (p.pdl) {
            /* a programmatic dependent of the prep kernel: the table build overlaps it */
            cudaLaunchConfig_t lc = {};
            lc.gridDim = grid;
            lc.blockDim = dim3(W_NW * 32);
            lc.dynamicSmemBytes = smem;
            lc.stream = st;
            cudaLaunchAttribute at = {};
            at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at.val.programmaticStreamSerializationAllowed = 1;
            lc.attrs = &at;
            lc.numAttrs = 1;
            KVQ_CU_TRY(cudaLaunchKernelEx(&lc, k, p));
            return kvq_cuda_status(cudaGetLastError());
            }
#endif
            k<<<grid, W_NW * 32, smem, st>>>(p);
            return kvq_cuda_status(cudaGetLastError());
        }
    }
#endif
    const int smem = p.lut_bytes + C::SMEM;
    auto k = attn_kernel<KF, VF, C::NW, C::STAGES, false>;
    if (nw_out) *nw_out = C::NW;
    if (smem_out) *smem_out = smem;
    if (!do_launch) { /* configuration (layer creation): the attribute is set once here */
        KVQ_CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        if (occ_out) KVQ_CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ_out, k, C::NW * 32, smem));
        return KVQ_OK;
    }
    dim3 grid(p.nchunk, p.H * p.QG, p.n_seq);
    k<<<grid, C::NW * 32, smem, st>>>(p);
    return kvq_cuda_status(cudaGetLastError());
}

} /* namespace kvqa */

/* Format lists (attn.cu builds the dispatch table from them). */
#define KVQ_ATTN_K_FORMATS(X) \
    X(F16, KF16) X(Q8, KQ8) X(TQ1, KTQ<1>) X(TQ2, KTQ<2>) X(TQ4, KTQ<4>) X(RVQ1, KRVQ<1>) X(RVQ2, KRVQ<2>) \
    X(RVQ4, KRVQ<4>) X(TP1, KTP<1>) X(TP2, KTP<2>) X(TP4, KTP<4>) X(QJL, KQJL)
#define KVQ_ATTN_V_FORMATS(X, KN, KT) \
    X(KN, KT, F16, VF16) X(KN, KT, Q8, VQ8) X(KN, KT, TQ1, VTQ<1>) X(KN, KT, TQ2, VTQ<2>) X(KN, KT, TQ4, VTQ<4>) \
    X(KN, KT, RVQ1, VRVQ<1>) X(KN, KT, RVQ2, VRVQ<2>) X(KN, KT, RVQ4, VRVQ<4>)

#define KVQ_ATTN_DECL_ONE(KN, KT, VN, VT) \
    int kvq_attn_launch_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, int *occ);
#define KVQ_ATTN_DEF_ONE(KN, KT, VN, VT)                                                               \
    int kvq_attn_launch_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, \
                                    int *occ) {                                                               \
        using namespace kvqa;                                                                                 \
        return launch<KT, VT>(p, go, st, nw, smem, occ);                                                      \
    }
/* The f16 window pass (defined with the F16 instantiations); do_launch = 0 only sets it up. */
int kvq_attn_launch_window(const kvqa::AttnParams &p, int do_launch, cudaStream_t st);

#endif
