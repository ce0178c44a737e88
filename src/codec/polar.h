/*
 * PolarQuant internals shared by the method (m_polar.c: plan set-up, tables,
 * the choice of kernels), its scalar references (polar_ref.c: transform,
 * encoder, decode, scores) and its x86 kernels (polar_kernels_x86.c: AVX2;
 * polar_fast_x86.c: AVX-512 VBMI / VNNI), which call the references and
 * nothing else of the family. The maths is described at the top of
 * m_polar.c.
 */
#ifndef KVQ_POLAR_H
#define KVQ_POLAR_H
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "codec_internal.h"
#include "cpu.h" /* KVQ_X86 */

#define POLAR_LEVELS KVQ_POLAR_MAX_LEVELS /* 4 (layouts.h) */
#define POLAR_NMAX 256 /* 2^8 centroids at most */

typedef struct {
    int L;              /* levels */
    int m;              /* final radii: d >> L */
    int b[POLAR_LEVELS + 1];   /* bits per level (1-based) */
    int off[POLAR_LEVELS + 1]; /* first angle of level l in the angle order */
    size_t ang_bytes;   /* bytes of the angle bitstream */
    size_t bitoff[POLAR_LEVELS + 1]; /* first bit of level l in the bitstream */
    kvq_codebook cb[POLAR_LEVELS + 1];
    float cosc[POLAR_LEVELS + 1][POLAR_NMAX], sinc[POLAR_LEVELS + 1][POLAR_NMAX];
    /* level 1: tan(2πj/n1), j = 1 .. n1/4 - 1 (boundaries inside a quadrant);
     * levels >= 2: tan t_j of the n - 1 codebook boundaries */
    float tant[POLAR_LEVELS + 1][POLAR_NMAX];
    /* 8-bit scores (L = 4, B <= 4; see "Scores" above): g8[f][k4' | k3' << w |
     * k2 << 2w] (w = B - 2; period 2^3w up to 64 entries) and the level-1
     * tables repeated to 16 entries */
    int i8;
    uint8_t g8[2][64];
    /* per block: byte and shift of its level-2, 3, 4 fields in the angle stream (none straddles a byte) */
    uint16_t fo[KVQ_DIM_MAX / 16][3];
    uint8_t fs[KVQ_DIM_MAX / 16][3];
    float c16[16], s16[16];
    struct polar_fast *fast; /* AVX-512 VBMI score / accumulate tables, or NULL */
} polar_priv;

/* The angle cells of the encoder (polar_ref.c, "Quantization of the angles"),
 * in float, the same operations for the scalar and the SIMD tails.
 * Level 1: (a, b) turned into the first quadrant (swaps and negations), then
 * the boundaries 2πj/n1 below it counted: floor(θ·n1/2π) without atan2. */
static inline int polar_cell1(const polar_priv *P, float a, float b) {
    const int qn = (1 << P->b[1]) / 4;
    /* θ ∈ [π, 2π): turn by π; then θ ∈ [π/2, π): turn by -π/2 */
    const int lo = (b < 0) | ((b == 0) & (a < 0));
    const float a1 = lo ? -a : a, b1 = lo ? -b : b;
    const int up = (a1 <= 0) & (b1 > 0);
    const float ap = up ? b1 : a1, bp = up ? -a1 : b1;
    int k = (2 * lo + up) * qn;
    for (int j = 0; j < qn - 1; j++) k += bp >= ap * P->tant[1][j];
    return k;
}
/* Level l >= 2 (radii a, b >= 0): ψ > t_j <=> b > a·tan t_j, counted. */
static inline int polar_cell(const polar_priv *P, int l, float a, float b) {
    int k = 0;
    for (int j = 0; j < P->cb[l].n - 1; j++) k += b > a * P->tant[l][j];
    return k;
}
static inline float polar_radius(float a, float b) { return sqrtf(a * a + b * b); }

/* Prepared rows of the 8-bit scores (P->i8): [q~: d floats][c, 15 zeros][T8: 8d bytes] (polar_ref.c). */
#define POLAR_I8_QF(d) (3 * (size_t)(d) + 16)

/* The scalar references (polar_ref.c), the kernels of a plan without SIMD. */
int polar_encode_ref(const kvq_plan *p, const float *x, uint8_t *code);
void polar_decode_ref(const kvq_plan *p, const uint8_t *code, float *y);
void polar_score_ref(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores);
void polar_accum_ref(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc);
/* Prepared row of the 8-bit scores (P->i8, POLAR_I8_QF(d) floats) and the 8-bit score reference. */
void polar_prep_i8_ref(const kvq_plan *p, const float *q, float *qp);
void polar_score_i8(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores);
/* Radii (exact or least-squares) and the angle bitstream of one record from
 * the rotated row y, its angle indices and final radii. */
int polar_finish(const kvq_plan *p, const float *y, const uint8_t *idx, const float *rfin, uint8_t *code);

#if KVQ_X86
/* Sets the AVX2 kernels (isa >= AVX2; polar_kernels_x86.c). */
void polar_select_x86(kvq_plan *p);
/* AVX-512 VBMI plans (p->vnni, 4 levels, B <= 6): builds P->fast and sets
 * the kernels it serves; nothing if the tables do not apply (polar_fast_x86.c). */
void polar_select_avx512(kvq_plan *p);
#endif
#endif
