/* Writes a one-line reason into a caller's (err, cap) buffer and returns rc:
 * the `err, err_cap` convention of kvq_policy_parse, kvq_model_load, ...
 * Header-only (static inline): libkvq and libkvq-engine each get their copy,
 * no hidden symbol crosses the shared libraries. */
#ifndef KVQ_ERRFMT_H
#define KVQ_ERRFMT_H
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int kvq_errf(char *err, size_t cap, int rc, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return rc;
}
#endif
