/*
 * The gap of a codec to the Gaussian rate-distortion bound (issue 13).
 * For a memoryless Gaussian source of variance sigma^2 the distortion-rate
 * function is D(R) = sigma^2 2^(-2R) (Cover & Thomas, Elements of Information
 * Theory, 2nd ed., Thm 10.3.2 / eq. 10.36): no code of R bits per value has
 * a mean squared error below it. With the relative MSE (error energy over
 * signal energy, sigma^2 = 1) at the honest bits per value R (every stored
 * byte, scales included):
 *     gap_dB = 10 log10(rel_mse / 2^(-2R)) = 10 log10(rel_mse) + 20 R log10(2)
 * 0 dB is the bound; each 6.02 dB is one bit per value. Meaningful on
 * Gaussian data (codec-bench --data gauss): for other sources D(R) is lower
 * than the Gaussian one, so the figure is then a lower bound of the gap.
 */
#ifndef KVQ_TOOLS_RD_BOUND_H
#define KVQ_TOOLS_RD_BOUND_H
#include <math.h>

/* Gaussian D(R) = 2^(-2R) at R bits per value. */
static inline double tool_rd_bound(double bits) { return exp2(-2.0 * bits); }

/* 10 log10(rel_mse / D(bits)); -inf for rel_mse = 0, NaN for rel_mse < 0 or NaN. */
static inline double tool_rd_gap_db(double rel_mse, double bits) {
    if (!(rel_mse >= 0)) return NAN;
    if (rel_mse == 0) return -INFINITY;
    return 10.0 * log10(rel_mse) + 20.0 * bits * log10(2.0);
}
#endif
