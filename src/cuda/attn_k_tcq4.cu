/* Attention kernels with K in format TCQ4 (one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, TCQ4, KTCQ4)
