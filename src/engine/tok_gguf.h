/* Builds the engine's tokenizer (tokenizer.h) from GGUF metadata. */
#ifndef KVQ_ENGINE_TOK_GGUF_H
#define KVQ_ENGINE_TOK_GGUF_H

#include "gguf.h"
#include "tokenizer.h"

/*
 * Fills a kvq_tok_vocab from the tokenizer.ggml.* keys of g and builds the
 * tokenizer. Errors: KVQ_ERR_FORMAT (missing tokens/model, a key of the
 * wrong type, arrays of mismatched lengths), kvq_tok_create's errors,
 * KVQ_ERR_NOMEM.
 */
int kvq_tok_create_from_gguf(kvq_tokenizer **out, const struct kvq_gguf_file *g);

#endif
