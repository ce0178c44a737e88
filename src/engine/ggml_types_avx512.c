/*
 * AVX-512 VNNI kernels. Quantized weights: two 32-value sub-blocks per
 * 512-bit register (64 codes), one vpdpbusd per activation row for both, the
 * two blocks' scales applied lane-wise (a permute spreads the activation's
 * two block scales over 8 lanes each). That halves the per-row instruction
 * count of the 256-bit form, which is what bounds prefill. Float weights,
 * odd tails and the activation quantizer come from kvq_ggml_dot_x86.inc (its
 * 256-bit kernels, compiled here with vpdpbusd).
 */
#include "ggml_types.h"

#include "cpu.h"

#if KVQ_X86
#define TGT KVQ_TARGET_AVX512VNNI
#define KVQ_VNNI 1
#include "ggml_dot_x86.inc"

TGT AI __m512 spread4(float a0, float b0, float a1, float b1) { /* [a0 x 4, b0 x 4, a1 x 4, b1 x 4] */
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(_mm_setr_ps(a0, b0, a1, b1)));
}

TGT AI __m512 pair_scales(float d0, float d1) {
    return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
}

TGT AI __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Sub-blocks j, j+1 (64 codes u, lane scales wsv) against every row. */
TGT AI void pair_block(__m512i u, __m512 wsv, const acts8 *a, int64_t j, const int nx, __m512 *acc) {
    for (int r = 0; r < nx; r++) {
        __m512i q = _mm512_loadu_si512((const void *)(a_q(a, r) + 32 * j));
        __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q));
        const float *dx = (const float *)(const void *)(a->base + (size_t)r * a->stride + a->dxo) + 8 * j; /* j even */
        acc[r] = _mm512_fmadd_ps(p, _mm512_mul_ps(wsv, _mm512_loadu_ps(dx)), acc[r]);
    }
}

/* Codes of legacy blocks j and j+1 in one register: [lo_j, hi_j, lo_j+1, hi_j+1]. */
TGT AI __m512i nibbles_pair(const uint8_t *qs0, const uint8_t *qs1) {
    __m256i x = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)qs1),
                                 _mm_loadu_si128((const __m128i *)(const void *)qs0));
    __m256i m = _mm256_set1_epi8(0x0F);
    __m512i z = join256(_mm256_and_si256(x, m), _mm256_and_si256(_mm256_srli_epi16(x, 4), m));
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

TGT AI __m512i unpack_pair(const int T, const void *w, int64_t j, float *d, float *m) {
    switch (T) {
    case GGML_TYPE_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = -8.0f * d[0]; m[1] = -8.0f * d[1];
        return nibbles_pair(x[0].qs, x[1].qs);
    }
    case GGML_TYPE_Q4_1: {
        const block_q4_1 *x = (const block_q4_1 *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = ld_h(&x[0].m); m[1] = ld_h(&x[1].m);
        return nibbles_pair(x[0].qs, x[1].qs);
    }
    case GGML_TYPE_Q5_0: {
        const block_q5_0 *x = (const block_q5_0 *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = -16.0f * d[0]; m[1] = -16.0f * d[1];
        return _mm512_or_si512(nibbles_pair(x[0].qs, x[1].qs), join256(bits_to_0x10(x[0].qh), bits_to_0x10(x[1].qh)));
    }
    case GGML_TYPE_Q5_1: {
        const block_q5_1 *x = (const block_q5_1 *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = ld_h(&x[0].m); m[1] = ld_h(&x[1].m);
        return _mm512_or_si512(nibbles_pair(x[0].qs, x[1].qs), join256(bits_to_0x10(x[0].qh), bits_to_0x10(x[1].qh)));
    }
    case GGML_TYPE_IQ4_NL: { /* level + 128 through a vpshufb of the offset table */
        const block_iq4_nl *x = (const block_iq4_nl *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = -128.0f * d[0]; m[1] = -128.0f * d[1];
        __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)kvq_iq4nl_values));
        tab = _mm512_xor_si512(tab, _mm512_set1_epi8((char)0x80));
        return _mm512_shuffle_epi8(tab, nibbles_pair(x[0].qs, x[1].qs));
    }
    default: { /* Q8_0 */
        const block_q8_0 *x = (const block_q8_0 *)w + j;
        d[0] = ld_h(&x[0].d); d[1] = ld_h(&x[1].d);
        m[0] = -128.0f * d[0]; m[1] = -128.0f * d[1];
        __m512i v = join256(_mm256_loadu_si256((const __m256i *)(const void *)x[0].qs),
                            _mm256_loadu_si256((const __m256i *)(const void *)x[1].qs));
        return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
    }
    }
}

TGT AI void k512_legacy(const int T, int64_t n, const void *w, const void *act, size_t stride, const int nx,
                        float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NX];
    __m256 acc2[GGML_MAX_NX], macc[GGML_MAX_NX];
    float mw[CHUNK_BLOCKS];
    for (int r = 0; r < nx; r++) {
        acc[r] = _mm512_setzero_ps();
        acc2[r] = macc[r] = _mm256_setzero_ps();
    }
    for (int64_t j0 = 0; j0 < a.nb; j0 += CHUNK_BLOCKS) { /* CHUNK_BLOCKS is even */
        int cnt = (int)(a.nb - j0 < CHUNK_BLOCKS ? a.nb - j0 : CHUNK_BLOCKS);
        int i = 0;
        for (; i + 2 <= cnt; i += 2) {
            float d[2];
            __m512i u = unpack_pair(T, w, j0 + i, d, mw + i);
            pair_block(u, pair_scales(d[0], d[1]), &a, j0 + i, nx, acc);
        }
        if (i < cnt) { /* odd last block */
            float d;
            __m256i u = unpack_legacy(T, w, j0 + i, &d, mw + i);
            sub_block(u, _mm256_set1_ps(d), &a, j0 + i, nx, acc2);
        }
        add_mins(&a, j0, cnt, mw, NULL, nx, macc);
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + hsum8(_mm256_add_ps(acc2[r], macc[r]));
}

TGT AI void k512_q45_K(const int T, int64_t n, const void *w, const void *act, size_t stride, const int nx,
                       float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NX];
    __m256 macc[GGML_MAX_NX];
    float mw[CHUNK_BLOCKS];
    for (int r = 0; r < nx; r++) { acc[r] = _mm512_setzero_ps(); macc[r] = _mm256_setzero_ps(); }
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    int64_t nsb = n / QK_K;
    for (int64_t b0 = 0; b0 < nsb; b0 += CHUNK_BLOCKS / 8) {
        int cnt = (int)(nsb - b0 < CHUNK_BLOCKS / 8 ? nsb - b0 : CHUNK_BLOCKS / 8);
        for (int bi = 0; bi < cnt; bi++) {
            int64_t b = b0 + bi;
            const uint8_t *scales, *qs, *qh = NULL;
            float d, dmin;
            if (T == GGML_TYPE_Q4_K) {
                const block_q4_K *x = (const block_q4_K *)w + b;
                scales = x->scales; qs = x->qs; d = ld_h(&x->d); dmin = ld_h(&x->dmin);
            } else {
                const block_q5_K *x = (const block_q5_K *)w + b;
                scales = x->scales; qs = x->qs; qh = x->qh; d = ld_h(&x->d); dmin = ld_h(&x->dmin);
            }
            float ws[8];
            k4_scales(scales, d, dmin, ws, mw + 8 * bi);
            __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)(const void *)qh) : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (T == GGML_TYPE_Q5_K) {
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                    hb = _mm256_srli_epi16(hb, 1);
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
                    hb = _mm256_srli_epi16(hb, 1);
                }
                pair_block(join256(lo, hi), pair_scales(ws[2 * c], ws[2 * c + 1]), &a, 8 * b + 2 * c, nx, acc);
            }
        }
        add_mins(&a, 8 * b0, 8 * cnt, mw, NULL, nx, macc);
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + hsum8(macc[r]);
}

TGT AI void k512_q6_K(int64_t n, const void *w, const void *act, size_t stride, const int nx, float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NX];
    __m256 macc[GGML_MAX_NX];
    float mw[CHUNK_BLOCKS], mw0[CHUNK_BLOCKS];
    for (int r = 0; r < nx; r++) { acc[r] = _mm512_setzero_ps(); macc[r] = _mm256_setzero_ps(); }
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    int64_t nsb = n / QK_K;
    for (int64_t b0 = 0; b0 < nsb; b0 += CHUNK_BLOCKS / 8) {
        int cnt = (int)(nsb - b0 < CHUNK_BLOCKS / 8 ? nsb - b0 : CHUNK_BLOCKS / 8);
        for (int bi = 0; bi < cnt; bi++) {
            const block_q6_K *x = (const block_q6_K *)w + b0 + bi;
            float d = ld_h(&x->d);
            for (int h = 0; h < 2; h++) {
                __m512i ql = _mm512_loadu_si512((const void *)(x->ql + 64 * h)); /* [ql0 | ql1] */
                __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(x->qh + 32 * h));
                __m512i zq = join256(qh, _mm256_srli_epi16(qh, 2)); /* [qh, qh >> 2] */
                const int8_t *sc = x->scales + 8 * h;
                for (int p = 0; p < 2; p++) { /* sub-blocks k = 2p, 2p + 1 */
                    __m512i lo = p ? _mm512_srli_epi16(ql, 4) : ql;
                    __m512i hi = p ? _mm512_srli_epi16(zq, 4) : zq;
                    __m512i u = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi16(_mm512_and_si512(hi, m2), 4));
                    float s[4];
                    for (int t = 0; t < 4; t++) s[t] = d * (float)sc[4 * p + t];
                    int i = 8 * bi + 4 * h + 2 * p;
                    mw[i] = -32.0f * s[1];
                    mw0[i] = -32.0f * (s[0] - s[1]);
                    mw[i + 1] = -32.0f * s[3];
                    mw0[i + 1] = -32.0f * (s[2] - s[3]);
                    pair_block(u, spread4(s[0], s[1], s[2], s[3]), &a, 8 * (b0 + bi) + 4 * h + 2 * p, nx, acc);
                }
            }
        }
        add_mins(&a, 8 * b0, 8 * cnt, mw, mw0, nx, macc);
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + hsum8(macc[r]);
}

/* q3_K: sub-blocks 4h + 2p and 4h + 2p + 1 in one register: codes of
 * [qs >> 4p, qs >> (4p + 2)] with 3rd bits [hm >> (4h + 2p), hm >> (4h + 2p + 1)]. */
TGT AI void k512_q3_K(int64_t n, const void *w, const void *act, size_t stride, const int nx, float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NX];
    __m256 macc[GGML_MAX_NX];
    float mw[CHUNK_BLOCKS], mw0[CHUNK_BLOCKS];
    for (int r = 0; r < nx; r++) { acc[r] = _mm512_setzero_ps(); macc[r] = _mm256_setzero_ps(); }
    const __m512i m2 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    int64_t nsb = n / QK_K;
    for (int64_t b0 = 0; b0 < nsb; b0 += CHUNK_BLOCKS / 8) {
        int cnt = (int)(nsb - b0 < CHUNK_BLOCKS / 8 ? nsb - b0 : CHUNK_BLOCKS / 8);
        for (int bi = 0; bi < cnt; bi++) {
            const block_q3_K *x = (const block_q3_K *)w + b0 + bi;
            float ws[16];
            q3k_scales(x->scales, ld_h(&x->d), ws);
            __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)x->hmask);
            __m512i zh = join256(hm, _mm256_srli_epi16(hm, 1)); /* [hm, hm >> 1] */
            for (int h = 0; h < 2; h++) {
                __m256i qs = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * h));
                __m512i zq = join256(qs, _mm256_srli_epi16(qs, 2)); /* [qs, qs >> 2] */
                for (int p = 0; p < 2; p++) { /* sub-blocks k = 2p, 2p + 1 */
                    __m512i lo = _mm512_and_si512(_mm512_srli_epi16(zq, 4 * p), m2);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(zh, 4 * h + 2 * p), one);
                    __m512i u = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 2));
                    const float *s = ws + 8 * h + 4 * p;
                    int i = 8 * bi + 4 * h + 2 * p;
                    mw[i] = -4.0f * s[1];
                    mw0[i] = -4.0f * (s[0] - s[1]);
                    mw[i + 1] = -4.0f * s[3];
                    mw0[i + 1] = -4.0f * (s[2] - s[3]);
                    pair_block(u, spread4(s[0], s[1], s[2], s[3]), &a, 8 * (b0 + bi) + 4 * h + 2 * p, nx, acc);
                }
            }
        }
        add_mins(&a, 8 * b0, 8 * cnt, mw, mw0, nx, macc);
    }
    for (int r = 0; r < nx; r++) out[r] = _mm512_reduce_add_ps(acc[r]) + hsum8(macc[r]);
}

/* ---- row blocks: 8 weight rows x nx activation rows (prefill) ------------
 * 16 int32 lanes, lanes 2k and 2k + 1 belong to weight row k. A code register
 * holds 8 codes of each of the 8 rows (qword k = row k); the activation's 8
 * matching bytes are broadcast to every qword, so one vpdpbusd serves all 8
 * rows, and four of them (32 values) accumulate in int32 before the block's
 * one convert + scale: per block and activation row 4 dots, a convert, a
 * mul, two fma (scale and min) for 8 weight rows, against 8 x 2 dots and
 * 8 x 3 float ops in the single-row kernels. */
TGT AI __m512i load4x16(const uint8_t *p, size_t s) { /* [p | p+s | p+2s | p+3s], 16 bytes each */
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)p));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(p + s)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(p + 2 * s)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(const void *)(p + 3 * s)), 3);
}

/* 16 bytes at p of rows 0..7 (stride s): e = bytes 0..7 of each row (qword k
 * = row k), o = bytes 8..15. */
TGT AI void load8x16(const uint8_t *p, size_t s, __m512i *e, __m512i *o) {
    __m512i a = load4x16(p, s), b = load4x16(p + 4 * s, s);
    const __m512i ie = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), io = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    *e = _mm512_permutex2var_epi64(a, ie, b);
    *o = _mm512_permutex2var_epi64(a, io, b);
}

/* The IEEE halves at p + k * s (k < 8) as floats. */
TGT AI __m256 ld_h8(const uint8_t *p, size_t s) {
    uint16_t h[8];
    for (int k = 0; k < 8; k++) memcpy(&h[k], p + (size_t)k * s, 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
}

/* Per-row floats v[k] over the row's two lanes (scales), or its first lane only (mins). */
TGT AI __m512 spread_rows(__m256 v) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(v));
}
TGT AI __m512 spread_rows_once(__m256 v) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return _mm512_maskz_permutexvar_ps((__mmask16)0x5555, idx, _mm512_castps256_ps512(v));
}

TGT AI int ld32(const uint8_t *p) {
    int v;
    memcpy(&v, p, 4);
    return v;
}

/* The 32-bit words at p + k * s (k < 8) in one register (scalar loads
 * inserted into lanes: faster than vpgatherdd, and than a store + reload,
 * on the Zen 4 this was tuned on). */
TGT AI __m256i gather8(const uint8_t *p, size_t s) {
    __m128i a = _mm_cvtsi32_si128(ld32(p)), b = _mm_cvtsi32_si128(ld32(p + 4 * s));
    a = _mm_insert_epi32(a, ld32(p + s), 1);
    b = _mm_insert_epi32(b, ld32(p + 5 * s), 1);
    a = _mm_insert_epi32(a, ld32(p + 2 * s), 2);
    b = _mm_insert_epi32(b, ld32(p + 6 * s), 2);
    a = _mm_insert_epi32(a, ld32(p + 3 * s), 3);
    b = _mm_insert_epi32(b, ld32(p + 7 * s), 3);
    return _mm256_set_m128i(b, a);
}

/* Masks of the 4 bytes of 32-bit qh words at p + k * s: byte k of mask i
 * is byte i of row k's word (the 5th bits of that row's codes 8i..8i+7). */
TGT AI void qh_masks8(const uint8_t *p, size_t s, __mmask64 *m) {
    __m256i v = gather8(p, s);
    const __m256i sh = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2,
                                        6, 10, 14, 3, 7, 11, 15);
    v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, sh), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    m[0] = _cvtu64_mask64((uint64_t)_mm256_extract_epi64(v, 0));
    m[1] = _cvtu64_mask64((uint64_t)_mm256_extract_epi64(v, 1));
    m[2] = _cvtu64_mask64((uint64_t)_mm256_extract_epi64(v, 2));
    m[3] = _cvtu64_mask64((uint64_t)_mm256_extract_epi64(v, 3));
}

TGT AI int64_t ld_q64(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Block j (codes c[i] = values 8i..8i+7 of every row, per-row scale dv and
 * min mv) against every activation row. */
TGT AI void row_block(const __m512i *c, __m512 dv, __m512 mv, const acts8 *a, int64_t j, const int nx, __m512 *acc) {
    /* one running pointer over the activation rows (block j's codes), d[j]
     * and s[j] at fixed offsets from it: few registers for 8 rows */
    const uint8_t *p = a->base + 32 * j;
    const size_t od = (size_t)a->n + 4 * (size_t)j - 32 * (size_t)j, os = od + 4 * (size_t)a->nb;
    for (int r = 0; r < nx; r++, p += a->stride) {
        const int8_t *q = (const int8_t *)(const void *)p;
        float dj, sj;
        memcpy(&dj, p + od, 4);
        memcpy(&sj, p + os, 4);
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], _mm512_set1_epi64(ld_q64(q)));
        s = _mm512_dpbusd_epi32(s, c[1], _mm512_set1_epi64(ld_q64(q + 8)));
        s = _mm512_dpbusd_epi32(s, c[2], _mm512_set1_epi64(ld_q64(q + 16)));
        s = _mm512_dpbusd_epi32(s, c[3], _mm512_set1_epi64(ld_q64(q + 24)));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, _mm512_set1_ps(dj)), acc[r]);
        acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sj), acc[r]);
    }
}

TGT AI void row_out(const __m512 *acc, const int nx, float *out) {
    for (int r = 0; r < nx; r++) {
        float t[16];
        _mm512_storeu_ps(t, acc[r]);
        for (int k = 0; k < 8; k++) out[k * nx + r] = t[2 * k] + t[2 * k + 1];
    }
}

/* Legacy 32-value blocks: byte offsets of d, m (or -1: m = cm * d), qh (or -1), qs. */
TGT AI void r8_legacy(const int T, int64_t n, const void *w, size_t ws, const void *act, size_t stride, const int nx,
                      float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NXR];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    const int bs = T == GGML_TYPE_Q4_0 || T == GGML_TYPE_IQ4_NL ? 18 : T == GGML_TYPE_Q4_1 ? 20 : T == GGML_TYPE_Q5_0 ? 22
                   : T == GGML_TYPE_Q5_1 ? 24 : 34;
    const int o_qs = T == GGML_TYPE_Q4_0 || T == GGML_TYPE_IQ4_NL || T == GGML_TYPE_Q8_0 ? 2 : T == GGML_TYPE_Q4_1 ? 4
                     : T == GGML_TYPE_Q5_0 ? 6 : 8;
    const int o_qh = T == GGML_TYPE_Q5_0 ? 2 : 4; /* Q5_0 / Q5_1 only */
    const float cm = T == GGML_TYPE_Q4_0 ? -8.0f : T == GGML_TYPE_Q5_0 ? -16.0f : -128.0f;
    const __m512i m4 = _mm512_set1_epi8(0x0F), x80 = _mm512_set1_epi8((char)0x80), b16 = _mm512_set1_epi8(0x10);
    const __m512i tab = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)kvq_iq4nl_values)), x80);
    const uint8_t *base = w;
    for (int64_t j = 0; j < a.nb; j++) {
        const uint8_t *p = base + (size_t)j * (size_t)bs;
        __m512i c[4], e, o;
        __m256 d8, m8;
        if (T == GGML_TYPE_Q4_1 || T == GGML_TYPE_Q5_1) { /* d and m of the 8 rows from their first 4 bytes */
            __m256i dm = gather8(p, ws);
            d8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dm));
            m8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(dm, 16)));
        } else {
            d8 = ld_h8(p, ws);
            m8 = _mm256_mul_ps(d8, _mm256_set1_ps(cm));
        }
        if (T == GGML_TYPE_Q8_0) {
            load8x16(p + o_qs, ws, &c[0], &c[1]);
            load8x16(p + o_qs + 16, ws, &c[2], &c[3]);
            for (int i = 0; i < 4; i++) c[i] = _mm512_xor_si512(c[i], x80);
        } else {
            load8x16(p + o_qs, ws, &e, &o);
            c[0] = _mm512_and_si512(e, m4);
            c[1] = _mm512_and_si512(o, m4);
            c[2] = _mm512_and_si512(_mm512_srli_epi16(e, 4), m4);
            c[3] = _mm512_and_si512(_mm512_srli_epi16(o, 4), m4);
            if (T == GGML_TYPE_IQ4_NL)
                for (int i = 0; i < 4; i++) c[i] = _mm512_shuffle_epi8(tab, c[i]);
            if (T == GGML_TYPE_Q5_0 || T == GGML_TYPE_Q5_1) {
                __mmask64 hm[4];
                qh_masks8(p + o_qh, ws, hm);
                for (int i = 0; i < 4; i++) c[i] = _mm512_mask_add_epi8(c[i], hm[i], c[i], b16);
            }
        }
        row_block(c, spread_rows(d8), spread_rows_once(m8), &a, j, nx, acc);
    }
    row_out(acc, nx, out);
}

/* Q4_K: per super-block the 8 rows' sub-block scales and mins (k4_scales),
 * per 64-value chunk the 8 rows' 32 code bytes as 4 registers whose low
 * nibbles are sub-block 2c and high nibbles sub-block 2c + 1. */
TGT AI void r8_q4_K(int64_t n, const void *w, size_t ws, const void *act, size_t stride, const int nx, float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NXR];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *p = (const uint8_t *)w + (size_t)b * sizeof(block_q4_K);
        float sc[8][8], mn[8][8]; /* [sub-block][row] */
        for (int k = 0; k < 8; k++) {
            const block_q4_K *x = (const block_q4_K *)(const void *)(p + (size_t)k * ws);
            float s1[8], m1[8];
            k4_scales(x->scales, ld_h(&x->d), ld_h(&x->dmin), s1, m1);
            for (int i = 0; i < 8; i++) { sc[i][k] = s1[i]; mn[i][k] = m1[i]; }
        }
        for (int ch = 0; ch < 4; ch++) {
            const uint8_t *qs = p + offsetof(block_q4_K, qs) + 32 * ch;
            __m512i r[4], c[4];
            load8x16(qs, ws, &r[0], &r[1]);
            load8x16(qs + 16, ws, &r[2], &r[3]);
            for (int i = 0; i < 4; i++) c[i] = _mm512_and_si512(r[i], m4);
            int64_t j = 8 * b + 2 * ch;
            row_block(c, spread_rows(_mm256_loadu_ps(sc[2 * ch])), spread_rows_once(_mm256_loadu_ps(mn[2 * ch])), &a, j, nx, acc);
            for (int i = 0; i < 4; i++) c[i] = _mm512_and_si512(_mm512_srli_epi16(r[i], 4), m4);
            row_block(c, spread_rows(_mm256_loadu_ps(sc[2 * ch + 1])), spread_rows_once(_mm256_loadu_ps(mn[2 * ch + 1])), &a,
                      j + 1, nx, acc);
        }
    }
    row_out(acc, nx, out);
}

/* Q6_K: a scale per 16 values, so a sub-block's two halves (codes c[0..1]:
 * values 0..15, c[2..3]: 16..31) get an int32 sum each; min_h = -32 scale_h
 * through the activation's block sums (s, s0). */
TGT AI void row_block2(const __m512i *c, __m512 dva, __m512 dvb, __m512 mvb, __m512 mvab, const acts8 *a, int64_t j,
                       const int nx, __m512 *acc) {
    const uint8_t *p = a->base + 32 * j;
    const size_t od = (size_t)a->n + 4 * (size_t)j - 32 * (size_t)j, os = od + 4 * (size_t)a->nb, os0 = os + 4 * (size_t)a->nb;
    for (int r = 0; r < nx; r++, p += a->stride) {
        const int8_t *q = (const int8_t *)(const void *)p;
        float dj, sj, s0j;
        memcpy(&dj, p + od, 4);
        memcpy(&sj, p + os, 4);
        memcpy(&s0j, p + os0, 4);
        __m512i sa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], _mm512_set1_epi64(ld_q64(q)));
        sa = _mm512_dpbusd_epi32(sa, c[1], _mm512_set1_epi64(ld_q64(q + 8)));
        __m512i sb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[2], _mm512_set1_epi64(ld_q64(q + 16)));
        sb = _mm512_dpbusd_epi32(sb, c[3], _mm512_set1_epi64(ld_q64(q + 24)));
        __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sa), dva, _mm512_mul_ps(_mm512_cvtepi32_ps(sb), dvb));
        acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(dj), acc[r]);
        acc[r] = _mm512_fmadd_ps(mvb, _mm512_set1_ps(sj), acc[r]);
        acc[r] = _mm512_fmadd_ps(mvab, _mm512_set1_ps(s0j), acc[r]);
    }
}

TGT AI void r8_q6_K(int64_t n, const void *w, size_t ws, const void *act, size_t stride, const int nx, float *out) {
    acts8 a = ACTS8(act, stride, n);
    __m512 acc[GGML_MAX_NXR];
    for (int r = 0; r < nx; r++) acc[r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *p = (const uint8_t *)w + (size_t)b * sizeof(block_q6_K);
        float sc[16][8]; /* [scale index][row]: d * scales[i] */
        __m256 d8 = ld_h8(p + offsetof(block_q6_K, d), ws);
        float dk[8];
        _mm256_storeu_ps(dk, d8);
        for (int k = 0; k < 8; k++) {
            const int8_t *s8 = (const int8_t *)(const void *)(p + (size_t)k * ws + offsetof(block_q6_K, scales));
            for (int i = 0; i < 16; i++) sc[i][k] = dk[k] * (float)s8[i];
        }
        for (int h = 0; h < 2; h++) {
            __m512i l0[4], l1[4], hb[4];
            const uint8_t *ql = p + offsetof(block_q6_K, ql) + 64 * h, *qh = p + offsetof(block_q6_K, qh) + 32 * h;
            load8x16(ql, ws, &l0[0], &l0[1]);
            load8x16(ql + 16, ws, &l0[2], &l0[3]);
            load8x16(ql + 32, ws, &l1[0], &l1[1]);
            load8x16(ql + 48, ws, &l1[2], &l1[3]);
            load8x16(qh, ws, &hb[0], &hb[1]);
            load8x16(qh + 16, ws, &hb[2], &hb[3]);
            for (int k = 0; k < 4; k++) {
                __m512i c[4];
                for (int i = 0; i < 4; i++) {
                    __m512i lo = (k & 1) ? l1[i] : l0[i];
                    if (k >> 1) lo = _mm512_srli_epi16(lo, 4);
                    __m512i hi = _mm512_and_si512(hb[i], m2);
                    c[i] = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_slli_epi16(hi, 4));
                    hb[i] = _mm512_srli_epi16(hb[i], 2);
                }
                __m256 va = _mm256_loadu_ps(sc[8 * h + 2 * k]), vb = _mm256_loadu_ps(sc[8 * h + 2 * k + 1]);
                __m256 mb = _mm256_mul_ps(vb, _mm256_set1_ps(-32.0f)), mab = _mm256_mul_ps(_mm256_sub_ps(va, vb), _mm256_set1_ps(-32.0f));
                row_block2(c, spread_rows(va), spread_rows(vb), spread_rows_once(mb), spread_rows_once(mab), &a,
                           8 * b + 4 * h + k, nx, acc);
            }
        }
    }
    row_out(acc, nx, out);
}

#define INSTANTIATE_R(name, call)                                                                                    \
    TGT static void name(int64_t n, const void *w, size_t ws, const void *act, size_t stride, int nx, float *out) { \
        switch (nx) {                                                                                                \
        case 1: call(n, w, ws, act, stride, 1, out); break;                                                          \
        case 2: call(n, w, ws, act, stride, 2, out); break;                                                          \
        case 3: call(n, w, ws, act, stride, 3, out); break;                                                          \
        case 4: call(n, w, ws, act, stride, 4, out); break;                                                          \
        case 5: call(n, w, ws, act, stride, 5, out); break;                                                          \
        case 6: call(n, w, ws, act, stride, 6, out); break;                                                          \
        case 7: call(n, w, ws, act, stride, 7, out); break;                                                          \
        case 8: call(n, w, ws, act, stride, 8, out); break;                                                          \
        case 9: call(n, w, ws, act, stride, 9, out); break;                                                          \
        case 10: call(n, w, ws, act, stride, 10, out); break;                                                        \
        case 11: call(n, w, ws, act, stride, 11, out); break;                                                        \
        case 12: call(n, w, ws, act, stride, 12, out); break;                                                        \
        case 13: call(n, w, ws, act, stride, 13, out); break;                                                        \
        case 14: call(n, w, ws, act, stride, 14, out); break;                                                        \
        case 15: call(n, w, ws, act, stride, 15, out); break;                                                        \
        default: call(n, w, ws, act, stride, 16, out); break;                                                        \
        }                                                                                                            \
    }
#define R8_Q4_0(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_Q4_0, n, w, ws, a, s, nx, o)
#define R8_Q4_1(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_Q4_1, n, w, ws, a, s, nx, o)
#define R8_Q5_0(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_Q5_0, n, w, ws, a, s, nx, o)
#define R8_Q5_1(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_Q5_1, n, w, ws, a, s, nx, o)
#define R8_Q8_0(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_Q8_0, n, w, ws, a, s, nx, o)
#define R8_IQ4_NL(n, w, ws, a, s, nx, o) r8_legacy(GGML_TYPE_IQ4_NL, n, w, ws, a, s, nx, o)
INSTANTIATE_R(dotr_q4_0, R8_Q4_0)
INSTANTIATE_R(dotr_q4_1, R8_Q4_1)
INSTANTIATE_R(dotr_q5_0, R8_Q5_0)
INSTANTIATE_R(dotr_q5_1, R8_Q5_1)
INSTANTIATE_R(dotr_q8_0, R8_Q8_0)
INSTANTIATE_R(dotr_iq4_nl, R8_IQ4_NL)
INSTANTIATE_R(dotr_q4_K, r8_q4_K)
INSTANTIATE_R(dotr_q6_K, r8_q6_K)

#define Q4_0_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_Q4_0, n, w, a, s, nx, o)
#define Q4_1_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_Q4_1, n, w, a, s, nx, o)
#define Q5_0_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_Q5_0, n, w, a, s, nx, o)
#define Q5_1_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_Q5_1, n, w, a, s, nx, o)
#define Q8_0_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_Q8_0, n, w, a, s, nx, o)
#define Q4_K_512(n, w, a, s, nx, o) k512_q45_K(GGML_TYPE_Q4_K, n, w, a, s, nx, o)
#define Q5_K_512(n, w, a, s, nx, o) k512_q45_K(GGML_TYPE_Q5_K, n, w, a, s, nx, o)
INSTANTIATE(dot512_q4_0, Q4_0_512)
INSTANTIATE(dot512_q4_1, Q4_1_512)
INSTANTIATE(dot512_q5_0, Q5_0_512)
INSTANTIATE(dot512_q5_1, Q5_1_512)
INSTANTIATE(dot512_q8_0, Q8_0_512)
INSTANTIATE(dot512_q4_K, Q4_K_512)
INSTANTIATE(dot512_q5_K, Q5_K_512)
INSTANTIATE(dot512_q6_K, k512_q6_K)
INSTANTIATE(dot512_q3_K, k512_q3_K)
#define IQ4_NL_512(n, w, a, s, nx, o) k512_legacy(GGML_TYPE_IQ4_NL, n, w, a, s, nx, o)
INSTANTIATE(dot512_iq4_nl, IQ4_NL_512)

/* The 256-bit VNNI kernels, as a table of their own (tests). */
static const kvq_ggml_kernels KERNELS256 = {
    .name = "avx512vnni-256",
    .dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_BF16] = dot_bf16,
        [GGML_TYPE_Q4_0] = dot_q4_0, [GGML_TYPE_Q4_1] = dot_q4_1, [GGML_TYPE_Q5_0] = dot_q5_0,
        [GGML_TYPE_Q5_1] = dot_q5_1, [GGML_TYPE_Q8_0] = dot_q8_0, [GGML_TYPE_Q4_K] = dot_q4_K,
        [GGML_TYPE_Q5_K] = dot_q5_K, [GGML_TYPE_Q6_K] = dot_q6_K, [GGML_TYPE_Q3_K] = dot_q3_K,
        [GGML_TYPE_IQ4_NL] = dot_iq4_nl,
    },
    .dotf = DOTF_TABLE,
    .quantize_q8a = quantize_q8a,
};

const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni256_table(void) { return &KERNELS256; }

static const kvq_ggml_kernels KERNELS = {
    .name = "avx512vnni",
    .dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_BF16] = dot_bf16,
        [GGML_TYPE_Q4_0] = dot512_q4_0, [GGML_TYPE_Q4_1] = dot512_q4_1, [GGML_TYPE_Q5_0] = dot512_q5_0,
        [GGML_TYPE_Q5_1] = dot512_q5_1, [GGML_TYPE_Q8_0] = dot512_q8_0, [GGML_TYPE_Q4_K] = dot512_q4_K,
        [GGML_TYPE_Q5_K] = dot512_q5_K, [GGML_TYPE_Q6_K] = dot512_q6_K, [GGML_TYPE_Q3_K] = dot512_q3_K,
        [GGML_TYPE_IQ4_NL] = dot512_iq4_nl,
    },
    .dotf = DOTF_TABLE,
    .dotr = {
        [GGML_TYPE_Q4_0] = dotr_q4_0, [GGML_TYPE_Q4_1] = dotr_q4_1, [GGML_TYPE_Q5_0] = dotr_q5_0,
        [GGML_TYPE_Q5_1] = dotr_q5_1, [GGML_TYPE_Q8_0] = dotr_q8_0, [GGML_TYPE_IQ4_NL] = dotr_iq4_nl,
        [GGML_TYPE_Q4_K] = dotr_q4_K, [GGML_TYPE_Q6_K] = dotr_q6_K,
    },
    .quantize_q8a = quantize_q8a,
};

const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni_table(void) { return &KERNELS; }
#else
const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni_table(void) { return kvq_ggml_kernels_scalar(); }
const kvq_ggml_kernels *kvq_ggml_kernels_avx512vnni256_table(void) { return kvq_ggml_kernels_scalar(); }
#endif
