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
 * host (Zen 3) than a vgatherdps from the 16 KB table. Accumulate uses the
 * values in registers (4 records a pass, one load and store of the
 * accumulator for the 4), with the 1/sqrt(21845) factor moved onto the
 * weight (a different rounding, within 1e-6 of the reference).
 *
 * Scores are integer dots with the 8-bit query (tcq_kernels.h): h(s)'s
 * bytes times q8_t, never a float value; AVX2 8 values a step
 * (vpmaddubsw + vpmaddwd), AVX-512 16 (vpdpbusd with VNNI), every path the
 * reference's integer, so bit for bit the same scores (the AVX-512 section
 * below says how the loads and the tail-biting wrap are done).
 */
#include <string.h>

#include "simd_util.h"
#include "tcq_kernels.h"

#if KVQ_X86
#include <immintrin.h>

/* the kernels whose constant arguments (widths, counts, variants) must be folded: always inlined */
#define AI static inline __attribute__((always_inline))

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

/* sum - 510, the centred integer value B(s_t) - 510, of the values t0 .. t0+7 */
KVQ_TARGET_AVX2 static inline __m256i centred8(const vconst *c, const stream16 *w, int T, int k, int t0) {
    const __m128i b16 = _mm_loadu_si128((const __m128i *)stream16_at(w, (size_t)((T - 8 - t0) * k / 8)));
    const __m256i b = _mm256_broadcastsi128_si256(b16);
    __m256i h = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, c->shuf), c->shift), c->mask);
    h = _mm256_add_epi32(_mm256_mullo_epi32(h, c->mul), c->add);
    const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(h, c->ones8), c->ones16);
    return _mm256_sub_epi32(sum, c->c510);
}

/* (float)(sum - 510) of the values t0 .. t0+7: f / TCQ_INV_SD, exactly. */
KVQ_TARGET_AVX2 static inline __m256 raw8(const vconst *c, const stream16 *w, int T, int k, int t0) {
    return _mm256_cvtepi32_ps(centred8(c, w, T, k, t0));
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

/* h(s) = TCQ_MUL s + TCQ_ADD of the states of values t0 .. t0+7: the value's bytes. */
KVQ_TARGET_AVX2 static inline __m256i hval8(const vconst *c, const stream16 *w, int T, int k, int t0) {
    const __m128i b16 = _mm_loadu_si128((const __m128i *)stream16_at(w, (size_t)((T - 8 - t0) * k / 8)));
    const __m256i b = _mm256_broadcastsi128_si256(b16);
    const __m256i s = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, c->shuf), c->shift), c->mask);
    return _mm256_add_epi32(_mm256_mullo_epi32(s, c->mul), c->add);
}

KVQ_TARGET_AVX2 static inline int32_t hsum_epi32_256(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* The score of an integer dot isum with a prepared query q (tcq_kernels.h): the reference's rounding. */
static inline float tcq_est(float g, int32_t isum, const float *q, int d) {
    return g * ((float)(isum - 510 * (int32_t)q[d + 1]) * q[d]);
}

/* The 8-bit query (tcq_query8_ref), 8 values a step: |q~|'s max as fmaxf (order-free, NaN ignored),
 * the products (double) q~_t (127 / m) rounded by cvtpd2dq (nearest even, as lrint), q8_t put in
 * the 4 bytes of its float by one byte shuffle, the integer sum: the reference's bytes and floats
 * (the profile of a tcq-weight prefill had tcq_query8_ref and fmaxf at 18% of its time). */
KVQ_TARGET_AVX2 void tcq_query8_avx2(int d, float *qp) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mv = _mm256_setzero_ps();
    for (int t = 0; t < d; t += 8) mv = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(qp + t), absmask), mv);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float m = _mm_cvtss_f32(m4);
    const __m256d inv = _mm256_set1_pd(m > 0 ? 127.0 / (double)m : 0.0);
    const __m128i lo = _mm_set1_epi32(-127), hi = _mm_set1_epi32(127);
    const __m128i rep = _mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    uint8_t *q4 = (uint8_t *)(qp + d + 2);
    __m128i sum = _mm_setzero_si128();
    for (int t = 0; t < d; t += 4) {
        __m128i v = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(qp + t)), inv));
        v = _mm_min_epi32(_mm_max_epi32(v, lo), hi);
        sum = _mm_add_epi32(sum, v);
        _mm_storeu_si128((__m128i *)(q4 + 4 * (size_t)t), _mm_shuffle_epi8(v, rep));
    }
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
    qp[d] = (m / 127.0f) * TCQ_INV_SD;
    qp[d + 1] = (float)_mm_cvtsi128_si32(sum);
}

/* Integer scores of n records against m <= 8 prepared queries, 8 values a step:
 * vpmaddubsw (h's bytes times 1: the pair sums, <= 510) then vpmaddwd with q8_t in both 16-bit
 * halves of its lane (the query's 4 bytes q8_t shifted right by 8 as 16-bit words) gives
 * q8_t B(s_t) in int32, exactly: the reference's integer. */
KVQ_TARGET_AVX2 static inline void score_m(const int m, const tcq_records *R, const vconst *c, const float *qp,
                                           size_t qstride, const uint8_t *codes, size_t n, float *scores) {
    const int T = R->d, k = R->tc->k;
    const size_t nb = (size_t)T * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        stream16 w;
        stream16_init(&w, rec + R->bits_off, nb, need, lim);
        __m256i s[8];
        for (int j = 0; j < m; j++) s[j] = _mm256_setzero_si256();
        for (int t0 = 0; t0 < T; t0 += 8) {
            const __m256i p = _mm256_maddubs_epi16(hval8(c, &w, T, k, t0), c->ones8);
            for (int j = 0; j < m; j++) {
                const float *q4 = qp + (size_t)j * qstride + T + 2 + t0;
                const __m256i q16 = _mm256_srai_epi16(_mm256_loadu_si256((const __m256i *)q4), 8);
                s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p, q16));
            }
        }
        const float g = scale_avx2(R, rec);
        for (int j = 0; j < m; j++)
            scores[(size_t)j * n + i] = tcq_est(g, hsum_epi32_256(s[j]), qp + (size_t)j * qstride, T);
    }
}

/* ---- many queries (prefill): records in the lanes ----------------------------
 * From TCQ_LANES_NQ queries on, the records' centred values v_t = B(s_t) - 510 (|v| <= 510) are
 * decoded once for a pass of up to TCQ_LANES_QC queries as signed 16-bit pairs (v_2p, v_2p+1),
 * transposed so that a vector holds pair p of 8 (AVX2) or 16 (AVX-512 VNNI, below) records, and
 * the pass's queries are put once in the same pair form (q8_2p, q8_2p+1) (their stored dwords
 * shifted right by 24: q8_t sign-extended, then packed to 16 bits). One vpmaddwd + vpaddd (AVX2) or
 * one vpdpwssd (VNNI), the query's pair broadcast, then adds v_2p q8_2p + v_2p+1 q8_2p+1 to the
 * records' sums of a query: no horizontal sum, a query's sums stored as one vector, 8 queries
 * sharing each load of the records' pairs. The sum is the reference's integer
 * sum_t q8_t (B(s_t) - 510) exactly (|sum| <= 512 * 510 * 127 < 2^31), so the scores are its bit for
 * bit (docs/RESULTS.md, "tcq prefill: records in the lanes"). */
#define TCQ_LANES_NQ 8
#define TCQ_LANES_QC 32 /* queries a pass: their pairs take TCQ_LANES_QC * d * 2 bytes of stack */
/* F(m, ...) with m = 1..8 a constant in each call (the lanes kernels' query count) */
#define TCQ_BY_M(m, F, ...)                                                                         \
    switch (m) {                                                                                    \
    case 1: F(1, __VA_ARGS__); break;                                                               \
    case 2: F(2, __VA_ARGS__); break;                                                               \
    case 3: F(3, __VA_ARGS__); break;                                                               \
    case 4: F(4, __VA_ARGS__); break;                                                               \
    case 5: F(5, __VA_ARGS__); break;                                                               \
    case 6: F(6, __VA_ARGS__); break;                                                               \
    case 7: F(7, __VA_ARGS__); break;                                                               \
    default: F(8, __VA_ARGS__); break;                                                              \
    }

/* the pass's queries qp (qc of them, qstride floats apart) as (q8_2p, q8_2p+1) pairs, d / 2 a query */
KVQ_TARGET_AVX2 static inline void query_pairs(int d, const float *qp, size_t qstride, size_t qc, uint32_t *qpair) {
    for (size_t j = 0; j < qc; j++) {
        const float *q4 = qp + j * qstride + d + 2;
        for (int t = 0; t < d; t += 16) {
            const __m256i a = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(q4 + t)), 24);
            const __m256i b = _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(q4 + t + 8)), 24);
            _mm256_storeu_si256((__m256i *)(qpair + j * (size_t)(d / 2) + t / 2),
                                _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8));
        }
    }
}

/* x[r] lane l -> x[l] lane r (an 8 x 8 transpose of dwords) */
KVQ_TARGET_AVX2 static inline void transpose8x8(__m256i x[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* u[4a + e] 128-bit lane q: column 4q + e of rows 4a .. 4a+3 */
    for (int a = 0; a < 2; a++) {
        u[4 * a] = _mm256_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 1] = _mm256_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 2] = _mm256_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
        u[4 * a + 3] = _mm256_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    for (int e = 0; e < 4; e++) {
        x[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
        x[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
    }
}

/* Queries j0 .. j0+m-1 (m <= 8; qpair: their pairs) against 8 records (hv: d / 2 rows of 8 pairs; gv
 * their scales, lanes of absent records 0), stored to the first rb records' scores. */
KVQ_TARGET_AVX2 AI void lanes8_m(const int m, int d, const uint32_t (*hv)[8], const uint32_t *qpair, __m256 gv,
                                 const float *qp, size_t qstride, size_t n, int rb, float *scores) {
    const int np = d / 2;
    __m256i acc[8];
    for (int j = 0; j < m; j++) acc[j] = _mm256_setzero_si256();
    for (int p = 0; p < np; p++) {
        const __m256i h = _mm256_load_si256((const __m256i *)hv[p]);
        for (int j = 0; j < m; j++)
            acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(h, _mm256_set1_epi32((int)qpair[(size_t)j * np + p])));
    }
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(rb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int j = 0; j < m; j++) {
        /* tcq_est, lane by lane: g ((float) isum qs), the sum already centred */
        const float qs = qp[(size_t)j * qstride + d];
        const __m256 e = _mm256_mul_ps(gv, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j]), _mm256_set1_ps(qs)));
        _mm256_maskstore_ps(scores + (size_t)j * n, keep, e);
    }
}

/* d % 16 == 0, nq >= TCQ_LANES_NQ */
KVQ_TARGET_AVX2 static void score256_lanes(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                           const uint8_t *codes, size_t n, float *scores) {
    const int d = R->d, k = R->tc->k, np = d / 2;
    const vconst c = vconst_make(k, R->tc->L);
    const size_t nb = (size_t)d * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    _Alignas(32) uint32_t hv[KVQ_DIM_MAX / 2][8];
    uint32_t qpair[TCQ_LANES_QC * (KVQ_DIM_MAX / 2)];
    for (size_t q0 = 0; q0 < nq; q0 += TCQ_LANES_QC) {
        const size_t qc = nq - q0 < TCQ_LANES_QC ? nq - q0 : TCQ_LANES_QC;
        query_pairs(d, qp + q0 * qstride, qstride, qc, qpair);
        for (size_t i0 = 0; i0 < n; i0 += 8) {
            const int rb = n - i0 < 8 ? (int)(n - i0) : 8;
            stream16 w[8];
            _Alignas(32) float g[8];
            for (int r = 0; r < 8; r++) {
                const uint8_t *rec = codes + (i0 + (size_t)(r < rb ? r : 0)) * R->stride; /* absent: record i0 again */
                stream16_init(&w[r], rec + R->bits_off, nb, need, lim);
                g[r] = r < rb ? scale_avx2(R, rec) : 0.f;
            }
            for (int t0 = 0; t0 < d; t0 += 16) { /* values t0 .. t0+15: pairs t0/2 .. t0/2+7 */
                __m256i x[8];
                for (int r = 0; r < 8; r++)
                    x[r] = _mm256_permute4x64_epi64(
                        _mm256_packs_epi32(centred8(&c, &w[r], d, k, t0), centred8(&c, &w[r], d, k, t0 + 8)), 0xD8);
                transpose8x8(x);
                for (int l = 0; l < 8; l++) _mm256_store_si256((__m256i *)hv[t0 / 2 + l], x[l]);
            }
            const __m256 gv = _mm256_load_ps(g);
            for (size_t j0 = 0; j0 < qc; j0 += 8) {
                const uint32_t *qj = qpair + j0 * (size_t)np;
                const float *q = qp + (q0 + j0) * qstride;
                float *out = scores + (q0 + j0) * n + i0;
                const uint32_t (*h)[8] = (const uint32_t (*)[8])hv;
                TCQ_BY_M(qc - j0 < 8 ? qc - j0 : 8, lanes8_m, d, h, qj, gv, q, qstride, n, rb, out);
            }
        }
    }
}

KVQ_TARGET_AVX2 void tcq_score_avx2(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                    const uint8_t *codes, size_t n, float *scores) {
    if (nq >= TCQ_LANES_NQ && R->d % 16 == 0) {
        score256_lanes(R, qp, qstride, nq, codes, n, scores);
        return;
    }
    const vconst c = vconst_make(R->tc->k, R->tc->L);
    for (size_t j0 = 0; j0 < nq; j0 += 8) { /* 8 queries a pass over the records */
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        const float *q = qp + j0 * qstride;
        float *out = scores + j0 * n;
        switch (m) {
        case 1: score_m(1, R, &c, q, qstride, codes, n, out); break;
        case 2: score_m(2, R, &c, q, qstride, codes, n, out); break;
        case 3: score_m(3, R, &c, q, qstride, codes, n, out); break;
        case 4: score_m(4, R, &c, q, qstride, codes, n, out); break;
        case 5: score_m(5, R, &c, q, qstride, codes, n, out); break;
        case 6: score_m(6, R, &c, q, qstride, codes, n, out); break;
        case 7: score_m(7, R, &c, q, qstride, codes, n, out); break;
        default: score_m(8, R, &c, q, qstride, codes, n, out); break;
        }
    }
}

/* Accumulate, G <= 4 records a pass: their values in registers, each
 * accumulator row loaded and stored once for the G records (added in
 * record order, as the reference does). */
KVQ_TARGET_AVX2 AI void accum_g(const int G, const int cached, const tcq_records *R, const vconst *c, const float *w,
                                size_t nq, const uint8_t *codes, size_t n, size_t i, float *acc) {
    const int d = R->d, k = R->tc->k;
    const size_t nb = (size_t)d * k / 8, need = window_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    stream16 st[4];
    float wg[4][8];
    for (int r = 0; r < G; r++) {
        const uint8_t *rec = codes + (i + (size_t)r) * R->stride;
        stream16_init(&st[r], rec + R->bits_off, nb, need, lim);
    }
    /* cached (more than 8 queries: prefill, a constant): the values decoded once for all the passes */
    _Alignas(32) float xs[4][KVQ_DIM_MAX];
    if (cached)
        for (int t0 = 0; t0 < d; t0 += 8)
            for (int r = 0; r < G; r++) _mm256_store_ps(xs[r] + t0, raw8(c, &st[r], d, k, t0));
    for (size_t j0 = 0; j0 < nq; j0 += 8) { /* 8 queries a pass */
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        for (int r = 0; r < G; r++) {
            const float g = scale_avx2(R, codes + (i + (size_t)r) * R->stride) * TCQ_INV_SD;
            for (size_t j = 0; j < m; j++) wg[r][j] = w[(j0 + j) * n + i + (size_t)r] * g;
        }
        float *a0 = acc + j0 * (size_t)d;
        for (int t0 = 0; t0 < d; t0 += 8) {
            __m256 x[4];
            for (int r = 0; r < G; r++) x[r] = cached ? _mm256_load_ps(xs[r] + t0) : raw8(c, &st[r], d, k, t0);
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
    if (nq > 8) {
        for (; i + 4 <= n; i += 4) accum_g(4, 1, R, &c, w, nq, codes, n, i, acc);
        for (; i < n; i++) accum_g(1, 1, R, &c, w, nq, codes, n, i, acc);
        return;
    }
    for (; i + 4 <= n; i += 4) accum_g(4, 0, R, &c, w, nq, codes, n, i, acc);
    for (; i < n; i++) accum_g(1, 0, R, &c, w, nq, codes, n, i, acc);
}

/* ---- AVX-512 (and VNNI) accumulate ---------------------------------------
 * Bit for bit the AVX2 kernel above (and so the same digests): 16
 * consecutive values of one record a vector (the element t of the
 * accumulator gets the same fmas in the same record order as in the AVX2
 * kernel, whatever the vector width); an 8-value tail by the AVX2 step.
 * The state and value arithmetic is the AVX2 one on 16 lanes; with VNNI
 * the byte sum minus 510 is one vpdpbusd (h's 4 unsigned bytes times 1,
 * added to -510: the same integer as vpmaddubsw + vpmaddwd - 510).
 * The integer scores follow the accumulate. */
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

/* ---- AVX-512 integer scores ------------------------------------------------
 * 16 values of a record a vector, d % 16 == 0: the states of values t0 .. t0+15 are windows of
 * the 16 stream bytes from byte B = (d-16-t0) k / 8 (s_{t0+15} starts on a byte boundary),
 * loaded by one vbroadcasti32x4 from memory (no shuffle port), then vpshufb, vpsrlvd, vpandd,
 * vpmulld, vpaddd: h's 4 bytes in each lane. With VNNI one vpdpbusd per query adds q8_t B(s_t)
 * (h's unsigned bytes times q8_t in the 4 bytes of its lane; the query's stored form) to the
 * lane; without, vpmaddubsw(h, 1) once and vpmaddwd by q8_t per query (as the AVX2 kernel).
 * Only the first group (t0 = 0) runs past the stream's end (tail-biting): its 16 bytes, the
 * last 2k and the first 16 - 2k, are put together once per record in a register. Every other
 * 16-byte load starts inside the stream and ends at most 16 - 4k bytes past it (the next
 * record's bytes, lanes never used); a record that close to the caller's array end is copied
 * first. G records a pass share each query load (G = 4 for <= 4 queries, 2 for 5..8); the
 * integer sums are reduced per record and query, then as tcq_score_ref. */
typedef struct {
    __m512i shuf, shift, mask, mul, add, ones8;
    __m128i wlo, whi; /* the wrap: bytes 16-2k.. of the last 16 to 0.., bytes 0.. of the first 16 to 2k.. */
    size_t need;      /* bytes from a stream's start a 16-byte load may reach */
} k512;

KVQ_TARGET_AVX512 static inline k512 k512_make(int k, int L, size_t nb) {
    k512 c;
    uint8_t s16[64], lo[16], hi[16];
    int r16[16];
    for (int l = 0; l < 16; l++) {
        const int o = (15 - l) * k; /* lane l's bit in the 16 bytes */
        for (int i = 0; i < 4; i++) s16[4 * l + i] = (uint8_t)((o >> 3) + i);
        r16[l] = o & 7;
        lo[l] = l < 2 * k ? (uint8_t)(16 - 2 * k + l) : 0x80;
        hi[l] = l < 2 * k ? 0x80 : (uint8_t)(l - 2 * k);
    }
    c.shuf = _mm512_loadu_si512(s16);
    c.shift = _mm512_loadu_si512(r16);
    c.mask = _mm512_set1_epi32((1 << L) - 1);
    c.mul = _mm512_set1_epi32((int)TCQ_MUL);
    c.add = _mm512_set1_epi32((int)TCQ_ADD);
    c.ones8 = _mm512_set1_epi8(1);
    c.wlo = _mm_loadu_si128((const __m128i *)lo);
    c.whi = _mm_loadu_si128((const __m128i *)hi);
    c.need = nb + (4 * k < 16 ? (size_t)(16 - 4 * k) : 0);
    return c;
}

/* h(s) of the 16 states in the 16 bytes x (broadcast to the four 128-bit lanes) */
KVQ_TARGET_AVX512 static inline __m512i hval16(const k512 *c, __m512i x) {
    const __m512i s = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(x, c->shuf), c->shift), c->mask);
    return _mm512_add_epi32(_mm512_mullo_epi32(s, c->mul), c->add);
}

/* h(s) of the 16 values t0 .. t0+15 of the stream at b (t0 > 0: no wrap) */
KVQ_TARGET_AVX512 static inline __m512i hval16_at(const k512 *c, const uint8_t *b, size_t B) {
    return hval16(c, _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(b + B))));
}

/* the group t0 = 0: the last 2k bytes of the stream, then its first 16 - 2k */
KVQ_TARGET_AVX512 static inline __m512i hval16_wrap(const k512 *c, const uint8_t *b, size_t nb) {
    const __m128i last = _mm_loadu_si128((const __m128i *)(b + nb - 16)), first = _mm_loadu_si128((const __m128i *)b);
    return hval16(c, _mm512_broadcast_i32x4(_mm_or_si128(_mm_shuffle_epi8(last, c->wlo), _mm_shuffle_epi8(first, c->whi))));
}

/* acc + q8_t B(s_t) lane by lane: h's bytes times the query's 64 bytes q (VNNI), or the pair sums
 * p = vpmaddubsw(h, 1) times q16 = q >> 8 (16-bit words: q8_t in both halves of the lane). By value,
 * so that the asm's operand is a local, never an array element (gcc then kept the arrays on the stack). */
KVQ_TARGET_AVX512 static inline __m512i tcq_dot(const int vnni, __m512i acc, __m512i h, __m512i q, __m512i p,
                                               __m512i q16) {
    if (vnni) {
        DPBUSD(acc, h, q);
        return acc;
    }
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, q16));
}
#define TCQ_DOT(acc, h, p) (acc = tcq_dot(vnni, acc, h, q, p, q16))

/* Records i .. i+G-1 (G = 1, 2, 4) against m prepared queries (qp, qstride floats apart). The
 * accumulators are one array of <= 8 vectors per record (gcc keeps arrays that small in registers:
 * one of 4 x 8 vectors went to the stack). */
KVQ_TARGET_AVX512 AI void score16_gm(const int G, const int m, const int vnni, const tcq_records *R, const k512 *c,
                                    const float *qp, size_t qstride, const uint8_t *codes, size_t n, size_t i,
                                    float *scores) {
    const int d = R->d, k = R->tc->k;
    const size_t nb = (size_t)d * k / 8;
    const uint8_t *lim = codes + n * R->stride;
    const uint8_t *b[4], *q4[8];
    _Alignas(16) uint8_t buf[4][TCQ_BYTES_MAX + 16];
    float g[4];
    for (int j = 0; j < m; j++) q4[j] = (const uint8_t *)(qp + (size_t)j * qstride + d + 2);
    for (int r = 0; r < G; r++) {
        const uint8_t *rec = codes + (i + (size_t)r) * R->stride;
        b[r] = rec + R->bits_off;
        if ((size_t)(lim - b[r]) < c->need) { /* the loads would leave the array */
            memcpy(buf[r], b[r], nb);
            memset(buf[r] + nb, 0, 16);
            b[r] = buf[r];
        }
        g[r] = scale_avx2(R, rec);
    }
    __m512i a0[8], a1[8], a2[8], a3[8];
    for (int j = 0; j < m; j++) a0[j] = a1[j] = a2[j] = a3[j] = _mm512_setzero_si512();
    for (int t0 = 0; t0 < d; t0 += 16) {
        const size_t B = (size_t)(d - 16 - t0) * (size_t)k / 8;
        __m512i h0, h1 = _mm512_setzero_si512(), h2 = h1, h3 = h1, p0 = h1, p1 = h1, p2 = h1, p3 = h1;
        if (t0 == 0) {
            h0 = hval16_wrap(c, b[0], nb);
            if (G > 1) h1 = hval16_wrap(c, b[1], nb);
            if (G > 2) h2 = hval16_wrap(c, b[2], nb), h3 = hval16_wrap(c, b[3], nb);
        } else {
            h0 = hval16_at(c, b[0], B);
            if (G > 1) h1 = hval16_at(c, b[1], B);
            if (G > 2) h2 = hval16_at(c, b[2], B), h3 = hval16_at(c, b[3], B);
        }
        if (!vnni) {
            p0 = _mm512_maddubs_epi16(h0, c->ones8);
            if (G > 1) p1 = _mm512_maddubs_epi16(h1, c->ones8);
            if (G > 2) p2 = _mm512_maddubs_epi16(h2, c->ones8), p3 = _mm512_maddubs_epi16(h3, c->ones8);
        }
        for (int j = 0; j < m; j++) {
            const __m512i q = _mm512_loadu_si512(q4[j] + 4 * (size_t)t0), q16 = vnni ? q : _mm512_srai_epi16(q, 8);
            TCQ_DOT(a0[j], h0, p0);
            if (G > 1) TCQ_DOT(a1[j], h1, p1);
            if (G > 2) {
                TCQ_DOT(a2[j], h2, p2);
                TCQ_DOT(a3[j], h3, p3);
            }
        }
    }
    for (int j = 0; j < m; j++) {
        const float *q = qp + (size_t)j * qstride;
        float *o = scores + (size_t)j * n + i;
        o[0] = tcq_est(g[0], _mm512_reduce_add_epi32(a0[j]), q, d);
        if (G > 1) o[1] = tcq_est(g[1], _mm512_reduce_add_epi32(a1[j]), q, d);
        if (G > 2) {
            o[2] = tcq_est(g[2], _mm512_reduce_add_epi32(a2[j]), q, d);
            o[3] = tcq_est(g[3], _mm512_reduce_add_epi32(a3[j]), q, d);
        }
    }
}
#undef TCQ_DOT

/* All records for m queries: G at a time, then one at a time. score16_gm, score16_m and
 * score512_all are always inlined: the constant vnni, G and m are what makes them fast (an outlined
 * clone with vnni a variable once made the one-query decode 40% slower). */
KVQ_TARGET_AVX512 AI void score16_m(const int G, const int m, const int vnni, const tcq_records *R, const k512 *c,
                                   const float *qp, size_t qstride, const uint8_t *codes, size_t n, float *scores) {
    size_t i = 0;
    for (; i + (size_t)G <= n; i += (size_t)G) score16_gm(G, m, vnni, R, c, qp, qstride, codes, n, i, scores);
    for (; i < n; i++) score16_gm(1, m, vnni, R, c, qp, qstride, codes, n, i, scores);
}

/* d % 16 == 0 and a stream of >= 16 bytes whose 16-value windows end within 4k bytes (every plan
 * of L = 12 with d * k >= 128); the AVX2 kernel (the same integers) for the others. */
static inline int k512_ok(const tcq_records *R) {
    const int d = R->d, k = R->tc->k;
    return d % 16 == 0 && (size_t)d * k / 8 >= 16 && window16_bytes(k, R->tc->L) <= 4 * (size_t)k;
}

KVQ_TARGET_AVX512 AI void score512_all(const int vnni, const tcq_records *R, const float *qp, size_t qstride,
                                      size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const int d = R->d, k = R->tc->k, L = R->tc->L;
    const size_t nb = (size_t)d * k / 8;
    if (!k512_ok(R)) {
        tcq_score_avx2(R, qp, qstride, nq, codes, n, scores);
        return;
    }
    const k512 c = k512_make(k, L, nb);
    for (size_t j0 = 0; j0 < nq; j0 += 8) {
        const size_t m = nq - j0 < 8 ? nq - j0 : 8;
        const float *q = qp + j0 * qstride;
        float *out = scores + j0 * n;
        switch (m) {
        case 1: score16_m(4, 1, vnni, R, &c, q, qstride, codes, n, out); break;
        case 2: score16_m(4, 2, vnni, R, &c, q, qstride, codes, n, out); break;
        case 3: score16_m(4, 3, vnni, R, &c, q, qstride, codes, n, out); break;
        case 4: score16_m(4, 4, vnni, R, &c, q, qstride, codes, n, out); break;
        case 5: score16_m(2, 5, vnni, R, &c, q, qstride, codes, n, out); break;
        case 6: score16_m(2, 6, vnni, R, &c, q, qstride, codes, n, out); break;
        case 7: score16_m(2, 7, vnni, R, &c, q, qstride, codes, n, out); break;
        default: score16_m(2, 8, vnni, R, &c, q, qstride, codes, n, out); break;
        }
    }
}

/* ---- AVX-512 VNNI, many queries (prefill): 16 records in the lanes (the AVX2 section above says how),
 * d % 32 == 0: a record's 16 pairs a vector from two 16-value groups, one vpdpwssd a pair and query */
/* x[r] lane l -> x[l] lane r (a 16 x 16 transpose of dwords: within 128-bit lanes by unpacks,
 * then the 4 x 4 blocks of 128 bits) */
KVQ_TARGET_AVX512 static inline void transpose16x16(__m512i x[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(x[i], x[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(x[i], x[i + 1]);
    }
    /* u[4a + e] lane q: column 4q + e of rows 4a .. 4a+3 */
    for (int a = 0; a < 4; a++) {
        u[4 * a] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
        u[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    for (int e = 0; e < 4; e++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44),
                      v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
        x[e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        x[4 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        x[8 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        x[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* v_t - the centred integer B(s_t) - 510 - of 16 values whose h(s) are in h, as 16-bit words */
KVQ_TARGET_AVX512VNNI static inline __m256i centred16(__m512i h) {
    __m512i v = _mm512_set1_epi32(-510);
    DPBUSD(v, h, _mm512_set1_epi8(1));
    return _mm512_cvtepi32_epi16(v);
}

/* Queries j0 .. j0+m-1 (m <= 8; qpair: their (q8_2p, q8_2p+1) dwords, d / 2 a query) against the
 * block's 16 records (hv: d / 2 rows of 16 pairs; gv their scales, lanes of absent records 0),
 * stored to the first rb records' scores. */
KVQ_TARGET_AVX512VNNI AI void lanes_m(const int m, int d, const uint32_t (*hv)[16], const uint32_t *qpair, __m512 gv,
                                      const float *qp, size_t qstride, size_t n, int rb, float *scores) {
    const int np = d / 2;
    __m512i acc[8];
    for (int j = 0; j < m; j++) acc[j] = _mm512_setzero_si512();
    for (int p = 0; p < np; p++) {
        const __m512i h = _mm512_load_si512(hv[p]);
        for (int j = 0; j < m; j++) DPWSSD_BCST(acc[j], h, qpair + (size_t)j * np + p);
    }
    const __mmask16 keep = (__mmask16)((1u << rb) - 1);
    for (int j = 0; j < m; j++) {
        /* tcq_est, lane by lane: g ((float) isum qs), the sum already centred */
        const float qs = qp[(size_t)j * qstride + d];
        const __m512 e = _mm512_mul_ps(gv, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_set1_ps(qs)));
        _mm512_mask_storeu_ps(scores + (size_t)j * n, keep, e);
    }
}

/* k512_ok(R), d % 32 == 0, nq >= TCQ_LANES_NQ */
KVQ_TARGET_AVX512VNNI static void score512_lanes(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                                 const uint8_t *codes, size_t n, float *scores) {
    const int d = R->d, k = R->tc->k, np = d / 2;
    const size_t nb = (size_t)d * k / 8;
    const k512 cs = k512_make(k, R->tc->L, nb), *c = &cs;
    const uint8_t *lim = codes + n * R->stride;
    _Alignas(64) uint32_t hv[KVQ_DIM_MAX / 2][16];
    _Alignas(64) uint32_t qpair[TCQ_LANES_QC * (KVQ_DIM_MAX / 2)];
    _Alignas(16) uint8_t buf[16][TCQ_BYTES_MAX + 16];
    for (size_t q0 = 0; q0 < nq; q0 += TCQ_LANES_QC) {
        const size_t qc = nq - q0 < TCQ_LANES_QC ? nq - q0 : TCQ_LANES_QC;
        query_pairs(d, qp + q0 * qstride, qstride, qc, qpair);
        for (size_t i0 = 0; i0 < n; i0 += 16) {
            const int rb = n - i0 < 16 ? (int)(n - i0) : 16;
            const uint8_t *b[16];
            _Alignas(64) float g[16];
            for (int r = 0; r < 16; r++) {
                const uint8_t *rec = codes + (i0 + (size_t)(r < rb ? r : 0)) * R->stride; /* absent: record i0 again */
                b[r] = rec + R->bits_off;
                if ((size_t)(lim - b[r]) < c->need) { /* the loads would leave the array */
                    memcpy(buf[r], b[r], nb);
                    memset(buf[r] + nb, 0, 16);
                    b[r] = buf[r];
                }
                g[r] = r < rb ? scale_avx2(R, rec) : 0.f;
            }
            for (int t0 = 0; t0 < d; t0 += 32) { /* values t0 .. t0+31: pairs t0/2 .. t0/2+15 */
                const size_t B1 = (size_t)(d - 32 - t0) * (size_t)k / 8;
                __m512i x[16];
                for (int r = 0; r < 16; r++) {
                    const __m512i h0 = t0 == 0 ? hval16_wrap(c, b[r], nb) : hval16_at(c, b[r], B1 + 2 * (size_t)k);
                    x[r] = _mm512_inserti64x4(_mm512_castsi256_si512(centred16(h0)), centred16(hval16_at(c, b[r], B1)), 1);
                }
                transpose16x16(x);
                for (int l = 0; l < 16; l++) _mm512_store_si512(hv[t0 / 2 + l], x[l]);
            }
            const __m512 gv = _mm512_load_ps(g);
            for (size_t j0 = 0; j0 < qc; j0 += 8) {
                const uint32_t *qj = qpair + j0 * (size_t)np;
                const float *q = qp + (q0 + j0) * qstride;
                float *out = scores + (q0 + j0) * n + i0;
                const uint32_t (*h)[16] = (const uint32_t (*)[16])hv;
                TCQ_BY_M(qc - j0 < 8 ? qc - j0 : 8, lanes_m, d, h, qj, gv, q, qstride, n, rb, out);
            }
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
    const int d = R->d;
    if (R->vnni && nq >= TCQ_LANES_NQ && d % 32 == 0 && k512_ok(R)) {
        score512_lanes(R, qp, qstride, nq, codes, n, scores);
        return;
    }
    /* no vpdpwssd: the AVX2 lanes kernel, from 32 queries (0.74-0.94x the 16-lane value dots at 8-16
     * queries, 1.07-1.43x at 64-256: bench/results/tcq-prefill-2026-12-04/kb_avx2b.json) */
    if (!R->vnni && nq >= 4 * TCQ_LANES_NQ && d % 16 == 0) {
        tcq_score_avx2(R, qp, qstride, nq, codes, n, scores);
        return;
    }
    if (R->vnni) score512_vnni(R, qp, qstride, nq, codes, n, scores);
    else score512_plain(R, qp, qstride, nq, codes, n, scores);
}

/* Accumulate, G <= 4 records a pass (tcq_accum_avx2's order). */
KVQ_TARGET_AVX512 AI void accum512_g(const int G, const int vnni, const int cached, const tcq_records *R,
                                    const vconst512 *c, const vconst *c2, const float *w, size_t nq,
                                    const uint8_t *codes, size_t n, size_t i, float *acc) {
    const int d = R->d, k = R->tc->k;
    const size_t nb = (size_t)d * k / 8, need = window16_bytes(k, R->tc->L);
    const uint8_t *lim = codes + n * R->stride;
    stream16 st[4];
    float wg[4][8];
    for (int r = 0; r < G; r++) {
        const uint8_t *rec = codes + (i + (size_t)r) * R->stride;
        stream16_init(&st[r], rec + R->bits_off, nb, need, lim);
    }
    /* cached (more than 8 queries: prefill): the values decoded once for all the query chunks, not
     * once a chunk (the same values, the same fma order: the same sums); a constant, so that the
     * few-query code is the one without the buffer */
    _Alignas(64) float xs[4][KVQ_DIM_MAX];
    if (cached) {
        int t = 0;
        for (; t + 16 <= d; t += 16)
            for (int r = 0; r < G; r++) _mm512_store_ps(xs[r] + t, raw16(c, &st[r], d, k, t, vnni));
        if (t < d)
            for (int r = 0; r < G; r++) _mm256_store_ps(xs[r] + t, raw8(c2, &st[r], d, k, t));
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
            for (int r = 0; r < G; r++) x[r] = cached ? _mm512_load_ps(xs[r] + t0) : raw16(c, &st[r], d, k, t0, vnni);
            for (size_t j = 0; j < m; j++) {
                float *a = a0 + j * (size_t)d + t0;
                __m512 v = _mm512_loadu_ps(a);
                for (int r = 0; r < G; r++) v = _mm512_fmadd_ps(_mm512_set1_ps(wg[r][j]), x[r], v);
                _mm512_storeu_ps(a, v);
            }
        }
        if (t0 < d) { /* d % 16 == 8 */
            __m256 x[4];
            for (int r = 0; r < G; r++) x[r] = cached ? _mm256_load_ps(xs[r] + t0) : raw8(c2, &st[r], d, k, t0);
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
    if (nq > 8) {
        for (; i + 4 <= n; i += 4) accum512_g(4, vnni, 1, R, &c, &c2, w, nq, codes, n, i, acc);
        for (; i < n; i++) accum512_g(1, vnni, 1, R, &c, &c2, w, nq, codes, n, i, acc);
        return;
    }
    for (; i + 4 <= n; i += 4) accum512_g(4, vnni, 0, R, &c, &c2, w, nq, codes, n, i, acc);
    for (; i < n; i++) accum512_g(1, vnni, 0, R, &c, &c2, w, nq, codes, n, i, acc);
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
