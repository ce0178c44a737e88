/*
 * GGUF reader and model loader on arbitrary bytes.
 *
 * kvq_gguf_open_buffer parses the input; when it succeeds every accessor is
 * walked over every key and tensor (typed getters, array elements, strings,
 * tensor data bounds, the public inspection API), then kvq_model_from_gguf
 * runs the model loader's checks on it. A model that loads has its
 * tokenizer exercised and, when it is small, one forward pass of two tokens.
 * Nothing may crash, leak or read out of bounds; every status must be a
 * documented code.
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "fuzz_common.h"
#include "kvq_engine.h"

/* Key lookups through a NUL-terminated copy (keys holding a NUL are skipped). */
static void walk_kv(const kvq_gguf_file *g, const kvq_gguf_kv *kv) {
    char key[256];
    FUZZ_CHECK(kv->key.len <= kvq_gguf_file_size(g), "key length %llu", (unsigned long long)kv->key.len);
    if (kv->key.len < sizeof key && (kv->key.len == 0 || !memchr(kv->key.ptr, 0, (size_t)kv->key.len))) {
        if (kv->key.len) memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = 0;
        FUZZ_CHECK(kvq_gguf_find_kv(g, key) == kv, "find_kv(%s) is not the key itself (keys are unique)", key);
        uint32_t u32;
        int64_t i64;
        float f;
        int b;
        kvq_gguf_str s;
        const kvq_gguf_kv *a;
        char cbuf[16], pbuf[8];
        int rcs[8];
        rcs[0] = kvq_gguf_get_u32(g, key, &u32);
        rcs[1] = kvq_gguf_get_i64(g, key, &i64);
        rcs[2] = kvq_gguf_get_f32(g, key, &f);
        rcs[3] = kvq_gguf_get_bool(g, key, &b);
        rcs[4] = kvq_gguf_get_str(g, key, &s);
        rcs[5] = kvq_gguf_get_arr(g, key, &a);
        rcs[6] = kvq_gguf_get_cstr(g, key, cbuf, sizeof cbuf);
        rcs[7] = kvq_gguf_get_string(g, key, pbuf, sizeof pbuf);
        for (int i = 0; i < 8; i++) FUZZ_CHECK(fuzz_known_status(rcs[i]), "getter %d: status %d", i, rcs[i]);
        FUZZ_CHECK((rcs[4] == KVQ_OK) == (kv->type == GGUF_TYPE_STRING), "get_str vs type %d", kv->type);
        FUZZ_CHECK((rcs[5] == KVQ_OK) == (kv->type == GGUF_TYPE_ARRAY), "get_arr vs type %d", kv->type);
        if (rcs[4] == KVQ_OK) {
            FUZZ_CHECK(s.len == kv->v.s.len && s.ptr == kv->v.s.ptr, "get_str");
            FUZZ_CHECK(rcs[6] == KVQ_OK && strlen(cbuf) <= s.len, "get_cstr");
            FUZZ_CHECK(rcs[7] == (s.len < sizeof pbuf ? KVQ_OK : KVQ_ERR_RANGE), "kvq_gguf_get_string: %d", rcs[7]);
        }
        if (rcs[0] == KVQ_OK) FUZZ_CHECK(rcs[1] == KVQ_OK && i64 == (int64_t)u32, "u32 %u vs i64", u32);
    }
    if (kv->type == GGUF_TYPE_STRING) {
        volatile char sink = 0;
        if (kv->v.s.len) sink ^= kv->v.s.ptr[0] ^ kv->v.s.ptr[kv->v.s.len - 1];
        (void)sink;
    }
    if (kv->type != GGUF_TYPE_ARRAY) return;
    const uint64_t n = kv->v.arr.n;
    const size_t es = kvq_gguf_type_size(kv->v.arr.type);
    if (es) {
        FUZZ_CHECK(kv->v.arr.bytes == n * es, "array bytes %llu for %llu x %zu", (unsigned long long)kv->v.arr.bytes,
                   (unsigned long long)n, es);
        /* the first and last 64 elements */
        for (uint64_t i = 0; i < n; i = (i == 63 && n > 128) ? n - 64 : i + 1) {
            int64_t v;
            float f;
            int r1 = kvq_gguf_arr_i64(kv, i, &v), r2 = kvq_gguf_arr_f32(kv, i, &f);
            FUZZ_CHECK(fuzz_known_status(r1) && fuzz_known_status(r2), "array element %d %d", r1, r2);
        }
        int64_t v;
        FUZZ_CHECK(kvq_gguf_arr_i64(kv, n, &v) == KVQ_ERR_INVALID_ARG, "element past the end");
    } else if (kv->v.arr.type == GGUF_TYPE_STRING) {
        kvq_gguf_str *s = malloc(sizeof *s * (n ? n : 1)); /* n <= bytes / 8: validated at open */
        if (!s) return;
        FUZZ_CHECK(kvq_gguf_arr_strings(kv, s, n) == KVQ_OK, "string array of a parsed file");
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
            volatile char sink = 0;
            if (s[i].len) sink ^= s[i].ptr[0] ^ s[i].ptr[s[i].len - 1];
            (void)sink;
            total += 8 + s[i].len;
        }
        FUZZ_CHECK(total == kv->v.arr.bytes, "string array spans %llu of %llu bytes", (unsigned long long)total,
                   (unsigned long long)kv->v.arr.bytes);
        free(s);
    } else {
        int64_t v;
        FUZZ_CHECK(n == 0 || kvq_gguf_arr_i64(kv, 0, &v) == KVQ_ERR_FORMAT, "element of a nested array");
    }
}

static void walk_tensor(const kvq_gguf_file *g, uint64_t i, const kvq_gguf_tensor *t) {
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
    FUZZ_CHECK(t->offset % kvq_gguf_alignment(g) == 0, "tensor offset not aligned");
    if (t->size_known) {
        const uint8_t *lo = (const uint8_t *)t->data;
        uint64_t start = kvq_gguf_data_offset(g) + t->offset;
        FUZZ_CHECK(start <= kvq_gguf_file_size(g) && t->n_bytes <= kvq_gguf_file_size(g) - start,
                   "tensor data [%llu, +%llu) outside the file", (unsigned long long)start,
                   (unsigned long long)t->n_bytes);
        volatile uint8_t sink = 0;
        if (t->n_bytes) sink ^= lo[0] ^ lo[t->n_bytes - 1];
        (void)sink;
    }
    kvq_gguf_tensor_info info;
    FUZZ_CHECK(kvq_gguf_get_tensor(g, i, &info) == KVQ_OK, "kvq_gguf_get_tensor");
    FUZZ_CHECK(info.n_dims == t->n_dims && info.type == t->type && strlen(info.name) <= t->name.len, "tensor info");
    (void)kvq_ggml_type_name(t->type);
    char name[128];
    if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, (size_t)t->name.len)) {
        memcpy(name, t->name.ptr, (size_t)t->name.len);
        name[t->name.len] = 0;
        FUZZ_CHECK(kvq_gguf_find_tensor(g, name) == t, "find_tensor(%s)", name);
    }
}

static void walk(const kvq_gguf_file *g) {
    kvq_gguf_info info;
    FUZZ_CHECK(kvq_gguf_get_info(g, &info) == KVQ_OK, "get_info");
    FUZZ_CHECK(info.version == 2 || info.version == 3, "version %u", info.version);
    FUZZ_CHECK(info.alignment && !(info.alignment & (info.alignment - 1)), "alignment %u", info.alignment);
    FUZZ_CHECK(info.data_offset % info.alignment == 0, "data offset");
    for (size_t i = 0; i < kvq_gguf_n_kv(g); i++) walk_kv(g, kvq_gguf_kv_at(g, i));
    FUZZ_CHECK(kvq_gguf_kv_at(g, kvq_gguf_n_kv(g)) == NULL, "kv past the end");
    for (size_t i = 0; i < kvq_gguf_n_tensors(g); i++) walk_tensor(g, i, kvq_gguf_tensor_at(g, i));
    FUZZ_CHECK(kvq_gguf_tensor_at(g, kvq_gguf_n_tensors(g)) == NULL, "tensor past the end");
    kvq_gguf_tensor_info ti;
    FUZZ_CHECK(kvq_gguf_get_tensor(g, kvq_gguf_n_tensors(g), &ti) == KVQ_ERR_INVALID_ARG, "get_tensor past the end");
}

/* The tokenizer and, for a small model, one forward pass of a loaded model. */
static void use_model(const kvq_model *m) {
    kvq_model_info mi;
    FUZZ_CHECK(kvq_model_get_info(m, &mi) == KVQ_OK, "model info");
    FUZZ_CHECK(mi.n_vocab > 0 && mi.n_layers > 0 && mi.head_dim >= KVQ_DIM_MIN, "model figures");
    for (int l = -1; l <= mi.n_layers; l++) {
        int w = kvq_model_layer_window(m, l);
        FUZZ_CHECK((l < 0 || l >= mi.n_layers) ? w == -1 : w >= 0, "layer window");
    }
    if (mi.has_tokenizer) {
        static const char text[] = "Hello, world! <|im_start|>user\n\xC3\xA9\xF0\x9F\x98\x80 \xFF";
        int32_t ids[128];
        size_t n = 0;
        int rc = kvq_tokenize(m, text, sizeof text - 1, 1, 1, ids, 128, &n);
        FUZZ_CHECK(rc == KVQ_OK || rc == KVQ_ERR_RANGE || rc == KVQ_ERR_NOMEM, "tokenize: %d", rc);
        for (size_t i = 0; rc == KVQ_OK && i < n; i++) {
            char piece[64];
            size_t pn = 0;
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < mi.n_vocab, "id %d of %d", ids[i], mi.n_vocab);
            int r = kvq_token_to_piece(m, ids[i], piece, sizeof piece, &pn);
            FUZZ_CHECK(r == KVQ_OK || r == KVQ_ERR_RANGE, "to_piece: %d", r);
            (void)kvq_token_is_eog(m, ids[i]);
        }
        char chat[512];
        size_t cn = 0;
        rc = kvq_chat_format(m, NULL, "Hi!", chat, sizeof chat, &cn);
        FUZZ_CHECK(rc == KVQ_OK || rc == KVQ_ERR_UNSUPPORTED || rc == KVQ_ERR_RANGE, "chat: %d", rc);
        size_t pn = 0;
        FUZZ_CHECK(kvq_token_to_piece(m, mi.n_vocab, NULL, 0, &pn) == KVQ_ERR_INVALID_ARG, "piece past the vocabulary");
    }
    /* a forward pass on the (hostile) weights: small models only */
    if (mi.n_weight_bytes > (1u << 20) || (uint64_t)mi.n_vocab * (uint64_t)mi.n_embd > (1u << 18) ||
        (uint64_t)mi.n_layers * mi.n_ff * mi.n_embd > (1u << 20))
        return;
    kvq_session *s = NULL;
    kvq_session_params p = kvq_session_default_params();
    int rc = kvq_session_create(&s, m, &p, NULL);
    FUZZ_CHECK(fuzz_known_status(rc), "session_create: %d", rc);
    if (rc) return;
    float *logits = malloc(sizeof(float) * 2 * (size_t)mi.n_vocab);
    if (logits) {
        int32_t tok[2] = {0, mi.n_vocab - 1};
        rc = kvq_session_eval(s, tok, 2, logits, 1);
        FUZZ_CHECK(fuzz_known_status(rc), "eval: %d", rc);
        FUZZ_CHECK(kvq_session_pos(s) == (rc ? 0u : 2u), "position after eval");
    }
    free(logits);
    kvq_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvq_gguf_file *g = NULL;
    int rc = kvq_gguf_open_buffer(&g, data, size);
    FUZZ_CHECK(fuzz_known_status(rc), "open: status %d", rc);
    if (rc) {
        FUZZ_CHECK(g == NULL, "output set on error");
        return 0;
    }
    walk(g);
    kvq_model *m = NULL;
    char err[160];
    err[0] = 0;
    rc = kvq_model_from_gguf(&m, g, err, sizeof err);
    FUZZ_CHECK(fuzz_known_status(rc), "model: status %d", rc);
    static int verbose = -1; /* KVQ_FUZZ_VERBOSE=1: why each input's model loads or not (seed checks) */
    if (verbose < 0) verbose = getenv("KVQ_FUZZ_VERBOSE") != NULL;
    if (verbose) fprintf(stderr, "fuzz_gguf: %zu bytes: model %s%s\n", size, rc ? "refused: " : "loaded", rc ? err : "");
    if (rc) {
        FUZZ_CHECK(m == NULL && memchr(err, 0, sizeof err), "model output / message on error");
        kvq_gguf_close(g);
        return 0;
    }
    use_model(m);
    kvq_model_free(m); /* owns g */
    return 0;
}
