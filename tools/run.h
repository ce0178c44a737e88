/*
 * kvq run's pieces shared by the one-shot run (run.c) and the interactive
 * chat (run_chat.c): the loaded model, session and sampler, the context
 * limit, prefill with a progress line, and one generated reply.
 */
#ifndef KVQ_TOOLS_RUN_H
#define KVQ_TOOLS_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"
#include "kvq_engine.h"
#include "policy.h"

typedef struct run_ctx {
    const kvq_model *m;
    kvq_model_info mi;
    kvq_session *s;
    kvq_sampler *smp;
    size_t n_ctx;   /* context limit in tokens (-c, capped at the model's) */
    int batch;      /* prefill chunk (the session's n_batch) */
    int quiet;      /* do not stream the text */
    int stop_on_sigint; /* Ctrl-C stops the reply (the chat: and returns to the prompt) */
    double t_prompt, t_gen; /* seconds of the last prefill / generation */
    size_t n_gen_total;     /* tokens generated over all replies */
} run_ctx;

/* Why a reply ended. */
typedef enum { RUN_END_LENGTH, RUN_END_EOG, RUN_END_CONTEXT, RUN_END_INTERRUPT } run_end;

/*
 * Evaluates ids[0..n) and generates at most max_gen tokens (kvq_generate:
 * the same tokens as the library's generation), streaming them; the prompt
 * is prefilled first in chunks of r->batch with a progress line on stderr
 * when it is long. *last: the last token generated and not yet evaluated
 * (-1 if none), *why: why it ended, *n_done: tokens generated. Returns a
 * KVQ status (message printed).
 */
int run_reply(run_ctx *r, const int32_t *ids, size_t n, size_t max_gen, int32_t *last, run_end *why, size_t *n_done);

/* Tokenizes text (add_special, parse_special) into a malloc'd array; KVQ status. */
int run_tokenize(const kvq_model *m, const char *text, int add_special, int parse_special, int32_t **ids, size_t *n);

/* The interactive chat (-i / -cnv). first: the -p text or NULL. Returns the exit code. */
int run_chat(run_ctx *r, const char *system, const char *first, long n_per_reply);

#endif
