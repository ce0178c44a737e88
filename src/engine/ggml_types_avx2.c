/* AVX2 kernels (vpmaddubsw + vpmaddwd integer dots); see ggml_dot_x86.inc. */
#include "ggml_types.h"

#include "cpu.h"

#if KVQ_X86
#define TGT KVQ_TARGET_AVX2
#define KVQ_VNNI 0
#define KERNELS_NAME "avx2"
#include "ggml_dot_x86.inc"

const ggml_kernels *ggml_kernels_avx2_table(void) { return &KERNELS; }
#else
const ggml_kernels *ggml_kernels_avx2_table(void) { return ggml_kernels_scalar(); }
#endif
