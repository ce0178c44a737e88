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
 * pseudo-Gaussian value of the state (tcq_value, tcq_kernels.c: QTIP's
 * "1MAD" code, a multiply-add of s mod 2^32 and the sum of its four bytes,
 * an Irwin-Hall(4) variable standardised to mean 0 and variance 1). The encoder minimises sum_t (u_t - f(s_t))^2 over the
 * paths by the Viterbi algorithm (Viterbi 1967; Forney 1973):
 *     C_t(s) = min_{j < 2^k} C_{t-1}((s >> k) | (j << (L-k))) + (u_t - f(s))^2,
 * with tagged costs so that every ISA takes the same decisions
 * (tcq_kernels.h). The bitstream is circular (tail-biting: the state before
 * value 0 is made of the last bits of the stream), so a record stores
 * exactly d*k bits; a free pass and a constrained window pass meet the
 * constraint (tcq_dispatch.c).
 * The stored scale is the least-squares gamma = <y, f> / <f, f>.
 *
 * Record: [scale f16 | d*k/8 bytes: b_t at bits (d-1-t)*k .. (d-1-t)*k+k-1,
 * LSB-first: symbols in reverse order, so that s_t is the L-bit window from
 * bit (d-1-t)*k, read circularly (tcq_kernels.h)]. k + 16/d bits per value
 * (2.125 at k = 2, d = 128). Decoding a value is a load, a shift, a mask
 * and the multiply-add and byte sum: no table is needed (the plan keeps the 2^L
 * values as a 16 KB table for speed; tcq_value is the definition).
 * Encode: (d + W) steps of 2^L add-compare-selects (W: tcq_window).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "tcq_kernels.h"

#define TCQ_L 12

typedef struct {
    tcq_code tc;
    float f[1u << TCQ_L]; /* f[s] = tcq_value(s) */
} tcq_tables;

static tcq_records records(const kvq_plan *p) {
    const tcq_tables *tb = p->priv;
    tcq_records R = {&tb->tc, p->d, p->code_bytes, (size_t)p->rec.off[KVQ_TCQ_BITS],
                     (size_t)p->rec.off[KVQ_TCQ_SCALE], p->o.scale32, p->vnni};
    return R;
}

/* One row with the caller's scratch (tcq_scratch_bytes). */
static int enc_one(const kvq_plan *p, const float *x, uint8_t *code, void *scratch) {
    const tcq_tables *tb = p->priv;
    const int d = p->d;
    float y[KVQ_DIM_MAX], u[KVQ_DIM_MAX];
    uint32_t st[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    double nn = 0;
    for (int c = 0; c < d; c++) nn += (double)y[c] * y[c];
    uint8_t *bits = code + p->rec.off[KVQ_TCQ_BITS];
    if (!(nn > 0)) { /* zero row: all-zero symbols, scale 0 */
        memset(bits, 0, (size_t)p->rec.size[KVQ_TCQ_BITS]);
        return scale_store(p, code, 0.0f);
    }
    const double inv = sqrt((double)d / nn);
    for (int c = 0; c < d; c++) u[c] = (float)(y[c] * inv);
    tcq_encode_path(&tb->tc, u, d, scratch, st, p->isa);
    tcq_pack(&tb->tc, st, d, bits);
    double yf = 0, ff = 0;
    for (int t = 0; t < d; t++) {
        yf += (double)y[t] * tb->f[st[t]];
        ff += (double)tb->f[st[t]] * tb->f[st[t]];
    }
    return scale_store(p, code, ff > 0 ? (float)(yf / ff) : 0.0f);
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const tcq_tables *tb = p->priv;
    void *scratch = malloc(tcq_scratch_bytes(&tb->tc, p->d));
    if (!scratch) return KVQ_ERR_NOMEM;
    int rc = enc_one(p, x, code, scratch);
    free(scratch);
    return rc;
}

/* A batch with one scratch for all its rows. */
static int enc_rows(const kvq_plan *p, const float *x, size_t n, uint8_t *codes) {
    const tcq_tables *tb = p->priv;
    void *scratch = malloc(tcq_scratch_bytes(&tb->tc, p->d));
    if (!scratch) return KVQ_ERR_NOMEM;
    int rc = KVQ_OK;
    for (size_t i = 0; i < n && !rc; i++) rc = enc_one(p, x + i * (size_t)p->d, codes + i * p->code_bytes, scratch);
    free(scratch);
    return rc;
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const tcq_tables *tb = p->priv;
    const float g = scale_load(p, code);
    tcq_values(&tb->tc, code + p->rec.off[KVQ_TCQ_BITS], p->d, y, p->isa);
    for (int t = 0; t < p->d; t++) y[t] *= g;
}

/* q~ = R q and its 8-bit form (tcq_kernels.h, "the 8-bit query"). */
static void prep(const kvq_plan *p, const float *q, float *qp) {
    rot_apply(&p->rot, q, qp);
    tcq_query8(p->d, qp, p->isa);
}

/* scores[j n + i] = gamma_i sum_t qp_jt f(s_it), qp = R q (the inner product
 * in the rotated domain, where R is orthogonal), as an integer dot with the
 * 8-bit query. */
static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    tcq_records R = records(p);
    tcq_score(&R, qp, p->qfloats, nq, codes, n, scores, p->isa);
}

/* acc_j += w_ji gamma_i f(s_i.) (rotated domain). */
static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    tcq_records R = records(p);
    tcq_accum(&R, w, nq, codes, n, acc, p->isa);
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
    for (uint32_t s = 0; s < (1u << TCQ_L); s++) tb->f[s] = tcq_value(s);
    tb->tc.L = TCQ_L;
    tb->tc.k = p->bits;
    tb->tc.f = tb->f;
    p->priv = tb;
    p->rotated = !p->o.norot;
    p->qfloats = TCQ_QFLOATS(p->d);
    p->encode = enc;
    p->encode_rows = enc_rows;
    p->decode = dec;
    p->prep = prep;
    p->score = score;
    p->accum = accum;
    return KVQ_OK;
}

const kvq_method kvq_method_tcq = {"tcq", 1, 4, 2, init, fini, 0};
