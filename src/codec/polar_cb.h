/*
 * Codebooks of PolarQuant's angles (m_polar.c) and a generic Lloyd-Max
 * solver for any density given as a function on a bounded interval.
 */
#ifndef KVQ_POLAR_CB_H
#define KVQ_POLAR_CB_H

#include "codec_internal.h"

/* Unnormalised density on [lo, hi] (must be finite and >= 0 there). */
typedef double (*kvq_pdf_fn)(double x, void *ctx);

/*
 * Lloyd-Max quantizer of 2^bits levels (bits 1..8) for the density pdf on
 * [lo, hi]: boundaries t_i = (c_i + c_{i+1})/2, centroids
 * c_i = E[X | t_{i-1} < X <= t_i], iterated from equal-mass cells until no
 * centroid moves by more than 1e-12 (hi - lo). Mass, first and second
 * moments are integrated with Simpson's rule on a grid of cells plus an exact
 * Simpson step on the partial cell, so the result does not depend on an
 * interpolation. cb->mse is E[(X - Q(X))^2] under the normalised density,
 * cb->t[n-1] = +inf. KVQ_ERR_INVALID_ARG for an empty interval or a density
 * with no mass, KVQ_ERR_NOMEM if the tables cannot be allocated.
 */
int lloyd_max_solve_fn(kvq_codebook *cb, kvq_pdf_fn pdf, void *ctx, double lo, double hi, int bits);

/*
 * Density of a level-l angle of the recursive polar transform of a Gaussian
 * vector (l >= 2): the angle psi = atan(r2/r1) in [0, pi/2] between two norms
 * of n = 2^(l-1) iid N(0,1) coordinates each (two chi_n variables) has
 * f(psi) ∝ cos^(n-1)(psi) sin^(n-1)(psi) ∝ sin^(n-1)(2 psi).
 * ctx points to an int holding the exponent n - 1.
 */
double polar_angle_pdf(double psi, void *ctx);

/*
 * Angle codebook of level `level` (1 <= level <= 8) with `bits` bits:
 * level 1 is uniform on [0, 2pi) (cells [2pi i/n, 2pi (i+1)/n), centroids at
 * their middles: the Lloyd-Max quantizer of a uniform density); level l >= 2
 * is Lloyd-Max for polar_angle_pdf with exponent 2^(l-1) - 1 on [0, pi/2].
 */
int polar_angle_codebook(kvq_codebook *cb, int level, int bits);

#endif
