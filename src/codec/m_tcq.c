/*
 * tcq:k — bitshift trellis-coded quantization after kvq's rotation (issue
 * 13; the trellis of QTIP, Tseng et al. 2024, "QTIP: Quantization with
 * Trellises and Incoherence Processing", sec. 3: the bitshift trellis, a
 * computed code, Viterbi encoding, tail-biting).
 *
 * Rotate (as tq-mse), normalise u = sqrt(d) y / |y| (coordinates ~ N(0,1)),
 * and code the d values with k bits each along a trellis of 2^L states
 * (L = TCQ_L = 12): the state after value t is the last L bits of the
 * bitstream, s_t = ((s_{t-1} << k) | b_t) mod 2^L, b_t the k bits stored
 * for value t, and value t is reconstructed as f(s_t), a computed
 * pseudo-Gaussian value of the state (tcq_value: an LCG step and an
 * integer hash of s, then the sum of the four bytes, an Irwin-Hall(4)
 * variable standardised to mean 0 and variance 1 — QTIP's "1MAD" idea, our
 * own constants). The encoder minimises sum_t (u_t - f(s_t))^2 over all
 * paths by the Viterbi algorithm (Viterbi 1967; Forney 1973):
 *     C_t(s) = min_{j < 2^k} C_{t-1}((s >> k) | (j << (L-k))) + (u_t - f(s))^2.
 * The bitstream is circular (tail-biting: the state before value 0 is made
 * of the last bits of the stream), so a record stores exactly d*k bits; the
 * constraint is met as in QTIP (sec. 3.1, "tail-biting"): a free pass gives
 * the final state, whose low L-k bits c become the required top L-k bits of
 * s_0 and the low bits of s_{d-1} in a second, constrained pass (a valid
 * tail-biting path, not always the best one).
 * The stored scale is the least-squares gamma = <y, f> / <f, f>.
 *
 * Record: [scale f16 | d*k/8 bytes: b_t at bits t*k .. t*k+k-1, LSB-first].
 * k + 16/d bits per value (2.125 at k = 2, d = 128). Decoding a value is a
 * shift, a mask and the hash: no table is needed (the plan keeps the 2^L
 * values as a 16 KB table for speed; tcq_value is the definition).
 * Encode: 2 passes x d x 2^L add-compare steps (~1M at d = 128).
 * Kernels: scalar only (score and accumulate walk the states of each record;
 * no SIMD yet).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

#define TCQ_L 12
#define TCQ_S (1u << TCQ_L)

typedef struct {
    float f[TCQ_S]; /* f[s] = tcq_value(s) */
} tcq_tables;

/* The computed code: f(s) = (sum of the 4 bytes of h(s) - 510) / sqrt(21845),
 * h(s) = mix(1664525 s + 1013904223) (the LCG of Numerical Recipes, then a
 * xorshift-multiply); 510 and 21845 = 4 (256^2 - 1) / 12 are the mean and
 * variance of a sum of four uniform bytes. Unsigned 32-bit arithmetic. */
static double tcq_value(uint32_t s) {
    uint32_t h = s * 1664525u + 1013904223u;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    unsigned sum = (h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24);
    return ((double)sum - 510.0) / sqrt(4.0 * (256.0 * 256.0 - 1.0) / 12.0);
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

static void sym_put(uint8_t *bits, int t, int k, unsigned v) {
    for (int i = 0; i < k; i++) {
        int pos = t * k + i;
        if ((v >> i) & 1) bits[pos >> 3] |= (uint8_t)(1u << (pos & 7));
    }
}

/* The state before value 0 of a circular stream of T symbols: its last
 * ceil(L/k) - 1 symbols shifted in (the low bits of s_{T-1}). */
static uint32_t tcq_state0(const uint8_t *bits, int T, int k) {
    const int need = (TCQ_L + k - 1) / k;
    uint32_t s = 0;
    for (int j = T - need + 1; j < T; j++) s = ((s << k) | sym_get(bits, j, k)) & (TCQ_S - 1);
    return s;
}

/* States s_0 .. s_{T-1} of a record's bitstream (the decoder's walk). */
static void tcq_states(const uint8_t *bits, int T, int k, uint32_t *st) {
    uint32_t s = tcq_state0(bits, T, k);
    for (int t = 0; t < T; t++) {
        s = ((s << k) | sym_get(bits, t, k)) & (TCQ_S - 1);
        st[t] = s;
    }
}

/*
 * One Viterbi pass over u[0..T-1]. c < 0: any start and end state; else s_0
 * must have top L-k bits c and s_{T-1} low L-k bits c. Writes the path's
 * states to st. back: T * 2^(L-k) bytes of backpointers.
 */
static void viterbi(const float *f, const float *u, int T, int k, long c, uint8_t *back, uint32_t *st) {
    const uint32_t R = TCQ_S >> k, J = 1u << k;
    static const float INF = 3.0e38f;
    float cost[TCQ_S], m[TCQ_S >> 1];
    for (uint32_t s = 0; s < TCQ_S; s++) {
        float e = u[0] - f[s];
        cost[s] = (c < 0 || (long)(s >> k) == c) ? e * e : INF;
    }
    for (int t = 1; t < T; t++) {
        uint8_t *bk = back + (size_t)t * R;
        for (uint32_t r = 0; r < R; r++) { /* predecessors of s: (s >> k) | (j << (L-k)), j < 2^k */
            float best = cost[r];
            unsigned bj = 0;
            for (uint32_t j = 1; j < J; j++) {
                float v = cost[r | (j << (TCQ_L - k))];
                if (v < best) { best = v; bj = j; }
            }
            m[r] = best;
            bk[r] = (uint8_t)bj;
        }
        for (uint32_t s = 0; s < TCQ_S; s++) {
            float e = u[t] - f[s];
            cost[s] = m[s >> k] + e * e;
        }
    }
    uint32_t bs = 0;
    float best = INF * 2;
    for (uint32_t s = 0; s < TCQ_S; s++) {
        if (c >= 0 && (long)(s & (R - 1)) != c) continue;
        if (cost[s] < best) { best = cost[s]; bs = s; }
    }
    st[T - 1] = bs;
    for (int t = T - 1; t > 0; t--) {
        uint32_t r = bs >> k;
        bs = r | ((uint32_t)back[(size_t)t * R + r] << (TCQ_L - k));
        st[t - 1] = bs;
    }
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const tcq_tables *tb = p->priv;
    const int d = p->d, k = p->bits;
    float y[KVQ_DIM_MAX], u[KVQ_DIM_MAX];
    uint32_t st[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    double nn = 0;
    for (int c = 0; c < d; c++) nn += (double)y[c] * y[c];
    uint8_t *bits = code + p->rec.off[KVQ_TCQ_BITS];
    memset(bits, 0, (size_t)p->rec.size[KVQ_TCQ_BITS]);
    if (!(nn > 0)) return scale_store(p, code, 0.0f); /* zero row: all-zero symbols, scale 0 */
    const double inv = sqrt((double)d / nn);
    for (int c = 0; c < d; c++) u[c] = (float)(y[c] * inv);
    uint8_t *back = malloc((size_t)d * (TCQ_S >> k));
    if (!back) return KVQ_ERR_NOMEM;
    viterbi(tb->f, u, d, k, -1, back, st);
    viterbi(tb->f, u, d, k, (long)(st[d - 1] & ((TCQ_S >> k) - 1)), back, st);
    free(back);
    double yf = 0, ff = 0;
    for (int t = 0; t < d; t++) {
        sym_put(bits, t, k, st[t] & ((1u << k) - 1));
        yf += (double)y[t] * tb->f[st[t]];
        ff += (double)tb->f[st[t]] * tb->f[st[t]];
    }
    return scale_store(p, code, ff > 0 ? (float)(yf / ff) : 0.0f);
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const tcq_tables *tb = p->priv;
    uint32_t st[KVQ_DIM_MAX];
    const float g = scale_load(p, code);
    tcq_states(code + p->rec.off[KVQ_TCQ_BITS], p->d, p->bits, st);
    for (int t = 0; t < p->d; t++) y[t] = g * tb->f[st[t]];
}

/* Scalar reference score: scores[j n + i] = gamma_i sum_t qp_jt f(s_it),
 * qp = R q (the inner product in the rotated domain, where R is orthogonal). */
static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const tcq_tables *tb = p->priv;
    uint32_t st[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *code = codes + i * p->code_bytes;
        const float g = scale_load(p, code);
        tcq_states(code + p->rec.off[KVQ_TCQ_BITS], p->d, p->bits, st);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * p->qfloats;
            float s = 0;
            for (int t = 0; t < p->d; t++) s += q[t] * tb->f[st[t]];
            scores[j * n + i] = g * s;
        }
    }
}

/* Scalar reference accumulation: acc_j += w_ji gamma_i f(s_i.) (rotated domain). */
static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    const tcq_tables *tb = p->priv;
    uint32_t st[KVQ_DIM_MAX];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *code = codes + i * p->code_bytes;
        const float g = scale_load(p, code);
        tcq_states(code + p->rec.off[KVQ_TCQ_BITS], p->d, p->bits, st);
        for (size_t j = 0; j < nq; j++) {
            const float wg = w[j * n + i] * g;
            float *a = acc + j * (size_t)p->d;
            for (int t = 0; t < p->d; t++) a[t] += wg * tb->f[st[t]];
        }
    }
}

static void fini(kvq_plan *p) {
    free(p->priv);
    p->priv = NULL;
}

static int init(kvq_plan *p) {
    int rc = rot_init(&p->rot, p->d, p->seed, !p->o.norot, p->isa);
    if (rc) return rc;
    rc = plan_layout(p, KVQ_LAY_TCQ, p->bits, 0);
    if (rc) return rc;
    tcq_tables *tb = malloc(sizeof *tb);
    if (!tb) return KVQ_ERR_NOMEM;
    for (uint32_t s = 0; s < TCQ_S; s++) tb->f[s] = (float)tcq_value(s);
    p->priv = tb;
    p->rotated = !p->o.norot;
    p->qfloats = (size_t)p->d;
    p->encode = enc;
    p->decode = dec;
    p->prep = generic_prep_rot;
    p->score = score;
    p->accum = accum;
    return KVQ_OK;
}

const kvq_method kvq_method_tcq = {"tcq", 1, 4, 2, init, fini, 0};
