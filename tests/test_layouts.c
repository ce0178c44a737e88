/* Record layouts (src/codec/layouts.h, shared with the CUDA backend) against
 * the codec: record sizes equal kvq_plan_code_bytes (every method), field offsets hold what
 * the encoder wrote (scales, strided indices, QJL signs), and the plan export
 * names the right tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/layouts.h"
#include "codec/plan_export.h"
#include "testutil.h"

static float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kvq_f16_to_f32(h);
}

static void check_spec(const char *spec, int d) {
    kvq_plan *p;
    int rc = kvq_plan_create(&p, spec, d, 7, NULL, 0);
    CHECK(rc == 0, "%s d=%d: %s", spec, d, kvq_strerror(rc));
    if (rc) return;
    kvq_plan_tables t;
    CHECK_OK(kvq_plan_export(p, &t));
    CHECK(t.kind != KVQ_LAY_NONE, "%s exported as unsupported", spec);
    kvq_layout L = kvq_layout_make(t.kind, d, t.bits, t.m, t.scale_bytes);
    CHECK((size_t)L.bytes == kvq_plan_code_bytes(p), "%s d=%d: layout %d bytes, plan %zu", spec, d, L.bytes,
          kvq_plan_code_bytes(p));
    CHECK(t.code_bytes == kvq_plan_code_bytes(p), "%s export code_bytes", spec);
    int sum = 0;
    for (int f = 0; f < L.nfield; f++) {
        CHECK(L.off[f] == sum, "%s field %d offset", spec, f);
        sum += L.size[f];
    }
    /* encode one Gaussian row and read its fields back through the layout */
    tu_rng r = {(uint64_t)d * 31 + (uint64_t)strlen(spec)};
    float x[KVQ_DIM_MAX], y[KVQ_DIM_MAX];
    for (int i = 0; i < d; i++) x[i] = (float)tu_gauss(&r);
    uint8_t rec[4096];
    CHECK_OK(kvq_encode(p, x, KVQ_DTYPE_F32, 1, rec));
    if (t.kind == KVQ_LAY_TQ || t.kind == KVQ_LAY_RVQ || t.kind == KVQ_LAY_TQPROD) {
        /* decode by hand: scale * c1[idx] (+ s2 * c2[idx2] for rvq) in the rotated domain */
        int fi = t.kind == KVQ_LAY_RVQ ? KVQ_RVQ_IDX1 : KVQ_TQ_IDX;
        uint8_t idx[KVQ_DIM_MAX], idx2[KVQ_DIM_MAX];
        strided_unpack(rec + L.off[fi], d, t.bits, idx);
        if (t.kind == KVQ_LAY_RVQ) strided_unpack(rec + L.off[KVQ_RVQ_IDX2], d, t.bits, idx2);
        /* the same unpacking through kvq_strided_width */
        for (int c = 0; c < d; c++) {
            int v = 0, shift = 0;
            const uint8_t *base = rec + L.off[fi];
            for (int f = 0; f < 3 && kvq_strided_width(t.bits, f); f++) {
                int w = kvq_strided_width(t.bits, f), S = d * w / 8;
                v |= ((base[c % S] >> ((c / S) * w)) & ((1 << w) - 1)) << shift;
                base += S;
                shift += w;
            }
            CHECK(v == idx[c], "%s strided width walk c=%d", spec, c);
        }
        float g = t.scale_bytes == 2 ? f16_at(rec) : 0;
        if (t.scale_bytes == 4) memcpy(&g, rec, 4);
        if (t.kind != KVQ_LAY_TQPROD) {
            float g2 = t.kind == KVQ_LAY_RVQ ? (t.scale_bytes == 2 ? f16_at(rec + L.off[KVQ_RVQ_S2]) : 0) : 0;
            if (t.kind == KVQ_LAY_RVQ && t.scale_bytes == 4) memcpy(&g2, rec + L.off[KVQ_RVQ_S2], 4);
            float z[KVQ_DIM_MAX];
            p->decode(p, rec, z);
            double err = 0;
            for (int c = 0; c < d; c++) {
                y[c] = g * t.c1[idx[c]] + (t.kind == KVQ_LAY_RVQ ? g2 * t.c2[idx2[c]] : 0.0f);
                err = fmax(err, fabs(y[c] - z[c]));
            }
            CHECK(err < 1e-5, "%s manual decode differs by %g", spec, err);
        }
    }
    if (t.kind == KVQ_LAY_QJL || t.kind == KVQ_LAY_TQPROD) {
        CHECK(t.S != NULL && t.m > 0, "%s QJL matrix", spec);
        if (t.kind == KVQ_LAY_QJL) {
            double ss = 0;
            for (int i = 0; i < d; i++) ss += (double)x[i] * x[i];
            CHECK(fabs(f16_at(rec + L.off[KVQ_QJL_NORM]) - sqrt(ss)) < 2e-3 * sqrt(ss), "%s norm field", spec);
            for (int j = 0; j < t.m; j++) {
                float s = 0;
                for (int c = 0; c < d; c++) s += t.S[(size_t)j * d + c] * x[c];
                int bit = (rec[L.off[KVQ_QJL_SIGNS] + j / 8] >> (j % 8)) & 1;
                if (fabsf(s) > 1e-3f) CHECK(bit == (s >= 0), "%s sign bit %d", spec, j);
            }
        }
    }
    if (t.kind == KVQ_LAY_Q8) {
        float z[KVQ_DIM_MAX];
        p->decode(p, rec, z);
        for (int c = 0; c < d; c++) {
            float s = f16_at(rec + L.off[KVQ_Q8_SCALES] + 2 * (c / KVQ_Q8_BLOCK));
            int8_t q = (int8_t)rec[L.off[KVQ_Q8_VALS] + c];
            CHECK(z[c] == s * q, "%s q8 field walk c=%d", spec, c);
        }
    }
    if (t.kind == KVQ_LAY_F16) CHECK(f16_at(rec + 2 * (d - 1)) == kvq_f16_to_f32(kvq_f32_to_f16(x[d - 1])), "f16");
    if (t.rot == 1) CHECK(t.signs != NULL, "%s signs", spec);
    kvq_plan_free(p);
}

int main(void) {
    static const char *specs[] = {"f16",       "q8",        "tq-mse:1",  "tq-mse:2",     "tq-mse:3",
                                  "tq-mse:4",  "tq-mse:5",  "tq-mse:8",  "tq-mse:4+scale32", "tq-prod:2",
                                  "tq-prod:3", "tq-prod:5", "tq-prod:3+m=64", "qjl",     "qjl:256",
                                  "rvq:1",     "rvq:2",     "rvq:3",     "rvq:4",        "rvq:2+scale32"};
    static const int dims[] = {32, 64, 96, 128, 256, 512};
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++)
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) check_spec(specs[s], dims[i]);
    /* host-only records (the CUDA backend serves none) are exported as KVQ_LAY_NONE; their sizes are the
     * layouts' too, and the polar angle stream is the sum of its levels' fields */
    static const char *other[] = {"f32", "bf16", "q4", "polar", "polar:3", "polar:5", "polar:8", "polar+scale32"};
    static const int okind[] = {KVQ_LAY_F32, KVQ_LAY_BF16, KVQ_LAY_Q4, KVQ_LAY_POLAR, KVQ_LAY_POLAR, KVQ_LAY_POLAR,
                                KVQ_LAY_POLAR, KVQ_LAY_POLAR};
    for (size_t s = 0; s < sizeof other / sizeof *other; s++)
        for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
            const int d = dims[i];
            kvq_plan *p;
            CHECK_OK(kvq_plan_create(&p, other[s], d, 1, NULL, 0));
            kvq_plan_tables t;
            CHECK_OK(kvq_plan_export(p, &t));
            CHECK(t.kind == KVQ_LAY_NONE, "%s should be KVQ_LAY_NONE", other[s]);
            CHECK(p->rec.kind == okind[s] && (size_t)p->rec.bytes == kvq_plan_code_bytes(p), "%s d=%d record %d bytes",
                  other[s], d, p->rec.bytes);
            if (okind[s] == KVQ_LAY_POLAR) {
                const int L = kvq_polar_levels(d), B = p->bits, sb = p->o.scale32 ? 4 : 2;
                int bits = 0;
                for (int l = 1; l <= L; l++) bits += (d >> l) * (l == 1 ? B : B - 2);
                CHECK(L == (d % 16 == 0 ? 4 : 3) && p->rec.size[KVQ_POLAR_RADII] == (d >> L) * sb &&
                          p->rec.size[KVQ_POLAR_ANGLES] == (bits + 7) / 8,
                      "%s d=%d polar fields", other[s], d);
            }
            kvq_plan_free(p);
        }
    /* wrappers: +center keeps the inner records, +outliers adds 2 + K bytes */
    {
        float cal[8 * 128];
        tu_rng r = {3};
        for (int i = 0; i < 8 * 128; i++) cal[i] = (float)tu_gauss(&r);
        kvq_plan *a, *b, *c;
        CHECK_OK(kvq_plan_create(&a, "tq-mse:3", 128, 1, NULL, 0));
        CHECK_OK(kvq_plan_create(&b, "tq-mse:3+center", 128, 1, cal, 8));
        CHECK_OK(kvq_plan_create(&c, "tq-mse:3+outliers=8", 128, 1, cal, 8));
        CHECK(b->rec.kind == KVQ_LAY_TQ && kvq_plan_code_bytes(b) == kvq_plan_code_bytes(a), "+center record");
        CHECK(c->rec.kind == KVQ_LAY_NONE && kvq_plan_code_bytes(c) == (size_t)kvq_outliers_bytes(c->inner->rec.bytes, 8) &&
                  c->inner->rec.bytes == kvq_layout_make(KVQ_LAY_TQ, 120, 3, 0, 2).bytes,
              "+outliers record");
        /* the export of a calibrated plan: the inner plan's tables with the mean and scales; +outliers: none */
        kvq_plan_tables ta, tb, tc;
        CHECK_OK(kvq_plan_export(a, &ta));
        CHECK_OK(kvq_plan_export(b, &tb));
        CHECK_OK(kvq_plan_export(c, &tc));
        CHECK(tb.kind == KVQ_LAY_TQ && tb.bits == 3 && tb.rot == ta.rot && tb.n1 == ta.n1 && tb.code_bytes == ta.code_bytes &&
                  !memcmp(tb.signs, ta.signs, 2 * 128 * sizeof(float)) && !memcmp(tb.c1, ta.c1, (size_t)ta.n1 * sizeof(float)) &&
                  tb.mu == b->mu && !tb.chscale && !ta.mu,
              "+center export");
        CHECK(tc.kind == KVQ_LAY_NONE && !tc.mu, "+outliers export");
        kvq_plan *e;
        CHECK_OK(kvq_plan_create(&e, "q8+chscale", 128, 1, cal, 8));
        kvq_plan_tables te;
        CHECK_OK(kvq_plan_export(e, &te));
        CHECK(te.kind == KVQ_LAY_Q8 && te.chscale && te.mu == e->mu && te.code_bytes == kvq_plan_code_bytes(e), "+chscale export");
        kvq_plan_free(a), kvq_plan_free(b), kvq_plan_free(c), kvq_plan_free(e);
    }
    CHECK(kvq_strided_width(3, 0) == 2 && kvq_strided_width(3, 1) == 1 && kvq_strided_width(3, 2) == 0, "w3");
    CHECK(kvq_strided_width(7, 2) == 1 && kvq_strided_width(8, 1) == 4 && kvq_strided_width(8, 2) == 0, "w7/8");
    return tu_finish("test_layouts");
}
