/*
 * Parameters of the attention main pass (docs/CUDA.md "Attention, step by
 * step"): the head dim and query group of the kernels, the lookup tables a
 * layer uses, and AttnParams, filled by kvq_cuda_attend (attn.cu) and passed
 * by value to every kernel.
 */
#ifndef KVQ_ATTN_PARAMS_CUH
#define KVQ_ATTN_PARAMS_CUH

#include "cuda_internal.cuh"

namespace kvqa {

constexpr int D = 128;                /* head dim of the tensor-core kernels */
constexpr int QPB = 8;                /* query heads per block */
constexpr int SF = 2 * QPB + QPB * D; /* floats of a partial state: m[8], l[8], acc[8][D] */
/* floats of a partial state at head dim d (the generic kernel, the merge) */
__host__ __device__ constexpr int state_floats(int d) { return 2 * QPB + QPB * d; }

struct LutDesc {
    int off; /* byte offset in the LUT region */
    int w;   /* 4, 3, 2, 1; 0 = signs {-1, +1}; LUT_W2X */
    const float *c;
};

/* A record format as the generic kernel reads it (attn_kernel_gen.cuh): the layout's kind, bits,
 * scale bytes, QJL rows and fields; for K the prepared query's part it is scored on (qoff, len;
 * V: len = d); the codebooks (device). */
struct GenFmt {
    int kind, bits, sb, m;
    int off[4], size[4];
    int qoff, len;
    int n1, n2;
    const float *c1, *c2;
};

struct AttnParams {
    int n_seq, H, HQ, G, QG;
    int P, max_pages, W;
    unsigned long long page_bytes, kv_off_v, krun, vrun;
    const uint8_t *pages;
    const int32_t *block_table, *main_len, *win_len;
    const int32_t *seq_map; /* NULL, or the block-table row / window ring of each sequence */
    const uint8_t *window;
    const float *qprep; /* [n_seq][HQ][qf]: rotated query, then S q~ */
    int qf;
    const float *qraw;  /* [n_seq][HQ][D]: scaled query (window) */
    float *part;        /* partial states, (nchunk + 1) per (seq, head, group) */
    int nchunk, chunk_tiles;
    int nlut;
    LutDesc lut[4];
    int klut[2], vlut[2]; /* LUT offsets of the K / V stages */
    float kconst;         /* QJL sqrt(pi/2)/m */
    int lut_bytes;        /* stage buffers start here */
    int wide;             /* 4-bit K and V sharing one table: the wide-table kernel (attn_kernel_wide<4, 4>) */
    int wide2;            /* 2-bit K and V sharing one table at d = 128: attn_kernel_wide<2, 2> on the byte table */
    int wide42;           /* tq-mse:4 K, tq-mse:2 V (or 2 and 4) at d = 128: attn_kernel_wide<4, 2> (<2, 4>) */
    int wide33;           /* tq-mse:3 K and V at d = 128: attn_kernel_wide<3, 3> */
    int pdl;              /* the device takes programmatic dependent launches (sm_90+) */
    int d, sf;            /* head dim, floats of a partial state (state_floats(d)) */
    GenFmt gk, gv;        /* the generic kernel's K and V formats */
    int gen_win;          /* the generic kernel's window pass (gk, gv: f16 rows of the sinks and rings) */
    const int32_t *sink_len; /* NULL, or the f16 sink rows of each sequence (read by the window pass) */
    const uint8_t *sink;     /* the sinks: S rows per (sequence, K/V, head) */
    int S;
};

} /* namespace kvqa */

#endif
