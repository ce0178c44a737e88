/*
 * Element-wise operations of the forward pass: RMSNorm, the gated
 * activations (SwiGLU, GeGLU with tanh GELU), RoPE, soft-capping. Scalar
 * references plus AVX2 versions of the exp-heavy activations (a vector exp
 * with a degree-6 polynomial, ~1 ulp), chosen once per session.
 */
#ifndef KVQ_ENGINE_OPS_H
#define KVQ_ENGINE_OPS_H

#include "kvq.h"

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] (out may alias x). */
void kvq_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

typedef struct kvq_ops {
    const char *name;
    /* a[i] = silu(a[i]) * b[i] */
    void (*silu_mul)(float *a, const float *b, int n);
    /* a[i] = gelu_tanh(a[i]) * b[i] */
    void (*gelu_mul)(float *a, const float *b, int n);
} kvq_ops;

/* Scalar reference (expf/tanhf). */
const kvq_ops *kvq_ops_scalar(void);
/* Best for isa (KVQ_ISA_BEST: the CPU's); the scalar ones if unavailable. */
const kvq_ops *kvq_ops_for(kvq_isa isa);
/* Internal: the AVX2 table (ops_x86.c), NULL off x86. */
const kvq_ops *kvq_ops_avx2_table(void);

/*
 * RoPE on one head vector x of head_dim values, with cs[2i], cs[2i+1] =
 * cos, sin of the angle of pair i (i < n_rot/2). neox = 0: pairs (2i, 2i+1);
 * neox = 1: pairs (i, i + n_rot/2). Dims >= n_rot are left as they are.
 */
void kvq_rope_apply(float *x, const float *cs, int n_rot, int neox);
/*
 * inv_freq[i] = freq_scale * base^(-2i/n_rot) / freq_div[i] for i < n_rot/2
 * (freq_div may be NULL), in double.
 */
void kvq_rope_freqs(double *inv_freq, int n_rot, double base, double freq_scale, const float *freq_div);
/* cs[2i], cs[2i+1] = cos, sin of pos * inv_freq[i], computed in double. */
void kvq_rope_table(float *cs, double pos, const double *inv_freq, int n_rot);
#endif
