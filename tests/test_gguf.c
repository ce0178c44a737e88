/*
 * GGUF reader: valid files with every value type, then every truncation,
 * random corruptions and hand-made hostile headers. Under ASan/UBSan a
 * read out of bounds anywhere would abort the test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ggml_types.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "kvq.h"
#include "kvq_engine.h"
#include "testutil.h"

/* ---- a tiny GGUF writer ------------------------------------------------- */
typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void u16(buf *b, uint16_t v) { uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)}; put(b, x, 2); }
static void u32(buf *b, uint32_t v) { for (int i = 0; i < 4; i++) u8(b, (uint8_t)(v >> (8 * i))); }
static void u64(buf *b, uint64_t v) { for (int i = 0; i < 8; i++) u8(b, (uint8_t)(v >> (8 * i))); }
static void f32(buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); u32(b, u); }
static void f64(buf *b, double f) { uint64_t u; memcpy(&u, &f, 8); u64(b, u); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void key(buf *b, const char *k, uint32_t type) { str(b, k); u32(b, type); }
static void pad_to(buf *b, size_t align) { while (b->n % align) u8(b, 0); }

#define N_KV 19
#define N_TENSORS 4

/* A file exercising every value type, with tensors f32 [3,2], q8_0 [64,2],
 * an unknown type (999) and an f16 [5]. alignment: 0 = key absent (32). */
static buf make_valid(uint32_t version, uint32_t alignment) {
    buf b = {0};
    u32(&b, GGUF_MAGIC);
    u32(&b, version);
    u64(&b, N_TENSORS);
    u64(&b, N_KV + (alignment ? 1 : 0));
    key(&b, "general.architecture", GGUF_TYPE_STRING); str(&b, "llama");
    key(&b, "t.u8", GGUF_TYPE_UINT8); u8(&b, 200);
    key(&b, "t.i8", GGUF_TYPE_INT8); u8(&b, (uint8_t)-5);
    key(&b, "t.u16", GGUF_TYPE_UINT16); u16(&b, 60000);
    key(&b, "t.i16", GGUF_TYPE_INT16); u16(&b, (uint16_t)-30000);
    key(&b, "t.u32", GGUF_TYPE_UINT32); u32(&b, 4000000000u);
    key(&b, "t.i32", GGUF_TYPE_INT32); u32(&b, (uint32_t)-2000000000);
    key(&b, "t.f32", GGUF_TYPE_FLOAT32); f32(&b, 1.5f);
    key(&b, "t.bool", GGUF_TYPE_BOOL); u8(&b, 1);
    key(&b, "t.u64", GGUF_TYPE_UINT64); u64(&b, 1ull << 40);
    key(&b, "t.i64", GGUF_TYPE_INT64); u64(&b, (uint64_t)-(1ll << 40));
    key(&b, "t.f64", GGUF_TYPE_FLOAT64); f64(&b, -2.25);
    key(&b, "t.empty", GGUF_TYPE_STRING); str(&b, "");
    key(&b, "t.arr_u32", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT32); u64(&b, 3);
    u32(&b, 7); u32(&b, 8); u32(&b, 9);
    key(&b, "t.arr_f32", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_FLOAT32); u64(&b, 2);
    f32(&b, 0.25f); f32(&b, -4.0f);
    key(&b, "t.arr_str", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_STRING); u64(&b, 3);
    str(&b, "a"); str(&b, ""); str(&b, "hello");
    key(&b, "t.arr_nested", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_ARRAY); u64(&b, 2);
    u32(&b, GGUF_TYPE_INT8); u64(&b, 2); u8(&b, 1); u8(&b, 2);
    u32(&b, GGUF_TYPE_STRING); u64(&b, 1); str(&b, "x");
    key(&b, "t.arr_bool", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_BOOL); u64(&b, 4);
    u8(&b, 1); u8(&b, 0); u8(&b, 0); u8(&b, 1);
    key(&b, "t.arr_empty", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_INT64); u64(&b, 0);
    if (alignment) { key(&b, "general.alignment", GGUF_TYPE_UINT32); u32(&b, alignment); }
    uint32_t al = alignment ? alignment : 32;
    /* tensor infos */
    uint64_t off_f32 = 0, off_q8 = al, off_unk = 6 * al, off_f16 = 7 * al;
    str(&b, "w.f32"); u32(&b, 2); u64(&b, 3); u64(&b, 2); u32(&b, GGML_TYPE_F32); u64(&b, off_f32);
    str(&b, "w.q8"); u32(&b, 2); u64(&b, 64); u64(&b, 2); u32(&b, GGML_TYPE_Q8_0); u64(&b, off_q8);
    str(&b, "w.unknown"); u32(&b, 1); u64(&b, 16); u32(&b, 999); u64(&b, off_unk);
    str(&b, "w.f16"); u32(&b, 1); u64(&b, 5); u32(&b, GGML_TYPE_F16); u64(&b, off_f16);
    pad_to(&b, al);
    size_t data = b.n;
    for (int i = 0; i < 6; i++) f32(&b, (float)i + 0.5f);
    while (b.n < data + off_q8) u8(&b, 0);
    for (int blk = 0; blk < 4; blk++) {
        u16(&b, kvq_f32_to_f16(0.5f));
        for (int i = 0; i < 32; i++) u8(&b, (uint8_t)(int8_t)(i - 16 + blk));
    }
    while (b.n < data + off_unk) u8(&b, 0xee);
    while (b.n < data + off_f16) u8(&b, 0xee);
    for (int i = 0; i < 5; i++) u16(&b, kvq_f32_to_f16((float)i));
    return b;
}

static void check_valid(const buf *b, uint32_t version, uint32_t alignment) {
    kvq_gguf_file *g = NULL;
    int rc = kvq_gguf_open_buffer(&g, b->p, b->n);
    CHECK(rc == KVQ_OK, "valid file: rc=%d (%s)", rc, kvq_strerror(rc));
    if (rc) return;
    CHECK(kvq_gguf_version(g) == version, "version");
    CHECK(kvq_gguf_alignment(g) == (alignment ? alignment : 32), "alignment %u", kvq_gguf_alignment(g));
    CHECK(kvq_gguf_data_offset(g) % kvq_gguf_alignment(g) == 0, "data offset aligned");
    CHECK(kvq_gguf_n_kv(g) == N_KV + (alignment ? 1u : 0u), "n_kv");
    CHECK(kvq_gguf_n_tensors(g) == N_TENSORS, "n_tensors");

    char s[32];
    CHECK(kvq_gguf_get_cstr(g, "general.architecture", s, sizeof s) == 0 && !strcmp(s, "llama"), "arch");
    CHECK(kvq_gguf_get_cstr(g, "general.architecture", s, 3) == 0 && !strcmp(s, "ll"), "cstr truncation");
    uint32_t v32 = 0;
    int64_t v64 = 0;
    float f = 0;
    int bo = -1;
    CHECK(kvq_gguf_get_u32(g, "t.u8", &v32) == 0 && v32 == 200, "u8");
    CHECK(kvq_gguf_get_i64(g, "t.i8", &v64) == 0 && v64 == -5, "i8");
    CHECK(kvq_gguf_get_u32(g, "t.i8", &v32) == KVQ_ERR_FORMAT, "negative into u32");
    CHECK(kvq_gguf_get_u32(g, "t.u16", &v32) == 0 && v32 == 60000, "u16");
    CHECK(kvq_gguf_get_i64(g, "t.i16", &v64) == 0 && v64 == -30000, "i16");
    CHECK(kvq_gguf_get_u32(g, "t.u32", &v32) == 0 && v32 == 4000000000u, "u32");
    CHECK(kvq_gguf_get_i64(g, "t.i32", &v64) == 0 && v64 == -2000000000, "i32");
    CHECK(kvq_gguf_get_f32(g, "t.f32", &f) == 0 && f == 1.5f, "f32");
    CHECK(kvq_gguf_get_bool(g, "t.bool", &bo) == 0 && bo == 1, "bool");
    CHECK(kvq_gguf_get_i64(g, "t.u64", &v64) == 0 && v64 == (1ll << 40), "u64");
    CHECK(kvq_gguf_get_u32(g, "t.u64", &v32) == KVQ_ERR_FORMAT, "u64 too large for u32");
    CHECK(kvq_gguf_get_i64(g, "t.i64", &v64) == 0 && v64 == -(1ll << 40), "i64");
    CHECK(kvq_gguf_get_f32(g, "t.f64", &f) == 0 && f == -2.25f, "f64");
    CHECK(kvq_gguf_get_f32(g, "t.u32", &f) == 0 && f == 4e9f, "int as f32");
    CHECK(kvq_gguf_get_u32(g, "t.f32", &v32) == KVQ_ERR_FORMAT, "float as u32 refused");
    CHECK(kvq_gguf_get_u32(g, "nope", &v32) == GGUF_NOT_FOUND, "missing key");
    kvq_gguf_str gs;
    CHECK(kvq_gguf_get_str(g, "t.empty", &gs) == 0 && gs.len == 0, "empty string");
    CHECK(kvq_gguf_get_str(g, "t.u8", &gs) == KVQ_ERR_FORMAT, "u8 as string refused");

    const kvq_gguf_kv *a = NULL;
    CHECK(kvq_gguf_get_arr(g, "t.arr_u32", &a) == 0 && a->v.arr.n == 3 && a->v.arr.type == GGUF_TYPE_UINT32, "arr u32");
    if (a) {
        CHECK(kvq_gguf_arr_i64(a, 2, &v64) == 0 && v64 == 9, "arr[2]");
        CHECK(kvq_gguf_arr_i64(a, 3, &v64) == KVQ_ERR_INVALID_ARG, "arr out of range");
    }
    CHECK(kvq_gguf_get_arr(g, "t.arr_f32", &a) == 0, "arr f32");
    CHECK(kvq_gguf_arr_f32(a, 1, &f) == 0 && f == -4.0f, "arr f32 [1]");
    CHECK(kvq_gguf_get_arr(g, "t.arr_bool", &a) == 0, "arr bool");
    CHECK(kvq_gguf_arr_i64(a, 3, &v64) == 0 && v64 == 1, "arr bool [3]");
    CHECK(kvq_gguf_get_arr(g, "t.arr_str", &a) == 0 && a->v.arr.n == 3, "arr str");
    kvq_gguf_str ss[3];
    CHECK(kvq_gguf_arr_strings(a, ss, 3) == 0, "arr strings");
    CHECK(kvq_gguf_str_eq(ss[0], "a") && kvq_gguf_str_eq(ss[1], "") && kvq_gguf_str_eq(ss[2], "hello"), "string values");
    CHECK(kvq_gguf_arr_i64(a, 0, &v64) == KVQ_ERR_FORMAT, "string array as int refused");
    CHECK(kvq_gguf_get_arr(g, "t.arr_nested", &a) == 0 && a->v.arr.type == GGUF_TYPE_ARRAY && a->v.arr.n == 2, "nested");
    CHECK(kvq_gguf_get_arr(g, "t.arr_empty", &a) == 0 && a->v.arr.n == 0, "empty array");
    CHECK(kvq_gguf_get_arr(g, "t.u8", &a) == KVQ_ERR_FORMAT, "scalar as array refused");

    const kvq_gguf_tensor *t = kvq_gguf_find_tensor(g, "w.f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 3 && t->ne[1] == 2 && t->n_bytes == 24 && t->size_known, "f32 tensor");
    if (t) {
        float x[6];
        memcpy(x, t->data, 24);
        CHECK(x[0] == 0.5f && x[5] == 5.5f, "f32 tensor data");
        CHECK((const uint8_t *)t->data - b->p == (ptrdiff_t)kvq_gguf_data_offset(g), "f32 tensor at data start");
    }
    t = kvq_gguf_find_tensor(g, "w.q8");
    CHECK(t && t->n_bytes == 4 * 34 && t->n_elems == 128, "q8 tensor");
    if (t) {
        float row[64];
        CHECK_OK(kvq_ggml_dequant_row(GGML_TYPE_Q8_0, t->data, row, 64));
        CHECK(row[0] == -8.0f && row[31] == 7.5f && row[32] == -7.5f, "q8 dequant %g %g %g", row[0], row[31], row[32]);
    }
    t = kvq_gguf_find_tensor(g, "w.unknown");
    CHECK(t && !t->size_known && t->data == NULL && t->type == 999, "unknown type tensor kept, no data");
    t = kvq_gguf_find_tensor(g, "w.f16");
    CHECK(t && t->n_bytes == 10, "f16 tensor");
    CHECK(kvq_gguf_find_tensor(g, "w") == NULL && kvq_gguf_find_tensor(g, "w.f32x") == NULL, "tensor lookup exact");
    kvq_gguf_close(g);
}

/* Exercises every accessor on whatever a (possibly corrupted) file holds. */
static void walk(const kvq_gguf_file *g) {
    for (size_t i = 0; i < kvq_gguf_n_kv(g); i++) {
        const kvq_gguf_kv *kv = kvq_gguf_kv_at(g, i);
        char name[64];
        size_t n = kv->key.len < 63 ? (size_t)kv->key.len : 63;
        memcpy(name, kv->key.ptr, n);
        name[n] = 0;
        uint32_t v32;
        float f;
        kvq_gguf_str s;
        (void)kvq_gguf_get_u32(g, name, &v32);
        (void)kvq_gguf_get_f32(g, name, &f);
        (void)kvq_gguf_get_str(g, name, &s);
        if (kv->type == GGUF_TYPE_ARRAY) {
            if (kv->v.arr.type == GGUF_TYPE_STRING && kv->v.arr.n < 100000) {
                kvq_gguf_str *ss = malloc(sizeof *ss * (size_t)(kv->v.arr.n + 1));
                CHECK(kvq_gguf_arr_strings(kv, ss, kv->v.arr.n) == 0, "strings of a validated array");
                free(ss);
            }
            for (uint64_t j = 0; j < kv->v.arr.n && j < 16; j++) {
                int64_t v;
                (void)kvq_gguf_arr_i64(kv, j, &v);
                (void)kvq_gguf_arr_f32(kv, j, &f);
            }
        }
    }
    for (size_t i = 0; i < kvq_gguf_n_tensors(g); i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        if (t->size_known && t->n_bytes) {
            const uint8_t *p = t->data;
            volatile uint8_t x = p[0];
            x = p[t->n_bytes - 1];
            (void)x;
        }
    }
}

static void test_truncations(const buf *b) {
    int bad = 0;
    for (size_t len = 0; len < b->n; len++) {
        kvq_gguf_file *g = NULL;
        uint8_t *copy = malloc(len ? len : 1); /* exact-size copy: ASan sees any overread */
        memcpy(copy, b->p, len);
        int rc = kvq_gguf_open_buffer(&g, copy, len);
        if (rc != KVQ_ERR_TRUNCATED) {
            bad++;
            if (bad < 5) fprintf(stderr, "truncated at %zu: rc=%d\n", len, rc);
        }
        kvq_gguf_close(g);
        free(copy);
    }
    CHECK(bad == 0, "%d truncations not reported as KVQ_ERR_TRUNCATED", bad);
}

static void test_corruptions(const buf *b, uint64_t seed, int iters) {
    tu_rng r = {seed};
    int ok = 0, errs = 0, other = 0;
    uint8_t *copy = malloc(b->n);
    for (int it = 0; it < iters; it++) {
        memcpy(copy, b->p, b->n);
        int nflip = 1 + (int)(tu_next(&r) % 8);
        for (int k = 0; k < nflip; k++) {
            size_t pos = (size_t)(tu_next(&r) % b->n);
            switch (tu_next(&r) % 4) {
            case 0: copy[pos] ^= (uint8_t)(1u << (tu_next(&r) % 8)); break;
            case 1: copy[pos] = (uint8_t)tu_next(&r); break;
            case 2: copy[pos] = 0xff; break;
            default: copy[pos] = 0; break;
            }
        }
        size_t len = (tu_next(&r) % 4 == 0) ? (size_t)(tu_next(&r) % (b->n + 1)) : b->n;
        kvq_gguf_file *g = NULL;
        int rc = kvq_gguf_open_buffer(&g, copy, len);
        if (rc == KVQ_OK) {
            ok++;
            walk(g);
            kvq_gguf_close(g);
        } else if (rc == KVQ_ERR_FORMAT || rc == KVQ_ERR_TRUNCATED) {
            errs++;
        } else {
            other++;
        }
    }
    free(copy);
    CHECK(other == 0, "%d corruptions gave an unexpected error code", other);
    printf("corruptions: %d parsed, %d rejected\n", ok, errs);
}

/* Builds a header by hand and expects rc. */
static void expect_rc(const char *what, const buf *b, int want) {
    kvq_gguf_file *g = NULL;
    int rc = kvq_gguf_open_buffer(&g, b->p, b->n);
    CHECK(rc == want, "%s: rc=%d (%s), want %d", what, rc, kvq_strerror(rc), want);
    kvq_gguf_close(g);
}

static buf header(uint32_t magic, uint32_t version, uint64_t nt, uint64_t nkv) {
    buf b = {0};
    u32(&b, magic);
    u32(&b, version);
    u64(&b, nt);
    u64(&b, nkv);
    return b;
}

static void test_hostile(void) {
    buf b;
    b = header(0x12345678, 3, 0, 0); expect_rc("bad magic", &b, KVQ_ERR_FORMAT); free(b.p);
    b = header(GGUF_MAGIC, 1, 0, 0); expect_rc("version 1", &b, KVQ_ERR_FORMAT); free(b.p);
    b = header(GGUF_MAGIC, 4, 0, 0); expect_rc("version 4", &b, KVQ_ERR_FORMAT); free(b.p);
    b = header(GGUF_MAGIC, 3, 0, 0); expect_rc("empty v3", &b, KVQ_OK); free(b.p);
    b = header(GGUF_MAGIC, 2, 0, 0); expect_rc("empty v2", &b, KVQ_OK); free(b.p);
    b = header(GGUF_MAGIC, 3, 0, UINT64_MAX); expect_rc("huge n_kv", &b, KVQ_ERR_TRUNCATED); free(b.p);
    b = header(GGUF_MAGIC, 3, UINT64_MAX / 2, 0); expect_rc("huge n_tensors", &b, KVQ_ERR_TRUNCATED); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    u64(&b, UINT64_MAX); u32(&b, 0);
    expect_rc("huge key length", &b, KVQ_ERR_TRUNCATED); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", 13); u32(&b, 0);
    expect_rc("bad value type", &b, KVQ_ERR_FORMAT); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", GGUF_TYPE_BOOL); u8(&b, 2);
    expect_rc("bool 2", &b, KVQ_ERR_FORMAT); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_UINT64); u64(&b, UINT64_MAX / 4);
    expect_rc("huge array count", &b, KVQ_ERR_TRUNCATED); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_STRING); u64(&b, 1u << 30);
    str(&b, "abc");
    expect_rc("huge string array", &b, KVQ_ERR_TRUNCATED); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", GGUF_TYPE_ARRAY); u32(&b, 77); u64(&b, 0);
    expect_rc("bad array element type", &b, KVQ_ERR_FORMAT); free(b.p);

    /* nested arrays deeper than the limit */
    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "k", GGUF_TYPE_ARRAY);
    for (int i = 0; i < 20; i++) { u32(&b, GGUF_TYPE_ARRAY); u64(&b, 1); }
    u32(&b, GGUF_TYPE_UINT8); u64(&b, 0);
    expect_rc("deep nesting", &b, KVQ_ERR_FORMAT); free(b.p);

    b = header(GGUF_MAGIC, 3, 0, 2);
    key(&b, "k", GGUF_TYPE_UINT8); u8(&b, 1);
    key(&b, "k", GGUF_TYPE_UINT8); u8(&b, 2);
    expect_rc("duplicate key", &b, KVQ_ERR_FORMAT); free(b.p);

    uint32_t bad_align[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        b = header(GGUF_MAGIC, 3, 0, 1);
        key(&b, "general.alignment", GGUF_TYPE_UINT32); u32(&b, bad_align[i]);
        expect_rc("bad alignment", &b, KVQ_ERR_FORMAT); free(b.p);
    }
    b = header(GGUF_MAGIC, 3, 0, 1);
    key(&b, "general.alignment", GGUF_TYPE_UINT64); u64(&b, 32);
    expect_rc("alignment of the wrong type", &b, KVQ_ERR_FORMAT); free(b.p);

    /* tensor infos */
    struct { const char *what; uint32_t ndims; uint64_t ne0, ne1; uint32_t type; uint64_t off; int want; } cases[] = {
        {"0 dims", 0, 4, 1, GGML_TYPE_F32, 0, KVQ_ERR_FORMAT},
        {"5 dims", 5, 4, 1, GGML_TYPE_F32, 0, KVQ_ERR_FORMAT},
        {"misaligned offset", 1, 4, 1, GGML_TYPE_F32, 4, KVQ_ERR_FORMAT},
        {"row not a block multiple", 1, 33, 1, GGML_TYPE_Q4_0, 0, KVQ_ERR_FORMAT},
        {"data past the end", 1, 64, 1, GGML_TYPE_F32, 0, KVQ_ERR_TRUNCATED},
        {"offset past the end", 1, 4, 1, GGML_TYPE_F32, 1ull << 62, KVQ_ERR_TRUNCATED},
        {"offset near 2^64", 1, 4, 1, GGML_TYPE_F32, UINT64_MAX - 31, KVQ_ERR_TRUNCATED},
        {"element count overflow", 2, 1ull << 40, 1ull << 40, GGML_TYPE_F32, 0, KVQ_ERR_FORMAT},
        {"byte count overflow", 2, 1ull << 31, 1ull << 31, GGML_TYPE_F32, 0, KVQ_ERR_FORMAT},
        {"huge but representable", 2, 1ull << 31, 1ull << 31, GGML_TYPE_Q8_K, 0, KVQ_ERR_TRUNCATED},
        {"ok", 1, 4, 1, GGML_TYPE_F32, 0, KVQ_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        b = header(GGUF_MAGIC, 3, 1, 0);
        str(&b, "t");
        u32(&b, cases[i].ndims);
        for (uint32_t d = 0; d < cases[i].ndims && d < 8; d++) u64(&b, d == 0 ? cases[i].ne0 : d == 1 ? cases[i].ne1 : 1);
        u32(&b, cases[i].type);
        u64(&b, cases[i].off);
        pad_to(&b, 32);
        for (int k = 0; k < 16; k++) u8(&b, 0);
        expect_rc(cases[i].what, &b, cases[i].want);
        free(b.p);
    }
    b = header(GGUF_MAGIC, 3, 2, 0);
    for (int k = 0; k < 2; k++) { str(&b, "same"); u32(&b, 1); u64(&b, 4); u32(&b, GGML_TYPE_F32); u64(&b, 0); }
    pad_to(&b, 32);
    for (int k = 0; k < 16; k++) u8(&b, 0);
    expect_rc("duplicate tensor", &b, KVQ_ERR_FORMAT);
    free(b.p);
}

static void test_file_io(const buf *b) {
    char path[] = "/tmp/kvq_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    CHECK(write(fd, b->p, b->n) == (ssize_t)b->n, "write");
    close(fd);
    kvq_gguf_file *g = NULL;
    CHECK_OK(kvq_gguf_open(&g, path));
    if (g) {
        CHECK(kvq_gguf_file_size(g) == b->n, "file size");
        walk(g);
        kvq_gguf_close(g);
    }
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    g = NULL;
    CHECK(kvq_gguf_open(&g, path) == KVQ_ERR_TRUNCATED, "empty file");
    unlink(path);
    CHECK(kvq_gguf_open(&g, path) == KVQ_ERR_IO, "missing file");
    CHECK(kvq_gguf_open(&g, "/tmp") == KVQ_ERR_IO, "directory");
    CHECK(kvq_gguf_open(NULL, path) == KVQ_ERR_NULL, "NULL out");
    kvq_gguf_close(NULL);
}

/* The real model, when scripts/fetch-models.sh has installed it. */
static void test_real_model(void) {
    const char *root = getenv("KVQ_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
    if (access(path, R_OK) != 0) {
        printf("skip: %s not installed\n", path);
        return;
    }
    kvq_gguf_file *g = NULL;
    CHECK_OK(kvq_gguf_open(&g, path));
    if (!g) return;
    uint32_t n = 0;
    CHECK(kvq_gguf_get_u32(g, "llama.block_count", &n) == 0 && n == 30, "block_count %u", n);
    const kvq_gguf_kv *tok = NULL;
    CHECK(kvq_gguf_get_arr(g, "tokenizer.ggml.tokens", &tok) == 0 && tok->v.arr.n == 49152, "49152 tokens");
    const kvq_gguf_tensor *t = kvq_gguf_find_tensor(g, "blk.29.ffn_down.weight");
    CHECK(t && t->type == GGML_TYPE_Q4_1 && t->ne[0] == 1536 && t->ne[1] == 576, "ffn_down");
    walk(g);
    kvq_gguf_close(g);
}

/*
 * The model loader on hostile hyperparameters (found by tests/fuzz/fuzz_gguf:
 * a 78 kB file claiming embedding_length 134217792 made it malloc 7 GB
 * before any shape check). It sized the buffer of the f32 vectors from the
 * metadata alone; now every tensor is checked first and the buffer has the
 * size the checked tensors need. Here: 512 layers of 2^30-wide embeddings
 * (32 TB of vectors by the old count: KVQ_ERR_NOMEM, or an abort under ASan)
 * over a file that holds one [64 x 2] token_embd: a shape error.
 */
static void test_model_hostile_sizes(void) {
    for (int variant = 0; variant < 2; variant++) {
        buf b = {0};
        u32(&b, GGUF_MAGIC);
        u32(&b, 3);
        u64(&b, 1);
        u64(&b, 8);
        key(&b, "general.architecture", GGUF_TYPE_STRING); str(&b, "llama");
        key(&b, "llama.block_count", GGUF_TYPE_UINT32); u32(&b, 512);
        key(&b, "llama.embedding_length", GGUF_TYPE_UINT32); u32(&b, variant ? 134217792u : 1u << 30);
        key(&b, "llama.feed_forward_length", GGUF_TYPE_UINT32); u32(&b, 1u << 30);
        key(&b, "llama.attention.head_count", GGUF_TYPE_UINT32); u32(&b, 1);
        key(&b, "llama.attention.head_count_kv", GGUF_TYPE_UINT32); u32(&b, 1);
        key(&b, "llama.attention.key_length", GGUF_TYPE_UINT32); u32(&b, 64);
        key(&b, "llama.attention.value_length", GGUF_TYPE_UINT32); u32(&b, 64);
        str(&b, "token_embd.weight"); u32(&b, 2); u64(&b, 64); u64(&b, 2); u32(&b, GGML_TYPE_F32); u64(&b, 0);
        pad_to(&b, 32);
        for (int i = 0; i < 128; i++) f32(&b, 0.01f * (float)i);
        kvq_gguf_file *g = NULL;
        CHECK_OK(kvq_gguf_open_buffer(&g, b.p, b.n));
        kvq_model *m = NULL;
        char err[256] = "";
        int rc = g ? kvq_model_from_gguf(&m, g, err, sizeof err) : -1;
        CHECK(rc == KVQ_ERR_FORMAT && m == NULL && strstr(err, "token_embd.weight has shape"),
              "hostile embedding_length: %d (%s)", rc, err);
        if (rc) kvq_gguf_close(g);
        else kvq_model_free(m);
        free(b.p);
    }
}

/* A 1-layer llama (E = 32, f32) with V embedding rows and an SPM tokenizer of n_tok tokens. */
static buf tiny_llama(int V, int n_tok) {
    static const char *const names[] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight",
                                        "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                                        "blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
                                        "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"};
    const int E = 32;
    buf b = {0};
    u32(&b, GGUF_MAGIC);
    u32(&b, 3);
    u64(&b, 11);
    u64(&b, 10);
    key(&b, "general.architecture", GGUF_TYPE_STRING); str(&b, "llama");
    key(&b, "llama.block_count", GGUF_TYPE_UINT32); u32(&b, 1);
    key(&b, "llama.embedding_length", GGUF_TYPE_UINT32); u32(&b, (uint32_t)E);
    key(&b, "llama.feed_forward_length", GGUF_TYPE_UINT32); u32(&b, (uint32_t)E);
    key(&b, "llama.attention.head_count", GGUF_TYPE_UINT32); u32(&b, 1);
    key(&b, "tokenizer.ggml.model", GGUF_TYPE_STRING); str(&b, "llama");
    key(&b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_STRING); u64(&b, (uint64_t)n_tok);
    for (int i = 0; i < n_tok; i++) {
        char t[8];
        snprintf(t, sizeof t, "%c", 'a' + i);
        str(&b, i == 0 ? "<unk>" : i == 1 ? "<s>" : t);
    }
    key(&b, "tokenizer.ggml.scores", GGUF_TYPE_ARRAY); u32(&b, GGUF_TYPE_FLOAT32); u64(&b, (uint64_t)n_tok);
    for (int i = 0; i < n_tok; i++) f32(&b, -(float)i);
    key(&b, "tokenizer.ggml.unknown_token_id", GGUF_TYPE_UINT32); u32(&b, 0);
    key(&b, "tokenizer.ggml.bos_token_id", GGUF_TYPE_UINT32); u32(&b, 1);
    uint64_t off = 0, sizes[11];
    for (int t = 0; t < 11; t++) {
        int vec = t == 1 || t == 2 || t == 7;
        uint64_t rows = t == 0 ? (uint64_t)V : vec ? 1 : (uint64_t)E;
        sizes[t] = rows * (uint64_t)E * 4;
        str(&b, names[t]);
        u32(&b, vec ? 1 : 2);
        u64(&b, (uint64_t)E);
        if (!vec) u64(&b, rows);
        u32(&b, GGML_TYPE_F32);
        u64(&b, off);
        off += (sizes[t] + 31) / 32 * 32;
    }
    pad_to(&b, 32);
    for (int t = 0; t < 11; t++) {
        for (uint64_t i = 0; i < sizes[t] / 4; i++) f32(&b, (t == 1 || t == 2 || t == 7) ? 1.0f : 0.01f);
        pad_to(&b, 32);
    }
    return b;
}

/*
 * A tokenizer with more tokens than token_embd has rows (found by
 * tests/fuzz/fuzz_gguf: a gemma3 file whose embedding was cut to 264 rows
 * kept its 274-token vocabulary; kvq_tokenize then returned id 271, which
 * kvq_session_eval refuses). Refused at load; fewer tokens than rows (a
 * padded embedding) still loads.
 */
static void test_model_vocab_rows(void) {
    const int cases[3][3] = {{8, 8, KVQ_OK}, {8, 6, KVQ_OK}, {8, 9, KVQ_ERR_FORMAT}};
    for (int i = 0; i < 3; i++) {
        buf b = tiny_llama(cases[i][0], cases[i][1]);
        kvq_gguf_file *g = NULL;
        CHECK_OK(kvq_gguf_open_buffer(&g, b.p, b.n));
        kvq_model *m = NULL;
        char err[256] = "";
        int rc = g ? kvq_model_from_gguf(&m, g, err, sizeof err) : -1;
        CHECK(rc == cases[i][2], "%d rows, %d tokens: %d (%s)", cases[i][0], cases[i][1], rc, err);
        if (rc == KVQ_OK) {
            int32_t ids[16];
            size_t n = 0;
            CHECK_OK(kvq_tokenize(m, "abcdefgh", 8, 1, 0, ids, 16, &n));
            for (size_t j = 0; j < n; j++) CHECK(ids[j] >= 0 && ids[j] < cases[i][0], "id %d", ids[j]);
            kvq_model_free(m);
        } else {
            CHECK(strstr(err, "tokens but token_embd") != NULL, "reason: %s", err);
            kvq_gguf_close(g);
        }
        free(b.p);
    }
}

int main(void) {
    test_model_hostile_sizes();
    test_model_vocab_rows();
    buf v3 = make_valid(3, 0), v2 = make_valid(2, 0), a64 = make_valid(3, 64);
    check_valid(&v3, 3, 0);
    check_valid(&v2, 2, 0);
    check_valid(&a64, 3, 64);
    test_truncations(&v3);
    test_truncations(&a64);
    test_corruptions(&v3, 1, 100000);
    test_corruptions(&a64, 2, 100000);
    test_hostile();
    test_file_io(&v3);
    test_real_model();
    free(v3.p);
    free(v2.p);
    free(a64.p);
    return tu_finish("test_gguf");
}
