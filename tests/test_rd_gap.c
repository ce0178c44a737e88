/*
 * The figure codec-bench reports as rd_gap_db (tools/rd_bound.h): the gap of
 * a relative MSE to the Gaussian bound D(R) = 2^(-2R) in dB. Pinned by:
 *   - the bound itself is 0 dB, twice the bound 3.0103 dB, one bit 6.0206 dB;
 *   - a synthetic case with a closed form: the 1-bit Lloyd-Max quantizer of
 *     N(0,1) (levels +-sqrt(2/pi), MSE 1 - 2/pi; Max 1960) is
 *     10 log10((1 - 2/pi) / 0.25) = 1.6242 dB above D(1), from the closed
 *     form, from lloyd_max_solve's table and measured on Gaussian samples.
 */
#include <math.h>

#include "codec/codec_internal.h"
#include "rd_bound.h"
#include "testutil.h"

static void test_definition(void) {
    const double R[] = {1.0, 2.0, 3.0, 4.25, 8.5};
    for (int i = 0; i < 5; i++) {
        double D = tool_rd_bound(R[i]);
        CHECK(fabs(D - pow(2.0, -2 * R[i])) <= 1e-15 * D, "D(%g)", R[i]);
        CHECK(fabs(tool_rd_gap_db(D, R[i])) < 1e-9, "bound at %g: %g dB", R[i], tool_rd_gap_db(D, R[i]));
        CHECK(fabs(tool_rd_gap_db(2 * D, R[i]) - 10 * log10(2.0)) < 1e-9, "2 D at %g", R[i]);
        /* the same MSE one bit lower is 6.02 dB closer */
        CHECK(fabs(tool_rd_gap_db(D, R[i]) - tool_rd_gap_db(D, R[i] - 1) - 20 * log10(2.0)) < 1e-9, "one bit");
    }
    /* the anchors: tq-mse:4 at d = 64 (0.0089 at 4.25 bits) is 5.08 dB above */
    CHECK(fabs(tool_rd_gap_db(0.0089, 4.25) - 5.0814) < 1e-3, "anchor %g", tool_rd_gap_db(0.0089, 4.25));
    CHECK(isinf(tool_rd_gap_db(0, 4)) && tool_rd_gap_db(0, 4) < 0, "mse 0: -inf");
    CHECK(isnan(tool_rd_gap_db(-1, 4)) && isnan(tool_rd_gap_db(NAN, 4)), "mse < 0 or NaN: NaN");
}

static void test_one_bit_lloyd_max(void) {
    const double mse = 1 - 2 / M_PI, want = 10 * log10(mse / 0.25);
    CHECK(fabs(want - 1.6242) < 1e-4, "closed form %g", want);
    kvq_codebook cb;
    CHECK_OK(lloyd_max_solve(&cb, DENS_GAUSS, 1, 0));
    CHECK(fabs(tool_rd_gap_db(cb.mse, 1) - want) < 1e-6, "table %g vs %g", tool_rd_gap_db(cb.mse, 1), want);
    /* relative MSE as codec-bench measures it: mean over vectors of |x - q|^2 / |x|^2 */
    tu_rng r = {13};
    const int d = 128, n = 4000;
    const double c = sqrt(2 / M_PI);
    double rel = 0;
    for (int i = 0; i < n; i++) {
        double xx = 0, ee = 0;
        for (int j = 0; j < d; j++) {
            double x = tu_gauss(&r), q = x >= 0 ? c : -c;
            xx += x * x;
            ee += (x - q) * (x - q);
        }
        rel += ee / xx;
    }
    rel /= n;
    /* 512k samples: the estimate is within ~0.3% (0.015 dB) */
    CHECK(fabs(tool_rd_gap_db(rel, 1) - want) < 0.03, "measured %g dB vs %g", tool_rd_gap_db(rel, 1), want);
}

int main(void) {
    test_definition();
    test_one_bit_lloyd_max();
    return tu_finish("test_rd_gap");
}
