/*
 * kvq_model_save: the model as a GGUF v3 file (docs/FORMAT.md "Coded
 * weights in GGUF"). Metadata: every record of the source file byte for byte
 * (but earlier kvq.weights.* keys), then kvq.weights.version / .spec /
 * .seed when weights are coded. Tensors: in the source order; coded ones
 * (kvq_model_quantize_weights) with type KVQ_GGUF_TYPE_CODES, their logical
 * shape and their codes as data; the others copied as stored. Written to
 * PATH.tmp, then renamed over PATH, so a failure never leaves a half file
 * under PATH.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errfmt.h"
#include "gguf.h"
#include "model.h"
#include "wmat.h"

#define fail kvq_errf

typedef struct {
    FILE *f;
    uint64_t pos;
    int bad;
} out_file;

static void put(out_file *o, const void *p, size_t n) {
    if (o->bad || !n) return;
    if (fwrite(p, 1, n, o->f) != n) o->bad = 1;
    o->pos += n;
}
static void put_u32(out_file *o, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(o, b, 4);
}
static void put_u64(out_file *o, uint64_t v) {
    put_u32(o, (uint32_t)v);
    put_u32(o, (uint32_t)(v >> 32));
}
static void put_str(out_file *o, const char *s, size_t n) {
    put_u64(o, n);
    put(o, s, n);
}
static void pad_to(out_file *o, uint32_t align) {
    static const uint8_t zero[64] = {0};
    while (o->pos % align) {
        size_t n = align - o->pos % align;
        put(o, zero, n < sizeof zero ? n : sizeof zero);
    }
}

/* 1 if the codec spec of "SPEC[@B]" needs calibration rows. */
static int spec_is_calibrated(const char *wspec) {
    char spec[64];
    int block = 0, needs = 0;
    if (kvq_wmat_parse_spec(wspec, spec, sizeof spec, &block, NULL, 0)) return 0;
    return kvq_spec_needs_calibration(spec, &needs) == KVQ_OK && needs;
}

static int is_kvq_key(kvq_gguf_str k) { return k.len >= 12 && !memcmp(k.ptr, "kvq.weights.", 12); }

/* The coded matrix of tensor `name`, NULL if stored as is. */
static const kvq_wmat *coded_of(const kvq_model *m, kvq_gguf_str name) {
    for (int i = 0; i < m->n_wmats; i++)
        if (kvq_gguf_str_eq(name, m->wmat_names[i])) return m->wmats[i];
    return NULL;
}

int kvq_model_save(const kvq_model *m, const char *path, char *err, size_t cap) {
    if (!m || !path) return KVQ_ERR_NULL;
    const kvq_gguf_file *g = m->gguf;
    size_t nt = kvq_gguf_n_tensors(g), nkv = kvq_gguf_n_kv(g), kept_kv = 0;
    for (size_t i = 0; i < nkv; i++) kept_kv += !is_kvq_key(kvq_gguf_kv_at(g, i)->key);
    for (size_t i = 0; i < nt; i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        if (!coded_of(m, t->name) && !t->size_known && t->type != KVQ_GGUF_TYPE_CODES)
            return fail(err, cap, KVQ_ERR_UNSUPPORTED, "tensor %.*s has a type this writer cannot size (%u)",
                        (int)t->name.len, t->name.ptr, t->type);
    }
    for (int i = 0; i < m->n_wmats; i++)
        if (m->wmats[i]->nplans > 1 || spec_is_calibrated(m->weights_spec))
            return fail(err, cap, KVQ_ERR_UNSUPPORTED,
                        "weights %s are calibrated (plans fitted to the source weights): they can be used at load "
                        "time (--weights) but not saved", m->weights_spec);
    uint32_t align = kvq_gguf_alignment(g);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    out_file o = {fopen(tmp, "wb"), 0, 0};
    if (!o.f) {
        int e = errno;
        free(tmp);
        return fail(err, cap, KVQ_ERR_IO, "%s: %s", path, strerror(e));
    }
    int coded = m->n_wmats > 0;
    put_u32(&o, GGUF_MAGIC);
    put_u32(&o, 3);
    put_u64(&o, nt);
    put_u64(&o, kept_kv + (coded ? 3 : 0));
    for (size_t i = 0; i < nkv; i++) {
        const kvq_gguf_kv *kv = kvq_gguf_kv_at(g, i);
        if (!is_kvq_key(kv->key)) put(&o, kv->raw, (size_t)kv->raw_bytes);
    }
    if (coded) {
        put_str(&o, "kvq.weights.version", 19);
        put_u32(&o, GGUF_TYPE_UINT32);
        put_u32(&o, 1);
        put_str(&o, "kvq.weights.spec", 16);
        put_u32(&o, GGUF_TYPE_STRING);
        put_str(&o, m->weights_spec, strlen(m->weights_spec));
        put_str(&o, "kvq.weights.seed", 16);
        put_u32(&o, GGUF_TYPE_UINT64);
        put_u64(&o, m->weights_seed);
    }
    /* tensor infos, offsets packed in order */
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        const kvq_wmat *w = coded_of(m, t->name);
        uint64_t n = w ? kvq_wmat_code_bytes(w) : t->n_bytes;
        put_str(&o, t->name.ptr, (size_t)t->name.len);
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, t->ne[d]);
        put_u32(&o, w ? KVQ_GGUF_TYPE_CODES : t->type);
        put_u64(&o, off);
        off += n;
        off += (align - off % align) % align;
    }
    pad_to(&o, align);
    uint64_t data0 = o.pos;
    for (size_t i = 0; i < nt && !o.bad; i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        const kvq_wmat *w = coded_of(m, t->name);
        if (w) put(&o, w->codes, kvq_wmat_code_bytes(w));
        else if (t->type == KVQ_GGUF_TYPE_CODES) { /* re-saving a loaded coded file: the matrix is in m */
            o.bad = 2;
            break;
        } else put(&o, t->data, (size_t)t->n_bytes);
        if ((o.pos - data0) % align) pad_to(&o, align);
    }
    int bad = o.bad;
    if (fclose(o.f) && !bad) bad = 1;
    if (!bad && rename(tmp, path)) bad = 1;
    if (bad) {
        int e = errno;
        remove(tmp);
        free(tmp);
        if (bad == 2) return fail(err, cap, KVQ_ERR_STATE, "coded tensor without its matrix");
        return fail(err, cap, KVQ_ERR_IO, "%s: %s", path, strerror(e));
    }
    free(tmp);
    return KVQ_OK;
}
