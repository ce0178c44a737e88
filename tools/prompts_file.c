/*
 * gen-check prompt files: a strict reader of one JSON array of strings
 * (RFC 8259, sections 5 and 7: whitespace, arrays, strings and their
 * escapes; UTF-8 as in RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF). Format and limits: prompts_file.h.
 */
#include "prompts_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"

typedef struct {
    const unsigned char *s;
    size_t n, i;
    char *msg;
    size_t cap;
} reader;

/* line and column (1-based, in bytes) of offset at */
static void where(const reader *r, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t k = 0; k < at && k < r->n; k++) {
        if (r->s[k] == '\n') { ++*line; *col = 1; }
        else ++*col;
    }
}

static int fail(const reader *r, size_t at, int rc, const char *fmt, ...) {
    if (r->msg && r->cap) {
        int line, col;
        where(r, at, &line, &col);
        int k = snprintf(r->msg, r->cap, "line %d, column %d: ", line, col);
        if (k >= 0 && (size_t)k < r->cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->msg + k, r->cap - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

static void skip_ws(reader *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r')) r->i++;
}

/* Length (1..4) of the valid UTF-8 sequence at s[0..n), 0 if invalid. */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    for (int k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
    if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
    if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
    if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
    return len;
}

static int hex4(const unsigned char *s, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = s[k], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

static size_t put_utf8(unsigned cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string starting at r->s[r->i] == '"' (prompt number idx, 1-based) into *out. */
static int read_string(reader *r, int idx, char **out) {
    size_t start = r->i++;
    char *buf = malloc(TOOL_PROMPT_MAX_BYTES + 4);
    if (!buf) return KVQ_ERR_NOMEM;
    size_t len = 0;
    int rc = 0;
    for (;;) {
        if (r->i >= r->n) { rc = fail(r, start, KVQ_ERR_FORMAT, "prompt %d: string not closed", idx); break; }
        size_t at = r->i;
        unsigned c = r->s[at];
        char tmp[4];
        size_t k = 0;
        if (c == '"') { r->i++; break; }
        if (c < 0x20) {
            rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: raw control character U+%04X in a string (write it as an escape: \\n, \\t, \\u%04x)",
                      idx, c, c);
            break;
        }
        if (c == '\\') {
            if (at + 1 >= r->n) { rc = fail(r, start, KVQ_ERR_FORMAT, "prompt %d: string not closed", idx); break; }
            unsigned e = r->s[at + 1];
            const char *simple = strchr("\"\\/bfnrt", (int)e);
            if (e && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                tmp[k++] = map[simple - "\"\\/bfnrt"];
                r->i += 2;
            } else if (e == 'u') {
                unsigned cp, lo;
                if (at + 6 > r->n || hex4(r->s + at + 2, &cp)) {
                    rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: \\u needs 4 hex digits", idx);
                    break;
                }
                r->i += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: lone low surrogate \\u%04X", idx, cp);
                    break;
                }
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (r->i + 6 > r->n || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u' || hex4(r->s + r->i + 2, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF) {
                        rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: high surrogate \\u%04X without a low one", idx, cp);
                        break;
                    }
                    r->i += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (cp == 0) { rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: \\u0000 (NUL) is not allowed", idx); break; }
                k = put_utf8(cp, tmp);
            } else {
                rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: unknown escape \\%c", idx, e >= 0x20 && e < 0x7F ? (char)e : '?');
                break;
            }
        } else {
            int u = utf8_len(r->s + at, r->n - at);
            if (!u) { rc = fail(r, at, KVQ_ERR_FORMAT, "prompt %d: invalid UTF-8 (byte 0x%02X)", idx, c); break; }
            memcpy(tmp, r->s + at, (size_t)u);
            k = (size_t)u;
            r->i += (size_t)u;
        }
        if (len + k > TOOL_PROMPT_MAX_BYTES) {
            rc = fail(r, start, KVQ_ERR_RANGE, "prompt %d is longer than %d bytes", idx, TOOL_PROMPT_MAX_BYTES);
            break;
        }
        memcpy(buf + len, tmp, k);
        len += k;
    }
    if (!rc && len == 0) rc = fail(r, start, KVQ_ERR_FORMAT, "prompt %d is empty", idx);
    if (rc) { free(buf); return rc; }
    buf[len] = 0;
    *out = buf;
    return 0;
}

void tool_prompts_free(tool_prompts *p) {
    if (!p) return;
    for (int i = 0; i < p->count; i++) free(p->text[i]);
    free(p->text);
    p->text = NULL;
    p->count = 0;
}

int tool_prompts_parse(const char *text, size_t len, tool_prompts *out, char *msg, size_t cap) {
    if (!out) return KVQ_ERR_NULL;
    out->text = NULL;
    out->count = 0;
    if (msg && cap) msg[0] = 0;
    if (!text) return KVQ_ERR_NULL;
    reader r = {(const unsigned char *)text, len, 0, msg, cap};
    if (len > TOOL_PROMPTS_FILE_MAX) return fail(&r, 0, KVQ_ERR_RANGE, "file larger than %u bytes", TOOL_PROMPTS_FILE_MAX);
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) r.i = 3;
    skip_ws(&r);
    if (r.i >= r.n) return fail(&r, r.i, KVQ_ERR_FORMAT, "empty file: want a JSON array of prompt strings");
    if (r.s[r.i] != '[') return fail(&r, r.i, KVQ_ERR_FORMAT, "want a JSON array of prompt strings, starting with '['");
    r.i++;
    out->text = malloc(sizeof(char *) * TOOL_PROMPTS_MAX);
    if (!out->text) return KVQ_ERR_NOMEM;
    skip_ws(&r);
    if (r.i < r.n && r.s[r.i] == ']') return fail(&r, r.i, KVQ_ERR_FORMAT, "no prompts (empty array)");
    for (;;) {
        skip_ws(&r);
        if (r.i >= r.n) return fail(&r, r.i, KVQ_ERR_FORMAT, "array not closed (want a string and then ',' or ']')");
        if (r.s[r.i] != '"')
            return fail(&r, r.i, KVQ_ERR_FORMAT, "prompt %d: want a string in double quotes%s", out->count + 1,
                        r.s[r.i] == ']' ? " (trailing comma?)" : "");
        if (out->count == TOOL_PROMPTS_MAX) return fail(&r, r.i, KVQ_ERR_RANGE, "more than %d prompts", TOOL_PROMPTS_MAX);
        int rc = read_string(&r, out->count + 1, &out->text[out->count]);
        if (rc) return rc;
        out->count++;
        skip_ws(&r);
        if (r.i >= r.n) return fail(&r, r.i, KVQ_ERR_FORMAT, "array not closed (want ',' or ']')");
        if (r.s[r.i] == ']') { r.i++; break; }
        if (r.s[r.i] != ',') return fail(&r, r.i, KVQ_ERR_FORMAT, "want ',' or ']' after prompt %d", out->count);
        r.i++;
    }
    skip_ws(&r);
    if (r.i < r.n) return fail(&r, r.i, KVQ_ERR_FORMAT, "text after the closing ']'");
    return 0;
}

int tool_prompts_read(const char *path, tool_prompts *out, char *msg, size_t cap) {
    if (!out) return KVQ_ERR_NULL;
    out->text = NULL;
    out->count = 0;
    if (!path) return KVQ_ERR_NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (msg && cap) snprintf(msg, cap, "cannot open: %s", strerror(errno));
        return KVQ_ERR_IO;
    }
    char *buf = malloc(TOOL_PROMPTS_FILE_MAX + 1);
    if (!buf) { fclose(f); return KVQ_ERR_NOMEM; }
    size_t n = fread(buf, 1, TOOL_PROMPTS_FILE_MAX + 1, f);
    int err = ferror(f);
    fclose(f);
    int rc;
    if (err) {
        if (msg && cap) snprintf(msg, cap, "read error");
        rc = KVQ_ERR_IO;
    } else {
        rc = tool_prompts_parse(buf, n, out, msg, cap); /* n > the limit: KVQ_ERR_RANGE */
    }
    free(buf);
    return rc;
}
