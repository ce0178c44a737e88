/*
 * Vector files (raw K/V dumps for codec-bench / attn-bench, written by
 * dump-kv; format: docs/FORMAT.md). A tool format, not part of libkvq.
 */
#ifndef KVQ_TOOLS_VECFILE_H
#define KVQ_TOOLS_VECFILE_H

#include <stdint.h>

#include "kvq.h"

typedef struct kvq_vecfile_info {
    uint32_t dim;      /* values per vector */
    uint64_t count;    /* number of vectors */
    kvq_dtype dtype;   /* element type on disk */
    uint32_t layers;   /* metadata: model layers (0 if unknown) */
    uint32_t heads;    /* metadata: KV heads per layer (0 if unknown) */
    uint32_t kind;     /* 0 = unspecified, 1 = keys, 2 = values, 3 = queries */
} kvq_vecfile_info;

/*
 * Reads a whole vector file: *out receives count*dim floats (malloc'd; free
 * with free()). Damaged or truncated files give KVQ_ERR_FORMAT/TRUNCATED.
 */
int kvq_vecfile_read(const char *path, kvq_vecfile_info *info, float **out);
/* Writes count vectors of dim floats (stored as info->dtype). */
int kvq_vecfile_write(const char *path, const kvq_vecfile_info *info, const float *x);

#endif
