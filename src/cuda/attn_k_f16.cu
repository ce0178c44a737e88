/* Attention kernels with K in format F16 (one file per K format: parallel builds). */
#include "attn_launch.cuh"

KVQ_ATTN_V_FORMATS(KVQ_ATTN_DEF_ONE, F16, KF16)

/* The f16 window: rows in a ring per (sequence, K/V, head), unrotated queries. */
int kvq_attn_launch_window(const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    using namespace kvqa;
    typedef Traits<KF16, VF16> C;
    const int smem = p.lut_bytes + C::SMEM;
    auto k = attn_kernel<KF16, VF16, C::NW, C::STAGES, true>;
    if (!do_launch) return configure(k, C::NW * 32, smem, nullptr);
    return launch_kernel(k, dim3(1, p.H * p.QG, p.n_seq), dim3(C::NW * 32), smem, st, false, p);
}
