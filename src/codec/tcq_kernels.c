/*
 * Scalar references of the trellis kernels (tcq_kernels.h): the code, the
 * forward recursion of the Viterbi encoder, its argmin and traceback, the
 * record walk, score and accumulate. They call nothing of the SIMD files;
 * tcq_dispatch.c picks the kernel per ISA.
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "tcq_kernels.h"

/* f(s) = (sum of the 4 bytes of h(s) - 510) / sqrt(21845),
 * h(s) = mix(1664525 s + 1013904223) (the LCG of Numerical Recipes, then a
 * xorshift-multiply); 510 and 21845 = 4 (256^2 - 1) / 12 are the mean and
 * variance of a sum of four uniform bytes. Unsigned 32-bit arithmetic. */
double tcq_value(uint32_t s) {
    uint32_t h = s * 1664525u + 1013904223u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    unsigned sum = (h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24);
    return ((double)sum - 510.0) / sqrt(4.0 * (256.0 * 256.0 - 1.0) / 12.0);
}

size_t tcq_scratch_bytes(const tcq_code *tc, int T) {
    return 4 * ((size_t)T * ((size_t)1 << (tc->L - tc->k)) + ((size_t)1 << tc->L) + 8);
}

void tcq_m0(const tcq_code *tc, long c, float *m0) {
    const uint32_t R = 1u << (tc->L - tc->k);
    for (uint32_t r = 0; r < R; r++) m0[r] = (c < 0 || (long)r == c) ? 0.0f : TCQ_BIG;
}

void tcq_forward_ref(const tcq_code *tc, const float *u, int T, float *M, float *C) {
    const int k = tc->k;
    const uint32_t R = 1u << (tc->L - k), J = 1u << k, S = 1u << tc->L;
    const float *f = tc->f;
    for (int t = 1; t < T; t++) {
        const float *mp = M + (size_t)(t - 1) * R, ut = u[t - 1];
        float *mt = M + (size_t)t * R;
        for (uint32_t r = 0; r < R; r++) {
            float m = 0;
            for (uint32_t j = 0; j < J; j++) {
                const uint32_t p = r + j * R;
                const float e = ut - f[p], v = fmaf(e, e, mp[p >> k]);
                m = (j == 0 || v < m) ? v : m;
            }
            mt[r] = m;
        }
    }
    const float *ml = M + (size_t)(T - 1) * R, ul = u[T - 1];
    for (uint32_t s = 0; s < S; s++) {
        const float e = ul - f[s];
        C[s] = fmaf(e, e, ml[s >> k]);
    }
}

uint32_t tcq_argmin(const tcq_code *tc, const float *C, long c) {
    const uint32_t S = 1u << tc->L, R = 1u << (tc->L - tc->k);
    uint32_t bs = c < 0 ? 0 : (uint32_t)c;
    float best = C[bs];
    for (uint32_t s = bs + 1; s < S; s++)
        if ((c < 0 || (long)(s & (R - 1)) == c) && C[s] < best) {
            best = C[s];
            bs = s;
        }
    return bs;
}

void tcq_traceback_ref(const tcq_code *tc, const float *u, const float *M, int T, uint32_t end, uint32_t *st) {
    const int k = tc->k;
    const uint32_t R = 1u << (tc->L - k), J = 1u << k;
    uint32_t s = end;
    st[T - 1] = s;
    for (int t = T - 1; t > 0; t--) {
        const uint32_t r = s >> k;
        const float *mp = M + (size_t)(t - 1) * R, m = M[(size_t)t * R + r];
        uint32_t j = 0;
        for (; j + 1 < J; j++) { /* the first candidate equal to the minimum (the last one if none: never) */
            const uint32_t p = r + j * R;
            const float e = u[t - 1] - tc->f[p];
            if (fmaf(e, e, mp[p >> k]) == m) break;
        }
        s = r + j * R;
        st[t - 1] = s;
    }
}

/* symbol t (k bits) of a bitstream */
static unsigned sym_get(const uint8_t *bits, int t, int k) {
    unsigned v = 0;
    for (int i = 0; i < k; i++) {
        int pos = t * k + i;
        v |= (unsigned)((bits[pos >> 3] >> (pos & 7)) & 1) << i;
    }
    return v;
}

void tcq_states(const tcq_code *tc, const uint8_t *bits, int T, uint32_t *st) {
    const int k = tc->k, need = (tc->L + k - 1) / k;
    const uint32_t mask = (1u << tc->L) - 1;
    uint32_t s = 0; /* the state before value 0: the stream's last need - 1 symbols */
    for (int j = T - need + 1; j < T; j++) s = ((s << k) | sym_get(bits, j, k)) & mask;
    for (int t = 0; t < T; t++) {
        s = ((s << k) | sym_get(bits, t, k)) & mask;
        st[t] = s;
    }
}

void tcq_pack(const tcq_code *tc, const uint32_t *st, int T, uint8_t *bits) {
    const int k = tc->k;
    memset(bits, 0, (size_t)(T * k + 7) / 8);
    for (int t = 0; t < T; t++) {
        unsigned v = st[t] & ((1u << k) - 1);
        for (int i = 0; i < k; i++) {
            int pos = t * k + i;
            if ((v >> i) & 1) bits[pos >> 3] |= (uint8_t)(1u << (pos & 7));
        }
    }
}

float tcq_scale(const tcq_records *R, const uint8_t *rec) {
    if (R->scale32) {
        float s;
        memcpy(&s, rec + R->scale_off, 4);
        return s;
    }
    uint16_t h;
    memcpy(&h, rec + R->scale_off, 2);
    return kvq_f16_to_f32(h);
}

void tcq_score_ref(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                   float *scores) {
    uint32_t st[KVQ_DIM_MAX];
    const float *f = R->tc->f;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        const float g = tcq_scale(R, rec);
        tcq_states(R->tc, rec + R->bits_off, R->d, st);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * qstride;
            float s = 0;
            for (int t = 0; t < R->d; t++) s += q[t] * f[st[t]];
            scores[j * n + i] = g * s;
        }
    }
}

void tcq_accum_ref(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    uint32_t st[KVQ_DIM_MAX];
    const float *f = R->tc->f;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        const float g = tcq_scale(R, rec);
        tcq_states(R->tc, rec + R->bits_off, R->d, st);
        for (size_t j = 0; j < nq; j++) {
            const float wg = w[j * n + i] * g;
            float *a = acc + j * (size_t)R->d;
            for (int t = 0; t < R->d; t++) a[t] += wg * f[st[t]];
        }
    }
}
