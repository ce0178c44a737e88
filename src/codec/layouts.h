/*
 * Record layouts of every method, declared once for C and CUDA
 * (docs/METHODS.md is the prose version): the methods' record sizes are
 * these (each method's init takes its code_bytes from kvq_layout_make), and
 * the CUDA backend reads the records of the kinds below KVQ_LAY_N_CUDA
 * through them. A record is a fixed sequence of fields; kvq_layout_make()
 * gives each field's offset and size in bytes, and the record size
 * (tests/test_layouts.c checks it against kvq_plan_code_bytes() for every
 * method and head dim).
 *
 *   f16        [d f16 values]                                  2d bytes
 *   q8         [nb f16 scales | d int8]   nb = ceil(d/32)      2nb + d
 *   tq-mse:b   [scale | d*b/8 strided indices]                 sb + db/8
 *   tq-prod:b  [scale | d*(b-1)/8 indices | |r| | m/8 signs]   2sb + d(b-1)/8 + m/8
 *   qjl        [|k| | m/8 signs]                               sb + m/8
 *   rvq:b      [s1 | s2 | d*b/8 stage 1 | d*b/8 stage 2]       2sb + 2db/8
 * host only (the CUDA backend serves none of these):
 *   f32        [d f32 values]                                  4d
 *   bf16       [d bf16 values]                                 2d
 *   q4         [nb x (f16 scale, f16 min) | d/2 nibble bytes]  4nb + d/2
 *   polar:B    [r radii | angle bitstream]   r = d >> L        r*sb + ceil((B*d/2 + (B-2)*(d/2 - r)) / 8)
 *              (L = kvq_polar_levels(d) levels; m_polar.c)
 *   tcq:b      [scale | d*b/8 bytes of a circular bitstream]   sb + db/8 (m_tcq.c)
 *   +outliers=K  [inner record | f16 scale | K int8]           inner + 2 + K (kvq_outliers_bytes)
 * sb = 2 (f16 scales) or 4 (+scale32). Signs are an LSB-first bitstream
 * (bit j of byte j/8 is sign(S_j r) >= 0). Strided indices: see
 * kvq_strided_width below and codec_internal.h.
 *
 * The CUDA page layout ("field-major", docs/CUDA.md) stores the records of
 * P tokens of one head with each field grouped: field f of slot s at
 * page + off[f] * P + s * size[f]; the bytes of a record are the same.
 */
#ifndef KVQ_LAYOUTS_H
#define KVQ_LAYOUTS_H

#if defined(__CUDACC__)
#define KVQ_LAYOUT_FN static inline __host__ __device__
#else
#define KVQ_LAYOUT_FN static inline
#endif

enum kvq_layout_kind {
    KVQ_LAY_NONE = -1, /* not served by the CUDA backend */
    KVQ_LAY_F16 = 0,
    KVQ_LAY_Q8 = 1,
    KVQ_LAY_TQ = 2,     /* tq-mse */
    KVQ_LAY_TQPROD = 3, /* tq-prod */
    KVQ_LAY_QJL = 4,
    KVQ_LAY_RVQ = 5,
    /* host only: plan export names them KVQ_LAY_NONE */
    KVQ_LAY_F32 = 6,
    KVQ_LAY_BF16 = 7,
    KVQ_LAY_Q4 = 8,
    KVQ_LAY_POLAR = 9,
    KVQ_LAY_TCQ = 10,
};
#define KVQ_LAY_N_CUDA 6 /* kinds 0 .. KVQ_LAY_N_CUDA - 1 are served by the CUDA backend */

#define KVQ_LAYOUT_MAX_FIELDS 4
#define KVQ_Q8_BLOCK 32
#define KVQ_Q4_BLOCK 32
#define KVQ_POLAR_MAX_LEVELS 4

/*
 * Range of a stored scale (tq scale, residual or key norm, polar radius):
 * f16 scales to 65504, f32 scales (+scale32) to 2^100; beyond is
 * KVQ_ERR_RANGE (CPU and CUDA encoders alike). The f32 bound is what keeps
 * every decode in the float range: a decoded coordinate is at most
 * sqrt(d) |s| in the rotated domain (a centroid of sqrt(d) y/|y| is below
 * sqrt(d)), the inverse Hadamard's unnormalised butterflies grow values up
 * to d times before they are scaled back, rvq adds two stages, +chscale
 * divides by up to d^(1/4) and +center adds a mean held to the same bound:
 * below 2^118 at d = 512, against FLT_MAX ~ 2^128. A row whose norm
 * exceeds FLT_MAX (say 64 values of 3e38) gets a scale of ~|x| / sqrt(d)
 * that no float decode could reproduce; it is refused, not stored.
 */
#define KVQ_SCALE16_MAX 65504.0f
#define KVQ_SCALE32_MAX 1.2676506e30f /* 2^100 exactly */

typedef struct kvq_layout {
    int kind;
    int d;      /* head dim */
    int bits;   /* index bits of a tq stage: tq-mse b, tq-prod b-1, rvq b (0 otherwise) */
    int m;      /* QJL rows (tq-prod, qjl), 0 otherwise */
    int sb;     /* bytes of one scale: 2 (f16) or 4 (f32) */
    int nfield;
    int off[KVQ_LAYOUT_MAX_FIELDS];  /* byte offset of each field in the record */
    int size[KVQ_LAYOUT_MAX_FIELDS]; /* bytes of each field */
    int bytes;                       /* record bytes */
} kvq_layout;

/* Field indices per kind. */
enum {
    KVQ_F16_VALS = 0,
    KVQ_Q8_SCALES = 0, KVQ_Q8_VALS = 1,
    KVQ_TQ_SCALE = 0, KVQ_TQ_IDX = 1,
    KVQ_TQPROD_SCALE = 0, KVQ_TQPROD_IDX = 1, KVQ_TQPROD_RNORM = 2, KVQ_TQPROD_SIGNS = 3,
    KVQ_QJL_NORM = 0, KVQ_QJL_SIGNS = 1,
    KVQ_RVQ_S1 = 0, KVQ_RVQ_S2 = 1, KVQ_RVQ_IDX1 = 2, KVQ_RVQ_IDX2 = 3,
    KVQ_F32_VALS = 0, KVQ_BF16_VALS = 0,
    KVQ_Q4_BLOCKS = 0, KVQ_Q4_VALS = 1,
    KVQ_POLAR_RADII = 0, KVQ_POLAR_ANGLES = 1,
    KVQ_TCQ_SCALE = 0, KVQ_TCQ_BITS = 1,
};

KVQ_LAYOUT_FN int kvq_q8_blocks(int d) { return (d + KVQ_Q8_BLOCK - 1) / KVQ_Q8_BLOCK; }
KVQ_LAYOUT_FN int kvq_q4_blocks(int d) { return (d + KVQ_Q4_BLOCK - 1) / KVQ_Q4_BLOCK; }

/* Levels of the polar transform at dim d: pairs need d divisible by 2^L, so
 * L = min(4, the number of factors 2 in d) (0 for odd d: unsupported). */
KVQ_LAYOUT_FN int kvq_polar_levels(int d) {
    int L = 0;
    while (L < KVQ_POLAR_MAX_LEVELS && d > 0 && (d >> L) % 2 == 0 && (d >> L) > 1) L++;
    return L;
}

/* +outliers=K: [inner record | f16 outlier scale | K int8]; the repacked
 * variant (m_outliers.c) moves the last 2 + K bytes into spare index bytes
 * of the host-dim layout, keeping the size. */
KVQ_LAYOUT_FN int kvq_outliers_bytes(int inner_bytes, int k) { return inner_bytes + 2 + k; }

/*
 * Strided layout: the b bits of an index are split into sub-fields of 4, 2
 * and 1 bits (low bits first); kvq_strided_width(b, f) is the width of
 * sub-field f (0 when there is none). A w-bit sub-field holds d*w/8 bytes
 * in which byte j holds, in bits k*w..k*w+w-1, coordinate j + k*(d*w/8).
 */
KVQ_LAYOUT_FN int kvq_strided_width(int b, int f) {
    /* b: 1 = 1, 2 = 2, 3 = 2+1, 4 = 4, 5 = 4+1, 6 = 4+2, 7 = 4+2+1, 8 = 4+4 */
    if (b < 1 || b > 8 || f < 0 || f > 2) return 0;
    if (b == 8) return f < 2 ? 4 : 0;
    int rest = b, w = 0;
    for (int i = 0; i <= f; i++) {
        w = rest >= 4 ? 4 : rest >= 2 ? 2 : rest;
        rest -= w;
        if (w == 0) return 0;
    }
    return w;
}

/* Builds the layout of a kind; bytes = 0 if the arguments are out of range. */
KVQ_LAYOUT_FN kvq_layout kvq_layout_make(int kind, int d, int bits, int m, int sb) {
    kvq_layout L;
    L.kind = kind;
    L.d = d;
    L.bits = bits;
    L.m = m;
    L.sb = sb;
    L.nfield = 0;
    L.bytes = 0;
    for (int i = 0; i < KVQ_LAYOUT_MAX_FIELDS; i++) L.off[i] = L.size[i] = 0;
    int sz[KVQ_LAYOUT_MAX_FIELDS] = {0, 0, 0, 0}, n = 0;
    switch (kind) {
    case KVQ_LAY_F16: sz[0] = 2 * d; n = 1; break;
    case KVQ_LAY_Q8: sz[0] = 2 * kvq_q8_blocks(d); sz[1] = d; n = 2; break;
    case KVQ_LAY_TQ: sz[0] = sb; sz[1] = d * bits / 8; n = 2; break;
    case KVQ_LAY_TQPROD: sz[0] = sb; sz[1] = d * bits / 8; sz[2] = sb; sz[3] = m / 8; n = 4; break;
    case KVQ_LAY_QJL: sz[0] = sb; sz[1] = m / 8; n = 2; break;
    case KVQ_LAY_RVQ: sz[0] = sb; sz[1] = sb; sz[2] = d * bits / 8; sz[3] = d * bits / 8; n = 4; break;
    case KVQ_LAY_F32: sz[0] = 4 * d; n = 1; break;
    case KVQ_LAY_BF16: sz[0] = 2 * d; n = 1; break;
    case KVQ_LAY_Q4: sz[0] = 4 * kvq_q4_blocks(d); sz[1] = d / 2; n = 2; break;
    case KVQ_LAY_TCQ: sz[0] = sb; sz[1] = d * bits / 8; n = 2; break;
    case KVQ_LAY_POLAR: {
        const int lv = kvq_polar_levels(d), r = lv ? d >> lv : 0;
        if (!lv || bits < 3) return L;
        sz[0] = r * sb;
        sz[1] = (bits * (d / 2) + (bits - 2) * (d / 2 - r) + 7) / 8;
        n = 2;
        break;
    }
    default: return L;
    }
    int off = 0;
    for (int i = 0; i < n; i++) {
        L.off[i] = off;
        L.size[i] = sz[i];
        off += sz[i];
    }
    L.nfield = n;
    L.bytes = off;
    return L;
}

/* Address of byte `i` of field f of slot s in a field-major page of P slots. */
KVQ_LAYOUT_FN unsigned long long kvq_layout_page_offset(const kvq_layout *L, int f, int P, int s, int i) {
    return (unsigned long long)L->off[f] * (unsigned long long)P + (unsigned long long)s * (unsigned)L->size[f] +
           (unsigned)i;
}

#endif
