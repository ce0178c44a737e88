/* Attention kernels at head dim 256 (issue 17, Gemma 3): K in f16, q8, tq-mse:2, tq-mse:4, tq-mse:3 (V in
 * every format of the head dim; tcq keys: attn_k_d256_tcq.cu), and the f16 window. */
#include "attn_launch.cuh"

KVQ_ATTN_KD_FORMATS_A(KVQ_ATTN_DEFD_K, 256)

int kvq_attn_launch_window_d256(const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    return launch_window_d<256>(p, do_launch, st);
}
