/* The fused AVX-512 tq encoder picks, for every coordinate, the nearest
 * centroid of the rotated, normalised vector (up to ties within 1e-4 of a
 * boundary, where float rounding order decides), for every specialised shape,
 * both quantization strategies (guess-and-correct, binary search). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/tq_kernels.h"
#include "cpu.h"
#include "testutil.h"

static void check_shape(int d, int b, int use_guess, tu_rng *r) {
    kvq_rotation rot;
    kvq_codebook cb;
    CHECK_OK(rot_init(&rot, d, 77 + d, 1, KVQ_ISA_AVX512));
    CHECK_OK(lloyd_max_solve(&cb, DENS_SPHERE, b, d));
    cb_snap_int8(&cb);
    if (use_guess) CHECK(cb.guess_ok || b == 1, "d=%d b=%d: the index guess is not within one cell", d, b);
    if (!use_guess) cb.guess_ok = 0;
    float x[KVQ_DIM_MAX], y[KVQ_DIM_MAX], scale;
    uint8_t packed[KVQ_DIM_MAX], idx[KVQ_DIM_MAX];
    int bad = 0, served = 0;
    for (int t = 0; t < 300; t++) {
        for (int c = 0; c < d; c++) x[c] = (float)(tu_gauss(r) * (t % 3 == 0 ? 30 : 1));
        if (t % 5 == 0) x[t % d] *= 100; /* one dominant channel */
        if (!tq_encode_fused_avx512(&rot, &cb, d, b, 0, x, &scale, packed)) continue;
        served = 1;
        strided_unpack(packed, d, b, idx);
        rot_apply(&rot, x, y);
        double nrm = 0;
        for (int c = 0; c < d; c++) nrm += (double)y[c] * y[c];
        double s = sqrt((double)d / nrm);
        for (int c = 0; c < d; c++) {
            double u = y[c] * s;
            int best = 0;
            for (int i = 1; i < cb.n; i++)
                if (fabs(u - cb.c[i]) < fabs(u - cb.c[best])) best = i;
            if (idx[c] != best) {
                double tie = idx[c] > best ? cb.t[best] : cb.t[idx[c]];
                if (fabs(u - tie) > 1e-4 || abs(idx[c] - best) > 1) bad++;
            }
        }
    }
    CHECK(!bad, "d=%d b=%d guess=%d: %d coordinates not on the nearest centroid", d, b, use_guess, bad);
    CHECK(served || d == 512, "d=%d b=%d: fused encoder did not serve a specialised shape", d, b);
    rot_free(&rot);
}

int main(void) {
    if (kvq_cpu_isa() < KVQ_ISA_AVX512) {
        printf("no AVX-512 on this CPU: the fused encoder is not used\n");
        return tu_finish("test_tq_encode");
    }
    tu_rng r = {123};
    static const int shapes[][2] = {{128, 4}, {128, 3}, {128, 2}, {128, 1}, {64, 4}, {64, 2}, {256, 4}, {256, 3}, {256, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int g = 0; g < 2; g++) check_shape(shapes[i][0], shapes[i][1], g, &r);
    return tu_finish("test_tq_encode");
}
