/* Why a model file could not be opened, in words: what kvq_model_load puts
 * in its err buffer when kvq_gguf_open fails. */
#ifndef KVQ_OPEN_REASON_H
#define KVQ_OPEN_REASON_H
#include <stddef.h>

/*
 * Looks at path again after kvq_gguf_open returned rc and writes
 * "PATH: REASON" into err: "No such file or directory", "Permission
 * denied", "is a directory", "empty file", "not a GGUF file", "GGUF
 * version V not supported", "truncated at byte N (...)", or rc's name.
 * Returns rc.
 */
int kvq_open_reason(const char *path, int rc, char *err, size_t cap);
#endif
