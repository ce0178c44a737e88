/* Subcommands of the kvq CLI (one per file) and small shared CLI helpers. */
#ifndef KVQ_TOOLS_H
#define KVQ_TOOLS_H
#include <stddef.h>
#include <stdint.h>

int cmd_codec_bench(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);
int cmd_logits(int argc, char **argv);

/* Monotonic wall-clock seconds. */
double tool_now(void);
/* Parses "a,b,c" integers into out (at most max); returns count or -1. */
int tool_parse_int_list(const char *s, long *out, int max);
#endif
