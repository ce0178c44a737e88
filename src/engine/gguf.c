/*
 * GGUF reader: parse and validate once at open, then serve lookups.
 *
 * Validation strategy: a cursor over [0, size) whose every read checks the
 * remaining bytes first (`need`), so no read can pass the end; counts that
 * drive allocations (n_kv, n_tensors, array lengths) are first bounded by
 * the bytes that would be needed to hold them, so a hostile count fails as
 * KVQ_ERR_TRUNCATED before anything large is allocated.
 */
#include "gguf.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ggml_types.h"

#define GGUF_MAX_ARRAY_DEPTH 8

struct kvq_gguf_file {
    const uint8_t *base;
    uint64_t size;
    int mapped; /* 1: munmap base on close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    uint64_t n_kv, n_tensors;
    kvq_gguf_kv *kv;
    kvq_gguf_tensor *tensors;
    uint32_t *kv_sorted;     /* kv indices sorted by key */
    uint32_t *tensor_sorted; /* tensor indices sorted by name */
};

/* ------------------------------------------------------------------------ */
/* ggml type geometry (format facts, used to bound tensor sizes)            */
/* ------------------------------------------------------------------------ */
typedef struct { const char *name; uint32_t block, bytes; } type_geom;

static const type_geom GEOM[] = {
    [GGML_TYPE_F32] = {"f32", 1, 4},
    [GGML_TYPE_F16] = {"f16", 1, 2},
    [GGML_TYPE_Q4_0] = {"q4_0", 32, 18},
    [GGML_TYPE_Q4_1] = {"q4_1", 32, 20},
    [GGML_TYPE_Q5_0] = {"q5_0", 32, 22},
    [GGML_TYPE_Q5_1] = {"q5_1", 32, 24},
    [GGML_TYPE_Q8_0] = {"q8_0", 32, 34},
    [GGML_TYPE_Q8_1] = {"q8_1", 32, 36},
    [GGML_TYPE_Q2_K] = {"q2_K", 256, 84},
    [GGML_TYPE_Q3_K] = {"q3_K", 256, 110},
    [GGML_TYPE_Q4_K] = {"q4_K", 256, 144},
    [GGML_TYPE_Q5_K] = {"q5_K", 256, 176},
    [GGML_TYPE_Q6_K] = {"q6_K", 256, 210},
    [GGML_TYPE_Q8_K] = {"q8_K", 256, 292},
    [GGML_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},
    [GGML_TYPE_I8] = {"i8", 1, 1},
    [GGML_TYPE_I16] = {"i16", 1, 2},
    [GGML_TYPE_I32] = {"i32", 1, 4},
    [GGML_TYPE_I64] = {"i64", 1, 8},
    [GGML_TYPE_F64] = {"f64", 1, 8},
    [GGML_TYPE_BF16] = {"bf16", 1, 2},
};

int kvq_gguf_ggml_type_geometry(uint32_t type, uint32_t *block, uint32_t *bytes) {
    if (type >= sizeof GEOM / sizeof GEOM[0] || !GEOM[type].name) return 0;
    if (block) *block = GEOM[type].block;
    if (bytes) *bytes = GEOM[type].bytes;
    return 1;
}

const char *kvq_ggml_type_name(uint32_t type) {
    if (type == KVQ_GGUF_TYPE_CODES) return "kvq";
    if (type >= sizeof GEOM / sizeof GEOM[0] || !GEOM[type].name) return "?";
    return GEOM[type].name;
}

size_t kvq_gguf_type_size(kvq_gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *kvq_gguf_type_name(kvq_gguf_type t) {
    static const char *const names[GGUF_TYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                        "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

/* ------------------------------------------------------------------------ */
/* Bounded cursor                                                           */
/* ------------------------------------------------------------------------ */
typedef struct { const uint8_t *p; uint64_t size, pos; } cursor;

static int need(const cursor *c, uint64_t n) { return n <= c->size - c->pos ? KVQ_OK : KVQ_ERR_TRUNCATED; }

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd(cursor *c, int n, uint64_t *v) {
    int rc = need(c, (uint64_t)n);
    if (rc) return rc;
    *v = le(c->p + c->pos, n);
    c->pos += (uint64_t)n;
    return KVQ_OK;
}

static int rd_u32(cursor *c, uint32_t *v) {
    uint64_t x;
    int rc = rd(c, 4, &x);
    if (!rc) *v = (uint32_t)x;
    return rc;
}

static int rd_str(cursor *c, kvq_gguf_str *s) {
    uint64_t len;
    int rc = rd(c, 8, &len);
    if (rc) return rc;
    if ((rc = need(c, len))) return rc;
    s->ptr = (const char *)(c->p + c->pos);
    s->len = len;
    c->pos += len;
    return KVQ_OK;
}

static int valid_type(uint32_t t) { return t < GGUF_TYPE_COUNT; }

/* Scalar value of type t (not STRING/ARRAY) into kv->v. */
static int rd_scalar(cursor *c, kvq_gguf_type t, kvq_gguf_kv *kv) {
    uint64_t x;
    int n = (int)kvq_gguf_type_size(t);
    int rc = rd(c, n, &x);
    if (rc) return rc;
    switch (t) {
    case GGUF_TYPE_INT8: kv->v.i = (int8_t)(uint8_t)x; break;
    case GGUF_TYPE_INT16: kv->v.i = (int16_t)(uint16_t)x; break;
    case GGUF_TYPE_INT32: kv->v.i = (int32_t)(uint32_t)x; break;
    case GGUF_TYPE_INT64: memcpy(&kv->v.i, &x, 8); break;
    case GGUF_TYPE_FLOAT32: {
        uint32_t u = (uint32_t)x;
        float f;
        memcpy(&f, &u, 4);
        kv->v.f = f;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f, &x, 8); break;
    case GGUF_TYPE_BOOL:
        if (x > 1) return KVQ_ERR_FORMAT;
        kv->v.u = x;
        break;
    default: kv->v.u = x; break;
    }
    return KVQ_OK;
}

/*
 * Skips (and validates) the body of an array whose u32 type and u64 count
 * have been read. Fixed-size elements are bounded in one step; strings and
 * nested arrays are walked (each element consumes >= 8 bytes, so the walk
 * is bounded by the file size).
 */
static int skip_array(cursor *c, uint32_t type, uint64_t n, int depth) {
    if (!valid_type(type)) return KVQ_ERR_FORMAT;
    size_t es = kvq_gguf_type_size((kvq_gguf_type)type);
    if (es) {
        if (n > (c->size - c->pos) / es) return KVQ_ERR_TRUNCATED;
        if (type == GGUF_TYPE_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->pos + i] > 1) return KVQ_ERR_FORMAT;
        c->pos += n * es;
        return KVQ_OK;
    }
    if (type == GGUF_TYPE_STRING) {
        if (n > (c->size - c->pos) / 8) return KVQ_ERR_TRUNCATED;
        for (uint64_t i = 0; i < n; i++) {
            kvq_gguf_str s;
            int rc = rd_str(c, &s);
            if (rc) return rc;
        }
        return KVQ_OK;
    }
    /* nested arrays */
    if (depth >= GGUF_MAX_ARRAY_DEPTH) return KVQ_ERR_FORMAT;
    if (n > (c->size - c->pos) / 12) return KVQ_ERR_TRUNCATED;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t t;
        uint64_t m;
        int rc = rd_u32(c, &t);
        if (!rc) rc = rd(c, 8, &m);
        if (!rc) rc = skip_array(c, t, m, depth + 1);
        if (rc) return rc;
    }
    return KVQ_OK;
}

static int str_cmp(kvq_gguf_str a, kvq_gguf_str b) {
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = n ? memcmp(a.ptr, b.ptr, (size_t)n) : 0;
    if (r) return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

int kvq_gguf_str_eq(kvq_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* ------------------------------------------------------------------------ */
/* Sorted indices for lookup and duplicate detection                        */
/* ------------------------------------------------------------------------ */
/* Heap sort of indices by a string key: no comparator context needed, O(n log n). */
typedef kvq_gguf_str (*key_of_fn)(const kvq_gguf_file *g, uint32_t i);
static kvq_gguf_str kv_key(const kvq_gguf_file *g, uint32_t i) { return g->kv[i].key; }
static kvq_gguf_str tensor_key(const kvq_gguf_file *g, uint32_t i) { return g->tensors[i].name; }

static void sift(const kvq_gguf_file *g, key_of_fn key, uint32_t *a, size_t start, size_t end) {
    size_t root = start;
    while (2 * root + 1 < end) {
        size_t child = 2 * root + 1;
        if (child + 1 < end && str_cmp(key(g, a[child]), key(g, a[child + 1])) < 0) child++;
        if (str_cmp(key(g, a[root]), key(g, a[child])) >= 0) return;
        uint32_t t = a[root]; a[root] = a[child]; a[child] = t;
        root = child;
    }
}

static void sort_idx(const kvq_gguf_file *g, key_of_fn key, uint32_t *a, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = (uint32_t)i;
    if (n < 2) return;
    for (size_t s = n / 2; s-- > 0;) sift(g, key, a, s, n);
    for (size_t end = n - 1; end > 0; end--) {
        uint32_t t = a[0]; a[0] = a[end]; a[end] = t;
        sift(g, key, a, 0, end);
    }
}

static int has_dup(const kvq_gguf_file *g, key_of_fn key, const uint32_t *a, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (str_cmp(key(g, a[i - 1]), key(g, a[i])) == 0) return 1;
    return 0;
}

static long find_sorted(const kvq_gguf_file *g, key_of_fn key, const uint32_t *a, size_t n, const char *name) {
    kvq_gguf_str s = {name, strlen(name)};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = str_cmp(key(g, a[mid]), s);
        if (r == 0) return (long)a[mid];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Parse                                                                    */
/* ------------------------------------------------------------------------ */
static int parse(kvq_gguf_file *g) {
    cursor c = {g->base, g->size, 0};
    uint32_t magic;
    int rc;
    if ((rc = rd_u32(&c, &magic))) return rc;
    if (magic != GGUF_MAGIC) return KVQ_ERR_FORMAT;
    if ((rc = rd_u32(&c, &g->version))) return rc;
    if (g->version != 2 && g->version != 3) return KVQ_ERR_FORMAT; /* v1 used 32-bit counts */
    if ((rc = rd(&c, 8, &g->n_tensors)) || (rc = rd(&c, 8, &g->n_kv))) return rc;
    /* each kv needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor >= 8 + 4 + 8 + 4 + 8 */
    if (g->n_kv > (c.size - c.pos) / 13) return KVQ_ERR_TRUNCATED;
    if (g->n_tensors > (c.size - c.pos) / 32) return KVQ_ERR_TRUNCATED;
    if (g->n_kv > UINT32_MAX || g->n_tensors > UINT32_MAX) return KVQ_ERR_FORMAT;

    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->kv_sorted = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv_sorted);
    if (!g->kv || !g->kv_sorted) return KVQ_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        kvq_gguf_kv *kv = &g->kv[i];
        uint32_t t;
        uint64_t rec = c.pos;
        kv->raw = c.p + rec;
        if ((rc = rd_str(&c, &kv->key)) || (rc = rd_u32(&c, &t))) return rc;
        if (!valid_type(t)) return KVQ_ERR_FORMAT;
        kv->type = (kvq_gguf_type)t;
        if (t == GGUF_TYPE_STRING) {
            if ((rc = rd_str(&c, &kv->v.s))) return rc;
        } else if (t == GGUF_TYPE_ARRAY) {
            uint32_t et;
            uint64_t n;
            if ((rc = rd_u32(&c, &et)) || (rc = rd(&c, 8, &n))) return rc;
            uint64_t start = c.pos;
            if ((rc = skip_array(&c, et, n, 0))) return rc;
            kv->v.arr.type = (kvq_gguf_type)et;
            kv->v.arr.n = n;
            kv->v.arr.data = c.p + start;
            kv->v.arr.bytes = c.pos - start;
        } else if ((rc = rd_scalar(&c, kv->type, kv))) {
            return rc;
        }
        kv->raw_bytes = c.pos - rec;
    }
    sort_idx(g, kv_key, g->kv_sorted, (size_t)g->n_kv);
    if (has_dup(g, kv_key, g->kv_sorted, (size_t)g->n_kv)) return KVQ_ERR_FORMAT;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const kvq_gguf_kv *al = kvq_gguf_find_kv(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32) return KVQ_ERR_FORMAT;
        uint64_t a = al->v.u;
        if (a == 0 || (a & (a - 1)) || a > (1u << 30)) return KVQ_ERR_FORMAT;
        g->alignment = (uint32_t)a;
    }

    if (g->n_tensors > (c.size - c.pos) / 32) return KVQ_ERR_TRUNCATED;
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    g->tensor_sorted = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensor_sorted);
    if (!g->tensors || !g->tensor_sorted) return KVQ_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kvq_gguf_tensor *t = &g->tensors[i];
        if ((rc = rd_str(&c, &t->name)) || (rc = rd_u32(&c, &t->n_dims))) return rc;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) return KVQ_ERR_FORMAT;
        uint64_t n_elems = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            if ((rc = rd(&c, 8, &t->ne[d]))) return rc;
            if (t->ne[d] > (uint64_t)INT64_MAX) return KVQ_ERR_FORMAT;
            if (t->ne[d] && n_elems > (uint64_t)INT64_MAX / t->ne[d]) return KVQ_ERR_FORMAT;
            n_elems *= t->ne[d];
        }
        t->n_elems = n_elems;
        if ((rc = rd_u32(&c, &t->type)) || (rc = rd(&c, 8, &t->offset))) return rc;
        if (t->offset % g->alignment) return KVQ_ERR_FORMAT;
        uint32_t block, bytes;
        if (kvq_gguf_ggml_type_geometry(t->type, &block, &bytes)) {
            if (t->ne[0] % block) return KVQ_ERR_FORMAT;
            uint64_t nblocks = n_elems / block;
            if (nblocks > UINT64_MAX / bytes) return KVQ_ERR_FORMAT;
            t->n_bytes = nblocks * bytes;
            t->size_known = 1;
        }
    }
    sort_idx(g, tensor_key, g->tensor_sorted, (size_t)g->n_tensors);
    if (has_dup(g, tensor_key, g->tensor_sorted, (size_t)g->n_tensors)) return KVQ_ERR_FORMAT;

    /* data section: aligned end of the header */
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad; /* c.pos <= size < 2^63: no overflow */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        kvq_gguf_tensor *t = &g->tensors[i];
        if (!t->size_known) continue;
        if (g->data_offset > g->size) return KVQ_ERR_TRUNCATED;
        uint64_t avail = g->size - g->data_offset;
        if (t->offset > avail || t->n_bytes > avail - t->offset) return KVQ_ERR_TRUNCATED;
        t->data = g->base + g->data_offset + t->offset;
    }
    return KVQ_OK;
}

const void *kvq_gguf_tensor_span(const kvq_gguf_file *g, const kvq_gguf_tensor *t, uint64_t n_bytes) {
    if (!g || !t || g->data_offset > g->size) return NULL;
    uint64_t avail = g->size - g->data_offset;
    if (t->offset > avail || n_bytes > avail - t->offset) return NULL;
    return g->base + g->data_offset + t->offset;
}

static void release(kvq_gguf_file *g) {
    if (!g) return;
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->tensor_sorted);
    if (g->mapped && g->base) munmap((void *)g->base, (size_t)g->size);
    free(g);
}

int kvq_gguf_open_buffer(kvq_gguf_file **out, const void *data, size_t size) {
    if (!out || (!data && size)) return KVQ_ERR_NULL;
    kvq_gguf_file *g = calloc(1, sizeof *g);
    if (!g) return KVQ_ERR_NOMEM;
    static const uint8_t empty[1] = {0};
    g->base = data ? data : empty;
    g->size = size;
    int rc = parse(g);
    if (rc) { release(g); return rc; }
    *out = g;
    return KVQ_OK;
}

int kvq_gguf_open(kvq_gguf_file **out, const char *path) {
    if (!out || !path) return KVQ_ERR_NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KVQ_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return KVQ_ERR_IO; }
    if (st.st_size <= 0) { close(fd); return KVQ_ERR_TRUNCATED; } /* mmap of 0 bytes fails */
    if ((uint64_t)st.st_size > SIZE_MAX) { close(fd); return KVQ_ERR_OVERFLOW; }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return KVQ_ERR_IO;
    kvq_gguf_file *g = calloc(1, sizeof *g);
    if (!g) { munmap(p, (size_t)st.st_size); return KVQ_ERR_NOMEM; }
    g->base = p;
    g->size = (uint64_t)st.st_size;
    g->mapped = 1;
    int rc = parse(g);
    if (rc) { release(g); return rc; }
    *out = g;
    return KVQ_OK;
}

void kvq_gguf_close(kvq_gguf_file *g) { release(g); }

void kvq_gguf_prefault(const kvq_gguf_file *g) {
    if (!g || !g->mapped) return;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)g->base, (size_t)g->size, MADV_POPULATE_READ) == 0) return;
#endif
    volatile uint8_t sink = 0;
    for (uint64_t off = 0; off < g->size; off += 4096) sink ^= g->base[off];
    (void)sink;
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */
/* ------------------------------------------------------------------------ */
uint32_t kvq_gguf_version(const kvq_gguf_file *g) { return g->version; }
uint32_t kvq_gguf_alignment(const kvq_gguf_file *g) { return g->alignment; }
uint64_t kvq_gguf_data_offset(const kvq_gguf_file *g) { return g->data_offset; }
uint64_t kvq_gguf_file_size(const kvq_gguf_file *g) { return g->size; }
size_t kvq_gguf_n_kv(const kvq_gguf_file *g) { return (size_t)g->n_kv; }
size_t kvq_gguf_n_tensors(const kvq_gguf_file *g) { return (size_t)g->n_tensors; }

const kvq_gguf_kv *kvq_gguf_kv_at(const kvq_gguf_file *g, size_t i) { return i < g->n_kv ? &g->kv[i] : NULL; }
const kvq_gguf_tensor *kvq_gguf_tensor_at(const kvq_gguf_file *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const kvq_gguf_kv *kvq_gguf_find_kv(const kvq_gguf_file *g, const char *key) {
    if (!g || !key) return NULL;
    long i = find_sorted(g, kv_key, g->kv_sorted, (size_t)g->n_kv, key);
    return i < 0 ? NULL : &g->kv[i];
}

const kvq_gguf_tensor *kvq_gguf_find_tensor(const kvq_gguf_file *g, const char *name) {
    if (!g || !name) return NULL;
    long i = find_sorted(g, tensor_key, g->tensor_sorted, (size_t)g->n_tensors, name);
    return i < 0 ? NULL : &g->tensors[i];
}

static int is_unsigned(kvq_gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}
static int is_signed(kvq_gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* Integer value of a scalar kv as int64 (KVQ_ERR_FORMAT if not integer or > INT64_MAX). */
static int kv_int(const kvq_gguf_kv *kv, int64_t *out) {
    if (is_unsigned(kv->type)) {
        if (kv->v.u > (uint64_t)INT64_MAX) return KVQ_ERR_FORMAT;
        *out = (int64_t)kv->v.u;
        return KVQ_OK;
    }
    if (is_signed(kv->type)) { *out = kv->v.i; return KVQ_OK; }
    return KVQ_ERR_FORMAT;
}

int kvq_gguf_get_i64(const kvq_gguf_file *g, const char *key, int64_t *out) {
    const kvq_gguf_kv *kv = kvq_gguf_find_kv(g, key);
    if (!kv) return GGUF_NOT_FOUND;
    int64_t v;
    int rc = kv_int(kv, &v);
    if (rc) return rc;
    *out = v;
    return KVQ_OK;
}

int kvq_gguf_get_u32(const kvq_gguf_file *g, const char *key, uint32_t *out) {
    int64_t v;
    int rc = kvq_gguf_get_i64(g, key, &v);
    if (rc) return rc;
    if (v < 0 || v > (int64_t)UINT32_MAX) return KVQ_ERR_FORMAT;
    *out = (uint32_t)v;
    return KVQ_OK;
}

int kvq_gguf_get_f32(const kvq_gguf_file *g, const char *key, float *out) {
    const kvq_gguf_kv *kv = kvq_gguf_find_kv(g, key);
    if (!kv) return GGUF_NOT_FOUND;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) {
        *out = (float)kv->v.f;
        return KVQ_OK;
    }
    int64_t v;
    int rc = kv_int(kv, &v);
    if (rc) return rc;
    *out = (float)v;
    return KVQ_OK;
}

int kvq_gguf_get_bool(const kvq_gguf_file *g, const char *key, int *out) {
    const kvq_gguf_kv *kv = kvq_gguf_find_kv(g, key);
    if (!kv) return GGUF_NOT_FOUND;
    if (kv->type == GGUF_TYPE_BOOL) { *out = (int)kv->v.u; return KVQ_OK; }
    int64_t v;
    int rc = kv_int(kv, &v);
    if (rc) return rc;
    *out = v != 0;
    return KVQ_OK;
}

int kvq_gguf_get_str(const kvq_gguf_file *g, const char *key, kvq_gguf_str *out) {
    const kvq_gguf_kv *kv = kvq_gguf_find_kv(g, key);
    if (!kv) return GGUF_NOT_FOUND;
    if (kv->type != GGUF_TYPE_STRING) return KVQ_ERR_FORMAT;
    *out = kv->v.s;
    return KVQ_OK;
}

int kvq_gguf_get_cstr(const kvq_gguf_file *g, const char *key, char *buf, size_t cap) {
    kvq_gguf_str s;
    if (!buf || !cap) return KVQ_ERR_INVALID_ARG;
    int rc = kvq_gguf_get_str(g, key, &s);
    if (rc) return rc;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n) memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return KVQ_OK;
}

int kvq_gguf_get_arr(const kvq_gguf_file *g, const char *key, const kvq_gguf_kv **out) {
    const kvq_gguf_kv *kv = kvq_gguf_find_kv(g, key);
    if (!kv) return GGUF_NOT_FOUND;
    if (kv->type != GGUF_TYPE_ARRAY) return KVQ_ERR_FORMAT;
    *out = kv;
    return KVQ_OK;
}

/* Element i of a fixed-size numeric array as a scalar kv. */
static int arr_elem(const kvq_gguf_kv *kv, uint64_t i, kvq_gguf_kv *e) {
    if (!kv || kv->type != GGUF_TYPE_ARRAY) return KVQ_ERR_FORMAT;
    size_t es = kvq_gguf_type_size(kv->v.arr.type);
    if (!es) return KVQ_ERR_FORMAT;
    if (i >= kv->v.arr.n) return KVQ_ERR_INVALID_ARG;
    cursor c = {kv->v.arr.data + i * es, es, 0};
    memset(e, 0, sizeof *e);
    e->type = kv->v.arr.type;
    return rd_scalar(&c, e->type, e);
}

int kvq_gguf_arr_i64(const kvq_gguf_kv *kv, uint64_t i, int64_t *out) {
    kvq_gguf_kv e;
    int rc = arr_elem(kv, i, &e);
    if (rc) return rc;
    if (e.type == GGUF_TYPE_BOOL) { *out = (int64_t)e.v.u; return KVQ_OK; }
    int64_t v;
    if ((rc = kv_int(&e, &v))) return rc;
    *out = v;
    return KVQ_OK;
}

int kvq_gguf_arr_f32(const kvq_gguf_kv *kv, uint64_t i, float *out) {
    kvq_gguf_kv e;
    int rc = arr_elem(kv, i, &e);
    if (rc) return rc;
    if (e.type == GGUF_TYPE_FLOAT32 || e.type == GGUF_TYPE_FLOAT64) { *out = (float)e.v.f; return KVQ_OK; }
    if (e.type == GGUF_TYPE_BOOL) { *out = (float)e.v.u; return KVQ_OK; }
    int64_t v;
    if ((rc = kv_int(&e, &v))) return rc;
    *out = (float)v;
    return KVQ_OK;
}

int kvq_gguf_arr_strings(const kvq_gguf_kv *kv, kvq_gguf_str *out, uint64_t n) {
    if (!kv || !out) return KVQ_ERR_NULL;
    if (kv->type != GGUF_TYPE_ARRAY || kv->v.arr.type != GGUF_TYPE_STRING) return KVQ_ERR_FORMAT;
    if (n != kv->v.arr.n) return KVQ_ERR_INVALID_ARG;
    /* already validated at open: the walk stays inside [data, data + bytes) */
    cursor c = {kv->v.arr.data, kv->v.arr.bytes, 0};
    for (uint64_t i = 0; i < n; i++) {
        int rc = rd_str(&c, &out[i]);
        if (rc) return rc;
    }
    return KVQ_OK;
}
