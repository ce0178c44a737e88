/*
 * Host side of the attention backend: layers (policy, LUT plan, dispatch),
 * storing tokens into pages and window rings, and one decode step:
 *   prep   (query x scale x log2 e, rotated by the K plan, S q~ for QJL keys)
 *   main   (attn_launch.cuh: split-K over the pages, one partial state per chunk)
 *   window (the f16 rows: the sink's, then the ring's; unrotated queries, one more partial state)
 *   merge  (exact: M = max m_c, l = sum 2^(m_c - M) l_c, acc likewise;
 *           one inverse rotation of the main accumulator per query head).
 * Calibrated plans (+center, +chscale; m_center.c, docs/CUDA.md "Calibrated plans"): the records
 * are the inner plan's, so the main pass is unchanged. With K's mean mu and scales a (of the KV
 * head), prep rotates q / a (q / a . a (k - mu) = q . (k - mu)) and writes c = q . mu; the main
 * chunks' scores lack c, the window's (true f16 keys) do not: the merge takes m_c + c for the
 * main chunks. With V's mean and scales, the main accumulator unrotated is
 * sum w_i a (v_i - mu) (the inner decode); the merge divides it by a and adds W_main mu
 * (W_main = sum over the main chunks of 2^(m_c + c - M) l_c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_launch.cuh"

#define KVQ_ATTN_DECL_K(KN, KT) KVQ_ATTN_V_FORMATS(KVQ_ATTN_DECL_ONE, KN, KT)
KVQ_ATTN_K_FORMATS(KVQ_ATTN_DECL_K)
#define KVQ_ATTN_ROW_ONE(KN, KT, VN, VT) kvq_attn_launch_##KN##_##VN,
#define KVQ_ATTN_ROW(KN, KT) {KVQ_ATTN_V_FORMATS(KVQ_ATTN_ROW_ONE, KN, KT)},
static const kvqa::launch_fn k_table[17][12] = {KVQ_ATTN_K_FORMATS(KVQ_ATTN_ROW)};
/* head dims 64 and 256: f16, q8, tq-mse:2, tq-mse:4, tq-mse:3, tcq:2/3/4 (index kd_index) */
KVQ_ATTN_KD_FORMATS(KVQ_ATTN_DECLD_K, 64)
KVQ_ATTN_KD_FORMATS(KVQ_ATTN_DECLD_K, 256)
#define KVQ_ATTN_ROWD_ONE(DD, KN, KT, VN, VT) kvq_attn_launch_d##DD##_##KN##_##VN,
#define KVQ_ATTN_ROWD(DD, KN, KT) {KVQ_ATTN_VD_FORMATS(KVQ_ATTN_ROWD_ONE, DD, KN, KT)},
static const kvqa::launch_fn k_table64[8][8] = {KVQ_ATTN_KD_FORMATS(KVQ_ATTN_ROWD, 64)};
static const kvqa::launch_fn k_table256[8][8] = {KVQ_ATTN_KD_FORMATS(KVQ_ATTN_ROWD, 256)};

enum { KF_F16, KF_Q8, KF_TQ1, KF_TQ2, KF_TQ4, KF_RVQ1, KF_RVQ2, KF_RVQ4, KF_TQ3, KF_TCQ2, KF_TCQ3, KF_TCQ4,
       KF_TP1, KF_TP2, KF_TP4, KF_QJL, KF_TQ5 };
enum { VF_F16, VF_Q8, VF_TQ1, VF_TQ2, VF_TQ4, VF_RVQ1, VF_RVQ2, VF_RVQ4, VF_TQ3, VF_TCQ2, VF_TCQ3, VF_TCQ4 };
static_assert((int)VF_RVQ4 == (int)KF_RVQ4 && (int)VF_TQ1 == (int)KF_TQ1 && (int)VF_TQ3 == (int)KF_TQ3 &&
                  (int)VF_TCQ4 == (int)KF_TCQ4 && KF_TQ5 + 1 == 17 && VF_TCQ4 + 1 == 12,
              "v_format: the V formats are the first K formats; the tables' sizes");

using kvqa::D;
using kvqa::QPB;

struct kvq_cuda_layer {
    const kvq_cuda_plan *k, *v;
    int H, HQ, G, QG, P, W;
    int S; /* f16 sink rows per sequence */
    int kfmt, vfmt;
    size_t kb, vb, page_bytes;
    kvqa::launch_fn fn;
    int nw, smem, occ, sms;
    int nlut;
    kvqa::LutDesc lut[4];
    int klut[2], vlut[2], lut_bytes;
    int wide; /* tq-mse:4 K and V with one table: the wide-table kernel */
    int wide2; /* tq-mse:2 K and V with one table at d = 128: the wide kernel on the 2-bit byte table */
    int wide42; /* tq-mse:4 K and tq-mse:2 V, or 2 and 4, at d = 128: the wide 4/2 (2/4) kernel */
    int wide33; /* tq-mse:3 K and V at d = 128: the wide 3/3 kernel */
    int pdl;  /* programmatic dependent launches (compute capability >= 9) */
    int force_ct; /* tiles per chunk forced by the tests (kvq_cuda_layer_force_chunk); 0: the rule */
    int d;        /* head dim */
    int gen;      /* the generic kernel (attn_kernel_gen.cuh) serves the pair */
    int gen_smem, gen_wsmem; /* its dynamic shared memory: main pass, window pass (d != 128) */
    kvqa::GenFmt gk, gv;
    void *ws;
    size_t ws_bytes;
};

static int w_index(int bits) { return bits == 1 ? 0 : bits == 2 ? 1 : bits == 4 ? 2 : -1; }

/* The tensor-core kernels' head dims: 128 (every format below), 64 and 256 (f16, q8, tq-mse:2/3/4,
 * tcq:2/3/4 (attn_tcq.cuh)). */
static int fast_dim(int d) { return d == 64 || d == D || d == 256; }
/* A codebook of n levels mirrored exactly (c[n - 1 - i] = -c[i]: lloyd_max.c solves half and mirrors):
 * what KTQ5's lookup by symmetry needs (attn_tq5.cuh). */
static int mirrored(const float *c, int n) {
    for (int i = 0; i < n; i++)
        if (c[n - 1 - i] != -c[i]) return 0;
    return 1;
}
static int k_format(const kvq_cuda_plan *p) {
    if (!fast_dim(p->d) || p->sb != 2 || p->rot == 2) return -1;
    const int w = w_index(p->bits);
    if (p->kind == KVQ_LAY_TQ && p->bits == 3) return KF_TQ3; /* attn_tq3.cuh, every fast dim */
    if (p->kind == KVQ_LAY_TQ && p->bits == 5) /* attn_tq5.cuh: keys at d = 128 */
        return p->d == D && p->n1 == 32 && mirrored(p->hc1, 32) ? KF_TQ5 : -1;
    if (p->kind == KVQ_LAY_TCQ) return p->bits >= 2 && p->bits <= 4 ? KF_TCQ2 + (p->bits - 2) : -1; /* attn_tcq.cuh */
    if (p->d != D) {
        if (p->kind == KVQ_LAY_F16) return KF_F16;
        if (p->kind == KVQ_LAY_Q8) return KF_Q8;
        if (p->kind == KVQ_LAY_TQ && (p->bits == 2 || p->bits == 4)) return KF_TQ1 + w;
        return -1;
    }
    switch (p->kind) {
    case KVQ_LAY_F16: return KF_F16;
    case KVQ_LAY_Q8: return KF_Q8;
    case KVQ_LAY_TQ: return w < 0 ? -1 : KF_TQ1 + w;
    case KVQ_LAY_RVQ: return w < 0 ? -1 : KF_RVQ1 + w;
    case KVQ_LAY_TQPROD: return w < 0 || p->m != D ? -1 : KF_TP1 + w;
    case KVQ_LAY_QJL: return p->m != D ? -1 : KF_QJL;
    }
    return -1;
}
/* V formats: the first 12 K formats, in the same order (the enums agree); the K-only ones (tq-prod, qjl,
 * tq-mse:5) are not */
static int v_format(const kvq_cuda_plan *p) {
    const int f = p->kind == KVQ_LAY_TQPROD || p->kind == KVQ_LAY_QJL ? -1 : k_format(p);
    return f > (int)VF_TCQ4 ? -1 : f;
}

/* The generic kernel's view of a plan (K: kv = 0); KVQ_ERR_UNSUPPORTED for a record it does not read. */
static int gen_format(const kvq_cuda_plan *p, int kv, kvqa::GenFmt *F) {
    memset(F, 0, sizeof *F);
    const int d = p->d;
    switch (p->kind) {
    case KVQ_LAY_F16:
    case KVQ_LAY_Q8:
    case KVQ_LAY_TQ:
    case KVQ_LAY_RVQ:
    case KVQ_LAY_TCQ: break;
    case KVQ_LAY_TQPROD:
    case KVQ_LAY_QJL:
        if (kv) return KVQ_ERR_NO_DECODE;
        if (p->m <= 0 || p->m > 2 * d || p->m % 8) return KVQ_ERR_UNSUPPORTED;
        break;
    default: return KVQ_ERR_UNSUPPORTED;
    }
    F->kind = p->kind;
    F->bits = p->bits;
    F->sb = p->sb;
    F->m = p->m;
    for (int f = 0; f < 4; f++) F->off[f] = p->L.off[f], F->size[f] = p->L.size[f];
    F->qoff = p->kind == KVQ_LAY_QJL ? d : 0;
    F->len = p->kind == KVQ_LAY_QJL ? p->m : p->kind == KVQ_LAY_TQPROD ? d + p->m : d;
    const bool cb = p->kind == KVQ_LAY_TQ || p->kind == KVQ_LAY_RVQ || p->kind == KVQ_LAY_TQPROD;
    F->n1 = cb ? p->n1 : 0;
    F->c1 = cb ? p->c1 : NULL;
    F->n2 = p->kind == KVQ_LAY_RVQ ? p->n2 : 0;
    F->c2 = p->kind == KVQ_LAY_RVQ ? p->c2 : NULL;
    return KVQ_OK;
}
/* The f16 rows of the window rings as the generic kernel reads them. */
static kvqa::GenFmt gen_f16(int d) {
    kvqa::GenFmt F;
    memset(&F, 0, sizeof F);
    F.kind = KVQ_LAY_F16;
    F.sb = 2;
    F.size[0] = 2 * d;
    F.len = d;
    return F;
}
/* Row of a format in k_table64 / k_table256 (F16, Q8, TQ2, TQ4, TQ3, TCQ2, TCQ3, TCQ4). */
static int kd_index(int f) {
    return f == KF_F16 ? 0 : f == KF_Q8 ? 1 : f == KF_TQ2 ? 2 : f == KF_TQ4 ? 3 : f == KF_TQ3 ? 4 : 5 + (f - KF_TCQ2);
}
static kvqa::launch_fn fast_fn(int d, int kf, int vf) {
    if (d == D) return k_table[kf][vf];
    return (d == 64 ? k_table64 : k_table256)[kd_index(kf)][kd_index(vf)];
}
/* The f16 window pass of the tensor-core kernels at head dim d (fast_dim). */
static int launch_window(int d, const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    if (d == D) return kvq_attn_launch_window(p, do_launch, st);
    return d == 64 ? kvq_attn_launch_window_d64(p, do_launch, st) : kvq_attn_launch_window_d256(p, do_launch, st);
}
static int gen_dim(int d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }

/* Adds (or reuses) a lookup table; returns its offset. */
static int add_lut(kvq_cuda_layer *L, const float **host_c, int w, const float *dev_c, const float *hc, int n) {
    for (int i = 0; i < L->nlut; i++)
        if (L->lut[i].w == w && (w == 0 || !memcmp(host_c[i], hc, (size_t)n * sizeof(float)))) return L->lut[i].off;
    const int i = L->nlut++;
    const int bytes = w == 4 ? kvqa::LUT4_BYTES : w == 2 ? 64 : 128;
    L->lut[i].off = L->lut_bytes;
    L->lut[i].w = w;
    L->lut[i].c = dev_c;
    host_c[i] = hc;
    L->lut_bytes += (bytes + 15) & ~15;
    return L->lut[i].off;
}

/* The 3-bit tables (attn_lut.cuh, attn_tq3.cuh), before any other: the LUT region's first LUT3_BYTES,
 * K's codebook in the rows' first halves (LUT3_K), V's in their second halves (LUT3_V), so that the
 * kernel's lookups take constant offsets (kc, vc: NULL for a side that is not tq-mse:3). */
static void add_lut3(kvq_cuda_layer *L, const float *kc, const float *vc) {
    if (kc) L->lut[L->nlut].off = kvqa::LUT3_K, L->lut[L->nlut].w = 3, L->lut[L->nlut++].c = kc;
    if (vc) L->lut[L->nlut].off = kvqa::LUT3_V, L->lut[L->nlut].w = 3, L->lut[L->nlut++].c = vc;
    L->klut[0] = kvqa::LUT3_K;
    L->vlut[0] = kvqa::LUT3_V;
    L->lut_bytes = kvqa::LUT3_BYTES;
}

/* The generic kernel's set-up of a layer (creation and kvq_cuda_layer_force_generic): its K / V
 * formats and shared memory, no lookup tables, its warps per block. */
static void set_generic(kvq_cuda_layer *L, const kvqa::GenFmt *gk, const kvqa::GenFmt *gv) {
    L->gen = 1;
    L->gk = *gk;
    L->gv = *gv;
    L->nlut = 0;
    L->lut_bytes = 0;
    L->wide = 0;
    L->wide2 = 0;
    L->wide42 = 0;
    L->wide33 = 0;
    L->nw = kvqa::GNW;
    L->gen_smem = kvqa::gen_smem_floats(L->d, gk->len) * (int)sizeof(float);
    L->gen_wsmem = kvqa::gen_smem_floats(L->d, L->d) * (int)sizeof(float);
}

extern "C" int kvq_cuda_layer_create(kvq_cuda_layer **out, const kvq_cuda_layer_config *cfg) {
    if (!out || !cfg || !cfg->k || !cfg->v) return KVQ_ERR_NULL;
    if (cfg->n_kv_heads <= 0 || cfg->n_q_heads <= 0 || cfg->n_q_heads % cfg->n_kv_heads || cfg->page_tokens <= 0 ||
        cfg->page_tokens % 16 || cfg->window < 0 || cfg->sink < 0 || cfg->sink > KVQ_SINK_MAX)
        return KVQ_ERR_INVALID_ARG;
    if (cfg->v->kind == KVQ_LAY_TQPROD || cfg->v->kind == KVQ_LAY_QJL) return KVQ_ERR_NO_DECODE;
    if (cfg->k->d != cfg->v->d) return KVQ_ERR_INVALID_ARG;
    if ((cfg->k->nh > 1 && cfg->k->nh != cfg->n_kv_heads) || (cfg->v->nh > 1 && cfg->v->nh != cfg->n_kv_heads) ||
        (cfg->k->tabh > 1 && cfg->k->tabh != cfg->n_kv_heads) || (cfg->v->tabh > 1 && cfg->v->tabh != cfg->n_kv_heads))
        return KVQ_ERR_INVALID_ARG; /* per-head calibrated plans of another head count */
    const int kf = k_format(cfg->k), vf = v_format(cfg->v), d = cfg->k->d;
    kvqa::GenFmt gk, gv;
    const int gen = kf < 0 || vf < 0;
    if (gen) {
        /* the generic kernel: other head dims, 5..8-bit stages (and rvq:3, tq-prod:4), f32 scales, other QJL sizes */
        if (!gen_dim(d)) return KVQ_ERR_UNSUPPORTED_DIM;
        int rc = gen_format(cfg->k, 0, &gk);
        if (!rc) rc = gen_format(cfg->v, 1, &gv);
        if (rc) return rc;
    }
    kvq_cuda_layer *L = (kvq_cuda_layer *)calloc(1, sizeof *L);
    if (!L) return KVQ_ERR_NOMEM;
    L->d = d;
    L->gen = gen;
    L->k = cfg->k;
    L->v = cfg->v;
    L->H = cfg->n_kv_heads;
    L->HQ = cfg->n_q_heads;
    L->G = L->HQ / L->H;
    L->QG = (L->G + QPB - 1) / QPB;
    L->P = cfg->page_tokens;
    L->W = cfg->window;
    L->S = cfg->sink;
    L->kfmt = kf;
    L->vfmt = vf;
    L->kb = cfg->k->code_bytes;
    L->vb = cfg->v->code_bytes;
    L->page_bytes = (size_t)L->H * L->P * (L->kb + L->vb);
    L->fn = gen ? NULL : fast_fn(d, kf, vf);
    const float *hc[4] = {0, 0, 0, 0};
    const kvq_cuda_plan *k = cfg->k, *v = cfg->v;
    const int kw = k->bits;
    if (kf == KF_TQ3 || vf == VF_TQ3) add_lut3(L, kf == KF_TQ3 ? k->c1 : NULL, vf == VF_TQ3 ? v->c1 : NULL);
    if (kf >= KF_TQ1 && kf <= KF_TQ4) L->klut[0] = add_lut(L, hc, kw, k->c1, k->hc1, k->n1);
    if (kf == KF_TQ5) L->klut[0] = add_lut(L, hc, 4, k->c1 + 16, k->hc1 + 16, 16); /* m: the positive half */
    if (kf >= KF_RVQ1 && kf <= KF_RVQ4) {
        L->klut[0] = add_lut(L, hc, kw, k->c1, k->hc1, k->n1);
        L->klut[1] = add_lut(L, hc, kw, k->c2, k->hc2, k->n2);
    }
    if (kf >= KF_TP1 && kf <= KF_TP4) {
        L->klut[0] = add_lut(L, hc, kw, k->c1, k->hc1, k->n1);
        L->klut[1] = add_lut(L, hc, 0, NULL, NULL, 0);
    }
    if (kf == KF_QJL) L->klut[0] = add_lut(L, hc, 0, NULL, NULL, 0);
    if (vf >= VF_TQ1 && vf <= VF_TQ4) L->vlut[0] = add_lut(L, hc, v->bits, v->c1, v->hc1, v->n1);
    if (vf >= VF_RVQ1 && vf <= VF_RVQ4) {
        L->vlut[0] = add_lut(L, hc, v->bits, v->c1, v->hc1, v->n1);
        L->vlut[1] = add_lut(L, hc, v->bits, v->c2, v->hc2, v->n2);
    }
    int dev = 0;
    L->sms = 132;
    int major = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
        cudaDeviceGetAttribute(&L->sms, cudaDevAttrMultiProcessorCount, dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    }
    L->pdl = major >= 9;
    kvqa::AttnParams q;
    memset(&q, 0, sizeof q);
    L->wide = d == D && kf == KF_TQ4 && vf == VF_TQ4 && L->nlut == 1 && L->klut[0] == L->vlut[0];
    L->wide2 = d == D && kf == KF_TQ2 && vf == VF_TQ2 && L->nlut == 1 && L->klut[0] == L->vlut[0];
    L->wide42 = d == D && ((kf == KF_TQ4 && vf == VF_TQ2) || (kf == KF_TQ2 && vf == VF_TQ4)) &&
                L->nlut == 2; /* p.lut[0]: K's table, [1]: V's */
    L->wide33 = d == D && kf == KF_TQ3 && vf == VF_TQ3 && L->nlut == 2; /* add_lut3: K's, then V's */
    if (L->wide2) { /* the one 2-bit table as the byte table (64 KiB, offset 0) */
        L->lut[0].w = kvqa::LUT_W2X;
        L->lut_bytes = kvqa::WLUT;
    }
    q.lut_bytes = L->lut_bytes;
    q.wide = L->wide;
    q.wide2 = L->wide2;
    q.wide42 = L->wide42;
    q.wide33 = L->wide33;
    int rc;
    if (gen) {
        set_generic(L, &gk, &gv);
        q.d = d;
        rc = kvq_attn_launch_gen(q, 0, 0, L->gen_smem, &L->occ);
    } else {
        rc = L->fn(q, 0, 0, &L->nw, &L->smem, &L->occ);
    }
    if (!rc && L->occ < 1) rc = KVQ_ERR_UNSUPPORTED; /* does not fit the device */
    if (!rc && (L->W > 0 || L->S > 0) && fast_dim(d)) {
        q.lut_bytes = 0; /* the window pass builds no table */
        rc = launch_window(d, q, 0, 0);
    }
    if (rc) {
        free(L);
        return rc;
    }
    *out = L;
    return KVQ_OK;
}

/* Whether the layer's main pass runs a wide-table kernel (attn_kernel_wide: 64 tiles a warp). */
static int layer_wide(const kvq_cuda_layer *L) { return L->wide || L->wide2 || L->wide42 || L->wide33; }

/* For the tests (not in kvq_cuda.h): forces the tiles per chunk of the main pass, a multiple of
 * the block's warps, at most 32 (64 for the wide-table kernel) per warp; 0 restores the rule. */
extern "C" int kvq_cuda_layer_force_chunk(kvq_cuda_layer *L, int tiles_per_chunk) {
    if (!L) return KVQ_ERR_NULL;
    const int tpw = kvqa::max_tiles_per_warp(layer_wide(L));
    if (tiles_per_chunk < 0 || tiles_per_chunk % L->nw || tiles_per_chunk > tpw * L->nw) return KVQ_ERR_INVALID_ARG;
    L->force_ct = tiles_per_chunk;
    return KVQ_OK;
}

/* For the tests and benchmarks (not in kvq_cuda.h): moves a layer's main pass to the generic kernel
 * (the baseline of a tensor-core pair; the window pass stays as it was) and drops a forced chunking. */
extern "C" int kvq_cuda_layer_force_generic(kvq_cuda_layer *L) {
    if (!L) return KVQ_ERR_NULL;
    if (L->gen) return KVQ_OK;
    if (!gen_dim(L->d)) return KVQ_ERR_UNSUPPORTED_DIM;
    kvqa::GenFmt gk, gv;
    int rc = gen_format(L->k, 0, &gk);
    if (!rc) rc = gen_format(L->v, 1, &gv);
    if (rc) return rc;
    kvqa::AttnParams q;
    memset(&q, 0, sizeof q);
    q.d = L->d;
    const int smem = kvqa::gen_smem_floats(L->d, gk.len) * (int)sizeof(float);
    int occ = 0;
    rc = kvq_attn_launch_gen(q, 0, 0, smem, &occ);
    if (!rc && occ < 1) rc = KVQ_ERR_UNSUPPORTED;
    if (rc) return rc;
    set_generic(L, &gk, &gv);
    L->fn = NULL;
    L->occ = occ;
    L->force_ct = 0;
    return KVQ_OK;
}

/* For the tests (not in kvq_cuda.h): 1 when the generic kernel serves the layer's main pass, 0 for a
 * tensor-core kernel, -1 for NULL. */
extern "C" int kvq_cuda_layer_generic(const kvq_cuda_layer *L) { return L ? L->gen : -1; }

extern "C" void kvq_cuda_layer_free(kvq_cuda_layer *L) {
    if (!L) return;
    cudaFree(L->ws);
    free(L);
}

extern "C" size_t kvq_cuda_layer_page_bytes(const kvq_cuda_layer *L) { return L ? L->page_bytes : 0; }
extern "C" size_t kvq_cuda_layer_window_bytes(const kvq_cuda_layer *L, int n_seq) {
    return L && n_seq > 0 ? (size_t)n_seq * 2 * L->H * L->W * L->d * 2 : 0;
}
extern "C" size_t kvq_cuda_layer_sink_bytes(const kvq_cuda_layer *L, int n_seq) {
    return L && n_seq > 0 ? (size_t)n_seq * 2 * L->H * L->S * L->d * 2 : 0;
}

extern "C" int kvq_cuda_store_pages(const kvq_cuda_layer *L, int kv, void *pages, const void *x, kvq_dtype dtype,
                                    size_t ntok, const int32_t *dst, int *dev_status, void *stream) {
    if (!L || (ntok && (!pages || !x || !dst))) return KVQ_ERR_NULL;
    if (kv != 0 && kv != 1) return KVQ_ERR_INVALID_ARG;
    kvq_enc_out out;
    out.base = (uint8_t *)pages;
    out.paged = 1;
    out.H = L->H;
    out.P = L->P;
    out.page_bytes = L->page_bytes;
    out.kv_off = kv ? (unsigned long long)L->H * L->P * L->kb : 0;
    out.dst = dst;
    return kvq_cuda_encode_launch(kv ? L->v : L->k, x, dtype, ntok * (size_t)L->H, out, dev_status,
                                  (cudaStream_t)stream);
}

/* One thread per value: value c of row (token t, head h), d per row, into an f16 buffer of N rows
 * per (sequence, K/V, head): a ring (position pos at slot pos % N) or a sink (pos < N at row pos,
 * later positions not stored). */
__global__ void store_f16_kernel(uint16_t *buf, const void *x, int f16in, long long n, int d, int H, int N, int ring,
                                 int kv, const int32_t *seq, const int32_t *pos, int *st) {
    const long long gi = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long row = gi / d;
    const int c = (int)(gi - row * d);
    if (row >= n) return;
    const long long t = row / H;
    const int h = (int)(row - t * H);
    if (seq[t] < 0 || pos[t] < 0 || (!ring && pos[t] >= N)) return; /* padding entry, or past the sink */
    float v;
    int bad = 0;
    if (f16in) {
        const uint16_t b = ((const uint16_t *)x)[row * d + c];
        if ((b & 0x7c00u) == 0x7c00u) bad = KVQ_ERR_NONFINITE;
        v = kvq_half_bits_to_float(b);
    } else {
        v = ((const float *)x)[row * d + c];
        if (!isfinite(v)) bad = KVQ_ERR_NONFINITE;
        else if (v > 65504.0f || v < -65504.0f) bad = KVQ_ERR_RANGE;
    }
    if (bad) {
        kvq_dev_error(st, bad);
        return;
    }
    const size_t off = (((size_t)seq[t] * 2 + kv) * H + h) * N + (size_t)(ring ? pos[t] % N : pos[t]);
    /* a 16-bit store of the bits (a memcpy from the __half stored its low byte as
     * F2I.U8.F16 of the value with nvcc 13.0, sm_90: see store_scale in encode.cu) */
    buf[off * d + c] = __half_as_ushort(__float2half_rn(v));
}

/* kvq_cuda_store_window (ring = 1, N = W) and kvq_cuda_store_sink (ring = 0, N = S). */
static int store_f16(const kvq_cuda_layer *L, int kv, void *buf, int N, int ring, const void *x, kvq_dtype dtype,
                     size_t ntok, const int32_t *seq, const int32_t *pos, int *dev_status, void *stream) {
    if (!L || (ntok && (!buf || !x || !seq || !pos))) return KVQ_ERR_NULL;
    if ((kv != 0 && kv != 1) || N <= 0 || (dtype != KVQ_DTYPE_F32 && dtype != KVQ_DTYPE_F16))
        return KVQ_ERR_INVALID_ARG;
    if (!ntok) return KVQ_OK;
    const long long rows = (long long)ntok * L->H, vals = rows * L->d;
    store_f16_kernel<<<(unsigned)((vals + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        (uint16_t *)buf, x, dtype == KVQ_DTYPE_F16, rows, L->d, L->H, N, ring, kv, seq, pos, dev_status);
    return kvq_cuda_status(cudaGetLastError());
}

extern "C" int kvq_cuda_store_window(const kvq_cuda_layer *L, int kv, void *window, const void *x, kvq_dtype dtype,
                                     size_t ntok, const int32_t *seq, const int32_t *pos, int *dev_status,
                                     void *stream) {
    return store_f16(L, kv, window, L ? L->W : 0, 1, x, dtype, ntok, seq, pos, dev_status, stream);
}

extern "C" int kvq_cuda_store_sink(const kvq_cuda_layer *L, int kv, void *sink, const void *x, kvq_dtype dtype,
                                   size_t ntok, const int32_t *seq, const int32_t *pos, int *dev_status, void *stream) {
    return store_f16(L, kv, sink, L ? L->S : 0, 0, x, dtype, ntok, seq, pos, dev_status, stream);
}

/* ---- decode step -------------------------------------------------------------- */
struct PrepParams {
    const float *q;
    float *qprep, *qraw;
    int HQ, G, qf, m;
    const float *kcal; /* the K plan's calibration (nh x 4d: mean, -, a, 1 / a), or NULL */
    int knh, kchscale;
    float *qconst;     /* n_seq x HQ: (q x scale x log2 e) . mean of K (kcal) */
    float scale2; /* scale * log2(e) */
    int rot, qjl; /* rot: 0 none, 1 two-round Hadamard, 2 dense */
    const float *signs, *Q, *S;
    int tabh;     /* heads of signs, Q, S (per-head plans: KV head h's at h x their size) */
    float rs;
};

/* The two-round Hadamard rotation of a plan (signs D1, D2; rs = 1 / sqrt d) of the DD
 * values y in shared memory, on one warp: lane holds y[lane E .. lane E + E), E = DD / 32, with
 * its signs s1 = D1, s2 = D2 in registers; the butterflies of fwht_warp (shuffles), so no block
 * barrier (the block-wide transform it replaced took 7 barrier pairs a round; the merge at
 * 1 x 32K went 6.85 -> 6.2 us on the H200, session 13). Forward (the query, prep): y = H (s2 rs . H (s1 rs . y));
 * inverse (the output, merge): y = s1 rs . H (s2 rs . H y). Same operations in the same order
 * as the block transform: the same floats. */
template <int DD, bool INV>
__device__ __forceinline__ void hadamard2_warp(float *y, const float *s1, const float *s2, float rs, int lane) {
    constexpr int E = DD / 32;
    float v[E];
#pragma unroll
    for (int e = 0; e < E; e++) v[e] = y[lane * E + e];
    if (!INV)
#pragma unroll
        for (int e = 0; e < E; e++) v[e] = v[e] * s1[e] * rs;
    fwht_warp<E>(v, lane);
#pragma unroll
    for (int e = 0; e < E; e++) v[e] *= s2[e] * rs;
    fwht_warp<E>(v, lane);
    if (INV)
#pragma unroll
        for (int e = 0; e < E; e++) v[e] *= s1[e] * rs;
#pragma unroll
    for (int e = 0; e < E; e++) y[lane * E + e] = v[e];
}
/* Loads lane's signs of the two rounds (sg: 2 DD floats, D1 then D2) for hadamard2_warp. */
template <int DD> __device__ __forceinline__ void hadamard2_signs(const float *sg, int lane, float *s1, float *s2) {
#pragma unroll
    for (int e = 0; e < DD / 32; e++) s1[e] = sg[lane * (DD / 32) + e], s2[e] = sg[DD + lane * (DD / 32) + e];
}
__host__ __device__ constexpr bool pow2_dim(int d) { return (d & (d - 1)) == 0; }

/* y = M x (M row-major DD x DD, x in shared memory), one thread per output. */
template <int DD> __device__ __forceinline__ float matvec_row(const float *M, const float *x, int c) {
    const float *r = M + (size_t)c * DD;
    float acc = 0.f;
    for (int j = 0; j < DD; j++) acc = fmaf(__ldg(r + j), x[j], acc);
    return acc;
}

/* One block of DD threads per query head: q x scale x log2 e (qraw), rotated by the K plan
 * (qprep[.. DD)), then S q~ for QJL keys (qprep[DD .. DD + m)). Calibrated K: q / a rotated,
 * and q . mean into qconst (a block sum). */
template <int DD> __global__ void __launch_bounds__(DD) prep_kernel(PrepParams pp) {
    __shared__ float y[DD], x0[DD], red[DD / 32];
    /* the main pass (launched as a programmatic dependent) may start now: it builds its
     * tables and waits (pdl_wait) before it reads the prepared queries */
    kvqa::pdl_launch_dependents();
    const int s = blockIdx.y, hq = blockIdx.x, c = threadIdx.x;
    const size_t row = (size_t)s * pp.HQ + hq;
    const int th = (hq / pp.G) % pp.tabh; /* the KV head's rotation / QJL tables */
    const float *signs = pp.signs ? pp.signs + (size_t)th * 2 * DD : NULL;
    const float *Qm = pp.Q ? pp.Q + (size_t)th * DD * DD : NULL, *Sm = pp.S ? pp.S + (size_t)th * pp.m * DD : NULL;
    const float xs = pp.q[row * DD + c] * pp.scale2;
    pp.qraw[row * DD + c] = xs;
    float x = xs;
    if (pp.kcal) {
        const float *mu = pp.kcal + (size_t)((hq / pp.G) % pp.knh) * 4 * DD;
        if (pp.kchscale) x = xs * mu[3 * DD + c];
        float t = xs * mu[c];
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(KVQ_FULL_MASK, t, o);
        if ((c & 31) == 0) red[c >> 5] = t;
        __syncthreads();
        if (c == 0) {
            float sum = 0.f;
            for (int w = 0; w < DD / 32; w++) sum += red[w];
            pp.qconst[row] = sum;
        }
    }
    if (pp.rot == 1) {
        if constexpr (pow2_dim(DD)) {
            y[c] = x;
            __syncthreads();
            if (c < 32) {
                float s1[DD / 32], s2[DD / 32];
                hadamard2_signs<DD>(signs, c, s1, s2);
                hadamard2_warp<DD, false>(y, s1, s2, pp.rs, c);
            }
            __syncthreads();
        }
    } else if (pp.rot == 2) {
        x0[c] = x;
        __syncthreads();
        y[c] = matvec_row<DD>(Qm, x0, c);
        __syncthreads();
    } else {
        y[c] = x;
        __syncthreads();
    }
    pp.qprep[row * pp.qf + c] = y[c];
    if (pp.qjl)
        for (int i = c; i < pp.m; i += DD) pp.qprep[row * pp.qf + DD + i] = matvec_row<DD>(Sm, y, i);
}

struct MergeParams {
    const float *part;
    float *out;
    const int32_t *main_len, *win_len;
    int H, HQ, G, QG, nchunk, chunk_tokens, sf;
    int rot; /* the V plan's: 0 none, 1 two-round Hadamard, 2 dense (Qt: the transpose) */
    const float *signs, *Qt;
    int tabh; /* heads of signs, Qt (per-head plans) */
    float rs;
    const float *qconst; /* calibrated K: q . mean per query row (prep), added to the main chunks' m; or NULL */
    const float *vcal;   /* calibrated V: nh x 4d (mean, -, a, 1 / a), or NULL */
    int vnh;
    const int32_t *sink_len; /* NULL, or the sink rows of each sequence (the window pass reads them) */
};

/* The merge, one block per query head of MSL x DD threads (issue 17, session 11): slice g of DD
 * threads (one per coordinate) sums the accumulators of chunks g, g + MSL, ...; the chunks' (m, l)
 * are loaded, maxed, weighted (w = 2^(m - M)) and summed by all threads at once, once per chunk
 * (block reductions), the weights kept in shared memory. Was one block of DD threads in which every
 * thread walked all chunks three times serially (the max, l, the accumulators, 2^x twice per
 * chunk): 12.3 us at 1 x 32K / 128K with 32 chunks, + 0.23 us per chunk (Nsight Compute, H200,
 * docs/RESULTS.md "Split-K at small batch"), 20-34% of the step at batch 1. Then the slices'
 * sums, the inverse rotation on the first warp (hadamard2_warp; or the dense transpose on the first DD threads).
 * MSL = 4 slices from MERGE_SLICE_CHUNKS chunks on, else 1 (four slices of 1-2 chunks made the
 * merge of 64 x 4K, 2048 blocks, 14% of the step slower). */
constexpr int MERGE_SLICE_CHUNKS = 8;
static int merge_slices(int nchunk) { return nchunk >= MERGE_SLICE_CHUNKS ? 4 : 1; }
template <int DD, int MSL> __global__ void __launch_bounds__(DD * MSL) merge_q_kernel(MergeParams mp) {
    constexpr int NT = DD * MSL, NWM = NT / 32;
    extern __shared__ float msm[];
    const int s = blockIdx.y, hq = blockIdx.x, h = hq / mp.G, qi = hq - h * mp.G, qg = qi / QPB, q = qi - qg * QPB;
    const int NC = mp.nchunk + 1, t = threadIdx.x, c = t % DD, g = t / DD, SFd = mp.sf;
    const int lane = t & 31, wid = t >> 5;
    const bool on = t < DD; /* the first DD threads: the sum of the slices, the rotation, the output */
    float *ws = msm, *ls = ws + NC, *red = ls + NC, *y = red + 2 * NWM, *yw = y + DD, *ya = yw + DD;
    /* before the wait: what no kernel of this step writes (the lengths, written before prep started,
     * which the main pass and this launch follow; the V rotation's signs) */
    const int len = mp.main_len[s];
    /* the window pass's state exists: it had f16 rows (the sink's, the ring's) */
    const bool win = (mp.win_len && mp.win_len[s] > 0) || (mp.sink_len && mp.sink_len[s] > 0);
    const int th = h % mp.tabh; /* the KV head's rotation */
    float sg1[DD / 32], sg2[DD / 32]; /* the first warp's signs of the inverse rotation */
    if (pow2_dim(DD) && mp.rot == 1 && t < 32) hadamard2_signs<DD>(mp.signs + (size_t)th * 2 * DD, t, sg1, sg2);
    kvqa::pdl_wait(); /* the partial states of the previous kernels */
    const int nused = (len + mp.chunk_tokens - 1) / mp.chunk_tokens;
    const float *base = mp.part + (size_t)(((s * mp.H + h) * mp.QG + qg) * NC) * SFd;
    /* calibrated K: the main chunks' scores lack q . mean, the window's hold it */
    const float qc = mp.qconst ? mp.qconst[(size_t)s * mp.HQ + hq] : 0.f;
    float mx = -INFINITY;
    for (int ch = t; ch < NC; ch += NT) {
        const bool used = ch < nused || (ch == mp.nchunk && win);
        const float m = used ? base[(size_t)ch * SFd + q] + (ch < mp.nchunk ? qc : 0.f) : -INFINITY;
        ws[ch] = m;
        ls[ch] = used ? base[(size_t)ch * SFd + QPB + q] : 0.f;
        mx = fmaxf(mx, m);
    }
    for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[wid] = mx;
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < NWM; i++) M = fmaxf(M, red[i]);
    float lm = 0.f; /* the main chunks' share of l (W_main) */
    for (int ch = t; ch < NC; ch += NT) {
        const float m = ws[ch];
        const float w = m != -INFINITY ? exp2f(m - M) : 0.f;
        ws[ch] = w;
        if (w != 0.f && ch < mp.nchunk) lm += w * ls[ch];
    }
    for (int o = 16; o; o >>= 1) lm += __shfl_xor_sync(0xffffffffu, lm, o);
    if (lane == 0) red[NWM + wid] = lm;
    __syncthreads();
    float Lm = 0.f;
    for (int i = 0; i < NWM; i++) Lm += red[NWM + i];
    const float wwin = win ? ws[mp.nchunk] : 0.f;
    const float L = Lm + (wwin != 0.f ? wwin * ls[mp.nchunk] : 0.f);
    float acc = 0.f;
#pragma unroll 8
    for (int ch = g; ch < nused; ch += MSL) {
        const float w = ws[ch];
        const float v = base[(size_t)ch * SFd + 2 * QPB + q * DD + c]; /* a used chunk's state is written */
        if (w != 0.f) acc += w * v;
    }
    ya[g * DD + c] = acc;
    __syncthreads();
    float r = 0.f;
    if (on) {
        for (int i = 0; i < MSL; i++) r += ya[i * DD + c];
        y[c] = r;
        yw[c] = wwin != 0.f ? wwin * base[(size_t)mp.nchunk * SFd + 2 * QPB + q * DD + c] : 0.f;
    }
    if (mp.rot == 1) { /* x = s1 . H (s2 . H y / sqrt d) / sqrt d, on the first warp */
        if constexpr (pow2_dim(DD)) {
            __syncthreads();
            if (t < 32) hadamard2_warp<DD, true>(y, sg1, sg2, mp.rs, t);
            __syncthreads();
            r = on ? y[c] : 0.f;
        }
    } else if (mp.rot == 2) { /* x = Q^T y */
        __syncthreads();
        if (on) r = matvec_row<DD>(mp.Qt + (size_t)th * DD * DD, y, c);
    }
    if (!on) return;
    if (mp.vcal) { /* calibrated V: sum w (v - mean) = (unrotated acc) / a, plus W_main mean */
        const float *mu = mp.vcal + (size_t)(h % mp.vnh) * 4 * DD;
        r = r * mu[3 * DD + c] + Lm * mu[c];
    }
    mp.out[((size_t)s * mp.HQ + hq) * DD + c] = L > 0 ? (r + yw[c]) / L : 0.f;
}
/* Dynamic shared memory of the merge for nchunk main chunks (weights and l of nchunk + 1 chunks,
 * the reductions, y, yw, the slices' sums). */
static size_t merge_smem(int d, int nchunk) {
    const int msl = merge_slices(nchunk);
    return (size_t)(2 * (nchunk + 1) + 2 * (d * msl / 32) + (2 + msl) * d) * sizeof(float);
}

/* prep and merge at the head dims of the backend's attention */
#define KVQ_ATTN_DIMS(X) X(32) X(64) X(96) X(128) X(256)
static int launch_prep(int d, dim3 grid, cudaStream_t st, const PrepParams &pp) {
    switch (d) {
#define KVQ_PREP_CASE(DD) \
    case DD: prep_kernel<DD><<<grid, DD, 0, st>>>(pp); break;
        KVQ_ATTN_DIMS(KVQ_PREP_CASE)
#undef KVQ_PREP_CASE
    default: return KVQ_ERR_UNSUPPORTED_DIM;
    }
    return kvq_cuda_status(cudaGetLastError());
}
template <int DD, int MSL> static int launch_merge_k(dim3 grid, size_t msm, cudaStream_t st, bool pdl, const MergeParams &mp) {
    if (msm > 48 * 1024)
        KVQ_CU_TRY(cudaFuncSetAttribute(merge_q_kernel<DD, MSL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)msm));
    return kvqa::launch_kernel(merge_q_kernel<DD, MSL>, grid, dim3(DD * MSL), msm, st, pdl, mp);
}
static int launch_merge(int d, dim3 grid, size_t msm, cudaStream_t st, bool pdl, const MergeParams &mp) {
    const bool sliced = merge_slices(mp.nchunk) == 4;
    switch (d) {
#define KVQ_MERGE_CASE(DD) \
    case DD: return sliced ? launch_merge_k<DD, 4>(grid, msm, st, pdl, mp) : launch_merge_k<DD, 1>(grid, msm, st, pdl, mp);
        KVQ_ATTN_DIMS(KVQ_MERGE_CASE)
#undef KVQ_MERGE_CASE
    }
    return KVQ_ERR_UNSUPPORTED_DIM;
}

/* Tiles per chunk of the main pass for a batch (the split-K rule, or the tests' forced size). */
static int layer_chunk_tiles(const kvq_cuda_layer *L, int n_seq, int max_main_len) {
    const int tiles = (max_main_len + 15) / 16;
    const long long items = (long long)n_seq * L->H * L->QG;
    if (L->force_ct > 0) return L->force_ct;
    if (L->gen) return kvqa::chunk_tiles_waves(tiles, items, L->sms * L->occ, L->nw);
    return kvqa::chunk_tiles(tiles, items, L->sms, L->nw, layer_wide(L));
}

/* Floats of a prepared query: the rotated query (d), then S q~ (m) for QJL keys; at least 2d (the
 * tensor-core kernels read S q~ at d). */
static int layer_qf(const kvq_cuda_layer *L) { return L->d + (L->k->m > L->d ? L->k->m : L->d); }

/* Workspace floats of a batch with nchunk chunks: prepared queries, scaled queries, partial states,
 * then q . mean per query row (calibrated K). */
static size_t ws_floats(const kvq_cuda_layer *L, int n_seq, int nchunk, size_t *f_qprep, size_t *f_qraw) {
    const size_t nq = (size_t)n_seq * L->HQ;
    *f_qprep = nq * layer_qf(L);
    *f_qraw = nq * L->d;
    return *f_qprep + *f_qraw + (size_t)n_seq * L->H * L->QG * (nchunk + 1) * kvqa::state_floats(L->d) +
           (L->k->cal ? nq : 0);
}

extern "C" size_t kvq_cuda_attend_workspace_bytes(const kvq_cuda_layer *L, int n_seq, int max_main_len) {
    if (!L || n_seq < 0 || max_main_len < 0) return 0;
    /* the finest chunking of any batch within the bounds: the rule takes at least 4 tiles per warp
     * (the wide-table kernel: one chunk, or chunks of at least 4 tiles per warp) */
    const int tiles = (max_main_len + 15) / 16;
    const int ct_min = L->force_ct > 0 ? L->force_ct : 4 * L->nw;
    const int nchunk = tiles ? (tiles + ct_min - 1) / ct_min : 0;
    size_t a, b;
    return ws_floats(L, n_seq, nchunk, &a, &b) * sizeof(float);
}

extern "C" int kvq_cuda_layer_reserve(kvq_cuda_layer *L, int n_seq, int max_main_len) {
    if (!L) return KVQ_ERR_NULL;
    if (n_seq < 0 || max_main_len < 0) return KVQ_ERR_INVALID_ARG;
    const size_t need = kvq_cuda_attend_workspace_bytes(L, n_seq, max_main_len);
    if (need <= L->ws_bytes) return KVQ_OK;
    KVQ_CU_TRY(cudaDeviceSynchronize()); /* the old workspace may be in use */
    cudaFree(L->ws);
    L->ws = NULL;
    L->ws_bytes = 0;
    KVQ_CU_TRY(cudaMalloc(&L->ws, need));
    L->ws_bytes = need;
    return KVQ_OK;
}

/* Grows the layer's own workspace to `need` bytes (kvq_cuda_attend); refused while the stream is
 * being captured (an allocation there would invalidate the capture). */
static int grow_ws(kvq_cuda_layer *L, size_t need, cudaStream_t st) {
    if (need <= L->ws_bytes) return KVQ_OK;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    KVQ_CU_TRY(cudaStreamIsCapturing(st, &cs));
    if (cs != cudaStreamCaptureStatusNone) return KVQ_ERR_STATE; /* kvq_cuda_layer_reserve first */
    cudaFree(L->ws); /* synchronises: the old workspace may be in use */
    L->ws = NULL;
    L->ws_bytes = 0;
    KVQ_CU_TRY(cudaMalloc(&L->ws, need));
    L->ws_bytes = need;
    return KVQ_OK;
}

/* One decode step on workspace ws (ws_bytes); grow: the layer whose own workspace is used and
 * grown to the need (kvq_cuda_attend), NULL for a caller's workspace (kvq_cuda_attend_ws). */
static int attend_impl(const kvq_cuda_layer *L, const kvq_cuda_batch *b, const float *q, float scale, float *out,
                       void *ws, size_t ws_bytes, kvq_cuda_layer *grow, cudaStream_t st);

extern "C" int kvq_cuda_attend(kvq_cuda_layer *L, const kvq_cuda_batch *b, const float *q, float scale, float *out,
                               void *stream) {
    if (!L || !b) return KVQ_ERR_NULL;
    return attend_impl(L, b, q, scale, out, NULL, 0, L, (cudaStream_t)stream);
}

extern "C" int kvq_cuda_attend_ws(const kvq_cuda_layer *L, const kvq_cuda_batch *b, const float *q, float scale,
                                  float *out, void *workspace, size_t workspace_bytes, void *stream) {
    if (!L || !b) return KVQ_ERR_NULL;
    if (b->n_seq > 0 && !workspace) return KVQ_ERR_NULL;
    if ((uintptr_t)workspace % 16) return KVQ_ERR_INVALID_ARG;
    return attend_impl(L, b, q, scale, out, workspace, workspace_bytes, NULL, (cudaStream_t)stream);
}

static int attend_impl(const kvq_cuda_layer *L, const kvq_cuda_batch *b, const float *q, float scale, float *out,
                       void *ws, size_t ws_bytes, kvq_cuda_layer *grow, cudaStream_t st) {
    if (b->n_seq > 0 && (!q || !out || !b->main_len)) return KVQ_ERR_NULL;
    if (b->n_seq < 0 || b->max_main_len < 0 || !isfinite(scale)) return KVQ_ERR_INVALID_ARG;
    if (b->n_seq == 0) return KVQ_OK;
    if (b->max_main_len > 0 && (!b->pages || !b->block_table || b->max_pages <= 0)) return KVQ_ERR_NULL;
    const bool win = b->win_len != NULL && L->W > 0;
    if (b->win_len && (!b->window || L->W <= 0)) return KVQ_ERR_INVALID_ARG;
    const bool sink = b->sink_len != NULL;
    if (sink && (!b->sink || L->S <= 0)) return KVQ_ERR_INVALID_ARG;
    const int tiles = (b->max_main_len + 15) / 16;
    const int ct = layer_chunk_tiles(L, b->n_seq, b->max_main_len);
    const int nchunk = tiles ? (tiles + ct - 1) / ct : 0;
    size_t f_qprep, f_qraw;
    const size_t need = ws_floats(L, b->n_seq, nchunk, &f_qprep, &f_qraw) * sizeof(float);
    if (grow) {
        const int rc = grow_ws(grow, need, st);
        if (rc) return rc;
        ws = grow->ws;
        ws_bytes = grow->ws_bytes;
    }
    if (need > ws_bytes) return KVQ_ERR_INVALID_ARG;
    float *qprep = (float *)ws, *qraw = qprep + f_qprep, *part = qraw + f_qraw;
    float *qconst = part + (size_t)b->n_seq * L->H * L->QG * (nchunk + 1) * kvqa::state_floats(L->d);

    PrepParams pp;
    pp.q = q;
    pp.qprep = qprep;
    pp.qraw = qraw;
    pp.HQ = L->HQ;
    pp.G = L->G;
    pp.kcal = L->k->cal;
    pp.knh = L->k->nh;
    pp.kchscale = L->k->chscale;
    pp.qconst = qconst;
    pp.qf = layer_qf(L);
    pp.m = L->k->m;
    pp.scale2 = scale * 1.4426950408889634f;
    pp.rot = L->k->rot;
    pp.qjl = L->k->kind == KVQ_LAY_TQPROD || L->k->kind == KVQ_LAY_QJL;
    pp.signs = L->k->signs;
    pp.Q = L->k->Q;
    pp.S = L->k->S;
    pp.rs = L->k->rot_s;
    pp.tabh = L->k->tabh > 0 ? L->k->tabh : 1;
    {
        const int rc = launch_prep(L->d, dim3(L->HQ, b->n_seq), st, pp);
        if (rc) return rc;
    }

    kvqa::AttnParams p;
    memset(&p, 0, sizeof p);
    p.n_seq = b->n_seq;
    p.H = L->H;
    p.HQ = L->HQ;
    p.G = L->G;
    p.QG = L->QG;
    p.P = L->P;
    p.max_pages = b->max_pages;
    p.W = L->W;
    p.page_bytes = L->page_bytes;
    p.kv_off_v = (unsigned long long)L->H * L->P * L->kb;
    p.krun = (unsigned long long)L->P * L->kb;
    p.vrun = (unsigned long long)L->P * L->vb;
    p.pages = (const uint8_t *)b->pages;
    p.block_table = b->block_table;
    p.seq_map = b->seq_map;
    p.main_len = b->main_len;
    p.win_len = win ? b->win_len : NULL;
    p.window = (const uint8_t *)b->window;
    p.qprep = qprep;
    p.qf = layer_qf(L);
    p.d = L->d;
    p.sf = kvqa::state_floats(L->d);
    p.gk = L->gk;
    p.gv = L->gv;
    p.qraw = qraw;
    p.part = part;
    p.nchunk = nchunk;
    p.chunk_tiles = ct;
    p.nlut = L->nlut;
    for (int i = 0; i < L->nlut; i++) p.lut[i] = L->lut[i];
    p.klut[0] = L->klut[0];
    p.klut[1] = L->klut[1];
    p.vlut[0] = L->vlut[0];
    p.vlut[1] = L->vlut[1];
    p.kconst = L->k->qjl_k;
    p.lut_bytes = L->lut_bytes;
    p.wide = L->wide;
    p.wide2 = L->wide2;
    p.wide42 = L->wide42;
    p.wide33 = L->wide33;
    p.pdl = L->pdl;
    p.sink_len = sink ? b->sink_len : NULL;
    p.sink = (const uint8_t *)b->sink;
    p.S = L->S;
    if (nchunk > 0) {
        int rc = L->gen ? kvq_attn_launch_gen(p, 1, st, L->gen_smem, NULL) : L->fn(p, 1, st, NULL, NULL, NULL);
        if (rc) return rc;
    }
    if (win || sink) { /* the f16 rows: the sink's, then the ring's */
        kvqa::AttnParams pw = p;
        pw.nlut = 0;
        pw.lut_bytes = 0;
        int rc;
        if (fast_dim(L->d)) {
            rc = launch_window(L->d, pw, 1, st);
        } else { /* the generic kernel on the f16 rows */
            pw.gk = pw.gv = gen_f16(L->d);
            pw.gen_win = 1;
            rc = kvq_attn_launch_gen(pw, 1, st, L->gen_wsmem, NULL);
        }
        if (rc) return rc;
    }
    MergeParams mp;
    mp.part = part;
    mp.out = out;
    mp.main_len = b->main_len;
    mp.win_len = win ? b->win_len : NULL;
    mp.H = L->H;
    mp.HQ = L->HQ;
    mp.G = L->G;
    mp.QG = L->QG;
    mp.nchunk = nchunk;
    mp.chunk_tokens = 16 * ct;
    mp.sf = kvqa::state_floats(L->d);
    mp.rot = L->v->rot;
    mp.signs = L->v->signs;
    mp.Qt = L->v->Qt;
    mp.rs = L->v->rot_s;
    mp.tabh = L->v->tabh > 0 ? L->v->tabh : 1;
    mp.qconst = L->k->cal ? qconst : NULL;
    mp.vcal = L->v->cal;
    mp.vnh = L->v->nh;
    mp.sink_len = p.sink_len;
    /* one block of merge_slices(nchunk) x d threads per query head; a programmatic dependent of the main pass (or
     * the window pass) where the device takes it: its launch overlaps their end */
    const size_t msm = merge_smem(L->d, nchunk);
    return launch_merge(L->d, dim3(L->HQ, b->n_seq), msm, st, L->pdl, mp);
}
