/*
 * tcq's computed code on the device and the host (codec/tcq_code.h; tcq_kernels.c's tcq_value):
 * the encoder's table of 2^L values (encode.cu) and the generic kernel's decode (attn_kernel_gen.cuh).
 */
#ifndef KVQ_CUDA_TCQ_VALUE_CUH
#define KVQ_CUDA_TCQ_VALUE_CUH

#include <stdint.h>

#include "codec/tcq_code.h"

/* (float)(byte sum of s TCQ_MUL + TCQ_ADD - 510) * TCQ_INV_SD, one rounding (no contraction). */
__host__ __device__ __forceinline__ float tcq_value_dev(uint32_t s) {
    const uint32_t h = s * TCQ_MUL + TCQ_ADD;
    const int sum = (int)((h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24));
#ifdef __CUDA_ARCH__
    return __fmul_rn((float)(sum - 510), TCQ_INV_SD);
#else
    return (float)(sum - 510) * TCQ_INV_SD;
#endif
}

#endif
