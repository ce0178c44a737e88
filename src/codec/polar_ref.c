/*
 * PolarQuant's scalar references (polar.h): the angle bitstream, the
 * recursive polar transform, the encoder (quantize_scalar, polar_finish),
 * decode, float scores and accumulate, and the 8-bit query tables and
 * scores. The specification the x86 kernels match (polar_kernels_x86.c:
 * AVX2, polar_fast_x86.c: AVX-512) and call for what they do not serve;
 * this file calls none of them. The maths is described at the top of
 * m_polar.c, which sets these kernels in a plan and then the x86 ones.
 */
#include <math.h>
#include <string.h>

#include "codec_internal.h"
#include "polar.h"

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
    for (int i = 0; i < d / 2; i++) {
        idx[P->off[1] + i] = (uint8_t)polar_cell1(P, y[2 * i], y[2 * i + 1]);
        r[i] = polar_radius(y[2 * i], y[2 * i + 1]);
    }
    for (int l = 2; l <= P->L; l++)
        for (int i = 0; i < d >> l; i++) {
            const float a = r[2 * i], b = r[2 * i + 1];
            idx[P->off[l] + i] = (uint8_t)polar_cell(P, l, a, b);
            r[i] = polar_radius(a, b);
        }
    memcpy(rfin, r, (size_t)P->m * sizeof *r);
}

/* Radii (exact or least-squares) and the bitstream. */
int polar_finish(const kvq_plan *p, const float *y, const uint8_t *idx, const float *rfin, uint8_t *code) {
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

int polar_encode_ref(const kvq_plan *p, const float *x, uint8_t *code) {
    float y[KVQ_DIM_MAX], rfin[KVQ_DIM_MAX / 2];
    uint8_t idx[KVQ_DIM_MAX];
    rot_apply(&p->rot, x, y);
    quantize_scalar(p->priv, p->d, y, idx, rfin);
    return polar_finish(p, y, idx, rfin, code);
}

void polar_decode_ref(const kvq_plan *p, const uint8_t *code, float *y) {
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
void polar_score_ref(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        polar_decode_ref(p, codes + i * p->code_bytes, y);
        for (size_t j = 0; j < nq; j++) {
            const float *q = qp + j * p->qfloats;
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int c = 0; c < d; c += 8)
                for (int k = 0; k < 8; k++) s[k] += q[c + k] * y[c + k];
            scores[j * n + i] = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
        }
    }
}

void polar_accum_ref(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    float y[KVQ_DIM_MAX];
    const int d = p->d;
    for (size_t i = 0; i < n; i++) {
        polar_decode_ref(p, codes + i * p->code_bytes, y);
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
static inline float round_ne(float x) { return (x + 12582912.0f) - 12582912.0f; } /* |x| < 2^22 */

void polar_prep_i8_ref(const kvq_plan *p, const float *q, float *qp) {
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


/* The 8-bit score reference: s = c · sum_b rad_b · sum_p g8_p · T8_p[k1_p]. */
void polar_score_i8(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
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
