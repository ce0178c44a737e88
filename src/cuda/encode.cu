/*
 * Device plans and the encoders: one warp per vector.
 *
 * Bytes identical to the CPU codec's scalar reference (kvq_plan_clone_isa
 * SCALAR): the rotation does the same butterflies in the same order (float
 * adds, no contraction), scales and norms are computed in double as
 * tq_quantize_ref / rvq / qjl do (only the order of the double sums differs:
 * a stored f16 scale could differ when a float rounding of the double result
 * sits exactly on a tie, probability ~2^-28 per vector; tests count it), the
 * QJL projection is the scalar matvec's sequential float sum, quantization
 * is the same branch-free count of boundaries.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/plan_export.h"
#include "cuda_internal.cuh"
#include "tcq_value.cuh"

#define ENC_WARPS 8

/* ---- plans ----------------------------------------------------------------- */
static int is_pow2(int d) { return d > 0 && (d & (d - 1)) == 0; }

static int upload(float **dst, const float *src, size_t n) {
    *dst = NULL;
    if (!n || !src) return KVQ_OK;
    KVQ_CU_TRY(cudaMalloc((void **)dst, n * sizeof(float)));
    KVQ_CU_TRY(cudaMemcpy(*dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
    return KVQ_OK;
}

extern "C" int kvq_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" void kvq_cuda_plan_free(kvq_cuda_plan *p) {
    if (!p) return;
    cudaFree(p->signs);
    cudaFree(p->Q);
    cudaFree(p->Qt);
    cudaFree(p->c1);
    cudaFree(p->t1);
    cudaFree(p->c2);
    cudaFree(p->t2);
    cudaFree(p->S);
    cudaFree(p->St);
    cudaFree(p->cal);
    free(p);
}

extern "C" size_t kvq_cuda_plan_code_bytes(const kvq_cuda_plan *p) { return p ? p->code_bytes : 0; }

/* Same inner method (calibrated plans of one policy and dim: mu differs, and with the C cache's per-head
 * seeds the rotation and the QJL matrix; the codebooks do not depend on the seed). */
static int same_floats(const float *a, const float *b, size_t n) {
    return (!a && !b) || (a && b && !memcmp(a, b, n * sizeof(float)));
}
static int same_inner(const kvq_plan_tables &a, const kvq_plan_tables &b) {
    const size_t d = (size_t)a.d;
    return a.kind == b.kind && a.d == b.d && a.bits == b.bits && a.m == b.m && a.scale_bytes == b.scale_bytes &&
           a.scale_norm == b.scale_norm && a.rot == b.rot && a.n1 == b.n1 && a.n2 == b.n2 &&
           a.code_bytes == b.code_bytes && a.chscale == b.chscale && !a.mu == !b.mu &&
           !a.signs == !b.signs && !a.rot_mat == !b.rot_mat && !a.S == !b.S && same_floats(a.c1, b.c1, (size_t)a.n1) &&
           same_floats(a.t1, b.t1, a.n1 > 1 ? (size_t)a.n1 - 1 : 0) &&
           same_floats(a.c2, b.c2, (size_t)a.n2) && same_floats(a.t2, b.t2, a.n2 > 1 ? (size_t)a.n2 - 1 : 0) && d > 0;
}

/* Uploads the per-head tables (one head: nplans 1) of n floats each, rows x cols transposed if tr. */
static int upload_heads(float **dst, const kvq_plan *const *plans, int nplans, int which, size_t rows, size_t cols,
                        int tr) {
    const size_t n = rows * cols;
    float *buf = (float *)malloc((size_t)nplans * n * sizeof(float));
    if (!buf) return KVQ_ERR_NOMEM;
    int rc = KVQ_OK;
    for (int h = 0; h < nplans && !rc; h++) {
        kvq_plan_tables th;
        rc = kvq_plan_export(plans[h], &th);
        const float *src = which == 0 ? th.signs : which == 1 ? th.rot_mat : th.S;
        if (!rc && !src) rc = KVQ_ERR_INVALID_ARG;
        float *o = buf + (size_t)h * n;
        if (!rc && !tr) memcpy(o, src, n * sizeof(float));
        if (!rc && tr)
            for (size_t i = 0; i < rows; i++)
                for (size_t j = 0; j < cols; j++) o[j * rows + i] = src[i * cols + j];
    }
    if (!rc) rc = upload(dst, buf, (size_t)nplans * n);
    free(buf);
    return rc;
}

static int plan_create(kvq_cuda_plan **out, const kvq_plan *const *plans, int nplans);

extern "C" int kvq_cuda_plan_create(kvq_cuda_plan **out, const kvq_plan *plan) {
    if (!out || !plan) return KVQ_ERR_NULL;
    return plan_create(out, &plan, 1);
}

extern "C" int kvq_cuda_plan_create_heads(kvq_cuda_plan **out, const kvq_plan *const *plans, int n_heads) {
    if (!out || !plans) return KVQ_ERR_NULL;
    if (n_heads <= 0) return KVQ_ERR_INVALID_ARG;
    for (int h = 0; h < n_heads; h++)
        if (!plans[h]) return KVQ_ERR_NULL;
    return plan_create(out, plans, n_heads);
}

static int plan_create(kvq_cuda_plan **out, const kvq_plan *const *plans, int nplans) {
    kvq_plan_tables t;
    int rc = kvq_plan_export(plans[0], &t);
    if (rc) return rc;
    if (t.kind == KVQ_LAY_NONE) return KVQ_ERR_UNSUPPORTED; /* f32, bf16, q4, polar, +outliers */
    if (nplans > 1 && !t.mu) return KVQ_ERR_INVALID_ARG;    /* per-head plans are calibrated ones */
    for (int h = 1; h < nplans; h++) {
        kvq_plan_tables th;
        rc = kvq_plan_export(plans[h], &th);
        if (rc) return rc;
        if (!same_inner(t, th)) return KVQ_ERR_INVALID_ARG;
    }
    const int d = t.d;
    if (t.kind == KVQ_LAY_F16 || t.kind == KVQ_LAY_Q8) {
        if (d % 8 || d > 512) return KVQ_ERR_UNSUPPORTED_DIM;
    } else if (d < 32 || d > 512 || d % 32) {
        /* rotated methods: a warp per vector, d / 32 values a lane (powers of two: the Hadamard
         * rotation; other multiples of 32: the dense one) */
        return KVQ_ERR_UNSUPPORTED_DIM;
    }
    if (t.rot == 1 && !is_pow2(d)) return KVQ_ERR_UNSUPPORTED;
    if ((t.kind == KVQ_LAY_QJL || t.kind == KVQ_LAY_TQPROD) && t.m % 32) return KVQ_ERR_UNSUPPORTED;
    kvq_cuda_plan *p = (kvq_cuda_plan *)calloc(1, sizeof *p);
    if (!p) return KVQ_ERR_NOMEM;
    p->L = kvq_layout_make(t.kind, d, t.bits, t.m, t.scale_bytes);
    p->kind = t.kind;
    p->d = d;
    p->bits = t.bits;
    p->m = t.m;
    p->sb = t.scale_bytes;
    p->scale_norm = t.scale_norm;
    p->rot = t.rot;
    p->rot_s = 1.0f / sqrtf((float)d);
    p->qjl_k = t.m ? sqrtf(3.14159265358979323846f / 2) / (float)t.m : 0.0f;
    p->n1 = t.n1;
    p->n2 = t.n2;
    p->code_bytes = t.code_bytes;
    for (int i = 0; i < t.n1; i++) p->hc1[i] = t.c1[i];
    for (int i = 0; i < t.n2; i++) p->hc2[i] = t.c2[i];
    if ((size_t)p->L.bytes != t.code_bytes) rc = KVQ_ERR_UNSUPPORTED;
    /* rotation and QJL tables: each plan's (per-head plans of the C cache have per-head seeds) */
    p->tabh = nplans;
    if (!rc && t.rot == 1) rc = upload_heads(&p->signs, plans, nplans, 0, 2, (size_t)d, 0);
    if (!rc && t.rot == 2) rc = upload_heads(&p->Q, plans, nplans, 1, (size_t)d, (size_t)d, 0);
    if (!rc && t.rot == 2) rc = upload_heads(&p->Qt, plans, nplans, 1, (size_t)d, (size_t)d, 1);
    if (!rc) rc = upload(&p->c1, t.c1, (size_t)t.n1);
    if (!rc && t.n1 > 1) rc = upload(&p->t1, t.t1, (size_t)t.n1 - 1);
    if (!rc) rc = upload(&p->c2, t.c2, (size_t)t.n2);
    if (!rc && t.n2 > 1) rc = upload(&p->t2, t.t2, (size_t)t.n2 - 1);
    if (!rc && t.S) rc = upload_heads(&p->S, plans, nplans, 2, (size_t)t.m, (size_t)d, 0);
    if (!rc && t.S) rc = upload_heads(&p->St, plans, nplans, 2, (size_t)t.m, (size_t)d, 1);
    if (!rc && t.mu) { /* each head's mean and channel scales, as the CPU plans hold them */
        p->nh = nplans;
        p->chscale = t.chscale;
        float *cal = (float *)malloc((size_t)nplans * 4 * d * sizeof(float));
        if (!cal) rc = KVQ_ERR_NOMEM;
        for (int h = 0; !rc && h < nplans; h++) {
            kvq_plan_tables th;
            rc = kvq_plan_export(plans[h], &th);
            if (!rc) memcpy(cal + (size_t)h * 4 * d, th.mu, 4 * (size_t)d * sizeof(float));
        }
        if (!rc) rc = upload(&p->cal, cal, (size_t)nplans * 4 * d);
        free(cal);
    }
    if (rc) {
        kvq_cuda_plan_free(p);
        return rc;
    }
    *out = p;
    return KVQ_OK;
}

/* ---- encoder ------------------------------------------------------------- */
struct EncParams {
    const void *x;
    int f16in;
    long long n;
    int d;
    kvq_layout L;
    kvq_enc_out out;
    const float *signs, *Q, *c1, *t1, *c2, *t2, *St;
    int n1, n2, m, sb, scale_norm, bits, rot;
    float rot_s;
    const float *cal; /* calibrated plans: nh x 4d (kvq_cuda_plan), else NULL */
    int nh;
    int tabh;         /* heads of signs, Q, St (vector v: head v % tabh) */
    int *status;
};

/* Address of byte i of field f of vector v. */
__device__ __forceinline__ uint8_t *enc_dst(const EncParams &P, long long v, int f, int i) {
    const kvq_enc_out &o = P.out;
    if (!o.paged) return o.base + (unsigned long long)v * P.L.bytes + P.L.off[f] + i;
    long long tok = v / o.H;
    int h = (int)(v - tok * o.H);
    int slot = o.dst[tok];
    int page = slot / o.P, s = slot - page * o.P;
    uint8_t *run = o.base + (unsigned long long)page * o.page_bytes + o.kv_off +
                   (unsigned long long)h * o.P * P.L.bytes;
    return run + kvq_layout_page_offset(&P.L, f, o.P, s, i);
}

/* Writes the record assembled in rec (shared) to its destination, 2 bytes per lane step.
 * A negative page slot (a padding entry of a slot mapping, vLLM's -1) writes nothing. */
__device__ __forceinline__ void enc_flush(const EncParams &P, long long v, const uint8_t *rec, int lane) {
    if (P.out.paged && P.out.dst[v / P.out.H] < 0) return;
    for (int f = 0; f < P.L.nfield; f++) {
        const int sz = P.L.size[f], off = P.L.off[f];
        for (int i = 2 * lane; i < sz; i += 64) {
            uint16_t w = (uint16_t)(rec[off + i] | (rec[off + i + 1] << 8));
            *(uint16_t *)enc_dst(P, v, f, i) = w;
        }
    }
}

/* A scale stored as f32 or f16 with the CPU's range rule (layouts.h): NaN or
 * |s| beyond KVQ_SCALE32_MAX / KVQ_SCALE16_MAX fails. */
__device__ __forceinline__ int store_scale(const EncParams &P, uint8_t *dst, float s) {
    if (!(fabsf(s) <= (P.sb == 4 ? KVQ_SCALE32_MAX : KVQ_SCALE16_MAX))) return KVQ_ERR_RANGE;
    if (P.sb == 4) {
        memcpy(dst, &s, 4);
        return KVQ_OK;
    }
    /* One 16-bit store (every scale field sits at an even offset). Extracting the
     * low byte of the f16 bits instead -- (uint8_t)(bits & 0xff), or a memcpy to
     * an address of unknown alignment -- is compiled by nvcc 13.0 for sm_90 into
     * F2I.U8.F16, a numeric conversion of the half's value (seen in the SASS,
     * caught by test_cuda: 7.03 stored its low byte as 0x07). */
    *(uint16_t *)dst = __half_as_ushort(__float2half_rn(s));
    return KVQ_OK;
}
__device__ __forceinline__ float load_scale(const EncParams &P, const uint8_t *src) {
    if (P.sb == 4) {
        float s;
        memcpy(&s, src, 4);
        return s;
    }
    uint16_t h = (uint16_t)(src[0] | (src[1] << 8));
    return kvq_half_bits_to_float(h);
}

/* idx = number of boundaries below x, by the same branch-free search as cb_quantize. */
__device__ __forceinline__ int quantize(const float *t, int n, float x) {
    int idx = 0;
    for (int step = n >> 1; step > 0; step >>= 1) idx += (x > t[idx + step - 1]) ? step : 0;
    return idx;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(KVQ_FULL_MASK, v, o);
    return v;
}

/* Strided packing of the d indices in idx (shared) into dst (shared). */
__device__ __forceinline__ void pack_strided(const uint8_t *idx, int d, int b, uint8_t *dst, int lane) {
    int shift = 0;
    for (int f = 0; f < 3; f++) {
        const int w = kvq_strided_width(b, f);
        if (!w) break;
        const int S = d * w / 8, per = 8 / w, mask = (1 << w) - 1;
        for (int j = lane; j < S; j += 32) {
            unsigned byte = 0;
            for (int k = 0; k < per; k++) byte |= (unsigned)((idx[j + k * S] >> shift) & mask) << (k * w);
            dst[j] = (uint8_t)byte;
        }
        dst += S;
        shift += w;
    }
}

/* QJL signs of S r (r: d floats in shared; St: the head's transpose of S): the scalar matvec's
 * sequential float sums, row i = lane + 32 k; bit i of the LSB-first stream = (S_i r >= 0). */
__device__ __forceinline__ void qjl_signs_warp(const EncParams &P, const float *St, const float *r, uint8_t *bits,
                                               int lane) {
    const int m = P.m, d = P.d;
    for (int k0 = 0; k0 < m; k0 += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        const int nk = (m - k0) >= 128 ? 4 : (m - k0) / 32;
        for (int j = 0; j < d; j++) {
            const float rj = r[j];
            const float *col = St + (size_t)j * m + k0 + lane;
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (k < nk) acc[k] = __fadd_rn(acc[k], __fmul_rn(__ldg(col + 32 * k), rj));
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (k >= nk) break;
            unsigned bal = __ballot_sync(KVQ_FULL_MASK, acc[k] >= 0.0f);
            if (lane < 4) bits[(k0 + 32 * k) / 8 + lane] = (uint8_t)(bal >> (8 * lane));
        }
    }
}

/* Loads the values of lane (elements lane*ept + e, e < ept) of vector v; returns 1 if all
 * finite. RT: ept = d / 32 at run time (non-power-of-two d), EPT its bound; else ept = EPT. */
template <int EPT, bool RT>
__device__ __forceinline__ int load_row(const EncParams &P, long long v, float x[EPT], int ept, int lane) {
    int ok = 1;
    if (P.f16in) {
        const __half *src = (const __half *)P.x + (size_t)v * P.d + lane * ept;
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            x[e] = 0.f;
            if (e < ept) {
                const uint16_t hb = ((const uint16_t *)src)[e];
                ok &= (hb & 0x7c00u) != 0x7c00u;
                x[e] = kvq_half_bits_to_float(hb);
            }
        }
    } else {
        const float *src = (const float *)P.x + (size_t)v * P.d + lane * ept;
        if (!RT && EPT % 4 == 0) {
#pragma unroll
            for (int e = 0; e < EPT; e += 4) {
                float4 q = *(const float4 *)(src + e);
                x[e] = q.x, x[e + 1] = q.y, x[e + 2] = q.z, x[e + 3] = q.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < EPT; e++) x[e] = e < ept ? src[e] : 0.f;
        }
#pragma unroll
        for (int e = 0; e < EPT; e++) ok &= isfinite(x[e]) ? 1 : 0;
    }
    return __all_sync(KVQ_FULL_MASK, ok);
}

/* Calibrated plans (m_center.c enc): xc = (x - mean) * a of vector v's head (v % nh), in float
 * without contraction, element lane * ept + e; returns 1 if every xc is finite (else KVQ_ERR_RANGE). */
template <int EPT>
__device__ __forceinline__ int center_row(const EncParams &P, long long v, float x[EPT], int ept, int lane) {
    const float *mu = P.cal + (size_t)(v % P.nh) * 4 * P.d, *a = mu + 2 * P.d;
    int ok = 1;
#pragma unroll
    for (int e = 0; e < EPT; e++)
        if (e < ept) {
            const int c = lane * ept + e;
            x[e] = __fmul_rn(__fsub_rn(x[e], __ldg(mu + c)), __ldg(a + c));
            ok &= isfinite(x[e]) ? 1 : 0;
        }
    return __all_sync(KVQ_FULL_MASK, ok);
}

/* The dense rotation y = Q x (rot 2, non-power-of-two d) as the scalar matvec computes it:
 * row i's sequential float sum of Q[i][j] x[j] (no FMA); x staged in buf (shared). */
template <int EPT>
__device__ __forceinline__ void dense_rot_warp(const EncParams &P, const float *Q, float y[EPT], float *buf, int ept,
                                               int lane) {
    const int d = P.d;
#pragma unroll
    for (int e = 0; e < EPT; e++)
        if (e < ept) buf[lane * ept + e] = y[e];
    __syncwarp();
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        if (e >= ept) break;
        const float *row = Q + (size_t)(lane * ept + e) * d;
        float acc = 0.f;
        for (int j = 0; j < d; j++) acc = __fadd_rn(acc, __fmul_rn(__ldg(row + j), buf[j]));
        y[e] = acc;
    }
    __syncwarp();
}

/* Rotated methods (tq-mse, tq-prod, rvq) and qjl. !RT: d = 32 * EPT, a power of two (Hadamard
 * or no rotation); RT: any d = 32 * ept <= 32 * EPT (the dense rotation, or none). */
template <int KIND, int EPT, bool RT> __global__ void __launch_bounds__(32 * ENC_WARPS) enc_rot_kernel(EncParams P) {
    constexpr int DM = 32 * EPT;
    __shared__ float s_tab[4 * 256 + 2 * DM];
    __shared__ float s_buf[ENC_WARPS][DM];
    __shared__ uint8_t s_idx[ENC_WARPS][DM];
    __shared__ __align__(16) uint8_t s_rec[ENC_WARPS][2 * DM + 16];
    const int d = RT ? P.d : DM, ept = RT ? P.d / 32 : EPT;
    float *c1 = s_tab, *t1 = s_tab + 256, *c2 = s_tab + 512, *t2 = s_tab + 768, *sg = s_tab + 1024;
    for (int i = threadIdx.x; i < P.n1; i += blockDim.x) c1[i] = P.c1[i];
    for (int i = threadIdx.x; i < P.n1 - 1; i += blockDim.x) t1[i] = P.t1[i];
    for (int i = threadIdx.x; i < P.n2; i += blockDim.x) c2[i] = P.c2[i];
    for (int i = threadIdx.x; i < P.n2 - 1; i += blockDim.x) t2[i] = P.t2[i];
    if (!RT && P.rot == 1)
        for (int i = threadIdx.x; i < 2 * DM; i += blockDim.x) sg[i] = P.signs[i];
    __syncthreads();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *buf = s_buf[w];
    uint8_t *idx = s_idx[w], *rec = s_rec[w];
    const double dd = (double)d;
    for (long long v = (long long)blockIdx.x * ENC_WARPS + w; v < P.n; v += (long long)gridDim.x * ENC_WARPS) {
        float y[EPT];
        if (!load_row<EPT, RT>(P, v, y, ept, lane)) {
            if (lane == 0) kvq_dev_error(P.status, KVQ_ERR_NONFINITE);
            continue;
        }
        if (P.cal && !center_row<EPT>(P, v, y, ept, lane)) {
            if (lane == 0) kvq_dev_error(P.status, KVQ_ERR_RANGE);
            continue;
        }
        /* the vector's head's tables (per-head plans), else the block's copy of the signs */
        const int th = (int)(v % P.tabh);
        const float *sgv = P.tabh > 1 && P.signs ? P.signs + (size_t)th * 2 * DM : sg;
        const float *St = P.St ? P.St + (size_t)th * P.m * d : NULL;
        if (KIND != KVQ_LAY_QJL && !RT && P.rot == 1) {
            const float s = P.rot_s;
#pragma unroll
            for (int e = 0; e < EPT; e++) y[e] = __fmul_rn(__fmul_rn(y[e], sgv[lane * EPT + e]), s);
            fwht_warp<EPT>(y, lane);
#pragma unroll
            for (int e = 0; e < EPT; e++) y[e] = __fmul_rn(y[e], __fmul_rn(sgv[DM + lane * EPT + e], s));
            fwht_warp<EPT>(y, lane);
        }
        if (KIND != KVQ_LAY_QJL && RT && P.rot == 2) dense_rot_warp<EPT>(P, P.Q + (size_t)th * d * d, y, buf, ept, lane);
        double ss = 0;
#pragma unroll
        for (int e = 0; e < EPT; e++)
            if (e < ept) ss += (double)y[e] * (double)y[e];
        ss = warp_sum_d(ss);
        int rc = KVQ_OK;
        if (KIND == KVQ_LAY_QJL) {
            rc = store_scale(P, rec, (float)sqrt(ss));
#pragma unroll
            for (int e = 0; e < EPT; e++)
                if (e < ept) buf[lane * ept + e] = y[e];
            __syncwarp();
            qjl_signs_warp(P, St, buf, rec + P.L.off[KVQ_QJL_SIGNS], lane);
        } else if (KIND == KVQ_LAY_RVQ) {
            const float s1 = (float)sqrt(ss / dd), inv = s1 > 0 ? 1.0f / s1 : 0.0f;
            float r[EPT];
            int i1[EPT];
            double rr = 0;
#pragma unroll
            for (int e = 0; e < EPT; e++) {
                float u = __fmul_rn(y[e], inv);
                i1[e] = quantize(t1, P.n1, u);
                r[e] = __fsub_rn(u, c1[i1[e]]);
                if (e < ept) rr += (double)r[e] * (double)r[e];
            }
            rr = warp_sum_d(rr);
            const float sigma = (float)sqrt(rr / dd), rinv = sigma > 0 ? 1.0f / sigma : 0.0f;
#pragma unroll
            for (int e = 0; e < EPT; e++)
                if (e < ept) {
                    idx[lane * ept + e] = (uint8_t)i1[e];
                    buf[lane * ept + e] = __int_as_float(quantize(t2, P.n2, __fmul_rn(r[e], rinv)));
                }
            rc = store_scale(P, rec + P.L.off[KVQ_RVQ_S1], s1);
            if (!rc) rc = store_scale(P, rec + P.L.off[KVQ_RVQ_S2], __fmul_rn(s1, sigma));
            __syncwarp();
            pack_strided(idx, d, P.bits, rec + P.L.off[KVQ_RVQ_IDX1], lane);
            __syncwarp();
#pragma unroll
            for (int e = 0; e < EPT; e++)
                if (e < ept) idx[lane * ept + e] = (uint8_t)__float_as_int(buf[lane * ept + e]);
            __syncwarp();
            pack_strided(idx, d, P.bits, rec + P.L.off[KVQ_RVQ_IDX2], lane);
        } else { /* tq-mse, tq-prod: tq_quantize_ref */
            int id[EPT];
            float g;
            if (ss == 0) {
                const int z = quantize(t1, P.n1, 0.0f);
#pragma unroll
                for (int e = 0; e < EPT; e++) id[e] = z;
                g = 0;
            } else {
                const double nrm = sqrt(ss);
                const float s = (float)(sqrt(dd) / nrm);
                double yc = 0, cc = 0;
#pragma unroll
                for (int e = 0; e < EPT; e++) {
                    id[e] = quantize(t1, P.n1, __fmul_rn(y[e], s));
                    const double c = (double)c1[id[e]];
                    if (e < ept) yc += (double)y[e] * c, cc += c * c;
                }
                yc = warp_sum_d(yc);
                cc = warp_sum_d(cc);
                g = P.scale_norm || cc == 0 ? (float)(nrm / sqrt(dd)) : (float)(yc / cc);
            }
#pragma unroll
            for (int e = 0; e < EPT; e++)
                if (e < ept) idx[lane * ept + e] = (uint8_t)id[e];
            rc = store_scale(P, rec, g);
            __syncwarp();
            pack_strided(idx, d, P.bits, rec + P.L.off[KVQ_TQ_IDX], lane);
            if (KIND == KVQ_LAY_TQPROD && !rc) {
                /* residual against the scale actually stored (m_tq_prod.c) */
                const float gs = load_scale(P, rec);
                double rr = 0;
#pragma unroll
                for (int e = 0; e < EPT; e++)
                    if (e < ept) {
                        y[e] = __fsub_rn(y[e], __fmul_rn(gs, c1[id[e]]));
                        rr += (double)y[e] * (double)y[e];
                        buf[lane * ept + e] = y[e];
                    }
                rr = warp_sum_d(rr);
                rc = store_scale(P, rec + P.L.off[KVQ_TQPROD_RNORM], (float)sqrt(rr));
                __syncwarp();
                qjl_signs_warp(P, St, buf, rec + P.L.off[KVQ_TQPROD_SIGNS], lane);
            }
        }
        __syncwarp();
        if (rc) {
            if (lane == 0) kvq_dev_error(P.status, rc);
        } else {
            enc_flush(P, v, rec, lane);
        }
        __syncwarp();
    }
}

/* q8 (any d % 8 == 0, d <= 512) and f16: lane holds elements lane + 32 k. */
template <int KIND> __global__ void __launch_bounds__(32 * ENC_WARPS) enc_plain_kernel(EncParams P) {
    __shared__ __align__(16) uint8_t s_rec[ENC_WARPS][2 * 512 + 64];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, d = P.d, nb = (d + 31) / 32;
    uint8_t *rec = s_rec[w];
    for (long long v = (long long)blockIdx.x * ENC_WARPS + w; v < P.n; v += (long long)gridDim.x * ENC_WARPS) {
        float x[16];
        int ok = 1;
        for (int k = 0; k < nb; k++) {
            const int c = lane + 32 * k;
            float val = 0;
            if (c < d) {
                if (P.f16in) {
                    uint16_t hb = ((const uint16_t *)P.x)[(size_t)v * d + c];
                    ok &= (hb & 0x7c00u) != 0x7c00u;
                    val = kvq_half_bits_to_float(hb);
                } else {
                    val = ((const float *)P.x)[(size_t)v * d + c];
                    ok &= isfinite(val) ? 1 : 0;
                }
            }
            x[k] = val;
        }
        if (!__all_sync(KVQ_FULL_MASK, ok)) {
            if (lane == 0) kvq_dev_error(P.status, KVQ_ERR_NONFINITE);
            continue;
        }
        if (P.cal) { /* calibrated plans: xc = (x - mean) * a (m_center.c enc) */
            const float *mu = P.cal + (size_t)(v % P.nh) * 4 * d, *a = mu + 2 * d;
            for (int k = 0; k < nb; k++) {
                const int c = lane + 32 * k;
                if (c < d) {
                    x[k] = __fmul_rn(__fsub_rn(x[k], __ldg(mu + c)), __ldg(a + c));
                    ok &= isfinite(x[k]) ? 1 : 0;
                }
            }
            if (!__all_sync(KVQ_FULL_MASK, ok)) {
                if (lane == 0) kvq_dev_error(P.status, KVQ_ERR_RANGE);
                continue;
            }
        }
        int bad = 0;
        if (KIND == KVQ_LAY_F16) {
            for (int k = 0; k < nb; k++) {
                const int c = lane + 32 * k;
                if (c >= d) break;
                if (x[k] > 65504.0f || x[k] < -65504.0f) bad = 1;
                ((uint16_t *)rec)[c] = __half_as_ushort(__float2half_rn(x[k]));
            }
        } else { /* q8: m_q8.c enc */
            int8_t *q = (int8_t *)(rec + 2 * nb);
            for (int k = 0; k < nb; k++) {
                float amax = fabsf(x[k]);
                for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(KVQ_FULL_MASK, amax, o));
                const float s = __fdiv_rn(amax, 127.0f);
                if (s > 65504.0f) bad = 1;
                __half h = __float2half_rn(s);
                const float sh = __half2float(h);
                const float inv = sh > 0 ? __fdiv_rn(1.0f, sh) : 0.0f;
                if (lane == 0) ((uint16_t *)rec)[k] = __half_as_ushort(h);
                const int c = lane + 32 * k;
                if (c < d) {
                    float r = rintf(__fmul_rn(x[k], inv));
                    q[c] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
                }
            }
        }
        bad = __any_sync(KVQ_FULL_MASK, bad);
        __syncwarp();
        if (bad) {
            if (lane == 0) kvq_dev_error(P.status, KVQ_ERR_RANGE);
        } else {
            enc_flush(P, v, rec, lane);
        }
        __syncwarp();
    }
}

/* ---- tcq:k (m_tcq.c, tcq_kernels.c, tcq_dispatch.c) --------------------------
 * One block of TCQ_NT threads per vector. Warp 0 loads, centres and rotates the row as the
 * rotated methods do and forms u = (float)(y sqrt(d / |y|^2)) in double; the block runs the
 * CPU's tail-biting Viterbi passes (tcq_encode_path): per step, thread r of the group loop
 * forms the J = 2^k candidates C_{t-1}[r + j R] = fma(u - f, u - f, M_{t-1}[.]) in the CPU's
 * order (__fsub_rn, __fmaf_rn: fmaf on the CPU) and keeps the first least one (j == 0 || v < m),
 * which is the candidate the CPU's traceback finds (the first j whose cost equals M_t[r]): so
 * the GPU stores that j (k bit planes, one ballot word per 32 groups) instead of M_t, and
 * walks the decisions back on one thread. The last step's argmin is the lowest state of least
 * cost (block reduction with the state as tie-break). Scale: the CPU's double sums (order
 * differs: the tie note at the top of this file). */
#define TCQ_L 12
#define TCQ_NT 256
#define TCQ_S (1 << TCQ_L)

/* tcq_window (tcq_dispatch.c): the half-width of the second pass's window, 0 for the whole cycle. */
__device__ __forceinline__ int tcq_window_dev(int k, int T) {
    const int lk = (TCQ_L + k - 1) / k, w = 4 * lk;
    return w <= (T - 2) / 2 ? w : (T - 2) / 2 >= lk ? (T - 2) / 2 : 0;
}

/* Dynamic shared bytes of the tcq encoder at head dim d, k bits: f (S floats), two M rows (R
 * floats), the decisions (d steps of k R / 32 words). */
static size_t tcq_smem_bytes(int d, int k) {
    const size_t R = (size_t)1 << (TCQ_L - k);
    return 4 * ((size_t)TCQ_S + 2 * R + (size_t)d * k * (R / 32));
}

/* One Viterbi pass over u[0..T-1] (shared) from start group c (all if c < 0), ending in `end`
 * (or, end < 0, the least state among those with s & (R-1) == c2, all if c2 < 0); states into st. */
__device__ void tcq_pass_block(const float *f, const float *u, int T, int k, long c, long end, long c2, float *Ma,
                               float *Mb, uint32_t *dec, uint32_t *st, float *redv, uint32_t *reds) {
    const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint32_t R = 1u << (TCQ_L - k), J = 1u << k, WPS = (uint32_t)k * (R / 32);
    for (uint32_t r = tid; r < R; r += TCQ_NT) Ma[r] = (c < 0 || (long)r == c) ? 0.0f : TCQ_BIG;
    __syncthreads();
    float *mp = Ma, *mt = Mb;
    for (int t = 1; t < T; t++) {
        const float ut = u[t - 1];
        uint32_t *dt = dec + (size_t)t * WPS;
        for (uint32_t r = tid; r < R; r += TCQ_NT) {
            float m = 0;
            uint32_t jb = 0;
            for (uint32_t j = 0; j < J; j++) {
                const uint32_t p = r + j * R;
                const float e = __fsub_rn(ut, f[p]), v = __fmaf_rn(e, e, mp[p >> k]);
                if (j == 0 || v < m) m = v, jb = j;
            }
            mt[r] = m;
            for (int b = 0; b < k; b++) {
                const uint32_t w = __ballot_sync(KVQ_FULL_MASK, (jb >> b) & 1u);
                if (lane == 0) dt[b * (R / 32) + r / 32] = w;
            }
        }
        __syncthreads();
        float *tmp = mp;
        mp = mt;
        mt = tmp;
    }
    if (end < 0) { /* argmin of C_{T-1} over the allowed states, ties: the lowest state */
        const float ul = u[T - 1];
        float bv = 0;
        uint32_t bs = 0xffffffffu;
        const uint32_t s0 = c2 < 0 ? 0 : (uint32_t)c2, step = c2 < 0 ? 1 : R;
        for (uint32_t s = s0 + step * (uint32_t)tid; s < (uint32_t)TCQ_S; s += step * TCQ_NT) {
            const float e = __fsub_rn(ul, f[s]), v = __fmaf_rn(e, e, mp[s >> k]);
            if (bs == 0xffffffffu || v < bv) bv = v, bs = s;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(KVQ_FULL_MASK, bv, o);
            const uint32_t os = __shfl_xor_sync(KVQ_FULL_MASK, bs, o);
            if (os != 0xffffffffu && (bs == 0xffffffffu || ov < bv || (ov == bv && os < bs))) bv = ov, bs = os;
        }
        if (lane == 0) redv[wp] = bv, reds[wp] = bs;
        __syncthreads();
        if (tid == 0) {
            float v = redv[0];
            uint32_t s = reds[0];
            for (int w = 1; w < TCQ_NT / 32; w++)
                if (reds[w] != 0xffffffffu && (s == 0xffffffffu || redv[w] < v || (redv[w] == v && reds[w] < s)))
                    v = redv[w], s = reds[w];
            reds[0] = s;
        }
        __syncthreads();
    }
    if (tid == 0) { /* traceback through the stored decisions */
        uint32_t s = end >= 0 ? (uint32_t)end : reds[0];
        st[T - 1] = s;
        for (int t = T - 1; t > 0; t--) {
            const uint32_t r = s >> k, *dt = dec + (size_t)t * WPS;
            uint32_t j = 0;
            for (int b = 0; b < k; b++) j |= ((dt[b * (R / 32) + r / 32] >> (r & 31)) & 1u) << b;
            s = r + j * R;
            st[t - 1] = s;
        }
    }
    __syncthreads();
}

template <int EPT, bool RT> __global__ void __launch_bounds__(TCQ_NT) enc_tcq_kernel(EncParams P) {
    constexpr int DM = 32 * EPT;
    extern __shared__ float tsm[];
    __shared__ float s_y[DM], s_u[DM], s_v[DM], s_buf[DM], s_sg[2 * DM], s_redv[TCQ_NT / 32];
    __shared__ uint32_t s_st[DM], s_sw[DM], s_reds[TCQ_NT / 32];
    __shared__ __align__(16) uint8_t s_rec[2 * DM + 16];
    __shared__ int s_flag;
    const int d = RT ? P.d : DM, ept = RT ? P.d / 32 : EPT, k = P.bits, tid = threadIdx.x, lane = tid & 31;
    const uint32_t R = 1u << (TCQ_L - k), Rm = R - 1;
    float *f = tsm, *Ma = f + TCQ_S, *Mb = Ma + R;
    uint32_t *dec = (uint32_t *)(Mb + R);
    for (int s = tid; s < TCQ_S; s += TCQ_NT) f[s] = tcq_value_dev((uint32_t)s);
    if (!RT && P.rot == 1)
        for (int i = tid; i < 2 * DM; i += TCQ_NT) s_sg[i] = P.signs[i];
    __syncthreads();
    const int nbits = d * k / 8;
    for (long long v = blockIdx.x; v < P.n; v += gridDim.x) {
        if (tid < 32) { /* warp 0: the row, rotated, and u */
            int flag = 0;
            float y[EPT];
            if (!load_row<EPT, RT>(P, v, y, ept, lane)) flag = KVQ_ERR_NONFINITE;
            else if (P.cal && !center_row<EPT>(P, v, y, ept, lane)) flag = KVQ_ERR_RANGE;
            if (!flag) {
                const int th = (int)(v % P.tabh);
                const float *sgv = P.tabh > 1 && P.signs ? P.signs + (size_t)th * 2 * DM : s_sg;
                if (!RT && P.rot == 1) {
                    const float s = P.rot_s;
#pragma unroll
                    for (int e = 0; e < EPT; e++) y[e] = __fmul_rn(__fmul_rn(y[e], sgv[lane * EPT + e]), s);
                    fwht_warp<EPT>(y, lane);
#pragma unroll
                    for (int e = 0; e < EPT; e++) y[e] = __fmul_rn(y[e], __fmul_rn(sgv[DM + lane * EPT + e], s));
                    fwht_warp<EPT>(y, lane);
                }
                if (RT && P.rot == 2) dense_rot_warp<EPT>(P, P.Q + (size_t)th * d * d, y, s_buf, ept, lane);
                double nn = 0;
#pragma unroll
                for (int e = 0; e < EPT; e++)
                    if (e < ept) nn += (double)y[e] * (double)y[e];
                nn = warp_sum_d(nn);
                if (!(nn > 0)) flag = 1; /* zero row */
                const double inv = flag ? 0.0 : sqrt((double)d / nn);
#pragma unroll
                for (int e = 0; e < EPT; e++)
                    if (e < ept) {
                        s_y[lane * ept + e] = y[e];
                        s_u[lane * ept + e] = __double2float_rn(__dmul_rn((double)y[e], inv));
                    }
            }
            if (lane == 0) s_flag = flag;
        }
        __syncthreads();
        const int flag = s_flag;
        if (flag < 0) { /* an error: nothing written */
            if (tid == 0) kvq_dev_error(P.status, flag);
            __syncthreads();
            continue;
        }
        if (flag == 0) { /* tcq_encode_path */
            tcq_pass_block(f, s_u, d, k, -1, -1, -1, Ma, Mb, dec, s_st, s_redv, s_reds);
            const int W = tcq_window_dev(k, d);
            if (W == 0) {
                const long c = (long)(s_st[d - 1] & Rm);
                __syncthreads();
                tcq_pass_block(f, s_u, d, k, c, -1, c, Ma, Mb, dec, s_st, s_redv, s_reds);
            } else {
                const int n = 2 * W + 1;
                for (int i = tid; i < n; i += TCQ_NT) s_v[i] = s_u[(d - W + i) % d];
                const long c = (long)(s_st[d - W - 1] & Rm), e = (long)s_st[W];
                __syncthreads();
                tcq_pass_block(f, s_v, n, k, c, e, -1, Ma, Mb, dec, s_sw, s_redv, s_reds);
                for (int i = tid; i < n; i += TCQ_NT) s_st[(d - W + i) % d] = s_sw[i];
                __syncthreads();
            }
        }
        if (tid < 32) { /* warp 0: the record */
            uint8_t *bits = s_rec + P.L.off[KVQ_TCQ_BITS];
            for (int j = lane; j < nbits; j += 32) {
                unsigned byte = 0;
                if (!flag)
                    for (int i = 0; i < 8; i++) {
                        const int pos = 8 * j + i, t = d - 1 - pos / k;
                        byte |= ((s_st[t] >> (pos % k)) & 1u) << i;
                    }
                bits[j] = (uint8_t)byte;
            }
            float g = 0.0f;
            if (!flag) {
                double yf = 0, ff = 0;
                for (int t = lane; t < d; t += 32) {
                    const double ft = (double)f[s_st[t]];
                    yf += (double)s_y[t] * ft;
                    ff += ft * ft;
                }
                yf = warp_sum_d(yf);
                ff = warp_sum_d(ff);
                g = ff > 0 ? (float)(yf / ff) : 0.0f;
            }
            const int rc = store_scale(P, s_rec + P.L.off[KVQ_TCQ_SCALE], g);
            __syncwarp();
            if (rc) {
                if (lane == 0) kvq_dev_error(P.status, rc);
            } else {
                enc_flush(P, v, s_rec, lane);
            }
        }
        __syncthreads();
    }
}

template <int EPT, bool RT> static int launch_tcq_t(int d, int k, long long n, cudaStream_t st, const EncParams &P) {
    auto kern = enc_tcq_kernel<EPT, RT>;
    const size_t smem = tcq_smem_bytes(d, k);
    KVQ_CU_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const long long cap = (long long)sms * 8;
    kern<<<dim3((unsigned)(n < cap ? n : cap)), TCQ_NT, smem, st>>>(P);
    return KVQ_OK;
}
static int launch_tcq(int d, int k, long long n, cudaStream_t st, const EncParams &P) {
    switch (d) {
    case 32: return launch_tcq_t<1, false>(d, k, n, st, P);
    case 64: return launch_tcq_t<2, false>(d, k, n, st, P);
    case 128: return launch_tcq_t<4, false>(d, k, n, st, P);
    case 256: return launch_tcq_t<8, false>(d, k, n, st, P);
    case 512: return launch_tcq_t<16, false>(d, k, n, st, P);
    default: return d <= 256 ? launch_tcq_t<8, true>(d, k, n, st, P) : launch_tcq_t<16, true>(d, k, n, st, P);
    }
}

template <int KIND> static void launch_rot(int d, dim3 g, cudaStream_t st, const EncParams &P) {
    switch (d) {
    case 32: enc_rot_kernel<KIND, 1, false><<<g, 32 * ENC_WARPS, 0, st>>>(P); break;
    case 64: enc_rot_kernel<KIND, 2, false><<<g, 32 * ENC_WARPS, 0, st>>>(P); break;
    case 128: enc_rot_kernel<KIND, 4, false><<<g, 32 * ENC_WARPS, 0, st>>>(P); break;
    case 256: enc_rot_kernel<KIND, 8, false><<<g, 32 * ENC_WARPS, 0, st>>>(P); break;
    case 512: enc_rot_kernel<KIND, 16, false><<<g, 32 * ENC_WARPS, 0, st>>>(P); break;
    default: /* other multiples of 32 up to 512 (plan creation checked) */
        if (d <= 256) enc_rot_kernel<KIND, 8, true><<<g, 32 * ENC_WARPS, 0, st>>>(P);
        else enc_rot_kernel<KIND, 16, true><<<g, 32 * ENC_WARPS, 0, st>>>(P);
        break;
    }
}

int kvq_cuda_encode_launch(const kvq_cuda_plan *p, const void *x, kvq_dtype dtype, size_t n, const kvq_enc_out &out,
                           int *dev_status, cudaStream_t stream) {
    if (dtype != KVQ_DTYPE_F32 && dtype != KVQ_DTYPE_F16) return KVQ_ERR_INVALID_ARG;
    if (n == 0) return KVQ_OK;
    EncParams P;
    memset(&P, 0, sizeof P);
    P.x = x;
    P.f16in = dtype == KVQ_DTYPE_F16;
    P.n = (long long)n;
    P.d = p->d;
    P.L = p->L;
    P.out = out;
    P.signs = p->signs;
    P.Q = p->Q;
    P.c1 = p->c1;
    P.t1 = p->t1;
    P.c2 = p->c2;
    P.t2 = p->t2;
    P.St = p->St;
    P.n1 = p->n1;
    P.n2 = p->n2;
    P.m = p->m;
    P.sb = p->sb;
    P.scale_norm = p->scale_norm;
    P.bits = p->bits;
    P.rot = p->rot;
    P.rot_s = p->rot_s;
    P.cal = p->cal;
    P.nh = p->nh;
    P.tabh = p->tabh > 0 ? p->tabh : 1;
    P.status = dev_status;
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    size_t blocks = (n + ENC_WARPS - 1) / ENC_WARPS, cap = (size_t)sms * 16;
    dim3 g((unsigned)(blocks < cap ? blocks : cap));
    switch (p->kind) {
    case KVQ_LAY_F16: enc_plain_kernel<KVQ_LAY_F16><<<g, 32 * ENC_WARPS, 0, stream>>>(P); break;
    case KVQ_LAY_Q8: enc_plain_kernel<KVQ_LAY_Q8><<<g, 32 * ENC_WARPS, 0, stream>>>(P); break;
    case KVQ_LAY_TQ: launch_rot<KVQ_LAY_TQ>(p->d, g, stream, P); break;
    case KVQ_LAY_TQPROD: launch_rot<KVQ_LAY_TQPROD>(p->d, g, stream, P); break;
    case KVQ_LAY_QJL: launch_rot<KVQ_LAY_QJL>(p->d, g, stream, P); break;
    case KVQ_LAY_RVQ: launch_rot<KVQ_LAY_RVQ>(p->d, g, stream, P); break;
    case KVQ_LAY_TCQ: {
        const int rc = launch_tcq(p->d, p->bits, (long long)n, stream, P);
        if (rc) return rc;
        break;
    }
    default: return KVQ_ERR_UNSUPPORTED;
    }
    return kvq_cuda_status(cudaGetLastError());
}

extern "C" int kvq_cuda_encode(const kvq_cuda_plan *p, const void *x, kvq_dtype dtype, size_t n, void *codes,
                               int *dev_status, void *stream) {
    if (!p || (n && (!x || !codes))) return KVQ_ERR_NULL;
    kvq_enc_out out;
    memset(&out, 0, sizeof out);
    out.base = (uint8_t *)codes;
    return kvq_cuda_encode_launch(p, x, dtype, n, out, dev_status, (cudaStream_t)stream);
}
