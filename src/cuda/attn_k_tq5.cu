/* Attention kernels with K in format TQ5 (tq-mse:5 keys, attn_tq5.cuh; one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, TQ5, KTQ5<128>)
