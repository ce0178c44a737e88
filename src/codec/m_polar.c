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
 * Score and accumulate decode one record at a time to a stack buffer (the
 * rotated domain) and take dot products / axpys there. AVX-512 plans use the
 * AVX2 kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "cpu.h"
#include "polar_cb.h"
#include "simd_util.h" /* immintrin.h on x86 */

#define POLAR_LEVELS 4
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
            _mm256_storeu_ps(bufa + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(code + 2 * j))));
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
#endif

static void fini(kvq_plan *p) {
    free(p->priv);
    p->priv = NULL;
}

static int init(kvq_plan *p) {
    const int d = p->d;
    int L = 0;
    while (L < POLAR_LEVELS && (d >> L) % 2 == 0 && (d >> L) > 1) L++;
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
    P->ang_bytes = (bits + 7) / 8;
    int rc = rot_init(&p->rot, d, p->seed, !p->o.norot, p->isa);
    if (rc) return rc;
    p->cb = P->cb[1];
    if (L >= 2) p->cb2 = P->cb[2];
    p->rotated = !p->o.norot;
    p->code_bytes = (size_t)P->m * scale_bytes(p) + P->ang_bytes;
    p->qfloats = (size_t)d;
    p->encode = enc;
    p->decode = dec;
    p->prep = generic_prep_rot;
    p->score = score;
    p->accum = accum;
#if KVQ_X86
    if (p->isa >= KVQ_ISA_AVX2) {
        p->encode = enc_avx2;
        p->decode = dec_avx2;
        p->score = score_avx2;
        p->accum = accum_avx2;
    }
#endif
    return KVQ_OK;
}

const kvq_method kvq_method_polar = {"polar", 3, 8, 4, init, fini};
