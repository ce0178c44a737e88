/*
 * Tokenizers on arbitrary bytes: SmolLM2's byte-level BPE and Gemma 3's
 * SentencePiece, built once from the real models' vocabularies when
 * models/ has them ($KVQ_ROOT/models, else the source tree's), plus small
 * synthetic vocabularies that are always there (BPE with each
 * pre-tokenizer, SentencePiece with and without the space prefix).
 *
 * Input: byte 0 picks the tokenizer and the flags, the rest is the text.
 * Checks: encode succeeds (a short buffer gives KVQ_ERR_RANGE with the
 * count that then fits), every id is in range and decodes (a short buffer
 * gives KVQ_ERR_RANGE with the size that then fits), decode(encode(text))
 * gives the text back (without special-token parsing: bytes the vocabulary
 * cannot represent are dropped, as documented; with a SentencePiece space
 * prefix, up to spaces), kvq_tok_find / kvq_tok_text
 * agree, and chat_format writes exactly the length it reports.
 */
#include "engine/gguf.h"
#include "engine/tok_gguf.h"
#include "engine/tokenizer.h"
#include "fuzz_common.h"

typedef struct {
    const char *name;
    const char *arch;   /* for chat_format */
    kvq_tokenizer *t;
    int space_prefix;   /* decode starts with the space encode added */
    int spm;            /* a literal U+2581 reads as a space: no exact round trip */
    int dropped[256];   /* bytes the vocabulary has no token for */
} fuzz_tok;

#define MAX_TOKS 8
static fuzz_tok TOKS[MAX_TOKS];
static int N_TOKS;

/* ---- synthetic vocabularies ---------------------------------------------- */
/* GPT-2 byte-level character of byte b, UTF-8 encoded. */
static void byte_char(unsigned b, char out[4]) {
    unsigned cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

static kvq_tokenizer *synth_bpe(const char *pre) {
    static char chars[256][4];
    static const char *extra[] = {"th", "the", "\xC4\xA0t", "\xC4\xA0the", "in", "ing", "\304\240a", "er", "12",
                                  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<user>", "\xC4\xA0\xC4\xA0"};
    static const int32_t extra_type[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 4, 1};
    static const char *merges[] = {"t h", "th e", "\xC4\xA0 t", "\xC4\xA0t he", "i n", "in g", "\xC4\xA0 a",
                                   "e r", "1 2", "\xC4\xA0 \xC4\xA0", "missing token", "q q"};
    const size_t n_extra = sizeof extra / sizeof extra[0];
    const char *tokens[256 + 16];
    int32_t types[256 + 16];
    size_t n = 0;
    for (unsigned b = 0; b < 256; b++) {
        byte_char(b, chars[b]);
        types[n] = KVQ_TOK_TYPE_NORMAL;
        tokens[n++] = chars[b];
    }
    for (size_t i = 0; i < n_extra; i++) {
        types[n] = extra_type[i];
        tokens[n++] = extra[i];
    }
    kvq_tok_vocab v;
    kvq_tok_vocab_init(&v);
    v.model = "gpt2";
    v.pre = pre;
    v.n_tokens = n;
    v.tokens = tokens;
    v.token_types = types;
    v.n_merges = sizeof merges / sizeof merges[0];
    v.merges = merges;
    v.bos = 256 + 11;
    v.eos = 256 + 10;
    v.add_bos = 1;
    kvq_tokenizer *t = NULL;
    return kvq_tok_create(&t, &v) == KVQ_OK ? t : NULL;
}

static kvq_tokenizer *synth_spm(int space_prefix) {
    static char bytes[256][8];
    static const char *pieces[] = {"\xE2\x96\x81", "a", "b", "c", "ab", "bc", "\342\226\201a",
                                   "\342\226\201ab", "  ", "<start_of_turn>", "<end_of_turn>", "\xC3\xA9",
                                   "\xE2\x96\x81\xE2\x96\x81", "<mask>"};
    static const float piece_score[] = {-1, -2, -3, -4, -5, -1, -6, -0.5f, 0, 0, 0, -2, -3, 0};
    static const int32_t piece_type[] = {1, 1, 1, 1, 1, 1, 1, 1, 4, 3, 3, 1, 1, 5};
    const char *tokens[300];
    float scores[300];
    int32_t types[300];
    size_t n = 0;
    tokens[n] = "<unk>", scores[n] = 0, types[n++] = KVQ_TOK_TYPE_UNKNOWN;
    tokens[n] = "<s>", scores[n] = 0, types[n++] = KVQ_TOK_TYPE_CONTROL;
    tokens[n] = "</s>", scores[n] = 0, types[n++] = KVQ_TOK_TYPE_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[n] = bytes[b], scores[n] = 0, types[n++] = KVQ_TOK_TYPE_BYTE;
    }
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++)
        tokens[n] = pieces[i], scores[n] = piece_score[i], types[n++] = piece_type[i];
    kvq_tok_vocab v;
    kvq_tok_vocab_init(&v);
    v.model = "llama";
    v.n_tokens = n;
    v.tokens = tokens;
    v.scores = scores;
    v.token_types = types;
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    v.add_space_prefix = space_prefix;
    v.add_eos = 1;
    kvq_tokenizer *t = NULL;
    return kvq_tok_create(&t, &v) == KVQ_OK ? t : NULL;
}

static kvq_tokenizer *from_model(const char *file) {
    char dir[900], path[1024];
    fuzz_models_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    kvq_gguf_file *g = NULL;
    if (kvq_gguf_open(&g, path)) return NULL;
    kvq_tokenizer *t = NULL;
    if (kvq_tok_create_from_gguf(&t, g)) t = NULL;
    kvq_gguf_close(g); /* the tokenizer keeps copies */
    return t;
}

static void add(const char *name, const char *arch, kvq_tokenizer *t, int space_prefix, int spm) {
    if (!t || N_TOKS == MAX_TOKS) return;
    fuzz_tok *f = &TOKS[N_TOKS++];
    f->name = name;
    f->arch = arch;
    f->t = t;
    f->space_prefix = space_prefix;
    f->spm = spm;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t ids[8];
        size_t n = 0;
        f->dropped[b] = kvq_tok_encode(t, &c, 1, 0, 0, ids, 8, &n) == KVQ_OK && n == 0;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    add("smollm2", "llama", from_model("SmolLM2-135M-Instruct.Q4_1.gguf"), 0, 0);
    add("gemma3", "gemma3", from_model("gemma-3-270m-q4_k_m.gguf"), 0, 1);
    if (N_TOKS < 2) fprintf(stderr, "fuzz_tokenizer: models missing, synthetic vocabularies only\n");
    add("synthetic bpe gpt2", "llama", synth_bpe("gpt2"), 0, 0);
    add("synthetic bpe smollm", "llama", synth_bpe("smollm"), 0, 0);
    add("synthetic bpe qwen2", "qwen2", synth_bpe("qwen2"), 0, 0);
    add("synthetic spm", "gemma3", synth_spm(0), 0, 1);
    add("synthetic spm space prefix", "llama", synth_spm(1), 1, 1);
    FUZZ_CHECK(N_TOKS >= 5, "synthetic tokenizers could not be built");
    return 0;
}

static int32_t *encode(const kvq_tokenizer *t, const char *s, size_t n, int add_special, int parse_special,
                       size_t *cnt) {
    /* a short buffer first: KVQ_ERR_RANGE with the count needed */
    size_t cap = n / 4, need = 0;
    int32_t *ids = malloc(sizeof *ids * (cap ? cap : 1));
    FUZZ_CHECK(ids, "out of memory");
    int rc = kvq_tok_encode(t, s, n, add_special, parse_special, ids, cap, &need);
    FUZZ_CHECK(rc == KVQ_OK || rc == KVQ_ERR_RANGE, "encode: %d", rc);
    if (rc == KVQ_OK) {
        FUZZ_CHECK(need <= cap, "encode OK with %zu ids in %zu", need, cap);
        *cnt = need;
        return ids;
    }
    FUZZ_CHECK(need > cap, "KVQ_ERR_RANGE with %zu needed for %zu", need, cap);
    free(ids);
    ids = malloc(sizeof *ids * need);
    FUZZ_CHECK(ids, "out of memory");
    size_t got = 0;
    rc = kvq_tok_encode(t, s, n, add_special, parse_special, ids, need, &got);
    FUZZ_CHECK(rc == KVQ_OK && got == need, "encode again: %d, %zu ids for %zu", rc, got, need);
    *cnt = got;
    return ids;
}

/* Concatenated pieces of ids (*len bytes, malloc'd). */
static char *decode(const kvq_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    FUZZ_CHECK(out, "out of memory");
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && (size_t)ids[i] < kvq_tok_n_tokens(t), "id %d of %zu", ids[i], kvq_tok_n_tokens(t));
        char small[3];
        size_t need = 0;
        int rc = kvq_tok_decode_piece(t, ids[i], small, sizeof small, &need);
        FUZZ_CHECK(rc == KVQ_OK || (rc == KVQ_ERR_RANGE && need > sizeof small), "piece %d: %d", ids[i], rc);
        if (used + need > cap) {
            while (used + need > cap) cap *= 2;
            out = realloc(out, cap);
            FUZZ_CHECK(out, "out of memory");
        }
        size_t got = 0;
        rc = kvq_tok_decode_piece(t, ids[i], out + used, need, &got);
        FUZZ_CHECK(rc == KVQ_OK && got == need, "piece %d again: %d (%zu for %zu)", ids[i], rc, got, need);
        if (rc == KVQ_OK && need <= sizeof small) FUZZ_CHECK(!memcmp(small, out + used, need), "piece bytes differ");
        used += need;
        size_t tl = 0;
        FUZZ_CHECK(kvq_tok_text(t, ids[i], &tl) != NULL, "text of id %d", ids[i]);
        int ty = kvq_tok_type(t, ids[i]);
        FUZZ_CHECK(ty >= 0, "type of id %d", ids[i]);
        (void)kvq_tok_is_eog(t, ids[i]);
    }
    *len = used;
    return out;
}

static void chat(const fuzz_tok *f, const char *text, size_t n, int flags) {
    /* system prompt before the first NUL, user message after it */
    const char *nul = memchr(text, 0, n);
    char *sys = NULL, *user;
    if (nul) {
        size_t sl = (size_t)(nul - text);
        sys = malloc(sl + 1);
        FUZZ_CHECK(sys, "out of memory");
        memcpy(sys, text, sl);
        sys[sl] = 0;
        text += sl + 1;
        n -= sl + 1;
    }
    user = malloc(n + 1);
    FUZZ_CHECK(user, "out of memory");
    memcpy(user, text, n);
    user[n] = 0;
    const char *arch = (flags & 1) ? f->arch : (flags & 2) ? "qwen2" : NULL;
    size_t need = 0;
    char tiny[8];
    int rc = kvq_tok_chat_format(f->t, arch, sys, user, tiny, sizeof tiny, &need);
    FUZZ_CHECK(rc == KVQ_ERR_RANGE || rc == KVQ_ERR_UNSUPPORTED || (rc == KVQ_OK && need < sizeof tiny),
               "chat_format: %d", rc);
    if (rc != KVQ_ERR_UNSUPPORTED) {
        char *buf = malloc(need + 1);
        FUZZ_CHECK(buf, "out of memory");
        size_t got = 0;
        rc = kvq_tok_chat_format(f->t, arch, sys, user, buf, need + 1, &got);
        FUZZ_CHECK(rc == KVQ_OK && got == need && strlen(buf) == need && strstr(buf, user),
                   "chat_format again: %d, %zu for %zu", rc, got, need);
        size_t cnt = 0;
        free(encode(f->t, buf, need, 1, 1, &cnt));
        free(buf);
    }
    free(sys);
    free(user);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const fuzz_tok *f = &TOKS[data[0] % N_TOKS];
    const int flags = data[0] / N_TOKS;
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;

    /* plain text: decode(encode(text)) is the text (less dropped bytes) */
    size_t cnt = 0, len = 0;
    int32_t *ids = encode(f->t, text, n, 0, 0, &cnt);
    char *back = decode(f->t, ids, cnt, &len);
    int has_2581 = 0;
    for (size_t i = 0; f->spm && i + 2 < n; i++)
        has_2581 |= (uint8_t)text[i] == 0xE2 && (uint8_t)text[i + 1] == 0x96 && (uint8_t)text[i + 2] == 0x81;
    if (!has_2581) {
        char *want = malloc(n + 1);
        FUZZ_CHECK(want, "out of memory");
        size_t wn = 0;
        for (size_t i = 0; i < n; i++)
            if (!f->dropped[(uint8_t)text[i]]) want[wn++] = text[i];
        int same = len == wn && !memcmp(back, want, wn);
        if (!same && f->space_prefix) {
            /* the space prefix goes before the text and after every special
             * token, user-defined ones included (llama.cpp's rule): compare
             * without spaces */
            size_t a = 0, b = 0;
            for (size_t i = 0; i < wn; i++)
                if (want[i] != ' ') want[a++] = want[i];
            for (size_t i = 0; i < len; i++)
                if (back[i] != ' ') back[b++] = back[i];
            same = a == b && !memcmp(back, want, a);
        }
        FUZZ_CHECK(same, "[%s] round trip: %zu bytes in, %zu expected, %zu back", f->name, n, wn, len);
        free(want);
    }
    free(ids);
    free(back);

    /* special tokens and BOS/EOS */
    ids = encode(f->t, text, n, flags & 1, (flags >> 1) & 1, &cnt);
    back = decode(f->t, ids, cnt, &len);
    free(ids);
    free(back);

    /* exact token lookup */
    int32_t id = kvq_tok_find(f->t, text, n);
    if (id >= 0) {
        size_t tl = 0;
        const char *s = kvq_tok_text(f->t, id, &tl);
        FUZZ_CHECK(s && tl == n && !memcmp(s, text, n), "find/text disagree for id %d", id);
    }
    FUZZ_CHECK(kvq_tok_type(f->t, -1) == -1 && kvq_tok_text(f->t, (int32_t)kvq_tok_n_tokens(f->t), NULL) == NULL,
               "ids out of range");
    size_t need = 0;
    FUZZ_CHECK(kvq_tok_decode_piece(f->t, -1, NULL, 0, &need) == KVQ_ERR_INVALID_ARG, "piece of id -1");

    chat(f, text, n, flags >> 2);
    return 0;
}
