/* Vector files: round trip in every dtype, and every damaged file (each
 * truncation, flipped bytes, foreign magic) is an error, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq.h"
#include "vecfile.h"
#include "testutil.h"

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

int main(void) {
    char path[] = "/tmp/kvq_vecfile_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    const uint32_t d = 64;
    const uint64_t n = 37;
    float *x = malloc(n * d * sizeof *x);
    tu_rng r = {3};
    for (size_t i = 0; i < n * d; i++) x[i] = (float)tu_gauss(&r);
    for (int dt = 0; dt < 3; dt++) {
        kvq_vecfile_info in = {d, n, (kvq_dtype)dt, 30, 3, 1}, out;
        CHECK_OK(kvq_vecfile_write(path, &in, x));
        float *y = NULL;
        CHECK_OK(kvq_vecfile_read(path, &out, &y));
        CHECK(out.dim == d && out.count == n && out.dtype == (kvq_dtype)dt && out.layers == 30 && out.heads == 3 &&
                  out.kind == 1, "header fields");
        for (size_t i = 0; y && i < n * d; i++) {
            float want = dt == 0 ? x[i] : dt == 1 ? kvq_f16_to_f32(kvq_f32_to_f16(x[i])) : kvq_bf16_to_f32(kvq_f32_to_bf16(x[i]));
            if (y[i] != want) { CHECK(0, "value %zu dtype %d", i, dt); break; }
        }
        free(y);
    }
    /* damage: every truncation of an f16 file, and single-byte flips */
    kvq_vecfile_info in = {d, n, KVQ_DTYPE_F16, 0, 0, 0}, out;
    CHECK_OK(kvq_vecfile_write(path, &in, x));
    long size = file_size(path);
    CHECK(size > 64, "file size %ld", size);
    if (size <= 64) return tu_finish("test_vecfile");
    unsigned char *orig = malloc((size_t)size);
    FILE *f = fopen(path, "rb");
    CHECK(fread(orig, 1, (size_t)size, f) == (size_t)size, "read back");
    fclose(f);
    for (long cut = 0; cut < size; cut += (cut < 80 ? 1 : 61)) {
        f = fopen(path, "wb");
        fwrite(orig, 1, (size_t)cut, f);
        fclose(f);
        float *y = NULL;
        int rc = kvq_vecfile_read(path, &out, &y);
        CHECK(rc != 0 && y == NULL, "truncated at %ld accepted", cut);
    }
    for (long pos = 0; pos < size; pos += (pos < 64 ? 1 : 97)) {
        unsigned char *b = malloc((size_t)size);
        memcpy(b, orig, (size_t)size);
        b[pos] ^= 0x5a;
        f = fopen(path, "wb");
        fwrite(b, 1, (size_t)size, f);
        fclose(f);
        float *y = NULL;
        int rc = kvq_vecfile_read(path, &out, &y);
        CHECK(rc != 0, "flip at %ld accepted", pos);
        free(y);
        free(b);
    }
    CHECK(kvq_vecfile_read("/nonexistent/x", &out, &x) == KVQ_ERR_IO, "missing file");
    CHECK(kvq_vecfile_read(NULL, &out, &x) == KVQ_ERR_NULL, "null path");
    kvq_vecfile_info bad = {0, 1, KVQ_DTYPE_F32, 0, 0, 0};
    CHECK(kvq_vecfile_write(path, &bad, x) == KVQ_ERR_INVALID_ARG, "dim 0");

    /* the writer refuses every header the reader would refuse, before it
     * writes anything (it accepted kind 4.. and wrote a file the reader then
     * rejected as KVQ_ERR_FORMAT) */
    kvq_vecfile_info ok_info = {d, 2, KVQ_DTYPE_F16, 1, 1, 2};
    CHECK_OK(kvq_vecfile_write(path, &ok_info, x));
    long before = file_size(path);
    const kvq_vecfile_info refused[] = {
        {d, 2, KVQ_DTYPE_F32, 0, 0, 4},          {d, 2, KVQ_DTYPE_F32, 0, 0, 99},
        {d, 2, KVQ_DTYPE_F32, 0, 0, 0xffffffffu}, {d, 2, (kvq_dtype)3, 0, 0, 0},
        {d, 2, (kvq_dtype)-1, 0, 0, 0},          {65537, 1, KVQ_DTYPE_F32, 0, 0, 0},
        {0, 0, KVQ_DTYPE_BF16, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK(kvq_vecfile_write(path, &refused[i], x) == KVQ_ERR_INVALID_ARG, "header %zu (kind %u dtype %d dim %u) "
              "accepted", i, refused[i].kind, (int)refused[i].dtype, refused[i].dim);
        CHECK(file_size(path) == before, "refused header %zu touched the file", i);
    }
    float *y = NULL;
    CHECK_OK(kvq_vecfile_read(path, &out, &y));
    CHECK(out.kind == 2 && out.count == 2, "file left as it was");
    free(y);
    /* and every header it accepts reads back */
    for (uint32_t kind = 0; kind <= 3; kind++)
        for (int dt = 0; dt < 3; dt++) {
            kvq_vecfile_info in2 = {kind == 3 ? 65536 : 8, kind == 3 ? 0 : 3, (kvq_dtype)dt, 7, 2, kind};
            CHECK_OK(kvq_vecfile_write(path, &in2, x));
            y = NULL;
            CHECK_OK(kvq_vecfile_read(path, &out, &y));
            CHECK(out.kind == kind && out.dim == in2.dim && out.count == in2.count && out.dtype == in2.dtype,
                  "kind %u dtype %d read back", kind, dt);
            free(y);
        }
    unlink(path);
    free(orig);
    free(x);
    return tu_finish("test_vecfile");
}
