/* The registry: one row per method and per wrapper (each defined in its own
 * m_*.c); plan.c reaches them only through these tables. */
#include <string.h>

#include "codec_internal.h"

extern const kvq_method kvq_method_f32, kvq_method_f16, kvq_method_bf16, kvq_method_q8, kvq_method_q4,
    kvq_method_tq_mse, kvq_method_tq_prod, kvq_method_qjl, kvq_method_rvq, kvq_method_polar,
    kvq_method_tcq;

const kvq_method *const kvq_methods[] = {
    &kvq_method_f32,    &kvq_method_f16,     &kvq_method_bf16, &kvq_method_q8,    &kvq_method_q4,
    &kvq_method_tq_mse, &kvq_method_tq_prod, &kvq_method_qjl, &kvq_method_rvq, &kvq_method_polar,
    &kvq_method_tcq,
};
const size_t kvq_n_methods = sizeof kvq_methods / sizeof kvq_methods[0];

extern const kvq_wrapper kvq_wrapper_outliers, kvq_wrapper_center;

/* The first selected wrapper is the one whose option checks run; a spec
 * selecting two is refused (KVQ_ERR_INVALID_ARG). */
const kvq_wrapper *const kvq_wrappers[] = {&kvq_wrapper_outliers, &kvq_wrapper_center};
const size_t kvq_n_wrappers = sizeof kvq_wrappers / sizeof kvq_wrappers[0];

const kvq_method *kvq_method_find(const char *name) {
    for (size_t i = 0; i < kvq_n_methods; i++)
        if (!strcmp(kvq_methods[i]->name, name)) return kvq_methods[i];
    return NULL;
}
