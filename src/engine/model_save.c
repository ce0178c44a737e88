/*
 * kvq_model_save: the model as a GGUF v3 file (docs/FORMAT.md "Coded
 * weights in GGUF"). Metadata: every record of the source file byte for byte
 * (but earlier kvq.weights.* keys), then kvq.weights.version / .spec /
 * .seed when weights are coded. Tensors: in the source order; coded ones
 * (kvq_model_quantize_weights) with type KVQ_GGUF_TYPE_CODES, their logical
 * shape and their codes as data, each calibrated one followed by its stats
 * tensor (version 3: f16 [stored values per block position, block
 * positions], kvq_wmat_stats16; version 2, when a matrix holds f32 stats
 * read from a version-2 file: f32, the plans' kvq_plan_stats; a source's
 * stats tensors are not copied, they are written anew from the plans); the
 * others copied as stored. Written to
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
    size_t nt = kvq_gguf_n_tensors(g), nkv = kvq_gguf_n_kv(g), kept_kv = 0, n_out = 0, stats_max = 0;
    for (size_t i = 0; i < nkv; i++) kept_kv += !is_kvq_key(kvq_gguf_kv_at(g, i)->key);
    int calibrated = 0, all16 = 1; /* version 3 (f16 stats) unless a matrix holds f32 stats (a version-2 file) */
    for (size_t i = 0; i < nt; i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        const kvq_wmat *w = coded_of(m, t->name);
        if (kvq_is_stats_tensor(t->name.ptr, (size_t)t->name.len)) continue; /* written anew after its matrix */
        if (!w && !t->size_known && t->type != KVQ_GGUF_TYPE_CODES)
            return fail(err, cap, KVQ_ERR_UNSUPPORTED, "tensor %.*s has a type this writer cannot size (%u)",
                        (int)t->name.len, t->name.ptr, t->type);
        char sname[80];
        if (w && w->calibrated && kvq_stats_tensor_name(t->name.ptr, (size_t)t->name.len, sname, sizeof sname))
            return fail(err, cap, KVQ_ERR_UNSUPPORTED, "tensor %.*s: name too long for its stats tensor",
                        (int)t->name.len, t->name.ptr);
        n_out += 1 + (w && w->calibrated);
        if (w && w->calibrated) {
            calibrated = 1;
            all16 &= w->stats16;
            if (kvq_wmat_stats_floats(w) > stats_max) stats_max = kvq_wmat_stats_floats(w);
        }
    }
    float *stats = calibrated ? malloc(sizeof(float) * stats_max) : NULL;
    if (calibrated && !stats) return fail(err, cap, KVQ_ERR_NOMEM, "out of memory");
    uint32_t align = kvq_gguf_alignment(g);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) { free(stats); return fail(err, cap, KVQ_ERR_NOMEM, "out of memory"); }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    out_file o = {fopen(tmp, "wb"), 0, 0};
    if (!o.f) {
        int e = errno;
        free(tmp);
        free(stats);
        return fail(err, cap, KVQ_ERR_IO, "%s: %s", path, strerror(e));
    }
    int coded = m->n_wmats > 0;
    put_u32(&o, GGUF_MAGIC);
    put_u32(&o, 3);
    put_u64(&o, n_out);
    put_u64(&o, kept_kv + (coded ? 3 : 0));
    for (size_t i = 0; i < nkv; i++) {
        const kvq_gguf_kv *kv = kvq_gguf_kv_at(g, i);
        if (!is_kvq_key(kv->key)) put(&o, kv->raw, (size_t)kv->raw_bytes);
    }
    if (coded) {
        put_str(&o, "kvq.weights.version", 19);
        put_u32(&o, GGUF_TYPE_UINT32);
        put_u32(&o, calibrated ? (all16 ? 3 : 2) : 1); /* 2, 3: calibrated plans, from f32 / f16 stats tensors */
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
        if (kvq_is_stats_tensor(t->name.ptr, (size_t)t->name.len)) continue;
        uint64_t n = w ? kvq_wmat_code_bytes(w) : t->n_bytes;
        put_str(&o, t->name.ptr, (size_t)t->name.len);
        put_u32(&o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(&o, t->ne[d]);
        put_u32(&o, w ? KVQ_GGUF_TYPE_CODES : t->type);
        put_u64(&o, off);
        off += n;
        off += (align - off % align) % align;
        if (w && w->calibrated) { /* its stats: version 3 f16 [stored per block, nb], version 2 f32 [per block, nb] */
            char sname[80];
            const size_t nv = all16 ? kvq_wmat_stored16(w) : kvq_wmat_stats_floats(w);
            (void)kvq_stats_tensor_name(t->name.ptr, (size_t)t->name.len, sname, sizeof sname); /* checked above */
            put_str(&o, sname, strlen(sname));
            put_u32(&o, 2);
            put_u64(&o, (uint64_t)(nv / (size_t)w->nb));
            put_u64(&o, (uint64_t)w->nb);
            put_u32(&o, all16 ? GGML_TYPE_F16 : GGML_TYPE_F32);
            put_u64(&o, off);
            off += (all16 ? 2 : 4) * (uint64_t)nv;
            off += (align - off % align) % align;
        }
    }
    pad_to(&o, align);
    uint64_t data0 = o.pos;
    for (size_t i = 0; i < nt && !o.bad; i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        const kvq_wmat *w = coded_of(m, t->name);
        if (kvq_is_stats_tensor(t->name.ptr, (size_t)t->name.len)) continue;
        if (w) put(&o, w->codes, kvq_wmat_code_bytes(w));
        else if (t->type == KVQ_GGUF_TYPE_CODES) { /* re-saving a loaded coded file: the matrix is in m */
            o.bad = 2;
            break;
        } else put(&o, t->data, (size_t)t->n_bytes);
        if ((o.pos - data0) % align) pad_to(&o, align);
        if (w && w->calibrated && all16) {
            size_t n16 = kvq_wmat_stored16(w);
            uint16_t *h = (uint16_t *)stats; /* stats_max floats hold n16 halves */
            if (kvq_wmat_stats16(w, h, n16)) { o.bad = 2; break; }
            for (size_t k = 0; k < n16; k++) { /* little-endian f16, as the rest of the file */
                uint8_t le[2] = {(uint8_t)(h[k] & 0xff), (uint8_t)(h[k] >> 8)};
                put(&o, le, 2);
            }
            if ((o.pos - data0) % align) pad_to(&o, align);
        } else if (w && w->calibrated) {
            size_t ns = kvq_wmat_stats_floats(w);
            if (kvq_wmat_stats(w, stats, ns)) { o.bad = 2; break; }
            for (size_t k = 0; k < ns; k++) { /* little-endian f32, as the rest of the file */
                uint32_t u;
                memcpy(&u, &stats[k], 4);
                put_u32(&o, u);
            }
            if ((o.pos - data0) % align) pad_to(&o, align);
        }
    }
    int bad = o.bad;
    free(stats);
    if (fclose(o.f) && !bad) bad = 1;
    if (!bad && rename(tmp, path)) bad = 1;
    if (bad) {
        int e = errno;
        remove(tmp);
        free(tmp);
        if (bad == 2) return fail(err, cap, KVQ_ERR_STATE, "coded tensor without its matrix, or its plans' stats");
        return fail(err, cap, KVQ_ERR_IO, "%s: %s", path, strerror(e));
    }
    free(tmp);
    return KVQ_OK;
}
