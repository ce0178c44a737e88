/*
 * Online softmax over a block of logits (flash-attention style running max
 * and sum): scalar reference and ISA dispatch. SIMD versions, with a
 * polynomial exp, are in softmax_x86.c.
 */
#include <math.h>

#include "cache_internal.h"
#include "cpu.h"

float softmax_block_ref(float *s, size_t n, float *m, float *l) {
    float bm = -INFINITY;
    for (size_t i = 0; i < n; i++) bm = s[i] > bm ? s[i] : bm;
    if (bm == -INFINITY) {
        for (size_t i = 0; i < n; i++) s[i] = 0;
        return 1.0f;
    }
    float mn = bm > *m ? bm : *m;
    float alpha = expf(*m - mn); /* exp(-inf) = 0 on the first block */
    float sum = 0;
    for (size_t i = 0; i < n; i++) {
        s[i] = expf(s[i] - mn);
        sum += s[i];
    }
    *l = *l * alpha + sum;
    *m = mn;
    return alpha;
}

#if !KVQ_X86
float softmax_block_avx2(float *s, size_t n, float *m, float *l) { return softmax_block_ref(s, n, m, l); }
float softmax_block_avx512(float *s, size_t n, float *m, float *l) { return softmax_block_ref(s, n, m, l); }
void vexp_avx2(const float *x, float *y, size_t n) { for (size_t i = 0; i < n; i++) y[i] = expf(x[i]); }
void vexp_avx512(const float *x, float *y, size_t n) { for (size_t i = 0; i < n; i++) y[i] = expf(x[i]); }
#endif

float softmax_block(float *s, size_t n, float *m, float *l, kvq_isa isa) {
    if (isa >= KVQ_ISA_AVX512) return softmax_block_avx512(s, n, m, l);
    if (isa >= KVQ_ISA_AVX2) return softmax_block_avx2(s, n, m, l);
    return softmax_block_ref(s, n, m, l);
}

void vscale(float *y, size_t n, float a, kvq_isa isa) {
    (void)isa; /* auto-vectorised */
    for (size_t i = 0; i < n; i++) y[i] *= a;
}
