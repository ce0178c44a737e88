/*
 * CUDA backend tests (docs/CUDA.md).
 *
 * Part 1, host only (runs without a GPU): the attention kernels' decoders and
 * coordinate maps, run on the host on tiles built from real CPU records
 * exactly as the kernel stages them (swizzled): every f16 value a lane
 * feeds the tensor cores must be the record's value at the coordinate the
 * map names, and the maps must be permutations.
 * Part 2, on the device (exit 77 = skipped when there is none):
 *   - encode: records of every served method, dims 32..512, odd counts,
 *     f32 and f16 inputs, against the CPU scalar reference byte for byte
 *     (mismatching records are counted: a tolerance of 1 per 1000 records
 *     exists only for a double-rounding tie of a scale, never seen; the
 *     best-ISA CPU plan is compared too, for information: its SIMD paths
 *     sum the norm in float); paged storage gives the same bytes; NaN and
 *     out-of-range inputs report their errors;
 *   - attention: batches of sequences of odd lengths in shuffled pages, GQA
 *     groups of 1..16, f16 windows, every K/V pair family, against a CPU
 *     reference in double on the same bytes (exact scores from the decoded
 *     keys, or the tq-prod / qjl estimators; the CPU kvq_score of tq methods
 *     rounds the query to 8 bits, so it is reported apart): relative L2
 *     error of all outputs of a case <= 1e-3, of any single row <= 2e-3;
 *   - the decode path captured in a CUDA graph and replayed (test_graph);
 *   - causal rows of stored sequences through seq_map (test_seq_map);
 *   - the f16 sink (test_attention_sink): sink rows read by the window pass.
 *
 * Usage: test_cuda [--quick] [--debug] [--tcq | --tq3 | --tq5 | --sink] (the host checks, then only the
 * tcq encode and attention cases, the tq-mse:3 attention cases, the tq-mse:5 key cases, or the sink cases)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "attn_kernel_gen.cuh"
#include "attn_split.h"
#include "attn_tcq.cuh"
#include "attn_tq3.cuh"
#include "attn_tq5.cuh"
#include "codec/plan_export.h"
#include "kvq.h"
#include "kvq_cuda.h"

using namespace kvqa;

static int g_fail = 0, g_checks = 0, g_debug = 0, g_dbg_lines = 0;
static bool g_only_tcq = false; /* --tcq: the host checks and the tcq cases only */
static bool g_only_tq3 = false; /* --tq3: the host checks and the tq-mse:3 attention cases only */
static bool g_only_tq5 = false; /* --tq5: the host checks and the tq-mse:5 key cases only */
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        g_checks++;                                                         \
        if (!(cond)) {                                                      \
            if (g_fail < 50) {                                              \
                fprintf(stderr, "%s:%d: FAIL ", __FILE__, __LINE__);        \
                fprintf(stderr, __VA_ARGS__);                               \
                fprintf(stderr, "\n");                                      \
            }                                                               \
            g_fail++;                                                       \
        }                                                                   \
    } while (0)

#define CU(expr)                                                                          \
    do {                                                                                  \
        cudaError_t _e = (expr);                                                          \
        if (_e != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d: CUDA %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#define OK(expr)                                                                                   \
    do {                                                                                           \
        int _rc = (expr);                                                                          \
        if (_rc) {                                                                                 \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #expr, _rc, kvq_strerror(_rc)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- random numbers -------------------------------------------------------- */
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
    double gauss() {
        double u = uni(), v = uni();
        if (u < 1e-300) u = 1e-300;
        return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
    }
};

static float h2f(uint16_t h) { return kvq_f16_to_f32(h); }
static float f16r(float x) { return kvq_f16_to_f32(kvq_f32_to_f16(x)); }

/* Index of coordinate c in a strided field of b bits. */
static int strided_get(const uint8_t *f, int d, int b, int c) {
    int v = 0, shift = 0;
    for (int i = 0; i < 3; i++) {
        const int w = kvq_strided_width(b, i);
        if (!w) break;
        const int S = d * w / 8;
        v |= ((f[c % S] >> ((c / S) * w)) & ((1 << w) - 1)) << shift;
        f += S;
        shift += w;
    }
    return v;
}

/* ---- part 1: host checks of the decoders and maps ------------------------------ */
struct HostPlan {
    kvq_plan *p;
    kvq_plan_tables t;
    kvq_layout L;
    int d; /* head dim (64, 128, 256: the tensor-core kernels' dims) */
};
static HostPlan host_plan(const char *spec, uint64_t seed, int d) {
    HostPlan h;
    OK(kvq_plan_create(&h.p, spec, d, seed, NULL, 0));
    OK(kvq_plan_export(h.p, &h.t));
    h.L = kvq_layout_make(h.t.kind, d, h.t.bits, h.t.m, h.t.scale_bytes);
    h.d = d;
    return h;
}
/* 16 records -> a staged tile region of format F (field-major, each field's chunks where load_field
 * puts them: stage_chunk, with F's split of the field) */
template <class F> static void stage_records(const HostPlan &h, const std::vector<uint8_t> &recs, uint8_t *dst) {
    for (int f = 0; f < h.L.nfield; f++) {
        const int R = h.L.size[f];
        std::vector<uint8_t> src(16 * R);
        for (int t = 0; t < 16; t++) memcpy(&src[t * R], &recs[t * h.L.bytes + h.L.off[f]], R);
        uint8_t *base = dst + 16 * h.L.off[f];
        for (int c = 0; c < R; c++) {
            int tok;
            const int pc = stage_chunk(R, FieldSplit<F>::at(f), c, tok);
            memcpy(base + 16 * pc, &src[16 * c], 16);
        }
    }
}
/* tq-mse (tcq) records of 16 tokens with random index bytes (bitstreams; the scales as encoded): the
 * decoders' bit arithmetic on all patterns, not only the codes of Gaussian rows */
static void randomize_tq_codes(const HostPlan &h, std::vector<uint8_t> &recs, uint64_t seed) {
    if (h.t.kind != KVQ_LAY_TQ && h.t.kind != KVQ_LAY_TCQ) return;
    Rng r{seed};
    for (int t = 0; t < 16; t++)
        for (int i = 0; i < h.L.size[1]; i++) recs[t * h.L.bytes + h.L.off[1] + i] = (uint8_t)(r.next() >> 56);
}

/* host copy of build_luts */
static void host_lut(uint8_t *lut, int off, int w, const float *c) {
    uint32_t *dst = (uint32_t *)(lut + off);
    if (w == 4) {
        for (int e = 0; e < 256 * 32; e++) dst[e] = pack2(c[(e >> 5) & 15], c[(e >> 5) >> 4]);
    } else if (w == 2) {
        for (int n = 0; n < 16; n++) dst[n] = pack2(c[n & 3], c[n >> 2]);
    } else if (w == 3) { /* index i, lane l at i * 256 + 4l */
        for (int e = 0; e < 64 * 32; e++) dst[(e >> 5) * (WROW / 4) + (e & 31)] = lut3_entry(c, e >> 5);
    } else if (w == LUT_W2H) { /* byte b, lanes l and l + 16: the two pairs at b * 256 + 128 + 8 (l & 15) */
        for (int e = 0; e < 256 * 32; e++) {
            const int b = e >> 5, n = (e & 1) ? b >> 4 : b & 15;
            dst[b * (WROW / 4) + 32 + (e & 31)] = pack2(c[n & 3], c[n >> 2]);
        }
    } else if (w == LUT_W2X) { /* byte b, lane l: its low nibble's pair at b * 256 + 8l, its high's at + 4 */
        for (int e = 0; e < 256 * 64; e++) {
            const int b = e >> 6, n = (e & 1) ? b >> 4 : b & 15;
            dst[e] = pack2(c[n & 3], c[n >> 2]);
        }
    } else {
        for (int n = 0; n < 16; n++) {
            float v[4];
            for (int b = 0; b < 4; b++) v[b] = w == 0 ? (((n >> b) & 1) ? 1.f : -1.f) : c[(n >> b) & 1];
            dst[2 * n] = pack2(v[0], v[1]);
            dst[2 * n + 1] = pack2(v[2], v[3]);
        }
    }
}

/* Value (rotated domain, before the record scale where the kernel applies it later) of stage st of a record. */
static float stage_value(const HostPlan &h, const uint8_t *rec, int st, int c, bool vside) {
    const kvq_layout &L = h.L;
    switch (h.t.kind) {
    case KVQ_LAY_F16: return h2f((uint16_t)(rec[2 * c] | rec[2 * c + 1] << 8));
    case KVQ_LAY_Q8: {
        const float s = h2f((uint16_t)(rec[2 * (c / 32)] | rec[2 * (c / 32) + 1] << 8));
        return f16r(s * (float)(int8_t)rec[L.off[1] + c]);
    }
    case KVQ_LAY_TQ: return f16r(h.t.c1[strided_get(rec + L.off[1], h.d, h.t.bits, c)]);
    case KVQ_LAY_RVQ:
        return st ? f16r(h.t.c2[strided_get(rec + L.off[3], h.d, h.t.bits, c)])
                  : f16r(h.t.c1[strided_get(rec + L.off[2], h.d, h.t.bits, c)]);
    case KVQ_LAY_TQPROD:
        if (st == 0) return f16r(h.t.c1[strided_get(rec + L.off[1], h.d, h.t.bits, c)]);
        return ((rec[L.off[3] + c / 8] >> (c % 8)) & 1) ? 1.f : -1.f;
    case KVQ_LAY_QJL: return ((rec[L.off[1] + c / 8] >> (c % 8)) & 1) ? 1.f : -1.f;
    case KVQ_LAY_TCQ: { /* the generic kernel's tcq_value_dev (host_check_gen: equal to kvq_decode) */
        const uint8_t *f = rec + L.off[1];
        const uint32_t s = h.d == 64    ? gen_tcq_state<64>(f, h.t.bits, c)
                           : h.d == 256 ? gen_tcq_state<256>(f, h.t.bits, c)
                                        : gen_tcq_state<128>(f, h.t.bits, c);
        return tcq_value_dev(s);
    }
    }
    (void)vside;
    return NAN;
}

/* The K format KF (at its head dim KF::HD) against the codec's layout and records: fields, the
 * coordinate map, every lane's decoded registers and the per-token scales (randomize: tq-mse
 * records with random index bytes). */
template <class KF> static void host_check_k(const char *spec, int lutw = 0, bool randomize = false) {
    constexpr int D = KF::HD;
    HostPlan h = host_plan(spec, 11, D);
    EXPECT(KF::BYTES == h.L.bytes, "%s d=%d: K format bytes %d vs layout %d", spec, D, KF::BYTES, h.L.bytes);
    for (int f = 0; f < KF::NF && f < h.L.nfield; f++)
        EXPECT(KF::SIZE[f] == h.L.size[f] && KF::OFF[f] == h.L.off[f], "%s d=%d: field %d", spec, D, f);
    Rng r{77};
    std::vector<float> x(16 * D);
    for (auto &v : x) v = (float)r.gauss();
    std::vector<uint8_t> recs(16 * h.L.bytes), tile(16 * h.L.bytes + 64);
    OK(kvq_encode(h.p, x.data(), KVQ_DTYPE_F32, 16, recs.data()));
    if (randomize) randomize_tq_codes(h, recs, 79);
    stage_records<KF>(h, recs, tile.data());
    std::vector<uint8_t> lut(2 * LUT4_BYTES + 1024);
    AttnParams p;
    memset(&p, 0, sizeof p);
    p.klut[0] = 0;
    p.klut[1] = LUT4_BYTES;
    p.kconst = sqrtf(3.14159265358979323846f / 2) / (float)D;
    /* lutw: LUT_W2X; tq-mse:5 keys: the 4-bit table of the codebook's positive half (attn_tq5.cuh) */
    const bool five = h.t.kind == KVQ_LAY_TQ && h.t.bits == 5;
    if (h.t.n1) host_lut(lut.data(), 0, lutw ? lutw : five ? 4 : h.t.bits, five ? h.t.c1 + 16 : h.t.c1);
    if (h.t.kind == KVQ_LAY_RVQ) host_lut(lut.data(), LUT4_BYTES, h.t.bits, h.t.c2);
    if (h.t.kind == KVQ_LAY_TQPROD) host_lut(lut.data(), LUT4_BYTES, 0, NULL);
    if (h.t.kind == KVQ_LAY_QJL) host_lut(lut.data(), 0, 0, NULL);
    /* maps are permutations */
    for (int set = 0; set < KF::NQS; set++) {
        std::vector<int> seen(D, 0);
        for (int qq = 0; qq < 4; qq++)
            for (int reg = 0; reg < D / 8; reg++)
                for (int hh = 0; hh < 2; hh++) {
                    const int c = KF::kcoord(set, qq, reg, hh);
                    if (c >= 0 && c < D) seen[c]++;
                }
        int bad = 0;
        for (int c = 0; c < D; c++) bad += seen[c] != 1;
        EXPECT(bad == 0, "%s d=%d: kcoord set %d is not a permutation (%d bad)", spec, D, set, bad);
    }
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, qq = lane & 3;
        for (int nt = 0; nt < 2; nt++) {
            const int tok = nt * 8 + g;
            for (int st = 0; st < KF::NSTAGE; st++) {
                uint32_t kb[D / 8];
                KF::decode(tile.data(), st, lut.data(), p, tok, qq, lane * 4, kb);
                for (int reg = 0; reg < D / 8; reg++)
                    for (int hh = 0; hh < 2; hh++) {
                        const int c = KF::kcoord(KF::qset(st), qq, reg, hh);
                        float got = hh ? hhi(kb[reg]) : hlo(kb[reg]);
                        if (h.t.kind == KVQ_LAY_TCQ) got *= TCQ_INV_SD; /* tcq: 1 / sqrt(21845) in the scale */
                        const float want = stage_value(h, &recs[tok * h.L.bytes], st, c, false);
                        if (got != want && bad++ < 5)
                            fprintf(stderr, "  %s K lane %d tok %d st %d reg %d h %d coord %d: %g want %g\n", spec, lane,
                                    tok, st, reg, hh, c, got, want);
                    }
            }
        }
        /* the wide kernel's decoder of tokens g and g + 8 at once (the 2-bit byte table): the
         * registers of decode on each */
        if constexpr (std::is_same<KF, KTQ2X>::value || std::is_same<KF, KTQ2H>::value) {
            uint32_t kb0[16], kb1[16], w0[16], w1[16];
            KF::decode_pair(tile.data(), lut.data(), g, qq, 8u * lane, kb0, kb1);
            KF::decode(tile.data(), 0, lut.data(), p, g, qq, lane * 4, w0);
            KF::decode(tile.data(), 0, lut.data(), p, g + 8, qq, lane * 4, w1);
            for (int reg = 0; reg < 16; reg++)
                if ((kb0[reg] != w0[reg] || kb1[reg] != w1[reg]) && bad++ < 5)
                    fprintf(stderr, "  %s K pair lane %d reg %d: %08x %08x want %08x %08x\n", spec, lane, reg, kb0[reg],
                            kb1[reg], w0[reg], w1[reg]);
        }
        /* per-token scales after the MMA */
        for (int st = 0; st < KF::NSTAGE; st++) {
            const float2 gs = KF::kscale(tile.data(), st, 2 * qq, p);
            const uint8_t *rec = &recs[2 * qq * h.L.bytes];
            float want = 1;
            if (h.t.kind == KVQ_LAY_TQ || (h.t.kind == KVQ_LAY_TQPROD && st == 0)) want = h2f(rec[0] | rec[1] << 8);
            if (h.t.kind == KVQ_LAY_RVQ) want = h2f(rec[2 * st] | rec[2 * st + 1] << 8);
            if (h.t.kind == KVQ_LAY_TQPROD && st == 1) want = p.kconst * h2f(rec[h.L.off[2]] | rec[h.L.off[2] + 1] << 8);
            if (h.t.kind == KVQ_LAY_QJL) want = p.kconst * h2f(rec[0] | rec[1] << 8);
            if (h.t.kind == KVQ_LAY_TCQ) want = h2f(rec[0] | rec[1] << 8) * TCQ_INV_SD;
            const uint8_t *rec1 = &recs[(2 * qq + 1) * h.L.bytes];
            if (h.t.kind == KVQ_LAY_TCQ && gs.y != h2f(rec1[0] | rec1[1] << 8) * TCQ_INV_SD) bad++;
            if (h.t.kind == KVQ_LAY_TCQ && KF::kscale1(tile.data(), st, 2 * qq + 1, p) != gs.y) bad++;
            if (gs.x != want) bad++;
        }
    }
    EXPECT(bad == 0, "%s d=%d: %d K decode mismatches", spec, D, bad);
    kvq_plan_free(h.p);
}

/* The V format VF (at its head dim VF::HD): fields, the coordinate map, every lane's A fragments
 * (randomize: as host_check_k). */
template <class VF> static void host_check_v(const char *spec, int lutw = 0, bool randomize = false) {
    constexpr int D = VF::HD;
    HostPlan h = host_plan(spec, 12, D);
    EXPECT(VF::BYTES == h.L.bytes, "%s d=%d: V format bytes %d vs layout %d", spec, D, VF::BYTES, h.L.bytes);
    Rng r{78};
    std::vector<float> x(16 * D);
    for (auto &v : x) v = (float)r.gauss() * 3;
    std::vector<uint8_t> recs(16 * h.L.bytes), tile(16 * h.L.bytes + 64);
    OK(kvq_encode(h.p, x.data(), KVQ_DTYPE_F32, 16, recs.data()));
    if (randomize) randomize_tq_codes(h, recs, 80);
    stage_records<VF>(h, recs, tile.data());
    std::vector<uint8_t> lut(2 * LUT4_BYTES + 1024);
    AttnParams p;
    memset(&p, 0, sizeof p);
    p.vlut[0] = 0;
    p.vlut[1] = LUT4_BYTES;
    /* lutw: LUT_W2X; a 3-bit V table in the rows' second halves (LUT3_V) */
    if (h.t.n1) host_lut(lut.data(), h.t.bits == 3 ? LUT3_V : 0, lutw ? lutw : h.t.bits, h.t.c1);
    if (h.t.kind == KVQ_LAY_RVQ) host_lut(lut.data(), LUT4_BYTES, h.t.bits, h.t.c2);
    std::vector<int> seen(D, 0);
    for (int g = 0; g < 8; g++)
        for (int mt = 0; mt < D / 16; mt++)
            for (int rh = 0; rh < 2; rh++) {
                const int c = VF::vcoord(g, mt, rh);
                if (c >= 0 && c < D) seen[c]++;
            }
    int badmap = 0;
    for (int c = 0; c < D; c++) badmap += seen[c] != 1;
    EXPECT(badmap == 0, "%s d=%d: vcoord is not a permutation", spec, D);
    const bool val[2][2] = {{true, true}, {true, true}};
    int bad = 0;
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane >> 2, qq = lane & 3;
        typename VF::Regs vr;
        VF::load(tile.data(), g, qq, val, vr);
        for (int st = 0; st < VF::NSTAGE; st++) {
            for (int mt = 0; mt < D / 16; mt++) {
                uint32_t a[4];
                VF::decode(vr, st, lut.data(), p, lane * 4, mt, a);
                for (int i = 0; i < 4; i++)
                    for (int hh = 0; hh < 2; hh++) {
                        const int rh = i & 1, k = (i >> 1) * 2 + hh;
                        const int tok = vtok(qq, k), c = VF::vcoord(g, mt, rh);
                        float got = hh ? hhi(a[i]) : hlo(a[i]);
                        if (h.t.kind == KVQ_LAY_TCQ) got *= TCQ_INV_SD;
                        const float want = stage_value(h, &recs[tok * h.L.bytes], st, c, true);
                        if (got != want && bad++ < 5)
                            fprintf(stderr, "  %s V lane %d st %d mt %d a%d h%d tok %d coord %d: %g want %g\n", spec,
                                    lane, st, mt, i, hh, tok, c, got, want);
                    }
            }
            const float2 vs = VF::vscale(tile.data(), st, 2 * qq + 8);
            const uint8_t *rec = &recs[(2 * qq + 9) * h.L.bytes];
            float want = 1;
            if (h.t.kind == KVQ_LAY_TQ) want = h2f(rec[0] | rec[1] << 8);
            if (h.t.kind == KVQ_LAY_RVQ) want = h2f(rec[2 * st] | rec[2 * st + 1] << 8);
            if (h.t.kind == KVQ_LAY_TCQ) want = h2f(rec[0] | rec[1] << 8) * TCQ_INV_SD;
            if (h.t.kind == KVQ_LAY_TCQ && VF::vscale1(tile.data(), st, 2 * qq + 9) != want) bad++;
            if (vs.y != want) bad++;
        }
    }
    EXPECT(bad == 0, "%s d=%d: %d V decode mismatches", spec, D, bad);
    kvq_plan_free(h.p);
}

/* In-place unnormalised Walsh-Hadamard transform in double. */
static void fwht_d(std::vector<double> &x) {
    const int n = (int)x.size();
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const double a = x[j], b = x[j + h];
                x[j] = a + b, x[j + h] = a - b;
            }
}

/* The generic kernel's decoder (gen_value, attn_kernel_gen.cuh) on the host, on CPU records laid out
 * in a field-major page of 16 slots: for V methods its values rotated back (double) equal kvq_decode;
 * for tq-prod / qjl keys each value equals the estimator's term computed from the record itself. */
template <int DD> static int host_check_gen(const char *spec) {
    kvq_plan *p;
    if (kvq_plan_create(&p, spec, DD, 21, NULL, 0)) return 0;
    kvq_plan_tables t;
    OK(kvq_plan_export(p, &t));
    const kvq_layout L = kvq_layout_make(t.kind, DD, t.bits, t.m, t.scale_bytes);
    GenFmt F;
    memset(&F, 0, sizeof F);
    F.kind = t.kind, F.bits = t.bits, F.sb = t.scale_bytes, F.m = t.m;
    for (int f = 0; f < 4; f++) F.off[f] = L.off[f], F.size[f] = L.size[f];
    F.len = t.kind == KVQ_LAY_QJL ? t.m : t.kind == KVQ_LAY_TQPROD ? DD + t.m : DD;
    const int P = 16, n = 16;
    Rng r{77};
    std::vector<float> x((size_t)n * DD);
    for (auto &v : x) v = (float)(r.gauss() * 3.0);
    std::vector<uint8_t> rec((size_t)n * L.bytes), page((size_t)n * L.bytes, 0xA5);
    OK(kvq_encode(p, x.data(), KVQ_DTYPE_F32, n, rec.data()));
    for (int sl = 0; sl < n; sl++)
        for (int f = 0; f < L.nfield; f++)
            memcpy(&page[kvq_layout_page_offset(&L, f, P, sl, 0)], &rec[(size_t)sl * L.bytes + L.off[f]], L.size[f]);
    const float kconst = t.m ? sqrtf(3.14159265358979323846f / 2) / (float)t.m : 0.f;
    const float sdd = 1.0f / sqrtf((float)DD);
    double worst = 0;
    for (int sl = 0; sl < n; sl++) {
        const uint8_t *rc = &rec[(size_t)sl * L.bytes];
        std::vector<double> y(F.len);
        for (int j = 0; j < F.len; j++) y[j] = gen_value<DD>(F, page.data(), P, sl, j, kconst, t.c1, t.c2);
        if (t.kind == KVQ_LAY_TQPROD || t.kind == KVQ_LAY_QJL) {
            const int no = t.kind == KVQ_LAY_QJL ? L.off[0] : L.off[2], so = t.kind == KVQ_LAY_QJL ? L.off[1] : L.off[3];
            const int j0 = t.kind == KVQ_LAY_QJL ? 0 : DD;
            const double nr = gen_scale(rc + no, F.sb), g = gen_scale(rc, F.sb);
            for (int j = 0; j < F.len; j++) {
                double want;
                if (j < j0) want = g * t.c1[strided_get(rc + L.off[1], DD, t.bits, j)];
                else want = kconst * nr * (((rc[so + (j - j0) / 8] >> ((j - j0) % 8)) & 1) ? 1.0 : -1.0);
                const double e = fabs(y[j] - want) / (fabs(want) + 1e-30);
                if (e > worst) worst = e;
            }
            continue;
        }
        std::vector<double> xr(DD);
        if (t.rot == 1) { /* rot_apply_inv: x = s1 . H (s2 . H y / sqrt d) / sqrt d */
            std::vector<double> v(y.begin(), y.end());
            fwht_d(v);
            for (int c = 0; c < DD; c++) v[c] *= (double)t.signs[DD + c] * sdd;
            fwht_d(v);
            for (int c = 0; c < DD; c++) xr[c] = v[c] * (double)t.signs[c] * sdd;
        } else if (t.rot == 2) { /* Q^T y */
            for (int c = 0; c < DD; c++) {
                double a = 0;
                for (int i = 0; i < DD; i++) a += (double)t.rot_mat[(size_t)i * DD + c] * y[i];
                xr[c] = a;
            }
        } else {
            for (int c = 0; c < DD; c++) xr[c] = y[c];
        }
        float dec[512];
        OK(kvq_decode(p, rc, 1, dec));
        double mx = 0, e = 0;
        for (int c = 0; c < DD; c++) mx = fmax(mx, fabs(dec[c])), e = fmax(e, fabs(xr[c] - dec[c]));
        if (e / (mx + 1e-30) > worst) worst = e / (mx + 1e-30);
    }
    EXPECT(worst <= 1e-5, "generic decoder %s d=%d: rel err %.3e", spec, DD, worst);
    kvq_plan_free(p);
    return 1;
}
template <int DD> static void host_check_gen_dim(void) {
    static const char *specs[] = {"f16", "q8", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "tq-mse:5",
                                  "tq-mse:8", "tq-mse:3+scale32", "tq-mse:4+norot", "rvq:1", "rvq:2", "rvq:3",
                                  "rvq:4", "rvq:2+scale32", "tq-prod:3", "tq-prod:4", "qjl", "qjl:64",
                                  "tcq:1", "tcq:2", "tcq:3", "tcq:4", "tcq:2+scale32", "tcq:3+norot"};
    int n = 0;
    for (const char *sp : specs) n += host_check_gen<DD>(sp);
    EXPECT(n == (int)(sizeof specs / sizeof *specs), "d=%d: %d of the generic decoder's specs made plans", DD, n);
}

/* The split-K rule (attn_split.h), on the host: every chunking is a multiple of the block's warps,
 * within 4..tpw_max tiles a warp, covers the tiles in at most ceil(tiles / (4 nw)) chunks (the
 * workspace bound of kvq_cuda_attend_workspace_bytes); and the H200 picks (132 SMs) that the
 * forced-chunk sweep of session 11 measured best. */
static void host_check_split(void) {
    const int nws[2] = {4, 8}, tpws[2] = {32, 64};
    for (int tiles : {1, 7, 31, 32, 33, 100, 257, 1000, 2048, 4097, 8192, 65536})
        for (long long items : {1LL, 3LL, 8LL, 32LL, 128LL, 512LL, 4096LL})
            for (int sms : {1, 7, 132})
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        const int nw = nws[a], tpw = tpws[b];
                        const int c = kvqa::split_chunk_tiles(tiles, items, sms, nw, tpw);
                        const int nch = (tiles + c - 1) / c, nbound = (tiles + 4 * nw - 1) / (4 * nw);
                        EXPECT(c % nw == 0 && c >= 4 * nw && c <= tpw * nw && nch <= nbound,
                               "split tiles=%d items=%lld sms=%d nw=%d: chunk %d", tiles, items, sms, nw, c);
                    }
    /* (tiles of the longest sequence, items = batch x 8 KV heads, warps, tiles a warp) -> the
     * sweep's best: tq-mse:4/4 (wide, 8 warps, 64), tq-mse:2/2 (8, 32), q8 (4, 32) */
    const struct {
        int tiles, items, nw, tpw, want;
    } picks[] = {{2048, 8, 8, 64, 128},   {2048, 8, 8, 32, 128},    {8192, 8, 8, 32, 256},
                 {8192, 8, 4, 32, 128},   {8192, 32, 8, 64, 512},   {8192, 32, 8, 32, 256},
                 {2048, 32, 8, 32, 256},  {2048, 32, 4, 32, 128},   {2048, 128, 8, 64, 512},
                 {2048, 128, 8, 32, 256}, {2048, 128, 4, 32, 128}};
    for (auto &k : picks) {
        const int c = kvqa::split_chunk_tiles(k.tiles, k.items, 132, k.nw, k.tpw);
        EXPECT(c == k.want, "split H200 tiles=%d items=%d nw=%d: chunk %d, measured best %d", k.tiles, k.items,
               k.nw, c, k.want);
    }
}

template <int DD> static void host_check_tcq(void) {
    static const char *specs[4] = {"tcq:1", "tcq:2", "tcq:3", "tcq:4"};
#define KVQ_TCQ_HOST(KB)                                                  \
    host_check_k<KTCQ<KB, DD>>(specs[KB - 1]);                             \
    host_check_k<KTCQ<KB, DD>>(specs[KB - 1], 0, true);                    \
    host_check_v<VTCQ<KB, DD>>(specs[KB - 1]);                             \
    host_check_v<VTCQ<KB, DD>>(specs[KB - 1], 0, true);
    KVQ_TCQ_HOST(1)
    KVQ_TCQ_HOST(2)
    KVQ_TCQ_HOST(3)
    KVQ_TCQ_HOST(4)
#undef KVQ_TCQ_HOST
    host_check_k<KTCQ<3, DD>>("tcq:3+norot");
    host_check_v<VTCQ<2, DD>>("tcq:2+norot");
}

static void host_checks(void) {
    host_check_split();
    /* swizzles are permutations inside a tile */
    {
        const int Rs[5] = {32, 64, 128, 256, 512};
        for (int ri = 0; ri < 5; ri++) {
            const int R = Rs[ri];
            std::vector<int> seen(16 * R / 16, 0);
            for (int t = 0; t < 16; t++)
                for (int c = 0; c < R / 16; c++) {
                    int a = 0;
                    if (R == 32) a = faddr<32>(t, 16 * c);
                    if (R == 64) a = faddr<64>(t, 16 * c);
                    if (R == 128) a = faddr<128>(t, 16 * c);
                    if (R == 256) a = faddr<256>(t, 16 * c);
                    if (R == 512) a = faddr<512>(t, 16 * c);
                    seen[a / 16]++;
                }
            int bad = 0;
            for (int v : seen) bad += v != 1;
            EXPECT(bad == 0, "swizzle R=%d is not a permutation", R);
        }
    }
    /* the staging of every field size the kernels copy (R bytes a token; RA: tq-mse:3's split) is a
     * permutation of the tile's 16-byte chunks, each chunk tagged with the token of its first byte */
    {
        const int fields[][2] = {{2, 0},  {4, 0},  {8, 0},   {16, 0},  {24, 0},  {32, 0},  {48, 0},
                                 {48, 32}, {64, 0}, {96, 0}, {96, 64}, {128, 0}, {256, 0}, {512, 0}};
        for (auto &fr : fields) {
            const int R = fr[0], RA = fr[1];
            std::vector<int> seen(R, 0);
            int bad = 0;
            for (int c = 0; c < R; c++) {
                int tok;
                const int pc = stage_chunk(R, RA, c, tok);
                if (pc < 0 || pc >= R || tok != 16 * c / R) bad++;
                else seen[pc]++;
            }
            for (int v : seen) bad += v != 1;
            EXPECT(bad == 0, "staging R=%d RA=%d is not a permutation of the chunks", R, RA);
        }
    }
    host_check_k<KF16>("f16");
    host_check_k<KQ8>("q8");
    host_check_k<KTQ<1>>("tq-mse:1");
    host_check_k<KTQ<2>>("tq-mse:2");
    host_check_k<KTQ<4>>("tq-mse:4");
    host_check_k<KTQ2X>("tq-mse:2", LUT_W2X); /* the 2-bit byte table (issue 17) */
    host_check_k<KTQ2H>("tq-mse:2", LUT_W2H); /* the wide 2/4 kernel's K table */
    host_check_k<KRVQ<1>>("rvq:1");
    host_check_k<KRVQ<2>>("rvq:2");
    host_check_k<KRVQ<4>>("rvq:4");
    host_check_k<KTP<1>>("tq-prod:2");
    host_check_k<KTP<2>>("tq-prod:3");
    host_check_k<KTP<4>>("tq-prod:5");
    host_check_k<KQJL>("qjl");
    host_check_v<VF16>("f16");
    host_check_v<VQ8>("q8");
    host_check_v<VTQ<1>>("tq-mse:1");
    host_check_v<VTQ<2>>("tq-mse:2");
    host_check_v<VTQ<4>>("tq-mse:4");
    host_check_v<VTQ2X>("tq-mse:2", LUT_W2X);
    host_check_v<VTQ2H>("tq-mse:2", LUT_W2H); /* the wide 4/2 kernel's V table */
    host_check_v<VRVQ<1>>("rvq:1");
    host_check_v<VRVQ<2>>("rvq:2");
    host_check_v<VRVQ<4>>("rvq:4");
    /* tq-mse:3 (attn_tq3.cuh) at every tensor-core head dim: encoded rows, random index bytes, a
     * Gaussian codebook, no rotation */
    host_check_k<KTQ3<128>>("tq-mse:3");
    host_check_k<KTQ3<128>>("tq-mse:3", 0, true);
    host_check_k<KTQ3<128>>("tq-mse:3+cb=gauss", 0, true);
    host_check_k<KTQ3<128>>("tq-mse:3+norot");
    host_check_v<VTQ3<128>>("tq-mse:3");
    host_check_v<VTQ3<128>>("tq-mse:3", 0, true);
    host_check_v<VTQ3<128>>("tq-mse:3+cb=gauss", 0, true);
    host_check_v<VTQ3<128>>("tq-mse:3+norot");
    host_check_k<KTQ3<64>>("tq-mse:3");
    host_check_k<KTQ3<64>>("tq-mse:3", 0, true);
    host_check_v<VTQ3<64>>("tq-mse:3");
    host_check_v<VTQ3<64>>("tq-mse:3", 0, true);
    host_check_k<KTQ5<128>>("tq-mse:5"); /* issue 17: tq-mse:5 keys on the classic kernel */
    host_check_k<KTQ5<128>>("tq-mse:5", 0, true);
    host_check_k<KTQ5<128>>("tq-mse:5+cb=gauss", 0, true);
    host_check_k<KTQ5<128>>("tq-mse:5+norot");
    host_check_k<KTQ3<256>>("tq-mse:3");
    host_check_k<KTQ3<256>>("tq-mse:3", 0, true);
    host_check_v<VTQ3<256>>("tq-mse:3");
    host_check_v<VTQ3<256>>("tq-mse:3", 0, true);
    /* the formats of the other head dims (issue 17) */
    /* tcq:k (attn_tcq.cuh) at every tensor-core head dim: encoded rows, random bitstreams, +norot */
    host_check_tcq<128>();
    host_check_tcq<64>();
    host_check_tcq<256>();
    host_check_k<KF16T<64>>("f16");
    host_check_k<KQ8T<64>>("q8");
    host_check_k<KTQ<2, 64>>("tq-mse:2");
    host_check_k<KTQ<4, 64>>("tq-mse:4");
    host_check_v<VF16T<64>>("f16");
    host_check_v<VQ8T<64>>("q8");
    host_check_v<VTQ<2, 64>>("tq-mse:2");
    host_check_v<VTQ<4, 64>>("tq-mse:4");
    host_check_k<KF16T<256>>("f16");
    host_check_k<KQ8T<256>>("q8");
    host_check_k<KTQ<2, 256>>("tq-mse:2");
    host_check_k<KTQ<4, 256>>("tq-mse:4");
    host_check_v<VF16T<256>>("f16");
    host_check_v<VQ8T<256>>("q8");
    host_check_v<VTQ<2, 256>>("tq-mse:2");
    host_check_v<VTQ<4, 256>>("tq-mse:4");
    host_check_gen_dim<32>();
    host_check_gen_dim<64>();
    host_check_gen_dim<96>();
    host_check_gen_dim<128>();
    host_check_gen_dim<256>();
}

/* ---- part 2: device checks ----------------------------------------------------- */
static void fill_rows(Rng &r, std::vector<float> &x, size_t n, int d) {
    x.resize(n * d);
    for (size_t i = 0; i < n; i++) {
        float *v = &x[i * d];
        const int kind = (int)(i % 17);
        const double mag = exp(2.0 * r.uni() - 1.0);
        for (int c = 0; c < d; c++) v[c] = (float)(r.gauss() * mag);
        if (kind == 3) memset(v, 0, d * sizeof(float));                     /* zero row */
        if (kind == 5) v[(int)(r.uni() * d)] = 100.f;                        /* one dominant channel */
        if (kind == 7) for (int c = 0; c < d; c++) v[c] = 0.25f;             /* constant */
        if (kind == 11) for (int c = 0; c < d; c++) v[c] *= 1e-20f;          /* tiny */
        if (kind == 13) for (int c = 0; c < d; c++) v[c] = (float)(r.uni() < 0.5 ? -1 : 1); /* +-1 */
    }
}

/* n rows at hin (ib bytes of dtype dt) encoded on the device by cp into got (n x cb bytes, the
 * device buffer prefilled with 0xA5 so that an unwritten record shows); returns the device status. */
static int device_encode(const kvq_cuda_plan *cp, const void *hin, size_t ib, kvq_dtype dt, size_t n, size_t cb,
                         uint8_t *got) {
    void *dx, *dc;
    int *dst;
    CU(cudaMalloc(&dx, ib));
    CU(cudaMalloc(&dc, n * cb));
    CU(cudaMalloc(&dst, 4));
    CU(cudaMemcpy(dx, hin, ib, cudaMemcpyHostToDevice));
    CU(cudaMemset(dc, 0xA5, n * cb));
    CU(cudaMemset(dst, 0, 4));
    OK(kvq_cuda_encode(cp, dx, dt, n, dc, dst, NULL));
    int st = -1;
    CU(cudaMemcpy(got, dc, n * cb, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
    CU(cudaFree(dx));
    CU(cudaFree(dc));
    CU(cudaFree(dst));
    return st;
}

static int test_encode(bool quick) {
    static const char *specs[] = {"q8", "f16", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "tq-mse:5",
                                  "tq-mse:8", "tq-mse:4+scale32", "tq-mse:3+scale=norm", "tq-mse:2+cb=gauss",
                                  "tq-mse:4+norot", "tq-prod:2", "tq-prod:3", "tq-prod:5", "qjl", "qjl:64",
                                  "rvq:1", "rvq:2", "rvq:3", "rvq:4", "rvq:2+scale32"};
    /* 96 and 384: the dense rotation (not powers of two) */
    static const int dims[] = {32, 64, 96, 128, 256, 384, 512};
    static const size_t counts[] = {1, 37, 1003};
    long long total = 0, mism = 0, mism_best = 0;
    Rng r{1234};
    for (const char *spec : specs)
        for (int d : dims) {
            if (quick && d != 128 && d != 96) continue;
            kvq_plan *p, *ps;
            if (kvq_plan_create(&p, spec, d, 99, NULL, 0)) continue;
            OK(kvq_plan_clone_isa(&ps, p, KVQ_ISA_SCALAR));
            kvq_cuda_plan *cp;
            int rc = kvq_cuda_plan_create(&cp, p);
            EXPECT(rc == 0, "cuda plan %s d=%d: %s", spec, d, kvq_strerror(rc));
            if (rc) {
                kvq_plan_free(p);
                kvq_plan_free(ps);
                continue;
            }
            const size_t cb = kvq_plan_code_bytes(p);
            for (size_t n : counts)
                for (int f16in = 0; f16in < 2; f16in++) {
                    std::vector<float> x;
                    fill_rows(r, x, n, d);
                    std::vector<uint16_t> xh(n * d);
                    for (size_t i = 0; i < n * (size_t)d; i++) xh[i] = kvq_f32_to_f16(x[i]);
                    const void *hin = f16in ? (const void *)xh.data() : (const void *)x.data();
                    const size_t ib = n * d * (f16in ? 2 : 4);
                    kvq_dtype dt = f16in ? KVQ_DTYPE_F16 : KVQ_DTYPE_F32;
                    std::vector<uint8_t> ref(n * cb), best(n * cb), got(n * cb);
                    OK(kvq_encode(ps, hin, dt, n, ref.data()));
                    OK(kvq_encode(p, hin, dt, n, best.data()));
                    const int st = device_encode(cp, hin, ib, dt, n, cb, got.data());
                    EXPECT(st == 0, "%s d=%d n=%zu: device status %d", spec, d, n, st);
                    long long m = 0, mb = 0;
                    for (size_t i = 0; i < n; i++) {
                        if (memcmp(&got[i * cb], &ref[i * cb], cb)) {
                            if (m++ < 1 && (g_debug || n == 1)) {
                                double ss = 0;
                                for (int c = 0; c < d; c++) ss += (double)x[i * d + c] * x[i * d + c];
                                fprintf(stderr, "  %s d=%d f16in=%d row %zu (|x| %.4g) gpu:", spec, d, f16in, i, sqrt(ss));
                                for (size_t j = 0; j < cb && j < 48; j++) fprintf(stderr, " %02x", got[i * cb + j]);
                                fprintf(stderr, "\n%*scpu:", (int)(strlen(spec) + 30), "");
                                for (size_t j = 0; j < cb && j < 48; j++) fprintf(stderr, " %02x", ref[i * cb + j]);
                                fprintf(stderr, "\n");
                            }
                        }
                        mb += memcmp(&got[i * cb], &best[i * cb], cb) != 0;
                    }
                    total += n;
                    mism += m;
                    mism_best += mb;
                    const bool exact = !strncmp(spec, "q8", 2) || !strncmp(spec, "f16", 3);
                    EXPECT(m == 0 || (!exact && m * 1000 <= (long long)n), "%s d=%d n=%zu f16in=%d: %lld of %zu records differ",
                           spec, d, n, f16in, m, n);
                }
            kvq_cuda_plan_free(cp);
            kvq_plan_free(p);
            kvq_plan_free(ps);
        }
    printf("encode: %lld records, %lld differ from the scalar reference, %lld from the best-ISA CPU plan\n", total,
           mism, mism_best);
    /* errors: NaN and a scale beyond f16 */
    {
        kvq_plan *p;
        OK(kvq_plan_create(&p, "tq-mse:4", 128, 1, NULL, 0));
        kvq_cuda_plan *cp;
        OK(kvq_cuda_plan_create(&cp, p));
        std::vector<float> x(3 * 128, 1.0f);
        x[128 + 5] = NAN;
        for (int c = 0; c < 128; c++) x[256 + c] = 1e30f;
        float *dx;
        uint8_t *dc;
        int *dst, st;
        CU(cudaMalloc(&dx, x.size() * 4));
        CU(cudaMalloc(&dc, 3 * 66));
        CU(cudaMalloc(&dst, 4));
        CU(cudaMemcpy(dx, x.data(), 128 * 4 * 2, cudaMemcpyHostToDevice));
        CU(cudaMemset(dst, 0, 4));
        OK(kvq_cuda_encode(cp, dx, KVQ_DTYPE_F32, 2, dc, dst, NULL));
        CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
        EXPECT(st == KVQ_ERR_NONFINITE, "NaN row: status %d", st);
        CU(cudaMemcpy(dx, x.data() + 256, 128 * 4, cudaMemcpyHostToDevice));
        CU(cudaMemset(dst, 0, 4));
        OK(kvq_cuda_encode(cp, dx, KVQ_DTYPE_F32, 1, dc, dst, NULL));
        CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
        EXPECT(st == KVQ_ERR_RANGE, "huge row: status %d", st);
        CU(cudaFree(dx));
        CU(cudaFree(dc));
        CU(cudaFree(dst));
        kvq_cuda_plan_free(cp);
        kvq_plan_free(p);
        kvq_plan *pp;
        OK(kvq_plan_create(&pp, "polar", 128, 1, NULL, 0));
        EXPECT(kvq_cuda_plan_create(&cp, pp) == KVQ_ERR_UNSUPPORTED, "polar should be unsupported");
        kvq_plan_free(pp);
    }
    return 0;
}

/* tcq:k (the Viterbi encoder, encode.cu): bytes against the CPU codec's scalar reference (checked) and
 * the best-ISA plan (counted: its rotation and dense matvec may round differently),
 * at the head dims of the rotated methods (96, 384: the dense rotation) and the rows of fill_rows
 * (zero, dominant channel, constant, tiny, +-1). The f16 scale of a double sum: the tie rule of the
 * other rotated methods (<= 1 in 1000 records). */
static void test_encode_tcq(bool quick) {
    static const char *specs[] = {"tcq:1", "tcq:2", "tcq:3", "tcq:4", "tcq:2+scale32", "tcq:3+norot"};
    static const int dims[] = {32, 64, 96, 128, 256, 384, 512};
    static const size_t counts[] = {1, 37, 150};
    long long total = 0, mism = 0, mism_s = 0;
    Rng r{5678};
    for (const char *spec : specs)
        for (int d : dims) {
            if (quick && d != 128 && d != 96) continue;
            kvq_plan *p, *ps;
            if (kvq_plan_create(&p, spec, d, 99, NULL, 0)) continue;
            OK(kvq_plan_clone_isa(&ps, p, KVQ_ISA_SCALAR));
            kvq_cuda_plan *cp;
            int rc = kvq_cuda_plan_create(&cp, p);
            EXPECT(rc == 0, "cuda plan %s d=%d: %s", spec, d, kvq_strerror(rc));
            if (rc) {
                kvq_plan_free(p);
                kvq_plan_free(ps);
                continue;
            }
            const size_t cb = kvq_plan_code_bytes(p);
            for (size_t n : counts)
                for (int f16in = 0; f16in < (n == 37 ? 2 : 1); f16in++) {
                    std::vector<float> x;
                    fill_rows(r, x, n, d);
                    std::vector<uint16_t> xh(n * d);
                    for (size_t i = 0; i < n * (size_t)d; i++) xh[i] = kvq_f32_to_f16(x[i]);
                    const void *hin = f16in ? (const void *)xh.data() : (const void *)x.data();
                    const size_t ib = n * d * (f16in ? 2 : 4);
                    kvq_dtype dt = f16in ? KVQ_DTYPE_F16 : KVQ_DTYPE_F32;
                    std::vector<uint8_t> ref(n * cb), best(n * cb), got(n * cb);
                    OK(kvq_encode(ps, hin, dt, n, ref.data()));
                    OK(kvq_encode(p, hin, dt, n, best.data()));
                    const int st = device_encode(cp, hin, ib, dt, n, cb, got.data());
                    EXPECT(st == 0, "%s d=%d n=%zu: device status %d", spec, d, n, st);
                    long long m = 0, ms = 0;
                    for (size_t i = 0; i < n; i++) {
                        const bool ds = memcmp(&got[i * cb], &ref[i * cb], cb) != 0;
                        m += memcmp(&got[i * cb], &best[i * cb], cb) != 0;
                        ms += ds;
                        if (ds && ms <= 2) {
                            fprintf(stderr, "  %s d=%d f16in=%d row %zu (kind %zu) gpu:", spec, d, f16in, i, i % 17);
                            for (size_t j = 0; j < cb && j < 40; j++) fprintf(stderr, " %02x", got[i * cb + j]);
                            fprintf(stderr, "\n%*scpu:", (int)(strlen(spec) + 34), "");
                            for (size_t j = 0; j < cb && j < 40; j++) fprintf(stderr, " %02x", ref[i * cb + j]);
                            fprintf(stderr, "\n");
                        }
                    }
                    total += n;
                    mism += m;
                    mism_s += ms;
                    EXPECT(ms * 1000 <= (long long)n, "%s d=%d n=%zu f16in=%d: %lld of %zu records differ from the scalar reference",
                           spec, d, n, f16in, ms, n);
                }
            kvq_cuda_plan_free(cp);
            kvq_plan_free(p);
            kvq_plan_free(ps);
        }
    printf("encode tcq: %lld records, %lld differ from the scalar reference, %lld from the best-ISA CPU plan\n", total,
           mism_s, mism);
}

/* Calibrated test data of one head: a mean (|mean| ~ 2 per channel) and channel scales spread over
 * e^(+-1) (the structure +center and +chscale remove; score spreads near the plain cases'); rows = mean + sg * N(0,1) * mag. */
struct HeadDist {
    std::vector<float> mean, sg;
};
static HeadDist head_dist(Rng &r, int d) {
    HeadDist h;
    h.mean.resize(d);
    h.sg.resize(d);
    for (int c = 0; c < d; c++) {
        h.mean[c] = (float)(2 * r.gauss());
        h.sg[c] = (float)exp(0.5 * r.gauss());
    }
    return h;
}
static float head_value(Rng &r, const HeadDist &h, int c, double mag) {
    return (float)(h.mean[c] + h.sg[c] * r.gauss() * mag);
}
/* Plans of spec for H heads: uncalibrated (calib 0: one plan, shared), or each fitted to 48 rows of its
 * head's distribution (calib 1: H plans of seeds seed + h, as the C cache seeds each head's plan;
 * calib 2: head 0's plan for every head). */
static std::vector<kvq_plan *> case_plans(const char *spec, int d, uint64_t seed, int calib, const std::vector<HeadDist> &hd) {
    const int H = (int)hd.size();
    std::vector<kvq_plan *> ps(H, (kvq_plan *)NULL);
    int needs = 0;
    OK(kvq_spec_needs_calibration(spec, &needs));
    if (!calib || !needs) { /* an uncalibrated side of a calibrated case: one plan */
        OK(kvq_plan_create(&ps[0], spec, d, seed, NULL, 0));
        for (int h = 1; h < H; h++) ps[h] = ps[0];
        return ps;
    }
    Rng r{seed * 7919 + 1};
    const int nc = 48;
    for (int h = 0; h < H; h++) {
        if (calib == 2 && h > 0) {
            ps[h] = ps[0];
            continue;
        }
        std::vector<float> cal((size_t)nc * d);
        for (int i = 0; i < nc; i++)
            for (int c = 0; c < d; c++) cal[(size_t)i * d + c] = head_value(r, hd[h], c, 1.0);
        OK(kvq_plan_create(&ps[h], spec, d, seed + (uint64_t)h, cal.data(), nc));
    }
    return ps;
}
static kvq_cuda_plan *case_cuda_plan(const std::vector<kvq_plan *> &ps, int calib) {
    kvq_cuda_plan *cp;
    if (calib == 1 && ps.size() > 1 && ps[1] != ps[0]) OK(kvq_cuda_plan_create_heads(&cp, (const kvq_plan *const *)ps.data(), (int)ps.size()));
    else OK(kvq_cuda_plan_create(&cp, ps[0]));
    return cp;
}
static void free_case_plans(std::vector<kvq_plan *> &ps) {
    for (size_t h = 0; h < ps.size(); h++)
        if (h == 0 || ps[h] != ps[0]) kvq_plan_free(ps[h]);
}

/* Calibrated plans (+center, +chscale): H = 1 (kvq_cuda_plan_create) and 3 per-head plans
 * (kvq_cuda_plan_create_heads; row i coded with head i % 3), rows around each head's mean, against the
 * CPU scalar reference of that head's plan byte for byte; a row beyond float once scaled: KVQ_ERR_RANGE;
 * what is refused. */
static void test_encode_calib(bool quick) {
    static const char *specs[] = {"tq-mse:4+chscale", "tq-mse:4+center", "tq-mse:2+chscale", "tq-mse:3+chscale",
                                  "tq-mse:1+center", "q8+chscale", "q8+center", "f16+center", "rvq:2+chscale",
                                  "tq-prod:3+center", "tq-mse:4+chscale+scale32", "tq-mse:4+chscale+norot",
                                  "tcq:3+chscale", "tcq:2+center"};
    static const int dims[] = {64, 96, 128, 256};
    long long total = 0, mism = 0;
    Rng r{4321};
    for (const char *spec : specs)
        for (int d : dims) {
            if (quick && d != 128) continue;
            if (g_only_tcq && strncmp(spec, "tcq", 3)) continue;
            for (int H : {1, 3}) {
                std::vector<HeadDist> hd;
                for (int h = 0; h < H; h++) hd.push_back(head_dist(r, d));
                std::vector<kvq_plan *> ps = case_plans(spec, d, 77, 1, hd), ss(H);
                for (int h = 0; h < H; h++) OK(kvq_plan_clone_isa(&ss[h], ps[h], KVQ_ISA_SCALAR));
                kvq_cuda_plan *cp = NULL;
                const int rc = H == 1 ? kvq_cuda_plan_create(&cp, ps[0])
                                      : kvq_cuda_plan_create_heads(&cp, (const kvq_plan *const *)ps.data(), H);
                EXPECT(rc == 0, "cuda plan %s d=%d H=%d: %s", spec, d, H, kvq_strerror(rc));
                const size_t cb = kvq_plan_code_bytes(ps[0]);
                for (size_t n0 : {(size_t)3, (size_t)999}) {
                    if (rc) break;
                    const size_t n = n0 > 3 && !strncmp(spec, "tcq", 3) ? 150 : n0; /* tcq's scalar reference is slow */
                    for (int f16in = 0; f16in < 2; f16in++) {
                        std::vector<float> x;
                        fill_rows(r, x, n, d);
                        for (size_t i = 0; i < n; i++) /* around the head's mean: the zero row becomes the mean */
                            for (int c = 0; c < d; c++) x[i * d + c] += hd[i % H].mean[c];
                        std::vector<uint16_t> xh(n * d);
                        for (size_t i = 0; i < n * (size_t)d; i++) xh[i] = kvq_f32_to_f16(x[i]);
                        const void *hin = f16in ? (const void *)xh.data() : (const void *)x.data();
                        const size_t ib = n * d * (f16in ? 2 : 4), es = f16in ? 2 : 4;
                        const kvq_dtype dt = f16in ? KVQ_DTYPE_F16 : KVQ_DTYPE_F32;
                        std::vector<uint8_t> ref(n * cb), got(n * cb);
                        for (size_t i = 0; i < n; i++)
                            OK(kvq_encode(ss[i % H], (const uint8_t *)hin + i * d * es, dt, 1, &ref[i * cb]));
                        void *dx, *dc;
                        int *dst, st = -1;
                        CU(cudaMalloc(&dx, ib));
                        CU(cudaMalloc(&dc, n * cb));
                        CU(cudaMalloc(&dst, 4));
                        CU(cudaMemcpy(dx, hin, ib, cudaMemcpyHostToDevice));
                        CU(cudaMemset(dst, 0, 4));
                        OK(kvq_cuda_encode(cp, dx, dt, n, dc, dst, NULL));
                        CU(cudaMemcpy(got.data(), dc, n * cb, cudaMemcpyDeviceToHost));
                        CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
                        EXPECT(st == 0, "%s d=%d H=%d n=%zu: device status %d", spec, d, H, n, st);
                        long long m = 0;
                        for (size_t i = 0; i < n; i++) m += memcmp(&got[i * cb], &ref[i * cb], cb) != 0;
                        total += n;
                        mism += m;
                        const bool exact = !strncmp(spec, "q8", 2) || !strncmp(spec, "f16", 3);
                        EXPECT(m == 0 || (!exact && m * 1000 <= (long long)n), "%s d=%d H=%d n=%zu f16in=%d: %lld of %zu records differ",
                               spec, d, H, n, f16in, m, n);
                        CU(cudaFree(dx));
                        CU(cudaFree(dc));
                        CU(cudaFree(dst));
                    }
                }
                /* a row beyond float once centred and scaled (a > 1 on some channel): KVQ_ERR_RANGE as on the CPU */
                if (!rc && strstr(spec, "chscale")) {
                    std::vector<float> x((size_t)d, 3e38f);
                    std::vector<uint8_t> rec(cb);
                    EXPECT(kvq_encode(ss[0], x.data(), KVQ_DTYPE_F32, 1, rec.data()) == KVQ_ERR_RANGE, "%s: CPU range", spec);
                    float *dx;
                    uint8_t *dc;
                    int *dst, st = 0;
                    CU(cudaMalloc(&dx, d * 4));
                    CU(cudaMalloc(&dc, cb));
                    CU(cudaMalloc(&dst, 4));
                    CU(cudaMemcpy(dx, x.data(), d * 4, cudaMemcpyHostToDevice));
                    CU(cudaMemset(dst, 0, 4));
                    OK(kvq_cuda_encode(cp, dx, KVQ_DTYPE_F32, 1, dc, dst, NULL));
                    CU(cudaMemcpy(&st, dst, 4, cudaMemcpyDeviceToHost));
                    EXPECT(st == KVQ_ERR_RANGE, "%s d=%d: huge row status %d", spec, d, st);
                    CU(cudaFree(dx));
                    CU(cudaFree(dc));
                    CU(cudaFree(dst));
                }
                kvq_cuda_plan_free(cp);
                for (int h = 0; h < H; h++) kvq_plan_free(ss[h]);
                free_case_plans(ps);
            }
        }
    printf("encode (calibrated): %lld records, %lld differ from the scalar reference\n", total, mism);
    /* refused: +outliers; per-head plans that are not calibrated or whose inner tables differ; a layer of
     * another head count */
    {
        Rng rc{9};
        std::vector<HeadDist> hd = {head_dist(rc, 128), head_dist(rc, 128)};
        std::vector<kvq_plan *> a = case_plans("tq-mse:4+chscale", 128, 1, 1, hd), b = case_plans("tq-mse:2+chscale", 128, 1, 1, hd);
        kvq_cuda_plan *cp = NULL;
        const kvq_plan *mixed[2] = {a[0], b[1]};
        EXPECT(kvq_cuda_plan_create_heads(&cp, mixed, 2) == KVQ_ERR_INVALID_ARG, "per-head plans of two methods: INVALID_ARG");
        kvq_plan *plain[2];
        OK(kvq_plan_create(&plain[0], "tq-mse:4", 128, 1, NULL, 0));
        plain[1] = plain[0];
        EXPECT(kvq_cuda_plan_create_heads(&cp, (const kvq_plan *const *)plain, 2) == KVQ_ERR_INVALID_ARG, "uncalibrated per-head plans");
        OK(kvq_cuda_plan_create_heads(&cp, (const kvq_plan *const *)a.data(), 2));
        kvq_cuda_plan *cq;
        OK(kvq_cuda_plan_create(&cq, plain[0]));
        kvq_cuda_layer_config cfg = {cp, cq, 3, 3, 16, 0, 0};
        kvq_cuda_layer *layer = NULL;
        EXPECT(kvq_cuda_layer_create(&layer, &cfg) == KVQ_ERR_INVALID_ARG, "2 per-head K plans for 3 KV heads: INVALID_ARG");
        cfg.n_kv_heads = 2;
        cfg.n_q_heads = 4;
        EXPECT(kvq_cuda_layer_create(&layer, &cfg) == 0, "2 per-head K plans for 2 KV heads");
        kvq_cuda_layer_free(layer);
        kvq_cuda_plan_free(cp);
        kvq_cuda_plan_free(cq);
        kvq_plan_free(plain[0]);
        std::vector<float> cal(16 * 128);
        for (auto &v : cal) v = (float)rc.gauss();
        kvq_plan *o;
        OK(kvq_plan_create(&o, "tq-mse:4+outliers=8", 128, 1, cal.data(), 16));
        EXPECT(kvq_cuda_plan_create(&cp, o) == KVQ_ERR_UNSUPPORTED, "+outliers: UNSUPPORTED");
        kvq_plan_free(o);
        free_case_plans(a);
        free_case_plans(b);
    }
}

/* ---- attention --------------------------------------------------------------- */
struct AttnCase {
    const char *k, *v;
    int H, HQ, P, W;
    std::vector<int> main_len, win_len;
    int force_ct = 0; /* tiles per chunk (kvq_cuda_layer_force_chunk), 0: the library's rule */
    int d = D;        /* head dim */
    bool generic = false; /* the main pass on the generic kernel (kvq_cuda_layer_force_generic) */
    int want_gen = -1;    /* 0 / 1: the layer must run a tensor-core / the generic kernel (kvq_cuda_layer_generic) */
    int calib = 0; /* calibrated specs (+center, +chscale): K and V rows with a mean and channel scales per
                      head; 1: one CPU plan per head fitted to that head's rows (kvq_cuda_plan_create_heads),
                      2: head 0's plan for every head (kvq_cuda_plan_create) */
    int sink = 0;                /* S: f16 sink rows of the layer (kvq_cuda_layer_config.sink) */
    std::vector<int> sink_len{}; /* per sequence (with sink > 0): positions [0, sink_len) in the sink, the
                                    main_len after them in pages, then win_len in the ring */
};
/* internal (attn.cu), for the tests */
extern "C" int kvq_cuda_layer_force_chunk(kvq_cuda_layer *L, int tiles_per_chunk);
extern "C" int kvq_cuda_layer_force_generic(kvq_cuda_layer *L);
extern "C" int kvq_cuda_layer_generic(const kvq_cuda_layer *L);

/* record t of head h from field-major pages */
static void get_record(const std::vector<uint8_t> &pages, const kvq_layout &L, size_t page_bytes, size_t kv_off,
                       int H, int P, int page, int h, int s, uint8_t *rec) {
    const uint8_t *run = &pages[(size_t)page * page_bytes + kv_off + (size_t)h * P * L.bytes];
    for (int f = 0; f < L.nfield; f++)
        memcpy(rec + L.off[f], run + kvq_layout_page_offset(&L, f, P, s, 0), L.size[f]);
}

static double run_attn_case(const AttnCase &tc, uint64_t seed, bool verbose) {
    const int H = tc.H, HQ = tc.HQ, G = HQ / H, P = tc.P, W = tc.W, d = tc.d;
    const int n_seq = (int)tc.main_len.size();
    Rng r{seed};
    std::vector<HeadDist> hk, hv;
    if (tc.calib) {
        Rng rd{seed ^ 0x5eedull};
        for (int h = 0; h < H; h++) hk.push_back(head_dist(rd, d)), hv.push_back(head_dist(rd, d));
    } else {
        hk.resize(H);
        hv.resize(H);
    }
    std::vector<kvq_plan *> kps = case_plans(tc.k, d, seed + 1, tc.calib, hk), vps = case_plans(tc.v, d, seed + 2, tc.calib, hv);
    kvq_plan *kp = kps[0], *vp = vps[0];
    kvq_cuda_plan *ckp = case_cuda_plan(kps, tc.calib), *cvp = case_cuda_plan(vps, tc.calib);
    kvq_cuda_layer_config cfg = {ckp, cvp, H, HQ, P, W, tc.sink};
    kvq_cuda_layer *layer;
    OK(kvq_cuda_layer_create(&layer, &cfg));
    if (tc.force_ct) OK(kvq_cuda_layer_force_chunk(layer, tc.force_ct));
    if (tc.want_gen >= 0)
        EXPECT(kvq_cuda_layer_generic(layer) == tc.want_gen, "k=%s v=%s d=%d: served by the %s kernel, expected the %s",
               tc.k, tc.v, d, kvq_cuda_layer_generic(layer) ? "generic" : "tensor-core", tc.want_gen ? "generic" : "tensor-core");
    if (tc.generic) OK(kvq_cuda_layer_force_generic(layer));
    const size_t page_bytes = kvq_cuda_layer_page_bytes(layer);
    const size_t kb = kvq_plan_code_bytes(kp), vb = kvq_plan_code_bytes(vp);
    /* pages: every sequence's pages, shuffled in the pool */
    int max_len = 0, max_pages = 1, n_pages = 0;
    for (int s = 0; s < n_seq; s++) {
        max_len = tc.main_len[s] > max_len ? tc.main_len[s] : max_len;
        const int np = (tc.main_len[s] + P - 1) / P;
        max_pages = np > max_pages ? np : max_pages;
        n_pages += np;
    }
    std::vector<int> perm(n_pages + 1);
    for (int i = 0; i <= n_pages; i++) perm[i] = i;
    for (int i = n_pages; i > 0; i--) std::swap(perm[i], perm[(int)(r.uni() * (i + 1))]);
    std::vector<int32_t> bt((size_t)n_seq * max_pages, -1);
    int next = 0;
    for (int s = 0; s < n_seq; s++)
        for (int i = 0; i < (tc.main_len[s] + P - 1) / P; i++) bt[(size_t)s * max_pages + i] = perm[next++];
    const size_t pool = (size_t)(n_pages + 1) * page_bytes;
    /* tokens: K/V rows, stored with the GPU encoder */
    std::vector<std::vector<float>> K(n_seq), V(n_seq);
    uint8_t *dpages;
    CU(cudaMalloc(&dpages, pool));
    CU(cudaMemset(dpages, 0x7f, pool)); /* garbage beyond the written slots */
    int *dst_dev;
    CU(cudaMalloc(&dst_dev, 4));
    CU(cudaMemset(dst_dev, 0, 4));
    const size_t wbytes = kvq_cuda_layer_window_bytes(layer, n_seq);
    uint8_t *dwin = NULL, *dsink = NULL;
    if (W) {
        CU(cudaMalloc(&dwin, wbytes));
        CU(cudaMemset(dwin, 0x7f, wbytes));
    }
    const size_t sbytes = kvq_cuda_layer_sink_bytes(layer, n_seq);
    if (tc.sink) {
        CU(cudaMalloc(&dsink, sbytes));
        CU(cudaMemset(dsink, 0x7f, sbytes)); /* garbage beyond the written rows */
    }
    /* a sequence's rows by position: ns in the sink, nm in pages (page position t: position ns + t), nw in
     * the ring (position ns + nm + t) */
    auto nsink = [&](int s) { return tc.sink ? tc.sink_len[s] : 0; };
    for (int s = 0; s < n_seq; s++) {
        const int ns = nsink(s), n = ns + tc.main_len[s] + (W ? tc.win_len[s] : 0);
        K[s].resize((size_t)n * H * d);
        V[s].resize((size_t)n * H * d);
        for (int t = 0; t < n; t++) {
            const double km = exp(r.uni() - 0.5);
            for (int i = 0; i < H * d; i++) {
                if (tc.calib) {
                    K[s][(size_t)t * H * d + i] = head_value(r, hk[i / d], i % d, km);
                    V[s][(size_t)t * H * d + i] = head_value(r, hv[i / d], i % d, 1.0);
                    continue;
                }
                K[s][(size_t)t * H * d + i] = (float)(r.gauss() * km);
                V[s][(size_t)t * H * d + i] = (float)r.gauss();
            }
        }
        const int nm = tc.main_len[s];
        if (nm) {
            std::vector<int32_t> slots(nm);
            for (int t = 0; t < nm; t++) slots[t] = bt[(size_t)s * max_pages + t / P] * P + t % P;
            float *dx;
            int32_t *dslot;
            CU(cudaMalloc(&dx, (size_t)nm * H * d * 4));
            CU(cudaMalloc(&dslot, nm * 4));
            CU(cudaMemcpy(dslot, slots.data(), nm * 4, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(dx, &K[s][(size_t)ns * H * d], (size_t)nm * H * d * 4, cudaMemcpyHostToDevice));
            OK(kvq_cuda_store_pages(layer, 0, dpages, dx, KVQ_DTYPE_F32, nm, dslot, dst_dev, NULL));
            CU(cudaMemcpy(dx, &V[s][(size_t)ns * H * d], (size_t)nm * H * d * 4, cudaMemcpyHostToDevice));
            OK(kvq_cuda_store_pages(layer, 1, dpages, dx, KVQ_DTYPE_F32, nm, dslot, dst_dev, NULL));
            CU(cudaDeviceSynchronize());
            CU(cudaFree(dx));
            CU(cudaFree(dslot));
        }
        /* rows [p0, p0 + cnt) of sequence s as f16 into the ring (kvq_cuda_store_window) or the sink */
        auto store_f16 = [&](bool to_sink, int p0, int cnt) {
            std::vector<int32_t> sq(cnt, s), pos(cnt);
            for (int t = 0; t < cnt; t++) pos[t] = p0 + t;
            float *dx;
            int32_t *dsq, *dpos;
            CU(cudaMalloc(&dx, (size_t)cnt * H * d * 4));
            CU(cudaMalloc(&dsq, cnt * 4));
            CU(cudaMalloc(&dpos, cnt * 4));
            CU(cudaMemcpy(dsq, sq.data(), cnt * 4, cudaMemcpyHostToDevice));
            CU(cudaMemcpy(dpos, pos.data(), cnt * 4, cudaMemcpyHostToDevice));
            for (int kv = 0; kv < 2; kv++) {
                CU(cudaMemcpy(dx, &(kv ? V : K)[s][(size_t)p0 * H * d], (size_t)cnt * H * d * 4, cudaMemcpyHostToDevice));
                if (to_sink) OK(kvq_cuda_store_sink(layer, kv, dsink, dx, KVQ_DTYPE_F32, cnt, dsq, dpos, dst_dev, NULL));
                else OK(kvq_cuda_store_window(layer, kv, dwin, dx, KVQ_DTYPE_F32, cnt, dsq, dpos, dst_dev, NULL));
                CU(cudaDeviceSynchronize());
            }
            CU(cudaFree(dx));
            CU(cudaFree(dsq));
            CU(cudaFree(dpos));
        };
        if (W && tc.win_len[s]) store_f16(false, ns + nm, tc.win_len[s]);
        /* every position to the sink, as a store passes every appended token: those from S on store nothing */
        if (tc.sink && n) store_f16(true, 0, n);
    }
    int st;
    CU(cudaMemcpy(&st, dst_dev, 4, cudaMemcpyDeviceToHost));
    EXPECT(st == 0, "store status %d", st);
    /* queries and the GPU result */
    std::vector<float> q((size_t)n_seq * HQ * d), out(q.size(), NAN);
    for (auto &v : q) v = (float)r.gauss();
    float *dq, *dout;
    int32_t *dbt, *dml, *dwl, *dsl;
    CU(cudaMalloc(&dq, q.size() * 4));
    CU(cudaMalloc(&dout, q.size() * 4));
    CU(cudaMalloc(&dbt, bt.size() * 4));
    CU(cudaMalloc(&dml, n_seq * 4));
    CU(cudaMalloc(&dwl, n_seq * 4));
    CU(cudaMalloc(&dsl, n_seq * 4));
    CU(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemset(dout, 0xff, q.size() * 4)); /* NaN poison */
    CU(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dml, tc.main_len.data(), n_seq * 4, cudaMemcpyHostToDevice));
    if (W) CU(cudaMemcpy(dwl, tc.win_len.data(), n_seq * 4, cudaMemcpyHostToDevice));
    if (tc.sink) CU(cudaMemcpy(dsl, tc.sink_len.data(), n_seq * 4, cudaMemcpyHostToDevice));
    kvq_cuda_batch b = {n_seq, dpages, dbt, max_pages, dml, W ? dwl : NULL, dwin, max_len, NULL, tc.sink ? dsl : NULL,
                        dsink};
    const float scale = 1.0f / sqrtf((float)d);
    OK(kvq_cuda_attend(layer, &b, dq, scale, dout, NULL));
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<uint8_t> pages(pool);
    CU(cudaMemcpy(pages.data(), dpages, pool, cudaMemcpyDeviceToHost));
    /* CPU reference on the same bytes */
    kvq_plan_tables kt, vt;
    OK(kvq_plan_export(kp, &kt));
    OK(kvq_plan_export(vp, &vt));
    const kvq_layout KL = kvq_layout_make(kt.kind, d, kt.bits, kt.m, kt.scale_bytes);
    const kvq_layout VL = kvq_layout_make(vt.kind, d, vt.bits, vt.m, vt.scale_bytes);
    double worst = 0, worst_cpu = 0, agg_num = 0, agg_den = 0;
    const size_t qf = kvq_plan_query_floats(kp);
    const float kconst = kt.m ? sqrtf(3.14159265358979323846f / 2) / (float)kt.m : 0.f;
    for (int s = 0; s < n_seq; s++) {
        /* nw: the f16 rows (the window pass's), f16 row t at position frow(t): the sink's, then the ring's */
        const int ns = nsink(s), nm = tc.main_len[s], nw = ns + (W ? tc.win_len[s] : 0);
        auto frow = [&](int t) { return (size_t)(t < ns ? t : nm + t); };
        for (int h = 0; h < H; h++) {
            kvq_plan *kp = kps[h], *vp = vps[h]; /* the head's (calibrated) plans */
            std::vector<uint8_t> krec((size_t)nm * kb), vrec((size_t)nm * vb);
            for (int t = 0; t < nm; t++) {
                const int page = bt[(size_t)s * max_pages + t / P];
                get_record(pages, KL, page_bytes, 0, H, P, page, h, t % P, &krec[(size_t)t * kb]);
                get_record(pages, VL, page_bytes, (size_t)H * P * kb, H, P, page, h, t % P, &vrec[(size_t)t * vb]);
            }
            if (tc.calib && nm) { /* the paged records of calibrated plans: the CPU scalar reference's bytes */
                kvq_plan *ks, *vs;
                OK(kvq_plan_clone_isa(&ks, kp, KVQ_ISA_SCALAR));
                OK(kvq_plan_clone_isa(&vs, vp, KVQ_ISA_SCALAR));
                std::vector<float> xk((size_t)nm * d), xv((size_t)nm * d);
                for (int t = 0; t < nm; t++)
                    for (int c = 0; c < d; c++) {
                        xk[(size_t)t * d + c] = K[s][((size_t)(ns + t) * H + h) * d + c];
                        xv[(size_t)t * d + c] = V[s][((size_t)(ns + t) * H + h) * d + c];
                    }
                std::vector<uint8_t> ck((size_t)nm * kb), cv((size_t)nm * vb);
                OK(kvq_encode(ks, xk.data(), KVQ_DTYPE_F32, nm, ck.data()));
                OK(kvq_encode(vs, xv.data(), KVQ_DTYPE_F32, nm, cv.data()));
                int mk = 0, mv = 0;
                for (int t = 0; t < nm; t++) {
                    mk += memcmp(&ck[(size_t)t * kb], &krec[(size_t)t * kb], kb) != 0;
                    mv += memcmp(&cv[(size_t)t * vb], &vrec[(size_t)t * vb], vb) != 0;
                }
                EXPECT(mk * 1000 <= nm && mv * 1000 <= nm, "calibrated k=%s v=%s d=%d seq %d head %d: %d K, %d V of %d paged records differ",
                       tc.k, tc.v, d, s, h, mk, mv, nm);
                kvq_plan_free(ks);
                kvq_plan_free(vs);
            }
            for (int gq = 0; gq < G; gq++) {
                const int hq = h * G + gq;
                std::vector<float> qs(d), qp(qf), sc(nm + nw), scpu(nm + nw);
                for (int c = 0; c < d; c++) qs[c] = q[((size_t)s * HQ + hq) * d + c] * scale;
                OK(kvq_query_prepare(kp, qs.data(), qp.data()));
                if (nm) OK(kvq_score(kp, qp.data(), 1, krec.data(), nm, scpu.data()));
                /* exact scores (double) from the same codes: decode, or the estimators of tq-prod / qjl
                 * (the CPU kvq_score of tq methods rounds the query to 8 bits: reported apart) */
                std::vector<double> sq(kt.m);
                if (kt.kind == KVQ_LAY_TQPROD || kt.kind == KVQ_LAY_QJL) {
                    const float *qv = kt.kind == KVQ_LAY_QJL ? qs.data() : qp.data(); /* q~ = R q first */
                    for (int j = 0; j < kt.m; j++) {
                        double a = 0;
                        for (int c = 0; c < d; c++) a += (double)kt.S[(size_t)j * d + c] * qv[c];
                        sq[j] = a;
                    }
                }
                for (int t = 0; t < nm; t++) {
                    const uint8_t *rec = &krec[(size_t)t * kb];
                    double a = 0;
                    if (kt.kind == KVQ_LAY_TQPROD || kt.kind == KVQ_LAY_QJL) {
                        const int so = kt.kind == KVQ_LAY_QJL ? KL.off[1] : KL.off[3];
                        const int no = kt.kind == KVQ_LAY_QJL ? KL.off[0] : KL.off[2];
                        double sg = 0;
                        for (int j = 0; j < kt.m; j++) sg += ((rec[so + j / 8] >> (j % 8)) & 1) ? sq[j] : -sq[j];
                        a = (double)kconst * h2f(rec[no] | rec[no + 1] << 8) * sg;
                        if (kt.kind == KVQ_LAY_TQPROD) {
                            const double gam = h2f(rec[0] | rec[1] << 8);
                            for (int c = 0; c < d; c++) a += gam * kt.c1[strided_get(rec + KL.off[1], d, kt.bits, c)] * qp[c];
                        }
                    } else {
                        float kd[512];
                        OK(kvq_decode(kp, rec, 1, kd));
                        for (int c = 0; c < d; c++) a += (double)qs[c] * kd[c];
                    }
                    sc[t] = (float)a;
                }
                for (int t = 0; t < nw; t++) {
                    double a = 0;
                    for (int c = 0; c < d; c++)
                        a += (double)qs[c] * f16r(K[s][(frow(t) * H + h) * d + c]);
                    sc[nm + t] = (float)a;
                }
                for (int t = 0; t < nw; t++) scpu[nm + t] = sc[nm + t];
                double rels[2];
                for (int pass = 0; pass < 2; pass++) { /* 0: exact reference, 1: CPU kvq_score scores */
                    const std::vector<float> &S = pass ? scpu : sc;
                    double M = -INFINITY, L = 0;
                    for (int i = 0; i < nm + nw; i++) M = fmax(M, S[i]);
                    std::vector<double> pr(nm + nw);
                    for (int i = 0; i < nm + nw; i++) L += (pr[i] = exp(S[i] - M));
                    std::vector<double> ref(d, 0.0);
                    for (int t = 0; t < nm; t++) {
                        float vd[512];
                        OK(kvq_decode(vp, &vrec[(size_t)t * vb], 1, vd));
                        for (int c = 0; c < d; c++) ref[c] += pr[t] * vd[c];
                    }
                    for (int t = 0; t < nw; t++)
                        for (int c = 0; c < d; c++) ref[c] += pr[nm + t] * (double)f16r(V[s][(frow(t) * H + h) * d + c]);
                    double num = 0, den = 0;
                    for (int c = 0; c < d; c++) {
                        const double rf = L > 0 ? ref[c] / L : 0;
                        const double got = out[((size_t)s * HQ + hq) * d + c];
                        num += (got - rf) * (got - rf);
                        den += rf * rf;
                        if (!(got == got)) num = INFINITY;
                    }
                    rels[pass] = nm + nw == 0 ? sqrt(num) : sqrt(num / (den > 0 ? den : 1e-30));
                    if (pass == 0) agg_num += num, agg_den += den;
                    if (pass == 0 && g_debug && rels[0] > 1e-3 && g_dbg_lines < 12) {
                        g_dbg_lines++;
                        printf("    seq %d (len %d + f16 %d) head %d q %d: err %.3e got %.4f %.4f %.4f want %.4f %.4f %.4f\n", s, nm, nw,
                               h, hq, rels[0], out[((size_t)s * HQ + hq) * d], out[((size_t)s * HQ + hq) * d + 1],
                               out[((size_t)s * HQ + hq) * d + 2], ref[0] / L, ref[1] / L, ref[2] / L);
                    }
                }
                if (rels[0] > worst) worst = rels[0];
                if (rels[1] > worst_cpu) worst_cpu = rels[1];
            }
        }
    }
    if (verbose) {
        printf("  attn k=%-10s v=%-10s d=%3d H=%d HQ=%2d P=%3d W=%2d S=%d seqs=%d max_len=%6d: rel err %.2e, worst row %.2e "
               "(worst row vs the CPU kvq_score path: %.2e)\n",
               tc.k, tc.v, d, H, HQ, P, W, tc.sink, n_seq, max_len, sqrt(agg_num / (agg_den > 0 ? agg_den : 1)), worst, worst_cpu);
        fflush(stdout);
    }
    /* f16 tensor-core inputs (rotated query, centroids, probabilities): the relative L2 error of all
     * outputs of a case is <= 1e-3 (measured 3e-4..7e-4); a single output row may reach ~1e-3 */
    EXPECT(sqrt(agg_num / (agg_den > 0 ? agg_den : 1)) <= 1e-3, "attention k=%s v=%s d=%d HQ=%d: rel err %.3e", tc.k, tc.v, d, HQ,
           sqrt(agg_num / (agg_den > 0 ? agg_den : 1)));
    EXPECT(worst <= 2e-3, "attention k=%s v=%s d=%d HQ=%d: worst row rel err %.3e", tc.k, tc.v, d, HQ, worst);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dbt);
    cudaFree(dml);
    cudaFree(dwl);
    cudaFree(dsl);
    cudaFree(dpages);
    cudaFree(dwin);
    cudaFree(dsink);
    cudaFree(dst_dev);
    kvq_cuda_layer_free(layer);
    kvq_cuda_plan_free(ckp);
    kvq_cuda_plan_free(cvp);
    free_case_plans(kps);
    free_case_plans(vps);
    return worst;
}

/* Case i of a list of pairs: 2 KV heads, 8 / 6 / 2 / 16 query heads and pages of 16 / 64 / 256 tokens
 * in turn, window W (the lists' cases share their lengths). */
static AttnCase varied_case(const char *k, const char *v, int i, int W, const std::vector<int> &lens,
                            const std::vector<int> &wl) {
    const int HQs[] = {8, 6, 2, 16};
    return AttnCase{k, v, 2, HQs[i % 4], (i % 3 == 0) ? 16 : (i % 3 == 1) ? 64 : 256, W, lens, wl};
}

static void test_attention(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 1000, 0, 2500}, wl = {0, 5, 32, 1, 7, 32};
    const std::vector<int> lens0(lens.size(), 0);
    struct {
        const char *k, *v;
    } pairs[] = {{"f16", "f16"},         {"q8", "q8"},           {"tq-mse:4", "tq-mse:4"}, {"tq-mse:2", "tq-mse:2"},
                 {"tq-mse:1", "tq-mse:1"}, {"rvq:1", "rvq:1"},   {"rvq:2", "rvq:2"},       {"rvq:4", "rvq:4"},
                 {"tq-prod:2", "tq-mse:1"}, {"tq-prod:3", "tq-mse:2"}, {"tq-prod:5", "tq-mse:4"}, {"qjl", "tq-mse:4"},
                 {"tq-mse:4", "q8"},       {"q8", "tq-mse:4"},   {"f16", "tq-mse:2"},      {"tq-mse:4", "f16"},
                 {"tq-mse:4+norot", "tq-mse:4+norot"}, {"tq-mse:4", "rvq:2"}, {"rvq:2", "q8"},
                 {"tq-mse:4", "tq-mse:2"}, {"tq-mse:2", "tq-mse:4"}};
    uint64_t seed = 100;
    int i = 0;
    for (auto &pr : pairs) {
        AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
        if (quick && i > 4) break;
        run_attn_case(tc, seed++, true);
        i++;
    }
    /* the f16 window alone: one token (output = its value), a few, a tile and one */
    for (int wlen : {1, 2, 16, 17}) {
        AttnCase w1 = {"f16", "f16", 1, 1, 16, 32, {0}, {wlen}};
        run_attn_case(w1, seed++, true);
    }
    AttnCase w2 = {"f16", "f16", 2, 8, 16, 32, {16, 5}, {1, 32}};
    run_attn_case(w2, seed++, true);
    /* grouped-query shapes, window only, long contexts (many chunks) */
    AttnCase g12 = {"tq-mse:4", "tq-mse:4", 2, 24, 64, 16, {33, 700}, {16, 3}};
    run_attn_case(g12, seed++, true);
    AttnCase g1 = {"tq-mse:2", "tq-mse:2", 3, 3, 32, 0, {129, 64, 1}, {}};
    run_attn_case(g1, seed++, true);
    AttnCase wonly = {"q8", "tq-mse:4", 1, 4, 16, 64, {0, 0}, {64, 17}};
    run_attn_case(wonly, seed++, true);
    if (!quick) {
        AttnCase big = {"tq-mse:4", "tq-mse:4", 8, 32, 256, 128, {32768, 4097}, {128, 100}};
        run_attn_case(big, seed++, true);
        AttnCase bigf = {"f16", "f16", 8, 32, 256, 0, {20000}, {}};
        run_attn_case(bigf, seed++, true);
    }
    /* chunks of 64 tiles per warp (the wide-table kernels' second page register: tq-mse:4/4 and,
     * since session 15, tq-mse:2/2), and of 32, forced: the rule picks them only for large batches */
    /* two 4-bit tables: the classic kernel (one table: the wide-table kernel); own seeds, so
     * that the cases above keep theirs */
    AttnCase gauss = {"tq-mse:4", "tq-mse:4+cb=gauss", 2, 16, 64, 32, lens, wl};
    run_attn_case(gauss, 9000, true);
    AttnCase c64 = {"tq-mse:4", "tq-mse:4", 2, 8, 128, 0, {9000, 8200, 17}, {}, 512};
    run_attn_case(c64, 9001, true);
    AttnCase c32 = {"tq-mse:2", "tq-mse:2", 2, 8, 128, 0, {9000, 4100}, {}, 256};
    run_attn_case(c32, 9002, true);
    AttnCase c64b = {"tq-mse:2", "tq-mse:2", 2, 8, 128, 0, {9000, 8200, 17}, {}, 512};
    run_attn_case(c64b, 9007, true);
    AttnCase c64c = {"tq-mse:4", "tq-mse:2", 2, 8, 128, 0, {9000, 8200, 17}, {}, 512}; /* the wide 4/2 kernel */
    run_attn_case(c64c, 9008, true);
    AttnCase c64d = {"tq-mse:2", "tq-mse:4", 2, 8, 128, 0, {9000, 8200, 17}, {}, 512}; /* the wide 2/4 kernel */
    run_attn_case(c64d, 9009, true);
    AttnCase c64e = {"tq-mse:3", "tq-mse:3", 2, 8, 128, 0, {9000, 8200, 17}, {}, 512}; /* the wide 3/3 kernel */
    run_attn_case(c64e, 9010, true);
    /* two 2-bit tables: the classic kernel's nibble tables (one table, as in the cases above: the
     * wide kernel on the 2-bit byte table, attn_kernel_wide<2>) */
    AttnCase gauss2 = {"tq-mse:2", "tq-mse:2+cb=gauss", 2, 16, 64, 32, lens, wl};
    run_attn_case(gauss2, 9003, true);
    /* the merge's chunk slices and block reductions (attn.cu, merge_q_kernel): many short chunks
     * forced (2 tiles per warp on the wide-table kernel: 79 chunks; 1 per warp on q8: 141, with the
     * window), and at d = 32 more chunks (141) than the merge block's 4 x 32 threads */
    AttnCase m79 = {"tq-mse:4", "tq-mse:4", 2, 8, 128, 0, {20000, 300}, {}, 16};
    run_attn_case(m79, 9004, true);
    AttnCase m141 = {"q8", "q8", 2, 8, 128, 32, {9000, 17}, {3, 32}, 4};
    run_attn_case(m141, 9005, true);
    AttnCase m32 = {"tq-mse:4", "tq-mse:4", 1, 4, 64, 32, {9000, 100}, {5, 0}, 4};
    m32.d = 32;
    run_attn_case(m32, 9006, true);
}

/* Calibrated plans (+center, +chscale; docs/CUDA.md "Calibrated plans"): K and V rows with a mean and
 * channel scales per head, one CPU plan fitted per head (calib 1) or one for all (calib 2), with and
 * without the f16 window (the merge's shift of the main chunks by q . mean, its mean term of V), the
 * tensor-core kernels at d = 64 / 128 / 256 and the generic kernel. */
static void test_attention_calib(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 1000, 0, 2500}, wl = {0, 5, 32, 1, 7, 32};
    struct {
        const char *k, *v;
        int d;
    } pairs[] = {{"tq-mse:4+chscale", "tq-mse:4", 128},          {"tq-mse:4+chscale", "tq-mse:4+chscale", 128},
                 {"tq-mse:2+chscale", "tq-mse:2+center", 128},   {"q8+chscale", "q8+center", 128},
                 {"tq-mse:4+center", "f16", 128},                {"f16+center", "tq-mse:2+chscale", 128},
                 {"tq-mse:4+chscale", "tq-mse:4", 64},           {"q8+chscale", "tq-mse:2+chscale", 64},
                 {"tq-mse:4+chscale", "tq-mse:4+chscale", 256}, {"tq-mse:2+center", "q8+chscale", 256},
                 {"tq-mse:3+chscale", "tq-mse:4+center", 128},   {"tq-mse:3+chscale", "tq-mse:3+center", 96}};
    uint64_t seed = 7000;
    int i = 0;
    for (auto &pr : pairs)
        for (int W : {0, 32}) {
            AttnCase tc = varied_case(pr.k, pr.v, i, W, lens, wl);
            tc.d = pr.d;
            tc.calib = (i % 5 == 4) ? 2 : 1;
            i++;
            if (quick && (i % 3) != 1) continue;
            run_attn_case(tc, seed++, true);
        }
    /* many chunks, grouped queries, the window: the main chunks' shift against the window's scores */
    AttnCase g = {"tq-mse:4+chscale", "tq-mse:4", 4, 16, 64, 16, {33, 7000}, {16, 3}};
    g.calib = 1;
    run_attn_case(g, seed++, true);
}

/* The generic kernel (attn_kernel_gen.cuh): the head dims 32, 64, 96 (dense rotation) and 256, and at
 * 128 the records the tensor-core kernels do not read (5..8-bit and rvq / tq-prod 3-bit stages, f32
 * scales, QJL m != d) and tq-mse:3 moved to it (the classic kernel serves it: test_attention_tq3). */
static void test_attention_generic(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 1000, 0, 2500}, wl = {0, 5, 32, 1, 7, 32};
    struct {
        const char *k, *v;
    } pairs[] = {{"tq-mse:4", "tq-mse:4"}, {"tq-mse:3", "tq-mse:3"}, {"tq-mse:2", "tq-mse:2"},
                 {"tq-mse:1", "tq-mse:1"}, {"q8", "q8"},             {"f16", "f16"},
                 {"rvq:3", "rvq:2"},       {"tq-prod:3", "tq-mse:3"}, {"qjl", "tq-mse:4"},
                 {"tq-mse:4+scale32", "tq-mse:3+scale32"}, {"tq-mse:3+norot", "q8"}, {"tq-mse:8", "tq-mse:5"}};
    uint64_t seed = 5000;
    int i = 0;
    for (int d : {64, 96, 256, 32}) {
        for (auto &pr : pairs) {
            AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
            tc.d = d;
            i++;
            if (quick && (i % 4) != 1) continue;
            run_attn_case(tc, seed++, true);
        }
    }
    /* d = 128 with a stage the tensor-core kernels do not read: the generic kernel (forced for tq-mse:3,
     * which the classic kernel now reads) */
    const char *p128[][2] = {{"tq-mse:3", "tq-mse:3"}, {"tq-mse:3", "tq-mse:4"}, {"tq-mse:4", "tq-mse:3"},
                             {"rvq:3", "rvq:3"},       {"tq-mse:6", "tq-mse:7"}, {"tq-mse:4+scale32", "tq-mse:4"},
                             {"qjl:64", "tq-mse:2"},   {"tq-prod:4", "tq-mse:3"}};
    for (auto &pr : p128) {
        AttnCase tc = {pr[0], pr[1], 2, 8, 64, (i % 2) ? 32 : 0, lens, wl};
        tc.generic = true;
        i++;
        run_attn_case(tc, seed++, true);
    }
    /* many chunks, grouped queries */
    AttnCase g = {"tq-mse:3", "tq-mse:3", 2, 24, 64, 16, {33, 7000}, {16, 3}};
    g.d = 256;
    g.generic = true;
    run_attn_case(g, seed++, true);
    AttnCase g96 = {"tq-mse:4", "tq-mse:2", 3, 3, 32, 0, {129, 64, 1}, {}};
    g96.d = 96;
    run_attn_case(g96, seed++, true);
    /* the tensor-core kernels at d = 64 and 256 (issue 17): mixed K/V pairs, and many chunks with
     * two query groups and the window (d = 256 once rescaled only half of O on a new max) */
    const char *pfast[][2] = {{"q8", "tq-mse:2"}, {"tq-mse:4", "tq-mse:2"}, {"f16", "tq-mse:4"}, {"tq-mse:2", "q8"}};
    for (int d : {64, 256})
        for (auto &pr : pfast) {
            AttnCase tc = {pr[0], pr[1], 2, 8, 64, (i % 2) ? 32 : 0, lens, wl};
            tc.d = d;
            i++;
            run_attn_case(tc, seed++, true);
        }
    for (const char *sp : {"f16", "tq-mse:4"}) {
        AttnCase g256 = {sp, sp, 2, 24, 64, 16, {33, 7000}, {16, 3}};
        g256.d = 256;
        run_attn_case(g256, seed++, true);
    }
    /* a tensor-core pair moved to the generic kernel (the benchmarks' baseline) */
    AttnCase fg = {"tq-mse:4", "tq-mse:2", 2, 8, 64, 32, {1, 300, 2500}, {0, 5, 32}};
    fg.d = 256;
    fg.generic = true;
    run_attn_case(fg, seed++, true);
    if (!quick) {
        AttnCase big = {"tq-mse:3", "tq-mse:3", 4, 16, 256, 64, {32768, 4097}, {64, 10}};
        big.d = 64;
        big.generic = true;
        run_attn_case(big, seed++, true);
    }
    /* what no kernel serves: an error, nothing launched */
    {
        kvq_plan *kp;
        OK(kvq_plan_create(&kp, "tq-mse:4", 512, 1, NULL, 0));
        kvq_cuda_plan *ck;
        OK(kvq_cuda_plan_create(&ck, kp));
        kvq_cuda_layer_config cfg = {ck, ck, 1, 1, 16, 0, 0};
        kvq_cuda_layer *layer = NULL;
        EXPECT(kvq_cuda_layer_create(&layer, &cfg) == KVQ_ERR_UNSUPPORTED_DIM, "d = 512 attention: UNSUPPORTED_DIM");
        kvq_cuda_plan_free(ck);
        kvq_plan_free(kp);
        if (!kvq_plan_create(&kp, "tq-mse:4", 80, 1, NULL, 0)) { /* d % 32 != 0: not served */
            EXPECT(kvq_cuda_plan_create(&ck, kp) == KVQ_ERR_UNSUPPORTED_DIM, "d = 80 encode: UNSUPPORTED_DIM");
            kvq_plan_free(kp);
        }
    }
}

/* tcq:k in the generic kernel (attn_kernel_gen.cuh, gen_tcq_state): K and V at k = 1..4, mixed with
 * the other methods, at d = 64, 96 (dense rotation), 128, 256; calibrated (+chscale), and the README's
 * policy pair tq-mse:5+chscale / tcq:3 (its sink=1 is the Python store's, not the layer's). Since the
 * classic kernel serves tcq:2/3/4 at d = 64, 128, 256 (test_attention_tcq_tc), the cases of those
 * (f16 scales, both sides classic formats) run there. */
static void test_attention_tcq(bool quick) {
    /* shorter sequences than test_attention's: the CPU reference encodes every tcq record by its
     * Viterbi search (~1-4 ms a vector), which made these cases most of test_cuda's time */
    const std::vector<int> lens = {1, 17, 300, 640, 0, 900}, wl = {0, 5, 32, 1, 7, 32};
    struct {
        const char *k, *v;
        int d, calib;
    } pairs[] = {{"tcq:1", "tcq:1", 128, 0},          {"tcq:2", "tcq:2", 128, 0},
                 {"tcq:3", "tcq:3", 128, 0},          {"tcq:4", "tcq:4", 128, 0},
                 {"tq-mse:4", "tcq:2", 128, 0},       {"tcq:3", "q8", 128, 0},
                 {"tcq:2+scale32", "tcq:4", 128, 0},  {"tcq:2", "tcq:3", 64, 0},
                 {"tcq:3", "tcq:2", 96, 0},           {"tcq:4", "tq-mse:2", 256, 0},
                 {"tq-mse:5+chscale", "tcq:3", 128, 1}, {"tq-mse:5+chscale", "tcq:3", 64, 1},
                 {"tcq:3+chscale", "tcq:2", 128, 1},  {"tcq:2+chscale", "tcq:2+chscale", 256, 1},
                 {"tcq:1+chscale", "tcq:1+center", 128, 2}, {"tcq:4+chscale", "tcq:4+chscale", 128, 1}};
    uint64_t seed = 11000;
    int i = 0;
    for (auto &pr : pairs) {
        AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
        tc.d = pr.d;
        tc.calib = pr.calib;
        i++;
        if (quick && (i % 3) != 1) continue;
        run_attn_case(tc, seed++, true);
    }
    /* the README pair with many chunks, grouped queries and the window */
    AttnCase g = {"tq-mse:5+chscale", "tcq:3", 4, 16, 64, 16, {33, 2600}, {16, 3}};
    g.calib = 1;
    run_attn_case(g, seed++, true);
}

/* tcq:2/3/4 on the classic kernel (attn_tcq.cuh): at d = 128 K and V alone, together and beside every
 * other classic format (each case asserts the tensor-core kernel), +norot; at d = 64 and 256 beside the
 * formats of those dims; chunk boundaries (chunks of 16 tiles forced: 256 tokens; d = 64, 128, 256),
 * grouped queries with many chunks and the window, calibrated plans (one plan per head and one for all),
 * the generic kernel's result on the same cases (forced), the README's pair tq-mse:5+chscale/tcq:3 (classic
 * at d = 128 with the tq-mse:5 keys of attn_tq5.cuh), and what stays generic (tcq:1, +scale32, d = 96,
 * tq-mse:5 keys at d = 64). Seeds from 17000. Short sequences: the CPU reference encodes
 * every tcq record by its Viterbi search. */
static void test_attention_tcq_tc(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 640, 0, 900}, wl = {0, 5, 32, 1, 7, 32};
    struct {
        const char *k, *v;
    } pairs[] = {{"tcq:2", "tcq:2"},       {"tcq:3", "tcq:3"},         {"tcq:4", "tcq:4"},
                 {"tq-mse:4", "tcq:3"},    {"q8", "tcq:3"},            {"tcq:3", "tq-mse:4"},
                 {"tcq:3", "q8"},          {"f16", "tcq:4"},           {"tcq:2", "f16"},
                 {"tq-mse:2", "tcq:2"},    {"tcq:4", "tq-mse:2"},      {"tq-mse:3", "tcq:3"},
                 {"tcq:3", "tq-mse:3"},    {"tcq:2", "tcq:4"},         {"tcq:4", "tcq:2"},
                 {"rvq:2", "tcq:3"},       {"tcq:3", "rvq:4"},         {"tq-prod:3", "tcq:2"},
                 {"qjl", "tcq:4"},         {"tcq:4", "tq-mse:1"},      {"tq-mse:1", "tcq:4"},
                 {"tcq:3+norot", "tcq:3+norot"}, {"tcq:2", "tcq:3"}, {"tcq:3", "tcq:4"}};
    uint64_t seed = 17000;
    int i = 0;
    for (auto &pr : pairs) {
        AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
        tc.want_gen = 0;
        i++;
        if (quick && (i % 3) != 1) continue;
        run_attn_case(tc, seed++, true);
    }
    /* head dims 64 (runs of odd k start inside words: the funnel-shift alignment) and 256 */
    const struct {
        const char *k, *v;
    } dpairs[] = {{"tcq:3", "tcq:3"}, {"tcq:2", "tcq:4"},    {"tq-mse:4", "tcq:3"}, {"tcq:4", "q8"},
                  {"f16", "tcq:2"},   {"tcq:3", "tq-mse:3"}, {"tq-mse:2", "tcq:3"}, {"tcq:4", "tcq:2"}};
    for (int d : {64, 256})
        for (auto &pr : dpairs) {
            AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
            tc.d = d;
            tc.want_gen = 0;
            i++;
            if (quick && (i % 3) != 1) continue;
            run_attn_case(tc, seed++, true);
        }
    /* chunk boundaries: chunks of 16 tiles (256 tokens) forced, lengths on both sides of them and of
     * pages and tiles (P = 64), with and without the window */
    const std::vector<int> edge = {255, 256, 257, 511, 513, 15, 16, 63, 65};
    const std::vector<int> edge_w = {3, 0, 32, 1, 17, 0, 5, 31, 2};
    AttnCase e33 = {"tcq:3", "tcq:3", 1, 8, 64, 32, edge, edge_w, 16};
    e33.want_gen = 0;
    run_attn_case(e33, seed++, true);
    AttnCase e24 = {"tcq:2", "tcq:4", 1, 16, 64, 0, edge, {}, 16};
    e24.want_gen = 0;
    run_attn_case(e24, seed++, true);
    AttnCase e43 = {"tq-mse:4", "tcq:3", 1, 3, 32, 32, edge, edge_w, 16};
    e43.want_gen = 0;
    run_attn_case(e43, seed++, true);
    for (int d : {64, 256}) {
        AttnCase ed = {"tcq:3", "tcq:3", 1, 8, 64, 32, edge, edge_w, 16};
        ed.d = d;
        ed.want_gen = 0;
        run_attn_case(ed, seed++, true);
    }
    /* grouped queries (3 groups of 8), many chunks by the rule, the window */
    AttnCase g = {"tcq:3", "tcq:3", 2, 24, 64, 16, {33, 2600}, {16, 3}};
    g.want_gen = 0;
    run_attn_case(g, seed++, true);
    /* calibrated plans (the records are the inner plan's): per head, and one for all; shorter sequences (the
     * test compares their paged records with the CPU scalar reference's, whose tcq Viterbi search is slow) */
    const std::vector<int> clens = {1, 17, 300, 0, 450}, cwl = {0, 5, 32, 7, 32};
    const struct {
        const char *k, *v;
        int calib;
    } cal[] = {{"tcq:3+chscale", "tcq:3+center", 1}, {"tq-mse:4+chscale", "tcq:3+chscale", 2},
               {"tcq:4+chscale", "tcq:2+chscale", 1}, {"tcq:2+center", "q8", 2}};
    for (auto &c : cal) {
        AttnCase tc = {c.k, c.v, 2, 8, 64, 32, clens, cwl};
        tc.calib = c.calib;
        tc.want_gen = 0;
        run_attn_case(tc, seed++, true);
    }
    for (int d : {64, 256}) {
        AttnCase tc = {"tcq:3+chscale", "tcq:2+chscale", 2, 8, 64, 32, clens, cwl};
        tc.d = d;
        tc.calib = 1;
        tc.want_gen = 0;
        run_attn_case(tc, seed++, true);
    }
    /* the same cases on the generic kernel (forced: its f32 baseline; both against the reference) */
    for (const char *v : {"tcq:3", "tcq:2"}) {
        AttnCase fg = {"tcq:3", v, 2, 8, 64, 32, {1, 300, 900}, {0, 5, 32}};
        fg.want_gen = 0;
        const uint64_t sd = seed++;
        run_attn_case(fg, sd, true);
        fg.generic = true;
        run_attn_case(fg, sd, true);
    }
    /* the README pair at d = 128: tq-mse:5 keys (attn_tq5.cuh) and tcq:3 values, both classic, calibrated;
     * and forced to the generic kernel */
    {
        AttnCase rp = {"tq-mse:5+chscale", "tcq:3", 2, 8, 64, 32, {1, 300, 900}, {0, 5, 32}};
        rp.calib = 1;
        rp.want_gen = 0;
        const uint64_t sd = seed++;
        run_attn_case(rp, sd, true);
        rp.generic = true;
        rp.want_gen = -1;
        run_attn_case(rp, sd, true);
    }
    /* still the generic kernel's: tcq:1, f32 scales, other head dims, tq-mse:5 keys at d = 64 */
    const struct {
        const char *k, *v;
        int d;
    } gens[] = {{"tcq:1", "tcq:3", 128}, {"tcq:3", "tcq:2+scale32", 128}, {"tcq:3", "tcq:3", 96},
                {"tq-mse:5+chscale", "tcq:3", 64}};
    for (auto &c : gens) {
        AttnCase tc = {c.k, c.v, 2, 8, 64, 0, {17, 300}, {}};
        tc.d = c.d;
        tc.want_gen = 1;
        tc.calib = strstr(c.k, "chscale") ? 1 : 0;
        run_attn_case(tc, seed++, true);
    }
    if (!quick) {
        AttnCase big = {"tcq:3", "tcq:3", 2, 16, 256, 128, {4096, 1025}, {128, 100}};
        big.want_gen = 0;
        run_attn_case(big, seed++, true);
    }
}

/* The f16 sink (policy sink=S; kvq_cuda_layer_config.sink): sequences of n positions split as a store
 * splits them (the C cache's rule): the first min(S, n) in the sink, then the pages up to the f16 window's
 * frontier (n - W), then the ring; so lengths 1, S - 1, S, S + 1, S + W and long ones exercise a sink
 * alone, a sink and a window only (no page), the window pass's tile across the sink / ring boundary
 * (S = 20), the tensor-core window kernel (d = 64, 128, 256) and the generic one (d = 96), calibrated
 * plans (their main chunks' q . mean shift against the sink's true scores) and the README's policy
 * pair; the reference attends the sink rows as f16. */
static AttnCase sink_case(const char *k, const char *v, int d, int W, int S, std::vector<int> lens, int calib = 0) {
    AttnCase tc = {k, v, 2, 8, 64, W, {}, {}};
    tc.d = d;
    tc.calib = calib;
    tc.sink = S;
    for (int n : lens) {
        const int ns = n < S ? n : S, me = W ? (n > W ? n - W : 0) : n, ws = me > ns ? me : ns;
        tc.sink_len.push_back(ns);
        tc.main_len.push_back(ws - ns);
        tc.win_len.push_back(n - ws);
    }
    return tc;
}
static void test_attention_sink(bool quick) {
    uint64_t seed = 13000;
    for (int S : {1, 4}) {
        for (int W : {0, 32}) {
            const std::vector<int> lens = {1, S - 1, S, S + 1, S + W, 0, 2500};
            const char *pairs[][2] = {{"tq-mse:4", "tq-mse:4"}, {"tq-mse:2", "tq-mse:2"}, {"q8", "tq-mse:4"}};
            for (auto &pr : pairs) {
                run_attn_case(sink_case(pr[0], pr[1], 128, W, S, lens), seed++, true);
                if (quick) break;
            }
            run_attn_case(sink_case("tq-mse:4", "tq-mse:2", 64, W, S, lens), seed++, true);
            run_attn_case(sink_case("q8", "tq-mse:4", 256, W, S, lens), seed++, true);
            run_attn_case(sink_case("tq-mse:3", "tq-mse:3", 96, W, S, lens), seed++, true);
            run_attn_case(sink_case("tq-mse:4+chscale", "tq-mse:4+chscale", 128, W, S, lens, 1), seed++, true);
            /* the README's policy pair (the generic kernel; tcq's CPU reference is slow: shorter) */
            run_attn_case(sink_case("tq-mse:5+chscale", "tcq:3", 128, W, S, {1, S - 1, S, S + 1, S + W, 900}, 1), seed++,
                          true);
            run_attn_case(sink_case("tq-mse:4", "tq-mse:2", 128, W, S, lens), seed++, true); /* the wide 4/2 kernel */
            run_attn_case(sink_case("tq-mse:2", "tq-mse:4", 128, W, S, lens), seed++, true); /* and 2/4 */
            run_attn_case(sink_case("tq-mse:3", "tq-mse:3", 128, W, S, lens), seed++, true); /* and 3/3 */
        }
    }
    /* a sink of more than a tile: the window pass's second tile holds sink and ring rows */
    for (int d : {128, 96})
        run_attn_case(sink_case("tq-mse:4", "q8", d, 8, 20, {19, 20, 21, 28, 29, 300}), seed++, true);
}

/* Bad sink arguments: refused before anything is launched. */
static void test_sink_errors(void) {
    kvq_plan *kp;
    OK(kvq_plan_create(&kp, "tq-mse:4", D, 3, NULL, 0));
    kvq_cuda_plan *cp;
    OK(kvq_cuda_plan_create(&cp, kp));
    kvq_cuda_layer *layer = NULL, *plain = NULL;
    for (int bad : {-1, KVQ_SINK_MAX + 1}) {
        kvq_cuda_layer_config cfg = {cp, cp, 1, 1, 16, 0, bad};
        EXPECT(kvq_cuda_layer_create(&layer, &cfg) == KVQ_ERR_INVALID_ARG, "sink %d: INVALID_ARG", bad);
    }
    kvq_cuda_layer_config cfg = {cp, cp, 1, 1, 16, 0, 4}, cfg0 = {cp, cp, 1, 1, 16, 0, 0};
    OK(kvq_cuda_layer_create(&layer, &cfg));
    OK(kvq_cuda_layer_create(&plain, &cfg0));
    EXPECT(kvq_cuda_layer_sink_bytes(layer, 3) == (size_t)3 * 2 * 1 * 4 * D * 2 && kvq_cuda_layer_sink_bytes(plain, 3) == 0,
           "kvq_cuda_layer_sink_bytes");
    int32_t *dv;
    float *dq, *dout;
    CU(cudaMalloc(&dv, 64));
    CU(cudaMalloc(&dq, D * 4));
    CU(cudaMalloc(&dout, D * 4));
    CU(cudaMemset(dv, 0, 64));
    int32_t *dmain = dv, *dsl = dv + 1;
    kvq_cuda_batch b = {1, NULL, NULL, 0, dmain, NULL, NULL, 0, NULL, dsl, NULL};
    EXPECT(kvq_cuda_attend(layer, &b, dq, 1.f, dout, NULL) == KVQ_ERR_INVALID_ARG, "sink_len without sinks");
    b.sink = dv;
    EXPECT(kvq_cuda_attend(plain, &b, dq, 1.f, dout, NULL) == KVQ_ERR_INVALID_ARG, "sink_len on a layer without a sink");
    EXPECT(kvq_cuda_store_sink(plain, 0, dv, dq, KVQ_DTYPE_F32, 1, dv, dv, NULL, NULL) == KVQ_ERR_INVALID_ARG,
           "store_sink on a layer without a sink");
    EXPECT(kvq_cuda_store_sink(layer, 2, dv, dq, KVQ_DTYPE_F32, 1, dv, dv, NULL, NULL) == KVQ_ERR_INVALID_ARG,
           "store_sink kv = 2");
    EXPECT(kvq_cuda_store_sink(layer, 0, NULL, dq, KVQ_DTYPE_F32, 1, dv, dv, NULL, NULL) == KVQ_ERR_NULL,
           "store_sink without a sink");
    CU(cudaDeviceSynchronize());
    printf("  sink errors: bad sink sizes, sink_len without sinks or on a plain layer, bad store_sink calls refused\n");
    for (void *pp : {(void *)dv, (void *)dq, (void *)dout}) CU(cudaFree(pp));
    kvq_cuda_layer_free(layer);
    kvq_cuda_layer_free(plain);
    kvq_cuda_plan_free(cp);
    kvq_plan_free(kp);
}

/* tq-mse:3 on the classic kernel (attn_tq3.cuh): K and V alone and beside every other classic
 * format at d = 128 (one and two 3-bit tables; beside tq-mse:4 the layer has a 3- and a 4-bit
 * table), and at d = 64 (the linear staging) and 256; odd lengths, chunk boundaries (forced chunks
 * of 64 tiles: 1024 tokens), the f16 window, grouped queries, calibrated plans, the generic kernel's
 * result on the same case (forced) for one pair. */
static void test_attention_tq3(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 1000, 0, 2500}, wl = {0, 5, 32, 1, 7, 32};
    struct {
        const char *k, *v;
        int d;
    } pairs[] = {{"tq-mse:3", "tq-mse:3", 128},  {"tq-mse:3", "tq-mse:4", 128},   {"tq-mse:4", "tq-mse:3", 128},
                 {"tq-mse:3", "tq-mse:2", 128},  {"tq-mse:2", "tq-mse:3", 128},   {"q8", "tq-mse:3", 128},
                 {"tq-mse:3", "q8", 128},        {"f16", "tq-mse:3", 128},        {"tq-mse:3", "f16", 128},
                 {"tq-mse:3", "tq-mse:1", 128},  {"tq-mse:1", "tq-mse:3", 128},   {"tq-mse:3", "rvq:2", 128},
                 {"rvq:4", "tq-mse:3", 128},     {"tq-prod:3", "tq-mse:3", 128},  {"qjl", "tq-mse:3", 128},
                 {"tq-mse:3", "tq-mse:3+cb=gauss", 128}, {"tq-mse:3+norot", "tq-mse:3+norot", 128},
                 {"tq-mse:3+scale=norm", "tq-mse:3", 128},
                 {"tq-mse:3", "tq-mse:3", 64},   {"tq-mse:3", "tq-mse:4", 64},    {"q8", "tq-mse:3", 64},
                 {"tq-mse:3", "tq-mse:2", 64},   {"f16", "tq-mse:3", 64},
                 {"tq-mse:3", "tq-mse:3", 256},  {"tq-mse:4", "tq-mse:3", 256},   {"tq-mse:3", "q8", 256},
                 {"tq-mse:2", "tq-mse:3", 256},  {"tq-mse:3", "f16", 256}};
    uint64_t seed = 13000;
    int i = 0;
    for (auto &pr : pairs) {
        AttnCase tc = varied_case(pr.k, pr.v, i, (i % 2) ? 32 : 0, lens, wl);
        tc.d = pr.d;
        i++;
        if (quick && (i % 3) != 1) continue;
        run_attn_case(tc, seed++, true);
    }
    /* chunk boundaries: chunks of 64 tiles (1024 tokens) forced, lengths on both sides of them and
     * of pages and tiles (P = 64), with and without the window */
    const std::vector<int> edge = {1023, 1024, 1025, 2047, 2049, 15, 16, 63, 65};
    const std::vector<int> edge_w = {3, 0, 32, 1, 17, 0, 5, 31, 2};
    for (int d : {128, 64, 256}) {
        AttnCase c = {"tq-mse:3", "tq-mse:3", 2, 8, 64, d == 64 ? 32 : 0, edge, edge_w, d == 256 ? 32 : 64};
        c.d = d;
        run_attn_case(c, seed++, true);
    }
    AttnCase c34 = {"tq-mse:3", "tq-mse:4", 2, 16, 64, 32, edge, edge_w, 64};
    run_attn_case(c34, seed++, true);
    AttnCase c43 = {"tq-mse:4", "tq-mse:3", 3, 3, 32, 0, edge, {}, 128};
    run_attn_case(c43, seed++, true);
    /* grouped queries (3 groups of 8), many chunks by the rule, the window */
    AttnCase g = {"tq-mse:3", "tq-mse:3", 2, 24, 64, 16, {33, 7000}, {16, 3}};
    run_attn_case(g, seed++, true);
    /* calibrated plans (the records are the inner plan's) */
    for (int d : {128, 64}) {
        AttnCase cal = {"tq-mse:3+chscale", "tq-mse:3+center", 2, 8, 64, 32, lens, wl};
        cal.d = d;
        cal.calib = 1;
        run_attn_case(cal, seed++, true);
    }
    /* the same case on the generic kernel (its f32 baseline) */
    AttnCase fg = {"tq-mse:3", "tq-mse:3", 2, 8, 64, 32, {1, 300, 2500}, {0, 5, 32}};
    fg.generic = true;
    run_attn_case(fg, seed++, true);
    if (!quick) {
        AttnCase big = {"tq-mse:3", "tq-mse:3", 8, 32, 256, 128, {32768, 4097}, {128, 100}};
        run_attn_case(big, seed++, true);
    }
}

/* tq-mse:5 keys on the classic kernel (attn_tq5.cuh, d = 128): with every V format, chunk, page and
 * tile boundaries, grouped queries, the window, calibrated plans (the README's tq-mse:5+chscale keys),
 * and the same case on the generic kernel; seeds from 15000. */
static void test_attention_tq5(bool quick) {
    const std::vector<int> lens = {1, 17, 300, 1000, 0, 2500}, wl = {0, 5, 32, 1, 7, 32};
    const char *vs[] = {"f16", "q8", "tq-mse:1", "tq-mse:2", "tq-mse:4", "rvq:1", "rvq:2", "rvq:4", "tq-mse:3"};
    uint64_t seed = 15000;
    int i = 0;
    for (const char *v : vs) {
        AttnCase tc = varied_case("tq-mse:5", v, i, (i % 2) ? 32 : 0, lens, wl);
        tc.want_gen = 0; /* the classic kernel serves every V format beside tq-mse:5 keys */
        i++;
        if (quick && (i % 3) != 1) continue;
        run_attn_case(tc, seed++, true);
    }
    for (const char *k : {"tq-mse:5+cb=gauss", "tq-mse:5+norot", "tq-mse:5+scale=norm"}) {
        AttnCase tc = varied_case(k, "tq-mse:4", i++, 32, lens, wl);
        run_attn_case(tc, seed++, true);
    }
    const std::vector<int> edge = {1023, 1024, 1025, 2047, 2049, 15, 16, 63, 65};
    const std::vector<int> edge_w = {3, 0, 32, 1, 17, 0, 5, 31, 2};
    AttnCase c = {"tq-mse:5", "tq-mse:4", 2, 8, 64, 0, edge, edge_w, 64};
    run_attn_case(c, seed++, true);
    AttnCase g = {"tq-mse:5", "tq-mse:2", 2, 24, 64, 16, {33, 7000}, {16, 3}};
    run_attn_case(g, seed++, true);
    for (int calib : {1, 2}) {
        AttnCase cal = {"tq-mse:5+chscale", "tq-mse:4", 2, 8, 64, 32, lens, wl};
        cal.calib = calib;
        run_attn_case(cal, seed++, true);
    }
    AttnCase fg = {"tq-mse:5", "tq-mse:4", 2, 8, 64, 32, {1, 300, 2500}, {0, 5, 32}};
    fg.generic = true;
    run_attn_case(fg, seed++, true);
    if (!quick) {
        AttnCase big = {"tq-mse:5", "tq-mse:4", 8, 32, 256, 128, {32768, 4097}, {128, 100}};
        run_attn_case(big, seed++, true);
    }
}

/* ---- the decode path in a CUDA graph ------------------------------------------------
 * One decode step of 3 sequences (store one token of K and V into pages and window rings,
 * attend on the layer's reserved workspace and on a caller's) captured once on a stream and
 * replayed for 6 steps; between replays only device inputs change (the token, its slot, the
 * lengths, the query), copied outside the graph. Every replay's outputs must equal, bit for
 * bit, direct calls with the same max_main_len (the capacity the graph was captured with),
 * and agree with direct calls sized to the actual lengths; the graph's stores give the same
 * bytes as direct stores into a second pool. Capturing a call that would grow the layer's
 * workspace is refused (KVQ_ERR_STATE) and leaves the capture valid. */
static void test_graph(void) {
    const int H = 2, HQ = 8, P = 64, W = 16, NS = 3, CAP = 640, MAXP = CAP / P;
    const char *specs[][2] = {{"tq-mse:4", "tq-mse:4"}, {"q8", "tq-mse:2"}};
    for (auto &sp : specs) {
        Rng r{777};
        kvq_plan *kp, *vp;
        OK(kvq_plan_create(&kp, sp[0], D, 5, NULL, 0));
        OK(kvq_plan_create(&vp, sp[1], D, 5, NULL, 0)); /* same seed: tq-mse:4/4 shares its table (wide kernel) */
        kvq_cuda_plan *ckp, *cvp;
        OK(kvq_cuda_plan_create(&ckp, kp));
        OK(kvq_cuda_plan_create(&cvp, vp));
        kvq_cuda_layer_config cfg = {ckp, cvp, H, HQ, P, W, 0};
        kvq_cuda_layer *layer;
        OK(kvq_cuda_layer_create(&layer, &cfg));
        const size_t page_bytes = kvq_cuda_layer_page_bytes(layer), pool = (size_t)NS * MAXP * page_bytes;
        const size_t wbytes = kvq_cuda_layer_window_bytes(layer, NS);
        std::vector<int32_t> bt((size_t)NS * MAXP);
        for (int i = 0; i < NS * MAXP; i++) bt[i] = (i * 7 + 3) % (NS * MAXP); /* a permutation (7 coprime to 30) */
        uint8_t *pg[2], *wn[2];
        for (int m = 0; m < 2; m++) {
            CU(cudaMalloc(&pg[m], pool));
            CU(cudaMemset(pg[m], 0x3c, pool));
            CU(cudaMalloc(&wn[m], wbytes));
            CU(cudaMemset(wn[m], 0x3c, wbytes));
        }
        int32_t *dbt, *dml, *dwl, *ddst, *dseq, *dpos;
        int *dst_st;
        float *dx, *dq, *o1, *o2, *o3, *o4;
        const size_t qn = (size_t)NS * HQ * D, xn = (size_t)NS * H * D;
        CU(cudaMalloc(&dbt, bt.size() * 4));
        CU(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
        CU(cudaMalloc(&dml, NS * 4));
        CU(cudaMalloc(&dwl, NS * 4));
        CU(cudaMalloc(&ddst, NS * 4));
        CU(cudaMalloc(&dseq, NS * 4));
        CU(cudaMalloc(&dpos, NS * 4));
        CU(cudaMalloc(&dst_st, 4));
        CU(cudaMemset(dst_st, 0, 4));
        CU(cudaMalloc(&dx, 2 * xn * 4));
        CU(cudaMalloc(&dq, qn * 4));
        for (float **o : {&o1, &o2, &o3, &o4}) CU(cudaMalloc(o, qn * 4));
        const size_t wsb = kvq_cuda_attend_workspace_bytes(layer, NS, CAP);
        EXPECT(wsb > 0, "workspace bytes");
        void *ws;
        CU(cudaMalloc(&ws, wsb));
        cudaStream_t st;
        CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        const float scale = 1.0f / sqrtf((float)D);
        /* a capture that would grow the layer's workspace: refused, nothing launched */
        {
            kvq_cuda_batch b0 = {NS, pg[0], dbt, MAXP, dml, dwl, wn[0], CAP, NULL, NULL, NULL};
            cudaGraph_t g0;
            CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            const int rc = kvq_cuda_attend(layer, &b0, dq, scale, o1, st);
            CU(cudaStreamEndCapture(st, &g0));
            EXPECT(rc == KVQ_ERR_STATE, "attend growing its workspace under capture: %d", rc);
            CU(cudaGraphDestroy(g0));
        }
        /* a caller's workspace too small, or misaligned */
        {
            kvq_cuda_batch b0 = {NS, pg[0], dbt, MAXP, dml, dwl, wn[0], CAP, NULL, NULL, NULL};
            int rc = kvq_cuda_attend_ws(layer, &b0, dq, scale, o1, ws, 64, st);
            EXPECT(rc == KVQ_ERR_INVALID_ARG, "attend_ws with 64 bytes: %d", rc);
            rc = kvq_cuda_attend_ws(layer, &b0, dq, scale, o1, (uint8_t *)ws + 4, wsb - 4, st);
            EXPECT(rc == KVQ_ERR_INVALID_ARG, "attend_ws misaligned: %d", rc);
        }
        OK(kvq_cuda_layer_reserve(layer, NS, CAP));
        /* initial contents: lengths 150, 37, 0, stored directly into both pools */
        int len[NS] = {150, 37, 0};
        std::vector<float> hx;
        for (int s = 0; s < NS; s++)
            for (int t = 0; t < len[s]; t++) {
                hx.assign(2 * xn, 0.f);
                for (int i = 0; i < H * D; i++) hx[i] = (float)r.gauss(), hx[xn + i] = (float)r.gauss();
                const int32_t slot = bt[(size_t)s * MAXP + t / P] * P + t % P, sq = s, ps = t;
                CU(cudaMemcpy(dx, hx.data(), 2 * xn * 4, cudaMemcpyHostToDevice));
                CU(cudaMemcpy(ddst, &slot, 4, cudaMemcpyHostToDevice));
                CU(cudaMemcpy(dseq, &sq, 4, cudaMemcpyHostToDevice));
                CU(cudaMemcpy(dpos, &ps, 4, cudaMemcpyHostToDevice));
                for (int m = 0; m < 2; m++)
                    for (int kv = 0; kv < 2; kv++) {
                        OK(kvq_cuda_store_pages(layer, kv, pg[m], dx + kv * xn, KVQ_DTYPE_F32, 1, ddst, dst_st, NULL));
                        OK(kvq_cuda_store_window(layer, kv, wn[m], dx + kv * xn, KVQ_DTYPE_F32, 1, dseq, dpos, dst_st, NULL));
                    }
            }
        CU(cudaDeviceSynchronize());
        /* the step, captured on graph pool 0 */
        kvq_cuda_batch bg = {NS, pg[0], dbt, MAXP, dml, dwl, wn[0], CAP, NULL, NULL, NULL};
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        int crc = 0;
        for (int kv = 0; kv < 2 && !crc; kv++) {
            crc = kvq_cuda_store_pages(layer, kv, pg[0], dx + kv * xn, KVQ_DTYPE_F32, NS, ddst, dst_st, st);
            if (!crc) crc = kvq_cuda_store_window(layer, kv, wn[0], dx + kv * xn, KVQ_DTYPE_F32, NS, dseq, dpos, dst_st, st);
        }
        if (!crc) crc = kvq_cuda_attend_ws(layer, &bg, dq, scale, o1, ws, wsb, st);
        if (!crc) crc = kvq_cuda_attend(layer, &bg, dq, scale, o2, st);
        CU(cudaStreamEndCapture(st, &graph));
        EXPECT(crc == 0, "captured calls: %d (%s)", crc, kvq_strerror(crc));
        CU(cudaGraphInstantiate(&exec, graph, 0));
        double worst = 0;
        int diff12 = 0, diffref = 0;
        for (int step = 0; step < 6; step++) {
            int32_t slot[NS], sq[NS], ps[NS], ml[NS], wl[NS];
            int maxl = 0;
            for (int s = 0; s < NS; s++) {
                const int p = len[s];
                slot[s] = bt[(size_t)s * MAXP + p / P] * P + p % P;
                sq[s] = s;
                ps[s] = p;
                const int n = p + 1;
                ml[s] = n > W ? n - W : 0;
                wl[s] = n - ml[s];
                maxl = ml[s] > maxl ? ml[s] : maxl;
                len[s]++;
            }
            hx.resize(2 * xn);
            for (auto &v : hx) v = (float)r.gauss();
            std::vector<float> hq(qn);
            for (auto &v : hq) v = (float)r.gauss();
            CU(cudaMemcpyAsync(dx, hx.data(), 2 * xn * 4, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(dq, hq.data(), qn * 4, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(ddst, slot, 4 * NS, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(dseq, sq, 4 * NS, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(dpos, ps, 4 * NS, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(dml, ml, 4 * NS, cudaMemcpyHostToDevice, st));
            CU(cudaMemcpyAsync(dwl, wl, 4 * NS, cudaMemcpyHostToDevice, st));
            CU(cudaMemsetAsync(o1, 0xff, qn * 4, st));
            CU(cudaMemsetAsync(o2, 0xff, qn * 4, st));
            CU(cudaGraphLaunch(exec, st));
            /* direct calls on pool 1: the same stores, attend at the capacity and at the lengths */
            for (int kv = 0; kv < 2; kv++) {
                OK(kvq_cuda_store_pages(layer, kv, pg[1], dx + kv * xn, KVQ_DTYPE_F32, NS, ddst, dst_st, st));
                OK(kvq_cuda_store_window(layer, kv, wn[1], dx + kv * xn, KVQ_DTYPE_F32, NS, dseq, dpos, dst_st, st));
            }
            kvq_cuda_batch b1 = {NS, pg[1], dbt, MAXP, dml, dwl, wn[1], CAP, NULL, NULL, NULL};
            OK(kvq_cuda_attend_ws(layer, &b1, dq, scale, o3, ws, wsb, st));
            b1.max_main_len = maxl;
            OK(kvq_cuda_attend(layer, &b1, dq, scale, o4, st));
            CU(cudaStreamSynchronize(st));
            std::vector<float> h1(qn), h2(qn), h3(qn), h4(qn);
            CU(cudaMemcpy(h1.data(), o1, qn * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(h2.data(), o2, qn * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(h3.data(), o3, qn * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(h4.data(), o4, qn * 4, cudaMemcpyDeviceToHost));
            double num = 0, den = 0;
            for (size_t i = 0; i < qn; i++) {
                if (memcmp(&h1[i], &h3[i], 4)) diffref++;
                if (memcmp(&h1[i], &h2[i], 4)) diff12++;
                num += (double)(h1[i] - h4[i]) * (h1[i] - h4[i]);
                den += (double)h4[i] * h4[i];
                if (!(h1[i] == h1[i])) num = INFINITY;
            }
            const double rel = sqrt(num / (den > 0 ? den : 1));
            worst = rel > worst ? rel : worst;
        }
        EXPECT(diffref == 0, "graph %s/%s: %d outputs differ from direct calls at the capacity", sp[0], sp[1], diffref);
        EXPECT(diff12 == 0, "graph %s/%s: reserved and caller workspaces differ in %d outputs", sp[0], sp[1], diff12);
        EXPECT(worst <= 1e-5, "graph %s/%s: vs direct calls at the lengths, rel err %.3e", sp[0], sp[1], worst);
        std::vector<uint8_t> a(pool), b(pool), wa(wbytes), wb(wbytes);
        CU(cudaMemcpy(a.data(), pg[0], pool, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(b.data(), pg[1], pool, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(wa.data(), wn[0], wbytes, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(wb.data(), wn[1], wbytes, cudaMemcpyDeviceToHost));
        EXPECT(a == b && wa == wb, "graph %s/%s: stored bytes differ from direct stores", sp[0], sp[1]);
        int stv;
        CU(cudaMemcpy(&stv, dst_st, 4, cudaMemcpyDeviceToHost));
        EXPECT(stv == 0, "graph: store status %d", stv);
        printf("  graph k=%-8s v=%-8s: 6 replays of store + attend (2 workspaces) = direct calls bit for bit "
               "(%d, %d outputs differ); vs calls at the actual lengths rel err %.2e\n",
               sp[0], sp[1], diffref, diff12, worst);
        CU(cudaGraphExecDestroy(exec));
        CU(cudaGraphDestroy(graph));
        CU(cudaStreamDestroy(st));
        for (void *p : {(void *)pg[0], (void *)pg[1], (void *)wn[0], (void *)wn[1], (void *)dbt, (void *)dml,
                        (void *)dwl, (void *)ddst, (void *)dseq, (void *)dpos, (void *)dst_st, (void *)dx, (void *)dq,
                        (void *)o1, (void *)o2, (void *)o3, (void *)o4, ws})
            CU(cudaFree(p));
        kvq_cuda_layer_free(layer);
        kvq_cuda_plan_free(ckp);
        kvq_cuda_plan_free(cvp);
        kvq_plan_free(kp);
        kvq_plan_free(vp);
    }
}

/* ---- causal rows of stored sequences (seq_map) ----------------------------------------------
 * Two stored sequences (lengths 100 and 45, pages of 32 slots, f16 window of 8) and one batch row
 * per position of each (145 rows, seq_map = the row's sequence), row t attending causally to
 * positions [0, t] as a prefill does (main_len = min(t + 1, len - W), the rest in the ring), in one
 * call; each row against a call of its own on its sequence with those lengths. */
static void test_seq_map(void) {
    const int H = 2, HQ = 8, P = 32, W = 8, NS = 2, MAXP = 4;
    const int lens[NS] = {100, 45};
    for (const char *spec : {"tq-mse:4", "q8"}) {
        Rng r{4242};
        kvq_plan *kp, *vp;
        OK(kvq_plan_create(&kp, spec, D, 9, NULL, 0));
        OK(kvq_plan_create(&vp, spec, D, 9, NULL, 0));
        kvq_cuda_plan *ckp, *cvp;
        OK(kvq_cuda_plan_create(&ckp, kp));
        OK(kvq_cuda_plan_create(&cvp, vp));
        kvq_cuda_layer_config cfg = {ckp, cvp, H, HQ, P, W, 0};
        kvq_cuda_layer *layer;
        OK(kvq_cuda_layer_create(&layer, &cfg));
        const size_t pool = (size_t)NS * MAXP * kvq_cuda_layer_page_bytes(layer), wbytes = kvq_cuda_layer_window_bytes(layer, NS);
        std::vector<int32_t> bt(NS * MAXP);
        for (int i = 0; i < NS * MAXP; i++) bt[i] = NS * MAXP - 1 - i;
        int ntok = 0;
        for (int sq = 0; sq < NS; sq++) ntok += lens[sq];
        std::vector<float> x((size_t)ntok * H * D * 2);
        for (auto &v : x) v = (float)r.gauss();
        std::vector<int32_t> dst(ntok), seq(ntok), pos(ntok), rmap(ntok), ml(ntok), wl(ntok);
        int k = 0, maxm = 0;
        for (int sq = 0; sq < NS; sq++)
            for (int t = 0; t < lens[sq]; t++, k++) {
                dst[k] = bt[sq * MAXP + t / P] * P + t % P;
                seq[k] = sq;
                pos[k] = t;
                rmap[k] = sq;
                const int me = lens[sq] > W ? lens[sq] - W : 0;
                ml[k] = t + 1 < me ? t + 1 : me;
                wl[k] = t + 1 - ml[k];
                maxm = ml[k] > maxm ? ml[k] : maxm;
            }
        uint8_t *dp, *dw;
        float *dx, *dq, *dout, *dref;
        int32_t *ddst, *dseq, *dpos, *dbt, *dmap, *dml, *dwl;
        int *dst_st;
        CU(cudaMalloc(&dp, pool));
        CU(cudaMalloc(&dw, wbytes));
        CU(cudaMalloc(&dx, x.size() * 4));
        CU(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        const size_t qn = (size_t)ntok * HQ * D;
        std::vector<float> q(qn);
        for (auto &v : q) v = (float)r.gauss();
        CU(cudaMalloc(&dq, qn * 4));
        CU(cudaMemcpy(dq, q.data(), qn * 4, cudaMemcpyHostToDevice));
        CU(cudaMalloc(&dout, qn * 4));
        CU(cudaMalloc(&dref, qn * 4));
        for (int32_t **a : {&ddst, &dseq, &dpos, &dmap, &dml, &dwl}) CU(cudaMalloc(a, ntok * 4));
        CU(cudaMalloc(&dbt, bt.size() * 4));
        CU(cudaMalloc(&dst_st, 4));
        CU(cudaMemset(dst_st, 0, 4));
        CU(cudaMemcpy(ddst, dst.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dseq, seq.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dpos, pos.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dmap, rmap.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dml, ml.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dwl, wl.data(), ntok * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
        const size_t xs = (size_t)ntok * H * D;
        for (int kv = 0; kv < 2; kv++) {
            OK(kvq_cuda_store_pages(layer, kv, dp, dx + kv * xs, KVQ_DTYPE_F32, ntok, ddst, dst_st, NULL));
            /* the ring positions one by one in order, so the last W of each sequence remain */
            for (int i = 0; i < ntok; i++)
                OK(kvq_cuda_store_window(layer, kv, dw, dx + kv * xs + (size_t)i * H * D, KVQ_DTYPE_F32, 1, dseq + i, dpos + i,
                                         dst_st, NULL));
        }
        const float scale = 1.0f / sqrtf((float)D);
        kvq_cuda_batch b = {ntok, dp, dbt, MAXP, dml, dwl, dw, maxm, dmap, NULL, NULL};
        CU(cudaMemset(dout, 0xff, qn * 4));
        OK(kvq_cuda_attend(layer, &b, dq, scale, dout, NULL));
        for (int i = 0; i < ntok; i++) {
            kvq_cuda_batch b1 = {1, dp, dbt + rmap[i] * MAXP, MAXP, dml + i, dwl + i, dw, ml[i], NULL, NULL, NULL};
            /* the window ring of sequence rmap[i]: the batch's sequence 0 reads ring 0, so offset the pointer */
            b1.window = dw + (size_t)rmap[i] * 2 * H * W * D * 2;
            OK(kvq_cuda_attend(layer, &b1, dq + (size_t)i * HQ * D, scale, dref + (size_t)i * HQ * D, NULL));
        }
        CU(cudaDeviceSynchronize());
        std::vector<float> a(qn), bb(qn);
        CU(cudaMemcpy(a.data(), dout, qn * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(bb.data(), dref, qn * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < qn; i++) {
            num += (double)(a[i] - bb[i]) * (a[i] - bb[i]);
            den += (double)bb[i] * bb[i];
            if (!(a[i] == a[i])) num = INFINITY;
        }
        const double rel = sqrt(num / (den > 0 ? den : 1));
        EXPECT(rel <= 1e-5, "seq_map %s: rows vs their own calls rel err %.3e", spec, rel);
        int stv;
        CU(cudaMemcpy(&stv, dst_st, 4, cudaMemcpyDeviceToHost));
        EXPECT(stv == 0, "seq_map: store status %d", stv);
        printf("  seq_map %-8s: %d causal rows of 2 stored sequences in one call vs a call per row: rel err %.2e\n", spec,
               ntok, rel);
        for (void *pp : {(void *)dp, (void *)dw, (void *)dx, (void *)dq, (void *)dout, (void *)dref, (void *)ddst, (void *)dseq,
                         (void *)dpos, (void *)dmap, (void *)dml, (void *)dwl, (void *)dbt, (void *)dst_st})
            CU(cudaFree(pp));
        kvq_cuda_layer_free(layer);
        kvq_cuda_plan_free(ckp);
        kvq_cuda_plan_free(cvp);
        kvq_plan_free(kp);
        kvq_plan_free(vp);
    }
}

/* Padding entries (negative slot / sequence / position, vLLM's -1 in a slot
 * mapping) store nothing: the whole pool and window stay as poisoned. */
static void test_padding_slots(void) {
    const int H = 2, HQ = 4, P = 16, W = 4, NT = 3;
    kvq_plan *kp;
    OK(kvq_plan_create(&kp, "tq-mse:4", D, 3, NULL, 0));
    kvq_cuda_plan *cp;
    OK(kvq_cuda_plan_create(&cp, kp));
    kvq_cuda_layer_config cfg = {cp, cp, H, HQ, P, W, 0};
    kvq_cuda_layer *layer;
    OK(kvq_cuda_layer_create(&layer, &cfg));
    const size_t pool = 2 * kvq_cuda_layer_page_bytes(layer), wbytes = kvq_cuda_layer_window_bytes(layer, 1);
    std::vector<float> x((size_t)NT * H * D, 0.5f);
    const int32_t neg[NT] = {-1, -1, -7}, pos[NT] = {0, -1, 2}, seq[NT] = {-1, 0, -1};
    uint8_t *dp, *dw;
    float *dx;
    int32_t *dneg, *dpos, *dseq;
    int *dst;
    CU(cudaMalloc(&dp, pool));
    CU(cudaMalloc(&dw, wbytes));
    CU(cudaMalloc(&dx, x.size() * 4));
    for (int32_t **a : {&dneg, &dpos, &dseq}) CU(cudaMalloc(a, NT * 4));
    CU(cudaMalloc(&dst, 4));
    CU(cudaMemset(dst, 0, 4));
    CU(cudaMemset(dp, 0xa5, pool));
    CU(cudaMemset(dw, 0xa5, wbytes));
    CU(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dneg, neg, NT * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dpos, pos, NT * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dseq, seq, NT * 4, cudaMemcpyHostToDevice));
    /* the pool's second page is what a write at slot -1 of page 0 would miss: check both pages */
    OK(kvq_cuda_store_pages(layer, 0, dp + kvq_cuda_layer_page_bytes(layer), dx, KVQ_DTYPE_F32, NT, dneg, dst, NULL));
    OK(kvq_cuda_store_window(layer, 1, dw, dx, KVQ_DTYPE_F32, NT, dseq, dpos, dst, NULL));
    CU(cudaDeviceSynchronize());
    std::vector<uint8_t> hp(pool), hw(wbytes);
    CU(cudaMemcpy(hp.data(), dp, pool, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hw.data(), dw, wbytes, cudaMemcpyDeviceToHost));
    size_t touched = 0;
    for (uint8_t b : hp) touched += b != 0xa5;
    for (uint8_t b : hw) touched += b != 0xa5;
    int stv;
    CU(cudaMemcpy(&stv, dst, 4, cudaMemcpyDeviceToHost));
    EXPECT(touched == 0 && stv == 0, "padding slots: %zu bytes written, status %d", touched, stv);
    printf("  padding slots: %d entries with negative slot/seq/pos, %zu bytes written (0 expected)\n", NT, touched);
    for (void *pp : {(void *)dp, (void *)dw, (void *)dx, (void *)dneg, (void *)dpos, (void *)dseq, (void *)dst})
        CU(cudaFree(pp));
    kvq_cuda_layer_free(layer);
    kvq_cuda_plan_free(cp);
    kvq_plan_free(kp);
}

int main(int argc, char **argv) {
    bool quick = false, only_sink = false; /* --sink: the host checks and the sink cases only */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        if (!strcmp(argv[i], "--debug")) g_debug = 1;
        if (!strcmp(argv[i], "--tcq")) g_only_tcq = true;
        if (!strcmp(argv[i], "--sink")) only_sink = true;
        if (!strcmp(argv[i], "--tq3")) g_only_tq3 = true;
        if (!strcmp(argv[i], "--tq5")) g_only_tq5 = true;
    }
    host_checks();
    printf("host decoder/map checks: %d checks, %d failed\n", g_checks, g_fail);
    if (kvq_cuda_device_count() <= 0) {
        printf("test_cuda: no CUDA device, device checks skipped\n");
        return g_fail ? 1 : 77;
    }
    cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
    if (g_only_tcq) {
        test_encode_tcq(quick);
        test_encode_calib(quick);
        test_attention_tcq(quick);
        test_attention_tcq_tc(quick);
        printf("test_cuda --tcq: %d checks, %d failed\n", g_checks, g_fail);
        return g_fail ? 1 : 0;
    }
    if (only_sink) {
        test_sink_errors();
        test_attention_sink(quick);
        printf("test_cuda --sink: %d checks, %d failed\n", g_checks, g_fail);
        return g_fail ? 1 : 0;
    }
    if (g_only_tq3) {
        test_attention_tq3(quick);
        printf("test_cuda --tq3: %d checks, %d failed\n", g_checks, g_fail);
        return g_fail ? 1 : 0;
    }
    if (g_only_tq5) {
        test_attention_tq5(quick);
        printf("test_cuda --tq5: %d checks, %d failed\n", g_checks, g_fail);
        return g_fail ? 1 : 0;
    }
    test_encode(quick);
    test_encode_tcq(quick);
    test_encode_calib(quick);
    test_attention(quick);
    test_attention_calib(quick);
    test_attention_generic(quick);
    test_attention_tcq(quick);
    test_attention_tcq_tc(quick);
    test_sink_errors();
    test_attention_sink(quick);
    test_attention_tq3(quick);
    test_attention_tq5(quick);
    test_graph();
    test_seq_map();
    test_padding_slots();
    printf("test_cuda: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
