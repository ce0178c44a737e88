/*
 * +outliers=K — the "two-stream" variant of any method: the K channels of
 * highest variance over the calibration rows (the first tokens of a head)
 * are kept as int8 with one f16 scale per vector; the other d-K channels go
 * through the inner method at dim d-K.
 * Record: [inner record | f16 outlier scale | K int8] — d-K inner codes, so
 * tq-mse:4+outliers=8 at d = 128 is 62 + 2 + 8 = 72 bytes, 4.5 bits/value.
 *
 * Kernels. The inner plan's kernels take every query row at once: the inner
 * plan's qfloats is set to the outer one (prepared rows [inner row | K raw
 * outlier components]), so inner->score strides over whole outer rows.
 * Two domains for accumulators and decoded rows (d floats either way):
 *
 * - "embedded" (inner tq-mse with b = 1, 2 or 4 bits, whose own strided
 *   layout at d-K is not served by the fast kernels, e.g. d-K = 120: 60-byte
 *   blocks, while the host dim d has blocks of a multiple of 16 bytes): the
 *   inner record is read by the tq kernels of the host dim d as if it had d
 *   coordinates. With one w-bit sub-field (w = b), host position j + k·S_D
 *   (S_D = d·w/8 bytes, byte j, bit field k) is inner coordinate j + k·S_i
 *   (S_i = (d-K)·w/8) when j < S_i, and for S_i <= j < S_D a "spare" position
 *   whose bits are the first K·w/8 bytes after the inner record (the outlier
 *   scale and values: always inside the record). There are exactly K spare
 *   positions. Prepared queries are the host's (TQ_QFLOATS(d)) with the
 *   rotated inner query placed at the inner positions and zeros at the
 *   spares, so host scores equal inner scores exactly (integer or float);
 *   accumulators are host rows whose spare positions hold the K outlier
 *   channels (saved around the host accumulate, which writes spare garbage
 *   there). The host kernels are the specialised (d, b) ones (AVX-512 VNNI
 *   scores at d = 128), with no change to the record or its bits.
 * - "repacked" (inner tq-mse with several sub-fields, e.g. b = 3 = 2+1,
 *   inner layout not fast, host layout fast): the same host reading, but the
 *   encoder repacks the inner indices into the host layout at dim d. The K
 *   spare positions are those p with p mod S_min in the last R residues
 *   (S_min = d·w_min/8 bytes, the narrowest sub-field's block, R = K·w_min/8),
 *   so in every sub-field block they own whole bytes: runs of R bytes, the
 *   last run ending the host block. Those bytes carry the payload: the
 *   outlier f16 scale in the first two spare bytes (and the inner scale in the
 *   next ones when there are 2 + scale bytes of them before the last run),
 *   the K int8 values from the last run on into the tail. The record keeps
 *   its size (tq-mse:3+outliers=8 at d = 128: 57 bytes, 3.5625 bits/value);
 *   the encoder pays an unpack and a pack of the indices.
 * - otherwise: [inner domain (d-K floats) | K outliers]; the inner plan
 *   accumulates into a compact copy of the rows' first d-K floats (a stack
 *   buffer, chunks of rows), copied back after.
 *
 * The outlier stream (K int8 per record) is scored and accumulated with SIMD
 * (AVX-512: 8 records at a time through a 64-bit gather, AVX2: per record),
 * scalar reference alongside.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "simd_util.h"
#include "tq_kernels.h"

typedef struct {
    size_t inner_bytes; /* bytes of the inner plan's own record */
    size_t iqf;         /* floats of the inner prepared row; the K raw outlier components follow */
    int embed;          /* 0: inner domain; 1: host reading of the inner record; 2: repacked (see the top) */
    tq_layout host;     /* embed: the host layout (cb: the inner plan's codebook) */
    size_t slo, shi;    /* bytes of the f16 outlier scale (low, high) */
    size_t vo;          /* first of the K int8 outlier values (contiguous) */
    size_t iso, hpo;    /* embed 2: inner scale, host packed block */
    int pos[KVQ_DIM_MAX];  /* embed: host position of inner coordinate c */
    int opos[KVQ_DIM_MAX]; /* embed: host position of outlier k (the spare positions, ascending) */
} outl_priv;

static const outl_priv *PRIV(const kvq_plan *p) { return (const outl_priv *)p->priv; }

static float outl_scale(const outl_priv *P, const uint8_t *rec) {
    return kvq_f16_to_f32((uint16_t)(rec[P->slo] | (unsigned)rec[P->shi] << 8));
}

static int enc(const kvq_plan *p, const float *x, uint8_t *code) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers, d = p->d, di = d - K;
    float xi[KVQ_DIM_MAX];
    uint8_t tmp[KVQ_DIM_MAX + 8]; /* embed 2: the inner record (scale + di * b / 8 bytes) */
    for (int c = 0; c < di; c++) xi[c] = x[p->ch_in[c]];
    int rc = p->inner->encode(p->inner, xi, P->embed == 2 ? tmp : code);
    if (rc) return rc;
    float amax = 0;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(x[p->ch_out[k]]));
    float s = amax / 127.0f;
    if (s > 65504.0f) return KVQ_ERR_RANGE;
    uint16_t h = kvq_f32_to_f16(s);
    if (P->embed == 2) { /* inner indices into the host layout; the payload bytes are written after */
        const size_t sb = scale_bytes(p->inner);
        uint8_t idx[KVQ_DIM_MAX], hidx[KVQ_DIM_MAX];
        strided_unpack(tmp + sb, di, p->inner->bits, idx);
        memset(hidx, 0, (size_t)d);
        for (int c = 0; c < di; c++) hidx[P->pos[c]] = idx[c];
        strided_pack(hidx, d, p->inner->bits, code + P->hpo);
        memcpy(code + P->iso, tmp, sb);
    }
    code[P->slo] = (uint8_t)(h & 0xff);
    code[P->shi] = (uint8_t)(h >> 8);
    float sh = kvq_f16_to_f32(h), inv = sh > 0 ? 1.0f / sh : 0.0f;
    for (int k = 0; k < K; k++) {
        float v = nearbyintf(x[p->ch_out[k]] * inv);
        ((int8_t *)(code + P->vo))[k] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
    }
    return KVQ_OK;
}

static void outl_values(const kvq_plan *p, const uint8_t *rec, float *v) {
    const outl_priv *P = PRIV(p);
    float s = outl_scale(P, rec);
    for (int k = 0; k < p->o.outliers; k++) v[k] = s * ((const int8_t *)(rec + P->vo))[k];
}

static void dec(const kvq_plan *p, const uint8_t *code, float *y) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    float v[KVQ_DIM_MAX];
    outl_values(p, code, v);
    if (P->embed) {
        tq_decode(&P->host, code, y, p->isa);
        for (int k = 0; k < K; k++) y[P->opos[k]] = v[k];
    } else {
        p->inner->decode(p->inner, code, y);
        memcpy(y + p->d - K, v, (size_t)K * sizeof *v);
    }
}

static void prep(const kvq_plan *p, const float *q, float *qp) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers, d = p->d, di = d - K;
    float qi[KVQ_DIM_MAX] = {0}; /* (zeroed: gcc cannot see that di >= 32 floats are set) */
    for (int c = 0; c < di; c++) qi[c] = q[p->ch_in[c]];
    if (P->embed) {
        float qr[KVQ_DIM_MAX], qh[KVQ_DIM_MAX];
        rot_apply(&p->inner->rot, qi, qr);
        memset(qh, 0, (size_t)d * sizeof *qh);
        for (int c = 0; c < di; c++) qh[P->pos[c]] = qr[c];
        kvq_rotation none;
        memset(&none, 0, sizeof none);
        none.kind = ROT_NONE;
        none.d = d;
        none.isa = p->isa;
        tq_prepare_query(&none, d, qh, qp); /* q8 etc. of the host row (spares stay 0) */
    } else {
        p->inner->prep(p->inner, qi, qp);
    }
    for (int k = 0; k < K; k++) qp[P->iqf + k] = q[p->ch_out[k]];
}

/* ---- the outlier stream ------------------------------------------------------
 * scores[j*n + i] += s_i * sum_k qo_j[k] * v_ik, qo_j = row j + iqf;
 * ov rows (stride ovs) += sum_i w[j*n + i] * s_i * v_i. */
static void outl_score_ref(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n,
                           float *scores) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * p->code_bytes;
        const int8_t *v = (const int8_t *)(rec + P->vo);
        const float s = outl_scale(P, rec);
        for (size_t j = 0; j < nq; j++) {
            const float *qo = qp + j * p->qfloats + P->iqf;
            float t = 0;
            for (int k = 0; k < K; k++) t += qo[k] * v[k];
            scores[j * n + i] += s * t;
        }
    }
}

static void outl_accum_ref(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *ov,
                           size_t ovs) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec = codes + i * p->code_bytes;
        const int8_t *v = (const int8_t *)(rec + P->vo);
        const float s = outl_scale(P, rec);
        for (size_t j = 0; j < nq; j++) {
            const float ws = w[j * n + i] * s;
            float *a = ov + j * ovs;
            for (int k = 0; k < K; k++) a[k] += ws * v[k];
        }
    }
}

#if KVQ_X86
/* the outlier scale by F16C (no library call per record) */
KVQ_TARGET_AVX2 static inline float outl_scale_f16c(const outl_priv *P, const uint8_t *rec) {
    return _cvtsh_ss((unsigned short)(rec[P->slo] | (unsigned)rec[P->shi] << 8));
}

/* 8 int8 at p as floats */
KVQ_TARGET_AVX2 static inline __m256 i8x8_ps(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Records [i0, n), one at a time, 4 query rows per pass. */
KVQ_TARGET_AVX2 static void outl_score_avx2(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes,
                                            size_t i0, size_t n, float *scores) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    const size_t qf = p->qfloats, cb = p->code_bytes;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *q[4];
        for (size_t j = 0; j < 4; j++) q[j] = qp + (j0 + (j < m ? j : 0)) * qf + P->iqf;
        for (size_t i = i0; i < n; i++) {
            const uint8_t *rec = codes + i * cb;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int k = 0; k < K; k += 8) {
                const __m256 v = i8x8_ps(rec + P->vo + k);
                a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q[0] + k), a0);
                a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q[1] + k), a1);
                a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q[2] + k), a2);
                a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(q[3] + k), a3);
            }
            float t[4];
            _mm_storeu_ps(t, _mm_mul_ps(hsum4_256(a0, a1, a2, a3), _mm_set1_ps(outl_scale_f16c(P, rec))));
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] += t[j];
        }
    }
}

/* 8 outlier values of 4 rows in registers while the records stream by. */
KVQ_TARGET_AVX2 static void outl_accum_avx2(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes,
                                            size_t n, float *ov, size_t ovs) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    const size_t cb = p->code_bytes;
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *w0 = w + j0 * n, *w1 = m > 1 ? w0 + n : w0, *w2 = m > 2 ? w0 + 2 * n : w0,
                    *w3 = m > 3 ? w0 + 3 * n : w0;
        float *r0 = ov + j0 * ovs;
        for (int k = 0; k < K; k += 8) {
            __m256 a[4];
            for (size_t j = 0; j < 4; j++) a[j] = j < m ? _mm256_loadu_ps(r0 + j * ovs + k) : _mm256_setzero_ps();
            for (size_t i = 0; i < n; i++) {
                const uint8_t *rec = codes + i * cb;
                const __m256 v = _mm256_mul_ps(i8x8_ps(rec + P->vo + k), _mm256_set1_ps(outl_scale_f16c(P, rec)));
                a[0] = _mm256_fmadd_ps(_mm256_set1_ps(w0[i]), v, a[0]);
                a[1] = _mm256_fmadd_ps(_mm256_set1_ps(w1[i]), v, a[1]);
                a[2] = _mm256_fmadd_ps(_mm256_set1_ps(w2[i]), v, a[2]);
                a[3] = _mm256_fmadd_ps(_mm256_set1_ps(w3[i]), v, a[3]);
            }
            for (size_t j = 0; j < m; j++) _mm256_storeu_ps(r0 + j * ovs + k, a[j]);
        }
    }
}

/* 8 records at a time: their 8-byte outlier groups by one 64-bit gather,
 * value k of each record cut out with shifts, 4 rows per pass; the rest of
 * the records per record (AVX2). */
KVQ_TARGET_AVX512 static void outl_score_avx512(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes,
                                                size_t n, float *scores) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers;
    const size_t qf = p->qfloats, cb = p->code_bytes, n8 = n & ~(size_t)7;
    const __m512i offs = _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64((long long)cb));
    const int split = P->shi != P->slo + 1; /* embed 2: scale bytes apart */
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        const float *q[4];
        for (size_t j = 0; j < 4; j++) q[j] = qp + (j0 + (j < m ? j : 0)) * qf + P->iqf;
        for (size_t i = 0; i < n8; i += 8) {
            const uint8_t *base = codes + i * cb;
            /* 32-bit loads (the scale bytes are followed by >= 3 bytes of the record) */
            __m256i sx = _mm512_i64gather_epi32(offs, (const void *)(base + P->slo), 1);
            if (split)
                sx = _mm256_or_si256(_mm256_and_si256(sx, _mm256_set1_epi32(0xff)),
                                     _mm256_slli_epi32(_mm512_i64gather_epi32(offs, (const void *)(base + P->shi), 1), 8));
            const __m256 s = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(sx));
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int k0 = 0; k0 < K; k0 += 8) {
                const __m512i x = _mm512_i64gather_epi64(offs, (const void *)(base + P->vo + k0), 1);
#pragma GCC unroll 8
                for (int kk = 0; kk < 8; kk++) {
                    const __m256 v = _mm512_cvtepi64_ps(_mm512_srai_epi64(_mm512_slli_epi64(x, 56 - 8 * kk), 56));
                    a0 = _mm256_fmadd_ps(v, _mm256_set1_ps(q[0][k0 + kk]), a0);
                    a1 = _mm256_fmadd_ps(v, _mm256_set1_ps(q[1][k0 + kk]), a1);
                    a2 = _mm256_fmadd_ps(v, _mm256_set1_ps(q[2][k0 + kk]), a2);
                    a3 = _mm256_fmadd_ps(v, _mm256_set1_ps(q[3][k0 + kk]), a3);
                }
            }
            const __m256 acc[4] = {a0, a1, a2, a3};
            for (size_t j = 0; j < m; j++) {
                float *sr = scores + (j0 + j) * n + i;
                _mm256_storeu_ps(sr, _mm256_fmadd_ps(s, acc[j], _mm256_loadu_ps(sr)));
            }
        }
    }
    if (n8 < n) outl_score_avx2(p, qp, nq, codes, n8, n, scores);
}
#endif

static void outl_score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
#if KVQ_X86
    if (p->o.outliers % 8 == 0) {
        if (p->isa >= KVQ_ISA_AVX512) { outl_score_avx512(p, qp, nq, codes, n, scores); return; }
        if (p->isa >= KVQ_ISA_AVX2) { outl_score_avx2(p, qp, nq, codes, 0, n, scores); return; }
    }
#endif
    outl_score_ref(p, qp, nq, codes, n, scores);
}

static void outl_accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *ov,
                       size_t ovs) {
#if KVQ_X86
    if (p->o.outliers % 8 == 0 && p->isa >= KVQ_ISA_AVX2) { outl_accum_avx2(p, w, nq, codes, n, ov, ovs); return; }
#endif
    outl_accum_ref(p, w, nq, codes, n, ov, ovs);
}

/* ---- score / accumulate ------------------------------------------------------ */
static void score(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    const outl_priv *P = PRIV(p);
    if (P->embed) tq_score(&P->host, qp, p->qfloats, nq, codes, n, scores, p->isa);
    else p->inner->score(p->inner, qp, nq, codes, n, scores); /* inner->qfloats == p->qfloats */
    outl_score(p, qp, nq, codes, n, scores);
}

#define OUTL_SCRATCH 4096 /* floats of stack scratch per chunk of rows */

static void accum(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers, d = p->d, di = d - K;
    float buf[OUTL_SCRATCH];
    if (P->embed) {
        /* host rows: the host kernel writes garbage at the spare positions,
         * which hold the outliers: saved before, restored and updated after */
        size_t rows = (OUTL_SCRATCH / (size_t)K) & ~(size_t)3;
        for (size_t j0 = 0; j0 < nq; j0 += rows) {
            const size_t m = nq - j0 < rows ? nq - j0 : rows;
            float *a = acc + j0 * (size_t)d;
            for (size_t j = 0; j < m; j++)
                for (int k = 0; k < K; k++) buf[j * K + k] = a[j * d + P->opos[k]];
            tq_accum(&P->host, w + j0 * n, m, codes, n, a, p->isa);
            outl_accum(p, w + j0 * n, m, codes, n, buf, (size_t)K);
            for (size_t j = 0; j < m; j++)
                for (int k = 0; k < K; k++) a[j * d + P->opos[k]] = buf[j * K + k];
        }
        return;
    }
    /* inner rows are d - K floats: a compact copy, accumulated, copied back */
    size_t rows = OUTL_SCRATCH / (size_t)di;
    if (rows > 4) rows &= ~(size_t)3;
    for (size_t j0 = 0; j0 < nq; j0 += rows) {
        const size_t m = nq - j0 < rows ? nq - j0 : rows;
        float *a = acc + j0 * (size_t)d;
        for (size_t j = 0; j < m; j++) memcpy(buf + j * di, a + j * d, (size_t)di * sizeof *buf);
        p->inner->accum(p->inner, w + j0 * n, m, codes, n, buf);
        for (size_t j = 0; j < m; j++) memcpy(a + j * d, buf + j * di, (size_t)di * sizeof *buf);
    }
    outl_accum(p, w, nq, codes, n, acc + di, (size_t)d);
}

static int unrotate(const kvq_plan *p, const float *acc, float *out) {
    const outl_priv *P = PRIV(p);
    const int K = p->o.outliers, di = p->d - K;
    float tmp[KVQ_DIM_MAX], ov[KVQ_DIM_MAX];
    if (P->embed) {
        for (int c = 0; c < di; c++) tmp[c] = acc[P->pos[c]];
        for (int k = 0; k < K; k++) ov[k] = acc[P->opos[k]];
    } else {
        memcpy(tmp, acc, (size_t)di * sizeof *tmp);
        memcpy(ov, acc + di, (size_t)K * sizeof *ov);
    }
    int rc = kvq_unrotate(p->inner, tmp, tmp);
    if (rc) return rc;
    for (int c = 0; c < di; c++) out[p->ch_in[c]] = tmp[c];
    for (int k = 0; k < K; k++) out[p->ch_out[k]] = ov[k];
    return KVQ_OK;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* 1 if every sub-field block of (d, b) is a multiple of 16 bytes (the fast
 * tq kernels read it directly). */
static int direct16(int d, int b) {
    for (int f = 0; f < 3 && kvq_strided_width(b, f); f++)
        if ((d * kvq_strided_width(b, f) / 8) % 16) return 0;
    return 1;
}

/* The host layouts (see the top): inner tq-mse whose own blocks are not a
 * multiple of 16 bytes, host blocks at dim d that are. Sets embed, host,
 * pos, opos and the payload bytes (slo, shi, vo; iso, hpo). */
static void embed_setup(kvq_plan *p, outl_priv *P) {
    const kvq_plan *in = p->inner;
    const int d = p->d, K = p->o.outliers, di = in->d, b = in->bits;
    const size_t sb = scale_bytes(in);
    P->embed = 0;
    P->slo = P->inner_bytes, P->shi = P->inner_bytes + 1, P->vo = P->inner_bytes + 2;
    if (in->rec.kind != KVQ_LAY_TQ || direct16(di, b) || !direct16(d, b)) return; /* tq-mse records only */
    if (kvq_strided_width(b, 1) == 0) { /* one sub-field: the inner record read as it is */
        const int Si = di * b / 8, Sd = d * b / 8, per = 8 / b;
        for (int c = 0; c < di; c++) P->pos[c] = c % Si + (c / Si) * Sd;
        int k = 0;
        for (int f = 0; f < per; f++)
            for (int j = Si; j < Sd; j++) P->opos[k++] = j + f * Sd; /* k == K */
        tq_layout L = {d, b, &in->cb, p->code_bytes, 0, sb, in->o.scale32, p->vnni, NULL};
        P->host = L;
        P->embed = 1;
        return;
    }
    /* repacked: spare positions p mod Smin in the last R residues */
    int nf = 0, wmin = 8;
    while (nf < 3 && kvq_strided_width(b, nf)) wmin = kvq_strided_width(b, nf++);
    const int Smin = d * wmin / 8, R = K * wmin / 8;
    /* spare bytes of the host block in record order; the last R end the block */
    size_t spare[KVQ_DIM_MAX], ns = 0, blk0 = 0;
    for (int f = 0; f < nf; f++) {
        const int S = d * kvq_strided_width(b, f) / 8;
        for (int t = 0; t < S / Smin; t++)
            for (int r = Smin - R; r < Smin; r++) spare[ns++] = blk0 + (size_t)t * Smin + (size_t)r;
        blk0 += (size_t)S;
    }
    const size_t A = ns - (size_t)R; /* spare bytes before the last run */
    size_t hpo, iso;
    if (A == 2) hpo = sb, iso = 0;  /* the outlier scale; the inner scale leads the record */
    else if (A == 2 + sb) {         /* the outlier scale, then the inner scale (contiguous) */
        for (size_t t = 3; t < A; t++)
            if (spare[t] != spare[t - 1] + 1) return;
        hpo = 0, iso = spare[2];
    } else return;
    P->hpo = hpo, P->iso = iso;
    P->slo = hpo + spare[0], P->shi = hpo + spare[1];
    P->vo = hpo + spare[A]; /* the last run, then the tail */
    int c = 0, k = 0;
    for (int q = 0; q < d; q++) {
        if (q % Smin >= Smin - R) P->opos[k++] = q;
        else P->pos[c++] = q;
    }
    tq_layout L = {d, b, &in->cb, p->code_bytes, iso, hpo, in->o.scale32, p->vnni, NULL};
    P->host = L;
    P->embed = 2;
}

static int selected(const kvq_plan_opts *o) { return o->outliers != 0; }

/* The inner plan: the same method and options at dim d - K, its own seed. */
static int inner(const kvq_plan_opts *o, int d, uint64_t seed, kvq_plan_opts *io, int *id, uint64_t *iseed) {
    if (o->outliers % 8 || o->outliers < 8 || d - o->outliers < KVQ_DIM_MIN) return KVQ_ERR_INVALID_ARG;
    *io = *o;
    io->outliers = 0;
    *id = d - o->outliers;
    *iseed = kvq_seed_mix(seed, 0x4f55544c);
    return KVQ_OK;
}

/* Stats (kvq_plan_stats): the K outlier channels, ascending, as floats. */
static size_t stats_floats(const kvq_plan_opts *o, int d) {
    (void)d;
    return (size_t)o->outliers;
}

static void stats_get(const kvq_plan *p, float *out) {
    for (int k = 0; k < p->o.outliers; k++) out[k] = (float)p->ch_out[k];
}

/* The K outlier channels: the calibration rows' K of highest variance, src's
 * (a clone), or stats (whole channel numbers in [0, d), ascending). */
static int calibrate(kvq_plan *p, const float *calib, size_t n_calib, const kvq_plan *src, const float *stats) {
    const int K = p->o.outliers, d = p->d, di = d - K;
    p->ch_out = malloc((size_t)K * sizeof(int));
    p->ch_in = malloc((size_t)di * sizeof(int));
    p->priv = calloc(1, sizeof(outl_priv));
    if (!p->ch_out || !p->ch_in || !p->priv) return KVQ_ERR_NOMEM;
    if (src) {
        memcpy(p->ch_out, src->ch_out, (size_t)K * sizeof(int));
    } else if (stats) {
        for (int k = 0; k < K; k++) {
            if (!isfinite(stats[k])) return KVQ_ERR_NONFINITE;
            if (!(stats[k] >= 0 && stats[k] < (float)d) || stats[k] != floorf(stats[k]) ||
                (k && !(stats[k] > stats[k - 1])))
                return KVQ_ERR_RANGE;
            p->ch_out[k] = (int)stats[k];
        }
    } else {
        if (!calib || n_calib == 0) return KVQ_ERR_NEEDS_CALIBRATION;
        double mean[KVQ_DIM_MAX], var[KVQ_DIM_MAX];
        int rc = calib_moments(calib, n_calib, d, mean, var);
        if (rc) return rc;
        for (int k = 0; k < K; k++) { /* K largest, ties to the lower channel */
            int best = -1;
            for (int c = 0; c < d; c++) {
                int taken = 0;
                for (int t = 0; t < k; t++) taken |= p->ch_out[t] == c;
                if (!taken && (best < 0 || var[c] > var[best])) best = c;
            }
            p->ch_out[k] = best;
        }
    }
    qsort(p->ch_out, (size_t)K, sizeof(int), cmp_int);
    for (int c = 0, k = 0, i = 0; c < d; c++) {
        if (k < K && p->ch_out[k] == c) k++;
        else p->ch_in[i++] = c;
    }
    return KVQ_OK;
}

/* Around p->inner: the record (layouts.h), the host layout, the kernels. */
static int attach(kvq_plan *p) {
    outl_priv *P = p->priv;
    const int K = p->o.outliers, d = p->d;
    P->inner_bytes = p->inner->own_code_bytes;
    p->code_bytes = (size_t)kvq_outliers_bytes((int)P->inner_bytes, K);
    p->rec.bytes = (int)p->code_bytes; /* kind KVQ_LAY_NONE: the record is described above */
    p->rec.d = d;
    embed_setup(p, P);
    P->iqf = P->embed ? TQ_QFLOATS(d) : p->inner->own_qfloats;
    p->qfloats = P->iqf + (size_t)K;
    /* inner kernels stride over whole records and whole prepared rows */
    int rc = wrapper_inner_strides(p, p->code_bytes, p->qfloats);
    if (rc) return rc;
    p->rotated = 1;
    wrapper_kernels(p, enc, dec, prep, score, accum);
    return KVQ_OK;
}

static void fini(kvq_plan *p) {
    free(p->priv);
    free(p->ch_out);
    free(p->ch_in);
    p->priv = NULL, p->ch_out = p->ch_in = NULL;
}

const kvq_wrapper kvq_wrapper_outliers = {"+outliers", 1,      selected, inner,        calibrate, attach,
                                          unrotate,    fini,   stats_floats, stats_get};
