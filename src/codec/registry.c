/* The method registry: one row per method (each defined in its own m_*.c). */
#include <string.h>

#include "codec_internal.h"

extern const kvq_method kvq_method_f32, kvq_method_f16, kvq_method_bf16, kvq_method_q8, kvq_method_q4,
    kvq_method_tq_mse, kvq_method_tq_prod, kvq_method_qjl, kvq_method_rvq, kvq_method_polar;

const kvq_method *const kvq_methods[] = {
    &kvq_method_f32,    &kvq_method_f16,     &kvq_method_bf16, &kvq_method_q8,    &kvq_method_q4,
    &kvq_method_tq_mse, &kvq_method_tq_prod, &kvq_method_qjl, &kvq_method_rvq, &kvq_method_polar,
};
const size_t kvq_n_methods = sizeof kvq_methods / sizeof kvq_methods[0];

const kvq_method *kvq_method_find(const char *name) {
    for (size_t i = 0; i < kvq_n_methods; i++)
        if (!strcmp(kvq_methods[i]->name, name)) return kvq_methods[i];
    return NULL;
}
