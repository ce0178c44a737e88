/*
 * The one command-line parser of the kvq subcommands: a table of options per
 * subcommand (plus shared tables: the evaluation tools' common options, the
 * cache-policy options), strict values, exact messages.
 *
 *   - every option is looked up by name first, wherever it stands: an unknown
 *     one is reported as unknown, a known one missing its value as such;
 *   - numbers are parsed whole (no trailing text, no silent 0), checked
 *     against the row's range, and the message names the option, the value
 *     and the accepted range or list;
 *   - "--name=value" is accepted for long options, "-h"/"--help" prints the
 *     subcommand's usage on stdout;
 *   - exit codes: TOOL_EXIT_USAGE (2) for anything wrong on the command line,
 *     TOOL_EXIT_RUNTIME (1) for failures while running, TOOL_EXIT_INTERRUPTED
 *     (130) after Ctrl-C.
 */
#ifndef KVQ_TOOLS_ARGS_H
#define KVQ_TOOLS_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL_EXIT_RUNTIME 1
#define TOOL_EXIT_USAGE 2
#define TOOL_EXIT_INTERRUPTED 130

typedef enum {
    TOOL_ARG_SET,    /* no value: *(int *)dst = 1 */
    TOOL_ARG_CLEAR,  /* no value: *(int *)dst = 0 */
    TOOL_ARG_INT,    /* int in [min, max] */
    TOOL_ARG_LONG,   /* long in [min, max] */
    TOOL_ARG_U64,    /* uint64_t, any value (decimal) */
    TOOL_ARG_FLOAT,  /* finite float in [min, max] */
    TOOL_ARG_DOUBLE, /* finite double in [min, max] */
    TOOL_ARG_STR,    /* const char *: the value as given */
    TOOL_ARG_CHOICE, /* const char *: one of choices ("q8|f32") */
    TOOL_ARG_FN,     /* fn(user, name, value, err, cap) */
    TOOL_ARG_FN0,    /* fn(user, name, NULL, err, cap): no value */
    TOOL_ARG_FAIL,   /* a known option refused with the row's help as the reason (exit 2) */
} tool_arg_kind;

/* A callback's verdict: 0 accepted, -1 refused with the reason in err. */
typedef int (*tool_arg_fn)(void *user, const char *name, const char *val, char *err, size_t cap);

typedef struct tool_opt {
    const char *names;   /* '|'-separated spellings: "-n|--n-predict"; NULL ends a table */
    tool_arg_kind kind;
    void *dst;
    double min, max;     /* INT, LONG, FLOAT, DOUBLE: the accepted range */
    const char *choices; /* CHOICE: '|'-separated words */
    tool_arg_fn fn;      /* FN, FN0 */
    void *user;          /* FN, FN0 */
    const char *help;    /* FAIL: the message */
} tool_opt;

typedef struct tool_cmd {
    const char *name;                /* "run": messages read "kvq run: ..." */
    void (*usage)(FILE *f);          /* -h/--help (stdout) */
    const tool_opt *const *tables;   /* NULL-terminated list of tables, each ended by a NULL name */
    const char **pos;                /* positional arguments (NULL: none accepted) */
    int max_pos;
    int *n_pos;
} tool_cmd;

/* llama.cpp's -ngl (GPU layers), answered: kvq's engine runs on the CPU. */
#define TOOL_OPT_NGL                                                                                             \
    {.names = "-ngl|--n-gpu-layers|--gpu-layers", .kind = TOOL_ARG_FAIL,                                         \
     .help = "kvq's GGUF engine runs on the CPU: there are no GPU layers to offload. On a GPU use the "          \
             "Python/PyTorch integration (kvq.transformers, docs/TRANSFORMERS.md; CUDA kernels: docs/CUDA.md)"}

/*
 * Parses argv[1..argc) (argv[0] is the subcommand's name). Returns 0 on
 * success, -1 after printing the usage for -h/--help (the caller exits 0),
 * TOOL_EXIT_USAGE after printing the reason to stderr.
 */
int tool_args_parse(const tool_cmd *c, int argc, char **argv);

/*
 * Strict number parsing (the whole string, decimal, within [min, max]);
 * 0, or -1 with "'VAL': not an integer (accepted: MIN..MAX)" or "VAL: out
 * of range (accepted: MIN..MAX)" in err.
 */
int tool_parse_long(const char *s, long min, long max, long *out, char *err, size_t cap);
int tool_parse_double(const char *s, double min, double max, double *out, char *err, size_t cap);
/* A list "a,b,c" of integers (a K suffix multiplies by 1024), each in
 * [min, max], at most max_n; returns the count or -1 with the reason in err. */
int tool_parse_long_list(const char *s, long min, long max, long *out, int max_n, char *err, size_t cap);

/* "kvq CMD: MESSAGE\n" on stderr; returns TOOL_EXIT_USAGE. */
int tool_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
