/* SIMD score/accumulate kernels of the f32/f16/bf16 baselines. */
#ifndef KVQ_FLOAT_KERNELS_H
#define KVQ_FLOAT_KERNELS_H
#include "codec_internal.h"

enum { FK_F32 = 0, FK_F16 = 1, FK_BF16 = 2 };
/* Replaces p->score / p->accum by the fastest kernels for p->isa. */
void float_kernels_select(kvq_plan *p, int ftype);
#endif
