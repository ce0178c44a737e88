/*
 * Weight types: dequantization against hand-computed values, the sub-block
 * decomposition against dequantization, every SIMD dot path against the
 * scalar reference on random blocks, activation quantization (SIMD must be
 * bit-identical), and the threaded matrix products.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ggml_types.h"
#include "kvq_engine.h"
#include "kvq.h"
#include "testutil.h"

static const kvq_ggml_type QTYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                   GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                   GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL};
static const kvq_ggml_type FTYPES[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16};
#define NQ (int)(sizeof QTYPES / sizeof QTYPES[0])
#define NF (int)(sizeof FTYPES / sizeof FTYPES[0])

static void put_h(uint8_t *p, float f) { uint16_t h = kvq_f32_to_f16(f); memcpy(p, &h, 2); }

/* Random valid row of type t with n values: random code bytes, finite scales. */
static void random_row(tu_rng *r, kvq_ggml_type t, int64_t n, uint8_t *row) {
    size_t bytes = kvq_ggml_row_bytes(t, n);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)tu_next(r);
    if (t == GGML_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) { float f = (float)tu_gauss(r); memcpy(row + 4 * i, &f, 4); }
        return;
    }
    if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = (float)tu_gauss(r);
            uint16_t h = t == GGML_TYPE_F16 ? kvq_f32_to_f16(f) : kvq_f32_to_bf16(f);
            memcpy(row + 2 * i, &h, 2);
        }
        return;
    }
    int blk = kvq_ggml_type_block(t);
    size_t bb = kvq_ggml_row_bytes(t, blk);
    for (int64_t b = 0; b < n / blk; b++) {
        uint8_t *p = row + b * bb;
        float d = (float)(0.001 + 0.05 * tu_uniform(r)), m = (float)(0.1 * tu_gauss(r));
        switch (t) {
        case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL: put_h(p, d); break;
        case GGML_TYPE_Q3_K: put_h(p + 108, d * 0.02f); break;
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: put_h(p, d); put_h(p + 2, m); break;
        case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: put_h(p, d * 0.1f); put_h(p + 2, d * 0.05f); break;
        case GGML_TYPE_Q6_K: put_h(p + 208, d * 0.02f); break;
        default: break;
        }
    }
}

/* ---- independent decodes of q3_K and iq4_nl, from the layout text ----------- */
/* q3_K super-block (110 bytes: hmask[32] qs[64] scales[12] d), written from
 * the format description rather than from the library's helpers: the 16
 * 6-bit scales are nibbles of bytes 0..7 (low nibbles: scales 0..7, high
 * nibbles: 8..15) completed by the 2-bit fields of bytes 8..11 (field f of
 * byte 8 + i is the top of scale 4f + i); value v's 3rd bit is bit v/32 of
 * hmask[v%32]; its 2 low bits are field (v%128)/32 of qs[32*(v/128) + v%32]. */
static void decode_q3_K(const uint8_t *b, float *y) {
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    uint16_t hd;
    memcpy(&hd, b + 108, 2);
    float d = kvq_f16_to_f32(hd);
    int scale[16];
    for (int i = 0; i < 8; i++) {
        scale[i] = sc[i] & 0x0F;
        scale[i + 8] = sc[i] >> 4;
    }
    for (int i = 0; i < 4; i++)
        for (int f = 0; f < 4; f++) scale[4 * f + i] |= ((sc[8 + i] >> (2 * f)) & 3) << 4;
    for (int v = 0; v < 256; v++) {
        int low = (qs[32 * (v / 128) + v % 32] >> (2 * ((v % 128) / 32))) & 3;
        int high = (hmask[v % 32] >> (v / 32)) & 1;
        y[v] = d * (float)(scale[v / 16] - 32) * (float)(low + 4 * high - 4);
    }
}

/* iq4_nl block (18 bytes: d, qs[16]): the level table written out again. */
static void decode_iq4_nl(const uint8_t *b, float *y) {
    static const int levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    uint16_t hd;
    memcpy(&hd, b, 2);
    float d = kvq_f16_to_f32(hd);
    for (int i = 0; i < 32; i++) y[i] = d * (float)levels[(b[2 + i % 16] >> (4 * (i / 16))) & 0xF];
}

static void test_decode_independent(tu_rng *r) {
    const int64_t n = 1024;
    uint8_t row[1024];
    float y[1024], want[1024];
    int bad3 = 0, badnl = 0;
    for (int it = 0; it < 50; it++) {
        random_row(r, GGML_TYPE_Q3_K, n, row);
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q3_K, row, y, n));
        for (int b = 0; b < n / 256; b++) decode_q3_K(row + 110 * b, want + 256 * b);
        for (int64_t i = 0; i < n; i++) bad3 += y[i] != want[i];
        random_row(r, GGML_TYPE_IQ4_NL, n, row);
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_IQ4_NL, row, y, n));
        for (int b = 0; b < n / 32; b++) decode_iq4_nl(row + 18 * b, want + 32 * b);
        for (int64_t i = 0; i < n; i++) badnl += y[i] != want[i];
    }
    CHECK(bad3 == 0, "q3_K dequant vs independent decode: %d values differ", bad3);
    CHECK(badnl == 0, "iq4_nl dequant vs independent decode: %d values differ", badnl);
    CHECK(kvq_ggml_row_bytes(GGML_TYPE_Q3_K, 512) == 220 && kvq_ggml_row_bytes(GGML_TYPE_IQ4_NL, 576) == 324,
          "q3_K / iq4_nl row bytes");
    CHECK(kvq_ggml_type_supported(GGML_TYPE_Q3_K) && kvq_ggml_type_supported(GGML_TYPE_IQ4_NL) &&
          kvq_ggml_type_uses_q8a(GGML_TYPE_Q3_K) && kvq_ggml_type_uses_q8a(GGML_TYPE_IQ4_NL), "q3_K / iq4_nl supported");
    CHECK(strcmp(kvq_ggml_type_name(GGML_TYPE_Q3_K), "q3_K") == 0 && strcmp(kvq_ggml_type_name(GGML_TYPE_IQ4_NL), "iq4_nl") == 0,
          "names");
}

/* IQ4_NL's extreme levels against full-scale activations: the pair sums
 * 2 * 241 * 127 of an unsigned-code vpmaddubsw would saturate int16; every
 * kernel table must still match the scalar reference. */
static void test_iq4_nl_extremes(void) {
    const int64_t n = 256;
    uint8_t row[8 * 18];
    float x[GGML_MAX_NX * 256];
    size_t rb = kvq_ggml_q8a_row_bytes(n);
    uint8_t *act = malloc(rb * GGML_MAX_NX);
    for (int b = 0; b < 8; b++) {
        put_h(row + 18 * b, 0.01f * (float)(b + 1));
        memset(row + 18 * b + 2, b % 2 ? 0xFF : 0x00, 16); /* level 113 everywhere, or -127 */
    }
    for (int k = 0; k < GGML_MAX_NX; k++) {
        for (int64_t i = 0; i < n; i++) x[k * n + i] = k % 2 ? 1.0f : (i % 64 < 32 ? 1.0f : -1.0f);
        kvq_ggml_quantize_q8a_row(x + k * n, n, act + k * rb);
    }
    float ref[GGML_MAX_NX];
    kvq_ggml_kernels_scalar()->dot[GGML_TYPE_IQ4_NL](n, row, act, rb, GGML_MAX_NX, ref);
    /* exact: sum_b d_b * level_b * 32 * (+-1) with q = +-127, dx = 1/127 */
    double want1 = 0;
    for (int b = 0; b < 8; b++) want1 += (double)kvq_f16_to_f32(kvq_f32_to_f16(0.01f * (float)(b + 1))) * (b % 2 ? 113 : -127) * 32;
    CHECK(fabs(ref[1] - want1) < 1e-4 * fabs(want1), "iq4_nl extremes: scalar %g want %g", ref[1], want1);
    const kvq_ggml_kernels *tabs[8];
    int ntab = kvq_ggml_kernels_all(tabs, 8);
    for (int ti = 1; ti < ntab; ti++) {
        float got[GGML_MAX_NX];
        tabs[ti]->dot[GGML_TYPE_IQ4_NL](n, row, act, rb, GGML_MAX_NX, got);
        double worst = 0;
        for (int k = 0; k < GGML_MAX_NX; k++) {
            double e = fabs(got[k] - ref[k]) / (fabs(ref[k]) + 1e-3);
            if (e > worst) worst = e;
        }
        CHECK(worst < 1e-5, "%s iq4_nl extremes vs scalar rel err %g", tabs[ti]->name, worst);
    }
    free(act);
}

/* ---- hand-computed dequantization ---------------------------------------- */
static void test_dequant_hand(void) {
    float y[256];
    { /* q4_0: d = 0.5, first byte 0x1F: value 0 = low nibble 15 -> 0.5*(15-8), value 16 = high nibble 1 */
        block_q4_0 b;
        memset(&b, 0x88, sizeof b);
        put_h((uint8_t *)&b.d, 0.5f);
        b.qs[0] = 0x1F;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q4_0, &b, y, 32));
        CHECK(y[0] == 3.5f && y[16] == -3.5f && y[1] == 0.0f && y[17] == 0.0f, "q4_0 %g %g %g", y[0], y[16], y[1]);
    }
    { /* q4_1: d = 0.25, m = -1: 0x3A -> 0.25*10-1 = 1.5 and 0.25*3-1 = -0.25 */
        block_q4_1 b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 0.25f);
        put_h((uint8_t *)&b.m, -1.0f);
        b.qs[5] = 0x3A;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q4_1, &b, y, 32));
        CHECK(y[5] == 1.5f && y[21] == -0.25f && y[0] == -1.0f, "q4_1 %g %g", y[5], y[21]);
    }
    { /* q5_0: d = 1; value 3: nibble 2, qh bit 3 set -> 18-16 = 2; value 19: nibble 0, bit 19 clear -> -16 */
        block_q5_0 b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 1.0f);
        b.qs[3] = 0x02;
        b.qh[0] = 0x08;
        b.qh[3] = 0x80; /* bit 31 -> value 31 gets +16 */
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q5_0, &b, y, 32));
        CHECK(y[3] == 2.0f && y[19] == -16.0f && y[31] == 0.0f && y[0] == -16.0f, "q5_0 %g %g %g", y[3], y[19], y[31]);
    }
    { /* q5_1: d = 0.5, m = 1: value 20 = high nibble of qs[4] (7) + bit 20 -> 23*0.5+1 */
        block_q5_1 b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 0.5f);
        put_h((uint8_t *)&b.m, 1.0f);
        b.qs[4] = 0x70;
        b.qh[2] = 0x10;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q5_1, &b, y, 32));
        CHECK(y[20] == 12.5f && y[4] == 1.0f, "q5_1 %g %g", y[20], y[4]);
    }
    { /* q8_0 */
        block_q8_0 b;
        put_h((uint8_t *)&b.d, 0.125f);
        for (int i = 0; i < 32; i++) b.qs[i] = (int8_t)(i * 8 - 128);
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q8_0, &b, y, 32));
        CHECK(y[0] == -16.0f && y[31] == 15.0f, "q8_0 %g %g", y[0], y[31]);
    }
    { /* q4_K: d = 1, dmin = 0.5; sub-block 1: sc 3, m 4 (scales[1], scales[5]);
       * sub-block 5: sc = (scales[9] & 15) | (scales[1] >> 6) << 4 = 2 | 1<<4 = 18,
       *              m = (scales[9] >> 4) | (scales[5] >> 6) << 4 = 1 | 2<<4 = 33 */
        block_q4_K b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 1.0f);
        put_h((uint8_t *)&b.dmin, 0.5f);
        b.scales[1] = 3 | (1 << 6);
        b.scales[5] = 4 | (2 << 6);
        b.scales[9] = 2 | (1 << 4);
        b.qs[0] = 0x70;       /* value 32 (sub-block 1, high nibbles of chunk 0) = 7 */
        b.qs[64 + 3] = 0x90;  /* chunk 2 high nibble -> sub-block 5, value 160+3 = 9 */
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q4_K, &b, y, 256));
        CHECK(y[32] == 3 * 7 - 0.5f * 4, "q4_K sub-block 1: %g", y[32]);
        CHECK(y[163] == 18 * 9 - 0.5f * 33, "q4_K sub-block 5: %g", y[163]);
        CHECK(y[33] == -2.0f && y[0] == 0.0f, "q4_K %g %g", y[33], y[0]);
    }
    { /* q5_K: as q4_K plus the 5th bit: value 32+2 has qh[2] bit 1 */
        block_q5_K b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 1.0f);
        put_h((uint8_t *)&b.dmin, 1.0f);
        b.scales[1] = 2;
        b.scales[5] = 1;
        b.qs[2] = 0x50;
        b.qh[2] = 0x02;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q5_K, &b, y, 256));
        CHECK(y[34] == 2 * (5 + 16) - 1, "q5_K %g", y[34]);
    }
    { /* q6_K: d = 0.5; value 64+17 of half 0: k = 2 -> ql[17] >> 4, (qh[17] >> 4) & 3, scale[4 + 1] */
        block_q6_K b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 0.5f);
        b.ql[17] = 0xA0;
        b.qh[17] = 0x30;
        b.scales[5] = -3;
        b.scales[8] = 2;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q6_K, &b, y, 256));
        int code = 0xA | 3 << 4; /* 58 */
        CHECK(y[81] == 0.5f * -3 * (code - 32), "q6_K %g", y[81]);
        CHECK(y[128] == 0.5f * 2 * -32, "q6_K half 1 %g", y[128]);
    }
    { /* f16 / bf16 */
        uint16_t h[2] = {0x3C00, 0xC000}; /* 1, -2 */
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_F16, h, y, 2));
        CHECK(y[0] == 1.0f && y[1] == -2.0f, "f16");
        uint16_t bf[2] = {0x3F80, 0x4040}; /* 1, 3 */
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_BF16, bf, y, 2));
        CHECK(y[0] == 1.0f && y[1] == 3.0f, "bf16");
    }
    { /* q3_K: d = 0.5; scale 5 = (scales[5] & 15) | ((scales[9] >> 2) & 3) << 4 = 3 | 2 << 4 = 35 -> +3;
       * value 80 (h 0, k 2, l 16: in scale 5): qs[16] bits 4..5 = 1, hmask[16] bit 2 set -> code 5 -> +1;
       * scale 14 = (scales[6] >> 4) | ((scales[10] >> 6) & 3) << 4 = 1 | 0 -> -31;
       * value 230 (h 1, k 3, l 6: scale 14): qs[38] bits 6..7 = 2, hmask[6] bit 7 clear -> code 2 -> -2 */
        block_q3_K b;
        memset(&b, 0, sizeof b);
        put_h((uint8_t *)&b.d, 0.5f);
        b.scales[5] = 3;
        b.scales[9] = 2 << 2;
        b.scales[6] = 1 << 4;
        b.qs[16] = 1 << 4;
        b.hmask[16] = 1 << 2;
        b.qs[32 + 6] = 2 << 6;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q3_K, &b, y, 256));
        CHECK(y[80] == 0.5f * 3 * 1, "q3_K value 80: %g", y[80]);
        CHECK(y[230] == 0.5f * -31 * -2, "q3_K value 230: %g", y[230]);
        CHECK(y[0] == 0.5f * -32 * -4, "q3_K value 0: %g", y[0]); /* scale 0 = 0 -> -32, code 0 -> -4 */
    }
    { /* iq4_nl: d = 0.25; qs[3] = 0xF0: value 3 level[0] = -127, value 19 level[15] = 113 */
        block_iq4_nl b;
        memset(&b, 0x88, sizeof b);
        put_h((uint8_t *)&b.d, 0.25f);
        b.qs[3] = 0xF0;
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_IQ4_NL, &b, y, 32));
        CHECK(y[3] == 0.25f * -127 && y[19] == 0.25f * 113 && y[0] == 0.25f * 1, "iq4_nl %g %g %g", y[3], y[19], y[0]);
    }
    CHECK(kvq_ggml_dequant_row(GGML_TYPE_Q4_K, y, y, 100) == KVQ_ERR_INVALID_ARG, "n not a block multiple");
    CHECK(kvq_ggml_dequant_row(GGML_TYPE_Q2_K, y, y, 256) == KVQ_ERR_UNSUPPORTED, "q2_K unsupported");
    CHECK(kvq_ggml_row_bytes(GGML_TYPE_Q6_K, 512) == 420 && kvq_ggml_row_bytes(GGML_TYPE_Q4_1, 576) == 360, "row bytes");
}

/* ---- decomposition == dequantization --------------------------------------- */
static void test_unpack_vs_dequant(tu_rng *r) {
    const int64_t n = 512;
    uint8_t row[2048];
    float y[512];
    for (int ti = 0; ti < NQ; ti++) {
        kvq_ggml_type t = QTYPES[ti];
        double maxerr = 0;
        for (int it = 0; it < 20; it++) {
            random_row(r, t, n, row);
            CHECK_OK(kvq_ggml_dequant_row(t, row, y, n));
            for (int64_t j = 0; j < n / 32; j++) {
                uint8_t u[32];
                float sc[2], mn[2];
                kvq_ggml_unpack32(t, row, j, u, sc, mn);
                for (int l = 0; l < 32; l++) {
                    double w = (double)sc[l / 16] * u[l] + mn[l / 16];
                    double e = fabs(w - y[32 * j + l]) / (fabs(y[32 * j + l]) + 1e-3);
                    if (e > maxerr) maxerr = e;
                }
            }
        }
        CHECK(maxerr < 1e-5, "%s: unpack32 vs dequant rel err %g", kvq_ggml_type_name((uint32_t)t), maxerr);
    }
}

/* ---- activation quantization --------------------------------------------------- */
static void test_quantize(tu_rng *r) {
    const int64_t n = 1024;
    float *x = malloc(sizeof(float) * n), *xd = malloc(sizeof(float) * n);
    size_t rb = kvq_ggml_q8a_row_bytes(n);
    uint8_t *a = malloc(rb), *b = malloc(rb);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(tu_gauss(r) * (i % 97 == 0 ? 30 : 1));
    for (int i = 0; i < 32; i++) x[64 + i] = 0.0f; /* an all-zero block */
    kvq_ggml_quantize_q8a_row(x, n, a);
    const int8_t *q = (const int8_t *)a;
    const float *d = (const float *)(a + n), *s = d + n / 32, *s0 = s + n / 32;
    double maxe = 0;
    for (int64_t i = 0; i < n; i++) {
        xd[i] = d[i / 32] * q[i];
        double e = fabs(xd[i] - x[i]) / (d[i / 32] + 1e-30);
        if (d[i / 32] > 0 && e > maxe) maxe = e;
    }
    CHECK(maxe <= 0.5 + 1e-4, "q8a rounding error %g steps", maxe);
    CHECK(d[2] == 0.0f && s0[2] == 0.0f && q[70] == 0, "zero block");
    int sum0 = 0;
    for (int l = 0; l < 16; l++) sum0 += q[32 * 5 + l];
    CHECK(fabsf(s0[5] - d[5] * sum0) <= 1e-6f * fabsf(s0[5]) + 1e-12f, "s0");
    int sum = sum0;
    for (int l = 16; l < 32; l++) sum += q[32 * 5 + l];
    CHECK(fabsf(s[5] - d[5] * sum) <= 1e-6f * fabsf(s[5]) + 1e-12f, "s");
    const kvq_ggml_kernels *tabs[8];
    int ntab = kvq_ggml_kernels_all(tabs, 8);
    for (int ti = 1; ti < ntab; ti++) {
        const kvq_ggml_kernels *k = tabs[ti];
        memset(b, 0xAB, rb);
        k->quantize_q8a(x, n, b);
        CHECK(memcmp(a, b, n + 12 * (size_t)(n / 32)) == 0, "%s quantize_q8a not bit-identical to the reference", k->name);
    }
    free(x); free(xd); free(a); free(b);
}

/* ---- dot products ------------------------------------------------------------------ */
/* Reference dot in double on dequantized weights and activations. */
static double dot_deq(kvq_ggml_type t, const uint8_t *row, int64_t n, const float *x, double *absum) {
    float *w = malloc(sizeof(float) * n);
    kvq_ggml_dequant_row(t, row, w, n);
    double s = 0, a = 0;
    for (int64_t i = 0; i < n; i++) { s += (double)w[i] * x[i]; a += fabs((double)w[i] * x[i]); }
    free(w);
    *absum = a;
    return s;
}

static void test_dots(tu_rng *r) {
    /* 544 = 17 blocks (odd count: the 512-bit kernels' tail; not a multiple of 256, so legacy types
     * only); 8448 spans two chunks of the kernels' min buffers */
    const int64_t lens[] = {256, 512, 1536, 2304, 544, 8448};
    uint8_t *row = malloc(kvq_ggml_row_bytes(GGML_TYPE_F32, 8448));
    float *x = malloc(sizeof(float) * GGML_MAX_NX * 8448), *xd = malloc(sizeof(float) * GGML_MAX_NX * 8448);
    size_t rbmax = kvq_ggml_q8a_row_bytes(8448);
    uint8_t *act = malloc(rbmax * GGML_MAX_NX);
    const kvq_ggml_kernels *scalar = kvq_ggml_kernels_scalar();
    for (int li = 0; li < 6; li++) {
        int64_t n = lens[li];
        size_t rb = kvq_ggml_q8a_row_bytes(n);
        for (int ti = 0; ti < NQ + NF; ti++) {
            kvq_ggml_type t = ti < NQ ? QTYPES[ti] : FTYPES[ti - NQ];
            if (n % kvq_ggml_type_block(t)) continue;
            int q8 = kvq_ggml_type_uses_q8a(t);
            double worst_ref = 0, worst_simd[8] = {0};
            const kvq_ggml_kernels *tabs[8];
            int ntab = kvq_ggml_kernels_all(tabs, 8);
            for (int it = 0; it < (n > 4096 ? 3 : 12); it++) {
                random_row(r, t, n, row);
                for (int64_t i = 0; i < GGML_MAX_NX * n; i++) x[i] = (float)(tu_gauss(r) + (i % 5 == 0 ? 0.5 : 0));
                for (int k = 0; k < GGML_MAX_NX; k++) {
                    if (q8) {
                        kvq_ggml_quantize_q8a_row(x + k * n, n, act + k * rb);
                        const int8_t *q = (const int8_t *)(act + k * rb);
                        const float *d = (const float *)(act + k * rb + n);
                        for (int64_t i = 0; i < n; i++) xd[k * n + i] = d[i / 32] * q[i];
                    } else {
                        memcpy(xd + k * n, x + k * n, sizeof(float) * n);
                    }
                }
                const void *a = q8 ? (const void *)act : (const void *)x;
                size_t stride = q8 ? rb : sizeof(float) * (size_t)n;
                float ref[GGML_MAX_NX];
                scalar->dot[t](n, row, a, stride, GGML_MAX_NX, ref);
                for (int k = 0; k < GGML_MAX_NX; k++) {
                    double absum, want = dot_deq(t, row, n, xd + k * n, &absum);
                    double e = fabs(ref[k] - want) / (absum + 1e-30);
                    if (e > worst_ref) worst_ref = e;
                }
                for (int isa = 1; isa < ntab; isa++) {
                    const kvq_ggml_kernels *kk = tabs[isa];
                    for (int nx = 1; nx <= GGML_MAX_NX; nx++) {
                        float got[GGML_MAX_NX];
                        kk->dot[t](n, row, a, stride, nx, got);
                        for (int k = 0; k < nx; k++) {
                            double absum;
                            dot_deq(t, row, n, xd + k * n, &absum);
                            double e = fabs((double)got[k] - ref[k]) / (absum + 1e-30);
                            if (e > worst_simd[isa]) worst_simd[isa] = e;
                        }
                    }
                }
            }
            CHECK(worst_ref < 1e-6, "%s n=%lld: scalar ref vs dequantized dot rel err %g", kvq_ggml_type_name((uint32_t)t),
                  (long long)n, worst_ref);
            for (int isa = 1; isa < ntab; isa++) {
                const kvq_ggml_kernels *kk = tabs[isa];
                CHECK(worst_simd[isa] < 2e-6, "%s %s n=%lld: SIMD vs scalar rel err %g", kk->name, kvq_ggml_type_name((uint32_t)t),
                      (long long)n, worst_simd[isa]);
            }
        }
    }
    free(row); free(x); free(xd); free(act);
}

/* ---- quantized weights x f32 activations ------------------------------------------- */
static void test_dotf(tu_rng *r) {
    const int64_t lens[] = {256, 1536, 544, 8448};
    uint8_t *row = malloc(kvq_ggml_row_bytes(GGML_TYPE_Q8_0, 8448));
    float *x = malloc(sizeof(float) * GGML_MAX_NX * 8448);
    const kvq_ggml_kernels *tabs[8];
    int ntab = kvq_ggml_kernels_all(tabs, 8);
    for (int li = 0; li < 4; li++) {
        int64_t n = lens[li];
        for (int ti = 0; ti < NQ; ti++) {
            kvq_ggml_type t = QTYPES[ti];
            if (n % kvq_ggml_type_block(t)) continue;
            double worst[8] = {0};
            for (int it = 0; it < 4; it++) {
                random_row(r, t, n, row);
                for (int64_t i = 0; i < GGML_MAX_NX * n; i++) x[i] = (float)(tu_gauss(r) * (i % 61 == 0 ? 20 : 1));
                for (int tb = 0; tb < ntab; tb++) {
                    for (int nx = 1; nx <= GGML_MAX_NX; nx += 3) {
                        float got[GGML_MAX_NX];
                        tabs[tb]->dotf[t](n, row, x, sizeof(float) * (size_t)n, nx, got);
                        for (int k = 0; k < nx; k++) {
                            double absum, want = dot_deq(t, row, n, x + k * n, &absum);
                            double e = fabs(got[k] - want) / (absum + 1e-30);
                            if (e > worst[tb]) worst[tb] = e;
                        }
                    }
                }
            }
            for (int tb = 0; tb < ntab; tb++)
                CHECK(worst[tb] < 2e-6, "%s dotf %s n=%lld: rel err %g", tabs[tb]->name, kvq_ggml_type_name((uint32_t)t),
                      (long long)n, worst[tb]);
        }
    }
    free(row);
    free(x);
}

/* ---- row-block kernels (8 weight rows at once) vs the scalar reference ------------- */
static void test_dotr(tu_rng *r) {
    /* nx 1..16; odd block counts, one block, the models' widths (576, 640, 1536, 2048), two min chunks */
    const int64_t lens[] = {32, 64, 96, 256, 544, 576, 640, 1024, 1536, 2048, 2304, 8448};
    const int nl = (int)(sizeof lens / sizeof lens[0]);
    size_t rbw = kvq_ggml_row_bytes(GGML_TYPE_Q8_0, 8448) + 8;
    uint8_t *w = malloc(rbw * GGML_ROWS);
    float *x = malloc(sizeof(float) * 8448);
    uint8_t *act = malloc(kvq_ggml_q8a_row_bytes(8448) * GGML_MAX_NXR);
    const kvq_ggml_kernels *tabs[8];
    int ntab = kvq_ggml_kernels_all(tabs, 8), tested = 0;
    for (int li = 0; li < nl; li++) {
        int64_t n = lens[li];
        size_t rb = kvq_ggml_q8a_row_bytes(n);
        for (int ti = 0; ti < NQ; ti++) {
            kvq_ggml_type t = QTYPES[ti];
            if (n % kvq_ggml_type_block(t)) continue;
            for (int pad = 0; pad <= 6; pad += 6) { /* row stride = row bytes (a matrix), or 6 more (unaligned) */
                size_t ws = kvq_ggml_row_bytes(t, n) + (size_t)pad;
                double worst[8] = {0};
                for (int it = 0; it < (n > 4096 ? 2 : 4); it++) {
                    for (int k = 0; k < GGML_ROWS; k++) random_row(r, t, n, w + (size_t)k * ws);
                    for (int k = 0; k < GGML_MAX_NXR; k++) {
                        for (int64_t i = 0; i < n; i++) x[i] = (float)(tu_gauss(r) * (i % 37 == 0 ? 8 : 1));
                        kvq_ggml_quantize_q8a_row(x, n, act + (size_t)k * rb);
                    }
                    float ref[GGML_ROWS][GGML_MAX_NXR], absum[GGML_ROWS][GGML_MAX_NXR];
                    for (int k = 0; k < GGML_ROWS; k++) {
                        kvq_ggml_kernels_scalar()->dot[t](n, w + (size_t)k * ws, act, rb, GGML_MAX_NXR, ref[k]);
                        for (int a = 0; a < GGML_MAX_NXR; a++) { /* |w| . |x| of the dequantized operands */
                            float *wd = malloc(sizeof(float) * (size_t)n);
                            kvq_ggml_dequant_row(t, w + (size_t)k * ws, wd, n);
                            const int8_t *q = (const int8_t *)(act + (size_t)a * rb);
                            const float *d = (const float *)(act + (size_t)a * rb + n);
                            double s = 0;
                            for (int64_t i = 0; i < n; i++) s += fabs((double)wd[i] * d[i / 32] * q[i]);
                            absum[k][a] = (float)s;
                            free(wd);
                        }
                    }
                    for (int tb = 0; tb < ntab; tb++) {
                        if (!tabs[tb]->dotr[t]) continue;
                        for (int nx = 1; nx <= GGML_MAX_NXR; nx++) {
                            float got[GGML_ROWS * GGML_MAX_NXR];
                            tabs[tb]->dotr[t](n, w, ws, act, rb, nx, got);
                            for (int k = 0; k < GGML_ROWS; k++)
                                for (int a = 0; a < nx; a++) {
                                    double e = fabs((double)got[k * nx + a] - ref[k][a]) / (absum[k][a] + 1e-30);
                                    if (e > worst[tb]) worst[tb] = e;
                                }
                        }
                    }
                }
                for (int tb = 0; tb < ntab; tb++) {
                    if (!tabs[tb]->dotr[t]) continue;
                    tested++;
                    CHECK(worst[tb] < 2e-6, "%s dotr %s n=%lld stride+%d: rel err %g vs scalar", tabs[tb]->name,
                          kvq_ggml_type_name((uint32_t)t), (long long)n, pad, worst[tb]);
                }
            }
        }
    }
    const kvq_ggml_kernels *best = kvq_ggml_kernels_for(KVQ_ISA_BEST);
    if (best->dotr[GGML_TYPE_Q4_1]) CHECK(tested > 0, "dotr kernels tested");
    printf("dotr: %d (table, type, size, stride) cases\n", tested);
    free(w); free(x); free(act);
}

/* ---- matrix products ------------------------------------------------------------------ */
static void test_matmul(tu_rng *r) {
    const int64_t cols = 512, rows[3] = {37, 16, 5};
    const kvq_ggml_type types[3] = {GGML_TYPE_Q4_1, GGML_TYPE_Q6_K, GGML_TYPE_F16};
    uint8_t *wdata[3];
    kvq_ggml_matrix W[3];
    for (int m = 0; m < 3; m++) {
        size_t rb = kvq_ggml_row_bytes(types[m], cols);
        wdata[m] = malloc(rb * (size_t)rows[m]);
        for (int64_t i = 0; i < rows[m]; i++) random_row(r, types[m], cols, wdata[m] + rb * (size_t)i);
        W[m] = (kvq_ggml_matrix){wdata[m], types[m], rows[m], cols, rb, NULL};
    }
    const int64_t ntoks[] = {1, 3, 9, 21}; /* 21: a 16-row tile of the row-block kernels and a 5-row one */
    kvq_pool *pool = NULL;
    CHECK_OK(kvq_pool_create(&pool, 2));
    for (int ni = 0; ni < 4; ni++) {
        int64_t ntok = ntoks[ni];
        float *X = malloc(sizeof(float) * (size_t)(ntok * cols));
        for (int64_t i = 0; i < ntok * cols; i++) X[i] = (float)tu_gauss(r);
        void *q8 = malloc(kvq_ggml_q8a_row_bytes(cols) * (size_t)ntok);
        const kvq_ggml_kernels *tabs[8];
        int ntab = kvq_ggml_kernels_all(tabs, 8);
        for (int ti = 0; ti < ntab; ti++) {
            const kvq_ggml_kernels *k = tabs[ti];
            for (int th = 0; th < 2; th++) {
                float *Y[3];
                int64_t ldy[3];
                const kvq_ggml_matrix *Wp[3] = {&W[0], &W[1], &W[2]};
                for (int m = 0; m < 3; m++) {
                    ldy[m] = rows[m] + 3;
                    Y[m] = calloc((size_t)(ntok * ldy[m]), sizeof(float));
                }
                kvq_ggml_acts A;
                kvq_ggml_acts_init(&A, X, ntok, cols, q8);
                CHECK_OK(kvq_ggml_matmul_multi(k, th ? pool : NULL, Wp, 3, &A, Y, ldy));
                CHECK(A.q8_ready == 1, "quantized once");
                size_t qrb = kvq_ggml_q8a_row_bytes(cols);
                double worst = 0;
                for (int m = 0; m < 3; m++) {
                    for (int64_t t = 0; t < ntok; t++) {
                        const void *act = kvq_ggml_type_uses_q8a(types[m]) ? (const void *)((uint8_t *)q8 + qrb * (size_t)t)
                                                                        : (const void *)(X + t * cols);
                        for (int64_t i = 0; i < rows[m]; i++) {
                            float want;
                            kvq_ggml_kernels_scalar()->dot[types[m]](cols, wdata[m] + W[m].row_bytes * (size_t)i, act, 0, 1,
                                                                 &want);
                            double e = fabs(Y[m][t * ldy[m] + i] - want) / (fabs(want) + 1.0);
                            if (e > worst) worst = e;
                        }
                        CHECK(Y[m][t * ldy[m] + rows[m]] == 0.0f, "ldy padding untouched");
                    }
                    free(Y[m]);
                }
                CHECK(worst < 1e-4, "%s threads=%d ntok=%lld: matmul vs per-row dots %g", k->name, th + 1,
                      (long long)ntok, worst);
                /* f32 activations: every type against the f32 rows */
                for (int m = 0; m < 3; m++) Y[m] = calloc((size_t)(ntok * ldy[m]), sizeof(float));
                kvq_ggml_acts_init(&A, X, ntok, cols, NULL);
                A.f32_only = 1;
                CHECK_OK(kvq_ggml_matmul_multi(k, th ? pool : NULL, Wp, 3, &A, Y, ldy));
                worst = 0;
                for (int m = 0; m < 3; m++) {
                    kvq_ggml_dot_fn ref = kvq_ggml_type_uses_q8a(types[m]) ? kvq_ggml_kernels_scalar()->dotf[types[m]]
                                                                  : kvq_ggml_kernels_scalar()->dot[types[m]];
                    for (int64_t t = 0; t < ntok; t++)
                        for (int64_t i = 0; i < rows[m]; i++) {
                            float want;
                            ref(cols, wdata[m] + W[m].row_bytes * (size_t)i, X + t * cols, 0, 1, &want);
                            double e = fabs(Y[m][t * ldy[m] + i] - want) / (fabs(want) + 1.0);
                            if (e > worst) worst = e;
                        }
                    free(Y[m]);
                }
                CHECK(worst < 1e-4, "%s threads=%d ntok=%lld: f32-activation matmul %g", k->name, th + 1,
                      (long long)ntok, worst);
            }
        }
        /* errors */
        kvq_ggml_acts A;
        kvq_ggml_acts_init(&A, X, ntok, cols + 32, q8);
        float y[64];
        CHECK(kvq_ggml_matmul(kvq_ggml_kernels_scalar(), NULL, &W[0], &A, y, 64) == KVQ_ERR_INVALID_ARG, "cols mismatch");
        kvq_ggml_matrix bad = W[0];
        bad.type = GGML_TYPE_Q2_K;
        kvq_ggml_acts_init(&A, X, ntok, cols, q8);
        CHECK(kvq_ggml_matmul(kvq_ggml_kernels_scalar(), NULL, &bad, &A, y, 64) == KVQ_ERR_UNSUPPORTED, "unsupported type");
        free(X);
        free(q8);
    }
    kvq_pool_free(pool);
    for (int m = 0; m < 3; m++) free(wdata[m]);
}

int main(void) {
    tu_rng r = {42};
    const kvq_ggml_kernels *best = kvq_ggml_kernels_for(KVQ_ISA_BEST);
    printf("best kernels: %s\n", best->name);
    test_dequant_hand();
    test_decode_independent(&r);
    test_iq4_nl_extremes();
    test_unpack_vs_dequant(&r);
    test_quantize(&r);
    test_dots(&r);
    test_dotf(&r);
    test_dotr(&r);
    test_matmul(&r);
    return tu_finish("test_ggml_types");
}
