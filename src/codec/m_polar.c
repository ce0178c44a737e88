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
 * pairs and angles (sigma = max|T| / 127), computed once per query (prep_i8);
 * g_p = f4·f3·f2 of the pair (cos or sin of its level-4, 3, 2 angles, all
 * >= 0), g8 = round(255 g) from a 64-entry table; c = sigma / 255. The
 * sines of levels 3 and 4 are read as the cosines of the mirrored index
 * (the codebooks are symmetric about pi/4 to < 1e-6), so one table serves
 * every pair of a parity. Against the decoded vector's dot product this is
 * 0.8e-2 relative RMS (d = 128; test_polar), beside the codec's own ~0.25:
 * attention rel_err 0.2474 -> 0.2476 (attn-bench, d = 128, Gaussian).
 * Other widths (B >= 5) and 3-level dims score with floats.
 * Scalar and AVX2 kernels decode one record at a time to a stack buffer (the
 * rotated domain) and take dot products / axpys there; the 8-bit scores have
 * a scalar reference (score_i8) and an AVX2 kernel (score_i8_avx2: 4 rows'
 * tables interleaved per call, pmaddwd per two pairs; d = 128, 4 rows 78 ns
 * per record as the float AVX2 score before it).
 * AVX-512 plans with VBMI and B <= 6 (16 | d) expand the levels in registers,
 * 16 lanes = (block, level-4 half) of 8 blocks, no value shuffles, up to 4
 * query rows per record pass (see "AVX-512 VBMI score / accumulate" below);
 * below 128 coordinates 2 or 4 records share the 16 lanes (accum_rec_body).
 * 8-bit scores with VNNI take lanes = 16 records: per block two vpermb of
 * the row's tables and two vpdpbusd per row (score_lane_body). d = 128,
 * polar:4, 4 rows, per record: score 5.2 ns (AVX2 78, float expansion 18),
 * accumulate 17 ns (AVX2 72); d = 64, 3 rows: 2.4 and 8.1 ns (expansion
 * 23 and 18; f16: 12 / 9.5 and 6.8 / 4.8 ns). Other
 * AVX-512 plans use the AVX2 kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"
#include "polar_cb.h"
#include "rec_transpose.h" /* and simd_util.h, immintrin.h on x86 */

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

/* ---- bitstream of angle indices -------------------------------------------- */
static void pack_angles(const polar_priv *P, int d, const uint8_t *idx, uint8_t *out) {
    uint32_t acc = 0;
    int nb = 0;
    size_t o = 0;
    for (int l = 1; l <= P->L; l++) {
        const int cnt = d >> l, b = P->b[l];
        const uint8_t *s = idx + P->off[l];
        for (int i = 0; i < cnt; i++) {
            acc |= (uint32_t)s[i] << nb;
            nb += b;
            while (nb >= 8) { out[o++] = (uint8_t)acc; acc >>= 8; nb -= 8; }
        }
    }
    if (nb > 0) out[o++] = (uint8_t)acc;
}

static void unpack_angles(const polar_priv *P, int d, const uint8_t *in, uint8_t *idx) {
    size_t pos = 0; /* bit position */
    for (int l = 1; l <= P->L; l++) {
        const int cnt = d >> l, b = P->b[l];
        const unsigned mask = (1u << b) - 1;
        uint8_t *s = idx + P->off[l];
        if ((b == 1 || b == 2 || b == 4 || b == 8) && pos % 8 == 0 && cnt % (8 / b) == 0) {
            /* whole bytes of 8/b fields: the default levels (4 and 2 bits) */
            const uint8_t *src = in + pos / 8;
            switch (b) {
            case 4:
                for (int i = 0; i < cnt / 2; i++) s[2 * i] = src[i] & 15, s[2 * i + 1] = src[i] >> 4;
                break;
            case 2:
                for (int i = 0; i < cnt / 4; i++)
                    for (int k = 0; k < 4; k++) s[4 * i + k] = (src[i] >> (2 * k)) & 3;
                break;
            case 1:
                for (int i = 0; i < cnt / 8; i++)
                    for (int k = 0; k < 8; k++) s[8 * i + k] = (src[i] >> k) & 1;
                break;
            default: memcpy(s, src, (size_t)cnt);
            }
        } else {
            for (int i = 0; i < cnt; i++) {
                size_t p8 = (pos + (size_t)i * b) >> 3;
                int sh = (int)((pos + (size_t)i * b) & 7);
                unsigned v = in[p8];
                if (sh + b > 8) v |= (unsigned)in[p8 + 1] << 8; /* the field runs into the next byte */
                s[i] = (uint8_t)((v >> sh) & mask);
            }
        }
        pos += (size_t)cnt * b;
    }
}

/* ---- the transform ------------------------------------------------------------ */
/* y (d floats) from the final radii (m floats) and the angle indices. */
static void expand(const polar_priv *P, int d, const uint8_t *idx, const float *rad, float *y) {
    float bufa[KVQ_DIM_MAX / 2], bufb[KVQ_DIM_MAX / 2];
    const float *cur = rad;
    float *nxt = bufa;
    for (int l = P->L; l >= 2; l--) {
        const int cnt = d >> l;
        const uint8_t *s = idx + P->off[l];
        const float *cs = P->cosc[l], *sn = P->sinc[l];
        for (int i = 0; i < cnt; i++) {
            nxt[2 * i] = cur[i] * cs[s[i]];
            nxt[2 * i + 1] = cur[i] * sn[s[i]];
        }
        cur = nxt;
        nxt = nxt == bufa ? bufb : bufa;
    }
    const uint8_t *s = idx + P->off[1];
    const float *cs = P->cosc[1], *sn = P->sinc[1];
    for (int i = 0; i < d / 2; i++) {
        y[2 * i] = cur[i] * cs[s[i]];
        y[2 * i + 1] = cur[i] * sn[s[i]];
    }
}

/*
 * Quantization of the angles (all in float; the AVX2 version performs the
 * same IEEE operations in the same order, so both give the same bytes).
 * Level 1: uniform cells of [0, 2π), n1/4 per quadrant. (a, b) is turned by
 * -q·π/2 into the first quadrant (exact: swaps and negations), and the cell is
 * q·n1/4 + #{j : b' >= a'·tan(2πj/n1)} = floor(θ·n1/2π), without atan2.
 * Levels >= 2: ψ > t_j <=> r_odd > r_even·tan t_j (both >= 0).
 * Radii: r = sqrt(a·a + b·b). Writes idx (angle order) and the m final radii.
 */
static void quantize_scalar(const polar_priv *P, int d, const float *y, uint8_t *idx, float *rfin) {
    float r[KVQ_DIM_MAX / 2];
    const int qn = (1 << P->b[1]) / 4;
    const float *t1 = P->tant[1];
    for (int i = 0; i < d / 2; i++) {
        const float a = y[2 * i], b = y[2 * i + 1];
        /* θ ∈ [π, 2π): turn by π; then θ ∈ [π/2, π): turn by -π/2 */
        const int lo = (b < 0) | ((b == 0) & (a < 0));
        const float a1 = lo ? -a : a, b1 = lo ? -b : b;
        const int up = (a1 <= 0) & (b1 > 0);
        const float ap = up ? b1 : a1, bp = up ? -a1 : b1;
        int k = (2 * lo + up) * qn;
        for (int j = 0; j < qn - 1; j++) k += bp >= ap * t1[j];
        idx[P->off[1] + i] = (uint8_t)k;
        r[i] = sqrtf(a * a + b * b);
    }
    for (int l = 2; l <= P->L; l++) {
        const int cnt = d >> l, nt = P->cb[l].n - 1;
        const float *tt = P->tant[l];
        for (int i = 0; i < cnt; i++) {
            const float a = r[2 * i], b = r[2 * i + 1];
            int k = 0;
            for (int j = 0; j < nt; j++) k += b > a * tt[j];
            idx[P->off[l] + i] = (uint8_t)k;
            r[i] = sqrtf(a * a + b * b);
        }
    }
    memcpy(rfin, r, (size_t)P->m * sizeof *r);
}

/* Radii (exact or least-squares) and the bitstream. */
static int finish(const kvq_plan *p, const float *y, const uint8_t *idx, const float *rfin, uint8_t *code) {
    const polar_priv *P = p->priv;
    const int d = p->d;
    const size_t sb = scale_bytes(p);
    if (p->o.scale_norm) {
        for (int j = 0; j < P->m; j++) {
            int rc = scale_store(p, code + j * sb, rfin[j]);
            if (rc) return rc;
        }
    } else {
        /* least-squares radius of each block: <y_j, û_j> */
        float ones[KVQ_DIM_MAX], u[KVQ_DIM_MAX];
        for (int j = 0; j < P->m; j++) ones[j] = 1.0f;
        expand(P, d, idx, ones, u);
        const int B = 1 << P->L;
        for (int j = 0; j < P->m; j++) {
            double s = 0;
            for (int c = j * B; c < (j + 1) * B; c++) s += (double)y[c] * u[c];
            if (!isfinite(rfin[j])) s = INFINITY; /* a radius beyond float: KVQ_ERR_RANGE */
            int rc = scale_store(p, code + j * sb, (float)(s > 0 ? s : 0));
            if (rc) return rc;
        }
    }
    pack_angles(P, d, idx, code + (size_t)P->m * sb);
    return KVQ_OK;
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    float y[KVQ_DIM_MAX], rfin[KVQ_DIM_MAX / 2];
    uint8_t idx[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    quantize_scalar(p->priv, p->d, y, idx, rfin);
    return finish(p, y, idx, rfin, code);
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const polar_priv *P = p->priv;
    const size_t sb = scale_bytes(p);
    float rad[KVQ_DIM_MAX / 2];
    uint8_t idx[KVQ_DIM_MAX];
    for (int j = 0; j < P->m; j++) rad[j] = scale_load(p, code + j * sb);
    unpack_angles(P, p->d, code + (size_t)P->m * sb, idx);
    expand(P, p->d, idx, rad, y);
}

/* Score / accumulate: one decode per record, then every query row. Eight
 * independent partial sums let the compiler vectorise without reassociating. */
static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        dec(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * p->qfloats;
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int c = 0; c < d; c += 8)
                for (int k = 0; k < 8; k++) s[k] += q[c + k] * y[c + k];
            scores[j * n + i] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
        }
    }
}

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        dec(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float wi = w[j * n + i];
            if (wi == 0.0f) continue;
            float *a = acc + j * (size_t)d;
            for (int c = 0; c < d; c++) a[c] += wi * y[c];
        }
    }
}

/* ---- 8-bit scores (P->i8) -------------------------------------------------------
 * Prepared row (qfloats = 3d + 16): [q~: d floats][c = max|T| / (127·255),
 * 15 zeros][T8: 8d bytes]; T8 of pair 2u + f of block b (u = 2h + e) at byte
 * 128b + 64f + 16u + k, k < 16 (B = 3: the 8 entries twice). Every ISA
 * computes the same integers: T from mul, mul, add; the magic-constant
 * rounding is round-to-nearest-even like cvtps2dq. */
#define POLAR_I8_QF(d) (3 * (size_t)(d) + 16)
static inline float round_ne(float x) { return (x + 12582912.0f) - 12582912.0f; } /* |x| < 2^22 */

static void prep_i8(const kvq_plan *p, const float *q, float *qp) {
    const polar_priv *P = p->priv;
    const int d = p->d;
    rot_apply(&p->rot, q, qp);
    float m = 0;
    for (int pr = 0; pr < d / 2; pr++)
        for (int k = 0; k < 16; k++) m = fmaxf(m, fabsf(qp[2 * pr] * P->c16[k] + qp[2 * pr + 1] * P->s16[k]));
    const float inv = m > 0 ? 127.0f / m : 0.0f;
    qp[d] = m / 32385.0f;
    for (int k = 1; k < 16; k++) qp[d + k] = 0;
    int8_t *t8 = (int8_t *)(qp + d + 16);
    for (int pr = 0; pr < d / 2; pr++) {
        const int b = pr / 8, u = (pr % 8) >> 1, f = pr & 1;
        for (int k = 0; k < 16; k++) {
            float v = (qp[2 * pr] * P->c16[k] + qp[2 * pr + 1] * P->s16[k]) * inv;
            v = !(v >= -127) ? -127 : v > 127 ? 127 : v; /* NaN: -127, as maxps / minps */
            t8[128 * b + 64 * f + 16 * u + k] = (int8_t)round_ne(v);
        }
    }
}

#if KVQ_X86
/* prep_i8 with AVX2: the same float operations (mul, mul, add; max of |T|,
 * NaN ignored as fmaxf; clamp, then cvtps2dq's round-to-nearest-even), so
 * the same bytes. */
KVQ_TARGET_AVX2 static void prep_i8_avx2(const kvq_plan *p, const float *q, float *qp) {
    const polar_priv *P = p->priv;
    const int d = p->d;
    float T[KVQ_DIM_MAX / 2 * 16];
    rot_apply(&p->rot, q, qp);
    const __m256 c0 = _mm256_loadu_ps(P->c16), c1 = _mm256_loadu_ps(P->c16 + 8);
    const __m256 s0 = _mm256_loadu_ps(P->s16), s1 = _mm256_loadu_ps(P->s16 + 8);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mv = _mm256_setzero_ps();
    for (int pr = 0; pr < d / 2; pr++) {
        const __m256 a = _mm256_set1_ps(qp[2 * pr]), b = _mm256_set1_ps(qp[2 * pr + 1]);
        const __m256 t0 = _mm256_add_ps(_mm256_mul_ps(a, c0), _mm256_mul_ps(b, s0));
        const __m256 t1 = _mm256_add_ps(_mm256_mul_ps(a, c1), _mm256_mul_ps(b, s1));
        _mm256_storeu_ps(T + 16 * pr, t0);
        _mm256_storeu_ps(T + 16 * pr + 8, t1);
        mv = _mm256_max_ps(_mm256_and_ps(t0, absm), mv);
        mv = _mm256_max_ps(_mm256_and_ps(t1, absm), mv);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float m = _mm_cvtss_f32(m4), inv = m > 0 ? 127.0f / m : 0.0f;
    qp[d] = m / 32385.0f;
    for (int k = 1; k < 16; k++) qp[d + k] = 0;
    int8_t *t8 = (int8_t *)(qp + d + 16);
    const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int pr = 0; pr < d / 2; pr++) {
        const int b = pr / 8, u = (pr % 8) >> 1, f = pr & 1;
        __m256i v[2];
        for (int h = 0; h < 2; h++)
            v[h] = _mm256_cvtps_epi32(
                _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(T + 16 * pr + 8 * h), vinv), lo), hi));
        const __m128i w0 = _mm_packs_epi32(_mm256_castsi256_si128(v[0]), _mm256_extracti128_si256(v[0], 1));
        const __m128i w1 = _mm_packs_epi32(_mm256_castsi256_si128(v[1]), _mm256_extracti128_si256(v[1], 1));
        _mm_storeu_si128((__m128i *)(t8 + 128 * b + 64 * f + 16 * u), _mm_packs_epi16(w0, w1));
    }
}
#endif

/* The 8-bit score reference: s = c · sum_b rad_b · sum_p g8_p · T8_p[k1_p]. */
static void score_i8(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const polar_priv *P = p->priv;
    const int d = p->d, w = P->b[2], mw = (1 << w) - 1;
    const size_t sb = scale_bytes(p), qs = p->qfloats;
    uint8_t idx[KVQ_DIM_MAX], g8[KVQ_DIM_MAX / 2];
    float rad[KVQ_DIM_MAX / 16];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * p->code_bytes;
        for (int b = 0; b < P->m; b++) rad[b] = scale_load(p, rec + b * sb);
        unpack_angles(P, d, rec + (size_t)P->m * sb, idx);
        const uint8_t *k1 = idx + P->off[1], *k2 = idx + P->off[2], *k3 = idx + P->off[3], *k4 = idx + P->off[4];
        for (int b = 0; b < P->m; b++)
            for (int pr = 0; pr < 8; pr++) {
                const int h = pr >> 2, e = (pr >> 1) & 1;
                const int gi = (k4[b] ^ (h ? mw : 0)) | (k3[2 * b + h] ^ (e ? mw : 0)) << w | k2[4 * b + 2 * h + e] << 2 * w;
                g8[8 * b + pr] = P->g8[pr & 1][gi];
            }
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * qs;
            const int8_t *t8 = (const int8_t *)(q + d + 16);
            float sum = 0;
            for (int b = 0; b < P->m; b++) {
                int32_t I = 0;
                for (int pr = 0; pr < 8; pr++)
                    I += g8[8 * b + pr] * t8[128 * b + 64 * (pr & 1) + 16 * (pr >> 1) + k1[8 * b + pr]];
                sum += rad[b] * (float)I;
            }
            scores[j * n + i] = sum * q[d];
        }
    }
}

/* ---- AVX2 kernels (also used by AVX-512 plans) ---------------------------------
 * Decode: indices unpacked as in the scalar path, then each level expands 8
 * radii at a time: cos/sin centroids by a register permute (<= 8 entries),
 * two permutes and a blend (<= 16) or a gather (more), products, interleave.
 * Only multiplications, as in expand(): the decode is bit-identical to the
 * scalar one. Score / accumulate use FMA (rounding differs from the scalar
 * reference by a few ulps; test_polar compares them). */
#if KVQ_X86
KVQ_TARGET_AVX2 static inline __m256 lut_avx2(const float *tab, int n, __m256i k) {
    if (n <= 8) return _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), k);
    if (n <= 16) {
        __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab), k);
        __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(tab + 8), k);
        return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
    }
    return _mm256_i32gather_ps(tab, k, 4);
}

/*
 * One level of the decode: out[2i] = cur[i]·cos[k_i], out[2i+1] = cur[i]·sin[k_i]
 * for the cnt indices k_i of b bits starting at bit `pos` of bs (the record's
 * bitstream copied into a buffer with 8 zero bytes of padding). 8 fields are
 * 8b bits: one 64-bit load shifted by pos % 8 (sh + 8b <= 64: b <= 7, or
 * b = 8 on level 1 whose chunks start on bytes) and split into two 32-bit
 * halves of 4 fields, then a variable shift per lane.
 */
KVQ_TARGET_AVX2 static void level_avx2(const float *cur, const uint8_t *bs, size_t pos, int b, const float *cs,
                                       const float *sn, int n, int cnt, float *out) {
    const __m256i shifts = _mm256_setr_epi32(0, b, 2 * b, 3 * b, 0, b, 2 * b, 3 * b);
    const __m256i mask = _mm256_set1_epi32((1 << b) - 1);
    int i = 0;
    for (; i + 8 <= cnt; i += 8, pos += 8 * (size_t)b) {
        uint64_t w;
        memcpy(&w, bs + (pos >> 3), 8);
        w >>= pos & 7;
        __m256i v = _mm256_setr_epi32((int)(uint32_t)w, (int)(uint32_t)w, (int)(uint32_t)w, (int)(uint32_t)w,
                                      (int)(uint32_t)(w >> (4 * b)), (int)(uint32_t)(w >> (4 * b)),
                                      (int)(uint32_t)(w >> (4 * b)), (int)(uint32_t)(w >> (4 * b)));
        __m256i k = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
        __m256 r = _mm256_loadu_ps(cur + i);
        __m256 e = _mm256_mul_ps(r, lut_avx2(cs, n, k)), o = _mm256_mul_ps(r, lut_avx2(sn, n, k));
        __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
        _mm256_storeu_ps(out + 2 * i, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(out + 2 * i + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    for (; i < cnt; i++, pos += (size_t)b) {
        unsigned v = (bs[pos >> 3] | (unsigned)bs[(pos >> 3) + 1] << 8) >> (pos & 7);
        unsigned k = v & ((1u << b) - 1);
        out[2 * i] = cur[i] * cs[k];
        out[2 * i + 1] = cur[i] * sn[k];
    }
}

KVQ_TARGET_AVX2 static void dec_avx2(const kvq_plan *p, const uint8_t *code, float *y) {
    const polar_priv *P = p->priv;
    const int d = p->d;
    const size_t sb = scale_bytes(p);
    float bufa[KVQ_DIM_MAX / 2], bufb[KVQ_DIM_MAX / 2];
    uint8_t bs[KVQ_DIM_MAX + 16];
    memcpy(bs, code + (size_t)P->m * sb, P->ang_bytes);
    memset(bs + P->ang_bytes, 0, 8);
    int j = 0;
    if (!p->o.scale32)
        for (; j + 8 <= P->m; j += 8)
            _mm256_storeu_ps(bufa + j, ld8_f16(code + 2 * j));
    for (; j < P->m; j++) bufa[j] = scale_load(p, code + j * sb);
    float *cur = bufa, *nxt = bufb;
    for (int l = P->L; l >= 2; l--) {
        level_avx2(cur, bs, P->bitoff[l], P->b[l], P->cosc[l], P->sinc[l], P->cb[l].n, d >> l, nxt);
        float *t = cur;
        cur = nxt;
        nxt = t;
    }
    level_avx2(cur, bs, 0, P->b[1], P->cosc[1], P->sinc[1], P->cb[1].n, d / 2, y);
}

/* Deinterleaves 8 pairs: *a = [p0.a .. p7.a], *b = [p0.b .. p7.b]. */
KVQ_TARGET_AVX2 static inline void pairs_avx2(const float *src, __m256 *a, __m256 *b) {
    __m256 v0 = _mm256_loadu_ps(src), v1 = _mm256_loadu_ps(src + 8);
    __m256 ea = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a1 a4 a5 | a2 a3 a6 a7 */
    __m256 eb = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1));
    *a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ea), 0xD8));
    *b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(eb), 0xD8));
}

KVQ_TARGET_AVX2 static inline void store_idx8(uint8_t *dst, __m256i k) {
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64((__m128i *)dst, _mm_packus_epi16(w, w));
}

/* quantize_scalar() 8 pairs at a time, the same float operations. */
KVQ_TARGET_AVX2 static void quantize_avx2(const polar_priv *P, int d, const float *y, uint8_t *idx, float *rfin) {
    float ra[KVQ_DIM_MAX / 2], rb[KVQ_DIM_MAX / 2];
    const int qn = (1 << P->b[1]) / 4, qsh = P->b[1] - 2;
    const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    int i = 0;
    for (; i + 8 <= d / 2; i += 8) {
        __m256 a, b;
        pairs_avx2(y + 2 * i, &a, &b);
        __m256 lo = _mm256_or_ps(_mm256_cmp_ps(b, zero, _CMP_LT_OQ),
                                 _mm256_and_ps(_mm256_cmp_ps(b, zero, _CMP_EQ_OQ), _mm256_cmp_ps(a, zero, _CMP_LT_OQ)));
        __m256 a1 = _mm256_xor_ps(a, _mm256_and_ps(lo, sign)), b1 = _mm256_xor_ps(b, _mm256_and_ps(lo, sign));
        __m256 up = _mm256_and_ps(_mm256_cmp_ps(a1, zero, _CMP_LE_OQ), _mm256_cmp_ps(b1, zero, _CMP_GT_OQ));
        __m256 ap = _mm256_blendv_ps(a1, b1, up), bp = _mm256_blendv_ps(b1, _mm256_xor_ps(a1, sign), up);
        /* (2·lo + up)·qn with lo, up = -1 masks */
        __m256i q = _mm256_sub_epi32(_mm256_setzero_si256(),
                                     _mm256_add_epi32(_mm256_add_epi32(_mm256_castps_si256(lo), _mm256_castps_si256(lo)),
                                                      _mm256_castps_si256(up)));
        __m256i k = _mm256_slli_epi32(q, qsh);
        for (int j = 0; j < qn - 1; j++) {
            __m256 c = _mm256_cmp_ps(bp, _mm256_mul_ps(ap, _mm256_set1_ps(P->tant[1][j])), _CMP_GE_OQ);
            k = _mm256_sub_epi32(k, _mm256_castps_si256(c));
        }
        store_idx8(idx + P->off[1] + i, k);
        _mm256_storeu_ps(ra + i, _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(a, a), _mm256_mul_ps(b, b))));
    }
    for (; i < d / 2; i++) { /* tail (d = 8·odd) as in quantize_scalar */
        const float a = y[2 * i], b = y[2 * i + 1];
        const int lo = (b < 0) | ((b == 0) & (a < 0));
        const float a1 = lo ? -a : a, b1 = lo ? -b : b;
        const int up = (a1 <= 0) & (b1 > 0);
        const float ap = up ? b1 : a1, bp = up ? -a1 : b1;
        int k = (2 * lo + up) * qn;
        for (int j = 0; j < qn - 1; j++) k += bp >= ap * P->tant[1][j];
        idx[P->off[1] + i] = (uint8_t)k;
        ra[i] = sqrtf(a * a + b * b);
    }
    float *cur = ra, *nxt = rb;
    for (int l = 2; l <= P->L; l++) {
        const int cnt = d >> l, nt = P->cb[l].n - 1;
        const float *tt = P->tant[l];
        i = 0;
        for (; i + 8 <= cnt; i += 8) {
            __m256 a, b;
            pairs_avx2(cur + 2 * i, &a, &b);
            __m256i k = _mm256_setzero_si256();
            for (int j = 0; j < nt; j++)
                k = _mm256_sub_epi32(
                    k, _mm256_castps_si256(_mm256_cmp_ps(b, _mm256_mul_ps(a, _mm256_set1_ps(tt[j])), _CMP_GT_OQ)));
            store_idx8(idx + P->off[l] + i, k);
            _mm256_storeu_ps(nxt + i, _mm256_sqrt_ps(_mm256_add_ps(_mm256_mul_ps(a, a), _mm256_mul_ps(b, b))));
        }
        for (; i < cnt; i++) {
            const float a = cur[2 * i], b = cur[2 * i + 1];
            int k = 0;
            for (int j = 0; j < nt; j++) k += b > a * tt[j];
            idx[P->off[l] + i] = (uint8_t)k;
            nxt[i] = sqrtf(a * a + b * b);
        }
        float *t = cur;
        cur = nxt;
        nxt = t;
    }
    memcpy(rfin, cur, (size_t)P->m * sizeof *cur);
}

KVQ_TARGET_AVX2 static int enc_avx2(const kvq_plan *p, const float *x, uint8_t *code) {
    float y[KVQ_DIM_MAX], rfin[KVQ_DIM_MAX / 2];
    uint8_t idx[KVQ_DIM_MAX + 8];
    rot_apply(&p->rot, x, y);
    quantize_avx2(p->priv, p->d, y, idx, rfin);
    return finish(p, y, idx, rfin, code);
}

KVQ_TARGET_AVX2 static inline float dot_avx2(const float *q, const float *y, int d) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int c = 0;
    for (; c + 16 <= d; c += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(y + c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), _mm256_loadu_ps(y + c + 8), a1);
    }
    if (c < d) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(y + c), a0); /* d % 8 == 0 */
    return hsum_256(_mm256_add_ps(a0, a1));
}

KVQ_TARGET_AVX2 static void score_avx2(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                                       float *scores) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        dec_avx2(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) scores[j * n + i] = dot_avx2(qp + j * p->qfloats, y, d);
    }
}

KVQ_TARGET_AVX2 static void accum_avx2(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                       float *acc) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        dec_avx2(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float wi = w[j * n + i];
            if (wi == 0.0f) continue;
            const __m256 vw = _mm256_set1_ps(wi);
            float *a = acc + j * (size_t)d;
            for (int c = 0; c < d; c += 8)
                _mm256_storeu_ps(a + c, _mm256_fmadd_ps(vw, _mm256_loadu_ps(y + c), _mm256_loadu_ps(a + c)));
        }
    }
}

/*
 * 8-bit scores (P->i8) with AVX2 plans: rows in groups of 4 whose tables are
 * interleaved per call (tr[4 (16 p + k) + j] = T8 of row j), so one 32-bit
 * load fetches a pair's entry for the 4 rows; pairs 2t, 2t + 1 (the same g8
 * index, the two parities) go through one pmaddwd against their g8 as two
 * words. The same integers and the same float operations as score_i8.
 */
KVQ_TARGET_AVX2 static void score_i8_avx2(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                                          float *scores) {
    const polar_priv *P = p->priv;
    const int d = p->d, w = P->b[2], mw = (1 << w) - 1, np = d / 2;
    const size_t sb = scale_bytes(p), qs = p->qfloats;
    float rad[KVQ_DIM_MAX / 16];
    int8_t tr[KVQ_DIM_MAX / 2 * 64] __attribute__((aligned(32)));
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t nr = nq - j0 < 4 ? nq - j0 : 4;
        const int8_t *t8[4];
        for (size_t j = 0; j < 4; j++) t8[j] = (const int8_t *)(qp + (j0 + (j < nr ? j : 0)) * qs + d + 16);
        for (int pr = 0; pr < np; pr++) { /* 4 rows x 16 entries -> 16 x 4, rows past nr zero */
            const size_t o = 128 * (size_t)(pr / 8) + 64 * (size_t)(pr & 1) + 16 * (size_t)((pr % 8) >> 1);
            __m128i r[4];
            for (size_t j = 0; j < 4; j++)
                r[j] = j < nr ? _mm_loadu_si128((const __m128i *)(t8[j] + o)) : _mm_setzero_si128();
            const __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpackhi_epi8(r[0], r[1]);
            const __m128i c = _mm_unpacklo_epi8(r[2], r[3]), e = _mm_unpackhi_epi8(r[2], r[3]);
            __m128i *dst = (__m128i *)(tr + 64 * (size_t)pr);
            _mm_store_si128(dst, _mm_unpacklo_epi16(a, c));
            _mm_store_si128(dst + 1, _mm_unpackhi_epi16(a, c));
            _mm_store_si128(dst + 2, _mm_unpacklo_epi16(b, e));
            _mm_store_si128(dst + 3, _mm_unpackhi_epi16(b, e));
        }
        for (size_t i = 0; i < n; i++) {
            const uint8_t *rec = codes + i * p->code_bytes;
            int b = 0;
            if (!p->o.scale32)
                for (; b + 4 <= P->m; b += 4)
                    _mm_storeu_ps(rad + b, _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(rec + 2 * b))));
            for (; b < P->m; b++) rad[b] = scale_load(p, rec + b * sb);
            { /* fields read in place: levels 2..4 never straddle a byte (1- or 2-bit fields), level 1 by
               * nibbles (B = 4) or 16-bit windows (B = 3, level 2 follows it) */
                const uint8_t *ang = rec + (size_t)P->m * sb;
                __m128 sum = _mm_setzero_ps();
                for (b = 0; b < P->m; b++) {
                    __m128i I = _mm_setzero_si128();
                    const int x2 = ang[P->fo[b][0]] >> P->fs[b][0], x3 = ang[P->fo[b][1]] >> P->fs[b][1];
                    const int k4 = (ang[P->fo[b][2]] >> P->fs[b][2]) & mw;
                    for (int u = 0; u < 4; u++) {
                        const int t = 4 * b + u, h = u >> 1, e = u & 1;
                        const int k3 = (x3 >> h * w) & mw, k2 = (x2 >> u * w) & mw;
                        const int gi = (k4 ^ (h ? mw : 0)) | (k3 ^ (e ? mw : 0)) << w | k2 << 2 * w;
                        int ka, kb;
                        if (P->b[1] == 4) {
                            ka = ang[t] & 15, kb = ang[t] >> 4;
                        } else {
                            const unsigned x = (ang[(6 * t) >> 3] | (unsigned)ang[((6 * t) >> 3) + 1] << 8) >> ((6 * t) & 7);
                            ka = x & 7, kb = (x >> 3) & 7;
                        }
                        int32_t va, vb;
                        memcpy(&va, tr + 4 * (32 * t + ka), 4);
                        memcpy(&vb, tr + 4 * (32 * t + 16 + kb), 4);
                        const __m128i ab =
                            _mm_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(va), _mm_cvtsi32_si128(vb)));
                        const int g = P->g8[0][gi] | P->g8[1][gi] << 16;
                        I = _mm_add_epi32(I, _mm_madd_epi16(ab, _mm_set1_epi32(g)));
                    }
                    sum = _mm_add_ps(sum, _mm_mul_ps(_mm_set1_ps(rad[b]), _mm_cvtepi32_ps(I)));
                }
                float s4[4];
                _mm_storeu_ps(s4, sum);
                for (size_t j = 0; j < nr; j++) scores[(j0 + j) * n + i] = s4[j] * qp[(j0 + j) * qs + d];
            }
        }
    }
}
#endif

/* ---- AVX-512 VBMI score / accumulate (B <= 6, 16 | d) ---------------------------
 * A "super-block" is 8 blocks of 16 coordinates (128 coordinates; the last
 * one may hold fewer blocks). Its 16 lanes are (h, blk): blk the block, h its
 * level-4 half (coordinate bit 3). The levels then expand lane-wise with no
 * shuffles of values: level 4 gives R3 (lane: rad·cos4 or rad·sin4 by h);
 * level 3 gives R2[b2] = R3·{cos3, sin3}[k3] (b2 = 0, 1); level 2 gives
 * R1[b2][b1] = R2[b2]·{cos2, sin2}[k2]; level 1 gives the 8 vectors
 * y[4·b2 + 2·b1 + b0] = R1[b2][b1]·{cos1, sin1}[k1], whose lane (h, blk) is
 * coordinate 16·blk + 8·h + 4·b2 + 2·b1 + b0. Every lane needs the angle
 * fields of its own (block, half): per level, one masked 64-byte load of the
 * level's bytes of the super-block, one vpermb putting each lane's bytes in
 * its dword, then a variable shift per field (<= 4 fields, <= 31
 * bits per lane for B <= 6). Table lookups are register permutes (<= 16
 * entries: vpermps, 32: vpermt2ps, 64: two and a blend). The products are
 * the scalar decode's, in its order (rad·f4·f3·f2·f1).
 * Scores: queries are copied per call in that lane order (zero on missing
 * blocks), 4 rows per record pass, 8 FMAs per row and super-block.
 * Accumulate: per (super-block, b2) pass, 4 rows x 4 vectors in registers
 * while the records stream by (chunks of 32 records; the b2 = 0 pass keeps
 * R2[1] and the level-2/1 words for the b2 = 1 pass), written back in
 * coordinate order per call. */
#if KVQ_X86
#define POLAR_SBMAX (KVQ_DIM_MAX / 128)
/* Record-lane scores (score_lane_body): one pass per super-block; the
 * record bytes it reads are POLAR_LCH 16-byte chunks at most, transposed so
 * that lane = record (X[4c + w] = dword w of chunk c). A block's fields sit
 * in one dword each: X[x] >> s, then fixed shifts per angle. */
#define POLAR_LCH 8
#define POLAR_LCB 320 /* largest record of a record-lane plan (B = 4, d = 512, f32 radii: 312) */
typedef struct {
    uint8_t xr, sr;         /* radius */
    uint8_t x1, s1;         /* level 1: the block's 8 angles */
    uint8_t x2, s2, x3, s3, x4, s4;
} polar_lblk;
typedef struct {
    int nb, nch;                 /* blocks, chunks */
    uint16_t choff[POLAR_LCH];   /* chunk offsets in a record (bytes) */
    polar_lblk blk[8];
    /* vpmultishiftqb controls per block: byte u of a lane gets k4, k3 of
     * half u >> 1, k2 of node u at bits 0, w, 2w (w = B - 2); B = 3: the
     * level-1 angles 2u and 2u + 1 */
    uint8_t ms[8][5][64];
} polar_lpass;
typedef struct polar_fast {
    int nsb;                          /* super-blocks */
    int direct;                       /* B = 4, 128 | d: every lane's fields from broadcast loads (see fast_build) */
    size_t off[POLAR_LEVELS + 1];     /* direct: first byte of level l in the angle stream */
    uint8_t perm[POLAR_LEVELS + 1][64]; /* vpermb indices, 4 bytes per lane */
    int32_t sh[POLAR_LEVELS + 1][4][16]; /* right shift of the lane's field m */
    int32_t add4[16];                  /* level 4: n4 on h = 1 lanes */
    float t4[64];                      /* level 4: [cos4 | sin4] */
    /* cos/sin tables of levels 1..3 repeated to 16 entries (fewer levels)
     * or as is (32, 64): the permutes read only the index bits they need,
     * so the fields are never masked */
    float ct[POLAR_LEVELS + 1][64], st[POLAR_LEVELS + 1][64];
    size_t wst[POLAR_LEVELS + 1], wsb[POLAR_LEVELS + 1];  /* window start, advance per super-block */
    uint64_t wmask[POLAR_LEVELS + 1][POLAR_SBMAX];        /* window byte masks (record bounds) */
    uint8_t rmask[POLAR_SBMAX];                           /* blocks present in super-block s */
    int16_t pos2c[KVQ_DIM_MAX];                           /* lane-order position -> coordinate, -1: none */
    int lane;                                             /* record-lane scores (B <= 4): lp[] is set */
    polar_lpass lp[POLAR_SBMAX];
    /* Whole-record accumulate (accum_rec_body): pk records (pk * code_bytes
     * <= 64, one super-block) in one zmm, lane 8h + pk·b + r = half h of
     * block b of record r; per level a vpermb puts each lane's bytes in its
     * dword (mperm), fields by per-lane shifts (msh). 0: not used. */
    int pk;
    size_t cb;             /* code bytes the tables were built for (+outliers later strides over longer rows) */
    uint8_t mperm[POLAR_LEVELS + 1][64];
    int32_t msh[POLAR_LEVELS + 1][4][16];
    uint8_t mrad[64];      /* vpermb indices of each lane's radius: word (f16) or dword (f32) L */
    uint16_t mlanes;       /* lanes of a present block */
    int16_t mpos[128];     /* position 16z + lane -> coordinate (-1: none) */
} polar_fast;

/* Places the field [a, a + w) (bits from the record start) in a chunk of
 * the pass: one that holds it inside one of its dwords, else a new chunk at
 * byte a / 8. 0: more than POLAR_LCH chunks needed. */
static int lane_field(polar_lpass *ps, size_t a, int w, uint8_t *xi, uint8_t *sh) {
    for (int c = 0; c < ps->nch; c++) {
        const size_t c0 = (size_t)ps->choff[c] * 8;
        if (a < c0 || a + (size_t)w > c0 + 128 || (a - c0) % 32 + (size_t)w > 32) continue;
        *xi = (uint8_t)(4 * c + (a - c0) / 32);
        *sh = (uint8_t)((a - c0) % 32);
        return 1;
    }
    if (ps->nch == POLAR_LCH || a % 8 + (size_t)w > 32) return 0;
    ps->choff[ps->nch++] = (uint16_t)(a / 8);
    return lane_field(ps, a, w, xi, sh);
}

/* The passes of the record-lane score kernel (B <= 4, L = 4). */
static int lane_build(const kvq_plan *p, const polar_priv *P, polar_fast *F) {
    const int d = p->d, nblk = d / 16, B = P->b[1], b2 = P->b[2];
    const int sbits = (int)scale_bytes(p) * 8;
    const size_t a0 = (size_t)P->m * scale_bytes(p) * 8; /* first angle bit */
    if (B > 4 || p->code_bytes > POLAR_LCB) return 0;
    for (int s = 0; s < F->nsb; s++) {
        polar_lpass *ps = &F->lp[s];
        ps->nb = nblk - 8 * s < 8 ? nblk - 8 * s : 8;
        int ok = 1;
        for (int b = 0; b < ps->nb; b++) ok &= lane_field(ps, (size_t)(8 * s + b) * sbits, sbits, &ps->blk[b].xr, &ps->blk[b].sr);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + (size_t)(8 * (8 * s + b)) * B, 8 * B, &ps->blk[b].x1, &ps->blk[b].s1);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[2] + (size_t)(8 * s + b) * 4 * b2, 4 * b2, &ps->blk[b].x2, &ps->blk[b].s2);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[3] + (size_t)(8 * s + b) * 2 * b2, 2 * b2, &ps->blk[b].x3, &ps->blk[b].s3);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[4] + (size_t)(8 * s + b) * b2, b2, &ps->blk[b].x4, &ps->blk[b].s4);
        if (!ok || (B == 4 && ps->blk[0].s1)) return 0;
        for (int b = 0; b < ps->nb; b++) {
            const polar_lblk *D = &ps->blk[b];
            for (int i = 0; i < 64; i++) {
                const int u = i & 3, hi = 32 * ((i >> 2) & 1);
                const int o[5] = {D->s4, D->s3 + b2 * (u >> 1) - b2, D->s2 + b2 * u - 2 * b2, D->s1 + 2 * u * B,
                                  D->s1 + (2 * u + 1) * B};
                for (int c = 0; c < 5; c++) ps->ms[b][c][i] = (uint8_t)((o[c] + hi) & 63);
            }
        }
    }
    return 1;
}

/* Tables of the whole-record accumulate (see polar_fast.pk). */
static void rec_build(const kvq_plan *p, const polar_priv *P, polar_fast *F) {
    const int nblk = p->d / 16, B = P->b[1], b2 = P->b[2], sb = (int)scale_bytes(p);
    const size_t cb = p->code_bytes, a0 = (size_t)P->m * sb * 8;
    int pk = 0;
    for (int k = 4; k >= 1; k /= 2)
        if (nblk <= 8 / k && (size_t)k * cb <= 64) {
            pk = k;
            break;
        }
    if (!pk) return;
    F->pk = pk;
    F->cb = cb;
    memset(F->mpos, 0xff, sizeof F->mpos);
    for (int lane = 0; lane < 16; lane++) {
        const int h = lane >> 3, b = (lane & 7) / pk, r = lane % pk;
        const size_t rb = (size_t)r * cb * 8; /* record r's first bit */
        /* first field bit and field width of each level */
        size_t f0[POLAR_LEVELS + 1];
        int fw[POLAR_LEVELS + 1];
        f0[1] = a0 + (size_t)(8 * b + 4 * h) * B, fw[1] = B;
        f0[2] = a0 + P->bitoff[2] + (size_t)(4 * b + 2 * h) * b2, fw[2] = b2;
        f0[3] = a0 + P->bitoff[3] + (size_t)(2 * b + h) * b2, fw[3] = b2;
        f0[4] = a0 + P->bitoff[4] + (size_t)b * b2, fw[4] = b2;
        const int present = b < nblk;
        if (present) F->mlanes |= (uint16_t)(1u << lane);
        for (int l = 1; l <= 4; l++) {
            const size_t bit = present ? rb + f0[l] : 0, byte = bit / 8;
            for (int k = 0; k < 4; k++) F->mperm[l][4 * lane + k] = (uint8_t)(byte + k < 64 ? byte + k : 63);
            for (int m = 0; m < 4; m++) F->msh[l][m][lane] = (int32_t)(bit - 8 * byte) + m * fw[l];
        }
        for (int k = 0; k < sb; k++) F->mrad[sb * lane + k] = (uint8_t)(present ? r * cb + (size_t)b * sb + k : 0);
        for (int z = 0; z < 8 && present; z++) F->mpos[16 * z + lane] = (int16_t)(16 * b + 8 * h + z);
    }
}

static polar_fast *fast_build(const kvq_plan *p, const polar_priv *P) {
    const int d = p->d, nblk = d / 16;
    if (P->L != 4 || p->bits > 6) return NULL;
    polar_fast *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    F->nsb = (nblk + 7) / 8;
    for (int l = 1; l <= 4; l++) {
        const int f = 16 >> l, b = P->b[l], r = (int)(P->bitoff[l] & 7);
        F->wst[l] = P->bitoff[l] >> 3;
        F->wsb[l] = (size_t)f * b; /* 8 blocks x f fields x b bits / 8 */
        for (int lane = 0; lane < 16; lane++) {
            const int h = lane >> 3, blk = lane & 7;
            const int o = r + (blk * f + (l < 4 ? h * (f / 2) : 0)) * b;
            for (int k = 0; k < 4; k++) F->perm[l][4 * lane + k] = (uint8_t)((o >> 3) + k);
            for (int m = 0; m < 4; m++) F->sh[l][m][lane] = (o & 7) + m * b;
        }
        for (int s = 0; s < F->nsb; s++) {
            const size_t st = F->wst[l] + (size_t)s * F->wsb[l];
            const size_t len = P->ang_bytes - st < 64 ? P->ang_bytes - st : 64;
            F->wmask[l][s] = len >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << len) - 1);
        }
    }
    if (p->bits == 4 && d % 128 == 0) {
        /* Byte-aligned levels of 8 blocks per super-block: level 1 is one
         * dword per block (fields 4h + m at 16h + 4m), level 2 one byte per
         * block (4h + 2m), level 3 one dword per super-block (field 2·blk + h
         * at 4·blk + 2h), level 4 one 16-bit word (2·blk). */
        F->direct = 1;
        for (int l = 1; l <= 4; l++) F->off[l] = P->bitoff[l] >> 3;
        for (int lane = 0; lane < 16; lane++) {
            const int h = lane >> 3, blk = lane & 7;
            for (int m = 0; m < 4; m++) {
                F->sh[1][m][lane] = 16 * h + 4 * m;
                F->sh[2][m][lane] = 4 * h + 2 * m;
                F->sh[3][m][lane] = 4 * blk + 2 * h;
                F->sh[4][m][lane] = 2 * blk;
            }
        }
    }
    const int n4 = P->cb[4].n;
    for (int lane = 0; lane < 16; lane++) F->add4[lane] = lane >= 8 ? n4 : 0;
    for (int k = 0; k < n4; k++) F->t4[k] = P->cosc[4][k], F->t4[n4 + k] = P->sinc[4][k];
    for (int l = 1; l <= 4; l++) {
        const int n = P->cb[l].n, span = n < 16 ? 16 : n;
        for (int k = 0; k < span; k++) F->ct[l][k] = P->cosc[l][k % n], F->st[l][k] = P->sinc[l][k % n];
    }
    for (int s = 0; s < F->nsb; s++) {
        const int nb = nblk - 8 * s < 8 ? nblk - 8 * s : 8;
        F->rmask[s] = (uint8_t)((1u << nb) - 1);
    }
    for (int t = 0; t < F->nsb * 128; t++) {
        const int s = t >> 7, z = (t >> 4) & 7, lane = t & 15, blk = 8 * s + (lane & 7);
        F->pos2c[t] = (int16_t)(blk < nblk ? 16 * blk + 8 * (lane >> 3) + z : -1);
    }
    F->lane = lane_build(p, P, F);
    rec_build(p, P, F);
    return F;
}

#define KVQ_TARGET_POLAR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2")))
#define PAI static inline __attribute__((always_inline))

typedef struct { __m512 c1[4], s1[4], c2, s2, c3, s3, t4[2]; } polar_tabs;

KVQ_TARGET_POLAR PAI __m512 plut(const __m512 *t, __m512i idx, const int n) {
    if (n <= 16) return _mm512_permutexvar_ps(idx, t[0]);
    if (n <= 32) return _mm512_permutex2var_ps(t[0], idx, t[1]);
    const __m512 lo = _mm512_permutex2var_ps(t[0], idx, t[1]), hi = _mm512_permutex2var_ps(t[2], idx, t[3]);
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo, hi);
}

KVQ_TARGET_POLAR PAI polar_tabs tabs_load(const polar_priv *P, const polar_fast *F) {
    polar_tabs T;
    (void)P;
    for (int k = 0; k < 4; k++) T.c1[k] = _mm512_loadu_ps(F->ct[1] + 16 * k), T.s1[k] = _mm512_loadu_ps(F->st[1] + 16 * k);
    T.c2 = _mm512_loadu_ps(F->ct[2]), T.s2 = _mm512_loadu_ps(F->st[2]);
    T.c3 = _mm512_loadu_ps(F->ct[3]), T.s3 = _mm512_loadu_ps(F->st[3]);
    T.t4[0] = _mm512_loadu_ps(F->t4), T.t4[1] = _mm512_loadu_ps(F->t4 + 16);
    return T;
}

KVQ_TARGET_POLAR PAI __m512i win(const polar_fast *F, const uint8_t *ang, int l, int s) {
    return _mm512_permutexvar_epi8(_mm512_loadu_si512(F->perm[l]),
                                   _mm512_maskz_loadu_epi8(F->wmask[l][s], ang + F->wst[l] + (size_t)s * F->wsb[l]));
}

/* Direct (B = 4, 128 | d): the lanes' words of level l, super-block s. */
KVQ_TARGET_POLAR PAI __m512i dwin(const polar_fast *F, const uint8_t *ang, int l, int s) {
    const uint8_t *a = ang + F->off[l];
    if (l == 1) return _mm512_broadcast_i32x8(_mm256_loadu_si256((const __m256i *)(a + 32 * (size_t)s)));
    if (l == 2) {
        uint64_t v;
        memcpy(&v, a + 8 * (size_t)s, 8);
        return _mm512_cvtepu8_epi32(_mm_set1_epi64x((long long)v));
    }
    if (l == 3) {
        uint32_t v;
        memcpy(&v, a + 4 * (size_t)s, 4);
        return _mm512_set1_epi32((int)v);
    }
    uint16_t v;
    memcpy(&v, a + 2 * (size_t)s, 2);
    return _mm512_set1_epi32(v);
}

/* Field m of the lanes of level l at bit 0; the bits above are the next
 * fields, which the (periodic) table permutes ignore. */
KVQ_TARGET_POLAR PAI __m512i field(const polar_fast *F, __m512i x, int l, int m) {
    return _mm512_srlv_epi32(x, _mm512_loadu_si512(F->sh[l][m]));
}

/* Super-block s of a record (rad: its radii, ang: its angle stream). half < 0:
 * y[8], y[4·b2 + 2·b1 + b0]; half = b2: y[4], y[2·b1 + b0] of that b2. */
/* Levels 2 and 1 of half b2: y[2·b1 + b0] from R2[b2] and the lanes' words. */
/* sh: the lanes' field shifts, F->sh (this layout) or F->msh (record lanes,
 * rec_lower below). */
KVQ_TARGET_POLAR PAI void lower_levels(const int32_t (*sh)[4][16], const polar_tabs *T, __m512 R2, __m512i x2,
                                       __m512i x1, const int b2, const int B, __m512 *y) {
    const int n1 = 1 << B, n = 1 << (B - 2);
    const __m512i i2 = _mm512_srlv_epi32(x2, _mm512_loadu_si512(sh[2][b2]));
    const __m512 R1[2] = {_mm512_mul_ps(R2, plut(&T->c2, i2, n)), _mm512_mul_ps(R2, plut(&T->s2, i2, n))};
    for (int b1 = 0; b1 < 2; b1++) {
        const __m512i i1 = _mm512_srlv_epi32(x1, _mm512_loadu_si512(sh[1][2 * b2 + b1]));
        y[2 * b1] = _mm512_mul_ps(R1[b1], plut(T->c1, i1, n1));
        y[2 * b1 + 1] = _mm512_mul_ps(R1[b1], plut(T->s1, i1, n1));
    }
}
KVQ_TARGET_POLAR PAI void fast_lower(const polar_fast *F, const polar_tabs *T, __m512 R2, __m512i x2, __m512i x1,
                                     const int b2, const int B, __m512 *y) {
    lower_levels(F->sh, T, R2, x2, x1, b2, B, y);
}

/* Radius and levels 4, 3 of super-block s: R2[b2] (half < 0: both, else
 * that one), and the lanes' words of levels 2 and 1. */
KVQ_TARGET_POLAR PAI void fast_upper(const polar_fast *F, const polar_tabs *T, const uint8_t *rad, const uint8_t *ang,
                                     int s, const int sc32, const int B, const int half, const int D, __m512 *R2,
                                     __m512i *x2, __m512i *x1) {
    const int n = 1 << (B - 2);
    const __m256 r8 = sc32 ? _mm256_maskz_loadu_ps(F->rmask[s], rad + 32 * (size_t)s)
                           : _mm256_cvtph_ps(_mm_maskz_loadu_epi16(F->rmask[s], rad + 16 * (size_t)s));
    const __m512i x4 = D ? dwin(F, ang, 4, s) : win(F, ang, 4, s);
    const __m512i i4 = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(x4, _mm512_loadu_si512(F->sh[4][0])),
                                                 _mm512_set1_epi32(n - 1), _mm512_loadu_si512(F->add4), 0xEA);
    const __m512 R3 = _mm512_mul_ps(_mm512_broadcast_f32x8(r8), plut(T->t4, i4, 2 * n));
    const __m512i i3 = field(F, D ? dwin(F, ang, 3, s) : win(F, ang, 3, s), 3, 0);
    R2[0] = R2[1] = R3;
    if (half != 1) R2[0] = _mm512_mul_ps(R3, plut(&T->c3, i3, n));
    if (half != 0) R2[1] = _mm512_mul_ps(R3, plut(&T->s3, i3, n));
    *x2 = D ? dwin(F, ang, 2, s) : win(F, ang, 2, s);
    *x1 = D ? dwin(F, ang, 1, s) : win(F, ang, 1, s);
}

/* Super-block s of a record (rad: its radii, ang: its angle stream):
 * y[4·b2 + 2·b1 + b0]. */
KVQ_TARGET_POLAR PAI void fast_decode(const polar_fast *F, const polar_tabs *T, const uint8_t *rad, const uint8_t *ang,
                                      int s, const int sc32, const int B, const int D, __m512 *y) {
    __m512 R2[2];
    __m512i x2, x1;
    fast_upper(F, T, rad, ang, s, sc32, B, -1, D, R2, &x2, &x1);
    fast_lower(F, T, R2[0], x2, x1, 0, B, y);
    fast_lower(F, T, R2[1], x2, x1, 1, B, y + 4);
}

/* Records [i0, n) (scores rows are n apart). */
KVQ_TARGET_POLAR PAI void score_fast_body(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t i0,
                                          size_t n, float *scores, const int B, const int D) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int nsb = F->nsb, sc32 = p->o.scale32;
    const size_t cb = p->code_bytes, ra = (size_t)P->m * scale_bytes(p), qs = p->qfloats;
    float qb[4][KVQ_DIM_MAX] __attribute__((aligned(64)));
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        for (size_t j = 0; j < 4; j++) {
            const float *src = qp + (j0 + (j < m ? j : 0)) * qs;
            for (int t = 0; t < nsb * 128; t++) qb[j][t] = F->pos2c[t] >= 0 ? src[F->pos2c[t]] : 0.0f;
        }
        for (size_t i = i0; i < n; i++) {
            const uint8_t *rec = codes + i * cb;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int s = 0; s < nsb; s++) {
                __m512 y[8];
                fast_decode(F, &T, rec, rec + ra, s, sc32, B, D, y);
#pragma GCC unroll 8
                for (int z = 0; z < 8; z++) {
                    const size_t o = (size_t)s * 128 + 16 * (size_t)z;
                    a0 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[0] + o), a0);
                    a1 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[1] + o), a1);
                    a2 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[2] + o), a2);
                    a3 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[3] + o), a3);
                }
            }
            float sc[4];
            _mm_storeu_ps(sc, hsum4_512(a0, a1, a2, a3));
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] = sc[j];
        }
    }
}

/* Accumulate rows j0 .. j0 + NR - 1 (NR <= 4): per super-block, chunks of
 * POLAR_ACH records in two passes (b2 = 0, 1; NR rows x 4 vectors in
 * registers each). The first pass decodes the upper levels and keeps R2[1]
 * and the level-2 / level-1 words for the second. */
#define POLAR_ACH 32
KVQ_TARGET_POLAR PAI void accum_fast_body(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,
                                          float *acc, const int B, const int D, const int NR) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int nsb = F->nsb, sc32 = p->o.scale32, d = p->d;
    const size_t cb = p->code_bytes, ra = (size_t)P->m * scale_bytes(p);
    float part[2][4][4][16] __attribute__((aligned(64))); /* fixed sizes: NR-sized arrays would be VLAs */
    __m512 keep[POLAR_ACH][3];
    const float *wr[4];
    for (int j = 0; j < NR; j++) wr[j] = w + (j0 + (size_t)j) * n;
    for (int s = 0; s < nsb; s++) {
        memset(part, 0, sizeof part);
        for (size_t c0 = 0; c0 < n; c0 += POLAR_ACH) {
            const size_t ce = n - c0 < POLAR_ACH ? n : c0 + POLAR_ACH;
            for (int b2 = 0; b2 < 2; b2++) {
                __m512 a[4][4];
                for (int j = 0; j < NR; j++)
                    for (int z = 0; z < 4; z++) a[j][z] = _mm512_load_ps(part[b2][j][z]);
#define ACC_Y                                                                                                        \
    do {                                                                                                             \
        __m512 g[4];                                                                                                 \
        for (int j = 0; j < NR; j++) g[j] = _mm512_set1_ps(wr[j][i]);                                               \
        _Pragma("GCC unroll 4") for (int z = 0; z < 4; z++) _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)  \
            a[j][z] = _mm512_fmadd_ps(g[j], y[z], a[j][z]);                                                          \
    } while (0)
                if (b2 == 0) { /* two loops, not a branch per record */
#pragma GCC unroll 2
                    for (size_t i = c0; i < ce; i++) {
                        __m512 y[4];
                        const uint8_t *rec = codes + i * cb;
                        __m512 R2[2];
                        __m512i x2, x1;
                        fast_upper(F, &T, rec, rec + ra, s, sc32, B, -1, D, R2, &x2, &x1);
                        keep[i - c0][0] = R2[1];
                        keep[i - c0][1] = _mm512_castsi512_ps(x2);
                        keep[i - c0][2] = _mm512_castsi512_ps(x1);
                        fast_lower(F, &T, R2[0], x2, x1, 0, B, y);
                        ACC_Y;
                    }
                } else {
#pragma GCC unroll 2
                    for (size_t i = c0; i < ce; i++) {
                        __m512 y[4];
                        fast_lower(F, &T, keep[i - c0][0], _mm512_castps_si512(keep[i - c0][1]),
                                   _mm512_castps_si512(keep[i - c0][2]), 1, B, y);
                        ACC_Y;
                    }
                }
#undef ACC_Y
                for (int j = 0; j < NR; j++)
                    for (int z = 0; z < 4; z++) _mm512_store_ps(part[b2][j][z], a[j][z]);
            }
        }
        for (int j = 0; j < NR; j++) {
            float *r = acc + (j0 + (size_t)j) * (size_t)d;
            for (int b2 = 0; b2 < 2; b2++)
                for (int z = 0; z < 4; z++)
                    for (int lane = 0; lane < 16; lane++) {
                        const int c = F->pos2c[s * 128 + (4 * b2 + z) * 16 + lane];
                        if (c >= 0) r[c] += part[b2][j][z][lane];
                    }
        }
    }
}

/*
 * Accumulate, whole records (polar_fast.pk): the pk records of a group come
 * in one masked 64-byte load; per level one vpermb gives every lane its
 * bytes (no per-level windows), the radii one vpermw (f16) or vpermd (f32).
 * The expansion is fast_upper / fast_lower's (same products, same order);
 * the weights of a lane's record come from one broadcast (pk = 2: the two
 * records' weights as a qword, lanes alternate; pk = 4: four floats). NR
 * rows (1..4) per expansion, two passes (b2 = 0, 1) of NR x 4 accumulators
 * per chunk of POLAR_ACH groups as in accum_fast_body.
 */
KVQ_TARGET_POLAR PAI __m512i mfield(const polar_fast *F, __m512i x, int l, int m) {
    return _mm512_srlv_epi32(x, _mm512_loadu_si512(F->msh[l][m]));
}

KVQ_TARGET_POLAR PAI void rec_lower(const polar_fast *F, const polar_tabs *T, __m512 R2, __m512i x2, __m512i x1, const int b2,
                                    const int B, __m512 *y) {
    lower_levels(F->msh, T, R2, x2, x1, b2, B, y);
}

KVQ_TARGET_POLAR PAI __m512 rec_weight(const float *w, const int PK) {
    if (PK == 1) return _mm512_set1_ps(w[0]);
    if (PK == 2) {
        double v;
        memcpy(&v, w, 8);
        return _mm512_castpd_ps(_mm512_set1_pd(v));
    }
    return _mm512_broadcast_f32x4(_mm_loadu_ps(w));
}

KVQ_TARGET_POLAR PAI void accum_rec_body(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,
                                         float *acc, const int B, const int NR, const int PK) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int sc32 = p->o.scale32, nn = 1 << (B - 2);
    const size_t cb = p->code_bytes, d = (size_t)p->d;
    const __mmask16 lanes = F->mlanes;
    float part[2][4][4][16] __attribute__((aligned(64))); /* fixed sizes: NR-sized arrays would be VLAs */
    __m512 keep[POLAR_ACH][3];
    const float *wr[4];
    for (int j = 0; j < NR; j++) wr[j] = w + (j0 + (size_t)j) * n;
    memset(part, 0, sizeof part);
    const size_t chunk = (size_t)POLAR_ACH * PK;
    const __mmask64 lmf = PK * cb >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (PK * cb)) - 1); /* PK records */
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        const size_t ce = n - c0 < chunk ? n : c0 + chunk;
        for (int b2 = 0; b2 < 2; b2++) {
            __m512 a[4][4];
            for (int j = 0; j < NR; j++)
                for (int z = 0; z < 4; z++) a[j][z] = _mm512_load_ps(part[b2][j][z]);
            /* full groups [c0, cf), then the last one if it is short (its missing weights zero) */
            const size_t cf = ce == n ? c0 + (ce - c0) / PK * PK : ce;
#define REC_UPPER(LM)                                                                                                \
    const __m512i R = _mm512_maskz_loadu_epi8((LM), codes + i * cb);                                                 \
    const __m512i rb = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mrad), R);                                      \
    const __m512 rad = sc32 ? _mm512_maskz_mov_ps(lanes, _mm512_castsi512_ps(rb))                                   \
                            : _mm512_maskz_cvtph_ps(lanes, _mm512_castsi512_si256(rb));                              \
    const __m512i x4 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[4]), R);                                 \
    const __m512i i4 =                                                                                               \
        _mm512_ternarylogic_epi32(mfield(F, x4, 4, 0), _mm512_set1_epi32(nn - 1), _mm512_loadu_si512(F->add4), 0xEA); \
    const __m512 R3 = _mm512_mul_ps(rad, plut(T.t4, i4, 2 * nn));                                                   \
    const __m512i i3 = mfield(F, _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[3]), R), 3, 0);               \
    const __m512 R20 = _mm512_mul_ps(R3, plut(&T.c3, i3, nn));                                                       \
    const __m512i x2 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[2]), R);                                 \
    const __m512i x1 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[1]), R);                                 \
    keep[g][0] = _mm512_mul_ps(R3, plut(&T.s3, i3, nn));                                                             \
    keep[g][1] = _mm512_castsi512_ps(x2);                                                                            \
    keep[g][2] = _mm512_castsi512_ps(x1);                                                                            \
    rec_lower(F, &T, R20, x2, x1, 0, B, y)
#define REC_KEPT rec_lower(F, &T, keep[g][0], _mm512_castps_si512(keep[g][1]), _mm512_castps_si512(keep[g][2]), 1, B, y)
#define REC_ACC(WSRC)                                                                                                \
    do {                                                                                                             \
        __m512 g8[4];                                                                                                \
        for (int j = 0; j < NR; j++) g8[j] = rec_weight(WSRC, PK);                                                  \
        _Pragma("GCC unroll 4") for (int z = 0; z < 4; z++) _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)  \
            a[j][z] = _mm512_fmadd_ps(g8[j], y[z], a[j][z]);                                                         \
    } while (0)
            size_t i = c0, g = 0;
            if (b2 == 0)
                for (; i < cf; i += PK, g++) {
                    __m512 y[4];
                    REC_UPPER(lmf);
                    REC_ACC(wr[j] + i);
                }
            else
                for (; i < cf; i += PK, g++) {
                    __m512 y[4];
                    REC_KEPT;
                    REC_ACC(wr[j] + i);
                }
            if (i < ce) {
                __m512 y[4];
                float wt[4][4] = {{0}};
                for (int j = 0; j < NR; j++)
                    for (size_t k = 0; k < ce - i; k++) wt[j][k] = wr[j][i + k];
                if (b2 == 0) {
                    REC_UPPER(((__mmask64)1 << ((ce - i) * cb)) - 1);
                } else {
                    REC_KEPT;
                }
                REC_ACC(wt[j]);
            }
#undef REC_UPPER
#undef REC_KEPT
#undef REC_ACC
            for (int j = 0; j < NR; j++)
                for (int z = 0; z < 4; z++) _mm512_store_ps(part[b2][j][z], a[j][z]);
        }
    }
    for (int j = 0; j < NR; j++) {
        float *r = acc + (j0 + (size_t)j) * d;
        for (int b2 = 0; b2 < 2; b2++)
            for (int z = 0; z < 4; z++)
                for (int lane = 0; lane < 16; lane++) {
                    const int c = F->mpos[16 * (4 * b2 + z) + lane];
                    if (c >= 0) r[c] += part[b2][j][z][lane];
                }
    }
}

#define DEF_REC_ACCUM(B, NR, PK)                                                                                     \
    KVQ_TARGET_POLAR static void accum_rec_##B##_##NR##_##PK(const kvq_plan *p, const float *w, size_t j0,          \
                                                             const uint8_t *codes, size_t n, float *acc) {           \
        accum_rec_body(p, w, j0, codes, n, acc, B, NR, PK);                                                          \
    }
#define DEF_REC_ACCUM_B(B)                                                                                           \
    DEF_REC_ACCUM(B, 1, 1) DEF_REC_ACCUM(B, 2, 1) DEF_REC_ACCUM(B, 3, 1) DEF_REC_ACCUM(B, 4, 1)                     \
    DEF_REC_ACCUM(B, 1, 2) DEF_REC_ACCUM(B, 2, 2) DEF_REC_ACCUM(B, 3, 2) DEF_REC_ACCUM(B, 4, 2)                     \
    DEF_REC_ACCUM(B, 1, 4) DEF_REC_ACCUM(B, 2, 4) DEF_REC_ACCUM(B, 3, 4) DEF_REC_ACCUM(B, 4, 4)
DEF_REC_ACCUM_B(3) DEF_REC_ACCUM_B(4) DEF_REC_ACCUM_B(5) DEF_REC_ACCUM_B(6)
#define REC_ACCUM_ROW(B) {{accum_rec_##B##_1_1, accum_rec_##B##_2_1, accum_rec_##B##_3_1, accum_rec_##B##_4_1},        \
                          {accum_rec_##B##_1_2, accum_rec_##B##_2_2, accum_rec_##B##_3_2, accum_rec_##B##_4_2},        \
                          {accum_rec_##B##_1_4, accum_rec_##B##_2_4, accum_rec_##B##_3_4, accum_rec_##B##_4_4}}


#define POLAR_FAST_B(X) X(3) X(4) X(5) X(6)
#define DEF_POLAR_FAST(B)                                                                                          \
    KVQ_TARGET_POLAR static void score_fast_##B(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, \
                                                size_t n, float *scores) {                                         \
        score_fast_body(p, qp, nq, codes, 0, n, scores, B, 0);                                                         \
    }
POLAR_FAST_B(DEF_POLAR_FAST)
/* accum_fast_body per (B, direct, rows): B = 3..6 with windows, B = 4 direct */
#define DEF_FAST_ACCUM(NAME, B, D, NR)                                                                               \
    KVQ_TARGET_POLAR static void NAME(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,  \
                                      float *acc) {                                                                  \
        accum_fast_body(p, w, j0, codes, n, acc, B, D, NR);                                                          \
    }
#define DEF_FAST_ACCUM_B(B, D, T)                                                                                    \
    DEF_FAST_ACCUM(accum_fast_##T##_1, B, D, 1) DEF_FAST_ACCUM(accum_fast_##T##_2, B, D, 2)                          \
    DEF_FAST_ACCUM(accum_fast_##T##_3, B, D, 3) DEF_FAST_ACCUM(accum_fast_##T##_4, B, D, 4)
DEF_FAST_ACCUM_B(3, 0, 3) DEF_FAST_ACCUM_B(4, 0, 4) DEF_FAST_ACCUM_B(5, 0, 5) DEF_FAST_ACCUM_B(6, 0, 6)
DEF_FAST_ACCUM_B(4, 1, 4d)
#define FAST_ACCUM_ROW(T) {accum_fast_##T##_1, accum_fast_##T##_2, accum_fast_##T##_3, accum_fast_##T##_4}

typedef void (*rows_accum_fn)(const kvq_plan *, const float *, size_t, const uint8_t *, size_t, float *);
/* rows in ceil(nq / 4) groups of nearly equal size (nq = 6: 3 + 3), fn[nr - 1] per group */
static void accum_rows(const kvq_plan *p, const rows_accum_fn fn[4], const float *w, size_t nq, const uint8_t *codes,
                       size_t n, float *acc) {
    const size_t ng = (nq + 3) / 4;
    for (size_t g = 0, j0 = 0; g < ng; g++) {
        const size_t nr = (nq - j0) / (ng - g) + ((nq - j0) % (ng - g) != 0);
        fn[nr - 1](p, w, j0, codes, n, acc);
        j0 += nr;
    }
}

static void accum_fast(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    static const rows_accum_fn fn[5][4] = {FAST_ACCUM_ROW(3), FAST_ACCUM_ROW(4), FAST_ACCUM_ROW(5), FAST_ACCUM_ROW(6),
                                           FAST_ACCUM_ROW(4d)};
    const polar_priv *P = p->priv;
    accum_rows(p, fn[P->fast->direct ? 4 : P->b[1] - 3], w, nq, codes, n, acc);
}

static void accum_rec(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    static const rows_accum_fn fn[4][3][4] = {REC_ACCUM_ROW(3), REC_ACCUM_ROW(4), REC_ACCUM_ROW(5), REC_ACCUM_ROW(6)};
    const polar_priv *P = p->priv;
    if (p->code_bytes != P->fast->cb) { /* records inside longer rows (+outliers): the per-record kernel */
        accum_fast(p, w, nq, codes, n, acc);
        return;
    }
    const int pk = P->fast->pk, pki = pk == 1 ? 0 : pk == 2 ? 1 : 2;
    accum_rows(p, fn[P->b[1] - 3][pki], w, nq, codes, n, acc);
}

/*
 * 8-bit scores (B <= 4, every 16 | d), lanes = 16 records. The chunks of a
 * pass (lane_build) are transposed (dwords16_transpose, records in the order
 * that makes lane i record i). Per block, each lane's 4 bytes are 4 pairs:
 * the even ones (2u, u = 2h + e) and then the odd ones (2u + 1). Level-1
 * indices: B = 4 nibbles by masking (even) or a shift and masking (odd), B = 3
 * by vpmultishiftqb, with u in bits 4-5 for a vpermb into the row's 64-byte
 * T8 table of those 4 pairs. g8: k4, k3, k2 gathered into one 6-bit index by
 * three vpmultishiftqb and two bit selects, XOR (mirrored sines of levels 3,
 * 4), one vpermb per parity. Per row: two vpermb, two vpdpbusd (u8 g8 x s8
 * T8, the block's exact integer sum), one convert, one FMA with the radius.
 * The last group of records goes through a zero-padded copy (the chunks read
 * up to 15 bytes past a record). Same integers as score_i8.
 */
KVQ_TARGET_POLAR PAI __m512i srlc(__m512i x, int n) { return _mm512_srlv_epi32(x, _mm512_set1_epi32(n)); }
#define KVQ_TARGET_POLARI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vnni,avx2,fma,f16c,bmi2")))

KVQ_TARGET_POLARI PAI void score_lane_body(const kvq_plan *p, const float *qp, size_t j0, const uint8_t *codes, size_t n,
                                           float *scores, const int B, const int NR) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const int sc32 = p->o.scale32, w = B - 2, d = p->d;
    const size_t cb = p->code_bytes, qs = p->qfloats;
    uint8_t pad[16 * POLAR_LCB + 16];
    const __m512i G0 = _mm512_loadu_si512(P->g8[0]), G1 = _mm512_loadu_si512(P->g8[1]);
    const __m512i mlow = _mm512_set1_epi8((char)((1 << w) - 1)), mmid = _mm512_set1_epi8((char)(((1 << w) - 1) << w));
    const int mw = (1 << w) - 1;
    const __m512i kx = _mm512_set1_epi32((int)((uint32_t)(mw << w) << 8 | (uint32_t)mw << 16 | (uint32_t)(mw | mw << w) << 24));
    const __m512i m0f = _mm512_set1_epi8(0x0f), slot = _mm512_set1_epi32(0x30201000);
    const uint8_t *t8[4];
    __m512 cq[4];
    for (int j = 0; j < NR; j++) {
        const float *q = qp + (j0 + (size_t)j) * qs;
        t8[j] = (const uint8_t *)(q + d + 16);
        cq[j] = _mm512_set1_ps(q[d]);
    }
    for (int s = 0; s < F->nsb; s++) {
        const polar_lpass *ps = &F->lp[s];
        for (size_t i = 0; i < n; i += 16) {
            const uint8_t *base = codes + i * cb;
            __mmask16 keep = 0xFFFF;
            if ((i + 16) * cb + 16 > n * cb) { /* the chunks would read past the last record */
                const size_t m = n - i < 16 ? n - i : 16;
                memcpy(pad, base, m * cb);
                memset(pad + m * cb, 0, (16 - m) * cb + 16);
                base = pad;
                keep = (__mmask16)((1u << m) - 1);
            }
            const uint8_t *r[16];
            for (int k = 0; k < 16; k++) r[k] = base + (size_t)(4 * (k & 3) + (k >> 2)) * cb; /* lane 4a+b: record 4a+b */
            __m512i X[4 * POLAR_LCH];
            for (int c = 0; c < ps->nch; c++) dwords16_transpose(r, ps->choff[c], 16, X + 4 * c);
            __m512 acc[4];
            for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
            for (int b = 0; b < ps->nb; b++) {
                const polar_lblk *D = &ps->blk[b];
                const uint8_t(*ms)[64] = ps->ms[b];
                const __m512 rad = sc32 ? _mm512_castsi512_ps(X[D->xr])
                                        : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(srlc(X[D->xr], D->sr)));
                __m512i ia, ib;
                if (B == 4) {
                    ia = _mm512_ternarylogic_epi32(X[D->x1], m0f, slot, 0xEA);
                    ib = _mm512_ternarylogic_epi32(_mm512_srli_epi32(X[D->x1], 4), m0f, slot, 0xEA);
                } else {
                    ia = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[3]), X[D->x1]), m0f,
                                                   slot, 0xEA);
                    ib = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[4]), X[D->x1]), m0f,
                                                   slot, 0xEA);
                }
                const __m512i a4 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[0]), X[D->x4]);
                const __m512i a3 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[1]), X[D->x3]);
                const __m512i a2 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[2]), X[D->x2]);
                const __m512i gi = _mm512_xor_si512(
                    _mm512_ternarylogic_epi32(mlow, a4, _mm512_ternarylogic_epi32(mmid, a3, a2, 0xCA), 0xCA), kx);
                const __m512i ga = _mm512_permutexvar_epi8(gi, G0), gb = _mm512_permutexvar_epi8(gi, G1);
                const size_t to = 128 * (size_t)(8 * s + b);
#pragma GCC unroll 4
                for (int j = 0; j < NR; j++) {
                    const __m512i ta = _mm512_permutexvar_epi8(ia, _mm512_loadu_si512(t8[j] + to));
                    const __m512i tb = _mm512_permutexvar_epi8(ib, _mm512_loadu_si512(t8[j] + to + 64));
                    const __m512i I = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ga, ta), gb, tb);
                    acc[j] = _mm512_fmadd_ps(rad, _mm512_cvtepi32_ps(I), acc[j]);
                }
            }
            for (int j = 0; j < NR; j++) {
                float *sr = scores + (j0 + (size_t)j) * n + i;
                const __m512 v = _mm512_mul_ps(acc[j], cq[j]);
                _mm512_mask_storeu_ps(sr, keep, s ? _mm512_add_ps(_mm512_maskz_loadu_ps(keep, sr), v) : v);
            }
        }
    }
}

#define DEF_LANE_SCORE(B, NR)                                                                                        \
    KVQ_TARGET_POLARI static void score_lane_##B##_##NR(const kvq_plan *p, const float *qp, size_t j0,              \
                                                        const uint8_t *codes, size_t n, float *scores) {             \
        score_lane_body(p, qp, j0, codes, n, scores, B, NR);                                                        \
    }
DEF_LANE_SCORE(3, 1) DEF_LANE_SCORE(3, 2) DEF_LANE_SCORE(3, 3) DEF_LANE_SCORE(3, 4)
DEF_LANE_SCORE(4, 1) DEF_LANE_SCORE(4, 2) DEF_LANE_SCORE(4, 3) DEF_LANE_SCORE(4, 4)

typedef void (*lane_score_fn)(const kvq_plan *, const float *, size_t, const uint8_t *, size_t, float *);
static void score_lane(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    static const lane_score_fn fn[2][4] = {{score_lane_3_1, score_lane_3_2, score_lane_3_3, score_lane_3_4},
                                           {score_lane_4_1, score_lane_4_2, score_lane_4_3, score_lane_4_4}};
    const polar_priv *P = p->priv;
    if (p->code_bytes > POLAR_LCB) { /* rows longer than the padded copy (+outliers): the reference */
        score_i8(p, qp, nq, codes, n, scores);
        return;
    }
    /* rows in ceil(nq / 4) groups of nearly equal size (nq = 6: 3 + 3) */
    const size_t ng = (nq + 3) / 4;
    for (size_t g = 0, j0 = 0; g < ng; g++) {
        const size_t nr = (nq - j0) / (ng - g) + ((nq - j0) % (ng - g) != 0);
        fn[P->b[1] - 3][nr - 1](p, qp, j0, codes, n, scores);
        j0 += nr;
    }
}
#endif

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
    p->encode = enc;
    p->decode = dec;
    p->prep = P->i8 ? prep_i8 : generic_prep_rot;
    p->score = P->i8 ? score_i8 : score;
    p->accum = accum;
#if KVQ_X86
    if (p->isa >= KVQ_ISA_AVX2) {
        p->encode = enc_avx2;
        p->decode = dec_avx2;
        if (P->i8) p->prep = prep_i8_avx2, p->score = score_i8_avx2;
        else p->score = score_avx2;
        p->accum = accum_avx2;
    }
    if (p->isa >= KVQ_ISA_AVX512 && p->vnni && (P->fast = fast_build(p, P)) != NULL) {
        if (!P->i8) switch (p->bits) {
#define CASE_POLAR_FAST(B) case B: p->score = score_fast_##B; break;
                POLAR_FAST_B(CASE_POLAR_FAST)
#undef CASE_POLAR_FAST
            }
        p->accum = accum_fast;
        if (P->fast->lane && P->i8) p->score = score_lane;
        if (P->fast->pk && !P->fast->direct) p->accum = accum_rec; /* direct (128 | d): broadcast loads, faster there */
    }
#endif
    return KVQ_OK;
}

const kvq_method kvq_method_polar = {"polar", 3, 8, 4, init, fini, 0};
