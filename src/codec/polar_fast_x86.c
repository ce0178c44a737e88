/*
 * PolarQuant's AVX-512 VBMI (and VNNI) kernels: scores and accumulate with
 * the levels expanded in registers, the 8-bit scores with lanes = records
 * (m_polar.c: the method; polar_ref.c: the references; polar_kernels_x86.c:
 * AVX2).
 */
#include <stdlib.h>
#include <string.h>

#include "polar.h"
#include "rec_transpose.h"

/* ---- AVX-512 VBMI score / accumulate (B <= 6, 16 | d) ---------------------------
 * A "super-block" is 8 blocks of 16 coordinates (128 coordinates; the last
 * one may hold fewer blocks). Its 16 lanes are (h, blk): blk the block, h its
 * level-4 half (coordinate bit 3). The levels then expand lane-wise with no
 * shuffles of values: level 4 gives R3 (lane: rad·cos4 or rad·sin4 by h);
 * level 3 gives R2[b2] = R3·{cos3, sin3}[k3] (b2 = 0, 1); level 2 gives
 * R1[b2][b1] = R2[b2]·{cos2, sin2}[k2]; level 1 gives the 8 vectors
 * y[4·b2 + 2·b1 + b0] = R1[b2][b1]·{cos1, sin1}[k1], whose lane (h, blk) is
 * coordinate 16·blk + 8·h + 4·b2 + 2·b1 + b0. Every lane needs the angle
 * fields of its own (block, half): per level, one masked 64-byte load of the
 * level's bytes of the super-block, one vpermb putting each lane's bytes in
 * its dword, then a variable shift per field (<= 4 fields, <= 31
 * bits per lane for B <= 6). Table lookups are register permutes (<= 16
 * entries: vpermps, 32: vpermt2ps, 64: two and a blend). The products are
 * the scalar decode's, in its order (rad·f4·f3·f2·f1).
 * Scores: queries are copied per call in that lane order (zero on missing
 * blocks), 4 rows per record pass, 8 FMAs per row and super-block.
 * Accumulate: per (super-block, b2) pass, 4 rows x 4 vectors in registers
 * while the records stream by (chunks of 32 records; the b2 = 0 pass keeps
 * R2[1] and the level-2/1 words for the b2 = 1 pass), written back in
 * coordinate order per call. */
#if KVQ_X86
#define POLAR_SBMAX (KVQ_DIM_MAX / 128)
/* Record-lane scores (score_lane_body): one pass per super-block; the
 * record bytes it reads are POLAR_LCH 16-byte chunks at most, transposed so
 * that lane = record (X[4c + w] = dword w of chunk c). A block's fields sit
 * in one dword each: X[x] >> s, then fixed shifts per angle. */
#define POLAR_LCH 8
#define POLAR_LCB 320 /* largest record of a record-lane plan (B = 4, d = 512, f32 radii: 312) */
typedef struct {
    uint8_t xr, sr;         /* radius */
    uint8_t x1, s1;         /* level 1: the block's 8 angles */
    uint8_t x2, s2, x3, s3, x4, s4;
} polar_lblk;
typedef struct {
    int nb, nch;                 /* blocks, chunks */
    uint16_t choff[POLAR_LCH];   /* chunk offsets in a record (bytes) */
    polar_lblk blk[8];
    /* vpmultishiftqb controls per block: byte u of a lane gets k4, k3 of
     * half u >> 1, k2 of node u at bits 0, w, 2w (w = B - 2); B = 3: the
     * level-1 angles 2u and 2u + 1 */
    uint8_t ms[8][5][64];
} polar_lpass;
typedef struct polar_fast {
    int nsb;                          /* super-blocks */
    int direct;                       /* B = 4, 128 | d: every lane's fields from broadcast loads (see fast_build) */
    size_t off[POLAR_LEVELS + 1];     /* direct: first byte of level l in the angle stream */
    uint8_t perm[POLAR_LEVELS + 1][64]; /* vpermb indices, 4 bytes per lane */
    int32_t sh[POLAR_LEVELS + 1][4][16]; /* right shift of the lane's field m */
    int32_t add4[16];                  /* level 4: n4 on h = 1 lanes */
    float t4[64];                      /* level 4: [cos4 | sin4] */
    /* cos/sin tables of levels 1..3 repeated to 16 entries (fewer levels)
     * or as is (32, 64): the permutes read only the index bits they need,
     * so the fields are never masked */
    float ct[POLAR_LEVELS + 1][64], st[POLAR_LEVELS + 1][64];
    size_t wst[POLAR_LEVELS + 1], wsb[POLAR_LEVELS + 1];  /* window start, advance per super-block */
    uint64_t wmask[POLAR_LEVELS + 1][POLAR_SBMAX];        /* window byte masks (record bounds) */
    uint8_t rmask[POLAR_SBMAX];                           /* blocks present in super-block s */
    int16_t pos2c[KVQ_DIM_MAX];                           /* lane-order position -> coordinate, -1: none */
    int lane;                                             /* record-lane scores (B <= 4): lp[] is set */
    polar_lpass lp[POLAR_SBMAX];
    /* Whole-record accumulate (accum_rec_body): pk records (pk * code_bytes
     * <= 64, one super-block) in one zmm, lane 8h + pk·b + r = half h of
     * block b of record r; per level a vpermb puts each lane's bytes in its
     * dword (mperm), fields by per-lane shifts (msh). 0: not used. */
    int pk;
    size_t cb;             /* code bytes the tables were built for (+outliers later strides over longer rows) */
    uint8_t mperm[POLAR_LEVELS + 1][64];
    int32_t msh[POLAR_LEVELS + 1][4][16];
    uint8_t mrad[64];      /* vpermb indices of each lane's radius: word (f16) or dword (f32) L */
    uint16_t mlanes;       /* lanes of a present block */
    int16_t mpos[128];     /* position 16z + lane -> coordinate (-1: none) */
} polar_fast;

/* Places the field [a, a + w) (bits from the record start) in a chunk of
 * the pass: one that holds it inside one of its dwords, else a new chunk at
 * byte a / 8. 0: more than POLAR_LCH chunks needed. */
static int lane_field(polar_lpass *ps, size_t a, int w, uint8_t *xi, uint8_t *sh) {
    for (int c = 0; c < ps->nch; c++) {
        const size_t c0 = (size_t)ps->choff[c] * 8;
        if (a < c0 || a + (size_t)w > c0 + 128 || (a - c0) % 32 + (size_t)w > 32) continue;
        *xi = (uint8_t)(4 * c + (a - c0) / 32);
        *sh = (uint8_t)((a - c0) % 32);
        return 1;
    }
    if (ps->nch == POLAR_LCH || a % 8 + (size_t)w > 32) return 0;
    ps->choff[ps->nch++] = (uint16_t)(a / 8);
    return lane_field(ps, a, w, xi, sh);
}

/* The passes of the record-lane score kernel (B <= 4, L = 4). */
static int lane_build(const kvq_plan *p, const polar_priv *P, polar_fast *F) {
    const int d = p->d, nblk = d / 16, B = P->b[1], b2 = P->b[2];
    const int sbits = (int)scale_bytes(p) * 8;
    const size_t a0 = (size_t)P->m * scale_bytes(p) * 8; /* first angle bit */
    if (B > 4 || p->code_bytes > POLAR_LCB) return 0;
    for (int s = 0; s < F->nsb; s++) {
        polar_lpass *ps = &F->lp[s];
        ps->nb = nblk - 8 * s < 8 ? nblk - 8 * s : 8;
        int ok = 1;
        for (int b = 0; b < ps->nb; b++) ok &= lane_field(ps, (size_t)(8 * s + b) * sbits, sbits, &ps->blk[b].xr, &ps->blk[b].sr);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + (size_t)(8 * (8 * s + b)) * B, 8 * B, &ps->blk[b].x1, &ps->blk[b].s1);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[2] + (size_t)(8 * s + b) * 4 * b2, 4 * b2, &ps->blk[b].x2, &ps->blk[b].s2);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[3] + (size_t)(8 * s + b) * 2 * b2, 2 * b2, &ps->blk[b].x3, &ps->blk[b].s3);
        for (int b = 0; b < ps->nb; b++)
            ok &= lane_field(ps, a0 + P->bitoff[4] + (size_t)(8 * s + b) * b2, b2, &ps->blk[b].x4, &ps->blk[b].s4);
        if (!ok || (B == 4 && ps->blk[0].s1)) return 0;
        for (int b = 0; b < ps->nb; b++) {
            const polar_lblk *D = &ps->blk[b];
            for (int i = 0; i < 64; i++) {
                const int u = i & 3, hi = 32 * ((i >> 2) & 1);
                const int o[5] = {D->s4, D->s3 + b2 * (u >> 1) - b2, D->s2 + b2 * u - 2 * b2, D->s1 + 2 * u * B,
                                  D->s1 + (2 * u + 1) * B};
                for (int c = 0; c < 5; c++) ps->ms[b][c][i] = (uint8_t)((o[c] + hi) & 63);
            }
        }
    }
    return 1;
}

/* Tables of the whole-record accumulate (see polar_fast.pk). */
static void rec_build(const kvq_plan *p, const polar_priv *P, polar_fast *F) {
    const int nblk = p->d / 16, B = P->b[1], b2 = P->b[2], sb = (int)scale_bytes(p);
    const size_t cb = p->code_bytes, a0 = (size_t)P->m * sb * 8;
    int pk = 0;
    for (int k = 4; k >= 1; k /= 2)
        if (nblk <= 8 / k && (size_t)k * cb <= 64) {
            pk = k;
            break;
        }
    if (!pk) return;
    F->pk = pk;
    F->cb = cb;
    memset(F->mpos, 0xff, sizeof F->mpos);
    for (int lane = 0; lane < 16; lane++) {
        const int h = lane >> 3, b = (lane & 7) / pk, r = lane % pk;
        const size_t rb = (size_t)r * cb * 8; /* record r's first bit */
        /* first field bit and field width of each level */
        size_t f0[POLAR_LEVELS + 1];
        int fw[POLAR_LEVELS + 1];
        f0[1] = a0 + (size_t)(8 * b + 4 * h) * B, fw[1] = B;
        f0[2] = a0 + P->bitoff[2] + (size_t)(4 * b + 2 * h) * b2, fw[2] = b2;
        f0[3] = a0 + P->bitoff[3] + (size_t)(2 * b + h) * b2, fw[3] = b2;
        f0[4] = a0 + P->bitoff[4] + (size_t)b * b2, fw[4] = b2;
        const int present = b < nblk;
        if (present) F->mlanes |= (uint16_t)(1u << lane);
        for (int l = 1; l <= 4; l++) {
            const size_t bit = present ? rb + f0[l] : 0, byte = bit / 8;
            for (int k = 0; k < 4; k++) F->mperm[l][4 * lane + k] = (uint8_t)(byte + k < 64 ? byte + k : 63);
            for (int m = 0; m < 4; m++) F->msh[l][m][lane] = (int32_t)(bit - 8 * byte) + m * fw[l];
        }
        for (int k = 0; k < sb; k++) F->mrad[sb * lane + k] = (uint8_t)(present ? r * cb + (size_t)b * sb + k : 0);
        for (int z = 0; z < 8 && present; z++) F->mpos[16 * z + lane] = (int16_t)(16 * b + 8 * h + z);
    }
}

static polar_fast *fast_build(const kvq_plan *p, const polar_priv *P) {
    const int d = p->d, nblk = d / 16;
    if (P->L != 4 || p->bits > 6) return NULL;
    polar_fast *F = calloc(1, sizeof *F);
    if (!F) return NULL;
    F->nsb = (nblk + 7) / 8;
    for (int l = 1; l <= 4; l++) {
        const int f = 16 >> l, b = P->b[l], r = (int)(P->bitoff[l] & 7);
        F->wst[l] = P->bitoff[l] >> 3;
        F->wsb[l] = (size_t)f * b; /* 8 blocks x f fields x b bits / 8 */
        for (int lane = 0; lane < 16; lane++) {
            const int h = lane >> 3, blk = lane & 7;
            const int o = r + (blk * f + (l < 4 ? h * (f / 2) : 0)) * b;
            for (int k = 0; k < 4; k++) F->perm[l][4 * lane + k] = (uint8_t)((o >> 3) + k);
            for (int m = 0; m < 4; m++) F->sh[l][m][lane] = (o & 7) + m * b;
        }
        for (int s = 0; s < F->nsb; s++) {
            const size_t st = F->wst[l] + (size_t)s * F->wsb[l];
            const size_t len = P->ang_bytes - st < 64 ? P->ang_bytes - st : 64;
            F->wmask[l][s] = len >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << len) - 1);
        }
    }
    if (p->bits == 4 && d % 128 == 0) {
        /* Byte-aligned levels of 8 blocks per super-block: level 1 is one
         * dword per block (fields 4h + m at 16h + 4m), level 2 one byte per
         * block (4h + 2m), level 3 one dword per super-block (field 2·blk + h
         * at 4·blk + 2h), level 4 one 16-bit word (2·blk). */
        F->direct = 1;
        for (int l = 1; l <= 4; l++) F->off[l] = P->bitoff[l] >> 3;
        for (int lane = 0; lane < 16; lane++) {
            const int h = lane >> 3, blk = lane & 7;
            for (int m = 0; m < 4; m++) {
                F->sh[1][m][lane] = 16 * h + 4 * m;
                F->sh[2][m][lane] = 4 * h + 2 * m;
                F->sh[3][m][lane] = 4 * blk + 2 * h;
                F->sh[4][m][lane] = 2 * blk;
            }
        }
    }
    const int n4 = P->cb[4].n;
    for (int lane = 0; lane < 16; lane++) F->add4[lane] = lane >= 8 ? n4 : 0;
    for (int k = 0; k < n4; k++) F->t4[k] = P->cosc[4][k], F->t4[n4 + k] = P->sinc[4][k];
    for (int l = 1; l <= 4; l++) {
        const int n = P->cb[l].n, span = n < 16 ? 16 : n;
        for (int k = 0; k < span; k++) F->ct[l][k] = P->cosc[l][k % n], F->st[l][k] = P->sinc[l][k % n];
    }
    for (int s = 0; s < F->nsb; s++) {
        const int nb = nblk - 8 * s < 8 ? nblk - 8 * s : 8;
        F->rmask[s] = (uint8_t)((1u << nb) - 1);
    }
    for (int t = 0; t < F->nsb * 128; t++) {
        const int s = t >> 7, z = (t >> 4) & 7, lane = t & 15, blk = 8 * s + (lane & 7);
        F->pos2c[t] = (int16_t)(blk < nblk ? 16 * blk + 8 * (lane >> 3) + z : -1);
    }
    F->lane = lane_build(p, P, F);
    rec_build(p, P, F);
    return F;
}

#define KVQ_TARGET_POLAR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx2,fma,f16c,bmi2")))
#define PAI static inline __attribute__((always_inline))

typedef struct { __m512 c1[4], s1[4], c2, s2, c3, s3, t4[2]; } polar_tabs;

KVQ_TARGET_POLAR PAI __m512 plut(const __m512 *t, __m512i idx, const int n) {
    if (n <= 16) return _mm512_permutexvar_ps(idx, t[0]);
    if (n <= 32) return _mm512_permutex2var_ps(t[0], idx, t[1]);
    const __m512 lo = _mm512_permutex2var_ps(t[0], idx, t[1]), hi = _mm512_permutex2var_ps(t[2], idx, t[3]);
    return _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, _mm512_set1_epi32(32)), lo, hi);
}

KVQ_TARGET_POLAR PAI polar_tabs tabs_load(const polar_priv *P, const polar_fast *F) {
    polar_tabs T;
    (void)P;
    for (int k = 0; k < 4; k++) T.c1[k] = _mm512_loadu_ps(F->ct[1] + 16 * k), T.s1[k] = _mm512_loadu_ps(F->st[1] + 16 * k);
    T.c2 = _mm512_loadu_ps(F->ct[2]), T.s2 = _mm512_loadu_ps(F->st[2]);
    T.c3 = _mm512_loadu_ps(F->ct[3]), T.s3 = _mm512_loadu_ps(F->st[3]);
    T.t4[0] = _mm512_loadu_ps(F->t4), T.t4[1] = _mm512_loadu_ps(F->t4 + 16);
    return T;
}

KVQ_TARGET_POLAR PAI __m512i win(const polar_fast *F, const uint8_t *ang, int l, int s) {
    return _mm512_permutexvar_epi8(_mm512_loadu_si512(F->perm[l]),
                                   _mm512_maskz_loadu_epi8(F->wmask[l][s], ang + F->wst[l] + (size_t)s * F->wsb[l]));
}

/* Direct (B = 4, 128 | d): the lanes' words of level l, super-block s. */
KVQ_TARGET_POLAR PAI __m512i dwin(const polar_fast *F, const uint8_t *ang, int l, int s) {
    const uint8_t *a = ang + F->off[l];
    if (l == 1) return _mm512_broadcast_i32x8(_mm256_loadu_si256((const __m256i *)(a + 32 * (size_t)s)));
    if (l == 2) {
        uint64_t v;
        memcpy(&v, a + 8 * (size_t)s, 8);
        return _mm512_cvtepu8_epi32(_mm_set1_epi64x((long long)v));
    }
    if (l == 3) {
        uint32_t v;
        memcpy(&v, a + 4 * (size_t)s, 4);
        return _mm512_set1_epi32((int)v);
    }
    uint16_t v;
    memcpy(&v, a + 2 * (size_t)s, 2);
    return _mm512_set1_epi32(v);
}

/* Field m of the lanes of level l at bit 0; the bits above are the next
 * fields, which the (periodic) table permutes ignore. */
KVQ_TARGET_POLAR PAI __m512i field(const polar_fast *F, __m512i x, int l, int m) {
    return _mm512_srlv_epi32(x, _mm512_loadu_si512(F->sh[l][m]));
}

/* Super-block s of a record (rad: its radii, ang: its angle stream). half < 0:
 * y[8], y[4·b2 + 2·b1 + b0]; half = b2: y[4], y[2·b1 + b0] of that b2. */
/* Levels 2 and 1 of half b2: y[2·b1 + b0] from R2[b2] and the lanes' words. */
/* sh: the lanes' field shifts, F->sh (this layout) or F->msh (record lanes,
 * rec_lower below). */
KVQ_TARGET_POLAR PAI void lower_levels(const int32_t (*sh)[4][16], const polar_tabs *T, __m512 R2, __m512i x2,
                                       __m512i x1, const int b2, const int B, __m512 *y) {
    const int n1 = 1 << B, n = 1 << (B - 2);
    const __m512i i2 = _mm512_srlv_epi32(x2, _mm512_loadu_si512(sh[2][b2]));
    const __m512 R1[2] = {_mm512_mul_ps(R2, plut(&T->c2, i2, n)), _mm512_mul_ps(R2, plut(&T->s2, i2, n))};
    for (int b1 = 0; b1 < 2; b1++) {
        const __m512i i1 = _mm512_srlv_epi32(x1, _mm512_loadu_si512(sh[1][2 * b2 + b1]));
        y[2 * b1] = _mm512_mul_ps(R1[b1], plut(T->c1, i1, n1));
        y[2 * b1 + 1] = _mm512_mul_ps(R1[b1], plut(T->s1, i1, n1));
    }
}
KVQ_TARGET_POLAR PAI void fast_lower(const polar_fast *F, const polar_tabs *T, __m512 R2, __m512i x2, __m512i x1,
                                     const int b2, const int B, __m512 *y) {
    lower_levels(F->sh, T, R2, x2, x1, b2, B, y);
}

/* Radius and levels 4, 3 of super-block s: R2[b2] (half < 0: both, else
 * that one), and the lanes' words of levels 2 and 1. */
KVQ_TARGET_POLAR PAI void fast_upper(const polar_fast *F, const polar_tabs *T, const uint8_t *rad, const uint8_t *ang,
                                     int s, const int sc32, const int B, const int half, const int D, __m512 *R2,
                                     __m512i *x2, __m512i *x1) {
    const int n = 1 << (B - 2);
    const __m256 r8 = sc32 ? _mm256_maskz_loadu_ps(F->rmask[s], rad + 32 * (size_t)s)
                           : _mm256_cvtph_ps(_mm_maskz_loadu_epi16(F->rmask[s], rad + 16 * (size_t)s));
    const __m512i x4 = D ? dwin(F, ang, 4, s) : win(F, ang, 4, s);
    const __m512i i4 = _mm512_ternarylogic_epi32(_mm512_srlv_epi32(x4, _mm512_loadu_si512(F->sh[4][0])),
                                                 _mm512_set1_epi32(n - 1), _mm512_loadu_si512(F->add4), 0xEA);
    const __m512 R3 = _mm512_mul_ps(_mm512_broadcast_f32x8(r8), plut(T->t4, i4, 2 * n));
    const __m512i i3 = field(F, D ? dwin(F, ang, 3, s) : win(F, ang, 3, s), 3, 0);
    R2[0] = R2[1] = R3;
    if (half != 1) R2[0] = _mm512_mul_ps(R3, plut(&T->c3, i3, n));
    if (half != 0) R2[1] = _mm512_mul_ps(R3, plut(&T->s3, i3, n));
    *x2 = D ? dwin(F, ang, 2, s) : win(F, ang, 2, s);
    *x1 = D ? dwin(F, ang, 1, s) : win(F, ang, 1, s);
}

/* Super-block s of a record (rad: its radii, ang: its angle stream):
 * y[4·b2 + 2·b1 + b0]. */
KVQ_TARGET_POLAR PAI void fast_decode(const polar_fast *F, const polar_tabs *T, const uint8_t *rad, const uint8_t *ang,
                                      int s, const int sc32, const int B, const int D, __m512 *y) {
    __m512 R2[2];
    __m512i x2, x1;
    fast_upper(F, T, rad, ang, s, sc32, B, -1, D, R2, &x2, &x1);
    fast_lower(F, T, R2[0], x2, x1, 0, B, y);
    fast_lower(F, T, R2[1], x2, x1, 1, B, y + 4);
}

/* Records [i0, n) (scores rows are n apart). */
KVQ_TARGET_POLAR PAI void score_fast_body(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t i0,
                                          size_t n, float *scores, const int B, const int D) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int nsb = F->nsb, sc32 = p->o.scale32;
    const size_t cb = p->code_bytes, ra = (size_t)P->m * scale_bytes(p), qs = p->qfloats;
    float qb[4][KVQ_DIM_MAX] __attribute__((aligned(64)));
    for (size_t j0 = 0; j0 < nq; j0 += 4) {
        const size_t m = nq - j0 < 4 ? nq - j0 : 4;
        for (size_t j = 0; j < 4; j++) {
            const float *src = qp + (j0 + (j < m ? j : 0)) * qs;
            for (int t = 0; t < nsb * 128; t++) qb[j][t] = F->pos2c[t] >= 0 ? src[F->pos2c[t]] : 0.0f;
        }
        for (size_t i = i0; i < n; i++) {
            const uint8_t *rec = codes + i * cb;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int s = 0; s < nsb; s++) {
                __m512 y[8];
                fast_decode(F, &T, rec, rec + ra, s, sc32, B, D, y);
#pragma GCC unroll 8
                for (int z = 0; z < 8; z++) {
                    const size_t o = (size_t)s * 128 + 16 * (size_t)z;
                    a0 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[0] + o), a0);
                    a1 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[1] + o), a1);
                    a2 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[2] + o), a2);
                    a3 = _mm512_fmadd_ps(y[z], _mm512_load_ps(qb[3] + o), a3);
                }
            }
            float sc[4];
            _mm_storeu_ps(sc, hsum4_512(a0, a1, a2, a3));
            for (size_t j = 0; j < m; j++) scores[(j0 + j) * n + i] = sc[j];
        }
    }
}

/* Accumulate rows j0 .. j0 + NR - 1 (NR <= 4): per super-block, chunks of
 * POLAR_ACH records in two passes (b2 = 0, 1; NR rows x 4 vectors in
 * registers each). The first pass decodes the upper levels and keeps R2[1]
 * and the level-2 / level-1 words for the second. */
#define POLAR_ACH 32
KVQ_TARGET_POLAR PAI void accum_fast_body(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,
                                          float *acc, const int B, const int D, const int NR) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int nsb = F->nsb, sc32 = p->o.scale32, d = p->d;
    const size_t cb = p->code_bytes, ra = (size_t)P->m * scale_bytes(p);
    float part[2][4][4][16] __attribute__((aligned(64))); /* fixed sizes: NR-sized arrays would be VLAs */
    __m512 keep[POLAR_ACH][3];
    const float *wr[4];
    for (int j = 0; j < NR; j++) wr[j] = w + (j0 + (size_t)j) * n;
    for (int s = 0; s < nsb; s++) {
        memset(part, 0, sizeof part);
        for (size_t c0 = 0; c0 < n; c0 += POLAR_ACH) {
            const size_t ce = n - c0 < POLAR_ACH ? n : c0 + POLAR_ACH;
            for (int b2 = 0; b2 < 2; b2++) {
                __m512 a[4][4];
                for (int j = 0; j < NR; j++)
                    for (int z = 0; z < 4; z++) a[j][z] = _mm512_load_ps(part[b2][j][z]);
#define ACC_Y                                                                                                        \
    do {                                                                                                             \
        __m512 g[4];                                                                                                 \
        for (int j = 0; j < NR; j++) g[j] = _mm512_set1_ps(wr[j][i]);                                               \
        _Pragma("GCC unroll 4") for (int z = 0; z < 4; z++) _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)  \
            a[j][z] = _mm512_fmadd_ps(g[j], y[z], a[j][z]);                                                          \
    } while (0)
                if (b2 == 0) { /* two loops, not a branch per record */
#pragma GCC unroll 2
                    for (size_t i = c0; i < ce; i++) {
                        __m512 y[4];
                        const uint8_t *rec = codes + i * cb;
                        __m512 R2[2];
                        __m512i x2, x1;
                        fast_upper(F, &T, rec, rec + ra, s, sc32, B, -1, D, R2, &x2, &x1);
                        keep[i - c0][0] = R2[1];
                        keep[i - c0][1] = _mm512_castsi512_ps(x2);
                        keep[i - c0][2] = _mm512_castsi512_ps(x1);
                        fast_lower(F, &T, R2[0], x2, x1, 0, B, y);
                        ACC_Y;
                    }
                } else {
#pragma GCC unroll 2
                    for (size_t i = c0; i < ce; i++) {
                        __m512 y[4];
                        fast_lower(F, &T, keep[i - c0][0], _mm512_castps_si512(keep[i - c0][1]),
                                   _mm512_castps_si512(keep[i - c0][2]), 1, B, y);
                        ACC_Y;
                    }
                }
#undef ACC_Y
                for (int j = 0; j < NR; j++)
                    for (int z = 0; z < 4; z++) _mm512_store_ps(part[b2][j][z], a[j][z]);
            }
        }
        for (int j = 0; j < NR; j++) {
            float *r = acc + (j0 + (size_t)j) * (size_t)d;
            for (int b2 = 0; b2 < 2; b2++)
                for (int z = 0; z < 4; z++)
                    for (int lane = 0; lane < 16; lane++) {
                        const int c = F->pos2c[s * 128 + (4 * b2 + z) * 16 + lane];
                        if (c >= 0) r[c] += part[b2][j][z][lane];
                    }
        }
    }
}

/*
 * Accumulate, whole records (polar_fast.pk): the pk records of a group come
 * in one masked 64-byte load; per level one vpermb gives every lane its
 * bytes (no per-level windows), the radii one vpermw (f16) or vpermd (f32).
 * The expansion is fast_upper / fast_lower's (same products, same order);
 * the weights of a lane's record come from one broadcast (pk = 2: the two
 * records' weights as a qword, lanes alternate; pk = 4: four floats). NR
 * rows (1..4) per expansion, two passes (b2 = 0, 1) of NR x 4 accumulators
 * per chunk of POLAR_ACH groups as in accum_fast_body.
 */
KVQ_TARGET_POLAR PAI __m512i mfield(const polar_fast *F, __m512i x, int l, int m) {
    return _mm512_srlv_epi32(x, _mm512_loadu_si512(F->msh[l][m]));
}

KVQ_TARGET_POLAR PAI void rec_lower(const polar_fast *F, const polar_tabs *T, __m512 R2, __m512i x2, __m512i x1, const int b2,
                                    const int B, __m512 *y) {
    lower_levels(F->msh, T, R2, x2, x1, b2, B, y);
}

KVQ_TARGET_POLAR PAI __m512 rec_weight(const float *w, const int PK) {
    if (PK == 1) return _mm512_set1_ps(w[0]);
    if (PK == 2) {
        double v;
        memcpy(&v, w, 8);
        return _mm512_castpd_ps(_mm512_set1_pd(v));
    }
    return _mm512_broadcast_f32x4(_mm_loadu_ps(w));
}

KVQ_TARGET_POLAR PAI void accum_rec_body(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,
                                         float *acc, const int B, const int NR, const int PK) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const polar_tabs T = tabs_load(P, F);
    const int sc32 = p->o.scale32, nn = 1 << (B - 2);
    const size_t cb = p->code_bytes, d = (size_t)p->d;
    const __mmask16 lanes = F->mlanes;
    float part[2][4][4][16] __attribute__((aligned(64))); /* fixed sizes: NR-sized arrays would be VLAs */
    __m512 keep[POLAR_ACH][3];
    const float *wr[4];
    for (int j = 0; j < NR; j++) wr[j] = w + (j0 + (size_t)j) * n;
    memset(part, 0, sizeof part);
    const size_t chunk = (size_t)POLAR_ACH * PK;
    const __mmask64 lmf = PK * cb >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (PK * cb)) - 1); /* PK records */
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        const size_t ce = n - c0 < chunk ? n : c0 + chunk;
        for (int b2 = 0; b2 < 2; b2++) {
            __m512 a[4][4];
            for (int j = 0; j < NR; j++)
                for (int z = 0; z < 4; z++) a[j][z] = _mm512_load_ps(part[b2][j][z]);
            /* full groups [c0, cf), then the last one if it is short (its missing weights zero) */
            const size_t cf = ce == n ? c0 + (ce - c0) / PK * PK : ce;
#define REC_UPPER(LM)                                                                                                \
    const __m512i R = _mm512_maskz_loadu_epi8((LM), codes + i * cb);                                                 \
    const __m512i rb = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mrad), R);                                      \
    const __m512 rad = sc32 ? _mm512_maskz_mov_ps(lanes, _mm512_castsi512_ps(rb))                                   \
                            : _mm512_maskz_cvtph_ps(lanes, _mm512_castsi512_si256(rb));                              \
    const __m512i x4 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[4]), R);                                 \
    const __m512i i4 =                                                                                               \
        _mm512_ternarylogic_epi32(mfield(F, x4, 4, 0), _mm512_set1_epi32(nn - 1), _mm512_loadu_si512(F->add4), 0xEA); \
    const __m512 R3 = _mm512_mul_ps(rad, plut(T.t4, i4, 2 * nn));                                                   \
    const __m512i i3 = mfield(F, _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[3]), R), 3, 0);               \
    const __m512 R20 = _mm512_mul_ps(R3, plut(&T.c3, i3, nn));                                                       \
    const __m512i x2 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[2]), R);                                 \
    const __m512i x1 = _mm512_permutexvar_epi8(_mm512_loadu_si512(F->mperm[1]), R);                                 \
    keep[g][0] = _mm512_mul_ps(R3, plut(&T.s3, i3, nn));                                                             \
    keep[g][1] = _mm512_castsi512_ps(x2);                                                                            \
    keep[g][2] = _mm512_castsi512_ps(x1);                                                                            \
    rec_lower(F, &T, R20, x2, x1, 0, B, y)
#define REC_KEPT rec_lower(F, &T, keep[g][0], _mm512_castps_si512(keep[g][1]), _mm512_castps_si512(keep[g][2]), 1, B, y)
#define REC_ACC(WSRC)                                                                                                \
    do {                                                                                                             \
        __m512 g8[4];                                                                                                \
        for (int j = 0; j < NR; j++) g8[j] = rec_weight(WSRC, PK);                                                  \
        _Pragma("GCC unroll 4") for (int z = 0; z < 4; z++) _Pragma("GCC unroll 4") for (int j = 0; j < NR; j++)  \
            a[j][z] = _mm512_fmadd_ps(g8[j], y[z], a[j][z]);                                                         \
    } while (0)
            size_t i = c0, g = 0;
            if (b2 == 0)
                for (; i < cf; i += PK, g++) {
                    __m512 y[4];
                    REC_UPPER(lmf);
                    REC_ACC(wr[j] + i);
                }
            else
                for (; i < cf; i += PK, g++) {
                    __m512 y[4];
                    REC_KEPT;
                    REC_ACC(wr[j] + i);
                }
            if (i < ce) {
                __m512 y[4];
                float wt[4][4] = {{0}};
                for (int j = 0; j < NR; j++)
                    for (size_t k = 0; k < ce - i; k++) wt[j][k] = wr[j][i + k];
                if (b2 == 0) {
                    REC_UPPER(((__mmask64)1 << ((ce - i) * cb)) - 1);
                } else {
                    REC_KEPT;
                }
                REC_ACC(wt[j]);
            }
#undef REC_UPPER
#undef REC_KEPT
#undef REC_ACC
            for (int j = 0; j < NR; j++)
                for (int z = 0; z < 4; z++) _mm512_store_ps(part[b2][j][z], a[j][z]);
        }
    }
    for (int j = 0; j < NR; j++) {
        float *r = acc + (j0 + (size_t)j) * d;
        for (int b2 = 0; b2 < 2; b2++)
            for (int z = 0; z < 4; z++)
                for (int lane = 0; lane < 16; lane++) {
                    const int c = F->mpos[16 * (4 * b2 + z) + lane];
                    if (c >= 0) r[c] += part[b2][j][z][lane];
                }
    }
}

#define DEF_REC_ACCUM(B, NR, PK)                                                                                     \
    KVQ_TARGET_POLAR static void accum_rec_##B##_##NR##_##PK(const kvq_plan *p, const float *w, size_t j0,          \
                                                             const uint8_t *codes, size_t n, float *acc) {           \
        accum_rec_body(p, w, j0, codes, n, acc, B, NR, PK);                                                          \
    }
#define DEF_REC_ACCUM_B(B)                                                                                           \
    DEF_REC_ACCUM(B, 1, 1) DEF_REC_ACCUM(B, 2, 1) DEF_REC_ACCUM(B, 3, 1) DEF_REC_ACCUM(B, 4, 1)                     \
    DEF_REC_ACCUM(B, 1, 2) DEF_REC_ACCUM(B, 2, 2) DEF_REC_ACCUM(B, 3, 2) DEF_REC_ACCUM(B, 4, 2)                     \
    DEF_REC_ACCUM(B, 1, 4) DEF_REC_ACCUM(B, 2, 4) DEF_REC_ACCUM(B, 3, 4) DEF_REC_ACCUM(B, 4, 4)
DEF_REC_ACCUM_B(3) DEF_REC_ACCUM_B(4) DEF_REC_ACCUM_B(5) DEF_REC_ACCUM_B(6)
#define REC_ACCUM_ROW(B) {{accum_rec_##B##_1_1, accum_rec_##B##_2_1, accum_rec_##B##_3_1, accum_rec_##B##_4_1},        \
                          {accum_rec_##B##_1_2, accum_rec_##B##_2_2, accum_rec_##B##_3_2, accum_rec_##B##_4_2},        \
                          {accum_rec_##B##_1_4, accum_rec_##B##_2_4, accum_rec_##B##_3_4, accum_rec_##B##_4_4}}


#define POLAR_FAST_B(X) X(3) X(4) X(5) X(6)
#define DEF_POLAR_FAST(B)                                                                                          \
    KVQ_TARGET_POLAR static void score_fast_##B(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, \
                                                size_t n, float *scores) {                                         \
        score_fast_body(p, qp, nq, codes, 0, n, scores, B, 0);                                                         \
    }
POLAR_FAST_B(DEF_POLAR_FAST)
/* accum_fast_body per (B, direct, rows): B = 3..6 with windows, B = 4 direct */
#define DEF_FAST_ACCUM(NAME, B, D, NR)                                                                               \
    KVQ_TARGET_POLAR static void NAME(const kvq_plan *p, const float *w, size_t j0, const uint8_t *codes, size_t n,  \
                                      float *acc) {                                                                  \
        accum_fast_body(p, w, j0, codes, n, acc, B, D, NR);                                                          \
    }
#define DEF_FAST_ACCUM_B(B, D, T)                                                                                    \
    DEF_FAST_ACCUM(accum_fast_##T##_1, B, D, 1) DEF_FAST_ACCUM(accum_fast_##T##_2, B, D, 2)                          \
    DEF_FAST_ACCUM(accum_fast_##T##_3, B, D, 3) DEF_FAST_ACCUM(accum_fast_##T##_4, B, D, 4)
DEF_FAST_ACCUM_B(3, 0, 3) DEF_FAST_ACCUM_B(4, 0, 4) DEF_FAST_ACCUM_B(5, 0, 5) DEF_FAST_ACCUM_B(6, 0, 6)
DEF_FAST_ACCUM_B(4, 1, 4d)
#define FAST_ACCUM_ROW(T) {accum_fast_##T##_1, accum_fast_##T##_2, accum_fast_##T##_3, accum_fast_##T##_4}

typedef void (*rows_accum_fn)(const kvq_plan *, const float *, size_t, const uint8_t *, size_t, float *);
/* rows in ceil(nq / 4) groups of nearly equal size (nq = 6: 3 + 3), fn[nr - 1] per group */
static void accum_rows(const kvq_plan *p, const rows_accum_fn fn[4], const float *w, size_t nq, const uint8_t *codes,
                       size_t n, float *acc) {
    const size_t ng = (nq + 3) / 4;
    for (size_t g = 0, j0 = 0; g < ng; g++) {
        const size_t nr = (nq - j0) / (ng - g) + ((nq - j0) % (ng - g) != 0);
        fn[nr - 1](p, w, j0, codes, n, acc);
        j0 += nr;
    }
}

static void accum_fast(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    static const rows_accum_fn fn[5][4] = {FAST_ACCUM_ROW(3), FAST_ACCUM_ROW(4), FAST_ACCUM_ROW(5), FAST_ACCUM_ROW(6),
                                           FAST_ACCUM_ROW(4d)};
    const polar_priv *P = p->priv;
    accum_rows(p, fn[P->fast->direct ? 4 : P->b[1] - 3], w, nq, codes, n, acc);
}

static void accum_rec(const kvq_plan *p, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc) {
    static const rows_accum_fn fn[4][3][4] = {REC_ACCUM_ROW(3), REC_ACCUM_ROW(4), REC_ACCUM_ROW(5), REC_ACCUM_ROW(6)};
    const polar_priv *P = p->priv;
    if (p->code_bytes != P->fast->cb) { /* records inside longer rows (+outliers): the per-record kernel */
        accum_fast(p, w, nq, codes, n, acc);
        return;
    }
    const int pk = P->fast->pk, pki = pk == 1 ? 0 : pk == 2 ? 1 : 2;
    accum_rows(p, fn[P->b[1] - 3][pki], w, nq, codes, n, acc);
}

/*
 * 8-bit scores (B <= 4, every 16 | d), lanes = 16 records. The chunks of a
 * pass (lane_build) are transposed (dwords16_transpose, records in the order
 * that makes lane i record i). Per block, each lane's 4 bytes are 4 pairs:
 * the even ones (2u, u = 2h + e) and then the odd ones (2u + 1). Level-1
 * indices: B = 4 nibbles by masking (even) or a shift and masking (odd), B = 3
 * by vpmultishiftqb, with u in bits 4-5 for a vpermb into the row's 64-byte
 * T8 table of those 4 pairs. g8: k4, k3, k2 gathered into one 6-bit index by
 * three vpmultishiftqb and two bit selects, XOR (mirrored sines of levels 3,
 * 4), one vpermb per parity. Per row: two vpermb, two vpdpbusd (u8 g8 x s8
 * T8, the block's exact integer sum), one convert, one FMA with the radius.
 * The last group of records goes through a zero-padded copy (the chunks read
 * up to 15 bytes past a record). Same integers as polar_score_i8.
 */
KVQ_TARGET_POLAR PAI __m512i srlc(__m512i x, int n) { return _mm512_srlv_epi32(x, _mm512_set1_epi32(n)); }
#define KVQ_TARGET_POLARI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vnni,avx2,fma,f16c,bmi2")))

KVQ_TARGET_POLARI PAI void score_lane_body(const kvq_plan *p, const float *qp, size_t j0, const uint8_t *codes, size_t n,
                                           float *scores, const int B, const int NR) {
    const polar_priv *P = p->priv;
    const polar_fast *F = P->fast;
    const int sc32 = p->o.scale32, w = B - 2, d = p->d;
    const size_t cb = p->code_bytes, qs = p->qfloats;
    uint8_t pad[16 * POLAR_LCB + 16];
    const __m512i G0 = _mm512_loadu_si512(P->g8[0]), G1 = _mm512_loadu_si512(P->g8[1]);
    const __m512i mlow = _mm512_set1_epi8((char)((1 << w) - 1)), mmid = _mm512_set1_epi8((char)(((1 << w) - 1) << w));
    const int mw = (1 << w) - 1;
    const __m512i kx = _mm512_set1_epi32((int)((uint32_t)(mw << w) << 8 | (uint32_t)mw << 16 | (uint32_t)(mw | mw << w) << 24));
    const __m512i m0f = _mm512_set1_epi8(0x0f), slot = _mm512_set1_epi32(0x30201000);
    const uint8_t *t8[4];
    __m512 cq[4];
    for (int j = 0; j < NR; j++) {
        const float *q = qp + (j0 + (size_t)j) * qs;
        t8[j] = (const uint8_t *)(q + d + 16);
        cq[j] = _mm512_set1_ps(q[d]);
    }
    for (int s = 0; s < F->nsb; s++) {
        const polar_lpass *ps = &F->lp[s];
        for (size_t i = 0; i < n; i += 16) {
            const uint8_t *base = codes + i * cb;
            __mmask16 keep = 0xFFFF;
            if ((i + 16) * cb + 16 > n * cb) { /* the chunks would read past the last record */
                const size_t m = n - i < 16 ? n - i : 16;
                memcpy(pad, base, m * cb);
                memset(pad + m * cb, 0, (16 - m) * cb + 16);
                base = pad;
                keep = (__mmask16)((1u << m) - 1);
            }
            const uint8_t *r[16];
            for (int k = 0; k < 16; k++) r[k] = base + (size_t)(4 * (k & 3) + (k >> 2)) * cb; /* lane 4a+b: record 4a+b */
            __m512i X[4 * POLAR_LCH];
            for (int c = 0; c < ps->nch; c++) dwords16_transpose(r, ps->choff[c], 16, X + 4 * c);
            __m512 acc[4];
            for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
            for (int b = 0; b < ps->nb; b++) {
                const polar_lblk *D = &ps->blk[b];
                const uint8_t(*ms)[64] = ps->ms[b];
                const __m512 rad = sc32 ? _mm512_castsi512_ps(X[D->xr])
                                        : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(srlc(X[D->xr], D->sr)));
                __m512i ia, ib;
                if (B == 4) {
                    ia = _mm512_ternarylogic_epi32(X[D->x1], m0f, slot, 0xEA);
                    ib = _mm512_ternarylogic_epi32(_mm512_srli_epi32(X[D->x1], 4), m0f, slot, 0xEA);
                } else {
                    ia = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[3]), X[D->x1]), m0f,
                                                   slot, 0xEA);
                    ib = _mm512_ternarylogic_epi32(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[4]), X[D->x1]), m0f,
                                                   slot, 0xEA);
                }
                const __m512i a4 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[0]), X[D->x4]);
                const __m512i a3 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[1]), X[D->x3]);
                const __m512i a2 = _mm512_multishift_epi64_epi8(_mm512_loadu_si512(ms[2]), X[D->x2]);
                const __m512i gi = _mm512_xor_si512(
                    _mm512_ternarylogic_epi32(mlow, a4, _mm512_ternarylogic_epi32(mmid, a3, a2, 0xCA), 0xCA), kx);
                const __m512i ga = _mm512_permutexvar_epi8(gi, G0), gb = _mm512_permutexvar_epi8(gi, G1);
                const size_t to = 128 * (size_t)(8 * s + b);
#pragma GCC unroll 4
                for (int j = 0; j < NR; j++) {
                    const __m512i ta = _mm512_permutexvar_epi8(ia, _mm512_loadu_si512(t8[j] + to));
                    const __m512i tb = _mm512_permutexvar_epi8(ib, _mm512_loadu_si512(t8[j] + to + 64));
                    const __m512i I = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ga, ta), gb, tb);
                    acc[j] = _mm512_fmadd_ps(rad, _mm512_cvtepi32_ps(I), acc[j]);
                }
            }
            for (int j = 0; j < NR; j++) {
                float *sr = scores + (j0 + (size_t)j) * n + i;
                const __m512 v = _mm512_mul_ps(acc[j], cq[j]);
                _mm512_mask_storeu_ps(sr, keep, s ? _mm512_add_ps(_mm512_maskz_loadu_ps(keep, sr), v) : v);
            }
        }
    }
}

#define DEF_LANE_SCORE(B, NR)                                                                                        \
    KVQ_TARGET_POLARI static void score_lane_##B##_##NR(const kvq_plan *p, const float *qp, size_t j0,              \
                                                        const uint8_t *codes, size_t n, float *scores) {             \
        score_lane_body(p, qp, j0, codes, n, scores, B, NR);                                                        \
    }
DEF_LANE_SCORE(3, 1) DEF_LANE_SCORE(3, 2) DEF_LANE_SCORE(3, 3) DEF_LANE_SCORE(3, 4)
DEF_LANE_SCORE(4, 1) DEF_LANE_SCORE(4, 2) DEF_LANE_SCORE(4, 3) DEF_LANE_SCORE(4, 4)

typedef void (*lane_score_fn)(const kvq_plan *, const float *, size_t, const uint8_t *, size_t, float *);
static void score_lane(const kvq_plan *p, const float *qp, size_t nq, const uint8_t *codes, size_t n, float *scores) {
    static const lane_score_fn fn[2][4] = {{score_lane_3_1, score_lane_3_2, score_lane_3_3, score_lane_3_4},
                                           {score_lane_4_1, score_lane_4_2, score_lane_4_3, score_lane_4_4}};
    const polar_priv *P = p->priv;
    if (p->code_bytes > POLAR_LCB) { /* rows longer than the padded copy (+outliers): the reference */
        polar_score_i8(p, qp, nq, codes, n, scores);
        return;
    }
    /* rows in ceil(nq / 4) groups of nearly equal size (nq = 6: 3 + 3) */
    const size_t ng = (nq + 3) / 4;
    for (size_t g = 0, j0 = 0; g < ng; g++) {
        const size_t nr = (nq - j0) / (ng - g) + ((nq - j0) % (ng - g) != 0);
        fn[P->b[1] - 3][nr - 1](p, qp, j0, codes, n, scores);
        j0 += nr;
    }
}

void polar_select_avx512(kvq_plan *p) {
    polar_priv *P = p->priv;
    if ((P->fast = fast_build(p, P)) == NULL) return; /* no tables for this plan (or no memory): the AVX2 kernels */
    if (!P->i8) switch (p->bits) {
#define CASE_POLAR_FAST(B) case B: p->score = score_fast_##B; break;
            POLAR_FAST_B(CASE_POLAR_FAST)
#undef CASE_POLAR_FAST
        }
    p->accum = accum_fast;
    if (P->fast->lane && P->i8) p->score = score_lane;
    if (P->fast->pk && !P->fast->direct) p->accum = accum_rec; /* direct (128 | d): broadcast loads, faster there */
}
#endif
