/* Element-wise operations: scalar references and dispatch (see ops.h). */
#include "ops.h"

#include <math.h>

#include "cpu.h"

void kvq_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

static void silu_mul_ref(float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) a[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
}

static void gelu_mul_ref(float *a, const float *b, int n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float x = a[i];
        a[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * b[i];
    }
}

static const kvq_ops SCALAR = {"scalar", silu_mul_ref, gelu_mul_ref};

const kvq_ops *kvq_ops_scalar(void) { return &SCALAR; }

const kvq_ops *kvq_ops_for(kvq_isa isa) {
    if (isa == KVQ_ISA_SCALAR) return &SCALAR;
    const kvq_ops *o = kvq_cpu_isa() >= KVQ_ISA_AVX2 ? kvq_ops_avx2_table() : NULL;
    return o ? o : &SCALAR;
}

void kvq_rope_apply(float *x, const float *cs, int n_rot, int neox) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

void kvq_rope_freqs(double *inv_freq, int n_rot, double base, double freq_scale, const float *freq_div) {
    for (int i = 0; i < n_rot / 2; i++) {
        inv_freq[i] = freq_scale * pow(base, -2.0 * i / n_rot);
        if (freq_div) inv_freq[i] /= freq_div[i];
    }
}

void kvq_rope_table(float *cs, double pos, const double *inv_freq, int n_rot) {
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = pos * inv_freq[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}
