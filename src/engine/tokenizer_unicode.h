/*
 * Unicode helpers for the tokenizers: UTF-8 decoding and the character classes
 * the BPE pre-tokenizer regexes use (\p{L}, \p{N}, \s).
 */
#ifndef KVQ_TOKENIZER_UNICODE_H
#define KVQ_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

enum {
    KVQ_UCAT_OTHER = 0,
    KVQ_UCAT_L = 1,  /* general category L*: Lu Ll Lt Lm Lo */
    KVQ_UCAT_N = 2,  /* general category N*: Nd Nl No */
    KVQ_UCAT_WS = 4, /* White_Space property (regex \s) */
};

typedef struct kvq_ucat_range {
    uint32_t first, last, cat;
} kvq_ucat_range;

/* Generated table (tokenizer_unicode_table.c), sorted by first. */
extern const kvq_ucat_range kvq_ucat_ranges[];
extern const unsigned kvq_ucat_n_ranges;

/* Class of code point cp: one of KVQ_UCAT_*. */
int kvq_ucat(uint32_t cp);

/*
 * Decodes the UTF-8 character at s[0..n), n >= 1. Returns its length in bytes
 * (1..4) and stores its code point in *cp. An invalid or truncated sequence is
 * one byte long with *cp = KVQ_UCP_INVALID (class OTHER).
 */
#define KVQ_UCP_INVALID 0xFFFFFFFFu
size_t kvq_utf8_decode(const char *s, size_t n, uint32_t *cp);

/* Encodes cp (< 0x110000) as UTF-8 into out[4]; returns its length. */
size_t kvq_utf8_encode(uint32_t cp, char *out);

#endif
