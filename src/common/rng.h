/*
 * The one seeded generator of the library and its tests: splitmix64
 * (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014; the constants of Vigna's reference splitmix64.c): the state
 * advances by the golden-ratio increment 0x9e3779b97f4a7c15 and each output
 * is the state through the variant-13 mixer
 *   z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31.
 * Deterministic across platforms: the codec's rotations and projections,
 * the cache's per-head seeds, the sampler's seeding and the tests' draws all
 * come from it, and tests/test_rng.c pins its outputs.
 *
 * Header-only (static inline): every layer (codec, cache, engine, tests)
 * uses it without a link-time dependency on another one.
 */
#ifndef KVQ_RNG_H
#define KVQ_RNG_H

#include <math.h>
#include <stdint.h>

#define KVQ_SPLITMIX_GAMMA 0x9e3779b97f4a7c15ull

/* The splitmix64 mixer of z (no state change). */
static inline uint64_t kvq_mix64_raw(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Next output of the splitmix64 stream whose state is *s. */
static inline uint64_t kvq_splitmix64(uint64_t *s) { return kvq_mix64_raw(*s += KVQ_SPLITMIX_GAMMA); }

/* The first output of a stream started at z: a 64-bit hash of z (a
 * bijection), used to derive independent seeds. */
static inline uint64_t kvq_mix64(uint64_t z) { return kvq_splitmix64(&z); }

/* [0, 1) from the top 53 bits of x: multiples of 2^-53. */
static inline double kvq_unit53(uint64_t x) { return (double)(x >> 11) * (1.0 / 9007199254740992.0); }

/* A splitmix64 stream with a Box-Muller spare (the codec's Gaussian draws). */
typedef struct { uint64_t s; int have; double spare; } kvq_rng;

static inline void kvq_rng_seed(kvq_rng *r, uint64_t seed) { r->s = seed, r->have = 0, r->spare = 0; }
static inline uint64_t kvq_rng_u64(kvq_rng *r) { return kvq_splitmix64(&r->s); }

/* N(0, 1) by Box-Muller in double: u1 in (0, 1) (zero redrawn), u2 in [0, 1),
 * m = sqrt(-2 ln u1); returns m cos(2π u2) and keeps m sin(2π u2) for the
 * next call. */
static inline double kvq_rng_gauss(kvq_rng *r) {
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    double u1, u2;
    do u1 = kvq_unit53(kvq_rng_u64(r));
    while (u1 <= 0);
    u2 = kvq_unit53(kvq_rng_u64(r));
    const double m = sqrt(-2.0 * log(u1));
    r->spare = m * sin(2 * M_PI * u2);
    r->have = 1;
    return m * cos(2 * M_PI * u2);
}

/* An independent seed for a purpose tag: the first output of the stream
 * started at seed ^ (tag * 0xd1342543de82ef95) (an odd multiplier: distinct
 * tags give distinct starts). */
static inline uint64_t kvq_seed_mix(uint64_t seed, uint64_t tag) { return kvq_mix64(seed ^ (tag * 0xd1342543de82ef95ull)); }

#endif
