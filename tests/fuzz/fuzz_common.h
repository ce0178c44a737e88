/* Helpers shared by the libFuzzer targets of tests/fuzz (docs/FUZZING.md). */
#ifndef KVQ_FUZZ_COMMON_H
#define KVQ_FUZZ_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"

/* A broken invariant: print it and abort (libFuzzer saves the input). */
#define FUZZ_CHECK(cond, ...)                                                         \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            abort();                                                                  \
        }                                                                             \
    } while (0)

/* 1 if rc is KVQ_OK or one of the documented KVQ_ERR_* codes. */
static inline int fuzz_known_status(int rc) { return rc <= 0 && rc >= KVQ_ERR_CHECKSUM; }

/* Sequential reader over the fuzz input; past the end it yields zeros. */
typedef struct {
    const uint8_t *p;
    size_t n, pos;
} fuzz_input;

static inline uint8_t fuzz_u8(fuzz_input *in) { return in->pos < in->n ? in->p[in->pos++] : 0; }
static inline uint32_t fuzz_u32(fuzz_input *in) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)fuzz_u8(in) << (8 * i);
    return v;
}
static inline size_t fuzz_left(const fuzz_input *in) { return in->n - in->pos; }

/* Directory of the models: $KVQ_ROOT/models, else the source tree's. */
static inline void fuzz_models_dir(char *buf, size_t cap) {
    const char *root = getenv("KVQ_ROOT");
#ifdef KVQ_FUZZ_SOURCE_DIR
    if (!root || !root[0]) root = KVQ_FUZZ_SOURCE_DIR;
#endif
    if (!root || !root[0]) root = ".";
    snprintf(buf, cap, "%s/models", root);
}

#endif
