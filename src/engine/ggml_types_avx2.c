/* AVX2 kernels (vpmaddubsw + vpmaddwd integer dots); see kvq_ggml_dot_x86.inc. */
#include "ggml_types.h"

#include "cpu.h"

#if KVQ_X86
#define TGT KVQ_TARGET_AVX2
#define KVQ_VNNI 0
#include "ggml_dot_x86.inc"

static const kvq_ggml_kernels KERNELS = {
    .name = "avx2",
    .dot = {
        [GGML_TYPE_F32] = dot_f32, [GGML_TYPE_F16] = dot_f16, [GGML_TYPE_BF16] = dot_bf16,
        [GGML_TYPE_Q4_0] = dot_q4_0, [GGML_TYPE_Q4_1] = dot_q4_1, [GGML_TYPE_Q5_0] = dot_q5_0,
        [GGML_TYPE_Q5_1] = dot_q5_1, [GGML_TYPE_Q8_0] = dot_q8_0, [GGML_TYPE_Q4_K] = dot_q4_K,
        [GGML_TYPE_Q5_K] = dot_q5_K, [GGML_TYPE_Q6_K] = dot_q6_K, [GGML_TYPE_Q3_K] = dot_q3_K,
        [GGML_TYPE_IQ4_NL] = dot_iq4_nl,
    },
    .dotf = DOTF_TABLE,
    .quantize_q8a = quantize_q8a,
};

const kvq_ggml_kernels *kvq_ggml_kernels_avx2_table(void) { return &KERNELS; }
#else
const kvq_ggml_kernels *kvq_ggml_kernels_avx2_table(void) { return kvq_ggml_kernels_scalar(); }
#endif
