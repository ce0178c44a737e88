/* Attention kernels at head dim 256 with K in tcq:2/3/4 (attn_tcq.cuh), V in every format of the head dim. */
#include "attn_launch.cuh"

KVQ_ATTN_KD_FORMATS_B(KVQ_ATTN_DEFD_K, 256)
