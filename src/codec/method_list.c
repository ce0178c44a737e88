/* The registry's methods as the public API lists them (kvq_method_count,
 * kvq_method_get): read-only views of the rows of registry.c. */
#include "codec_internal.h"

int kvq_method_count(void) { return (int)kvq_n_methods; }

int kvq_method_get(int i, kvq_method_info *out) {
    if (!out) return KVQ_ERR_NULL;
    if (i < 0 || (size_t)i >= kvq_n_methods) return KVQ_ERR_RANGE;
    const kvq_method *m = kvq_methods[i];
    out->name = m->name;
    out->min_bits = m->min_bits;
    out->max_bits = m->max_bits;
    out->default_bits = m->default_bits;
    out->colon_rows = m->colon_rows;
    return KVQ_OK;
}
