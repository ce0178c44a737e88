/*
 * polar:B — PolarQuant (Han, Kacham, Karbasi, Mirrokni, Zandieh,
 * "PolarQuant: Quantizing KV Caches with Polar Transformation",
 * arXiv 2502.02617, AISTATS 2026).
 *
 * After the seeded rotation y = R x (its coordinates ≈ iid Gaussian), the
 * recursive polar transform pairs coordinates:
 *   level 1: (y_2i, y_2i+1)        -> radius r1_i, angle θ_i ∈ [0, 2π)
 *   level l: (r(l-1)_2i, r(l-1)_2i+1) -> radius rl_i, angle ψ_i = atan(r_2i+1 / r_2i) ∈ [0, π/2]
 * for L levels; the d / 2^L final radii are stored (fp16 by default), the
 * d - d/2^L angles as indices of per-level codebooks. No other scale or zero
 * point is stored (the paper's point: the angle densities are known, so no
 * per-block normalisation is needed).
 *
 * Angle densities (Gaussian input): level-1 angles are uniform on [0, 2π);
 * a level-l angle (l >= 2) is the angle between two independent norms of
 * n = 2^(l-1) Gaussian coordinates (chi_n variables), whose density is
 * f(ψ) ∝ cos^(n-1) ψ sin^(n-1) ψ ∝ sin^(n-1)(2ψ) on [0, π/2] (the paper's
 * sin^(2^(l-1)-1)(2ψ)), more concentrated around π/4 at each level; angles of
 * different levels and the final radii are independent. Codebooks: level 1 is
 * the uniform quantizer (Lloyd-Max of a uniform density), levels >= 2 are
 * Lloyd-Max for their density (polar_cb.c), computed at plan creation.
 *
 * Bits: the paper uses L = 4 levels, 4 bits for level-1 angles and 2 bits for
 * levels 2..4, with 16-bit final radii: (4·d/2 + 2·(d/4 + d/8 + d/16) +
 * 16·d/16) / d = 3.875 bits per value, the paper's figure, exactly for every
 * d that 64 divides (the angle bitstream is padded to a byte: d = 32 and 48
 * cost 4.0, d = 80 3.9, d = 96 3.917). That is `polar` = `polar:4`. The knob polar:B (B = 3..8) sets
 * the level-1 bits to B and the bits of levels >= 2 to B - 2 (the paper's
 * two-bit gap between the uniform first level and the concentrated higher
 * ones): polar:3 = 3/1/1/1 (2.94 bits per value), polar:5 = 5/3/3/3 (4.81),
 * polar:6 = 6/4/4/4 (5.75) ... polar:8 = 8/6/6/6 (7.63).
 *
 * Dims: the pairing needs d divisible by 2^L. kvq head dims are multiples of
 * 8, so L = min(4, number of factors 2 in d): L = 4 for 32, 48, 64, 80, 96,
 * 112, 128, ..., L = 3 for d = 8·odd (40, 56, 72, 88, 104, 120, ...: 4.75
 * bits per value at polar:4 before padding, the level-3 radii being d/8 fp16
 * values). Non
 * power-of-two d use the plan's Haar rotation; the angle densities are the
 * same because they depend only on the Gaussian input.
 *
 * Radii: by default each final radius is replaced by the least-squares scale
 * of its block, ρ_j = <y_j, û_j>, where û_j is the unit vector rebuilt from
 * the quantized angles of the 2^L coordinates under it (so ŷ_j is the
 * orthogonal projection of y_j on û_j; ρ_j > 0 because every level-1 angle
 * error is below π/4 for B >= 3). +scale=norm stores the exact radii ‖y_j‖ as
 * in the paper; +scale32 stores f32 radii.
 *
 * Record: [m radii (f16 or f32) | one LSB-first bitstream of all angle
 * indices: level 1 (d/2 fields of B bits), then level 2 (d/4 fields of B-2
 * bits), ..., level L], padded to a whole byte:
 *   code_bytes = m·2 + ceil((B·d/2 + (B-2)·(d/2 - m)) / 8).
 *
 * Kernels. Encode: level 1 without atan2 (the pair is turned into the first
 * quadrant by swaps and negations, then the boundaries 2πj/n below it are
 * counted with b' >= a'·tan(2πj/n)); levels >= 2 count boundaries with
 * r_odd > r_even·tan t_j; all in float, so the AVX2 encoder (8 pairs at a
 * time, the same operations) writes the same bytes as the scalar one.
 * Decode walks the levels down multiplying by cos/sin tables of the
 * centroids (AVX2: indices cut from the bitstream with variable shifts,
 * table lookups by register permutes, bit-identical to the scalar decode).
 *
 * Scores. With 4 levels and B <= 4 (polar, polar:3) a score is an exact
 * integer sum per block of 16 coordinates, on every ISA:
 *   s = c · sum_b rad_b · sum_{p in b} g8_p · T8_p[k1_p]
 * T_p[k] = q~_2p cos1[k] + q~_2p+1 sin1[k] (the pair's dot product with the
 * level-1 centroid direction), T8 = round(T · 127 / max|T|) over the row's
 * pairs and angles (sigma = max|T| / 127), computed once per query
 * (polar_prep_i8_ref); g_p = f4·f3·f2 of the pair (cos or sin of its
 * level-4, 3, 2 angles, all >= 0), g8 = round(255 g) from a 64-entry
 * table; c = sigma / 255. The
 * sines of levels 3 and 4 are read as the cosines of the mirrored index
 * (the codebooks are symmetric about pi/4 to < 1e-6), so one table serves
 * every pair of a parity. Against the decoded vector's dot product this is
 * 0.8e-2 relative RMS (d = 128; test_polar), beside the codec's own ~0.25:
 * attention rel_err 0.2474 -> 0.2476 (attn-bench, d = 128, Gaussian).
 * Other widths (B >= 5) and 3-level dims score with floats.
 * Scalar and AVX2 kernels decode one record at a time to a stack buffer (the
 * rotated domain) and take dot products / axpys there; the 8-bit scores have
 * a scalar reference (polar_score_i8) and an AVX2 kernel (score_i8_avx2: 4 rows'
 * tables interleaved per call, pmaddwd per two pairs; d = 128, 4 rows 78 ns
 * per record as the float AVX2 score before it).
 * AVX-512 plans with VBMI and B <= 6 (16 | d) expand the levels in registers,
 * 16 lanes = (block, level-4 half) of 8 blocks, no value shuffles, up to 4
 * query rows per record pass (see "AVX-512 VBMI score / accumulate" in
 * polar_fast_x86.c);
 * below 128 coordinates 2 or 4 records share the 16 lanes (accum_rec_body).
 * 8-bit scores with VNNI take lanes = 16 records: per block two vpermb of
 * the row's tables and two vpdpbusd per row (score_lane_body). d = 128,
 * polar:4, 4 rows, per record: score 5.2 ns (AVX2 78, float expansion 18),
 * accumulate 17 ns (AVX2 72); d = 64, 3 rows: 2.4 and 8.1 ns (expansion
 * 23 and 18; f16: 12 / 9.5 and 6.8 / 4.8 ns). Other
 * AVX-512 plans use the AVX2 kernels.
 *
 * Files: this one holds the method (plan set-up, codebooks, tables, the
 * choice of kernels); polar.h the shared tables (polar_priv); polar_ref.c
 * the scalar references; polar_kernels_x86.c the AVX2 kernels;
 * polar_fast_x86.c the AVX-512 ones. The x86 files call the references,
 * never each other or this file.
 */
#include <math.h>
#include <stdlib.h>

#include "codec_internal.h"
#include "polar.h"
#include "polar_cb.h"

static void fini(kvq_plan *p) {
    polar_priv *P = p->priv;
    if (P) free(P->fast);
    free(p->priv);
    p->priv = NULL;
}

static int init(kvq_plan *p) {
    const int d = p->d;
    const int L = kvq_polar_levels(d); /* layouts.h */
    if (L < 1) return KVQ_ERR_UNSUPPORTED_DIM;
    polar_priv *P = calloc(1, sizeof *P);
    if (!P) return KVQ_ERR_NOMEM;
    p->priv = P;
    P->L = L;
    P->m = d >> L;
    size_t bits = 0;
    for (int l = 1, off = 0; l <= L; l++) {
        P->b[l] = l == 1 ? p->bits : p->bits - 2;
        P->off[l] = off;
        P->bitoff[l] = bits;
        off += d >> l;
        bits += (size_t)(d >> l) * P->b[l];
        int rc = polar_angle_codebook(&P->cb[l], l, P->b[l]);
        if (rc) return rc;
        for (int k = 0; k < P->cb[l].n; k++) {
            P->cosc[l][k] = (float)cos((double)P->cb[l].c[k]);
            P->sinc[l][k] = (float)sin((double)P->cb[l].c[k]);
            if (l >= 2 && k < P->cb[l].n - 1) P->tant[l][k] = (float)tan((double)P->cb[l].t[k]);
        }
        if (l == 1)
            for (int j = 1; j < P->cb[1].n / 4; j++) P->tant[1][j - 1] = (float)tan(2 * M_PI * j / P->cb[1].n);
    }
    int rc = plan_layout(p, KVQ_LAY_POLAR, p->bits, 0); /* [m radii | (bits + 7) / 8 angle bytes] */
    if (rc) return rc;
    P->ang_bytes = (size_t)p->rec.size[KVQ_POLAR_ANGLES];
    P->i8 = L == 4 && p->bits <= 4;
    if (P->i8) {
        /* g8[f][a | b << w | c << 2w] = round(255 cos4[a] cos3[b] (cos2 | sin2)[c]); the sines of levels 3, 4
         * are the cosines of the mirrored index (symmetric codebooks: c[n-1-k] = pi/2 - c[k]) */
        const int w = P->b[2], nw = 1 << (3 * w);
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < 64; i++) {
                const int t = i % nw, a4 = t & ((1 << w) - 1), a3 = (t >> w) & ((1 << w) - 1), a2 = t >> 2 * w;
                const double g = cos((double)P->cb[4].c[a4]) * cos((double)P->cb[3].c[a3]) *
                                 (f ? sin((double)P->cb[2].c[a2]) : cos((double)P->cb[2].c[a2]));
                P->g8[f][i] = (uint8_t)lrint(255 * g);
            }
        for (int k = 0; k < 16; k++) P->c16[k] = P->cosc[1][k % P->cb[1].n], P->s16[k] = P->sinc[1][k % P->cb[1].n];
        for (int bl = 0; bl < P->m; bl++) {
            const size_t pos[3] = {P->bitoff[2] + (size_t)4 * bl * w, P->bitoff[3] + (size_t)2 * bl * w,
                                   P->bitoff[4] + (size_t)bl * w};
            for (int l = 0; l < 3; l++) P->fo[bl][l] = (uint16_t)(pos[l] >> 3), P->fs[bl][l] = (uint8_t)(pos[l] & 7);
        }
    }
    rc = rot_init(&p->rot, d, p->seed, !p->o.norot, p->isa);
    if (rc) return rc;
    p->cb = P->cb[1];
    if (L >= 2) p->cb2 = P->cb[2];
    p->rotated = !p->o.norot;
    p->qfloats = P->i8 ? POLAR_I8_QF(d) : (size_t)d;
    p->encode = polar_encode_ref;
    p->decode = polar_decode_ref;
    p->prep = P->i8 ? polar_prep_i8_ref : generic_prep_rot;
    p->score = P->i8 ? polar_score_i8 : polar_score_ref;
    p->accum = polar_accum_ref;
#if KVQ_X86
    polar_select_x86(p); /* AVX2 kernels (polar_kernels_x86.c) */
    if (p->isa >= KVQ_ISA_AVX512 && p->vnni) polar_select_avx512(p); /* VBMI / VNNI, where they apply */
#endif
    return KVQ_OK;
}

const kvq_method kvq_method_polar = {"polar", 3, 8, 4, init, fini, 0};

