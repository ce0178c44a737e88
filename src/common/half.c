/* IEEE binary16 and bfloat16 conversions, bit-exact round-to-nearest-even. */
#include <string.h>

#include "kvq.h"

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t kvq_f32_to_f16(float x) {
    uint32_t u = f2u(x);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* Inf or NaN (NaN keeps a quiet payload bit) */
        return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
    if (abs < 0x38800000u) { /* subnormal or zero in f16: add magic to round */
        float f = u2f(abs) + 0.5f; /* 0.5 = 2^-1: ulp of result is 2^-24 */
        return (uint16_t)(sign | (f2u(f) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112<<23) and round to nearest even */
    return (uint16_t)(sign | (abs >> 13));
}

float kvq_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
        float f = (float)mant * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t kvq_f32_to_bf16(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float kvq_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

size_t kvq_dtype_size(kvq_dtype dtype) {
    switch (dtype) {
    case KVQ_DTYPE_F32: return 4;
    case KVQ_DTYPE_F16: return 2;
    case KVQ_DTYPE_BF16: return 2;
    }
    return 0;
}
