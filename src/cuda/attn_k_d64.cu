/* Attention kernels at head dim 64 (issue 17): K and V in f16, q8, tq-mse:2, tq-mse:4, tq-mse:3, and the f16 window. */
#include "attn_launch.cuh"

KVQ_ATTN_KD_FORMATS(KVQ_ATTN_DEFD_K, 64)

int kvq_attn_launch_window_d64(const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    return launch_window_d<64>(p, do_launch, st);
}
