/* The integer (VNNI) accumulate of tq layouts (src/codec/tq_vnni_x86.c):
 * - equals an exact emulation of its arithmetic (16-bit weights per row and
 *   run of 256 records, integer sums) to float rounding (1e-6);
 * - is within the documented bound of the float reference tq_accum_ref:
 *   |delta acc_c| <= sum_i 0.51 * xmax_run / 65535 * cscale * |c8[idx_ic]|;
 * - runs with a negative weight fall back to float (= reference to 1e-5).
 * And the token-lane integer scores (tq_score_tok) equal the scalar
 * reference's bit for bit; the token-lane QJL scores (qjl, tq-prod) equal
 * the scalar reference within 1e-5 (float sums in another order).
 * d = 64, 128, 256, b = 1..4, f16 and f32 scales, 1 to 600 records (tails,
 * several runs), 1 to 9 query rows (passes of 1..4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/tq_kernels.h"
#include "cpu.h"
#include "testutil.h"

static void check_case(const char *spec, int d, size_t n, size_t nq, int neg, tu_rng *r) {
    kvq_plan *p = NULL;
    CHECK_OK(kvq_plan_create(&p, spec, d, 11, NULL, 0));
    if (!p) return;
    const int b = p->bits;
    tq_layout L = {d, b, &p->cb, p->code_bytes, 0, scale_bytes(p), p->o.scale32, p->vnni, NULL};
    float *x = malloc(n * d * sizeof *x), *w = malloc(nq * n * sizeof *w);
    float *a0 = malloc(nq * d * sizeof *a0), *ak = malloc(nq * d * sizeof *ak), *ar = malloc(nq * d * sizeof *ar);
    double *ae = calloc(nq * d, sizeof *ae), *bound = calloc(nq * d, sizeof *bound), *mag = calloc(nq * d, sizeof *mag);
    uint8_t *codes = malloc(n * p->code_bytes), idx[KVQ_DIM_MAX];
    for (size_t i = 0; i < n * d; i++) x[i] = (float)(tu_gauss(r) * (1 + (i / d) % 3));
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, n, codes));
    tu_softmax_weights(r, w, nq, n, neg); /* the last row's negative weight: float path */
    {
        const size_t qf = p->qfloats;
        float *q = malloc(nq * d * sizeof *q), *qp = malloc(nq * qf * sizeof *qp);
        float *sr = malloc(nq * n * sizeof *sr), *sk = malloc(nq * n * sizeof *sk);
        for (size_t i = 0; i < nq * d; i++) q[i] = (float)(tu_gauss(r) * (i % 7 == 0 ? 5 : 1));
        for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(p, q + j * d, qp + j * qf));
        tq_layout ls = L;
        ls.vnni = 0;
        tq_score(&ls, qp, qf, nq, codes, n, sr, KVQ_ISA_SCALAR);
        memset(sk, 0x7f, nq * n * sizeof *sk);
        const int st = tq_score_tok(&L, qp, qf, nq, codes, n, sk);
        CHECK(st == (p->vnni && n >= 16), "%s d=%d n=%zu: score_tok served %d", spec, d, n, st);
        if (st) CHECK(!memcmp(sr, sk, nq * n * sizeof *sr), "%s d=%d n=%zu nq=%zu: token-lane scores differ", spec, d, n, nq);
        free(q);
        free(qp);
        free(sr);
        free(sk);
    }
    for (size_t i = 0; i < nq * d; i++) a0[i] = ak[i] = ar[i] = (float)tu_gauss(r);
    tq_accum_ref(&L, w, nq, codes, n, ar);
    int served = tq_accum_vnni(&L, w, nq, codes, n, ak);
    CHECK(served == (p->vnni && kvq_cpu_has_int8_dot()), "%s d=%d: served %d", spec, d, served);
    if (!served) goto out;
    /* emulation, run by run */
    const float cs = p->cb.cscale;
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        const size_t m = n - i0 < 256 ? n - i0 : 256;
        for (size_t j = 0; j < nq; j++) {
            int bad = 0;
            float xmax = 0;
            for (size_t i = i0; i < i0 + m; i++) {
                float xi = w[j * n + i] * tq_scale(&L, codes + i * L.stride);
                if (!(xi >= 0)) bad = 1;
                if (xi > xmax) xmax = xi;
            }
            for (size_t jj = 0; jj < nq && !bad; jj++) /* a bad weight in any row: the whole run is float */
                for (size_t i = i0; i < i0 + m; i++)
                    if (!(w[jj * n + i] * tq_scale(&L, codes + i * L.stride) >= 0)) bad = 1;
            const float st = xmax / 65535.0f, inv = xmax > 0 ? 65535.0f / xmax : 0.0f;
            for (size_t i = i0; i < i0 + m; i++) {
                const uint8_t *rec = codes + i * L.stride;
                strided_unpack(rec + L.idx_off, d, b, idx);
                const float xi = w[j * n + i] * tq_scale(&L, rec);
                double u;
                if (bad) u = xi;
                else {
                    float t = rintf(xi * inv);
                    u = t > 65535.0f ? 65535.0 : t;
                }
                for (int c = 0; c < d; c++) {
                    const double cv = bad ? p->cb.c[idx[c]] : (double)p->cb.c8[idx[c]] * st * cs;
                    ae[j * d + c] += u * cv;
                    mag[j * d + c] += fabs(u * cv);
                    if (!bad) bound[j * d + c] += 0.51 * xmax / 65535.0 * cs * fabs((double)p->cb.c8[idx[c]]);
                }
            }
        }
    }
    double worst_e = 0, worst_b = 0;
    for (size_t k = 0; k < nq * d; k++) {
        const double e = fabs(ak[k] - (a0[k] + ae[k])), tol = 1e-6 * (fabs(a0[k]) + mag[k]) + 1e-30;
        const double f = fabs((double)ak[k] - ar[k]), tb = bound[k] + 1e-5 * (fabs(a0[k]) + mag[k]) + 1e-30;
        if (e / tol > worst_e) worst_e = e / tol;
        if (f / tb > worst_b) worst_b = f / tb;
    }
    CHECK(worst_e <= 1, "%s d=%d n=%zu nq=%zu neg=%d: vs emulation %.3g x tolerance", spec, d, n, nq, neg, worst_e);
    CHECK(worst_b <= 1, "%s d=%d n=%zu nq=%zu neg=%d: vs float reference %.3g x bound", spec, d, n, nq, neg, worst_b);
out:
    free(x);
    free(w);
    free(a0);
    free(ak);
    free(ar);
    free(ae);
    free(bound);
    free(mag);
    free(codes);
    kvq_plan_free(p);
}


static void check_qjl(const char *spec, int d, size_t n, size_t nq, tu_rng *r) {
    kvq_plan *p = NULL, *ref = NULL;
    CHECK_OK(kvq_plan_create(&p, spec, d, 3, NULL, 0));
    if (!p) return;
    CHECK_OK(kvq_plan_clone_isa(&ref, p, KVQ_ISA_SCALAR));
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    float *x = malloc(n * d * sizeof *x), *q = malloc(nq * d * sizeof *q), *qp = malloc(nq * qf * sizeof *qp);
    float *sr = malloc(nq * n * sizeof *sr), *sf = malloc(nq * n * sizeof *sf);
    uint8_t *codes = malloc(n * cb);
    for (size_t i = 0; i < n * d; i++) x[i] = (float)tu_gauss(r);
    for (size_t i = 0; i < nq * d; i++) q[i] = (float)tu_gauss(r);
    CHECK_OK(kvq_encode(ref, x, KVQ_DTYPE_F32, n, codes));
    for (size_t j = 0; j < nq; j++) CHECK_OK(kvq_query_prepare(ref, q + j * d, qp + j * qf));
    CHECK_OK(kvq_score(ref, qp, nq, codes, n, sr));
    CHECK_OK(kvq_score(p, qp, nq, codes, n, sf));
    double e = tu_rel_l2(sf, sr, nq * n);
    CHECK(e < 1e-5, "%s d=%d n=%zu nq=%zu: scores rel diff %.3g", spec, d, n, nq, e);
    free(x);
    free(q);
    free(qp);
    free(sr);
    free(sf);
    free(codes);
    kvq_plan_free(p);
    kvq_plan_free(ref);
}

int main(void) {
    static const char *const specs[] = {"tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4", "tq-mse:2+scale32", "tq-mse:4+norot"};
    static const int dims[] = {64, 128, 256};
    static const size_t ns[] = {1, 3, 4, 5, 17, 255, 256, 257, 600};
    static const size_t nqs[] = {1, 2, 3, 4, 5, 8, 9};
    tu_rng r = {99};
    if (!kvq_cpu_has_int8_dot()) printf("no AVX-512 VNNI/VBMI: only the not-served path is checked\n");
    int k = 0;
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
        for (size_t di = 0; di < 3; di++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++, k++)
                check_case(specs[s], dims[di], ns[ni], nqs[k % 7], k % 5 == 4, &r);
    static const char *const qspecs[] = {"qjl", "qjl+m=192", "qjl+m=96", "qjl+scale32", "tq-prod:3", "tq-prod:4+scale32"};
    static const size_t qns[] = {15, 16, 17, 33, 255, 256};
    for (size_t s = 0; s < sizeof qspecs / sizeof *qspecs; s++)
        for (size_t di = 0; di < 3; di++)
            for (size_t ni = 0; ni < sizeof qns / sizeof *qns; ni++, k++) check_qjl(qspecs[s], dims[di], qns[ni], nqs[k % 7], &r);
    return tu_finish("test_tq_vnni");
}
