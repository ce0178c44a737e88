/*
 * tcq:k (src/codec/m_tcq.c), the bitshift trellis quantizer:
 *   - record size k*d/8 + 2 (every stored byte counted);
 *   - the decoder against a float64 reference of the record format written
 *     here from the definition (circular bitstream, symbol t at bits
 *     (d-1-t) k.., s_t = ((s_{t-1} << k) | b_t) mod 2^12, value = gamma f(s_t), f the Irwin-Hall hash), +norot;
 *   - the encoder's path against a float64 reference of the same encoder
 *     (a free Viterbi pass, then the window around the seam between its
 *     fixed states: tcq_dispatch.c): same distortion to float rounding,
 *     and no better than the free optimum (a lower bound of every cycle);
 *   - score and accumulate against float64 sums over the decoded vectors;
 *   - on Gaussian data the gap to D(R) = 2^(-2R) (tools/rd_bound.h) below
 *     a bound set from measurement (d = 128: 1.32 / 1.49 / 1.74 / 2.04 dB,
 *     d = 64: 2.15 / 2.29 / 2.55 / 2.68 dB at k = 1..4) plus margin, and
 *     below tq-mse:k's at the same bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "rd_bound.h"
#include "testutil.h"

#define L 12
#define S (1u << L)

static double ref_value(uint32_t s) { /* the definition of the code (tcq_kernels.c) */
    uint32_t h = s * 34038481u + 76625530u; /* QTIP's 1MAD */
    int sum = (int)((h & 255u) + ((h >> 8) & 255u) + ((h >> 16) & 255u) + (h >> 24));
    return (double)((float)(sum - 510) * (float)(1.0 / sqrt(21845.0))); /* one float rounding */
}

/* symbol t of T: bits (T-1-t) k .. (T-1-t) k + k - 1 of the LSB-first stream */
static unsigned ref_sym(const uint8_t *b, int T, int t, int k) {
    unsigned v = 0;
    for (int i = 0; i < k; i++) v |= (unsigned)((b[((T - 1 - t) * k + i) / 8] >> (((T - 1 - t) * k + i) % 8)) & 1) << i;
    return v;
}

/* states of a circular stream: s_t holds symbols t, t-1, ... (mod T), symbol t-i at bits i*k */
static void ref_states(const uint8_t *b, int T, int k, uint32_t *st) {
    for (int t = 0; t < T; t++) {
        uint64_t s = 0;
        for (int i = 0; i * k < L; i++) s |= (uint64_t)ref_sym(b, T, ((t - i) % T + T) % T, k) << (i * k);
        st[t] = (uint32_t)(s & (S - 1));
    }
}

static double f16v(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kvq_f16_to_f32(h);
}

/* float64 Viterbi over u[0..T-1]: start states s with s >> k == c (any if
 * c < 0), end state `end` (the best if end < 0); the path into st. */
static void ref_pass(const double *u, int T, int k, long c, long end, uint32_t *st) {
    double *cost = malloc(S * sizeof *cost), *nc = malloc(S * sizeof *nc);
    uint32_t *bp = malloc((size_t)T * S * sizeof *bp);
    for (uint32_t s = 0; s < S; s++)
        cost[s] = (c < 0 || (s >> k) == (uint32_t)c) ? (u[0] - ref_value(s)) * (u[0] - ref_value(s)) : INFINITY;
    for (int t = 1; t < T; t++) {
        for (uint32_t s = 0; s < S; s++) {
            double best = INFINITY;
            uint32_t bj = 0;
            for (uint32_t j = 0; j < (1u << k); j++) { /* predecessor p with ((p << k) | b) mod 2^L == s */
                uint32_t p = (s >> k) | (j << (L - k));
                if (((p << k) & (S - 1)) != (s & ~((1u << k) - 1))) continue;
                if (cost[p] < best) { best = cost[p]; bj = p; }
            }
            double e = u[t] - ref_value(s);
            nc[s] = best + e * e;
            bp[(size_t)t * S + s] = bj;
        }
        memcpy(cost, nc, S * sizeof *cost);
    }
    uint32_t s = 0;
    if (end >= 0) s = (uint32_t)end;
    else
        for (uint32_t x = 1; x < S; x++)
            if (cost[x] < cost[s]) s = x;
    for (int t = T - 1; t >= 0; t--) {
        st[t] = s;
        if (t) s = bp[(size_t)t * S + s];
    }
    free(cost);
    free(nc);
    free(bp);
}

static double ref_dist(const double *u, const uint32_t *st, int T) {
    double d = 0;
    for (int t = 0; t < T; t++) d += (u[t] - ref_value(st[t])) * (u[t] - ref_value(st[t]));
    return d;
}

/* The encoder of tcq_dispatch.c in float64: the distortion of its cycle
 * (and of the free pass, a lower bound, in *free). */
static double ref_encoder(const double *u, int T, int k, double *free_d) {
    uint32_t st[512], sw[512];
    double v[512];
    const uint32_t Rm = (S >> k) - 1;
    ref_pass(u, T, k, -1, -1, st);
    *free_d = ref_dist(u, st, T);
    const int lk = (L + k - 1) / k;
    const int W = 4 * lk <= (T - 2) / 2 ? 4 * lk : (T - 2) / 2 >= lk ? (T - 2) / 2 : 0;
    if (W == 0) return -1; /* not used by these tests */
    const int n = 2 * W + 1;
    for (int i = 0; i < n; i++) v[i] = u[(T - W + i) % T];
    ref_pass(v, n, k, (long)(st[T - W - 1] & Rm), (long)st[W], sw);
    for (int i = 0; i < n; i++) st[(T - W + i) % T] = sw[i];
    return ref_dist(u, st, T);
}

static void test_format_and_viterbi(int d, int k) {
    char spec[32];
    snprintf(spec, sizeof spec, "tcq:%d+norot", k);
    kvq_plan *p;
    CHECK_OK(kvq_plan_create(&p, spec, d, 5, NULL, 0));
    CHECK(kvq_plan_code_bytes(p) == (size_t)(2 + d * k / 8), "%s bytes %zu", spec, kvq_plan_code_bytes(p));
    tu_rng r = {(uint64_t)(d * 10 + k)};
    float x[512], y[512];
    double u[512];
    uint8_t code[2 + 512];
    uint32_t st[512];
    for (int rep = 0; rep < 2; rep++) {
        double nn = 0;
        for (int c = 0; c < d; c++) { x[c] = (float)(3 * tu_gauss(&r)); nn += (double)x[c] * x[c]; }
        CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, code));
        CHECK_OK(kvq_decode(p, code, 1, y));
        ref_states(code + 2, d, k, st);
        double g = f16v(code), maxe = 0, dist = 0;
        for (int c = 0; c < d; c++) {
            double v = g * ref_value(st[c]);
            if (fabs(v - y[c]) > maxe) maxe = fabs(v - y[c]);
            /* x is not rotated (+norot): u = sqrt(d) x / |x| */
            u[c] = x[c] * sqrt(d / nn);
            dist += (u[c] - ref_value(st[c])) * (u[c] - ref_value(st[c]));
        }
        CHECK(maxe < 1e-5 * (fabs(g) * 4 + 1), "%s d=%d decode vs float64 reference: %g", spec, d, maxe);
        /* the least-squares scale */
        double xf = 0, ff = 0;
        for (int c = 0; c < d; c++) { xf += x[c] * ref_value(st[c]); ff += ref_value(st[c]) * ref_value(st[c]); }
        CHECK(fabs(g - xf / ff) <= 1e-3 * fabs(xf / ff), "%s scale %g vs %g", spec, g, xf / ff);
        uint32_t cc = st[d - 1] & ((S >> k) - 1);
        CHECK((st[0] >> k) == cc, "%s tail-biting constraint", spec);
        double free_d, ref = ref_encoder(u, d, k, &free_d);
        CHECK(fabs(dist - ref) <= 1e-4 * ref + 1e-6 && free_d <= dist + 1e-6,
              "%s d=%d encoder: path %g, float64 encoder %g, free pass %g", spec, d, dist, ref, free_d);
    }
    kvq_plan_free(p);
}

static void test_kernels_and_bound(int d, int k, double max_gap) {
    char spec[32], tq[32];
    snprintf(spec, sizeof spec, "tcq:%d", k);
    snprintf(tq, sizeof tq, "tq-mse:%d", k);
    kvq_plan *p, *t;
    CHECK_OK(kvq_plan_create(&p, spec, d, 9, NULL, 0));
    CHECK_OK(kvq_plan_create(&t, tq, d, 9, NULL, 0));
    const int n = 160, nq = 3;
    size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    float *x = malloc((size_t)n * d * 4), *xh = malloc((size_t)n * d * 4), *q = malloc((size_t)nq * d * 4);
    float *qp = malloc(nq * qf * 4), *sc = malloc((size_t)nq * n * 4), *w = malloc((size_t)nq * n * 4);
    float *acc = calloc((size_t)nq * d, 4), *out = malloc((size_t)d * 4);
    uint8_t *codes = malloc(n * cb), *tcodes = malloc(n * kvq_plan_code_bytes(t));
    tu_rng r = {(uint64_t)(d + 100 * k)};
    for (int i = 0; i < n * d; i++) x[i] = (float)tu_gauss(&r);
    for (int i = 0; i < nq * d; i++) q[i] = (float)tu_gauss(&r);
    for (int i = 0; i < nq * n; i++) w[i] = (float)tu_uniform(&r);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, codes));
    CHECK_OK(kvq_decode(p, codes, n, xh));
    for (int j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(p, q + j * d, qp + j * qf));
    CHECK_OK(kvq_score(p, qp, nq, codes, n, sc));
    CHECK_OK(kvq_accumulate(p, w, nq, codes, n, acc));
    double rel = 0, se = 0;
    for (int i = 0; i < n; i++) {
        double xx = 0, ee = 0;
        for (int c = 0; c < d; c++) {
            double e = (double)x[i * d + c] - xh[i * d + c];
            xx += (double)x[i * d + c] * x[i * d + c];
            ee += e * e;
        }
        rel += ee / xx;
        for (int j = 0; j < nq; j++) { /* score = <q, x^> in float64 */
            double s = 0, qq = 0, hh = 0;
            for (int c = 0; c < d; c++) {
                s += (double)q[j * d + c] * xh[i * d + c];
                qq += (double)q[j * d + c] * q[j * d + c];
                hh += (double)xh[i * d + c] * xh[i * d + c];
            }
            double e = fabs(sc[j * n + i] - s) / sqrt(qq * hh);
            if (e > se) se = e;
        }
    }
    rel /= n;
    /* the scores are integer dots with the 8-bit query (tcq_kernels.h): its rounding, at most
     * 2.6e-3 |q||x^| over these pairs (d = 64; 1.7e-3 at d = 128), not float roundoff */
    CHECK(se < 6e-3, "%s d=%d score vs float64 <q, x^>: %g", spec, d, se);
    for (int j = 0; j < nq; j++) { /* accumulate: sum_i w_ji x^_i in float64 */
        CHECK_OK(kvq_unrotate(p, acc + j * d, out));
        double emax = 0, nrm = 0;
        for (int c = 0; c < d; c++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += (double)w[j * n + i] * xh[i * d + c];
            if (fabs(out[c] - s) > emax) emax = fabs(out[c] - s);
            nrm += s * s;
        }
        CHECK(emax < 1e-4 * sqrt(nrm / d) + 1e-6, "%s d=%d accumulate vs float64: %g", spec, d, emax);
    }
    double bits = kvq_plan_bits_per_value(p), gap = tool_rd_gap_db(rel, bits);
    CHECK(gap < max_gap, "%s d=%d: %.3f dB above D(R) at %.3f bits (bound %.2f)", spec, d, gap, bits, max_gap);
    /* the same bits as tq-mse:k, less error */
    CHECK_OK(kvq_encode(t, x, KVQ_DTYPE_F32, n, tcodes));
    CHECK_OK(kvq_decode(t, tcodes, n, xh));
    double trel = 0;
    for (int i = 0; i < n; i++) {
        double xx = 0, ee = 0;
        for (int c = 0; c < d; c++) {
            double e = (double)x[i * d + c] - xh[i * d + c];
            xx += (double)x[i * d + c] * x[i * d + c];
            ee += e * e;
        }
        trel += ee / xx;
    }
    trel /= n;
    CHECK(kvq_plan_code_bytes(t) == cb && rel < trel, "%s %.5f vs %s %.5f", spec, rel, tq, trel);
    fprintf(stderr, "%s d=%d: rel_mse %.5f (%s %.5f), %.2f dB above D(%.3f)\n", spec, d, rel, tq, trel, gap, bits);
    /* a zero row decodes to zeros; NaN is refused */
    memset(x, 0, (size_t)d * 4);
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes));
    CHECK_OK(kvq_decode(p, codes, 1, xh));
    double z = 0;
    for (int c = 0; c < d; c++) z += fabs(xh[c]);
    CHECK(z == 0, "%s zero row", spec);
    x[3] = NAN;
    CHECK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, codes) == KVQ_ERR_NONFINITE, "%s NaN", spec);
    free(x); free(xh); free(q); free(qp); free(sc); free(w); free(acc); free(out); free(codes); free(tcodes);
    kvq_plan_free(p);
    kvq_plan_free(t);
}

int main(void) {
    kvq_plan *p;
    CHECK(kvq_plan_create(&p, "tcq:5", 64, 1, NULL, 0) == KVQ_ERR_BITS_RANGE, "tcq:5 refused");
    for (int k = 1; k <= 4; k++) test_format_and_viterbi(64, k);
    test_format_and_viterbi(96, 2);
    static const double gap128[] = {0, 1.65, 1.8, 2.05, 2.35}, gap64[] = {0, 2.45, 2.6, 2.85, 3.0};
    for (int k = 1; k <= 4; k++) {
        test_kernels_and_bound(128, k, gap128[k]);
        test_kernels_and_bound(64, k, gap64[k]);
    }
    test_kernels_and_bound(96, 2, 3.0); /* a dense (Haar) rotation */
    return tu_finish("test_tcq");
}
