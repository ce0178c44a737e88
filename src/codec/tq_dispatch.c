/*
 * Kernel choice of the codebook-index kernels (tq_kernels.h): per call, the
 * widest kernel the ISA and the layout allow, else the scalar reference
 * (tq_kernels.c). The only file of the family that names both; the x86
 * kernels (tq_kernels_x86.c, tq_vnni_x86.c) call the references for the
 * layouts and tails they do not serve, never the other way round.
 */
#include "tq_kernels.h"

void tq_quantize(const kvq_codebook *cb, const float *y, int d, int scale_norm, uint8_t *idx, float *scale, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512) { tq_quantize_avx512(cb, y, d, scale_norm, idx, scale); return; }
    if (isa >= KVQ_ISA_AVX2) { tq_quantize_avx2(cb, y, d, scale_norm, idx, scale); return; }
#endif
    (void)isa;
    tq_quantize_ref(cb, y, d, scale_norm, idx, scale);
}

void tq_decode(const tq_layout *L, const uint8_t *rec, float *y, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512 && tq_decode_avx512(L, rec, y)) return;
#endif
    (void)isa;
    tq_decode_ref(L, rec, y);
}

void tq_prepare_query(const kvq_rotation *rot, int d, const float *q, float *qp) {
    rot_apply(rot, q, qp);
#if KVQ_X86
    if (rot->isa >= KVQ_ISA_AVX2 && d % 8 == 0) { tq_query8_avx2(d, qp); return; }
#endif
    tq_query8_ref(d, qp);
}

void tq_score(const tq_layout *L, const float *qp, size_t qstride, size_t nq, const uint8_t *codes, size_t n, float *scores, kvq_isa isa) {
    tq_layout l = *L;
    const int i8 = L->cb->snapped;
    l.scent = i8 ? L->cb->ci : L->cb->c;
#if KVQ_X86
    if (i8 && L->vnni && (tq_score_tok(&l, qp, qstride, nq, codes, n, scores) || tq_score_vnni(&l, qp, qstride, nq, codes, n, scores)))
        return;
#endif
    const float *q = i8 ? qp + L->d : qp; /* integer-valued q8 rows, or q~ */
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512) tq_score_avx512(&l, q, qstride, nq, codes, n, scores);
    else if (isa >= KVQ_ISA_AVX2) tq_score_avx2(&l, q, qstride, nq, codes, n, scores);
    else
#endif
        tq_score_ref(&l, q, qstride, nq, codes, n, scores);
    (void)isa;
    if (i8)
        for (size_t j = 0; j < nq; j++) {
            const float qs = qp[j * qstride + 2 * (size_t)L->d] * L->cb->cscale;
            for (size_t i = 0; i < n; i++) scores[j * n + i] *= qs;
        }
}

void tq_accum(const tq_layout *L, const float *w, size_t nq, const uint8_t *codes, size_t n, float *acc, kvq_isa isa) {
#if KVQ_X86
    if (isa >= KVQ_ISA_AVX512 && L->vnni && tq_accum_vnni(L, w, nq, codes, n, acc)) return;
    if (isa >= KVQ_ISA_AVX512) { tq_accum_avx512(L, w, nq, codes, n, acc); return; }
    if (isa >= KVQ_ISA_AVX2) { tq_accum_avx2(L, w, nq, codes, n, acc); return; }
#endif
    (void)isa;
    tq_accum_ref(L, w, nq, codes, n, acc);
}
