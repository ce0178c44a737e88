/* Attention kernels with K in format F16 (one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, F16, KF16)

/* The f16 window: rows in a ring per (sequence, K/V, head), unrotated queries. */
int kvq_attn_launch_window(const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    return launch_window_d<128>(p, do_launch, st);
}
