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

/* f(s) = (sum of the 4 bytes of h(s) - 510) / sqrt(21845), in float:
 * (float)(sum - 510) * TCQ_INV_SD, one rounding (the SIMD decoders compute
 * the same operations, so a value is the same float on every path), with
 * h(s) = (a s + b) mod 2^32: QTIP's "1MAD" code (Tseng et al. 2024, sec.
 * 3.2, its constants a = 34038481, b = 76625530): one multiply-add and a
 * byte sum, an Irwin-Hall(4) variable; 510 and 21845 = 4 (256^2 - 1) / 12
 * are the mean and variance of a sum of four uniform bytes. Against an
 * LCG step followed by a xorshift-multiply mix (the first code): 0.46 /
 * 0.39 dB closer to D(R) at k = 4 (d = 128 / 64), 0.11 dB at k = 3, 0.04 dB
 * further at k = 2 (kvq codec-bench, 2000 Gaussian vectors), and three
 * vector operations fewer per 8 values in the decoders. */
int tcq_value_int(uint32_t s) {
    const uint32_t h = s * TCQ_MUL + TCQ_ADD;
    return (int)((h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24)) - 510;
}

float tcq_value(uint32_t s) { return (float)tcq_value_int(s) * TCQ_INV_SD; }

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
    const uint32_t s0 = c < 0 ? 0 : (uint32_t)c, step = c < 0 ? 1 : R; /* the states s & (R-1) == c: c + j R */
    uint32_t bs = s0;
    for (uint32_t s = s0 + step; s < S; s += step)
        if (C[s] < C[bs]) bs = s;
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

void tcq_stream_pad(const uint8_t *bits, size_t nb, uint8_t *buf) {
    memcpy(buf, bits, nb);
    if (nb >= 16) memcpy(buf + nb, bits, 16);
    else
        for (size_t i = 0; i < 16; i++) buf[nb + i] = bits[i % nb];
}

void tcq_states(const tcq_code *tc, const uint8_t *bits, int T, uint32_t *st) {
    const int k = tc->k;
    const uint32_t mask = (1u << tc->L) - 1;
    uint8_t buf[TCQ_BYTES_MAX + 16];
    tcq_stream_pad(bits, (size_t)T * k / 8, buf);
    for (int t = 0; t < T; t++) { /* s_t: bits (T-1-t) k .. (T-1-t) k + L - 1 */
        const int pos = (T - 1 - t) * k;
        const uint8_t *b = buf + (pos >> 3);
        const uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        st[t] = (w >> (pos & 7)) & mask;
    }
}

void tcq_pack(const tcq_code *tc, const uint32_t *st, int T, uint8_t *bits) {
    const int k = tc->k;
    memset(bits, 0, (size_t)T * k / 8);
    for (int t = 0; t < T; t++) {
        const unsigned v = st[t] & ((1u << k) - 1);
        for (int i = 0; i < k; i++) {
            const int pos = (T - 1 - t) * k + i;
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

void tcq_values_ref(const tcq_code *tc, const uint8_t *bits, int T, float *v) {
    uint32_t st[KVQ_DIM_MAX];
    tcq_states(tc, bits, T, st);
    for (int t = 0; t < T; t++) v[t] = tc->f[st[t]];
}

/* sq = m / 127 with m = max|q~|; q8 = round(q~ 127 / m) in double (127 / m is finite for any
 * float m > 0, subnormals included), clamped to +-127 (never needed: |q~| <= m). */
void tcq_query8_ref(int d, float *qp) {
    float m = 0;
    for (int t = 0; t < d; t++) m = fmaxf(m, fabsf(qp[t]));
    const double inv = m > 0 ? 127.0 / (double)m : 0.0;
    uint8_t *q4 = (uint8_t *)(qp + d + 2);
    long sum = 0;
    for (int t = 0; t < d; t++) {
        long v = lrint((double)qp[t] * inv);
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        sum += v;
        memset(q4 + 4 * (size_t)t, (int)(uint8_t)(int8_t)v, 4);
    }
    qp[d] = (m / 127.0f) * TCQ_INV_SD;
    qp[d + 1] = (float)sum;
}

void tcq_score_ref(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                   float *scores) {
    uint32_t st[KVQ_DIM_MAX];
    int v[KVQ_DIM_MAX];
    const int d = R->d;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        const float g = tcq_scale(R, rec);
        tcq_states(R->tc, rec + R->bits_off, d, st);
        for (int t = 0; t < d; t++) v[t] = tcq_value_int(st[t]);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * qstride;
            const int8_t *q8 = (const int8_t *)(q + d + 2);
            int32_t s = 0;
            for (int t = 0; t < d; t++) s += (int32_t)q8[4 * t] * v[t];
            scores[j * n + i] = g * ((float)s * q[d]);
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
