/* AVX-512 VNNI kernels (vpdpbusd on 256-bit vectors, EVEX-encoded: on the
 * Zen 4 / Ice Lake class machines we target, 512-bit vectors give no more
 * integer-dot throughput and cost a second unpack per register); see
 * ggml_dot_x86.inc. */
#include "ggml_types.h"

#include "cpu.h"

#if KVQ_X86
#define TGT KVQ_TARGET_AVX512VNNI
#define KVQ_VNNI 1
#define KERNELS_NAME "avx512vnni"
#include "ggml_dot_x86.inc"

const ggml_kernels *ggml_kernels_avx512vnni_table(void) { return &KERNELS; }
#else
const ggml_kernels *ggml_kernels_avx512vnni_table(void) { return ggml_kernels_scalar(); }
#endif
