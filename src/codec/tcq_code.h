/*
 * The constants of tcq's computed code and of its Viterbi search, in one place for the CPU codec
 * (tcq_kernels.h) and the CUDA backend (src/cuda/tcq_value.cuh), whose records must be the CPU's
 * bit for bit. The code (QTIP's "1MAD", Tseng et al. 2024, sec. 3.1; tcq_kernels.c):
 * h = TCQ_MUL s + TCQ_ADD mod 2^32, value = (byte sum of h - 510) TCQ_INV_SD, one rounding.
 */
#ifndef KVQ_TCQ_CODE_H
#define KVQ_TCQ_CODE_H

#define TCQ_MUL 34038481u
#define TCQ_ADD 76625530u
#define TCQ_INV_SD 0.006765875034f /* (float)(1 / sqrt(21845)) */

/* Path cost of a forbidden state: finite, so that sums stay finite. */
#define TCQ_BIG 1.0e30f

#endif
