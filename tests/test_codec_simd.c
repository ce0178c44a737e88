/* Every SIMD path against the scalar reference: kernels on the same codes
 * (scores, p-weighted sums, decode) within 1e-5 relative, and encoders giving
 * the same codes up to rare ties at quantization boundaries (the SIMD norm
 * is summed in another order). Many sizes: 1 token, odd counts, all dims. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kvq.h"
#include "testutil.h"

static const char *METHODS[] = {"f32", "f16", "bf16", "q8", "q4", "tq-mse:1", "tq-mse:2", "tq-mse:3", "tq-mse:4",
                                "tq-mse:5", "tq-mse:6", "tq-mse:8", "tq-prod:2", "tq-prod:3", "tq-prod:5", "qjl",
                                "polar", "rvq:1", "rvq:2", "rvq:3", "tq-mse:4+outliers=8", "tq-mse:4+norot",
                                "tq-mse:3+scale=norm", "tq-mse:2+scale32", "tq-mse:4+cb=gauss", "tq-mse:4+center",
                                "f16+center", "rvq:2+center", "tq-mse:3+chscale",
                                /* polar's AVX-512 kernels per level width (B = 3: 2-entry upper
                                 * tables, 6: 64-entry level 1) and f32 radii */
                                "polar:3", "polar:6", "polar+scale32", "polar+center", "polar+outliers=16",
                                /* +outliers: inner tq-mse read through the host layout (b = 1, 2, 4),
                                 * repacked into it (b = 3, 6; inner scale among the spare bytes at
                                 * K = 16 and b = 6), and inner plans in their own domain */
                                "tq-mse:2+outliers=16", "tq-mse:1+outliers=8+scale32", "tq-mse:3+outliers=8",
                                "tq-mse:3+outliers=16", "tq-mse:6+outliers=8", "q8+outliers=16", "tq-mse:2+norot"};


static void check_method(const char *spec, int d, size_t n, int nq, kvq_isa isa, tu_rng *r) {
    float *x = malloc(n * d * sizeof *x), *q = malloc((size_t)nq * d * sizeof *q);
    for (size_t i = 0; i < n * d; i++) x[i] = (float)tu_gauss(r);
    for (int i = 0; i < nq * d; i++) q[i] = (float)tu_gauss(r);
    kvq_plan *fast = NULL, *ref = NULL;
    int rc = kvq_plan_create(&fast, spec, d, 5, x, n);
    if (rc == KVQ_ERR_UNKNOWN_METHOD || rc == KVQ_ERR_UNSUPPORTED_DIM || (rc == KVQ_ERR_INVALID_ARG && d < 48)) {
        free(x);
        free(q);
        return;
    }
    CHECK(rc == 0, "%s d=%d: %s", spec, d, kvq_strerror(rc));
    kvq_plan *f2 = NULL;
    CHECK_OK(kvq_plan_clone_isa(&f2, fast, isa));
    kvq_plan_free(fast);
    fast = f2;
    CHECK_OK(kvq_plan_clone_isa(&ref, fast, KVQ_ISA_SCALAR));
    if (!fast || !ref) goto out;
    size_t cb = kvq_plan_code_bytes(ref), qf = kvq_plan_query_floats(ref);
    CHECK(cb == kvq_plan_code_bytes(fast) && qf == kvq_plan_query_floats(fast), "sizes");
    uint8_t *cr = malloc(n * cb), *cf = malloc(n * cb);
    float *qpr = malloc(nq * qf * sizeof *qpr), *qpf = malloc(nq * qf * sizeof *qpf);
    float *sr = malloc(nq * n * sizeof *sr), *sf = malloc(nq * n * sizeof *sf);
    float *w = malloc(nq * n * sizeof *w), *ar = calloc((size_t)nq * d, sizeof *ar), *af = calloc((size_t)nq * d, sizeof *af);
    float *dr = malloc(n * d * sizeof *dr), *df = malloc(n * d * sizeof *df);
    CHECK_OK(kvq_encode(ref, x, KVQ_DTYPE_F32, n, cr));
    CHECK_OK(kvq_encode(fast, x, KVQ_DTYPE_F32, n, cf));
    size_t same = 0;
    for (size_t i = 0; i < n * cb; i++) same += cr[i] == cf[i];
    /* f32 scales (+scale32) differ in their last bits with the summation order */
    CHECK(strstr(spec, "scale32") || same >= n * cb * 95 / 100, "%s d=%d n=%zu isa=%s: only %zu of %zu code bytes equal", spec, d, n,
          kvq_isa_name(isa), same, n * cb);
    for (int j = 0; j < nq; j++) {
        CHECK_OK(kvq_query_prepare(ref, q + j * d, qpr + j * qf));
        CHECK_OK(kvq_query_prepare(fast, q + j * d, qpf + j * qf));
    }
    /* prepared queries are opaque (they may hold int8 bytes); their leading
     * floats are the rotated (or projected) query, except for q8 / q4 whose
     * rows are 8-bit block queries (qblk.h) */
    const int qblk = !strncmp(spec, "q8", 2) || !strncmp(spec, "q4", 2);
    size_t lead = qf < (size_t)d ? qf : (size_t)d;
    for (int j = 0; j < nq && !qblk; j++)
        CHECK(tu_rel_l2(qpf + j * qf, qpr + j * qf, lead) < 1e-5, "%s prepare", spec);
    /* without a rotation the rows are the same input: the whole prepared rows
     * (8-bit queries of the tq family and of q8 / q4 included) must be identical */
    if (strstr(spec, "+norot") || qblk)
        CHECK(!memcmp(qpf, qpr, (size_t)nq * qf * sizeof *qpf), "%s d=%d isa=%s: prepared rows differ", spec, d,
              kvq_isa_name(isa));
    /* kernels on the same (reference) codes */
    CHECK_OK(kvq_score(ref, qpr, nq, cr, n, sr));
    CHECK_OK(kvq_score(fast, qpr, nq, cr, n, sf));
    double e = tu_rel_l2(sf, sr, nq * n);
    CHECK(e < 1e-5, "%s d=%d n=%zu nq=%d isa=%s score rel diff %.3g", spec, d, n, nq, kvq_isa_name(isa), e);
    if (kvq_plan_can_decode(ref)) {
        for (size_t i = 0; i < nq * n; i++) w[i] = (float)tu_uniform(r);
        CHECK_OK(kvq_accumulate(ref, w, nq, cr, n, ar));
        CHECK_OK(kvq_accumulate(fast, w, nq, cr, n, af));
        e = tu_rel_l2(af, ar, (size_t)nq * d);
        /* AVX-512 VNNI plans of the tq family accumulate with weights rounded
         * to 16 bits per row and run (tq_vnni_x86.c): each weight moves by a
         * uniform error of <= 2^-17 of the row's largest (RMS 4.4e-6 of it),
         * which for these uniform weights (RMS 0.58 of the largest) is ~8e-6
         * of the output (measured up to 9.8e-6); test_tq_vnni checks that
         * kernel exactly. q8 / q4 values the same way, per row, run and
         * block (qblk_vnni_x86.c; q4 nibbles centred, n - 8): measured up to
         * 1.4e-5 over d = 32..512, n = 1..300, 1..7 rows; test_qblk_vnni
         * checks those kernels exactly. Everything else: float, 1e-5. */
        const int int_v = isa >= KVQ_ISA_AVX512 && kvq_cpu_has_int8_dot() &&
                          (strstr(spec, "tq-mse") || strstr(spec, "rvq") || qblk);
        CHECK(e < (int_v ? 3e-5 : 1e-5), "%s d=%d n=%zu isa=%s accumulate rel diff %.3g", spec, d, n, kvq_isa_name(isa), e);
        CHECK_OK(kvq_decode(ref, cr, n, dr));
        CHECK_OK(kvq_decode(fast, cr, n, df));
        e = tu_rel_l2(df, dr, n * d);
        CHECK(e < 1e-5, "%s d=%d isa=%s decode rel diff %.3g", spec, d, kvq_isa_name(isa), e);
        /* the fast encoder's codes reconstruct as well as the reference's */
        CHECK_OK(kvq_decode(ref, cf, n, df));
        e = tu_rel_l2(df, dr, n * d);
        CHECK(e < 2e-2, "%s d=%d isa=%s encode: decoded rel diff %.3g", spec, d, kvq_isa_name(isa), e);
    }
    free(cr);
    free(cf);
    free(qpr);
    free(qpf);
    free(sr);
    free(sf);
    free(w);
    free(ar);
    free(af);
    free(dr);
    free(df);
out:
    kvq_plan_free(fast);
    kvq_plan_free(ref);
    free(x);
    free(q);
}

int main(void) {
    static const int dims[] = {32, 64, 80, 96, 128, 136, 256, 512};
    static const size_t ns[] = {1, 7, 33};
    static const int nqs[] = {1, 3, 4, 8};
    tu_rng r = {2024};
    kvq_isa best = kvq_cpu_isa();
    int count = 0;
    for (int isa = KVQ_ISA_AVX2; isa <= (int)best; isa++)
        for (size_t m = 0; m < sizeof METHODS / sizeof *METHODS; m++)
            for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
                size_t n = ns[(m + di) % 3];
                int nq = nqs[(m + di + isa) % 4];
                check_method(METHODS[m], dims[di], n, nq, (kvq_isa)isa, &r);
                count++;
            }
    printf("cpu isa: %s, %d method/dim/isa combinations\n", kvq_isa_name(best), count);
    return tu_finish("test_codec_simd");
}
