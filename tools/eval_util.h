/*
 * Helpers shared by the quality evaluation subcommands (ppl, kld, needle,
 * gen-check): model + tokenizer + pool, sessions from a cache policy, the
 * Ctrl-C flag, the progress line, JSON output and log-softmax statistics.
 */
#ifndef KVQ_TOOLS_EVAL_UTIL_H
#define KVQ_TOOLS_EVAL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvq_engine.h"
#include "args.h"
#include "kvq.h"
#include "policy.h"

#define EVAL_MAX_POLICIES 32

/* Model, tokenizer and thread pool of one tool run. */
typedef struct eval_env {
    const char *tool;       /* "ppl", ... (messages) */
    const char *model_path;
    kvq_model *m;
    kvq_model_info info;    /* of m */
    kvq_pool *pool;
    int threads;
    int add_bos;            /* 1 if the tokenizer adds BOS to a text */
    char model_buf[4096];   /* default model path */
    kvq_model *m_test;      /* what tested sessions run on (eval_env_weights): m, or a second copy owned here */
    kvq_model_info info_test;
    const char *test_path;  /* --test-model (NULL: none) */
    double weights_seconds; /* coding the weights (--weights) took; NaN when not coded here */
} eval_env;

/* Loads the model (default model when path is NULL), its tokenizer and a pool.
 * Prints the reason and returns -1 on failure. */
int eval_env_open(eval_env *e, const char *tool, const char *model_path, int threads);
void eval_env_close(eval_env *e);

/* 1 if the model's GGUF has a chat template (an instruct model). */
int eval_model_has_chat(const eval_env *e);
/* Last path component. */
const char *eval_basename(const char *path);

/* A corpus file: path as given when it exists, else corpora/<basename> under
 * $KVQ_CORPORA_DIR, then next to the executable's parent and own directory
 * (build/kvq finds the repository's corpora/). Writes the path found (or
 * path itself) into buf. */
void eval_find_corpus(const char *path, char *buf, size_t cap);

/* Whole file into a malloc'd NUL-terminated buffer; NULL on failure (errno). */
char *eval_read_file(const char *path, size_t *len);

/* Tokenizes text into a malloc'd array (*ids, *n); KVQ_OK or an error code. */
int eval_tokenize(const kvq_model *t, const char *text, size_t len, int add_special, int parse_special,
                  int32_t **ids, size_t *n);

/*
 * Common options of the evaluation tools, as a table for tool_args_parse
 * (eval_common_table, next to the tool's own table): -m/--model,
 * -t/--threads, --acts q8|f32, --seed, --json, --policies, the cache-policy
 * options of policy.h (tool_policy_args: any order) and -ngl (refused:
 * CPU engine). After parsing, eval_common_finish builds the single policy.
 * The struct must not move after eval_common_init (the table points into it).
 */
typedef struct eval_common {
    const char *model;
    int threads;
    int f32_acts;
    const char *acts;         /* --acts value */
    uint64_t seed;
    int json;
    tool_policy_args pa;      /* the per-field policy options and --policy */
    tool_policy single;       /* built from them (eval_common_finish) */
    int single_set;           /* a policy option was given */
    tool_policy list[EVAL_MAX_POLICIES];
    int n_list;               /* from --policies */
    const char *weights;      /* --weights SPEC: weights coded with kvq (NULL: as stored) */
    const char *keep;         /* --keep TENSORS (NULL: KVQ_WEIGHTS_KEEP_DEFAULT) */
    const char *test_model;   /* --test-model PATH (kld only: tested sessions on another GGUF) */
    tool_opt rows[14];
} eval_common;

void eval_common_init(eval_common *c);
/* The common options' table, and the policy options' (both for tool_cmd.tables). */
const tool_opt *eval_common_table(eval_common *c);
const tool_opt *eval_common_policy_table(eval_common *c);
/* Builds the single policy after parsing; 0, or TOOL_EXIT_USAGE (message printed). */
int eval_common_finish(eval_common *c, const char *tool);
/* The policies to test: --policies, else the single one (f16 when nothing was given). */
int eval_common_policies(const eval_common *c, tool_policy *out, int max);
/* Help text of the common options. */
void eval_common_usage(FILE *f);

/*
 * The weights of the tested sessions (--weights, --keep, --test-model):
 * separate = 0 codes e->m itself (ppl, needle, gen-check: every session
 * tests the coded weights); separate = 1 (kld) loads a second model
 * (--test-model, else -m again) and codes that one, so that the base runs
 * on the weights as stored. Sets e->m_test (e->m when nothing was asked).
 * Prints the reason and returns -1 on failure.
 */
int eval_env_weights(eval_env *e, const eval_common *c, int separate);
/* One line about the tested weights for the banner ("" when as stored). */
void eval_weights_desc(const eval_env *e, char *buf, size_t cap);
/* JSON fields "weights","weights_bits","test_model" (leading comma). */
void eval_json_weights(FILE *f, const eval_env *e);

/* A session for one policy on e->m; prints the reason and returns an error code. */
int eval_session(const eval_env *e, tool_policy *p, int n_batch, int f32_acts, uint64_t seed, kvq_attn_hook hook,
                 void *hook_user, kvq_session **out);
/* The same on another model (e->m_test). */
int eval_session_on(const eval_env *e, const kvq_model *m, tool_policy *p, int n_batch, int f32_acts, uint64_t seed,
                    kvq_attn_hook hook, void *hook_user, kvq_session **out);

/* Bits per value of a policy's K and V methods at the model's head dim (the
 * plans' bits: codes + scales), and their mean. -1 on a bad spec. */
int eval_policy_bits(const tool_policy *p, int head_dim, double *bits_k, double *bits_v);
/* Bits per cached value over all layers as the cache counts them
 * (kvq_cache_bytes_per_token: f16 and sliding-window layers included). */
double eval_cache_bits_all(kvq_session *s, const kvq_model *m);

/* Ctrl-C: the first SIGINT sets a flag (the tool stops after the current
 * unit of work and prints what it has), a second one kills the process. */
void eval_sigint_install(void);
int eval_interrupted(void);

/* Progress line on stderr, only when stderr is a terminal. */
typedef struct eval_progress {
    const char *tool;
    double t0, last;
    int tty;
} eval_progress;
void eval_progress_init(eval_progress *p, const char *tool);
/* done/total units (ETA from their ratio); rate = tokens per second shown. */
void eval_progress_update(eval_progress *p, double done, double total, double tokens, const char *what);
void eval_progress_end(eval_progress *p);

/* JSON: a quoted, escaped string; a number (null for NaN/Inf). */
void eval_json_str(FILE *f, const char *s);
void eval_json_num(FILE *f, double x);

/* Per-position statistics of logits rows (run on the pool). For row i:
 * lse[i] = log sum exp, top[i] = argmax, nll[i] = lse - logit[next[i]]
 * (next may be NULL: nll not computed). */
int eval_logit_stats(kvq_pool *pool, const float *logits, int n_vocab, size_t n, const int32_t *next, double *lse,
                     int32_t *top, double *nll);
/* kl[i] = KL(base_i || test_i) of the softmax distributions, given their lse. */
int eval_kl(kvq_pool *pool, const float *base, const double *lse_base, const float *test, const double *lse_test,
            int n_vocab, size_t n, double *kl);

/* Mean and standard error of x[0..n). */
void eval_mean_se(const double *x, size_t n, double *mean, double *se);
/* q-quantile (0..1) of x[0..n) (sorts a copy; NaN when n == 0). */
double eval_quantile(const double *x, size_t n, double q);

/*
 * The eval calls of one perplexity window of C tokens whose positions
 * >= first are scored: [0, first) in calls of at most B tokens without
 * logits, then [first, C) in calls of at most B tokens with all logits; B = 0:
 * the whole window as one call with all logits. Returns the number of calls
 * written to a/b/logits (at most max).
 */
typedef struct eval_call { size_t a, b; int logits; } eval_call;
int eval_window_calls(size_t C, size_t first, size_t B, eval_call *calls, int max);

/* "1m05s" style duration. */
void eval_fmt_duration(char *buf, size_t cap, double s);

#endif
