/* The fused AVX-512 tq encoder picks, for every coordinate, the nearest
 * centroid of the rotated, normalised vector (up to ties within 1e-4 of a
 * boundary, where float rounding order decides), for every specialised shape,
 * both quantization strategies (guess-and-correct, binary search); its row
 * blocks give every row the single-row bytes; batches through kvq_encode
 * (zero rows, scale overflow) and f16/bf16 input (the codes of the same
 * values as f32, scalar and SIMD conversion) agree with row-by-row codes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/tq_encode.h"
#include "codec/tq_kernels.h"
#include "cpu.h"
#include "testutil.h"

static void check_shape(int d, int b, int use_guess, tu_rng *r) {
    kvq_rotation rot;
    kvq_codebook cb;
    CHECK_OK(rot_init(&rot, d, 77 + d, 1, KVQ_ISA_AVX512));
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, b, d));
    cb_snap_int8(&cb);
    if (use_guess) CHECK(cb.guess_ok || b == 1, "d=%d b=%d: the index guess is not within one cell", d, b);
    if (!use_guess) cb.guess_ok = 0;
    float x[KVQ_DIM_MAX], y[KVQ_DIM_MAX], scale;
    uint8_t packed[KVQ_DIM_MAX], idx[KVQ_DIM_MAX];
    int bad = 0, served = 0;
    for (int t = 0; t < 300; t++) {
        for (int c = 0; c < d; c++) x[c] = (float)(tu_gauss(r) * (t % 3 == 0 ? 30 : 1));
        if (t % 5 == 0) x[t % d] *= 100; /* one dominant channel */
        if (!tq_encode_fused_avx512(&rot, &cb, d, b, 0, x, &scale, packed)) continue;
        served = 1;
        strided_unpack(packed, d, b, idx);
        rot_apply(&rot, x, y);
        double nrm = 0;
        for (int c = 0; c < d; c++) nrm += (double)y[c] * y[c];
        double s = sqrt((double)d / nrm);
        for (int c = 0; c < d; c++) {
            double u = y[c] * s;
            int best = 0;
            for (int i = 1; i < cb.n; i++)
                if (fabs(u - cb.c[i]) < fabs(u - cb.c[best])) best = i;
            if (idx[c] != best) {
                double tie = idx[c] > best ? cb.t[best] : cb.t[idx[c]];
                if (fabs(u - tie) > 1e-4 || abs(idx[c] - best) > 1) bad++;
            }
        }
    }
    CHECK(!bad, "d=%d b=%d guess=%d: %d coordinates not on the nearest centroid", d, b, use_guess, bad);
    CHECK(served || d == 512, "d=%d b=%d: fused encoder did not serve a specialised shape", d, b);
    rot_free(&rot);
}

/* The row-block entry (4 rows interleaved, then single rows) gives every row
 * the bytes of the single-row entry, the scale stored as kvq_f32_to_f16 (or
 * f32) would; it stops at a row with a zero norm or a scale above f16. */
static void check_rows(int d, int b, int use_guess, int sn, int s32, tu_rng *r) {
    kvq_rotation rot;
    kvq_codebook cb;
    CHECK_OK(rot_init(&rot, d, 91 + d, 1, KVQ_ISA_AVX512));
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, b, d));
    cb_snap_int8(&cb);
    if (!use_guess) cb.guess_ok = 0;
    enum { N = 23 };
    const size_t sb = s32 ? 4 : 2, stride = sb + (size_t)d * b / 8;
    float *x = malloc(N * (size_t)d * sizeof *x);
    uint8_t *got = malloc(N * stride), *want = malloc(N * stride);
    for (size_t i = 0; i < N * (size_t)d; i++) x[i] = (float)tu_gauss(r) * (i / d % 3 ? 1.0f : 1e-3f);
    for (int i = 0; i < N; i += 4) x[(size_t)i * d + i % d] *= 300; /* dominant channels */
    for (int i = 0; i < d; i++) x[7 * (size_t)d + i] = 6e-8f * (float)(i % 5); /* f16-subnormal scale */
    for (int i = 0; i < N; i++) {
        float sc;
        CHECK(tq_encode_fused_avx512(&rot, &cb, d, b, sn, x + (size_t)i * d, &sc, want + i * stride + sb),
              "d=%d b=%d row %d not served", d, b, i);
        if (s32) memcpy(want + i * stride, &sc, 4);
        else {
            uint16_t h = kvq_f32_to_f16(sc);
            memcpy(want + i * stride, &h, 2);
        }
    }
    memset(got, 0xAB, N * stride);
    size_t done = tq_encode_rows_avx512(&rot, &cb, d, b, sn, s32, x, N, got, stride);
    CHECK(done == N, "d=%d b=%d: %zu of %d rows done", d, b, done, N);
    CHECK(!memcmp(got, want, N * stride), "d=%d b=%d guess=%d sn=%d s32=%d: rows entry differs from single rows", d,
          b, use_guess, sn, s32);
    /* a zero row (5) stops it there; then a row whose f16 scale overflows (13) */
    memset(x + 5 * (size_t)d, 0, (size_t)d * sizeof *x);
    done = tq_encode_rows_avx512(&rot, &cb, d, b, sn, s32, x, N, got, stride);
    CHECK(done == 5, "d=%d b=%d: zero row: stopped at %zu", d, b, done);
    for (int i = 0; i < d; i++) x[13 * (size_t)d + i] = 1e6f;
    done = tq_encode_rows_avx512(&rot, &cb, d, b, sn, s32, x + 6 * (size_t)d, N - 6, got + 6 * stride, stride);
    CHECK(done == (s32 ? N - 6u : 7u), "d=%d b=%d s32=%d: large row: stopped at %zu", d, b, s32, done);
    CHECK(!memcmp(got + 6 * stride, want + 6 * stride, 7 * stride), "d=%d b=%d: rows before the stop", d, b);
    free(x);
    free(got);
    free(want);
    rot_free(&rot);
}

/* kvq_encode of a batch: the same codes as row by row, a zero row taking the
 * generic path in the middle of a block, a scale overflow reported. */
static void check_batch(const char *spec, tu_rng *r) {
    enum { N = 37, D = 128 };
    kvq_plan *p = NULL;
    CHECK_OK(kvq_plan_create(&p, spec, D, 3, NULL, 0));
    if (!p) return;
    size_t cb = kvq_plan_code_bytes(p);
    float *x = malloc(N * D * sizeof *x);
    uint8_t *got = malloc(N * cb), *want = malloc(N * cb);
    for (size_t i = 0; i < N * D; i++) x[i] = (float)tu_gauss(r);
    memset(x + 9 * D, 0, D * sizeof *x);
    for (int i = 0; i < N; i++) CHECK_OK(kvq_encode(p, x + i * D, KVQ_DTYPE_F32, 1, want + i * cb));
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, N, got));
    CHECK(!memcmp(got, want, N * cb), "%s: batch codes differ from row-by-row codes", spec);
    for (int i = 0; i < D; i++) x[21 * D + i] = 1e6f;
    int rc = kvq_encode(p, x, KVQ_DTYPE_F32, N, got);
    CHECK(strstr(spec, "scale32") ? rc == KVQ_OK : rc == KVQ_ERR_RANGE, "%s: large row: %s", spec, kvq_strerror(rc));
    CHECK(!memcmp(got, want, 21 * cb), "%s: rows before the large row", spec);
    free(x);
    free(got);
    free(want);
    kvq_plan_free(p);
}

/* f16/bf16 input (converted in chunks of rows, SIMD where d % 16 == 0): the
 * codes of the same values given as f32; a non-finite row stops the batch
 * with the rows before it written. */
static void check_half(const char *spec, int d, kvq_dtype dt, int scalar, tu_rng *r) {
    enum { N = 77 };
    kvq_plan *p = NULL, *q = NULL;
    CHECK_OK(kvq_plan_create(&q, spec, d, 11, NULL, 0));
    if (!q) return;
    if (scalar) {
        CHECK_OK(kvq_plan_clone_isa(&p, q, KVQ_ISA_SCALAR));
        kvq_plan_free(q);
        if (!p) return;
    } else
        p = q;
    size_t cb = kvq_plan_code_bytes(p);
    uint16_t *h = malloc(N * (size_t)d * sizeof *h);
    float *x = malloc(N * (size_t)d * sizeof *x);
    uint8_t *got = malloc(N * cb), *want = malloc(N * cb);
    for (size_t i = 0; i < N * (size_t)d; i++) {
        float v = (float)tu_gauss(r) * (i % 97 == 0 ? 1e-6f : 1.0f); /* some f16 subnormals */
        h[i] = dt == KVQ_DTYPE_F16 ? kvq_f32_to_f16(v) : kvq_f32_to_bf16(v);
        x[i] = dt == KVQ_DTYPE_F16 ? kvq_f16_to_f32(h[i]) : kvq_bf16_to_f32(h[i]);
    }
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, N, want));
    CHECK_OK(kvq_encode(p, h, dt, N, got));
    CHECK(!memcmp(got, want, N * cb), "%s d=%d dtype=%d: half input codes differ from f32 codes", spec, d, (int)dt);
    h[(size_t)45 * d + 3] = dt == KVQ_DTYPE_F16 ? 0x7c00 : 0x7f80; /* +Inf in row 45 */
    memset(got, 0, N * cb);
    CHECK(kvq_encode(p, h, dt, N, got) == KVQ_ERR_NONFINITE, "%s: Inf row", spec);
    CHECK(!memcmp(got, want, 45 * cb), "%s d=%d: rows before the Inf row", spec, d);
    free(h);
    free(x);
    free(got);
    free(want);
    kvq_plan_free(p);
}

int main(void) {
    tu_rng r = {123};
    static const char *hspecs[] = {"tq-mse:4", "tq-mse:3+scale32", "tq-mse:2", "q8", "polar", "f16", "rvq:2"};
    static const int hdims[] = {128, 64, 96, 40};
    for (size_t i = 0; i < sizeof hspecs / sizeof *hspecs; i++)
        for (size_t j = 0; j < sizeof hdims / sizeof *hdims; j++)
            for (int sc = 0; sc < 2; sc++) {
                check_half(hspecs[i], hdims[j], KVQ_DTYPE_F16, sc, &r);
                check_half(hspecs[i], hdims[j], KVQ_DTYPE_BF16, sc, &r);
            }
    if (kvq_cpu_isa() < KVQ_ISA_AVX512) {
        printf("no AVX-512 on this CPU: the fused encoder is not used\n");
        return tu_finish("test_tq_encode");
    }
    static const int shapes[][2] = {{128, 4}, {128, 3}, {128, 2}, {128, 1}, {64, 4}, {64, 2}, {256, 4}, {256, 3}, {256, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int g = 0; g < 2; g++) {
            check_shape(shapes[i][0], shapes[i][1], g, &r);
            for (int v = 0; v < 3; v++) check_rows(shapes[i][0], shapes[i][1], g, v == 1, v == 2, &r);
        }
    check_batch("tq-mse:4", &r);
    check_batch("tq-mse:2+scale=norm", &r);
    check_batch("tq-mse:3+scale32", &r);
    return tu_finish("test_tq_encode");
}
