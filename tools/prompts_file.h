/*
 * Prompt files of kvq gen-check (--prompts-file; docs/CLI.md): a JSON array
 * of strings, one prompt each, e.g.
 *     ["Explain how tides work.", "def fib(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"]
 * JSON (RFC 8259) so that a prompt can hold any text, blank lines and a
 * trailing newline included. Refused, with the line and column in msg:
 * anything that is not one array of strings (trailing commas, other JSON
 * values, text after the array), bytes that are not UTF-8, raw control
 * characters inside a string (write \n, \t), \u0000 and lone surrogates,
 * an empty array or empty prompt, more than TOOL_PROMPTS_MAX prompts, a
 * prompt longer than TOOL_PROMPT_MAX_BYTES bytes, a file larger than
 * TOOL_PROMPTS_FILE_MAX bytes. A UTF-8 byte-order mark is skipped.
 * A tool format, not part of libkvq.
 */
#ifndef KVQ_TOOLS_PROMPTS_FILE_H
#define KVQ_TOOLS_PROMPTS_FILE_H

#include <stddef.h>

#define TOOL_PROMPTS_MAX 256
#define TOOL_PROMPT_MAX_BYTES 16384
#define TOOL_PROMPTS_FILE_MAX (1u << 22)

typedef struct tool_prompts {
    char **text; /* (count) NUL-terminated UTF-8 prompts, malloc'd */
    int count;
} tool_prompts;

/*
 * Parses len bytes of text into *out (zeroed first; free with
 * tool_prompts_free, also after an error). Returns 0, KVQ_ERR_FORMAT (msg
 * says where and why), KVQ_ERR_RANGE (a limit above), KVQ_ERR_NOMEM or
 * KVQ_ERR_NULL.
 */
int tool_prompts_parse(const char *text, size_t len, tool_prompts *out, char *msg, size_t cap);
/* Reads and parses a file (KVQ_ERR_IO when it cannot be read). */
int tool_prompts_read(const char *path, tool_prompts *out, char *msg, size_t cap);
void tool_prompts_free(tool_prompts *p);

#endif
