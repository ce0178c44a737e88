/* Attention kernels with K in format RVQ1 (one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, RVQ1, KRVQ<1>)
