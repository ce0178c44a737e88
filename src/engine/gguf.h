/*
 * GGUF reader (versions 2 and 3) over a read-only memory map.
 *
 * File layout (all little-endian):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x   { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 kvq_ggml_type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_offset + offset (offset % alignment == 0)
 * A string is u64 length + bytes (no NUL). An array is u32 element type +
 * u64 count + elements (arrays of strings and nested arrays allowed).
 *
 * Everything is validated when the file is opened: every count, length and
 * offset is checked against the bytes that are really there with
 * overflow-safe arithmetic, so a truncated or hostile file gives
 * KVQ_ERR_TRUNCATED or KVQ_ERR_FORMAT and never a read out of bounds. After a
 * successful open, every accessor below is safe on any key/tensor it returns.
 *
 * Strings returned (kvq_gguf_str) point into the mapping and are NOT
 * NUL-terminated; they live as long as the kvq_gguf_file.
 */
#ifndef KVQ_ENGINE_GGUF_H
#define KVQ_ENGINE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"
#include "kvq_engine.h" /* the public kvq_gguf_open, kvq_gguf_close, kvq_ggml_type_name */

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
/* Tensor type id of kvq-coded weights (docs/FORMAT.md "Coded weights in
 * GGUF"): block-major codec records of the spec in kvq.weights.spec; sized
 * by the model loader, not by this reader. */
#define KVQ_GGUF_TYPE_CODES 0x4B56u
/* Returned (positive) by the kvq_gguf_get_* helpers when a key is absent. */
#define GGUF_NOT_FOUND 1

typedef enum kvq_gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} kvq_gguf_type;

typedef struct kvq_gguf_str {
    const char *ptr; /* into the mapping, not NUL-terminated */
    uint64_t len;
} kvq_gguf_str;

/* One metadata key/value. Scalars are decoded; arrays point at raw data. */
typedef struct kvq_gguf_kv {
    kvq_gguf_str key;
    kvq_gguf_type type;
    const uint8_t *raw;  /* the whole record as stored (key, type, value): what a writer copies */
    uint64_t raw_bytes;
    union {
        uint64_t u; /* UINT8..UINT64 and BOOL (0/1) */
        int64_t i;  /* INT8..INT64 (sign-extended) */
        double f;   /* FLOAT32/FLOAT64 */
        kvq_gguf_str s; /* STRING */
        struct {
            kvq_gguf_type type;     /* element type */
            uint64_t n;         /* element count */
            const uint8_t *data; /* first element (unaligned, little-endian) */
            uint64_t bytes;     /* bytes spanned by the elements */
        } arr;
    } v;
} kvq_gguf_kv;

/* One tensor. ne[0] is the innermost (contiguous) dimension. */
typedef struct kvq_gguf_tensor {
    kvq_gguf_str name;
    uint32_t n_dims;         /* 1..GGUF_MAX_DIMS */
    uint64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;           /* ggml type id (kvq_ggml_types.h) */
    uint64_t offset;         /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;        /* 0 if the type's size is unknown to this reader */
    int size_known;          /* 1 if type is a ggml type whose block size is known */
    const void *data;        /* into the mapping; NULL if !size_known */
} kvq_gguf_tensor;

typedef struct kvq_gguf_file kvq_gguf_file;

/* Maps and parses a file. KVQ_ERR_IO if it cannot be opened/mapped. */
int kvq_gguf_open(kvq_gguf_file **out, const char *path);
/*
 * Parses a buffer already in memory (borrowed: it must outlive the
 * kvq_gguf_file and is never written). Same validation as kvq_gguf_open.
 */
int kvq_gguf_open_buffer(kvq_gguf_file **out, const void *data, size_t size);
/* Unmaps and frees (NULL allowed). */
void kvq_gguf_close(kvq_gguf_file *g);
/*
 * Maps every page of a mapped file now (MADV_POPULATE_READ, else one read
 * per page), so that the first forward pass does not pay the page faults.
 * A hint: errors are ignored.
 */
void kvq_gguf_prefault(const kvq_gguf_file *g);

uint32_t kvq_gguf_version(const kvq_gguf_file *g);
uint32_t kvq_gguf_alignment(const kvq_gguf_file *g);
/* Offset of the tensor data section from the start of the file. */
uint64_t kvq_gguf_data_offset(const kvq_gguf_file *g);
uint64_t kvq_gguf_file_size(const kvq_gguf_file *g);

size_t kvq_gguf_n_kv(const kvq_gguf_file *g);
const kvq_gguf_kv *kvq_gguf_kv_at(const kvq_gguf_file *g, size_t i);
/* Key lookup (exact, case-sensitive); NULL if absent. O(log n). */
const kvq_gguf_kv *kvq_gguf_find_kv(const kvq_gguf_file *g, const char *key);

size_t kvq_gguf_n_tensors(const kvq_gguf_file *g);
const kvq_gguf_tensor *kvq_gguf_tensor_at(const kvq_gguf_file *g, size_t i);
/* Tensor lookup by name; NULL if absent. O(log n). */
const kvq_gguf_tensor *kvq_gguf_find_tensor(const kvq_gguf_file *g, const char *name);

/*
 * Typed getters. Return KVQ_OK, GGUF_NOT_FOUND (key absent, *out untouched)
 * or KVQ_ERR_FORMAT (present with an incompatible type or a value that does
 * not fit). Integer getters accept any integer type whose value fits;
 * kvq_gguf_get_f32 accepts FLOAT32/FLOAT64 and integers.
 */
int kvq_gguf_get_u32(const kvq_gguf_file *g, const char *key, uint32_t *out);
int kvq_gguf_get_i64(const kvq_gguf_file *g, const char *key, int64_t *out);
int kvq_gguf_get_f32(const kvq_gguf_file *g, const char *key, float *out);
int kvq_gguf_get_bool(const kvq_gguf_file *g, const char *key, int *out);
int kvq_gguf_get_str(const kvq_gguf_file *g, const char *key, kvq_gguf_str *out);
/* Array of any element type: *out is the kv (type ARRAY). */
int kvq_gguf_get_arr(const kvq_gguf_file *g, const char *key, const kvq_gguf_kv **out);

/* Same as kvq_gguf_get_str, copied into buf (NUL-terminated, truncated to cap-1). */
int kvq_gguf_get_cstr(const kvq_gguf_file *g, const char *key, char *buf, size_t cap);

/* 1 if s equals the C string c. */
int kvq_gguf_str_eq(kvq_gguf_str s, const char *c);

/* Size in bytes of one scalar of type t (0 for STRING/ARRAY/unknown). */
size_t kvq_gguf_type_size(kvq_gguf_type t);
/* Name of a value type ("u32", "str", ...). */
const char *kvq_gguf_type_name(kvq_gguf_type t);

/*
 * Array element access. Numeric: element i converted to the requested type
 * (KVQ_ERR_FORMAT if the element type is not numeric/bool or does not fit,
 * KVQ_ERR_INVALID_ARG if i is out of range).
 */
int kvq_gguf_arr_i64(const kvq_gguf_kv *kv, uint64_t i, int64_t *out);
int kvq_gguf_arr_f32(const kvq_gguf_kv *kv, uint64_t i, float *out);
/*
 * Strings of an array of strings, in order, written to out[0..n) (n must be
 * the array's count). O(total bytes). KVQ_ERR_FORMAT if not a string array.
 */
int kvq_gguf_arr_strings(const kvq_gguf_kv *kv, kvq_gguf_str *out, uint64_t n);

/*
 * The data of a tensor whose type this reader does not size (kvq-coded
 * weights): n_bytes from the offset, checked against the file; NULL if they
 * are not all there.
 */
const void *kvq_gguf_tensor_span(const kvq_gguf_file *g, const kvq_gguf_tensor *t, uint64_t n_bytes);

/* Known ggml type ids' block geometry (used for bounds checks). Returns 0 if
 * unknown, else sets *block (elements per block) and *bytes (bytes per block). */
int kvq_gguf_ggml_type_geometry(uint32_t type, uint32_t *block, uint32_t *bytes);
/* Name of a ggml type ("q4_K"), "?" if unknown. */
const char *kvq_ggml_type_name(uint32_t type);

#endif
