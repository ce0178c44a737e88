/*
 * Tokenizers of the inference engine: GPT-2 byte-level BPE (SmolLM2, Qwen2)
 * and SentencePiece (Gemma), plus the chat prompt of each model family.
 *
 * A tokenizer is built once from plain arrays (kvq_tok_vocab, normally filled
 * from GGUF metadata by the engine's GGUF glue), copies what it needs and is
 * then immutable: any number of threads may encode/decode with it at once.
 * All functions return KVQ_OK or a KVQ_ERR_* code (include/kvq.h).
 *
 * GGUF metadata -> kvq_tok_vocab (what the glue has to fill):
 *   tokenizer.ggml.model            -> model       "gpt2" (byte-level BPE) or "llama" (SentencePiece)
 *   tokenizer.ggml.pre              -> pre         "smollm", "qwen2", "gpt2"/"default"/NULL (GPT-2 regex)
 *   tokenizer.ggml.tokens           -> tokens, token_lens (token_lens NULL: NUL-terminated strings)
 *   tokenizer.ggml.scores           -> scores      (SentencePiece: required; BPE: may be NULL)
 *   tokenizer.ggml.token_type       -> token_types (NULL: every token NORMAL)
 *   tokenizer.ggml.merges           -> merges, merge_lens (BPE: required; "left right")
 *   tokenizer.ggml.bos_token_id     -> bos         (-1 when absent; the same for the ids below)
 *   tokenizer.ggml.eos_token_id     -> eos
 *   tokenizer.ggml.eot_token_id     -> eot
 *   tokenizer.ggml.eom_token_id     -> eom
 *   tokenizer.ggml.unknown_token_id -> unk
 *   tokenizer.ggml.padding_token_id -> pad
 *   tokenizer.ggml.add_bos_token    -> add_bos     (-1 when absent: the model's default,
 *   tokenizer.ggml.add_eos_token    -> add_eos      see below)
 *   tokenizer.ggml.add_space_prefix -> add_space_prefix (-1 when absent)
 * Defaults for -1 flags (as llama.cpp): SentencePiece add_bos 1, add_eos 0,
 * add_space_prefix 1; BPE add_bos 0, add_eos 0 (add_space_prefix unused).
 * Initialise the struct with kvq_tok_vocab_init() so that absent fields are -1/NULL.
 *
 * Special tokens. Token types follow GGUF (KVQ_TOK_TYPE_*). In encode, tokens of
 * type USER_DEFINED are always matched as whole tokens in the text; CONTROL and
 * UNKNOWN tokens only when parse_special is set (otherwise their text is
 * tokenized as ordinary text). Matching is leftmost, longest first.
 * End-of-generation tokens: eos, eot, eom, plus the CONTROL tokens whose text
 * is one of <|im_end|>, <|endoftext|>, <end_of_turn>, <|eot_id|>, <|eom_id|>,
 * <|end|>, <EOT>.
 */
#ifndef KVQ_ENGINE_TOKENIZER_H
#define KVQ_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

/* Token types (values of tokenizer.ggml.token_type). */
enum {
    KVQ_TOK_TYPE_UNDEFINED = 0,
    KVQ_TOK_TYPE_NORMAL = 1,
    KVQ_TOK_TYPE_UNKNOWN = 2,
    KVQ_TOK_TYPE_CONTROL = 3,
    KVQ_TOK_TYPE_USER_DEFINED = 4,
    KVQ_TOK_TYPE_UNUSED = 5,
    KVQ_TOK_TYPE_BYTE = 6,
};

typedef struct kvq_tok_vocab {
    const char *model;              /* "gpt2" or "llama" */
    const char *pre;                /* pre-tokenizer: "smollm", "qwen2", "gpt2", "default", NULL */
    size_t n_tokens;
    const char *const *tokens;      /* n_tokens strings (UTF-8, not necessarily NUL-terminated) */
    const size_t *token_lens;       /* n_tokens lengths, or NULL for NUL-terminated tokens */
    const float *scores;            /* n_tokens scores or NULL */
    const int32_t *token_types;     /* n_tokens KVQ_TOK_TYPE_* or NULL */
    size_t n_merges;
    const char *const *merges;      /* n_merges "left right" strings, by rank (BPE) */
    const size_t *merge_lens;       /* lengths or NULL for NUL-terminated */
    int32_t bos, eos, eot, eom, unk, pad; /* token ids, -1 when absent */
    int add_bos, add_eos;           /* 0/1, -1 = model default */
    int add_space_prefix;           /* 0/1, -1 = model default (SentencePiece only) */
} kvq_tok_vocab;

typedef struct kvq_tokenizer kvq_tokenizer;

/* Sets every id and flag of *v to -1 and every pointer/count to NULL/0. */
void kvq_tok_vocab_init(kvq_tok_vocab *v);

/*
 * Builds a tokenizer from *v (copies everything it needs; v's arrays may be
 * freed afterwards). Errors: KVQ_ERR_NULL; KVQ_ERR_UNSUPPORTED (unknown model
 * or pre-tokenizer); KVQ_ERR_FORMAT (missing merges/scores, a merge that does not
 * contain a space, an out-of-range special id); KVQ_ERR_NOMEM.
 * Merges that name tokens missing from the vocabulary are ignored.
 */
int kvq_tok_create(kvq_tokenizer **out, const kvq_tok_vocab *v);
void kvq_tok_free(kvq_tokenizer *t);

size_t kvq_tok_n_tokens(const kvq_tokenizer *t);
int32_t kvq_tok_bos(const kvq_tokenizer *t); /* -1 if none */
int32_t kvq_tok_eos(const kvq_tokenizer *t); /* -1 if none */

/* Id of the token whose text is exactly text[0..len), or -1. */
int32_t kvq_tok_find(const kvq_tokenizer *t, const char *text, size_t len);

/*
 * Tokenizes text[0..len) (UTF-8; invalid bytes are kept as bytes: byte
 * tokens <0xXX> in SentencePiece, byte-level characters in BPE; a byte whose
 * byte-level character is missing from a BPE vocabulary is dropped, as the
 * reference tokenizer does: SmolLM2 lacks 21 such bytes, e.g. 0x04, 0xC0, 0xFF).
 * add_special: add BOS/EOS as the model's add_bos/add_eos say.
 * parse_special: match CONTROL tokens written in the text (e.g. "<|im_start|>").
 * Writes at most cap ids to out and the total count to *n_out. If the ids do
 * not fit, returns KVQ_ERR_RANGE with *n_out = the count needed (call again
 * with a larger buffer). Other errors: KVQ_ERR_NULL, KVQ_ERR_NOMEM.
 */
int kvq_tok_encode(const kvq_tokenizer *t, const char *text, size_t len, int add_special,
                   int parse_special, int32_t *out, size_t cap, size_t *n_out);

/*
 * The bytes token id stands for, for streaming output (a UTF-8 character may
 * be split across tokens: concatenate the pieces). CONTROL, UNKNOWN and UNUSED
 * tokens give 0 bytes. With add_space_prefix (SentencePiece models other than
 * Gemma) the first piece of a text starts with the space that encode added.
 * Writes at most cap bytes (no NUL) and their count to *n_out; if they do
 * not fit returns KVQ_ERR_RANGE with *n_out = the size
 * needed. Errors: KVQ_ERR_NULL, KVQ_ERR_INVALID_ARG (id out of range).
 */
int kvq_tok_decode_piece(const kvq_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *n_out);

/* The stored text of token id (e.g. "Ġthe", "<|im_end|>") and its length; NULL if out of range. */
const char *kvq_tok_text(const kvq_tokenizer *t, int32_t id, size_t *len);

/* Token type (KVQ_TOK_TYPE_*) of id, -1 if out of range. */
int kvq_tok_type(const kvq_tokenizer *t, int32_t id);

/* 1 if id ends generation (see the header comment), else 0. */
int kvq_tok_is_eog(const kvq_tokenizer *t, int32_t id);

/*
 * Writes the prompt for one user turn followed by the assistant's prefix, in
 * the chat format of the model (chosen from arch, the general.architecture
 * value, and the vocabulary):
 *   ChatML (SmolLM2, Qwen2):  <|im_start|>system\n{system}<|im_end|>\n
 *                             <|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n
 *   Gemma (gemma, gemma2, gemma3): <start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n
 *                             <start_of_turn>model\n
 * system: NULL for the model's default system prompt (SmolLM2 and Qwen2.5
 * templates have one, Gemma none), "" for none.
 * The BOS token is not written: encode the prompt with add_special = 1 (adds
 * it where the model wants it, e.g. Gemma) and parse_special = 1.
 * Writes the text and a NUL to buf; needs cap >= length + 1, else returns
 * KVQ_ERR_RANGE with *n_out = length. KVQ_ERR_UNSUPPORTED: no known format.
 */
int kvq_tok_chat_format(const kvq_tokenizer *t, const char *arch, const char *system,
                        const char *user_msg, char *buf, size_t cap, size_t *n_out);

#endif
