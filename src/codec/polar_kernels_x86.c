/*
 * PolarQuant's AVX2 kernels (m_polar.c: the method and the maths;
 * polar_ref.c: the scalar references they match): encode (the same float
 * operations as quantize_scalar, so the same bytes), decode
 * (bit-identical), float scores and accumulate (FMA: a few ulps from the
 * references), 8-bit query tables and scores (the same integers as
 * polar_score_i8). AVX-512 VBMI plans: polar_fast_x86.c.
 */
#include <string.h>

#include "polar.h"
#include "simd_util.h"

#if KVQ_X86
/* polar_prep_i8_ref with AVX2: the same float operations (mul, mul, add; max of |T|,
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

/* ---- AVX2 kernels (also used by AVX-512 plans) ---------------------------------
 * Decode: indices unpacked as in the scalar path, then each level expands 8
 * radii at a time: cos/sin centroids by a register permute (<= 8 entries),
 * two permutes and a blend (<= 16) or a gather (more), products, interleave.
 * Only multiplications, as in expand(): the decode is bit-identical to the
 * scalar one. Score / accumulate use FMA (rounding differs from the scalar
 * reference by a few ulps; test_polar compares them). */
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
        idx[P->off[1] + i] = (uint8_t)polar_cell1(P, y[2 * i], y[2 * i + 1]);
        ra[i] = polar_radius(y[2 * i], y[2 * i + 1]);
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
            idx[P->off[l] + i] = (uint8_t)polar_cell(P, l, cur[2 * i], cur[2 * i + 1]);
            nxt[i] = polar_radius(cur[2 * i], cur[2 * i + 1]);
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
    return polar_finish(p, y, idx, rfin, code);
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
 * words. The same integers and the same float operations as polar_score_i8.
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

/* The AVX2 kernels (also the AVX-512 plans' where polar_fast_x86.c has none). */
void polar_select_x86(kvq_plan *p) {
    const polar_priv *P = p->priv;
    if (p->isa >= KVQ_ISA_AVX2) {
        p->encode = enc_avx2;
        p->decode = dec_avx2;
        if (P->i8) p->prep = prep_i8_avx2, p->score = score_i8_avx2;
        else p->score = score_avx2;
        p->accum = accum_avx2;
    }
}
#endif
