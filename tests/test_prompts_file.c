/* gen-check prompt files (tools/prompts_file.c): what a valid JSON array of
 * strings gives back byte for byte, and every malformed file refused with
 * the reason and position in the message, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq.h"
#include "prompts_file.h"
#include "testutil.h"

static int parse(const char *s, size_t n, tool_prompts *p, char *msg) {
    return tool_prompts_parse(s, n, p, msg, 256);
}

/* a malformed text: rc wanted, msg containing want */
static void refused(const char *s, size_t n, int want_rc, const char *want, const char *what) {
    tool_prompts p;
    char msg[256];
    int rc = parse(s, n, &p, msg);
    CHECK(rc == want_rc, "%s: rc %d (%s), want %d", what, rc, msg, want_rc);
    CHECK(strstr(msg, want) != NULL, "%s: message '%s' lacks '%s'", what, msg, want);
    tool_prompts_free(&p);
    CHECK(p.count == 0 && p.text == NULL, "%s: freed", what);
}

static void one(const char *json, const char *want, const char *what) {
    tool_prompts p;
    char msg[256];
    int rc = parse(json, strlen(json), &p, msg);
    CHECK(rc == 0 && p.count == 1, "%s: rc %d count %d (%s)", what, rc, p.count, msg);
    if (!rc && p.count == 1) CHECK(!strcmp(p.text[0], want), "%s: got '%s'", what, p.text[0]);
    tool_prompts_free(&p);
}

int main(void) {
    /* valid files */
    one("[\"Explain tides.\"]", "Explain tides.", "one prompt");
    one("\xEF\xBB\xBF \n[ \"a\" ]\n\n", "a", "BOM and whitespace");
    one("[\"def f(x):\\n    \\\"\\\"\\\"doc\\\"\\\"\\\"\\n\\n\"]", "def f(x):\n    \"\"\"doc\"\"\"\n\n", "escapes, trailing newline");
    one("[\"\\t\\/\\\\\\b\\f\\r\"]", "\t/\\\b\f\r", "simple escapes");
    one("[\"caf\\u00e9 \\u20AC \\ud83d\\ude00\"]", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "\\u escapes and a surrogate pair");
    one("[\"caf\xC3\xA9 \xF0\x9F\x98\x80\"]", "caf\xC3\xA9 \xF0\x9F\x98\x80", "raw UTF-8");
    {
        tool_prompts p;
        char msg[256];
        const char *s = "[\"first\",\n \"second\" , \"third\"]";
        CHECK_OK(parse(s, strlen(s), &p, msg));
        CHECK(p.count == 3 && !strcmp(p.text[0], "first") && !strcmp(p.text[1], "second") && !strcmp(p.text[2], "third"),
              "three prompts");
        tool_prompts_free(&p);
    }
    /* empty and not an array of strings */
    refused("", 0, KVQ_ERR_FORMAT, "line 1, column 1: empty file", "empty file");
    refused(" \n\t\n", 4, KVQ_ERR_FORMAT, "empty file", "whitespace only");
    refused("[]", 2, KVQ_ERR_FORMAT, "no prompts", "empty array");
    refused("[ \"\" ]", 6, KVQ_ERR_FORMAT, "prompt 1 is empty", "empty prompt");
    refused("one prompt per line\n", 20, KVQ_ERR_FORMAT, "starting with '['", "plain text");
    refused("{\"a\":1}", 7, KVQ_ERR_FORMAT, "starting with '['", "an object");
    refused("[\"a\", 3]", 8, KVQ_ERR_FORMAT, "line 1, column 7: prompt 2: want a string", "a number");
    refused("[\"a\",]", 6, KVQ_ERR_FORMAT, "trailing comma", "trailing comma");
    refused("[\"a\" \"b\"]", 9, KVQ_ERR_FORMAT, "want ',' or ']' after prompt 1", "missing comma");
    refused("[\"a\"", 4, KVQ_ERR_FORMAT, "array not closed", "unclosed array");
    refused("[\"a", 3, KVQ_ERR_FORMAT, "string not closed", "unclosed string");
    refused("[\"a\"] x", 7, KVQ_ERR_FORMAT, "text after the closing ']'", "trailing text");
    refused("[\"a\"]\n[\"b\"]", 11, KVQ_ERR_FORMAT, "line 2, column 1: text after", "two arrays");
    /* strings */
    refused("[\"a\nb\"]", 7, KVQ_ERR_FORMAT, "line 1, column 4: prompt 1: raw control character U+000A", "raw newline");
    refused("[\"a\\x\"]", 7, KVQ_ERR_FORMAT, "unknown escape \\x", "bad escape");
    refused("[\"\\u12\"]", 8, KVQ_ERR_FORMAT, "4 hex digits", "short \\u");
    refused("[\"\\u0000\"]", 10, KVQ_ERR_FORMAT, "NUL", "\\u0000");
    refused("[\"\\ud83d x\"]", 12, KVQ_ERR_FORMAT, "without a low one", "lone high surrogate");
    refused("[\"\\ude00\"]", 10, KVQ_ERR_FORMAT, "lone low surrogate", "lone low surrogate");
    refused("[\"a\0b\"]", 7, KVQ_ERR_FORMAT, "U+0000", "raw NUL");
    /* bad UTF-8: a stray continuation byte, truncated, overlong, a surrogate, above U+10FFFF, Latin-1 */
    const char *bad[] = {"[\"\x80\"]", "[\"\xC3\"]", "[\"\xC0\xAF\"]", "[\"\xE0\x80\xAF\"]", "[\"\xED\xA0\x80\"]",
                         "[\"\xF4\x90\x80\x80\"]", "[\"caf\xE9\"]", "[\"\xF0\x9F\x98\"]"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char what[32];
        snprintf(what, sizeof what, "bad UTF-8 #%zu", k);
        refused(bad[k], strlen(bad[k]), KVQ_ERR_FORMAT, "invalid UTF-8", what);
    }
    /* limits: a prompt of exactly the maximum, one byte more; too many prompts */
    {
        size_t m = TOOL_PROMPT_MAX_BYTES, cap = m + 16;
        char *s = malloc(cap);
        s[0] = '[';
        s[1] = '"';
        memset(s + 2, 'x', m);
        memcpy(s + 2 + m, "\"]", 2);
        tool_prompts p;
        char msg[256];
        CHECK_OK(parse(s, m + 4, &p, msg));
        CHECK(p.count == 1 && strlen(p.text[0]) == m, "prompt of the maximum length");
        tool_prompts_free(&p);
        memset(s + 2, 'x', m + 1);
        memcpy(s + 3 + m, "\"]", 2);
        refused(s, m + 5, KVQ_ERR_RANGE, "prompt 1 is longer than", "prompt too long");
        free(s);
        /* an escape that crosses the limit counts its decoded bytes */
        s = malloc(cap);
        s[0] = '[';
        s[1] = '"';
        memset(s + 2, 'x', m - 1);
        memcpy(s + 1 + m, "\\u00e9\"]", 8);
        refused(s, m + 9, KVQ_ERR_RANGE, "longer than", "escape over the limit");
        free(s);
    }
    {
        size_t cap = 8 * (TOOL_PROMPTS_MAX + 2);
        char *s = malloc(cap);
        size_t len = 0;
        s[len++] = '[';
        for (int i = 0; i < TOOL_PROMPTS_MAX + 1; i++) len += (size_t)snprintf(s + len, cap - len, "%s\"p\"", i ? "," : "");
        s[len++] = ']';
        tool_prompts p;
        char msg[256];
        CHECK(parse(s, len - 5, &p, msg) == KVQ_ERR_FORMAT, "cut before the last prompt's ']': %s", msg);
        tool_prompts_free(&p);
        refused(s, len, KVQ_ERR_RANGE, "more than", "too many prompts");
        /* exactly the maximum */
        len -= 5;
        s[len++] = ']';
        CHECK_OK(parse(s, len, &p, msg));
        CHECK(p.count == TOOL_PROMPTS_MAX, "%d prompts", p.count);
        tool_prompts_free(&p);
        free(s);
    }
    /* every truncation of a valid file is refused, never a crash */
    {
        const char *s = "[\"a\\n\\u00e9\", \"caf\xC3\xA9\"]";
        size_t n = strlen(s);
        for (size_t cut = 0; cut < n; cut++) {
            tool_prompts p;
            char msg[256];
            CHECK(parse(s, cut, &p, msg) != 0, "truncation at %zu accepted", cut);
            tool_prompts_free(&p);
        }
    }
    /* files: a missing one, a real one */
    {
        tool_prompts p;
        char msg[256];
        CHECK(tool_prompts_read("/nonexistent/kvq_prompts.json", &p, msg, sizeof msg) == KVQ_ERR_IO, "missing file");
        CHECK(tool_prompts_parse(NULL, 0, &p, msg, sizeof msg) == KVQ_ERR_NULL, "NULL text");
        char path[] = "/tmp/kvq_prompts_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp");
        if (fd >= 0) {
            const char *s = "[\"Once upon a time\", \"1.\"]\n";
            CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s), "write");
            close(fd);
            CHECK_OK(tool_prompts_read(path, &p, msg, sizeof msg));
            CHECK(p.count == 2 && !strcmp(p.text[1], "1."), "file prompts");
            tool_prompts_free(&p);
            unlink(path);
        }
    }
    return tu_finish("test_prompts_file");
}
