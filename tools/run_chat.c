/*
 * kvq run -i / -cnv: a multi-turn chat on one session. Each line of input
 * is a user turn in the model's chat template; the cache keeps every turn
 * (only the new turn is evaluated), so the model sees the whole
 * conversation. A turn that ends without the end-of-turn token (Ctrl-C,
 * -n) is closed with the template's end-of-turn text before the next one.
 * "/exit" (or "/quit") or the end of the input ends the chat; Ctrl-C stops
 * the current reply, and at the prompt ends the chat (exit 130).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "progress.h"
#include "run.h"

#define SENTINEL "\x01kvq-turn\x01"

/* The template's text for a user turn (system NULL: the template's default, "": none), malloc'd. */
static char *format_turn(const kvq_model *m, const char *system, const char *user) {
    size_t need = 0;
    char probe[1];
    int rc = kvq_chat_format(m, system, user, probe, sizeof probe, &need);
    if (rc && rc != KVQ_ERR_RANGE) {
        fprintf(stderr, "kvq run: chat template: %s\n", kvq_strerror(rc));
        return NULL;
    }
    char *t = malloc(need + 1);
    if (t && kvq_chat_format(m, system, user, t, need + 1, &need)) {
        free(t);
        t = NULL;
    }
    return t;
}

/* The end-of-turn text of the template ("<|im_end|>\n"): what follows the
 * user's message up to the first newline. */
static char *turn_close(const kvq_model *m) {
    char *t = format_turn(m, "", SENTINEL);
    if (!t) return NULL;
    char *s = strstr(t, SENTINEL);
    if (!s) { free(t); return NULL; }
    s += strlen(SENTINEL);
    size_t len = strcspn(s, "\n");
    if (s[len] == '\n') len++;
    memmove(t, s, len);
    t[len] = 0;
    return t;
}

/* One line of input (without its newline), malloc'd; NULL at the end of input or on Ctrl-C. */
static char *read_line(void) {
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        int c = getchar();
        if (c == EOF) {
            if (ferror(stdin) && errno == EINTR && !tool_interrupted()) { clearerr(stdin); continue; }
            if (n == 0 || tool_interrupted()) { free(buf); return NULL; }
            break;
        }
        if (c == '\n') break;
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) { free(buf); return NULL; }
            buf = b;
        }
        buf[n++] = (char)c;
    }
    if (n && buf[n - 1] == '\r') n--;
    buf[n] = 0;
    return buf;
}

/* ids = [pending] + tokens of text (no BOS unless first). */
static int turn_tokens(const run_ctx *r, int32_t pending, const char *text, int first, int32_t **ids, size_t *n) {
    int32_t *t = NULL;
    size_t nt = 0;
    int rc = run_tokenize(r->m, text, first, 1, &t, &nt);
    if (rc) return rc;
    int32_t *all = malloc(sizeof(int32_t) * (nt + 1));
    if (!all) { free(t); return KVQ_ERR_NOMEM; }
    size_t k = 0;
    if (pending >= 0) all[k++] = pending;
    memcpy(all + k, t, sizeof(int32_t) * nt);
    free(t);
    *ids = all;
    *n = k + nt;
    return KVQ_OK;
}

int run_chat(run_ctx *r, const char *system, const char *first, long n_per_reply) {
    char *close = turn_close(r->m);
    if (!close) {
        fprintf(stderr, "kvq run: -i needs a chat template the engine knows (ChatML or Gemma turns)\n");
        return TOOL_EXIT_RUNTIME;
    }
    int ret = 0, turns = 0, used_first = 0;
    int32_t pending = -1; /* last token of the previous reply, not evaluated yet */
    fprintf(stderr, "kvq run: chat; one line per turn, /exit or end of input to quit, Ctrl-C stops a reply\n");
    for (;;) {
        char *line = NULL;
        if (!used_first && first) {
            line = strdup(first);
            used_first = 1;
        }
        else {
            printf("\n> ");
            fflush(stdout);
            line = read_line();
            if (!line) {
                if (tool_interrupted()) ret = TOOL_EXIT_INTERRUPTED;
                break;
            }
        }
        if (!line) { ret = TOOL_EXIT_RUNTIME; break; }
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) { free(line); break; }
        if (!line[0]) { free(line); continue; }
        /* the turn's text: the template's turn, after the close of the previous one */
        char *turn = format_turn(r->m, turns ? "" : system, line);
        free(line);
        if (!turn) { ret = TOOL_EXIT_RUNTIME; break; }
        char *text = turn;
        if (turns) {
            size_t lc = strlen(close), lt = strlen(turn);
            text = malloc(lc + lt + 1);
            if (text) {
                memcpy(text, close, lc);
                memcpy(text + lc, turn, lt + 1);
            }
            free(turn);
            if (!text) { ret = TOOL_EXIT_RUNTIME; break; }
        }
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = turn_tokens(r, pending, text, turns == 0, &ids, &n);
        free(text);
        if (rc) { fprintf(stderr, "kvq run: tokenize: %s\n", kvq_strerror(rc)); ret = TOOL_EXIT_RUNTIME; break; }
        size_t pos = kvq_session_pos(r->s);
        if (pos + n >= r->n_ctx) {
            fprintf(stderr, "\nkvq run: context full: %zu tokens held + %zu for this turn exceed the context %zu "
                    "(-c); the chat ends\n", pos, n, r->n_ctx);
            free(ids);
            ret = TOOL_EXIT_RUNTIME;
            break;
        }
        size_t room = r->n_ctx - pos - n;
        size_t max_gen = n_per_reply < 0 || (size_t)n_per_reply > room ? room : (size_t)n_per_reply;
        int32_t last;
        run_end why;
        size_t n_done = 0;
        rc = run_reply(r, ids, n, max_gen, &last, &why, &n_done);
        free(ids);
        if (rc) { ret = TOOL_EXIT_RUNTIME; break; }
        turns++;
        pending = last;
        if (why == RUN_END_INTERRUPT) {
            fprintf(stderr, "\n[kvq run] reply stopped (Ctrl-C)");
            tool_interrupt_clear();
            if (n_done == 0 && kvq_session_truncate(r->s, pos) == KVQ_OK) { /* stopped in the prefill: forget the turn */
                turns--;
                pending = -1;
            }
        }
        printf("\n");
        fflush(stdout);
        if (why == RUN_END_CONTEXT || (why == RUN_END_LENGTH && (n_per_reply < 0 || (size_t)n_per_reply > room))) {
            fprintf(stderr, "kvq run: context full (%zu tokens, -c); the chat ends\n", kvq_session_pos(r->s));
            break;
        }
    }
    kvq_cache *c = kvq_session_cache(r->s);
    size_t pos = kvq_session_pos(r->s), bpt = kvq_cache_bytes_per_token(c);
    fprintf(stderr,
            "\n[kvq run] chat: %d turn(s), %zu tokens generated, %zu tokens in the cache: %zu bytes used "
            "(%zu bytes/token), %zu bytes allocated\n",
            turns, r->n_gen_total, pos, pos * bpt, bpt, kvq_cache_memory_bytes(c));
    free(close);
    return ret;
}
