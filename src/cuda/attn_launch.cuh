/*
 * Launch template of the main pass: the kernel of a (K, V) pair (the
 * wide-table kernels for tq-mse:4/4 and 2/2 with one table, 4/2, 2/4 and 3/3, else the classic one),
 * its grid (x = chunk, y = KV head x query group, z = sequence), block and
 * shared memory, programmatic dependent launches, and the split-K rule that
 * sizes the chunks. The per-format files attn_k_*.cu instantiate it through
 * the format lists at the end; attn.cu builds its dispatch table from them.
 */
#ifndef KVQ_ATTN_LAUNCH_CUH
#define KVQ_ATTN_LAUNCH_CUH

#include <type_traits>

#include "attn_kernel.cuh"
#include "attn_kernel_wide.cuh"
#include "attn_tcq.cuh"
#include "attn_tq3.cuh"
#include "attn_tq5.cuh"
#include "attn_split.h"

namespace kvqa {

/* Launches k<<<grid, block, smem, st>>>(args...); pdl: as a programmatic dependent of the
 * stream's previous kernel (it may start once that one allows it, pdl_launch_dependents, and
 * waits for its memory in pdl_wait). */
template <class... A>
int launch_kernel(void (*k)(A...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, bool pdl, const A &...args) {
    if (pdl) {
        cudaLaunchConfig_t lc = {};
        lc.gridDim = grid;
        lc.blockDim = block;
        lc.dynamicSmemBytes = smem;
        lc.stream = st;
        cudaLaunchAttribute at = {};
        at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at.val.programmaticStreamSerializationAllowed = 1;
        lc.attrs = &at;
        lc.numAttrs = 1;
        KVQ_CU_TRY(cudaLaunchKernelEx(&lc, k, args...));
    } else {
        k<<<grid, block, smem, st>>>(args...);
    }
    return kvq_cuda_status(cudaGetLastError());
}

/* Layer creation: raises k's dynamic shared-memory limit to smem (set once, here) and reports
 * its resident blocks per SM of `threads` threads (occ, if not NULL). */
template <class K> int configure(K k, int threads, int smem, int *occ) {
    KVQ_CU_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (occ) KVQ_CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(occ, k, threads, smem));
    return KVQ_OK;
}

typedef int (*launch_fn)(const AttnParams &p, int do_launch, cudaStream_t st, int *nw_out, int *smem_out,
                         int *occ_out);

/* The main pass of a (K, V) pair; with do_launch == 0 it only configures the kernel and reports
 * the warps per block, the dynamic shared memory (for p.lut_bytes of LUTs) and the resident
 * blocks per SM. The wide-table kernel is a programmatic dependent of the prep kernel (its
 * table build overlaps it); the classic kernel reads the prepared queries at once. */
template <class KF, class VF>
int launch(const AttnParams &p, int do_launch, cudaStream_t st, int *nw_out, int *smem_out, int *occ_out) {
    typedef Traits<KF, VF> C;
    constexpr bool K4 = std::is_same<KF, KTQ<4>>::value, K2 = std::is_same<KF, KTQ<2>>::value;
    constexpr bool V4 = std::is_same<VF, VTQ<4>>::value, V2 = std::is_same<VF, VTQ<2>>::value;
    constexpr bool K3 = std::is_same<KF, KTQ3<D>>::value, V3 = std::is_same<VF, VTQ3<D>>::value;
    const bool wide = (K4 && V4 && p.wide) || (K2 && V2 && p.wide2) || (((K4 && V2) || (K2 && V4)) && p.wide42) ||
                      (K3 && V3 && p.wide33); /* attn_kernel_wide */
    void (*k)(AttnParams) = attn_kernel<KF, VF, C::NW, C::STAGES, false>;
    int nw = C::NW, smem = p.lut_bytes + C::SMEM;
    if constexpr (K4 && V4)
        if (wide) k = attn_kernel_wide<4, 4>, nw = WTraits<4, 4>::NW, smem = WTraits<4, 4>::SMEM;
    if constexpr (K2 && V2)
        if (wide) k = attn_kernel_wide<2, 2>, nw = WTraits<2, 2>::NW, smem = WTraits<2, 2>::SMEM;
    if constexpr (K4 && V2)
        if (wide) k = attn_kernel_wide<4, 2>, nw = WTraits<4, 2>::NW, smem = WTraits<4, 2>::SMEM;
    if constexpr (K2 && V4)
        if (wide) k = attn_kernel_wide<2, 4>, nw = WTraits<2, 4>::NW, smem = WTraits<2, 4>::SMEM;
    if constexpr (K3 && V3)
        if (wide) k = attn_kernel_wide<3, 3>, nw = WTraits<3, 3>::NW, smem = WTraits<3, 3>::SMEM;
    if (nw_out) *nw_out = nw;
    if (smem_out) *smem_out = smem;
    if (!do_launch) return configure(k, nw * 32, smem, occ_out);
    return launch_kernel(k, dim3(p.nchunk, p.H * p.QG, p.n_seq), dim3(nw * 32), smem, st, wide && p.pdl, p);
}

/* Most tiles per warp of a chunk: a lane holds the page of each of its warp's tiles (the wide
 * kernels: two per lane). */
inline int max_tiles_per_warp(bool wide) { return wide ? WTraits<4, 4>::TPW : 32; }

/* Split-K of the tensor-core kernels: attn_split.h (the cost model, measured). */
inline int chunk_tiles(int tiles, long long items, int sms, int nw, bool wide) {
    return split_chunk_tiles(tiles, items, sms, nw, max_tiles_per_warp(wide));
}

/* The former rule, kept for the generic kernel (f32, bound by its arithmetic, not measured with the
 * new rule): about 2 waves of resident blocks (`slots` = SMs x blocks per SM), at least 4 tiles per
 * warp, at most 32. */
inline int chunk_tiles_waves(int tiles, long long items, int slots, int nw) {
    constexpr int WAVES = 2;
    const long long target = (long long)WAVES * slots;
    long long want = (target + items - 1) / items;
    if (want < 1) want = 1;
    int ct = (int)((tiles + want - 1) / want);
    if (ct < 4 * nw) ct = 4 * nw;
    if (ct > 32 * nw) ct = 32 * nw;
    return ((ct + nw - 1) / nw) * nw;
}

} /* namespace kvqa */

/* Format lists (attn.cu builds the dispatch table from them; the V formats are the first 12 K
 * formats, in the same order; the K-only ones follow). tcq:2/3/4 (attn_tcq.cuh): KTCQ2..4 (one template argument each,
 * for the macros). */
namespace kvqa {
using KTCQ2 = KTCQ<2>;
using KTCQ3 = KTCQ<3>;
using KTCQ4 = KTCQ<4>;
using VTCQ2 = VTCQ<2>;
using VTCQ3 = VTCQ<3>;
using VTCQ4 = VTCQ<4>;
} /* namespace kvqa */
#define KVQ_ATTN_K_FORMATS(X) \
    X(F16, KF16) X(Q8, KQ8) X(TQ1, KTQ<1>) X(TQ2, KTQ<2>) X(TQ4, KTQ<4>) X(RVQ1, KRVQ<1>) X(RVQ2, KRVQ<2>) \
    X(RVQ4, KRVQ<4>) X(TQ3, KTQ3<128>) X(TCQ2, KTCQ2) X(TCQ3, KTCQ3) X(TCQ4, KTCQ4) X(TP1, KTP<1>) \
    X(TP2, KTP<2>) X(TP4, KTP<4>) X(QJL, KQJL) X(TQ5, KTQ5<128>)
#define KVQ_ATTN_V_FORMATS(X, KN, KT) \
    X(KN, KT, F16, VF16) X(KN, KT, Q8, VQ8) X(KN, KT, TQ1, VTQ<1>) X(KN, KT, TQ2, VTQ<2>) X(KN, KT, TQ4, VTQ<4>) \
    X(KN, KT, RVQ1, VRVQ<1>) X(KN, KT, RVQ2, VRVQ<2>) X(KN, KT, RVQ4, VRVQ<4>) X(KN, KT, TQ3, VTQ3<128>) \
    X(KN, KT, TCQ2, VTCQ2) X(KN, KT, TCQ3, VTCQ3) X(KN, KT, TCQ4, VTCQ4)

#define KVQ_ATTN_DECL_ONE(KN, KT, VN, VT) \
    int kvq_attn_launch_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, int *occ);
#define KVQ_ATTN_DEF_ONE(KN, KT, VN, VT)                                                               \
    int kvq_attn_launch_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, \
                                    int *occ) {                                                               \
        using namespace kvqa;                                                                                 \
        return launch<KT, VT>(p, go, st, nw, smem, occ);                                                      \
    }
/* Head dims 64 and 256 (issue 17): the classic kernel for K and V in f16, q8, tq-mse:2, tq-mse:4,
 * tq-mse:3, tcq:2/3/4 (64 pairs a head dim; K rows of the first five in attn_k_d64.cu / attn_k_d256.cu,
 * of tcq in attn_k_d64_tcq.cu / attn_k_d256_tcq.cu: parallel builds) and the f16 window. */
namespace kvqa {
template <int DD> using KTQ2 = KTQ<2, DD>;
template <int DD> using KTQ4 = KTQ<4, DD>;
template <int DD> using VTQ2 = VTQ<2, DD>;
template <int DD> using VTQ4 = VTQ<4, DD>;
template <int DD> using KTCQ2D = KTCQ<2, DD>;
template <int DD> using KTCQ3D = KTCQ<3, DD>;
template <int DD> using KTCQ4D = KTCQ<4, DD>;
template <int DD> using VTCQ2D = VTCQ<2, DD>;
template <int DD> using VTCQ3D = VTCQ<3, DD>;
template <int DD> using VTCQ4D = VTCQ<4, DD>;
} /* namespace kvqa */
#define KVQ_ATTN_KD_FORMATS_A(X, DD) \
    X(DD, F16, KF16T<DD>) X(DD, Q8, KQ8T<DD>) X(DD, TQ2, KTQ2<DD>) X(DD, TQ4, KTQ4<DD>) X(DD, TQ3, KTQ3<DD>)
#define KVQ_ATTN_KD_FORMATS_B(X, DD) X(DD, TCQ2, KTCQ2D<DD>) X(DD, TCQ3, KTCQ3D<DD>) X(DD, TCQ4, KTCQ4D<DD>)
#define KVQ_ATTN_KD_FORMATS(X, DD) KVQ_ATTN_KD_FORMATS_A(X, DD) KVQ_ATTN_KD_FORMATS_B(X, DD)
#define KVQ_ATTN_VD_FORMATS(X, DD, KN, KT) \
    X(DD, KN, KT, F16, VF16T<DD>) X(DD, KN, KT, Q8, VQ8T<DD>) X(DD, KN, KT, TQ2, VTQ2<DD>) X(DD, KN, KT, TQ4, VTQ4<DD>) \
    X(DD, KN, KT, TQ3, VTQ3<DD>) X(DD, KN, KT, TCQ2, VTCQ2D<DD>) X(DD, KN, KT, TCQ3, VTCQ3D<DD>)            \
    X(DD, KN, KT, TCQ4, VTCQ4D<DD>)
#define KVQ_ATTN_DECLD_ONE(DD, KN, KT, VN, VT)                                                                   \
    int kvq_attn_launch_d##DD##_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, \
                                            int *occ);
#define KVQ_ATTN_DEFD_ONE(DD, KN, KT, VN, VT)                                                                    \
    int kvq_attn_launch_d##DD##_##KN##_##VN(const kvqa::AttnParams &p, int go, cudaStream_t st, int *nw, int *smem, \
                                            int *occ) {                                                           \
        using namespace kvqa;                                                                                     \
        return launch<KT, VT>(p, go, st, nw, smem, occ);                                                          \
    }
#define KVQ_ATTN_DECLD_K(DD, KN, KT) KVQ_ATTN_VD_FORMATS(KVQ_ATTN_DECLD_ONE, DD, KN, KT)
#define KVQ_ATTN_DEFD_K(DD, KN, KT) KVQ_ATTN_VD_FORMATS(KVQ_ATTN_DEFD_ONE, DD, KN, KT)
/* The f16 window pass at head dim DD (the classic kernel on the rings); do_launch = 0 only sets it up. */
template <int DD> int launch_window_d(const kvqa::AttnParams &p, int do_launch, cudaStream_t st) {
    using namespace kvqa;
    typedef Traits<KF16T<DD>, VF16T<DD>> C;
    const int smem = p.lut_bytes + C::SMEM;
    auto k = attn_kernel<KF16T<DD>, VF16T<DD>, C::NW, C::STAGES, true>;
    if (!do_launch) return configure(k, C::NW * 32, smem, nullptr);
    return launch_kernel(k, dim3(1, p.H * p.QG, p.n_seq), dim3(C::NW * 32), smem, st, false, p);
}
int kvq_attn_launch_window_d64(const kvqa::AttnParams &p, int do_launch, cudaStream_t st);
int kvq_attn_launch_window_d256(const kvqa::AttnParams &p, int do_launch, cudaStream_t st);

/* The generic kernel at head dim p.d (attn_gen.cu: 32, 64, 96, 128, 256; else
 * KVQ_ERR_UNSUPPORTED_DIM), smem bytes of dynamic shared memory (kvqa::gen_smem_floats); do_launch = 0
 * only sets it up and reports the resident blocks per SM (occ). p.gen_win: the window pass. */
int kvq_attn_launch_gen(const kvqa::AttnParams &p, int do_launch, cudaStream_t st, int smem, int *occ);
/* The f16 window pass (defined with the F16 instantiations); do_launch = 0 only sets it up. */
int kvq_attn_launch_window(const kvqa::AttnParams &p, int do_launch, cudaStream_t st);

#endif
