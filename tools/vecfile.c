/*
 * Vector files: raw K/V vectors for codec-bench / attn-bench (docs/FORMAT.md).
 * Header (64 bytes, little-endian):
 *   0  char[8]  magic "KVQVEC01"
 *   8  u32      dim
 *   12 u32      dtype (0 f32, 1 f16, 2 bf16)
 *   16 u64      count
 *   24 u32      layers   28 u32 heads   32 u32 kind (0 ?, 1 keys, 2 values, 3 queries)
 *   36 u32      reserved (0)
 *   40 u64      FNV-1a 64 of the header (this field as zero) then the payload
 *   48 u8[16]   reserved (0)
 * Payload: count * dim values of dtype, row-major.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vecfile.h"

#define HDR 64

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

int kvq_vecfile_write(const char *path, const kvq_vecfile_info *info, const float *x) {
    if (!path || !info || (!x && info->count)) return KVQ_ERR_NULL;
    /* everything kvq_vecfile_read checks, before anything is written */
    size_t es = (unsigned)info->dtype <= 2 ? kvq_dtype_size(info->dtype) : 0;
    if (!es || info->dim == 0 || info->dim > 65536 || info->kind > 3) return KVQ_ERR_INVALID_ARG;
    if (info->count > SIZE_MAX / info->dim / es) return KVQ_ERR_OVERFLOW;
    size_t nv = (size_t)info->count * info->dim, bytes = nv * es;
    uint8_t *buf = malloc(bytes ? bytes : 1);
    if (!buf) return KVQ_ERR_NOMEM;
    for (size_t i = 0; i < nv; i++) {
        if (info->dtype == KVQ_DTYPE_F32) memcpy(buf + 4 * i, &x[i], 4);
        else {
            uint16_t h = info->dtype == KVQ_DTYPE_F16 ? kvq_f32_to_f16(x[i]) : kvq_f32_to_bf16(x[i]);
            memcpy(buf + 2 * i, &h, 2);
        }
    }
    uint8_t hdr[HDR] = {0};
    memcpy(hdr, "KVQVEC01", 8);
    put32(hdr + 8, info->dim);
    put32(hdr + 12, (uint32_t)info->dtype);
    put64(hdr + 16, info->count);
    put32(hdr + 24, info->layers);
    put32(hdr + 28, info->heads);
    put32(hdr + 32, info->kind);
    put64(hdr + 40, fnv1a(fnv1a(0xcbf29ce484222325ull, hdr, HDR), buf, bytes));
    FILE *f = fopen(path, "wb");
    int rc = KVQ_OK;
    if (!f) rc = KVQ_ERR_IO;
    else {
        if (fwrite(hdr, 1, HDR, f) != HDR || fwrite(buf, 1, bytes, f) != bytes) rc = KVQ_ERR_IO;
        if (fclose(f)) rc = KVQ_ERR_IO;
    }
    free(buf);
    return rc;
}

int kvq_vecfile_read(const char *path, kvq_vecfile_info *info, float **out) {
    if (!path || !info || !out) return KVQ_ERR_NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return KVQ_ERR_IO;
    uint8_t hdr[HDR];
    int rc = KVQ_OK;
    uint8_t *buf = NULL;
    float *x = NULL;
    if (fread(hdr, 1, HDR, f) != HDR) { rc = KVQ_ERR_TRUNCATED; goto done; }
    if (memcmp(hdr, "KVQVEC01", 8)) { rc = KVQ_ERR_FORMAT; goto done; }
    kvq_vecfile_info in;
    in.dim = get32(hdr + 8);
    uint32_t dt = get32(hdr + 12);
    in.count = get64(hdr + 16);
    in.layers = get32(hdr + 24);
    in.heads = get32(hdr + 28);
    in.kind = get32(hdr + 32);
    if (dt > 2 || in.dim == 0 || in.dim > 65536 || in.kind > 3) { rc = KVQ_ERR_FORMAT; goto done; }
    in.dtype = (kvq_dtype)dt;
    size_t es = kvq_dtype_size(in.dtype);
    if (fseek(f, 0, SEEK_END)) { rc = KVQ_ERR_IO; goto done; }
    long fsz = ftell(f);
    if (fsz < HDR) { rc = KVQ_ERR_IO; goto done; }
    if (in.count > (uint64_t)(fsz - HDR) / in.dim / es) { rc = KVQ_ERR_TRUNCATED; goto done; }
    size_t nv = (size_t)in.count * in.dim, bytes = nv * es;
    if ((uint64_t)(fsz - HDR) != bytes) { rc = KVQ_ERR_FORMAT; goto done; }
    buf = malloc(bytes ? bytes : 1);
    x = malloc((nv ? nv : 1) * sizeof *x);
    if (!buf || !x) { rc = KVQ_ERR_NOMEM; goto done; }
    if (fseek(f, HDR, SEEK_SET) || fread(buf, 1, bytes, f) != bytes) { rc = KVQ_ERR_TRUNCATED; goto done; }
    uint64_t want = get64(hdr + 40);
    memset(hdr + 40, 0, 8);
    if (fnv1a(fnv1a(0xcbf29ce484222325ull, hdr, HDR), buf, bytes) != want) { rc = KVQ_ERR_CHECKSUM; goto done; }
    for (size_t i = 0; i < nv; i++) {
        if (in.dtype == KVQ_DTYPE_F32) memcpy(&x[i], buf + 4 * i, 4);
        else {
            uint16_t h;
            memcpy(&h, buf + 2 * i, 2);
            x[i] = in.dtype == KVQ_DTYPE_F16 ? kvq_f16_to_f32(h) : kvq_bf16_to_f32(h);
        }
    }
    *info = in;
    *out = x;
    x = NULL;
done:
    free(buf);
    free(x);
    fclose(f);
    return rc;
}
