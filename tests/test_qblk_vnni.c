/* q8 / q4 with 8-bit queries (src/codec/qblk.h) and their AVX-512 VNNI
 * kernels (src/codec/qblk_vnni_x86.c):
 * - prepared rows: every ISA gives the bytes and floats of the definition
 *   (emulated here);
 * - scores: every path (scalar reference, AVX2, AVX-512 without VNNI, VNNI
 *   token lanes) equals the definition's integer sums and float operations
 *   bit for bit, and the score is within the derived bound of the exact
 *   <q, decoded k> (query rounding: sum_b (sq_b / 2) sum_c |k^_c|, plus the
 *   float rounding of the combination); the relative error is printed;
 * - values (VNNI): equal to an exact emulation of the kernel's arithmetic
 *   (16-bit weights per row, run of 256 records and block, integer sums,
 *   q4 nibbles as n - 8 with the min term in float; rows with a negative
 *   weight in float) within its float rounding, and within the derived
 *   bound of the float reference: |delta acc_c| <= sum_i 0.52 st |v_ic|.
 * d = 32..512 (every d % 32, d % 16 = 8), 1 to 1000 records (tails of the
 * 16-record lanes, the 4-record groups and the runs), 1 to 9 query rows,
 * blocks whose scales differ by 100x, zero and NaN query blocks. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/qblk.h"
#include "cpu.h"
#include "testutil.h"

#define U24 (1.0 / 16777216.0) /* 2^-24: float rounding */

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kvq_f16_to_f32(h);
}

/* value c of a record as the integer the kernels use: k8 (q8) or n (q4) */
static int code_at(int q4, int d, const uint8_t *rec, int c) {
    const int nb = qblk_nb(d);
    return q4 ? (rec[4 * nb + c / 2] >> (4 * (c & 1))) & 15 : (int8_t)rec[2 * nb + c];
}
static float bscale(int q4, const uint8_t *rec, int b) { return h2f(rec + (q4 ? 4 : 2) * b); }
static float bmin(const uint8_t *rec, int b) { return h2f(rec + 4 * b + 2); }

/* the prepared row of the definition (qblk.h) */
static void emu_prep(int d, int q4, const float *q, float *row) {
    const int nb = qblk_nb(d);
    int8_t *q8 = (int8_t *)(void *)(row + 2 * nb);
    memset(row, 0, QBLK_QFLOATS(d) * sizeof *row);
    for (int b = 0; b < nb; b++) {
        const int lo = 32 * b, hi = lo + 32 < d ? lo + 32 : d;
        float m = 0;
        int bad = 0;
        for (int c = lo; c < hi; c++) {
            if (!isfinite(q[c])) bad = 1;
            else if (fabsf(q[c]) > m) m = fabsf(q[c]);
        }
        if (bad || m < 1e-30f) {
            row[b] = bad ? NAN : 0.0f;
            continue;
        }
        const float inv = 127.0f / m;
        int sum = 0;
        for (int c = lo; c < hi; c++) {
            const float t = rintf(q[c] * inv); /* |t| <= 127 */
            q8[q4 ? qblk_q4pos(c) : c] = (int8_t)t;
            sum += (int)t;
        }
        row[b] = m / 127.0f;
        row[nb + b] = (float)sum;
    }
}

/* the score of the definition */
static float emu_score(int q4, int d, const float *row, const uint8_t *rec) {
    const int nb = qblk_nb(d);
    const int8_t *q8 = qblk_q8(row, nb);
    float s = 0;
    for (int b = 0; b < nb; b++) {
        int32_t I = 0;
        for (int c = 32 * b; c < d && c < 32 * b + 32; c++) I += q8[q4 ? qblk_q4pos(c) : c] * code_at(q4, d, rec, c);
        if (q4) s = fmaf(row[b], fmaf(bscale(1, rec, b), (float)I, bmin(rec, b) * row[nb + b]), s);
        else s = fmaf(bscale(0, rec, b) * row[b], (float)I, s);
    }
    return s;
}

typedef struct {
    double num, den, rel_sum; /* score error: squared sums, sum of |err| / (|q||k|) */
    double knum;              /* the key's own error: sum (<q, k^> - <q, k>)^2 */
    size_t count;
    double worst_acc_emu, worst_acc_ref; /* worst ratio to the tolerance / bound */
} stats;

/* Records with blocks of very different scales, queries too. */
static void gen(tu_rng *r, float *x, size_t rows, int d, int spread) {
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < d; c++) {
            const double blk = spread ? ((c / 32 + i) % 3 == 0 ? 30.0 : (c / 32) % 3 == 1 ? 0.3 : 1.0) : 1.0;
            x[i * d + c] = (float)(tu_gauss(r) * blk);
        }
}

static void check_scores(const char *spec, kvq_plan *const *plans, int np, int d, size_t n, size_t nq, tu_rng *r,
                         stats *st) {
    const int q4 = !strcmp(spec, "q4"), nb = qblk_nb(d);
    const size_t qf = kvq_plan_query_floats(plans[0]), cb = kvq_plan_code_bytes(plans[0]);
    CHECK(qf == QBLK_QFLOATS(d), "%s d=%d: qfloats %zu", spec, d, qf);
    float *x = malloc(n * d * sizeof *x), *q = malloc(nq * d * sizeof *q), *kd = malloc(n * d * sizeof *kd);
    float *qe = malloc(nq * qf * sizeof *qe), *qp = malloc(nq * qf * sizeof *qp);
    float *se = malloc(nq * n * sizeof *se), *sk = malloc(nq * n * sizeof *sk);
    uint8_t *codes = malloc(n * cb);
    const int plain = n % 2 == 0 && n % 3 != 0; /* else blocks of 0.3x / 30x scales */
    gen(r, x, n, d, !plain);
    gen(r, q, nq, d, !plain);
    if (nq > 2) { /* a zero block and a NaN block */
        for (int c = 0; c < 32 && c < d; c++) q[1 * d + c] = 0;
        q[2 * d + d - 1] = NAN;
    }
    CHECK_OK(kvq_encode(plans[0], x, KVQ_DTYPE_F32, n, codes));
    CHECK_OK(kvq_decode(plans[0], codes, n, kd));
    for (size_t j = 0; j < nq; j++) emu_prep(d, q4, q + j * d, qe + j * qf);
    for (size_t j = 0; j < nq; j++)
        for (size_t i = 0; i < n; i++) se[j * n + i] = emu_score(q4, d, qe + j * qf, codes + i * cb);
    for (int pi = 0; pi < np; pi++) {
        for (size_t j = 0; j < nq; j++) { /* the NaN row: refused by the API, its kernel's bytes still checked */
            const int finite = !(nq > 2 && j == 2);
            CHECK(kvq_query_prepare(plans[pi], q + j * d, qp + j * qf) == (finite ? KVQ_OK : KVQ_ERR_NONFINITE),
                  "%s d=%d row %zu: prepare status", spec, d, j);
            if (!finite) plans[pi]->prep(plans[pi], q + j * d, qp + j * qf);
        }
        CHECK(!memcmp(qp, qe, nq * qf * sizeof *qp), "%s d=%d isa=%s vnni=%d: prepared rows differ from the definition", spec,
              d, kvq_isa_name(plans[pi]->isa), plans[pi]->vnni);
        memset(sk, 0x55, nq * n * sizeof *sk);
        CHECK_OK(kvq_score(plans[pi], qe, nq, codes, n, sk));
        size_t bad = 0;
        for (size_t k = 0; k < nq * n; k++) bad += isnan(se[k]) ? !isnan(sk[k]) : memcmp(se + k, sk + k, sizeof *sk) != 0;
        CHECK(bad == 0, "%s d=%d n=%zu nq=%zu isa=%s vnni=%d: %zu scores differ from the definition", spec, d, n, nq,
              kvq_isa_name(plans[pi]->isa), plans[pi]->vnni, bad);
    }
    /* against the exact <q, k^> (float64 on the decoded keys) */
    for (size_t j = 0; j < nq; j++) {
        const float *row = qe + j * qf;
        for (size_t i = 0; i < n; i++) {
            const float *k = kd + i * d;
            double ex = 0, bound = 0, mag = 0, qq = 0, kk = 0, raw = 0;
            int has_nan = 0;
            for (int c = 0; c < d; c++) {
                ex += (double)q[j * d + c] * k[c];
                raw += (double)q[j * d + c] * x[i * d + c];
                has_nan |= isnan(row[c / 32]);
                bound += row[c / 32] / 2 * (1 + 5e-5) * fabs(k[c]);
                mag += (fabs(q[j * d + c]) + row[c / 32]) * fabs(k[c]);
                qq += (double)q[j * d + c] * q[j * d + c];
                kk += (double)k[c] * k[c];
            }
            const double s = se[j * n + i];
            if (has_nan) {
                CHECK(isnan(s), "%s d=%d: a NaN query block must give a NaN score", spec, d);
                continue;
            }
            /* the float operations: one product and one fma per block (q4: two
             * fmas) on partial sums <= mag, the decoded keys' own rounding */
            bound += (2.0 * nb + 4) * U24 * mag + 1e-30;
            const double e = fabs(s - ex);
            CHECK(e <= bound, "%s d=%d: |score - <q, k^>| %.4g above the bound %.4g", spec, d, e, bound);
            if (plain && (nq < 3 || j > 2)) { /* Gaussian rows only (no zero / NaN block) */
                st->num += e * e;
                st->den += ex * ex;
                st->knum += (ex - raw) * (ex - raw);
                if (qq > 0 && kk > 0) st->rel_sum += e / sqrt(qq * kk);
                st->count++;
            }
        }
    }
    free(x);
    free(q);
    free(kd);
    free(qe);
    free(qp);
    free(se);
    free(sk);
    free(codes);
}

/* The VNNI value kernel against the emulation of its arithmetic and against
 * the float reference (the scalar plan: decode-based). */
static void check_accum(const char *spec, kvq_plan *fast, kvq_plan *ref, int d, size_t n, size_t nq, int neg, tu_rng *r,
                        stats *st) {
    const int q4 = !strcmp(spec, "q4"), nb = qblk_nb(d);
    const size_t cb = kvq_plan_code_bytes(ref);
    float *x = malloc(n * d * sizeof *x), *w = malloc(nq * n * sizeof *w);
    float *a0 = malloc(nq * d * sizeof *a0), *ak = malloc(nq * d * sizeof *ak), *ar = malloc(nq * d * sizeof *ar);
    double *ae = calloc(nq * d, sizeof *ae), *mag = calloc(nq * d, sizeof *mag), *bound = calloc(nq * d, sizeof *bound);
    double *rounds = calloc(nq * d, sizeof *rounds);
    uint8_t *codes = malloc(n * cb);
    gen(r, x, n, d, 1);
    CHECK_OK(kvq_encode(ref, x, KVQ_DTYPE_F32, n, codes));
    tu_softmax_weights(r, w, nq, n, neg); /* the last row's negative weight: float path */
    for (size_t k = 0; k < nq * d; k++) a0[k] = ak[k] = ar[k] = (float)tu_gauss(r);
    CHECK_OK(kvq_accumulate(ref, w, nq, codes, n, ar));
    CHECK_OK(kvq_accumulate(fast, w, nq, codes, n, ak));
    /* emulation per run of 256, row and block */
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        const size_t m = n - i0 < 256 ? n - i0 : 256;
        for (size_t j = 0; j < nq; j++)
            for (int b = 0; b < nb; b++) {
                const int lo = 32 * b, hi = lo + 32 < d ? lo + 32 : d;
                const float *wj = w + j * n;
                float xmax = 0;
                int bad = 0;
                for (size_t i = i0; i < i0 + m; i++) {
                    const float xi = wj[i] * bscale(q4, codes + i * cb, b);
                    if (!(xi >= 0) || !(xi < INFINITY)) bad = 1;
                    else if (xi > xmax) xmax = xi;
                }
                const float stp = xmax / 65535.0f, inv = xmax > 0 ? 65535.0f / xmax : 0.0f;
                for (size_t i = i0; i < i0 + m; i++) {
                    const uint8_t *rec = codes + i * cb;
                    const float g = bscale(q4, rec, b), xi = wj[i] * g;
                    for (int c = lo; c < hi; c++) {
                        const size_t k = j * d + c;
                        const int v = code_at(q4, d, rec, c);
                        if (bad) { /* float, as the decode-based reference */
                            const float y = q4 ? bmin(rec, b) + g * (float)v : g * (float)v;
                            ae[k] += (double)wj[i] * y;
                            mag[k] += fabs((double)wj[i] * y);
                            rounds[k] += 2;
                            continue;
                        }
                        const double u = rintf(xi * inv), vc = q4 ? v - 8 : v;
                        ae[k] += u * stp * vc;
                        mag[k] += fabs(u * stp * vc);
                        /* |u st - x| <= st (0.5 + 3 * 65535 * 2^-24) */
                        bound[k] += 0.52 * stp * fabs(vc);
                        if (q4) { /* the min term: float sum of w (km + 8 ks), with (km + 8 ks) rounded */
                            const double t = (double)wj[i] * (double)fmaf(8.0f, g, bmin(rec, b));
                            ae[k] += t;
                            mag[k] += fabs(t);
                        }
                    }
                }
                if (!bad)
                    for (int c = lo; c < hi; c++) rounds[j * d + c] += 24 + 4; /* the min term's float sum, the fold */
            }
    }
    double we = 0, wb = 0;
    for (size_t k = 0; k < nq * d; k++) {
        const double scale = fabs(a0[k]) + mag[k] + 1e-30;
        const double e = fabs(ak[k] - (a0[k] + ae[k])), tol = (rounds[k] + 4) * U24 * scale;
        /* the reference: n float additions of products */
        const double f = fabs((double)ak[k] - ar[k]), tb = bound[k] + (rounds[k] + 2.0 * n + 8) * U24 * scale;
        if (e / tol > we) we = e / tol;
        if (f / tb > wb) wb = f / tb;
    }
    CHECK(we <= 1, "%s d=%d n=%zu nq=%zu neg=%d: vs emulation %.3g x tolerance", spec, d, n, nq, neg, we);
    CHECK(wb <= 1, "%s d=%d n=%zu nq=%zu neg=%d: vs float reference %.3g x bound", spec, d, n, nq, neg, wb);
    if (we > st->worst_acc_emu) st->worst_acc_emu = we;
    if (wb > st->worst_acc_ref) st->worst_acc_ref = wb;
    free(x);
    free(w);
    free(a0);
    free(ak);
    free(ar);
    free(ae);
    free(mag);
    free(bound);
    free(rounds);
    free(codes);
}

int main(void) {
    static const char *const specs[] = {"q8", "q4"};
    static const int dims[] = {32, 40, 56, 64, 72, 96, 104, 128, 136, 200, 256, 264, 512};
    static const size_t ns[] = {1, 15, 16, 17, 255, 256, 257, 1000};
    static const size_t nqs[] = {1, 2, 3, 4, 5, 8, 9};
    const int vnni = kvq_cpu_has_int8_dot();
    const kvq_isa best = kvq_cpu_isa();
    if (!vnni) printf("no AVX-512 VNNI/VBMI: the VNNI kernels are not run\n");
    tu_rng r = {4242};
    int k = 0;
    for (int s = 0; s < 2; s++) {
        stats st = {0};
        stats st128 = {0};
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            const int d = dims[di];
            /* every path of this machine: scalar, AVX2, AVX-512 without VNNI, best */
            kvq_plan *plans[4] = {NULL, NULL, NULL, NULL}, *p = NULL;
            int np = 0;
            CHECK_OK(kvq_plan_create(&p, specs[s], d, 1, NULL, 0));
            if (!p) continue;
            CHECK_OK(kvq_plan_clone_isa(&plans[np++], p, KVQ_ISA_SCALAR));
            if (best >= KVQ_ISA_AVX2) CHECK_OK(kvq_plan_clone_isa(&plans[np++], p, KVQ_ISA_AVX2));
            if (best >= KVQ_ISA_AVX512 && vnni) {
                setenv("KVQ_NO_VNNI", "1", 1);
                CHECK_OK(kvq_plan_clone_isa(&plans[np++], p, KVQ_ISA_AVX512));
                unsetenv("KVQ_NO_VNNI");
                CHECK(!plans[np - 1]->vnni, "KVQ_NO_VNNI");
            }
            if (best > KVQ_ISA_AVX2) CHECK_OK(kvq_plan_clone_isa(&plans[np++], p, KVQ_ISA_BEST));
            CHECK(p->vnni == vnni, "%s d=%d: vnni %d", specs[s], d, p->vnni);
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++, k++) {
                const size_t n = ns[ni], nq = nqs[k % 7];
                if (n == 1000 && d > 256) continue; /* keep the sanitizer run short */
                check_scores(specs[s], plans, np, d, n, nq, &r, d == 128 ? &st128 : &st);
                if (vnni) check_accum(specs[s], p, plans[0], d, n, nq, k % 5 == 4, &r, &st);
            }
            for (int i = 0; i < np; i++) kvq_plan_free(plans[i]);
            kvq_plan_free(p);
        }
        printf("%s: 8-bit query score error vs <q, k^>, Gaussian rows, d = 128: relative RMS %.2e, mean |err|/(|q||k^|) "
               "%.2e (%zu scores; all dims: %.2e, %.2e); the key's own <q, k^> - <q, k>: relative RMS %.2e\n",
               specs[s], sqrt(st128.num / st128.den), st128.rel_sum / (double)st128.count, st128.count, sqrt(st.num / st.den),
               st.rel_sum / (double)st.count, sqrt(st128.knum / st128.den));
        if (vnni)
            printf("%s: VNNI values: worst %.3f of the emulation tolerance, %.3f of the bound vs the float reference\n", specs[s],
                   st.worst_acc_emu, st.worst_acc_ref);
    }
    return tu_finish("test_qblk_vnni");
}
