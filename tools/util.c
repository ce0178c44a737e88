#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "tools.h"

double tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tool_parse_int_list(const char *s, long *out, int max) {
    int n = 0;
    while (*s) {
        if (n >= max) return -1;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno) return -1;
        /* accept K suffix: 4K = 4096 */
        if (*end == 'k' || *end == 'K') { v *= 1024; end++; }
        out[n++] = v;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}
