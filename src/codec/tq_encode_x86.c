/*
 * Fused tq encode for x86 (AVX-512): both randomized Hadamard rounds in
 * registers, norm, guess-and-correct (or binary-search) quantization,
 * least-squares scale and strided packing, one pass over each vector.
 *
 * Rows are encoded NV at a time (NV = 1, 2 or 4) with every step written once per
 * vector, so the compiler interleaves the vectors' dependency chains (the
 * in-register butterflies, the norm, its square root and division, the scale
 * sums); the horizontal sums of NV vectors share one reduction tree
 * (hsum4_512). The sums are trees in a fixed order that does not depend on
 * NV, so a row gets the same bytes alone or in a block. They differ from the
 * scalar reference (double sums) only in their last bits.
 * Kept apart from tq_kernels_x86.c (score, accumulate and decode kernels).
 */
#include <math.h>
#include <string.h>

#include "simd_util.h"
#include "tq_encode.h"
#include "tq_kernels.h"

#if KVQ_X86

#define AI __attribute__((always_inline))

/* 1 if every sub-field block of (d, b) is a multiple of `lanes` bytes. */
static int direct_ok(int d, int b, int lanes) {
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++)
        if ((d * kvq_strided_width(b, f) / 8) % lanes) return 0;
    return 1;
}

/* Shapes with a specialised body (constant d and b keep the vectors in registers). */
#define FUSED_SHAPES(X) X(128, 4) X(128, 3) X(128, 2) X(128, 1) X(64, 4) X(64, 2) X(256, 4) X(256, 3) X(256, 2)

int tq_encode_fused_ok(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b) {
    if (rot->kind != ROT_HADAMARD || d % 16 || cb->n > 16 || b < 1 || b > 8 || !direct_ok(d, b, 16)) return 0;
#define OK_CASE(D, B) if (d == D && b == B) return 1;
    FUSED_SHAPES(OK_CASE)
#undef OK_CASE
    return 0;
}

/* Sum of the ng vectors a[0..ng) as a fixed pairwise tree (a is clobbered). */
KVQ_TARGET_AVX512 static inline AI __m512 tree_sum(__m512 *a, const int ng) {
#pragma GCC unroll 8
    for (int h = 1; h < ng; h <<= 1)
#pragma GCC unroll 16
        for (int k = 0; k + h < ng; k += 2 * h) a[k] = _mm512_add_ps(a[k], a[k + h]);
    return a[0];
}

/* Lane j of a 4-float vector, broadcast to 16 lanes. */
KVQ_TARGET_AVX512 static inline AI __m512 bcast_lane(__m128 v, int j) {
    /* vpermps, not a byte shift: j need not be a compile-time constant (-O0) */
    return _mm512_permutexvar_ps(_mm512_set1_epi32(j), _mm512_castps128_ps512(v));
}

/* Strided packing of the indices id[0..d/16) (16 coordinates per register):
 * byte i of a w-bit block of S bytes holds coords i + k*S, k < 8/w. */
KVQ_TARGET_AVX512 static inline AI void pack_idx(const __m512i *id, const int d, const int b, uint8_t *out) {
    const int ng = d / 16;
    if (b == 4 && ng % 8 == 0) {
        /* 4 bits: byte i = idx[i] | idx[i + d/2] << 4. Saturating packs (in
         * 128-bit lanes) leave lane L of register m at bytes 16L + 4m..: one
         * dword permute restores the order. */
        const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#pragma GCC unroll 4
        for (int q = 0; q < ng / 8; q++) {
            const __m512i *lo = id + 4 * q, *hi = id + ng / 2 + 4 * q;
            __m512i l = _mm512_packus_epi16(_mm512_packus_epi32(lo[0], lo[1]), _mm512_packus_epi32(lo[2], lo[3]));
            __m512i h = _mm512_packus_epi16(_mm512_packus_epi32(hi[0], hi[1]), _mm512_packus_epi32(hi[2], hi[3]));
            /* bytes are < 16: the 16-bit shift moves nothing across bytes */
            __m512i byte = _mm512_or_si512(l, _mm512_slli_epi16(h, 4));
            _mm512_storeu_si512(out + 64 * q, _mm512_permutexvar_epi32(perm, byte));
        }
        return;
    }
    int shift = 0;
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++) {
        const int w = kvq_strided_width(b, f), S = d * w / 8, per = 8 / w;
        const __m512i mask = _mm512_set1_epi32((1 << w) - 1);
#pragma GCC unroll 16
        for (int j0 = 0; j0 < S; j0 += 16) {
            __m512i byte = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < per; k++) {
                __m512i f16 = _mm512_and_si512(_mm512_srli_epi32(id[(j0 + k * S) / 16], (unsigned)shift), mask);
                byte = _mm512_or_si512(byte, _mm512_slli_epi32(f16, (unsigned)(k * w)));
            }
            _mm_storeu_si128((__m128i *)(out + j0), _mm512_cvtepi32_epi8(byte));
        }
        out += S;
        shift += w;
    }
}

/* [sum(a), sum(b), sum(c), sum(d)] as hsum4_512; for one row (nv = 1) the
 * same additions of lane 0 alone, in fewer operations. */
KVQ_TARGET_AVX512 static inline AI __m128 hsum_rows(const __m512 *a, const int nv) {
    if (nv > 1) return hsum4_512(a[0], a[1], nv > 2 ? a[2] : a[0], nv > 3 ? a[3] : a[0]);
    /* hsum4_512(r, r, r, r)[0] = (t0 + t2) + (t1 + t3), t_L = (r_0 + r_2) + (r_1 + r_3) in 128-bit lane L */
    __m512 x = _mm512_add_ps(a[0], _mm512_permute_ps(a[0], 0x4E));
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    return _mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/*
 * Encodes the NV rows x + j * xs (j < NV): packed indices to pk + j * ps,
 * scales in lanes 0..NV-1 of the result; *bad gets bit j when row j's norm
 * is zero or not finite (its outputs are then meaningless).
 */
KVQ_TARGET_AVX512 static inline AI __m128 encode_body(const float *signs, const kvq_codebook *cb, const int d,
                                                      const int b, const int NV, const int guess, const int scale_norm,
                                                      const float *x, size_t xs, uint8_t *pk, size_t ps,
                                                      unsigned *bad) {
    const int ng = d / 16;
    __m512 v[4][KVQ_DIM_MAX / 16];
    const __m512 inv = _mm512_set1_ps(1.0f / sqrtf((float)d));
    /* x * s * inv == x * (s * inv): s = +-1 makes both products exact */
#pragma GCC unroll 32
    for (int g = 0; g < ng; g++) {
        const __m512 si = _mm512_mul_ps(_mm512_loadu_ps(signs + 16 * g), inv);
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) v[j][g] = _mm512_mul_ps(_mm512_loadu_ps(x + j * xs + 16 * g), si);
    }
    const __m512 sgn1 = _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1);
    const __m512 sgn2 = _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1);
    const __m512 sgn4 = _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1);
    const __m512 sgn8 = _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
#pragma GCC unroll 2
    for (int round = 0; round < 2; round++) {
        if (round) /* second randomized round: s2 and 1/sqrt(d) */
#pragma GCC unroll 32
            for (int g = 0; g < ng; g++) {
                const __m512 si = _mm512_mul_ps(_mm512_loadu_ps(signs + d + 16 * g), inv);
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++) v[j][g] = _mm512_mul_ps(v[j][g], si);
            }
        /* butterflies of spans 1, 2, 4, 8 inside each register, t * (+-1) + partner */
#pragma GCC unroll 32
        for (int g = 0; g < ng; g++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) {
                __m512 t = v[j][g];
                t = _mm512_fmadd_ps(t, sgn1, _mm512_permute_ps(t, 0xB1));
                t = _mm512_fmadd_ps(t, sgn2, _mm512_permute_ps(t, 0x4E));
                t = _mm512_fmadd_ps(t, sgn4, _mm512_shuffle_f32x4(t, t, 0xB1));
                v[j][g] = _mm512_fmadd_ps(t, sgn8, _mm512_shuffle_f32x4(t, t, 0x4E));
            }
        /* spans of 16 and more: between registers */
#pragma GCC unroll 8
        for (int h = 1; h < ng; h <<= 1)
#pragma GCC unroll 16
            for (int k = 0; k < ng / 2; k++) { /* butterfly k of span h */
                const int i = (k / h) * 2 * h + k % h;
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++) {
                    __m512 a = v[j][i], c = v[j][i + h];
                    v[j][i] = _mm512_add_ps(a, c);
                    v[j][i + h] = _mm512_sub_ps(a, c);
                }
            }
    }
    /* squared norms: pairwise products, then a tree; one reduction for NV rows */
    __m512 r[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        __m512 a[KVQ_DIM_MAX / 32];
#pragma GCC unroll 16
        for (int k = 0; k < ng / 2; k++)
            a[k] = _mm512_fmadd_ps(v[j][2 * k + 1], v[j][2 * k + 1], _mm512_mul_ps(v[j][2 * k], v[j][2 * k]));
        r[j] = tree_sum(a, ng / 2);
    }
    const __m128 nrm2 = hsum_rows(r, NV);
    const __m128 nrm = _mm_sqrt_ps(nrm2);
    const __m128 sq = _mm_set1_ps(sqrtf((float)d));
    const __m128 s4 = _mm_div_ps(sq, nrm);
    *bad = (~(unsigned)_mm_cmp_ps_mask(nrm2, _mm_setzero_ps(), _CMP_GT_OQ) |
            ~(unsigned)_mm_cmp_ps_mask(nrm2, _mm_set1_ps(INFINITY), _CMP_LT_OQ)) &
           ((1u << NV) - 1);

    const __m512 tb = _mm512_loadu_ps(cb->t), cv = _mm512_loadu_ps(cb->c);
    __m512 yc[4], cc[4];
    /* guess-and-correct (cb->guess_ok: the guess is off by at most one):
     * g = clamp(floor(x ga + gb)); g += x > t[g]; g -= x <= t[g-1] */
    const __m512 ga = _mm512_set1_ps(cb->ga), gbv = _mm512_set1_ps(cb->gb);
    const __m512i one = _mm512_set1_epi32(1), top = _mm512_set1_epi32((1 << b) - 1);
    /* tdown[g] = t[g-1], and -inf for g = 0 (no cell below the first) */
    const __m512 tdown = _mm512_mask_mov_ps(
        _mm512_permutexvar_ps(_mm512_sub_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), one), tb),
        1, _mm512_set1_ps(-INFINITY));
    /* one vector at a time: quantize, the pair products of <y, c> and <c, c>
     * (summed as the same trees as the norm), pack; few registers live */
#pragma GCC unroll 4
    for (int j = 0; j < NV; j++) {
        const __m512 s = bcast_lane(s4, j);
        __m512i id[KVQ_DIM_MAX / 16];
        __m512 a[KVQ_DIM_MAX / 32], e[KVQ_DIM_MAX / 32], cprev = _mm512_setzero_ps();
#pragma GCC unroll 32
        for (int g = 0; g < ng; g++) {
            __m512 xq = _mm512_mul_ps(v[j][g], s);
            __m512i k = _mm512_setzero_si512();
            if (guess) {
                k = _mm512_cvt_roundps_epi32(_mm512_fmadd_ps(xq, ga, gbv), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
                k = _mm512_min_epi32(_mm512_max_epi32(k, _mm512_setzero_si512()), top);
                __mmask16 up = _mm512_cmp_ps_mask(xq, _mm512_permutexvar_ps(k, tb), _CMP_GT_OQ);
                __mmask16 dn = _mm512_cmp_ps_mask(xq, _mm512_permutexvar_ps(k, tdown), _CMP_LE_OQ);
                k = _mm512_mask_add_epi32(k, up, k, one);
                k = _mm512_mask_sub_epi32(k, dn, k, one);
            } else
#pragma GCC unroll 4
                for (int step = (1 << b) >> 1; step > 0; step >>= 1) {
                    __m512i probe = _mm512_add_epi32(k, _mm512_set1_epi32(step - 1));
                    __mmask16 gt = _mm512_cmp_ps_mask(xq, _mm512_permutexvar_ps(probe, tb), _CMP_GT_OQ);
                    k = _mm512_mask_add_epi32(k, gt, k, _mm512_set1_epi32(step));
                }
            const __m512 cval = _mm512_permutexvar_ps(k, cv);
            if (g & 1) {
                a[g / 2] = _mm512_fmadd_ps(v[j][g], cval, _mm512_mul_ps(v[j][g - 1], cprev));
                e[g / 2] = _mm512_fmadd_ps(cval, cval, _mm512_mul_ps(cprev, cprev));
            }
            cprev = cval;
            id[g] = k;
        }
        yc[j] = tree_sum(a, ng / 2);
        cc[j] = tree_sum(e, ng / 2);
        pack_idx(id, d, b, pk + j * ps);
    }
    const __m128 fyc = hsum_rows(yc, NV), fcc = hsum_rows(cc, NV);
    const __m128 snorm = _mm_div_ps(nrm, sq);
    __m128 scale = snorm;
    if (!scale_norm) /* fcc == 0: the norm scale */
        scale = _mm_mask_blend_ps(_mm_cmp_ps_mask(fcc, _mm_setzero_ps(), _CMP_EQ_OQ), _mm_div_ps(fyc, fcc), snorm);
    return scale;
}

#define DEF_ONE(D, B)                                                                                      \
    KVQ_TARGET_AVX512 static int enc1_##D##_##B(const kvq_rotation *rot, const kvq_codebook *cb, int sn,   \
                                                const float *x, float *scale, uint8_t *packed) {           \
        unsigned bad;                                                                                      \
        __m128 s = encode_body(rot->signs, cb, D, B, 1, cb->guess_ok, sn, x, 0, packed, 0, &bad);          \
        *scale = _mm_cvtss_f32(s);                                                                         \
        return !bad;                                                                                       \
    }
FUSED_SHAPES(DEF_ONE)
#undef DEF_ONE

/* Single row (the caller has checked nothing): 0 when not served or the norm
 * is zero or not finite (the caller then takes the generic path). */
KVQ_TARGET_AVX512 int tq_encode_fused_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b,
                                             int scale_norm, const float *x, float *scale, uint8_t *packed) {
    if (!tq_encode_fused_ok(rot, cb, d, b)) return 0;
#define ONE_CASE(D, B) if (d == D && b == B) return enc1_##D##_##B(rot, cb, scale_norm, x, scale, packed);
    FUSED_SHAPES(ONE_CASE)
#undef ONE_CASE
    return 0;
}

/* Stores the scales of rows j < nv (lanes of s) at rec + j * stride; returns
 * the rows whose scale does not fit (|s| beyond KVQ_SCALE16_MAX in f16 or
 * KVQ_SCALE32_MAX in f32, or NaN), as scale_store. */
KVQ_TARGET_AVX512 static inline AI unsigned store_scales(__m128 s, int nv, int scale32, uint8_t *rec, size_t stride) {
    const __m128 lim = _mm_set1_ps(scale32 ? KVQ_SCALE32_MAX : KVQ_SCALE16_MAX);
    const __m128 a = _mm_and_ps(s, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff)));
    const __mmask8 ok = _mm_cmp_ps_mask(a, lim, _CMP_LE_OQ); /* ordered: NaN fails */
    unsigned bad = ~(unsigned)ok & ((1u << nv) - 1);
    if (scale32) {
        float f[4];
        _mm_storeu_ps(f, s);
        for (int j = 0; j < nv; j++) memcpy(rec + j * stride, f + j, 4);
    } else {
        uint16_t h[8];
        _mm_storeu_si128((__m128i *)h, _mm_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (int j = 0; j < nv; j++) memcpy(rec + j * stride, h + j, 2);
    }
    return bad;
}

/*
 * Whole rows: blocks of NB rows (guess-and-correct codebooks and b = 1; NB = 4, or 2
 * at d = 256 where 4 rows would not fit the registers), the rest one at a
 * time through enc1 (same bytes); each record gets its scale (f16 by
 * vcvtps2ph, round to nearest even like kvq_f32_to_f16, or f32) and its
 * packed indices. Stops at the first row it cannot finish (zero or
 * non-finite norm, scale not storable): returns its index.
 */
#define DEF_ROWS(D, B)                                                                                        \
    KVQ_TARGET_AVX512 static size_t rows_##D##_##B(const kvq_rotation *rot, const kvq_codebook *cb, int sn,   \
                                                   int s32, const float *x, size_t n, uint8_t *codes,         \
                                                   size_t stride) {                                           \
        enum { NB = D >= 256 ? 2 : 4 };                                                                       \
        const size_t sb = s32 ? 4 : 2;                                                                        \
        size_t i = 0;                                                                                         \
        if (cb->guess_ok || B == 1) /* b = 1: one compare, no guess */                                     \
            for (; i + NB <= n; i += NB) {                                                                    \
                unsigned bad;                                                                                 \
                uint8_t *rec = codes + i * stride;                                                            \
                __m128 s = encode_body(rot->signs, cb, D, B, NB, B > 1, sn, x + i * D, D, rec + sb, stride, &bad); \
                bad |= store_scales(s, NB, s32, rec, stride);                                                 \
                if (bad) return i + (size_t)__builtin_ctz(bad);                                               \
            }                                                                                                 \
        for (; i < n; i++) {                                                                                  \
            float sc;                                                                                         \
            uint8_t *rec = codes + i * stride;                                                                \
            if (!enc1_##D##_##B(rot, cb, sn, x + i * D, &sc, rec + sb) ||                                     \
                store_scales(_mm_set_ss(sc), 1, s32, rec, stride))                                            \
                return i;                                                                                     \
        }                                                                                                     \
        return n;                                                                                             \
    }
FUSED_SHAPES(DEF_ROWS)
#undef DEF_ROWS

size_t tq_encode_rows_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int scale_norm,
                             int scale32, const float *x, size_t n, uint8_t *codes, size_t stride) {
#define ROWS_CASE(D, B) \
    if (d == D && b == B) return rows_##D##_##B(rot, cb, scale_norm, scale32, x, n, codes, stride);
    FUSED_SHAPES(ROWS_CASE)
#undef ROWS_CASE
    return 0;
}

#else /* not x86: never served */
int tq_encode_fused_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int scale_norm,
                           const float *x, float *scale, uint8_t *packed) {
    (void)rot, (void)cb, (void)d, (void)b, (void)scale_norm, (void)x, (void)scale, (void)packed;
    return 0;
}
int tq_encode_fused_ok(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b) {
    (void)rot, (void)cb, (void)d, (void)b;
    return 0;
}
size_t tq_encode_rows_avx512(const kvq_rotation *rot, const kvq_codebook *cb, int d, int b, int scale_norm,
                             int scale32, const float *x, size_t n, uint8_t *codes, size_t stride) {
    (void)rot, (void)cb, (void)d, (void)b, (void)scale_norm, (void)scale32, (void)x, (void)n, (void)codes, (void)stride;
    return 0;
}
#endif
