/* Why a model file could not be opened (open_reason.h). */
#include "open_reason.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errfmt.h"
#include "kvq.h"

/* The errno values a path can give, named as the C library names them
 * (strerror is not thread-safe). */
static const char *errno_name(int e) {
    switch (e) {
    case ENOENT: return "No such file or directory";
    case EACCES: return "Permission denied";
    case EISDIR: return "is a directory";
    case ENOTDIR: return "a component of the path is not a directory";
    case ELOOP: return "too many symbolic links";
    case ENAMETOOLONG: return "file name too long";
    case EMFILE:
    case ENFILE: return "too many open files";
    case ENOMEM: return "out of memory";
    default: return NULL;
    }
}

int kvq_open_reason(const char *path, int rc, char *err, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        const char *w = errno_name(e);
        if (w) return kvq_errf(err, cap, rc, "%s: %s", path, w);
        return kvq_errf(err, cap, rc, "%s: cannot open (errno %d)", path, e);
    }
    if (S_ISDIR(st.st_mode)) return kvq_errf(err, cap, rc, "%s: is a directory", path);
    if (!S_ISREG(st.st_mode)) return kvq_errf(err, cap, rc, "%s: not a regular file", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        const char *w = errno_name(e);
        if (w) return kvq_errf(err, cap, rc, "%s: %s", path, w);
        return kvq_errf(err, cap, rc, "%s: cannot open (errno %d)", path, e);
    }
    unsigned char h[8] = {0};
    ssize_t n = read(fd, h, sizeof h);
    close(fd);
    if (st.st_size == 0) return kvq_errf(err, cap, rc, "%s: empty file (0 bytes), not a GGUF model", path);
    if (n < 4 || memcmp(h, "GGUF", 4))
        return kvq_errf(err, cap, rc, "%s: not a GGUF file (it does not start with the bytes 'GGUF')", path);
    uint32_t version = (uint32_t)h[4] | (uint32_t)h[5] << 8 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 24;
    if (n == 8 && version != 2 && version != 3)
        return kvq_errf(err, cap, rc, "%s: GGUF version %u not supported (versions 2 and 3 are)", path, version);
    if (rc == KVQ_ERR_TRUNCATED)
        return kvq_errf(err, cap, rc,
                        "%s: truncated at byte %lld (the GGUF header declares more data than the file holds; "
                        "an interrupted download?)",
                        path, (long long)st.st_size);
    return kvq_errf(err, cap, rc, "%s: %s", path, kvq_strerror(rc));
}
