/* kvq_struct_size: the public structs' sizes, for bindings' layout checks (kvq.h). */
#include <string.h>

#include "kvq.h"

size_t kvq_struct_size(const char *name) {
    if (!name) return 0;
    if (!strcmp(name, "kvq_cache_config")) return sizeof(kvq_cache_config);
    if (!strcmp(name, "kvq_policy")) return sizeof(kvq_policy);
    if (!strcmp(name, "kvq_method_info")) return sizeof(kvq_method_info);
    return 0;
}
