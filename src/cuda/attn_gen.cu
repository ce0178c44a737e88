/* The generic attention kernel (attn_kernel_gen.cuh) at the head dims it is built for, and its launch. */
#include "attn_launch.cuh"
#include "attn_kernel_gen.cuh"

namespace kvqa {

template <int DD> static int gen_launch(const AttnParams &p, int do_launch, cudaStream_t st, int smem, int *occ) {
    auto k = attn_kernel_gen<DD>;
    if (!do_launch) {
        /* the limit for the largest K rows served (QJL rows m <= 2d: klen <= 3d), once for all layers
         * (a smaller limit set by a later layer would make an earlier layer's launches fail) */
        KVQ_CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        gen_smem_floats(DD, 3 * DD) * (int)sizeof(float)));
        if (occ) KVQ_CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, k, GNT, smem));
        return KVQ_OK;
    }
    const dim3 grid(p.gen_win ? 1 : p.nchunk, p.H * p.QG, p.n_seq);
    return launch_kernel(k, grid, dim3(GNT), (size_t)smem, st, false, p);
}

} /* namespace kvqa */

int kvq_attn_launch_gen(const kvqa::AttnParams &p, int do_launch, cudaStream_t st, int smem, int *occ) {
    using namespace kvqa;
    switch (p.d) {
    case 32: return gen_launch<32>(p, do_launch, st, smem, occ);
    case 64: return gen_launch<64>(p, do_launch, st, smem, occ);
    case 96: return gen_launch<96>(p, do_launch, st, smem, occ);
    case 128: return gen_launch<128>(p, do_launch, st, smem, occ);
    case 256: return gen_launch<256>(p, do_launch, st, smem, occ);
    }
    return KVQ_ERR_UNSUPPORTED_DIM;
}
