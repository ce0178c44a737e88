/*
 * kvq needle: passkey retrieval. A random 5-7 digit number is hidden at
 * several depths of filler text; the model is asked for it and decodes a
 * few tokens greedily; exact match of the first number it writes.
 *
 * Prompt (all tokens, ctx = prompt + --gen):
 *   instruct models (the GGUF has a chat template; --chat / --completion
 *   override): one user turn of the model's chat format
 *     "There is a pass key hidden inside a lot of irrelevant text. Find it and
 *      memorize it. I will quiz you about the pass key.\n\n" FILLER
 *     "\n\nWhat is the pass key?"
 *   followed by the assistant prefix and "The pass key is";
 *   base models (Gemma 3 270M): the same text as a completion, ending
 *     "What is the pass key? The pass key is".
 * The needle " The pass key is NNNNN. Remember it. NNNNN is the pass key."
 * goes after the filler token at depth d (0 = start, 1 = end of the filler),
 * moved forward to the next sentence end (a token ending in '.') when one is
 * within 200 tokens. Filler: --filler prose (default): consecutive text of
 * corpora/prose.txt (Pride and Prejudice) from an offset that depends on the
 * trial; --filler grass: the classic "The grass is green. The sky is blue.
 * The sun is yellow. Here we go. There and back again." repeated.
 * Every policy sees exactly the same token sequences.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_util.h"
#include "tools.h"

#define MAX_CTX 32
#define MAX_DEPTHS 32
#define SENTINEL "\x01HAYSTACK\x01"

static const char INTRO[] =
    "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about "
    "the pass key.\n\n";
static const char QUESTION[] = "\n\nWhat is the pass key?";
static const char GRASS[] = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq needle [-m MODEL] --ctx N[,N...] [options]\n"
            "  passkey retrieval: a 5-7 digit number hidden at several depths of filler text,\n"
            "  exact-match accuracy of the greedy answer per context length and depth\n"
            "  -c, --ctx N,N,...       prompt + generation lengths in tokens (default 1024; 4K = 4096)\n"
            "  --depths D,D,...        needle depths in [0, 1] (default 0,0.25,0.5,0.75,1)\n"
            "  --trials K              prompts per (ctx, depth), each a new number and filler (default 2)\n"
            "  --filler prose|grass    filler text (default prose: corpora/prose.txt)\n"
            "  --filler-file PATH      text for --filler prose (default corpora/prose.txt)\n"
            "  --gen N                 tokens decoded for the answer (default 12)\n"
            "  --chat | --completion   prompt style (default: chat when the GGUF has a chat template)\n"
            "  -b, --batch B           prompt tokens per eval call (default 256)\n");
    eval_common_usage(f);
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Parses "0,0.25,1" into out; count or -1. */
static int parse_depths(const char *s, double *out, int max) {
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v >= 0.0 && v <= 1.0) || n >= max) return -1;
        out[n++] = v;
        if (*end == ',') end++;
        else if (*end) return -1;
        s = end;
    }
    return n;
}

/* 1 if token id's text ends a sentence. */
static int ends_sentence(const kvq_model *t, int32_t id) {
    char buf[64];
    size_t n = 0;
    if (kvq_token_to_piece(t, id, buf, sizeof buf, &n) != KVQ_OK || n == 0) return 0;
    while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '\n')) n--;
    return n > 0 && (buf[n - 1] == '.' || buf[n - 1] == '!' || buf[n - 1] == '?');
}

typedef struct {
    tool_policy pol;
    int *correct;     /* (n_ctx, n_depths) */
    int *done;
    char **answers;   /* (n_ctx, n_depths, trials) */
    double seconds;
    size_t tokens;
} pol_state;

typedef struct {
    int chat;
    const char *filler;
    int gen, trials;
} needle_cfg;

static void print_result(FILE *f, const eval_env *e, const needle_cfg *nc, const pol_state *ps, int ci, int di, long ctx,
                         double depth, int nd, char keys[][16], int nk) {
    int idx = ci * nd + di;
    fprintf(f, "{\"tool\":\"needle\",\"record\":\"result\",\"model\":");
    eval_json_str(f, eval_basename(e->model_path));
    eval_json_weights(f, e);
    fprintf(f, ",");
    tool_policy_json(&ps->pol, f);
    fprintf(f, ",\"ctx\":%ld,\"depth\":%.4g,\"trials\":%d,\"correct\":%d,\"accuracy\":", ctx, depth, ps->done[idx],
            ps->correct[idx]);
    eval_json_num(f, ps->done[idx] ? (double)ps->correct[idx] / ps->done[idx] : NAN);
    fprintf(f, ",\"keys\":[");
    for (int t = 0; t < nk; t++) {
        if (t) fputc(',', f);
        eval_json_str(f, keys[t]);
    }
    fprintf(f, "],\"answers\":[");
    for (int t = 0; t < ps->done[idx]; t++) {
        if (t) fputc(',', f);
        eval_json_str(f, ps->answers[(size_t)idx * nc->trials + t] ? ps->answers[(size_t)idx * nc->trials + t] : "");
    }
    fprintf(f, "],\"filler\":\"%s\",\"chat\":%s}\n", nc->filler, nc->chat ? "true" : "false");
    fflush(f);
}

/* Greedy answer of one prompt under one policy: the decoded text into ans. */
static int answer(const eval_env *e, tool_policy *pol, const eval_common *co, int batch, const int32_t *prompt,
                  size_t n, int gen, float *logits, char *ans, size_t cap, double *secs) {
    kvq_session *s = NULL;
    int rc = eval_session(e, pol, batch, co->f32_acts, co->seed, NULL, NULL, &s);
    if (rc) return rc;
    double t0 = tool_now();
    size_t len = 0;
    ans[0] = 0;
    rc = kvq_session_eval(s, prompt, n, logits, 0);
    int seen_digit = 0;
    for (int g = 0; !rc && g < gen; g++) {
        int32_t next = 0;
        float best = logits[0];
        for (int i = 1; i < e->info.n_vocab; i++)
            if (logits[i] > best) { best = logits[i]; next = i; }
        if (kvq_token_is_eog(e->m, next)) break;
        char piece[128];
        size_t pn = 0;
        if (kvq_token_to_piece(e->m, next, piece, sizeof piece, &pn) != KVQ_OK) pn = 0;
        int stop = 0;
        for (size_t i = 0; i < pn; i++) {
            int d = isdigit((unsigned char)piece[i]);
            if (seen_digit && !d) stop = 1;
            seen_digit |= d;
        }
        if (len + pn < cap) {
            memcpy(ans + len, piece, pn);
            len += pn;
            ans[len] = 0;
        }
        if (stop || g + 1 == gen) break;
        rc = kvq_session_eval(s, &next, 1, logits, 0);
    }
    *secs += tool_now() - t0;
    kvq_session_free(s);
    return rc;
}

/* First run of digits of s into out ("" if none). */
static void first_number(const char *s, char *out, size_t cap) {
    size_t n = 0;
    while (*s && !isdigit((unsigned char)*s)) s++;
    while (*s && isdigit((unsigned char)*s) && n + 1 < cap) out[n++] = *s++;
    out[n] = 0;
}

int cmd_needle(int argc, char **argv) {
    eval_common co;
    eval_common_init(&co);
    const char *ctx_list = "1024", *depth_list = "0,0.25,0.5,0.75,1", *filler_file = "corpora/prose.txt";
    needle_cfg nc = {-1, "prose", 12, 2};
    long batch = 256;
    const tool_opt opts[] = {
        {.names = "--ctx|-c|--ctx-size", .kind = TOOL_ARG_STR, .dst = &ctx_list},
        {.names = "--depths", .kind = TOOL_ARG_STR, .dst = &depth_list},
        {.names = "--trials", .kind = TOOL_ARG_INT, .dst = &nc.trials, .min = 1, .max = 1000},
        {.names = "--filler", .kind = TOOL_ARG_CHOICE, .dst = &nc.filler, .choices = "prose|grass"},
        {.names = "--filler-file", .kind = TOOL_ARG_STR, .dst = &filler_file},
        {.names = "--gen", .kind = TOOL_ARG_INT, .dst = &nc.gen, .min = 1, .max = 64},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_LONG, .dst = &batch, .min = 1, .max = 65536},
        {.names = "--chat", .kind = TOOL_ARG_SET, .dst = &nc.chat},
        {.names = "--completion", .kind = TOOL_ARG_CLEAR, .dst = &nc.chat},
        {0}};
    const tool_opt *tables[] = {opts, eval_common_table(&co), eval_common_policy_table(&co), NULL};
    const tool_cmd cmd = {.name = "needle", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if ((pr = eval_common_finish(&co, "needle"))) return pr;
    long ctxs[MAX_CTX];
    double depths[MAX_DEPTHS];
    char perr[256];
    int nctx = tool_parse_long_list(ctx_list, 16, 1L << 24, ctxs, MAX_CTX, perr, sizeof perr);
    if (nctx < 0) return tool_usage_error("needle", "--ctx %s", perr);
    int nd = parse_depths(depth_list, depths, MAX_DEPTHS);
    if (nd <= 0)
        return tool_usage_error("needle", "--depths '%s': not a comma-separated list of at most %d numbers in 0..1",
                                depth_list, MAX_DEPTHS);
    tool_policy pols[EVAL_MAX_POLICIES];
    int np = eval_common_policies(&co, pols, EVAL_MAX_POLICIES);

    eval_env e;
    if (eval_env_open(&e, "needle", co.model, co.threads)) return 1;
    if (eval_env_weights(&e, &co, 0)) { eval_env_close(&e); return 1; }
    const kvq_model_info *mc = &e.info;
    if (nc.chat < 0) nc.chat = eval_model_has_chat(&e);
    int ret = 1, rc = 0;
    char *src = NULL, *chat_text = NULL;
    int32_t *fill = NULL, *pre = NULL, *post = NULL, *prompt = NULL;
    size_t nfill = 0, npre = 0, npost = 0;
    float *logits = NULL;
    pol_state *ps = calloc((size_t)np, sizeof *ps);
    size_t ncell = (size_t)nctx * (size_t)nd;
    if (!ps) goto nomem;
    for (int p = 0; p < np; p++) {
        ps[p].pol = pols[p];
        ps[p].correct = calloc(ncell, sizeof(int));
        ps[p].done = calloc(ncell, sizeof(int));
        ps[p].answers = calloc(ncell * (size_t)nc.trials, sizeof(char *));
        if (!ps[p].correct || !ps[p].done || !ps[p].answers) goto nomem;
    }
    /* filler tokens */
    if (!strcmp(nc.filler, "prose")) {
        size_t len = 0;
        char found[4096];
        eval_find_corpus(filler_file, found, sizeof found);
        src = eval_read_file(found, &len);
        if (!src) {
            fprintf(stderr, "kvq needle: %s: %s (bash scripts/fetch-corpora.sh, or --filler grass)\n", filler_file,
                    strerror(errno));
            goto done;
        }
        if ((rc = eval_tokenize(e.m, src, len, 0, 0, &fill, &nfill))) goto tokfail;
    } else {
        int32_t *unit = NULL;
        size_t nu = 0;
        if ((rc = eval_tokenize(e.m, GRASS, strlen(GRASS), 0, 0, &unit, &nu))) goto tokfail;
        long maxc = 0;
        for (int c = 0; c < nctx; c++) maxc = ctxs[c] > maxc ? ctxs[c] : maxc;
        nfill = ((size_t)maxc / nu + 2) * nu;
        fill = malloc(sizeof(int32_t) * nfill);
        if (!fill) { free(unit); goto nomem; }
        for (size_t i = 0; i < nfill; i++) fill[i] = unit[i % nu];
        free(unit);
    }
    /* the text before and after the filler */
    {
        const char *pre_text = INTRO;
        char post_text[512];
        if (nc.chat) {
            char user[512];
            snprintf(user, sizeof user, "%s%s%s", INTRO, SENTINEL, QUESTION);
            size_t need = 0;
            char probe[1];
            rc = kvq_chat_format(e.m, NULL, user, probe, sizeof probe, &need);
            if (rc && rc != KVQ_ERR_RANGE) { fprintf(stderr, "kvq needle: chat format: %s\n", kvq_strerror(rc)); goto done; }
            chat_text = malloc(need + 1);
            if (!chat_text) goto nomem;
            if ((rc = kvq_chat_format(e.m, NULL, user, chat_text, need + 1, &need))) goto done;
            char *cut = strstr(chat_text, SENTINEL);
            if (!cut) { fprintf(stderr, "kvq needle: chat format lost the prompt\n"); goto done; }
            *cut = 0;
            pre_text = chat_text;
            snprintf(post_text, sizeof post_text, "%sThe pass key is", cut + strlen(SENTINEL));
        } else snprintf(post_text, sizeof post_text, "%s The pass key is", QUESTION);
        if ((rc = eval_tokenize(e.m, pre_text, strlen(pre_text), 1, nc.chat, &pre, &npre))) goto tokfail;
        if ((rc = eval_tokenize(e.m, post_text, strlen(post_text), 0, nc.chat, &post, &npost))) goto tokfail;
    }
    long maxc = 0;
    for (int c = 0; c < nctx; c++) maxc = ctxs[c] > maxc ? ctxs[c] : maxc;
    prompt = malloc(sizeof(int32_t) * (size_t)maxc + 64 * sizeof(int32_t));
    logits = malloc(sizeof(float) * (size_t)mc->n_vocab);
    if (!prompt || !logits) goto nomem;
    fprintf(stderr, "kvq needle: %s, %s prompt, filler %s, %d polic%s, %d threads\n", eval_basename(e.model_path),
            nc.chat ? "chat" : "completion", nc.filler, np, np == 1 ? "y" : "ies", co.threads);
    eval_sigint_install();
    eval_progress prog;
    eval_progress_init(&prog, "needle");
    double total = 0, doneu = 0, toks = 0;
    for (int c = 0; c < nctx; c++)
        if (ctxs[c] <= (mc->n_ctx_train > 0 ? mc->n_ctx_train : ctxs[c])) total += (double)nd * nc.trials * np;
    int stop = 0;
    for (int c = 0; c < nctx && !stop; c++) {
        long ctx = ctxs[c];
        if (mc->n_ctx_train > 0 && ctx > mc->n_ctx_train) {
            fprintf(stderr, "kvq needle: skipping ctx %ld beyond the model's context %d\n", ctx, mc->n_ctx_train);
            continue;
        }
        for (int d = 0; d < nd && !stop; d++) {
            char keys[1000][16];
            int nk = 0;
            for (int t = 0; t < nc.trials && !stop; t++) {
                uint64_t st = co.seed * 0x100000001B3ull ^ ((uint64_t)ctx << 20) ^ ((uint64_t)d << 10) ^ (uint64_t)t;
                splitmix64(&st);
                int ndig = 5 + (int)(splitmix64(&st) % 3);
                char *key = keys[nk++];
                key[0] = (char)('1' + splitmix64(&st) % 9);
                for (int i = 1; i < ndig; i++) key[i] = (char)('0' + splitmix64(&st) % 10);
                key[ndig] = 0;
                char ntext[128];
                snprintf(ntext, sizeof ntext, " The pass key is %.15s. Remember it. %.15s is the pass key.", key, key);
                int32_t *nid = NULL;
                size_t nn = 0;
                if ((rc = eval_tokenize(e.m, ntext, strlen(ntext), 0, 0, &nid, &nn))) goto tokfail;
                long F = ctx - (long)npre - (long)nn - (long)npost - nc.gen;
                if (F < 0) {
                    fprintf(stderr, "kvq needle: --ctx %ld: too short, a prompt needs at least %ld tokens here "
                            "(instructions %zu, needle %zu, question %zu, --gen %d)\n", ctx,
                            (long)(npre + nn + npost) + nc.gen, npre, nn, npost, nc.gen);
                    free(nid);
                    ret = TOOL_EXIT_USAGE;
                    goto done;
                }
                if ((size_t)F > nfill) {
                    fprintf(stderr, "kvq needle: --ctx %ld: needs %ld filler tokens, the filler text has %zu "
                            "(a longer --filler-file, or --filler grass)\n", ctx, F, nfill);
                    free(nid);
                    goto done;
                }
                size_t off = 0;
                if (!strcmp(nc.filler, "prose") && nfill > (size_t)F + 1) {
                    off = (size_t)(splitmix64(&st) % (nfill - (size_t)F));
                    /* start after a sentence end when one is near */
                    for (size_t k = 0; k < 200 && off + k + 1 + (size_t)F <= nfill; k++)
                        if (ends_sentence(e.m, fill[off + k])) { off += k + 1; break; }
                }
                const int32_t *fl = fill + off;
                size_t ins = (size_t)llround(depths[d] * (double)F);
                if (ins > 0 && ins < (size_t)F)
                    for (size_t k = 0; k < 200 && ins + k < (size_t)F; k++)
                        if (ends_sentence(e.m, fl[ins + k - 1])) { ins += k; break; }
                size_t n = 0;
                memcpy(prompt + n, pre, sizeof(int32_t) * npre);
                n += npre;
                memcpy(prompt + n, fl, sizeof(int32_t) * ins);
                n += ins;
                memcpy(prompt + n, nid, sizeof(int32_t) * nn);
                n += nn;
                memcpy(prompt + n, fl + ins, sizeof(int32_t) * ((size_t)F - ins));
                n += (size_t)F - ins;
                memcpy(prompt + n, post, sizeof(int32_t) * npost);
                n += npost;
                free(nid);
                for (int p = 0; p < np; p++) {
                    char ans[512], num[64];
                    if ((rc = answer(&e, &ps[p].pol, &co, (int)batch, prompt, n, nc.gen, logits, ans, sizeof ans,
                                     &ps[p].seconds))) {
                        fprintf(stderr, "kvq needle: eval: %s\n", kvq_strerror(rc));
                        goto done;
                    }
                    ps[p].tokens += n;
                    toks += (double)n;
                    first_number(ans, num, sizeof num);
                    size_t idx = (size_t)c * nd + (size_t)d;
                    ps[p].correct[idx] += !strcmp(num, key);
                    ps[p].answers[idx * (size_t)nc.trials + (size_t)ps[p].done[idx]] = strdup(ans);
                    ps[p].done[idx]++;
                    doneu += 1;
                    char what[96];
                    snprintf(what, sizeof what, "ctx %ld depth %.2f trial %d/%d", ctx, depths[d], t + 1, nc.trials);
                    eval_progress_update(&prog, doneu, total, toks, what);
                }
                if (eval_interrupted()) stop = 1;
            }
            if (co.json)
                for (int p = 0; p < np; p++) print_result(stdout, &e, &nc, &ps[p], c, d, ctx, depths[d], nd, keys, nk);
        }
    }
    eval_progress_end(&prog);
    if (stop) fprintf(stderr, "kvq needle: interrupted\n");
    if (co.json) {
        for (int p = 0; p < np; p++) {
            for (int c = 0; c < nctx; c++) {
                int cor = 0, tot = 0;
                for (int d = 0; d < nd; d++) {
                    cor += ps[p].correct[c * nd + d];
                    tot += ps[p].done[c * nd + d];
                }
                if (!tot) continue;
                printf("{\"tool\":\"needle\",\"record\":\"summary\",\"model\":");
                eval_json_str(stdout, eval_basename(e.model_path));
                eval_json_weights(stdout, &e);
                printf(",");
                tool_policy_json(&ps[p].pol, stdout);
                printf(",\"ctx\":%ld,\"trials\":%d,\"correct\":%d,\"accuracy\":", ctxs[c], tot, cor);
                eval_json_num(stdout, (double)cor / tot);
                printf(",\"seconds\":");
                eval_json_num(stdout, ps[p].seconds);
                printf(",\"interrupted\":%s,\"partial\":%s}\n", stop ? "true" : "false", stop ? "true" : "false");
                fflush(stdout);
            }
        }
    } else {
        printf("model %s, %s prompt, filler %s, correct / trials per depth%s\n\n", eval_basename(e.model_path),
               nc.chat ? "chat" : "completion", nc.filler,
               stop ? " (PARTIAL: interrupted; '-' = not run, 'all' over the trials run)" : "");
        printf("%-28s %7s", "policy", "ctx");
        for (int d = 0; d < nd; d++) printf(" %8.2f", depths[d]);
        printf(" %9s\n", "all");
        for (int p = 0; p < np; p++) {
            char name[TOOL_POLICY_NAME];
            tool_policy_name(&ps[p].pol, name, sizeof name);
            for (int c = 0; c < nctx; c++) {
                int cor = 0, tot = 0;
                for (int d = 0; d < nd; d++) {
                    cor += ps[p].correct[c * nd + d];
                    tot += ps[p].done[c * nd + d];
                }
                if (!tot) continue;
                printf("%-28s %7ld", name, ctxs[c]);
                for (int d = 0; d < nd; d++) {
                    char cell[32];
                    if (ps[p].done[c * nd + d])
                        snprintf(cell, sizeof cell, "%d/%d", ps[p].correct[c * nd + d], ps[p].done[c * nd + d]);
                    else snprintf(cell, sizeof cell, "-");
                    printf(" %8s", cell);
                }
                printf(" %8.0f%%\n", 100.0 * cor / tot);
            }
        }
        fflush(stdout);
    }
    ret = stop ? TOOL_EXIT_INTERRUPTED : 0;
    goto done;
tokfail:
    fprintf(stderr, "kvq needle: tokenize: %s\n", kvq_strerror(rc));
    goto done;
nomem:
    fprintf(stderr, "kvq needle: out of memory\n");
done:
    if (ps)
        for (int p = 0; p < np; p++) {
            if (ps[p].answers)
                for (size_t i = 0; i < ncell * (size_t)nc.trials; i++) free(ps[p].answers[i]);
            free(ps[p].answers);
            free(ps[p].correct);
            free(ps[p].done);
        }
    free(ps);
    free(src);
    free(chat_text);
    free(fill);
    free(pre);
    free(post);
    free(prompt);
    free(logits);
    eval_env_close(&e);
    return ret;
}
