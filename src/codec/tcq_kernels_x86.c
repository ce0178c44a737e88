/*
 * AVX2 kernels of the bitshift trellis (tcq_kernels.h), bit for bit the
 * scalar references of tcq_kernels.c.
 *
 * Forward recursion, one step: for 8 consecutive groups r0..r0+7 and each
 * j, the candidates C_{t-1}[r0 + j R ..] are 8 contiguous states: one load
 * of f, e = u - f, and their M_{t-1} values, 8 / J groups (k <= 3) spread
 * to the lanes by one vpermilps (k = 1, 2) or a broadcast (k = 3, 4: one
 * group for all 8 lanes), then fma(e, e, M) and a running vminps: 3 or 4
 * vector operations per 8 states, and the costs never go to memory.
 * The traceback is the reference's, with a hardware fma.
 *
 * Values of a record (decode, score, accumulate): the 8 states of values
 * t0 .. t0+7 are windows of one 64-bit word of the stream (symbols in
 * reverse order: s_{t0+l} starts (7-l) k bits above s_{t0+7}), taken out by
 * two vpsrlvq (even and odd lanes), a blend and a mask, then f(s) computed
 * in registers as tcq_value does (a vpmulld and an add, the byte
 * sum by vpmaddubsw + vpmaddwd, a convert and a multiply): 1.5x faster on
 * this AVX2 host (Zen 3) than a vgatherdps from the 16 KB table. Scores are
 * then dot products of the d values with each query, accumulation an fma
 * per 8 values and query.
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

KVQ_TARGET_AVX2 void tcq_values_avx2(const tcq_code *tc, const uint8_t *bits, int T, float *v) {
    const int k = tc->k;
    const size_t nb = (size_t)T * k / 8;
    /* windows are read from the record, those that run past its end from
     * `tail`: its last 8 bytes, then its first 8 (the circular wrap) */
    uint8_t pad[TCQ_BYTES_MAX + 8], tail[16];
    const uint8_t *src = bits, *tl = tail;
    size_t tl0 = nb - 8;
    if (nb < 16) {
        tcq_stream_pad(bits, nb, pad);
        src = tl = pad;
        tl0 = 0;
    } else {
        memcpy(tail, bits + nb - 8, 8);
        memcpy(tail + 8, bits, 8);
    }
    const __m256i mask = _mm256_set1_epi32((1 << tc->L) - 1);
    const __m256i sh_even = _mm256_setr_epi64x(7 * k, 5 * k, 3 * k, k), sh_odd = _mm256_setr_epi64x(6 * k, 4 * k, 2 * k, 0);
    const __m256i m1 = _mm256_set1_epi32((int)TCQ_MUL), a1 = _mm256_set1_epi32((int)TCQ_ADD);
    const __m256i c510 = _mm256_set1_epi32(510);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256 isd = _mm256_set1_ps(TCQ_INV_SD);
    for (int t0 = 0; t0 < T; t0 += 8) {
        const int base = (T - 8 - t0) * k; /* the window of s_{t0+7} */
        const size_t B = (size_t)(base >> 3);
        uint64_t w;
        memcpy(&w, B + 8 <= nb ? src + B : tl + (B - tl0), 8);
        const __m256i wv = _mm256_set1_epi64x((long long)w), sb = _mm256_set1_epi64x(base & 7);
        const __m256i a = _mm256_srlv_epi64(wv, _mm256_add_epi64(sh_even, sb));
        const __m256i b = _mm256_srlv_epi64(wv, _mm256_add_epi64(sh_odd, sb));
        __m256i h = _mm256_and_si256(_mm256_blend_epi32(a, _mm256_slli_epi64(b, 32), 0xAA), mask);
        h = _mm256_add_epi32(_mm256_mullo_epi32(h, m1), a1);
        const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(h, ones8), ones16);
        _mm256_storeu_ps(v + t0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, c510)), isd));
    }
}

KVQ_TARGET_AVX2 void tcq_score_avx2(const tcq_records *R, const float *qp, size_t qstride, size_t nq,
                                    const uint8_t *codes, size_t n, float *scores) {
    float v[KVQ_DIM_MAX];
    const int d = R->d;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        tcq_values_avx2(R->tc, rec + R->bits_off, d, v);
        const float g = tcq_scale(R, rec);
        size_t j = 0;
        for (; j + 4 <= nq; j += 4) { /* four queries a pass over v */
            const float *q = qp + j * qstride;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int t = 0; t < d; t += 8) {
                const __m256 x = _mm256_loadu_ps(v + t);
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), x, s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + qstride + t), x, s1);
                s2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 2 * qstride + t), x, s2);
                s3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 3 * qstride + t), x, s3);
            }
            const __m128 h = _mm_mul_ps(hsum4_256(s0, s1, s2, s3), _mm_set1_ps(g));
            float o[4];
            _mm_storeu_ps(o, h);
            for (int c = 0; c < 4; c++) scores[(j + (size_t)c) * n + i] = o[c];
        }
        for (; j < nq; j++) {
            const float *q = qp + j * qstride;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0;
            int t = 0;
            for (; t + 16 <= d; t += 16) {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), _mm256_loadu_ps(v + t), s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + t + 8), _mm256_loadu_ps(v + t + 8), s1);
            }
            if (t < d) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), _mm256_loadu_ps(v + t), s0);
            scores[j * n + i] = g * hsum_256(_mm256_add_ps(s0, s1));
        }
    }
}

KVQ_TARGET_AVX2 void tcq_accum_avx2(const tcq_records *R, const float *w, size_t nq, const uint8_t *codes, size_t n,
                                    float *acc) {
    float v[KVQ_DIM_MAX];
    const int d = R->d;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * R->stride;
        tcq_values_avx2(R->tc, rec + R->bits_off, d, v);
        const float g = tcq_scale(R, rec);
        for (size_t j = 0; j < nq; j++) {
            const __m256 wg = _mm256_set1_ps(w[j * n + i] * g);
            float *a = acc + j * (size_t)d;
            for (int t = 0; t < d; t += 8)
                _mm256_storeu_ps(a + t, _mm256_fmadd_ps(wg, _mm256_loadu_ps(v + t), _mm256_loadu_ps(a + t)));
        }
    }
}

#endif
