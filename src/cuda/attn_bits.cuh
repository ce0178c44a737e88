/*
 * Bit-level primitives of the attention kernels, on the host too where the
 * tests call the decoders (test_cuda): shared-memory loads, byte permutes,
 * f16x2 packing, 2^x, a bitwise select, the programmatic-dependent-launch
 * waits (sm_90).
 */
#ifndef KVQ_ATTN_BITS_CUH
#define KVQ_ATTN_BITS_CUH

#include "cuda_internal.cuh"

#define KVQ_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define KVQ_UNROLL _Pragma("unroll")
#else
#define KVQ_UNROLL
#endif

namespace kvqa {

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
/* m ? a : b, bitwise (one LOP3) */
KVQ_HD uint32_t bitsel(uint32_t m, uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xCA;" : "=r"(d) : "r"(m), "r"(a), "r"(b));
    return d;
#else
    return (m & a) | (~m & b);
#endif
}
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Programmatic dependent launches (sm_90; no-ops before): a primary lets its dependents
 * start (launch_dependents); a dependent waits for its primaries' memory (wait). */
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

} /* namespace kvqa */

#endif
