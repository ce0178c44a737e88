/*
 * AVX2 (and AVX-512) kernels of the bitshift trellis (tcq_kernels.h), bit
 * for bit the scalar references of tcq_kernels.c.
 *
 * Forward recursion, one step: for 8 consecutive groups r0..r0+7 and each
 * j, the candidates C_{t-1}[r0 + j R ..] are 8 contiguous states: one load
 * of f, e = u - f, and their M_{t-1} values, 8 / J groups (k <= 3) spread
 * to the lanes by one vpermilps (k = 1, 2) or a broadcast (k = 3, 4: one
 * group for all 8 lanes), then fma(e, e, M) and a running vminps: 3 or 4
 * vector operations per 8 states, and the costs never go to memory.
 * The traceback is the reference's, with a hardware fma.
 *
 * Values of a record (decode, score, accumulate), 8 at a time: the states
 * of values t0 .. t0+7 (t0 % 8 == 0) are windows of the 16 stream bytes
 * from byte (d-8-t0) k / 8 (symbols in reverse order: s_{t0+l} starts
 * (7-l) k bits above s_{t0+7}, which starts on a byte boundary), taken out
 * by one vpshufb (each lane's 4 bytes), a vpsrlvd and a mask; f(s) is then
 * computed in registers as tcq_value does (vpmulld, add, the byte sum by
 * vpmaddubsw + vpmaddwd, sub, convert, multiply): 1.5x faster on this AVX2
 * host (Zen 3) than a vgatherdps from the 16 KB table. Score and
 * accumulate use the values in registers (up to 8 queries a pass; scores
 * of 2 records a pass for <= 4 queries, sharing each query load;
 * accumulation of 4 records a pass, one load and store of the
 * accumulator for the 4), with
 * the 1/sqrt(21845) factor moved onto the query or weight (a different
 * rounding, within 1e-6 of the reference).
 */
#include <string.h>

#include "simd_util.h"
#include "tcq_kernels.h"

#if KVQ_X86
#include <immintrin.h>

/* M_{t-1}'s values of 8 states p0 .. p0+7 (p0 % 8 == 0), g = M_{t-1} + (p0 >> k);
 * lane l: group (p0 + l) >> k. k = 1, 2: groups g .. g+3 in both halves (one broadcast
 * load), then an in-lane vpermilps; k = 3, 4: one group, a broadcast. The
 * 16-byte load may read up to 2 floats past M_{t-1}, lanes never used
 * (the scratch has slack after the last array). */
KVQ_TARGET_AVX2 static inline __m256 mgroups(const int k, const float *g, __m256i idx) {
    if (k <= 2) return _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)g), idx);
    return _mm256_broadcast_ss(g);
}

/* One step: M_t from M_{t-1} (mp) and u_{t-1}. With literal k and L the
 * offsets j R and j R >> k are constants of the addressing. */
KVQ_TARGET_AVX2 static inline void step_avx2(const int k, const int L, const float *f, float ut, const float *mp,
                                             float *mt) {
    const int J = 1 << k;
    const uint32_t R = 1u << (L - k);
    const __m256 uv = _mm256_set1_ps(ut);
    const __m256i idx = k == 1 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3) : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (uint32_t r0 = 0; r0 < R; r0 += 8) {
        const float *fr = f + r0, *mr = mp + (r0 >> k);
        __m256 e = _mm256_sub_ps(uv, _mm256_loadu_ps(fr));
        __m256 m = _mm256_fmadd_ps(e, e, mgroups(k, mr, idx));
        for (int j = 1; j < J; j++) {
            e = _mm256_sub_ps(uv, _mm256_loadu_ps(fr + (uint32_t)j * R));
            m = _mm256_min_ps(m, _mm256_fmadd_ps(e, e, mgroups(k, mr + (((uint32_t)j * R) >> k), idx)));
        }
        _mm256_storeu_ps(mt + r0, m);
    }
}

KVQ_TARGET_AVX2 static inline void forward_kl(const int k, const int L, const float *f, const float *u, int T, float *M,
                                              float *C) {
    const uint32_t R = 1u << (L - k), S = 1u << L;
    for (int t = 1; t < T; t++) step_avx2(k, L, f, u[t - 1], M + (size_t)(t - 1) * R, M + (size_t)t * R);
    const float *ml = M + (size_t)(T - 1) * R;
    const __m256 uv = _mm256_set1_ps(u[T - 1]);
    const __m256i idx = k == 1 ? _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3) : _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    for (uint32_t s0 = 0; s0 < S; s0 += 8) {
        const __m256 e = _mm256_sub_ps(uv, _mm256_loadu_ps(f + s0));
        _mm256_storeu_ps(C + s0, _mm256_fmadd_ps(e, e, mgroups(k, ml + (s0 >> k), idx)));
    }
}

/* Literal k (and L for the plans' L = 12): the inner loops unrolled. */
KVQ_TARGET_AVX2 void tcq_forward_avx2(const tcq_code *tc, const float *u, int T, float *M, float *C) {
    const float *f = tc->f;
    if (tc->L == 12) switch (tc->k) {
        case 1: forward_kl(1, 12, f, u, T, M, C); return;
        case 2: forward_kl(2, 12, f, u, T, M, C); return;
        case 3: forward_kl(3, 12, f, u, T, M, C); return;
        default: forward_kl(4, 12, f, u, T, M, C); return;
        }
    switch (tc->k) {
    case 1: forward_kl(1, tc->L, f, u, T, M, C); return;
    case 2: forward_kl(2, tc->L, f, u, T, M, C); return;
    case 3: forward_kl(3, tc->L, f, u, T, M, C); return;
    default: forward_kl(4, tc->L, f, u, T, M, C); return;
    }
}

/* AVX-512 forward step: 16 consecutive groups r0..r0+15 a pass, the same
 * candidates in the same order j = 0 .. J-1 (one fma and one vminps each,
 * lane by lane the AVX2 step's operations, so M_t is bit for bit the same).
 * Lane l reads group (p0 + l) >> k of M_{t-1}, g = M_{t-1} + (p0 >> k):
 * k = 4: one group, a broadcast; k = 3: groups g, g+1 (lanes 0-7, 8-15),
 * k = 2: g .. g+3 (four lanes each): a broadcast of the 2 or 4 floats to
 * every 128-bit lane, then an in-lane vpermilps; k = 1: g .. g+7 (two lanes
 * each), a 256-bit load and a vpermps. The loads stay inside M_{t-1}. */
KVQ_TARGET_AVX512 static inline __m512 mgroups16(const int k, const float *g, __m512i idx) {
    if (k == 4) return _mm512_set1_ps(*g);
    if (k == 3) {
        double g2;
        memcpy(&g2, g, sizeof g2); /* groups g, g+1 */
        return _mm512_permutevar_ps(_mm512_castpd_ps(_mm512_set1_pd(g2)), idx);
    }
    if (k == 2) return _mm512_permutevar_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(g)), idx);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(_mm256_loadu_ps(g)));
}

KVQ_TARGET_AVX512 static inline __m512i mgroups16_idx(const int k) {
    if (k == 3) return _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    if (k == 2) return _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
}

KVQ_TARGET_AVX512 static inline void step_avx512(const int k, const int L, const float *f, float ut, const float *mp,
                                                 float *mt) {
    const int J = 1 << k;
    const uint32_t R = 1u << (L - k);
    const __m512 uv = _mm512_set1_ps(ut);
    const __m512i idx = mgroups16_idx(k);
    for (uint32_t r0 = 0; r0 < R; r0 += 16) {
        const float *fr = f + r0, *mr = mp + (r0 >> k);
        __m512 e = _mm512_sub_ps(uv, _mm512_loadu_ps(fr));
        __m512 m = _mm512_fmadd_ps(e, e, mgroups16(k, mr, idx));
        for (int j = 1; j < J; j++) {
            e = _mm512_sub_ps(uv, _mm512_loadu_ps(fr + (uint32_t)j * R));
            m = _mm512_min_ps(m, _mm512_fmadd_ps(e, e, mgroups16(k, mr + (((uint32_t)j * R) >> k), idx)));
        }
        _mm512_storeu_ps(mt + r0, m);
    }
}

KVQ_TARGET_AVX512 static inline void forward512_kl(const int k, const int L, const float *f, const float *u, int T,
                                                   float *M, float *C) {
    const uint32_t R = 1u << (L - k), S = 1u << L;
    for (int t = 1; t < T; t++) step_avx512(k, L, f, u[t - 1], M + (size_t)(t - 1) * R, M + (size_t)t * R);
    const float *ml = M + (size_t)(T - 1) * R;
    const __m512 uv = _mm512_set1_ps(u[T - 1]);
    const __m512i idx = mgroups16_idx(k);
    for (uint32_t s0 = 0; s0 < S; s0 += 16) {
        const __m512 e = _mm512_sub_ps(uv, _mm512_loadu_ps(f + s0));
        _mm512_storeu_ps(C + s0, _mm512_fmadd_ps(e, e, mgroups16(k, ml + (s0 >> k), idx)));
    }
}

/* R = 2^(L-k) >= 16 groups (L >= k + 4; the plans' L = 12, k <= 4). */
KVQ_TARGET_AVX512 void tcq_forward_avx512(const tcq_code *tc, const float *u, int T, float *M, float *C) {
    const float *f = tc->f;
    if (tc->L - tc->k < 4) { tcq_forward_avx2(tc, u, T, M, C); return; }
    if (tc->L == 12) switch (tc->k) {
        case 1: forward512_kl(1, 12, f, u, T, M, C); return;
        case 2: forward512_kl(2, 12, f, u, T, M, C); return;
        case 3: forward512_kl(3, 12, f, u, T, M, C); return;
        default: forward512_kl(4, 12, f, u, T, M, C); return;
        }
    switch (tc->k) {
    case 1: forward512_kl(1, tc->L, f, u, T, M, C); return;
    case 2: forward512_kl(2, tc->L, f, u, T, M, C); return;
    case 3: forward512_kl(3, tc->L, f, u, T, M, C); return;
    default: forward512_kl(4, tc->L, f, u, T, M, C); return;
    }
}

/* The least of the 2^L costs by vminps, then its first position (the
 * reference keeps the first of equal minima). */
KVQ_TARGET_AVX2 uint32_t tcq_argmin_all_avx2(const tcq_code *tc, const float *C) {
    const uint32_t S = 1u << tc->L;
    __m256 m0 = _mm256_loadu_ps(C), m1 = _mm256_loadu_ps(C + 8);
    for (uint32_t s = 16; s < S; s += 16) {
        m0 = _mm256_min_ps(m0, _mm256_loadu_ps(C + s));
        m1 = _mm256_min_ps(m1, _mm256_loadu_ps(C + s + 8));
    }
    __m256 m = _mm256_min_ps(m0, m1);
    m = _mm256_min_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
    m = _mm256_min_ps(m, _mm256_shuffle_ps(m, m, 0xB1)); /* the minimum in every lane */
    for (uint32_t s = 0; s < S; s += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(C + s), m, _CMP_EQ_OQ));
        if (hit) return s + (uint32_t)__builtin_ctz((unsigned)hit);
    }
    return 0; /* not reached: the minimum is one of the costs */
}

KVQ_TARGET_AVX2 void tcq_traceback_avx2(const tcq_code *tc, const float *u, const float *M, int T, uint32_t end,
                                        uint32_t *st) {
    const int k = tc->k;
    const uint32_t R = 1u << (tc->L - k), J = 1u << k;
    uint32_t s = end;
    st[T - 1] = s;
    for (int t = T - 1; t > 0; t--) {
        const uint32_t r = s >> k;
        const float *mp = M + (size_t)(t - 1) * R, m = M[(size_t)t * R + r];
        const __m128 ut = _mm_set_ss(u[t - 1]);
        uint32_t j = 0;
        for (; j + 1 < J; j++) {
            const uint32_t p = r + j * R;
            const __m128 e = _mm_sub_ss(ut, _mm_set_ss(tc->f[p]));
            if (_mm_cvtss_f32(_mm_fmadd_ss(e, e, _mm_set_ss(mp[p >> k]))) == m) break;
        }
        s = r + j * R;
        st[t - 1] = s;
    }
}

/* Where the 16 stream bytes of each group of 8 values are read: from the
 * record when the window's `need` bytes lie inside it and the 16-byte load
 * stays below `lim` (the end of the caller's array: the bytes past the
 * record are the next record's, never used); else from `tail`, the
 * record's last 16 bytes then its first 16 (the circular wrap) built by one
 * 32-byte store. Records of < 16 bytes: a padded copy. */
typedef struct {
    const uint8_t *bits, *lim, *tail;
    size_t nb, need, tail0;
    _Alignas(32) uint8_t tailbuf[32];
    uint8_t pad[TCQ_BYTES_MAX + 16];
} stream16;

KVQ_TARGET_AVX2 static inline void stream16_init(stream16 *w, const uint8_t *bits, size_t nb, size_t need,
                                                 const uint8_t *lim) {
    w->need = need;
    if (nb < 16) {
        tcq_stream_pad(bits, nb, w->pad);
        w->bits = w->tail = w->pad;
        w->lim = w->pad + nb + 16;
        w->nb = nb + 16;
        w->tail0 = 0;
        return;
    }
    const __m128i lo = _mm_loadu_si128((const __m128i *)(bits + nb - 16)), hi = _mm_loadu_si128((const __m128i *)bits);
    _mm256_store_si256((__m256i *)w->tailbuf, _mm256_set_m128i(hi, lo));
    w->bits = bits;
    w->lim = lim;
    w->nb = nb;
    w->tail = w->tailbuf;
    w->tail0 = nb - 16;
}

static inline const uint8_t *stream16_at(const stream16 *w, size_t B) {
    return B + w->need <= w->nb && w->bits + B + 16 <= w->lim ? w->bits + B : w->tail + (B - w->tail0);
}

/* Constants of the 8-value step for k bits a symbol and L-bit states. */
typedef struct {
    __m256i shuf, shift, mask, mul, add, c510, ones8, ones16;
} vconst;

KVQ_TARGET_AVX2 static inline vconst vconst_make(int k, int L) {
    vconst c;
    uint8_t sh[32];
    int r[8];
    for (int l = 0; l < 8; l++) { /* lane l: bit (7-l) k of the 16 bytes */
        const int o = (7 - l) * k;
        for (int i = 0; i < 4; i++) sh[4 * l + i] = (uint8_t)((o >> 3) + i);
        r[l] = o & 7;
    }
    c.shuf = _mm256_loadu_si256((const __m256i *)sh);
    c.shift = _mm256_loadu_si256((const __m256i *)r);
    c.mask = _mm256_set1_epi32((1 << L) - 1);
    c.mul = _mm256_set1_epi32((int)TCQ_MUL);
    c.add = _mm256_set1_epi32((int)TCQ_ADD);
    c.c510 = _mm256_set1_epi32(510);
    c.ones8 = _mm256_set1_epi8(1);
    c.ones16 = _mm256_set1_epi16(1);
    return c;
}

/* (float)(sum - 510) of the values t0 .. t0+7: f / TCQ_INV_SD, exactly. */
KVQ_TARGET_AVX2 static inline __m256 raw8(const vconst *c, const stream16 *w, int T, int k, int t0) {
    const __m128i b16 = _mm_loadu_si128((const __m128i *)stream16_at(w, (size_t)((T - 8 - t0) * k / 8)));
    const __m256i b = _mm256_broadcastsi128_si256(b16);
    __m256i h = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, c->shuf), c->shift), c->mask);
    h = _mm256_add_epi32(_mm256_mullo_epi32(h, c->mul), c->add);
    const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(h, c->ones8), c->ones16);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, c->c510));
}

/* the record's scale (F16C: the exact conversion, as kvq_f16_to_f32) */
KVQ_TARGET_AVX2 static inline float scale_avx2(const tcq_records *R, const uint8_t *rec) {
    if (R->scale32) {
        float g;
        memcpy(&g, rec + R->scale_off, 4);
        return g;
    }
    uint16_t h;
    memcpy(&h, rec + R->scale_off, 2);
    return _cvtsh_ss(h);
}

/* bytes a window of 8 states spans: 7 k + L bits from a byte boundary */
static inline size_t window_bytes(int k, int L) { return (size_t)(7 * k + L + 7) / 8; }

KVQ_TARGET_AVX2 void tcq_values_avx2(const tcq_code *tc, const uint8_t *bits, int T, float *v) {
    const int k = tc->k;
    const size_t nb = (size_t)T * k / 8;
    stream16 w;
    stream16_init(&w, bits, nb, window_bytes(k, tc->L), bits + nb);
    const vconst c = vconst_make(k, tc->L);
    const __m256 isd = _mm256_set1_ps(TCQ_INV_SD);
    for (int t0 = 0; t0 < T; t0 += 8) _mm256_storeu_ps(v + t0, _mm256_mul_ps(raw8(&c, &w, T, k, t0), isd));
}

/* Scores of n records against m <= 8 queries (rows of T floats, already
 * multiplied by TCQ_INV_SD: qs); literal m keeps the sums in registers. */
KVQ_TARGET_AVX2 static inline void score_m(const int m, const tcq_records *R, const vconst *c, const float *qs,
                                           const uint8_t *codes, size_t n, float *scores) {
    const int T = R->d, k = R->tc->k;
    const size_t nb = (size_t)T * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    size_t i = 0;
    if (m <= 4) /* two records a pass: each query row loaded once for both */
        for (; i + 2 <= n; i += 2) {
            const uint8_t *r0 = codes + i * R->stride, *r1 = r0 + R->stride;
            stream16 w0, w1;
            stream16_init(&w0, r0 + R->bits_off, nb, need, lim);
            stream16_init(&w1, r1 + R->bits_off, nb, need, lim);
            __m256 s0[4], s1[4];
            for (int j = 0; j < m; j++) s0[j] = s1[j] = _mm256_setzero_ps();
            for (int t0 = 0; t0 < T; t0 += 8) {
                const __m256 x0 = raw8(c, &w0, T, k, t0), x1 = raw8(c, &w1, T, k, t0);
                for (int j = 0; j < m; j++) {
                    const __m256 q = _mm256_loadu_ps(qs + (size_t)j * T + t0);
                    s0[j] = _mm256_fmadd_ps(q, x0, s0[j]);
                    s1[j] = _mm256_fmadd_ps(q, x1, s1[j]);
                }
            }
            const float g0 = scale_avx2(R, r0), g1 = scale_avx2(R, r1);
            for (int j = 0; j < m; j++) {
                scores[(size_t)j * n + i] = g0 * hsum_256(s0[j]);
                scores[(size_t)j * n + i + 1] = g1 * hsum_256(s1[j]);
            }
        }
    for (; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        stream16 w;
        stream16_init(&w, rec + R->bits_off, nb, need, lim);
        __m256 s[8];
        for (int j = 0; j < m; j++) s[j] = _mm256_setzero_ps();
        for (int t0 = 0; t0 < T; t0 += 8) {
            const __m256 x = raw8(c, &w, T, k, t0);
            for (int j = 0; j < m; j++) s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qs + (size_t)j * T + t0), x, s[j]);
        }
        const float g = scale_avx2(R, rec);
        for (int j = 0; j < m; j++) scores[(size_t)j * n + i] = g * hsum_256(s[j]);
    }
}

KVQ_TARGET_AVX2 void tcq_score_avx2(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                    const uint8_t *codes, size_t n, float *scores) {
    const int d = R->d;
    const vconst c = vconst_make(R->tc->k, R->tc->L);
    float qs[8 * KVQ_DIM_MAX];
    for (size_t j0 = 0; j0 < nq; j0 += 8) { /* 8 queries a pass over the records */
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        for (size_t j = 0; j < m; j++)
            for (int t = 0; t < d; t++) qs[j * (size_t)d + t] = qp[(j0 + j) * qstride + (size_t)t] * TCQ_INV_SD;
        float *out = scores + j0 * n;
        switch (m) {
        case 1: score_m(1, R, &c, qs, codes, n, out); break;
        case 2: score_m(2, R, &c, qs, codes, n, out); break;
        case 3: score_m(3, R, &c, qs, codes, n, out); break;
        case 4: score_m(4, R, &c, qs, codes, n, out); break;
        case 5: score_m(5, R, &c, qs, codes, n, out); break;
        case 6: score_m(6, R, &c, qs, codes, n, out); break;
        case 7: score_m(7, R, &c, qs, codes, n, out); break;
        default: score_m(8, R, &c, qs, codes, n, out); break;
        }
    }
}

/* Accumulate, G <= 4 records a pass: their values in registers, each
 * accumulator row loaded and stored once for the G records (added in
 * record order, as the reference does). */
KVQ_TARGET_AVX2 static inline void accum_g(const int G, const tcq_records *R, const vconst *c, const float *w, size_t nq,
                                           const uint8_t *codes, size_t n, size_t i, float *acc) {
    const int d = R->d, k = R->tc->k;
    const size_t nb = (size_t)d * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    stream16 st[4];
    float wg[4][8];
    for (int r = 0; r < G; r++) {
        const uint8_t *rec = codes + (i + (size_t)r) * R->stride;
        stream16_init(&st[r], rec + R->bits_off, nb, need, lim);
    }
    for (size_t j0 = 0; j0 < nq; j0 += 8) { /* 8 queries a pass */
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        for (int r = 0; r < G; r++) {
            const float g = scale_avx2(R, codes + (i + (size_t)r) * R->stride) * TCQ_INV_SD;
            for (size_t j = 0; j < m; j++) wg[r][j] = w[(j0 + j) * n + i + (size_t)r] * g;
        }
        float *a0 = acc + j0 * (size_t)d;
        for (int t0 = 0; t0 < d; t0 += 8) {
            __m256 x[4];
            for (int r = 0; r < G; r++) x[r] = raw8(c, &st[r], d, k, t0);
            for (size_t j = 0; j < m; j++) {
                float *a = a0 + j * (size_t)d + t0;
                __m256 v = _mm256_loadu_ps(a);
                for (int r = 0; r < G; r++) v = _mm256_fmadd_ps(_mm256_broadcast_ss(&wg[r][j]), x[r], v);
                _mm256_storeu_ps(a, v);
            }
        }
    }
}

KVQ_TARGET_AVX2 void tcq_accum_avx2(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                    float *acc) {
    const vconst c = vconst_make(R->tc->k, R->tc->L);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) accum_g(4, R, &c, w, nq, codes, n, i, acc);
    for (; i < n; i++) accum_g(1, R, &c, w, nq, codes, n, i, acc);
}

/* ---- AVX-512 (and VNNI) score and accumulate ----------------------------
 * Bit for bit the AVX2 kernels above (and so the same digests):
 *   score: each 512-bit vector holds the 8 values t0 .. t0+7 of TWO
 *     records (lanes 0-7 and 8-15), the query row broadcast to both halves,
 *     so every lane runs the AVX2 lane's chain of fmas in the same order;
 *     4 records a pass (two vectors), up to 8 queries, and each half
 *     reduced by hsum_256 as the AVX2 kernel does;
 *   accumulate: 16 consecutive values of one record a vector (the element
 *     t of the accumulator gets the same fmas in the same record order as
 *     in the AVX2 kernel, whatever the vector width); an 8-value tail by
 *     the AVX2 step.
 * The state and value arithmetic is the AVX2 one on 16 lanes; with VNNI
 * the byte sum minus 510 is one vpdpbusd (h's 4 unsigned bytes times 1,
 * added to -510: the same integer as vpmaddubsw + vpmaddwd - 510). */
typedef struct {
    __m512i shuf8, shift8, shuf16, shift16, mask, mul, add, c510, m510, ones8, ones16;
} vconst512;

KVQ_TARGET_AVX512 static inline vconst512 vconst512_make(int k, int L) {
    vconst512 c;
    uint8_t s8[64], s16[64];
    int r8[16], r16[16];
    for (int l = 0; l < 16; l++) {
        const int o8 = (7 - (l & 7)) * k, o16 = (15 - l) * k; /* lane l's bit in the 16 bytes */
        for (int i = 0; i < 4; i++) {
            s8[4 * l + i] = (uint8_t)((o8 >> 3) + i);
            s16[4 * l + i] = (uint8_t)((o16 >> 3) + i);
        }
        r8[l] = o8 & 7;
        r16[l] = o16 & 7;
    }
    c.shuf8 = _mm512_loadu_si512(s8);
    c.shift8 = _mm512_loadu_si512(r8);
    c.shuf16 = _mm512_loadu_si512(s16);
    c.shift16 = _mm512_loadu_si512(r16);
    c.mask = _mm512_set1_epi32((1 << L) - 1);
    c.mul = _mm512_set1_epi32((int)TCQ_MUL);
    c.add = _mm512_set1_epi32((int)TCQ_ADD);
    c.c510 = _mm512_set1_epi32(510);
    c.m510 = _mm512_set1_epi32(-510);
    c.ones8 = _mm512_set1_epi8(1);
    c.ones16 = _mm512_set1_epi16(1);
    return c;
}

/* (float)(sum - 510) of the 16 states in h (16-byte windows already shifted
 * and masked). */
KVQ_TARGET_AVX512 static inline __m512 value16(const vconst512 *c, __m512i h, const int vnni) {
    h = _mm512_add_epi32(_mm512_mullo_epi32(h, c->mul), c->add);
    __m512i sum;
    if (vnni) {
        sum = c->m510;
        DPBUSD(sum, h, c->ones8);
    } else {
        sum = _mm512_sub_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(h, c->ones8), c->ones16), c->c510);
    }
    return _mm512_cvtepi32_ps(sum);
}

/* values t0 .. t0+7 of record a (lanes 0-7) and of record b (lanes 8-15) */
KVQ_TARGET_AVX512 static inline __m512 raw8x2(const vconst512 *c, const stream16 *wa, const stream16 *wb, int T,
                                              int k, int t0, const int vnni) {
    const size_t B = (size_t)((T - 8 - t0) * k / 8);
    const __m128i a = _mm_loadu_si128((const __m128i *)stream16_at(wa, B));
    const __m128i b = _mm_loadu_si128((const __m128i *)stream16_at(wb, B));
    const __m512i ab = _mm512_shuffle_i32x4(_mm512_castsi128_si512(a), _mm512_castsi128_si512(b), 0x00);
    const __m512i h = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(ab, c->shuf8), c->shift8), c->mask);
    return value16(c, h, vnni);
}

/* values t0 .. t0+15 of one record: the 16 states span 15 k + L <= 72 bits
 * from the byte boundary of s_{t0+15} */
KVQ_TARGET_AVX512 static inline __m512 raw16(const vconst512 *c, const stream16 *w, int T, int k, int t0,
                                             const int vnni) {
    const size_t B = (size_t)((T - 16 - t0) * k / 8);
    const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)stream16_at(w, B)));
    const __m512i h = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(b, c->shuf16), c->shift16), c->mask);
    return value16(c, h, vnni);
}

static inline size_t window16_bytes(int k, int L) { return (size_t)(15 * k + L + 7) / 8; }

/* Scores of n records against m <= 8 queries (qs: rows of T floats times
 * TCQ_INV_SD, as in tcq_score_avx2), 4 records a pass; a short last pass
 * repeats its last record in the unused lanes. */
KVQ_TARGET_AVX512 static inline void score512_m(const int m, const int vnni, const tcq_records *R, const vconst512 *c,
                                                const float *qs, const uint8_t *codes, size_t n, float *scores) {
    const int T = R->d, k = R->tc->k;
    const size_t nb = (size_t)T * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    for (size_t i = 0; i < n; i += 4) {
        const size_t nr = n - i < 4 ? n - i : 4;
        stream16 w[4];
        float g[4];
        for (size_t r = 0; r < 4; r++) {
            const uint8_t *rec = codes + (i + (r < nr ? r : nr - 1)) * R->stride;
            stream16_init(&w[r], rec + R->bits_off, nb, need, lim);
            g[r] = scale_avx2(R, rec);
        }
        __m512 s01[8], s23[8];
        for (int j = 0; j < m; j++) s01[j] = s23[j] = _mm512_setzero_ps();
        for (int t0 = 0; t0 < T; t0 += 8) {
            const __m512 x01 = raw8x2(c, &w[0], &w[1], T, k, t0, vnni);
            const __m512 x23 = raw8x2(c, &w[2], &w[3], T, k, t0, vnni);
            for (int j = 0; j < m; j++) {
                const __m512 q = _mm512_broadcast_f32x8(_mm256_loadu_ps(qs + (size_t)j * T + t0));
                s01[j] = _mm512_fmadd_ps(q, x01, s01[j]);
                s23[j] = _mm512_fmadd_ps(q, x23, s23[j]);
            }
        }
        for (int j = 0; j < m; j++) {
            float *o = scores + (size_t)j * n + i;
            __m256 h[4] = {_mm512_castps512_ps256(s01[j]), _mm512_extractf32x8_ps(s01[j], 1),
                           _mm512_castps512_ps256(s23[j]), _mm512_extractf32x8_ps(s23[j], 1)};
            for (size_t r = 0; r < nr; r++) o[r] = g[r] * hsum_256(h[r]);
        }
    }
}

KVQ_TARGET_AVX512 static inline void score512_all(const int vnni, const tcq_records *R, const float *qp,
                                                  size_t qstride, size_t nq, const uint8_t *codes, size_t n,
                                                  float *scores) {
    const int d = R->d;
    const vconst512 c = vconst512_make(R->tc->k, R->tc->L);
    float qs[8 * KVQ_DIM_MAX];
    for (size_t j0 = 0; j0 < nq; j0 += 8) {
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        for (size_t j = 0; j < m; j++)
            for (int t = 0; t < d; t++) qs[j * (size_t)d + t] = qp[(j0 + j) * qstride + (size_t)t] * TCQ_INV_SD;
        float *out = scores + j0 * n;
        switch (m) {
        case 1: score512_m(1, vnni, R, &c, qs, codes, n, out); break;
        case 2: score512_m(2, vnni, R, &c, qs, codes, n, out); break;
        case 3: score512_m(3, vnni, R, &c, qs, codes, n, out); break;
        case 4: score512_m(4, vnni, R, &c, qs, codes, n, out); break;
        case 5: score512_m(5, vnni, R, &c, qs, codes, n, out); break;
        case 6: score512_m(6, vnni, R, &c, qs, codes, n, out); break;
        case 7: score512_m(7, vnni, R, &c, qs, codes, n, out); break;
        default: score512_m(8, vnni, R, &c, qs, codes, n, out); break;
        }
    }
}

KVQ_TARGET_AVX512 static void score512_plain(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                             const uint8_t *codes, size_t n, float *scores) {
    score512_all(0, R, qp, qstride, nq, codes, n, scores);
}
KVQ_TARGET_AVX512VNNI static void score512_vnni(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                                const uint8_t *codes, size_t n, float *scores) {
    score512_all(1, R, qp, qstride, nq, codes, n, scores);
}

void tcq_score_avx512(const tcq_records *R, const float *qp, size_t qstride, size_t nq, const uint8_t *codes,
                      size_t n, float *scores) {
    if (R->vnni) score512_vnni(R, qp, qstride, nq, codes, n, scores);
    else score512_plain(R, qp, qstride, nq, codes, n, scores);
}

/* Accumulate, G <= 4 records a pass (tcq_accum_avx2's order). */
KVQ_TARGET_AVX512 static inline void accum512_g(const int G, const int vnni, const tcq_records *R, const vconst512 *c,
                                                const vconst *c2, const float *w, size_t nq, const uint8_t *codes,
                                                size_t n, size_t i, float *acc) {
    const int d = R->d, k = R->tc->k;
    const size_t nb = (size_t)d * k / 8, need = window16_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    stream16 st[4];
    float wg[4][8];
    for (int r = 0; r < G; r++) {
        const uint8_t *rec = codes + (i + (size_t)r) * R->stride;
        stream16_init(&st[r], rec + R->bits_off, nb, need, lim);
    }
    for (size_t j0 = 0; j0 < nq; j0 += 8) {
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        for (int r = 0; r < G; r++) {
            const float g = scale_avx2(R, codes + (i + (size_t)r) * R->stride) * TCQ_INV_SD;
            for (size_t j = 0; j < m; j++) wg[r][j] = w[(j0 + j) * n + i + (size_t)r] * g;
        }
        float *a0 = acc + j0 * (size_t)d;
        int t0 = 0;
        for (; t0 + 16 <= d; t0 += 16) {
            __m512 x[4];
            for (int r = 0; r < G; r++) x[r] = raw16(c, &st[r], d, k, t0, vnni);
            for (size_t j = 0; j < m; j++) {
                float *a = a0 + j * (size_t)d + t0;
                __m512 v = _mm512_loadu_ps(a);
                for (int r = 0; r < G; r++) v = _mm512_fmadd_ps(_mm512_set1_ps(wg[r][j]), x[r], v);
                _mm512_storeu_ps(a, v);
            }
        }
        if (t0 < d) { /* d % 16 == 8 */
            __m256 x[4];
            for (int r = 0; r < G; r++) x[r] = raw8(c2, &st[r], d, k, t0);
            for (size_t j = 0; j < m; j++) {
                float *a = a0 + j * (size_t)d + t0;
                __m256 v = _mm256_loadu_ps(a);
                for (int r = 0; r < G; r++) v = _mm256_fmadd_ps(_mm256_set1_ps(wg[r][j]), x[r], v);
                _mm256_storeu_ps(a, v);
            }
        }
    }
}

KVQ_TARGET_AVX512 static inline void accum512_all(const int vnni, const tcq_records *R, const float *w, size_t nq,
                                                  const uint8_t *codes, size_t n, float *acc) {
    const vconst512 c = vconst512_make(R->tc->k, R->tc->L);
    const vconst c2 = vconst_make(R->tc->k, R->tc->L);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) accum512_g(4, vnni, R, &c, &c2, w, nq, codes, n, i, acc);
    for (; i < n; i++) accum512_g(1, vnni, R, &c, &c2, w, nq, codes, n, i, acc);
}

KVQ_TARGET_AVX512 static void accum512_plain(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes,
                                             size_t n, float *acc) {
    accum512_all(0, R, w, nq, codes, n, acc);
}
KVQ_TARGET_AVX512VNNI static void accum512_vnni(const tcq_records *R, const float *w, size_t nq,
                                                const uint8_t *codes, size_t n, float *acc) {
    accum512_all(1, R, w, nq, codes, n, acc);
}

void tcq_accum_avx512(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    if (R->vnni) accum512_vnni(R, w, nq, codes, n, acc);
    else accum512_plain(R, w, nq, codes, n, acc);
}


#endif
