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
 */
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

#endif
