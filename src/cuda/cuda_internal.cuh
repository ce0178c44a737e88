/*
 * Internal pieces of the CUDA backend shared by its translation units:
 * the device plan, error handling, small device helpers (f16 bits, byte
 * permutes, cp.async, the m16n8k16 tensor-core MMA).
 */
#ifndef KVQ_CUDA_INTERNAL_CUH
#define KVQ_CUDA_INTERNAL_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "codec/layouts.h"
#include "kvq.h"
#include "kvq_cuda.h"

#define KVQ_CU_TRY(expr)                                                   \
    do {                                                                   \
        cudaError_t _e = (expr);                                           \
        if (_e != cudaSuccess) return kvq_cuda_status(_e);                 \
    } while (0)

/* Maps a CUDA runtime error to a KVQ status. */
static inline int kvq_cuda_status(cudaError_t e) {
    if (e == cudaSuccess) return KVQ_OK;
    if (e == cudaErrorMemoryAllocation) return KVQ_ERR_NOMEM;
    if (e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer) return KVQ_ERR_INVALID_ARG;
    return KVQ_ERR_UNSUPPORTED; /* no device, launch failure, ... */
}

/* Device copy of a plan (kvq_cuda_plan_create). */
struct kvq_cuda_plan {
    kvq_layout L;     /* record layout */
    int kind, d, bits, m, sb, scale_norm, rot;
    float rot_s;      /* 1/sqrtf(d), as the CPU rotation computes it */
    float qjl_k;      /* sqrtf(pi/2)/m, as the CPU QJL score computes it */
    int n1, n2;
    float *signs;     /* device, 2d (per head: tabh below) */
    float *Q, *Qt;    /* device, rot 2 (dense, non-power-of-two d): Q (y = Q x) and its transpose, d x d */
    float *c1, *t1;   /* device codebook 1 (n1 centroids, n1-1 boundaries) */
    float *c2, *t2;   /* device codebook 2 (rvq) */
    float *S;         /* device QJL matrix m x d */
    float *St;        /* device transpose d x m (encode reads it coalesced) */
    float hc1[256], hc2[256]; /* host copies of the centroids (LUT building, equality) */
    size_t code_bytes;
    /* calibrated plans (+center, +chscale; docs/CUDA.md "Calibrated plans"): the tables above are the
     * inner plan's; cal holds each head's 4 x d floats of the CPU plan's mu (mean, a * mean rotated,
     * a, 1 / a); vector v is centred and scaled with head v % nh (nh 1: one for every head) */
    int nh;     /* 0: not calibrated */
    int chscale;
    float *cal; /* device, nh x 4d */
    int tabh;   /* heads of signs, Q, Qt, S, St (1, or nh for per-head plans: the C cache's per-head seeds);
                   head h's table at h x its size */
};

/* Where encoded records go: contiguous records, or field-major pages
 * (vector v = token v / H, head v % H; token t to slot dst[t] = page * P + s). */
struct kvq_enc_out {
    uint8_t *base;
    int paged;
    int H, P;
    unsigned long long page_bytes; /* H * P * (kb + vb) */
    unsigned long long kv_off;     /* 0 for K, H * P * kb for V */
    const int32_t *dst;
};

/* Launches the encoder of plan p on n vectors (encode.cu). */
int kvq_cuda_encode_launch(const kvq_cuda_plan *p, const void *x, kvq_dtype dtype, size_t n, const kvq_enc_out &out,
                           int *dev_status, cudaStream_t stream);

/* ---- device helpers ---------------------------------------------------- */
#define KVQ_FULL_MASK 0xffffffffu

__device__ __forceinline__ uint32_t kvq_prmt(uint32_t a, uint32_t b, uint32_t sel) { return __byte_perm(a, b, sel); }

__device__ __forceinline__ uint32_t kvq_h2_bits(__half2 h) {
    const __half2_raw r = h;
    return (uint32_t)r.x | ((uint32_t)r.y << 16);
}
__device__ __forceinline__ __half2 kvq_bits_h2(uint32_t u) {
    __half2_raw r;
    r.x = (unsigned short)(u & 0xffffu);
    r.y = (unsigned short)(u >> 16);
    return __half2(r);
}
/* Two floats -> f16x2 bits (round to nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t kvq_pack_h2(float lo, float hi) { return kvq_h2_bits(__floats2half2_rn(lo, hi)); }
__device__ __forceinline__ float kvq_h_lo(uint32_t u) { return __low2float(kvq_bits_h2(u)); }
__device__ __forceinline__ float kvq_h_hi(uint32_t u) { return __high2float(kvq_bits_h2(u)); }
__device__ __forceinline__ float kvq_half_bits_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* D (16x8 f32) += A (16x16 f16, row) * B (16x8 f16, col): mma.sync m16n8k16. */
__device__ __forceinline__ void kvq_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Warp-wide transpose of an 8x8 b16 matrix held as MMA fragments (lane l holds
 * row l/4, columns 2(l%4), 2(l%4)+1; so does the result, of the transpose). */
__device__ __forceinline__ uint32_t kvq_movmatrix_t(uint32_t x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
#else
    return x;
#endif
}

/* 16-byte asynchronous global -> shared copy; src_bytes = 0 writes zeros. */
__device__ __forceinline__ void kvq_cp_async16(void *smem, const void *gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
#endif
}
__device__ __forceinline__ void kvq_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void kvq_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* In-place fast Walsh-Hadamard transform of d = 32 * EPT values on one warp, lane holding
 * elements lane*EPT + e: the CPU's butterflies, spans 1, 2, 4, ... in order (the encoder,
 * the query's rotation, the merge's inverse rotation). */
template <int EPT> __device__ __forceinline__ void fwht_warp(float v[EPT], int lane) {
#pragma unroll
    for (int h = 1; h < EPT; h <<= 1)
#pragma unroll
        for (int e = 0; e < EPT; e++)
            if (!(e & h)) {
                float a = v[e], b = v[e + h];
                v[e] = __fadd_rn(a, b);
                v[e + h] = __fsub_rn(a, b);
            }
#pragma unroll
    for (int lh = 1; lh < 32; lh <<= 1)
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            float o = __shfl_xor_sync(KVQ_FULL_MASK, v[e], lh);
            v[e] = (lane & lh) ? __fsub_rn(o, v[e]) : __fadd_rn(v[e], o);
        }
}

/* Records the first error of a kernel into *st (may be NULL). */
__device__ __forceinline__ void kvq_dev_error(int *st, int code) {
    if (st) atomicCAS(st, 0, code);
}

#endif
