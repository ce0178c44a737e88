/* The one generator (src/common/rng.h) pinned: its outputs, the codec's
 * Gaussian stream and seed derivation, the cache's per-head seeds and the
 * test helpers' draws, values taken from the five separate copies it
 * replaced (before issue 14); any change would move every rotation, every
 * projection and every test's data. The sampler's sequences are pinned in
 * test_sampler.c. */
#include <string.h>

#include "cache/cache_internal.h"
#include "rng.h"
#include "testutil.h"

static uint64_t dbits(double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    return u;
}

int main(void) {
    /* splitmix64 from 0: 0xe220a8397b1dcdaf is the reference implementation's first output */
    static const uint64_t u0[3] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full};
    kvq_rng r;
    kvq_rng_seed(&r, 0);
    for (int i = 0; i < 3; i++) CHECK(kvq_rng_u64(&r) == u0[i], "u64 draw %d", i);
    static const uint64_t g[5] = {0x3fe2005b43dd21dcull, 0x3ffed90fd85eac30ull, 0x3fed8798796228b1ull,
                                  0x3ffd7ce003fc1f8full, 0xbfe365e9b75e0f07ull};
    kvq_rng_seed(&r, 12345);
    for (int i = 0; i < 5; i++) CHECK(dbits(kvq_rng_gauss(&r)) == g[i], "gauss draw %d", i);
    CHECK(kvq_seed_mix(7, 0x524f54) == 0xf41e5114d49e1efdull, "seed_mix (rotation tag)");
    CHECK(kvq_seed_mix(0, 0x4f55544c) == 0xca43046463a6669dull, "seed_mix (outliers tag)");
    CHECK(cache_plan_seed(42, 3, 1, 5) == 0xfd16c692769de9beull, "cache seed");
    CHECK(cache_plan_seed(0, 0, 0, -1) == 0x1b7d7125a21711f0ull, "cache seed, layer plan");
    CHECK(cache_plan_seed(~0ull, 27, 0, 7) == 0x329989a31b2e9988ull, "cache seed, all-ones");
    tu_rng t = {99};
    CHECK(tu_next(&t) == 0x42f3a9364c476be3ull, "tu_next");
    CHECK(dbits(tu_uniform(&t)) == 0x3fa03572310f3ad0ull, "tu_uniform");
    CHECK(dbits(tu_gauss(&t)) == 0x3fdec94343a06469ull, "tu_gauss");
    CHECK(dbits(tu_laplace(&t)) == 0xbfe8671ffc6b9c41ull, "tu_laplace");
    return tu_finish("test_rng");
}
