/* UTF-8 decoding and character classes for the tokenizers. */
#include "tokenizer_unicode.h"

int kvq_ucat(uint32_t cp) {
    if (cp < 0x80) {
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return KVQ_UCAT_WS;
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return KVQ_UCAT_L;
        if (cp >= '0' && cp <= '9') return KVQ_UCAT_N;
        return KVQ_UCAT_OTHER;
    }
    switch (cp) { /* White_Space outside ASCII */
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F:
    case 0x205F: case 0x3000:
        return KVQ_UCAT_WS;
    default:
        if (cp >= 0x2000 && cp <= 0x200A) return KVQ_UCAT_WS;
        break;
    }
    unsigned lo = 0, hi = kvq_ucat_n_ranges;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (kvq_ucat_ranges[mid].last < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < kvq_ucat_n_ranges && kvq_ucat_ranges[lo].first <= cp) return (int)kvq_ucat_ranges[lo].cat;
    return KVQ_UCAT_OTHER;
}

size_t kvq_utf8_decode(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = KVQ_UCP_INVALID; return 1; }
    if (len > n) { *cp = KVQ_UCP_INVALID; return 1; }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = KVQ_UCP_INVALID; return 1; }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = KVQ_UCP_INVALID; return 1; }
    *cp = v;
    return len;
}

size_t kvq_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}
