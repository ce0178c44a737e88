/* Attention kernels with K in format TCQ2 (one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, TCQ2, KTCQ2)
