/* Codec building blocks: Lloyd-Max tables (DESIGN.md §2), bit packing,
 * rotations, f16/bf16 conversion. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "cpu.h"
#include "testutil.h"

static void test_lloyd_max_tables(void) {
    /* Max (1960), N(0,1): positive centroids and MSE */
    static const double gc[5][8] = {{0}, {0.7979}, {0.4528, 1.5104}, {0.2451, 0.7560, 1.3440, 2.1520},
                                    {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326}};
    static const double gmse[5] = {0, 0.3634, 0.1175, 0.03454, 0.009497};
    for (int b = 1; b <= 4; b++) {
        kvq_codebook cb;
        CHECK_OK(lloyd_max_solve(&cb, DENS_GAUSS, b, 0));
        int half = cb.n / 2;
        for (int i = 0; i < half; i++) {
            CHECK(fabs(cb.c[half + i] - gc[b][i]) < 1e-3, "gauss b=%d c[%d]=%.5f want %.4f", b, i, cb.c[half + i], gc[b][i]);
            CHECK(fabsf(cb.c[half + i] + cb.c[half - 1 - i]) < 1e-6f, "symmetry b=%d", b);
        }
        CHECK(fabs(cb.mse - gmse[b]) < 1e-3 * fmax(1, gmse[b]) && fabs(cb.mse / gmse[b] - 1) < 2e-3,
              "gauss b=%d mse %.6f want %.6f", b, cb.mse, gmse[b]);
        for (int i = 0; i + 1 < cb.n; i++) CHECK(cb.c[i] < cb.c[i + 1] && cb.t[i] > cb.c[i] && cb.t[i] < cb.c[i + 1], "order");
    }
    kvq_codebook cb;
    CHECK_OK(lloyd_max_solve(&cb, DENS_LAPLACE, 1, 0));
    CHECK(fabs(cb.c[1] - 0.7071) < 1e-3 && fabs(cb.mse - 0.5) < 1e-3, "laplace b=1 c=%.5f mse=%.5f", cb.c[1], cb.mse);
    CHECK_OK(lloyd_max_solve(&cb, DENS_LAPLACE, 2, 0));
    CHECK(fabs(cb.c[2] - 0.4198) < 1e-3 && fabs(cb.c[3] - 1.8340) < 1e-3 && fabs(cb.mse - 0.1762) < 1e-3,
          "laplace b=2 %.5f %.5f mse %.5f", cb.c[2], cb.c[3], cb.mse);
    /* sphere density tends to the Gaussian as d grows; at d = 4096 within 1e-3 */
    kvq_codebook g;
    lloyd_max_solve(&g, DENS_GAUSS, 3, 0);
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, 3, 4096));
    for (int i = 0; i < 8; i++) CHECK(fabsf(cb.c[i] - g.c[i]) < 1e-3f, "sphere->gauss c[%d] %.5f %.5f", i, cb.c[i], g.c[i]);
    /* at d = 32 it differs (lighter tails): the outer centroid is smaller */
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, 3, 32));
    CHECK(cb.c[7] < g.c[7] - 0.02f, "sphere d=32 outer centroid %.4f vs gauss %.4f", cb.c[7], g.c[7]);
    /* centroid condition: each centroid is the mean of its cell (sampled check) */
    CHECK(lloyd_max_solve(&cb, DENS_GAUSS, 0, 0) == KVQ_ERR_BITS_RANGE, "bits 0");
    CHECK(lloyd_max_solve(&cb, DENS_GAUSS, 9, 0) == KVQ_ERR_BITS_RANGE, "bits 9");
    /* 8-bit tables converge and stay ordered */
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, 8, 128));
    for (int i = 0; i + 1 < cb.n; i++) CHECK(cb.c[i] < cb.c[i + 1], "8-bit order at %d", i);
}

static void test_quantize_nearest(void) {
    tu_rng r = {5};
    for (int b = 1; b <= 8; b++) {
        kvq_codebook cb;
        lloyd_max_solve(&cb, DENS_GAUSS, b, 0);
        for (int t = 0; t < 20000; t++) {
            float x = (float)(tu_gauss(&r) * 1.5);
            int q = cb_quantize(&cb, x), best = 0;
            for (int i = 1; i < cb.n; i++)
                if (fabsf(x - cb.c[i]) < fabsf(x - cb.c[best])) best = i;
            if (q != best && fabsf(fabsf(x - cb.c[q]) - fabsf(x - cb.c[best])) > 1e-6f) {
                CHECK(0, "b=%d x=%g q=%d nearest=%d", b, x, q, best);
                break;
            }
        }
        CHECK(cb_quantize(&cb, -1e30f) == 0 && cb_quantize(&cb, 1e30f) == cb.n - 1, "extremes b=%d", b);
    }
}

static void test_bitpack(void) {
    tu_rng r = {9};
    uint8_t idx[1031], back[1031], buf[1100];
    for (int b = 1; b <= 8; b++)
        for (size_t n = 0; n <= 1031; n += (n < 40 ? 1 : 97)) {
            for (size_t i = 0; i < n; i++) idx[i] = (uint8_t)(tu_next(&r) & ((1u << b) - 1));
            memset(buf, 0xAB, sizeof buf);
            bits_pack(idx, n, b, buf);
            CHECK(bits_bytes(n, b) == (n * b + 7) / 8, "bytes");
            CHECK(n == 0 || buf[bits_bytes(n, b)] == 0xAB, "pack wrote past its end b=%d n=%zu", b, n);
            bits_unpack(buf, n, b, back);
            CHECK(!memcmp(idx, back, n), "bits round trip b=%d n=%zu", b, n);
        }
    for (int d = 32; d <= 512; d += 8)
        for (int b = 1; b <= 8; b++) {
            for (int i = 0; i < d; i++) idx[i] = (uint8_t)(tu_next(&r) & ((1u << b) - 1));
            memset(buf, 0xCD, sizeof buf);
            strided_pack(idx, d, b, buf);
            CHECK(buf[d * b / 8] == 0xCD, "strided wrote past d*b/8 d=%d b=%d", d, b);
            strided_unpack(buf, d, b, back);
            CHECK(!memcmp(idx, back, (size_t)d), "strided round trip d=%d b=%d", d, b);
        }
}

static void test_rotation(void) {
    static const int dims[] = {32, 64, 80, 96, 112, 128, 200, 256, 512};
    tu_rng r = {11};
    for (size_t k = 0; k < sizeof dims / sizeof *dims; k++) {
        int d = dims[k];
        for (int isa = KVQ_ISA_SCALAR; isa <= (int)kvq_cpu_isa(); isa++) {
            kvq_rotation rot;
            CHECK_OK(rot_init(&rot, d, 42, 1, (kvq_isa)isa));
            /* orthogonality: R e_i are orthonormal */
            float *m = malloc((size_t)d * d * sizeof *m);
            for (int i = 0; i < d; i++) {
                float e[KVQ_DIM_MAX] = {0};
                e[i] = 1;
                rot_apply(&rot, e, m + (size_t)i * d);
            }
            double worst = 0;
            for (int i = 0; i < d; i++)
                for (int j = i; j < d; j++) {
                    double s = 0;
                    for (int c = 0; c < d; c++) s += (double)m[(size_t)i * d + c] * m[(size_t)j * d + c];
                    worst = fmax(worst, fabs(s - (i == j)));
                }
            CHECK(worst < 1e-5, "d=%d isa=%d orthogonality error %.3g", d, isa, worst);
            float x[KVQ_DIM_MAX], y[KVQ_DIM_MAX], z[KVQ_DIM_MAX];
            for (int i = 0; i < d; i++) x[i] = (float)tu_gauss(&r);
            rot_apply(&rot, x, y);
            rot_apply_inv(&rot, y, z);
            double e = 0;
            for (int i = 0; i < d; i++) e = fmax(e, fabs(z[i] - x[i]));
            CHECK(e < 1e-5, "d=%d inverse error %.3g", d, e);
            rot_apply(&rot, x, x); /* in place */
            for (int i = 0; i < d; i++) e = fmax(e, fabs(x[i] - y[i]));
            CHECK(e < 1e-5, "d=%d in-place", d);
            free(m);
            rot_free(&rot);
        }
    }
    /* FWHT SIMD = reference */
    for (int n = 8; n <= 512; n *= 2) {
        float a[512], b[512], c[512];
        for (int i = 0; i < n; i++) a[i] = b[i] = c[i] = (float)tu_gauss(&r);
        fwht_ref(a, n);
        if (kvq_cpu_isa() >= KVQ_ISA_AVX2) {
            fwht_avx2(b, n);
            for (int i = 0; i < n; i++) CHECK(fabsf(a[i] - b[i]) < 1e-4f, "fwht avx2 n=%d", n);
        }
        if (kvq_cpu_isa() >= KVQ_ISA_AVX512) {
            fwht_avx512(c, n);
            for (int i = 0; i < n; i++) CHECK(fabsf(a[i] - c[i]) < 1e-4f, "fwht avx512 n=%d", n);
        }
    }
}

static void test_half(void) {
    /* exhaustive f16 -> f32 -> f16 round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvq_f16_to_f32((uint16_t)h);
        uint16_t back = kvq_f32_to_f16(f);
        if (((h & 0x7c00) == 0x7c00) && (h & 0x3ff)) { CHECK((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "nan"); continue; }
        if (back != h) { CHECK(0, "f16 round trip %04x -> %g -> %04x", h, f, back); break; }
    }
    CHECK(kvq_f32_to_f16(65520.0f) == 0x7c00, "overflow to inf");
    CHECK(kvq_f32_to_f16(65519.0f) == 0x7bff, "max finite");
    CHECK(kvq_f32_to_f16(5.960464477539063e-08f) == 1, "smallest subnormal");
    CHECK(kvq_f32_to_f16(2.98023223876953125e-08f) == 0, "half of smallest subnormal rounds to even (0)");
    CHECK(kvq_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "tie to even (down)");
    CHECK(kvq_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "tie to even (up)");
    CHECK(kvq_f32_to_bf16(1.0f) == 0x3f80 && kvq_bf16_to_f32(0x3f80) == 1.0f, "bf16 one");
    CHECK(kvq_f32_to_bf16(3.0e38f) == 0x7f62, "bf16 large");
}

int main(void) {
    test_lloyd_max_tables();
    test_quantize_nearest();
    test_bitpack();
    test_rotation();
    test_half();
    return tu_finish("test_codec_pieces");
}
