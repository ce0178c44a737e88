/*
 * Vector files (tools/vecfile.c, docs/FORMAT.md) on arbitrary bytes.
 *
 * Input: byte 0 holds flags, the rest is a file. Flag 1 writes the magic
 * over the first 8 bytes and flag 2 stores the right FNV-1a checksum, so
 * that mutations reach the checks behind them. The file is written to a
 * temporary file and read with kvq_vecfile_read: an error code, or a header
 * within the format's limits whose values survive a write / read round
 * trip bit for bit. With flag 4 the input is instead a header + values
 * given to kvq_vecfile_write: what the writer accepts the reader must read
 * back identically (the writer validates everything the reader does).
 */
#include <unistd.h>

#include "fuzz_common.h"
#include "vecfile.h"

static char PATH_IN[64], PATH_OUT[64];

static void cleanup(void) {
    unlink(PATH_IN);
    unlink(PATH_OUT);
}

static void make_temp(char *path, size_t cap) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/kvq_fuzz_vec_XXXXXX", dir && dir[0] && strlen(dir) < 32 ? dir : "/tmp");
    int fd = mkstemp(path);
    FUZZ_CHECK(fd >= 0, "mkstemp %s", path);
    close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    make_temp(PATH_IN, sizeof PATH_IN);
    make_temp(PATH_OUT, sizeof PATH_OUT);
    atexit(cleanup);
    return 0;
}

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f, "open %s", path);
    FUZZ_CHECK(fwrite(p, 1, n, f) == n && fclose(f) == 0, "write %s", path);
}

static int same_bits(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

/* x (info->count * info->dim values) written, read back: same header, same values. */
static void round_trip(const kvq_vecfile_info *info, const float *x) {
    int rc = kvq_vecfile_write(PATH_OUT, info, x);
    FUZZ_CHECK(rc == KVQ_OK, "writing what was read: %d", rc);
    kvq_vecfile_info back;
    float *y = NULL;
    rc = kvq_vecfile_read(PATH_OUT, &back, &y);
    FUZZ_CHECK(rc == KVQ_OK, "reading what was written: %d", rc);
    FUZZ_CHECK(back.dim == info->dim && back.count == info->count && back.dtype == info->dtype &&
                   back.layers == info->layers && back.heads == info->heads && back.kind == info->kind,
               "header changed in the round trip");
    const size_t n = (size_t)info->count * info->dim;
    for (size_t i = 0; i < n; i++) {
        float want = x[i];
        if (info->dtype == KVQ_DTYPE_F16) want = kvq_f16_to_f32(kvq_f32_to_f16(want));
        if (info->dtype == KVQ_DTYPE_BF16) want = kvq_bf16_to_f32(kvq_f32_to_bf16(want));
        FUZZ_CHECK(same_bits(y[i], want), "value %zu changed in the round trip", i);
    }
    free(y);
}

static void read_side(uint8_t flags, const uint8_t *p, size_t n) {
    uint8_t *file = malloc(n ? n : 1);
    FUZZ_CHECK(file, "out of memory");
    if (n) memcpy(file, p, n);
    if ((flags & 1) && n >= 8) memcpy(file, "KVQVEC01", 8);
    if ((flags & 2) && n >= 64) {
        memset(file + 40, 0, 8);
        uint64_t h = fnv1a(fnv1a(0xcbf29ce484222325ull, file, 64), file + 64, n - 64);
        for (int i = 0; i < 8; i++) file[40 + i] = (uint8_t)(h >> (8 * i));
    }
    write_file(PATH_IN, file, n);
    free(file);
    kvq_vecfile_info info;
    memset(&info, 0x5a, sizeof info);
    float *x = NULL;
    int rc = kvq_vecfile_read(PATH_IN, &info, &x);
    FUZZ_CHECK(fuzz_known_status(rc), "read: %d", rc);
    if (rc) {
        FUZZ_CHECK(x == NULL, "values returned on error");
        return;
    }
    size_t es = kvq_dtype_size(info.dtype);
    FUZZ_CHECK(es && info.dim >= 1 && info.dim <= 65536 && info.kind <= 3, "header out of the format's limits");
    FUZZ_CHECK(n == 64 + info.count * info.dim * es, "payload of %zu bytes for %llu x %u", n - 64,
               (unsigned long long)info.count, info.dim);
    round_trip(&info, x);
    free(x);
}

/* A header from the input given to the writer; accepted means readable. */
static void write_side(const uint8_t *p, size_t n) {
    fuzz_input in = {p, n, 0};
    kvq_vecfile_info info;
    info.dim = fuzz_u32(&in) % 70000;
    uint32_t dt = fuzz_u8(&in);
    info.dtype = (kvq_dtype)(dt < 8 ? dt : (int)(int8_t)dt); /* negative values too */
    info.count = fuzz_u8(&in) % 8;
    info.layers = fuzz_u32(&in);
    info.heads = fuzz_u32(&in);
    info.kind = fuzz_u32(&in);
    if (fuzz_u8(&in) & 1) info.kind &= 7;
    size_t nv = (size_t)info.count * info.dim;
    if (nv > 4096) {
        info.count = 1;
        info.dim %= 4096;
        nv = info.dim;
    }
    float *x = calloc(nv ? nv : 1, sizeof *x);
    FUZZ_CHECK(x, "out of memory");
    for (size_t i = 0; i < nv && fuzz_left(&in) >= 4; i++) {
        uint32_t u = fuzz_u32(&in);
        memcpy(&x[i], &u, 4);
    }
    int rc = kvq_vecfile_write(PATH_OUT, &info, x);
    FUZZ_CHECK(fuzz_known_status(rc), "write: %d", rc);
    if (rc == KVQ_OK) {
        kvq_vecfile_info back;
        float *y = NULL;
        rc = kvq_vecfile_read(PATH_OUT, &back, &y);
        FUZZ_CHECK(rc == KVQ_OK, "the writer accepted (dim %u dtype %d kind %u) what the reader refuses: %d",
                   info.dim, (int)info.dtype, info.kind, rc);
        free(y);
        round_trip(&info, x);
    }
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 4) write_side(data + 1, size - 1);
    else read_side(data[0], data + 1, size - 1);
    return 0;
}
