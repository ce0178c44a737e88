/*
 * kvq gen-check: does greedy generation stay coherent on a compressed cache?
 * For each prompt of a fixed set (below: chat-formatted for instruct models,
 * completion-style for base models), the f16 cache first, then every policy,
 * greedy decoding of up to N tokens (stopping at an end-of-generation
 * token). Per prompt and policy:
 *   coherent  tokens generated before an EOS or the start of the first
 *             degenerate repeat, whichever comes first;
 *   degenerate repeat: the last 3n tokens are one n-gram (n >= 4) three
 *             times in a row, or the last 8 tokens are one token; the repeat
 *             starts where that periodic run starts (extended backwards);
 *   diverge   first position (0-based, in generated tokens) where the token
 *             stream differs from the f16 cache's (null when identical; a
 *             stream that stops earlier diverges at its end).
 * Averages over prompts: mean coherent, mean divergence (an identical
 * stream counts as its length), identical streams.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_util.h"
#include "prompts_file.h"
#include "tools.h"

typedef struct {
    const char *chat;       /* user message for instruct models */
    const char *completion; /* text to continue for base models */
} gen_prompt;

static const gen_prompt PROMPTS[] = {
    {"Write a short story about a robot who learns to paint.",
     "Once upon a time, in a small workshop at the edge of the city, there lived a robot who"},
    {"Explain how photosynthesis works in simple terms.",
     "Photosynthesis is the process by which plants"},
    {"What were the main causes of the French Revolution?",
     "The French Revolution of 1789 had several causes. The first was"},
    {"Write a Python function that checks whether a number is prime, and explain how it works.",
     "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n"},
    {"Give me a recipe for a simple tomato soup.",
     "Simple tomato soup (serves four)\n\nIngredients:\n-"},
    {"Describe the water cycle step by step.",
     "The water cycle describes how water moves between the oceans, the air and the land. First,"},
    {"Write a polite email to a colleague asking to move our meeting from Tuesday to Thursday.",
     "Dear Anna,\n\nI hope this message finds you well. I am writing to ask whether"},
    {"List five tips for learning a new language.",
     "Here are five tips for learning a new language:\n\n1."},
    {"What is the difference between a virus and a bacterium?",
     "Viruses and bacteria are both too small to see with the naked eye, but they differ in"},
    {"Summarize the plot of Romeo and Juliet in a few sentences.",
     "Romeo and Juliet, the tragedy by William Shakespeare, tells the story of"},
    {"Write a C function that reverses a string in place.",
     "#include <string.h>\n\n/* Reverses the NUL-terminated string s in place. */\nvoid reverse(char *s) {\n"},
    {"Name the planets of the solar system in order, with one fact about each.",
     "The planets of the solar system, in order from the Sun:\n\n1. Mercury:"},
    {"Explain what a hash table is and when you would use one.",
     "A hash table is a data structure that"},
    {"How do I make a good cup of coffee at home?",
     "How to brew a good cup of coffee at home\n\nStep 1:"},
    {"Write a short dialogue between a customer and a baker.",
     "CUSTOMER: Good morning! What do you have fresh today?\nBAKER:"},
    {"Why is the sky blue? Answer in one paragraph.",
     "On a clear day the sky looks blue because"},
};
#define N_PROMPTS ((int)(sizeof PROMPTS / sizeof PROMPTS[0]))

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq gen-check [-m MODEL] [policy options] [options]\n"
            "  greedy generation over %d built-in prompts (or a file's), f16 cache first, then each policy:\n"
            "  tokens before EOS or a degenerate repeat, first position where the tokens differ from the\n"
            "  f16 cache's, degenerate prompts where f16 is coherent\n"
            "  -n, --n N               tokens to generate per prompt (default 200)\n"
            "  --prompts K             use the first K prompts (default all)\n"
            "  --prompts-file FILE     the prompts of a JSON array of strings instead of the built-in ones\n"
            "                          (each the user message with --chat, the text to continue otherwise)\n"
            "  --chat | --completion   prompt style (default: chat when the GGUF has a chat template)\n"
            "  --per-prompt            with --json, also one record per prompt and policy (with the text)\n"
            "  --show                  print the generated texts (human output)\n",
            N_PROMPTS);
    eval_common_usage(f);
}

/* Start of a degenerate repeat ending at the last token of g[0..n), or -1. */
static long degenerate_start(const int32_t *g, size_t n) {
    if (n >= 8) {
        int same = 1;
        for (size_t i = n - 8; i < n; i++) same &= g[i] == g[n - 1];
        if (same) {
            size_t s = n - 8;
            while (s > 0 && g[s - 1] == g[n - 1]) s--;
            return (long)s;
        }
    }
    for (size_t p = 4; 3 * p <= n; p++) {
        int rep = 1;
        for (size_t i = n - 3 * p; i < n - p && rep; i++) rep = g[i] == g[i + p];
        if (rep) {
            size_t s = n - 3 * p;
            while (s > 0 && g[s - 1] == g[s - 1 + p]) s--;
            return (long)s;
        }
    }
    return -1;
}

typedef struct {
    int prompt_tokens;
    int generated;    /* tokens generated (EOS not counted) */
    int eos;          /* stopped by an end-of-generation token */
    long degen;       /* start of the first degenerate repeat, -1 if none */
    int coherent;
    long diverge;     /* -1: identical to f16 */
    int beyond_f16;   /* degenerate where the f16 cache's stream is not */
} prompt_result;

typedef struct {
    tool_policy pol;
    prompt_result *r; /* (number of prompts) */
    int done;
    double seconds;
    size_t tokens;
    size_t bytes_per_token; /* kvq_cache_bytes_per_token of the session's cache: one compressed token, all layers */
    size_t kv_bytes, kv_pos; /* kvq_cache_memory_bytes (whole pages) at the end of the longest prompt, its positions */
} pol_state;

static int is_plain_f16(const tool_policy *p) {
    return !strcmp(p->k_spec, "f16") && !strcmp(p->v_spec, "f16") && p->f16_window == 0 && p->n_f16_layers == 0;
}

/* Greedy generation of up to n tokens after the prompt into out; returns the
 * count in *ng and whether an EOG token stopped it. */
static int generate(const eval_env *e, pol_state *ps, const eval_common *co, const int32_t *prompt, size_t np,
                    int n, float *logits, int32_t *out, int *ng, int *eos) {
    kvq_session *s = NULL;
    int nb = np > 256 ? 256 : (int)np;
    int rc = eval_session(e, &ps->pol, nb, co->f32_acts, co->seed, NULL, NULL, &s);
    if (rc) return rc;
    double t0 = tool_now();
    *ng = 0;
    *eos = 0;
    rc = kvq_session_eval(s, prompt, np, logits, 0);
    while (!rc && *ng < n) {
        int32_t next = 0;
        float best = logits[0];
        for (int i = 1; i < e->info.n_vocab; i++)
            if (logits[i] > best) { best = logits[i]; next = i; }
        if (kvq_token_is_eog(e->m, next)) { *eos = 1; break; }
        out[(*ng)++] = next;
        if (*ng == n) break;
        rc = kvq_session_eval(s, &next, 1, logits, 0);
    }
    ps->seconds += tool_now() - t0;
    if (!rc) {
        const kvq_cache *c = kvq_session_cache(s);
        size_t pos = kvq_session_pos(s);
        ps->bytes_per_token = kvq_cache_bytes_per_token(c);
        if (pos > ps->kv_pos) { ps->kv_pos = pos; ps->kv_bytes = kvq_cache_memory_bytes(c); }
    }
    kvq_session_free(s);
    return rc;
}

static char *detok(const kvq_model *t, const int32_t *g, int n) {
    size_t cap = 64 + (size_t)n * 32, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (int i = 0; i < n; i++) {
        size_t pn = 0;
        if (kvq_token_to_piece(t, g[i], buf + len, cap - len - 1, &pn) == KVQ_OK) len += pn;
    }
    buf[len] = 0;
    return buf;
}

static void print_summary(FILE *f, const eval_env *e, int n, const pol_state *ps, int chat, const char *pfile,
                          int interrupted) {
    double sc = 0, sd = 0;
    int ident = 0, neos = 0, ndeg = 0, nbeyond = 0;
    for (int i = 0; i < ps->done; i++) {
        const prompt_result *r = &ps->r[i];
        sc += r->coherent;
        sd += r->diverge < 0 ? r->generated : r->diverge;
        ident += r->diverge < 0;
        neos += r->eos;
        ndeg += r->degen >= 0;
        nbeyond += r->beyond_f16;
    }
    fprintf(f, "{\"tool\":\"gen-check\",\"record\":\"summary\",\"model\":");
    eval_json_str(f, eval_basename(e->model_path));
    eval_json_weights(f, e);
    fprintf(f, ",");
    tool_policy_json(&ps->pol, f);
    fprintf(f, ",\"n\":%d,\"chat\":%s,\"prompts_file\":", n, chat ? "true" : "false");
    if (pfile) eval_json_str(f, pfile);
    else fputs("null", f);
    fprintf(f, ",\"prompts\":[");
    for (int i = 0; i < ps->done; i++) {
        const prompt_result *r = &ps->r[i];
        fprintf(f,
                "%s{\"prompt\":%d,\"prompt_tokens\":%d,\"generated\":%d,\"stop\":\"%s\",\"coherent\":%d,"
                "\"degenerate_at\":",
                i ? "," : "", i, r->prompt_tokens, r->generated, r->eos ? "eos" : "length", r->coherent);
        if (r->degen >= 0) fprintf(f, "%ld", r->degen);
        else fputs("null", f);
        fprintf(f, ",\"beyond_f16\":%s,\"diverge\":", r->beyond_f16 ? "true" : "false");
        if (r->diverge >= 0) fprintf(f, "%ld", r->diverge);
        else fputs("null", f);
        fputc('}', f);
    }
    fprintf(f, "],\"n_prompts\":%d,\"mean_coherent\":", ps->done);
    eval_json_num(f, ps->done ? sc / ps->done : NAN);
    fprintf(f, ",\"mean_diverge\":");
    eval_json_num(f, ps->done ? sd / ps->done : NAN);
    fprintf(f, ",\"identical\":%d,\"eos\":%d,\"degenerate\":%d,\"degenerate_also_f16\":%d,"
               "\"degenerate_beyond_f16\":%d,\"kv_bytes_per_token\":%zu,\"bits_per_value_all_layers\":",
            ident, neos, ndeg, ndeg - nbeyond, nbeyond, ps->bytes_per_token);
    eval_json_num(f, ps->done ? tool_bits_per_value(ps->bytes_per_token, &e->info) : NAN);
    fprintf(f, ",\"kv_bytes\":%zu,\"kv_positions\":%zu,\"seconds\":", ps->kv_bytes, ps->kv_pos);
    eval_json_num(f, ps->seconds);
    fprintf(f, ",\"interrupted\":%s,\"partial\":%s}\n", interrupted ? "true" : "false", interrupted ? "true" : "false");
    fflush(f);
}

int cmd_gen_check(int argc, char **argv) {
    eval_common co;
    eval_common_init(&co);
    int n = 200, nprompts = 0, chat = -1, per_prompt = 0, show = 0;
    const char *pfile = NULL;
    const tool_opt opts[] = {
        {.names = "--n|-n|--n-predict", .kind = TOOL_ARG_INT, .dst = &n, .min = 1, .max = 100000},
        {.names = "--prompts", .kind = TOOL_ARG_INT, .dst = &nprompts, .min = 1, .max = TOOL_PROMPTS_MAX},
        {.names = "--prompts-file", .kind = TOOL_ARG_STR, .dst = &pfile},
        {.names = "--chat", .kind = TOOL_ARG_SET, .dst = &chat},
        {.names = "--completion", .kind = TOOL_ARG_CLEAR, .dst = &chat},
        {.names = "--per-prompt", .kind = TOOL_ARG_SET, .dst = &per_prompt},
        {.names = "--show", .kind = TOOL_ARG_SET, .dst = &show},
        {0}};
    const tool_opt *tables[] = {opts, eval_common_table(&co), eval_common_policy_table(&co), NULL};
    const tool_cmd cmd = {.name = "gen-check", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if ((pr = eval_common_finish(&co, "gen-check"))) return pr;
    /* the prompts: the built-in pairs, or the file's text for both styles */
    tool_prompts file = {0};
    const char *pchat[TOOL_PROMPTS_MAX], *pcomp[TOOL_PROMPTS_MAX];
    int avail = N_PROMPTS;
    for (int i = 0; i < N_PROMPTS; i++) { pchat[i] = PROMPTS[i].chat; pcomp[i] = PROMPTS[i].completion; }
    if (pfile) {
        char perr[256];
        int frc = tool_prompts_read(pfile, &file, perr, sizeof perr);
        if (frc) {
            tool_prompts_free(&file);
            return tool_usage_error("gen-check", "--prompts-file %s: %s (%s)", pfile, perr, kvq_strerror(frc));
        }
        avail = file.count;
        for (int i = 0; i < avail; i++) pchat[i] = pcomp[i] = file.text[i];
    }
    if (nprompts > avail) {
        tool_prompts_free(&file);
        return tool_usage_error("gen-check", "--prompts %d: there are %d prompts%s%s", nprompts, avail,
                                pfile ? " in " : " built in", pfile ? pfile : "");
    }
    if (!nprompts) nprompts = avail;
    /* the f16 reference first, then the policies (a plain f16 one is the reference) */
    tool_policy given[EVAL_MAX_POLICIES], pols[EVAL_MAX_POLICIES + 1];
    int ng = eval_common_policies(&co, given, EVAL_MAX_POLICIES), np = 1;
    tool_policy_init(&pols[0]);
    for (int i = 0; i < ng; i++)
        if (!is_plain_f16(&given[i])) pols[np++] = given[i];

    eval_env e;
    if (eval_env_open(&e, "gen-check", co.model, co.threads)) { tool_prompts_free(&file); return 1; }
    if (eval_env_weights(&e, &co, 0)) { eval_env_close(&e); tool_prompts_free(&file); return 1; }
    if (chat < 0) chat = eval_model_has_chat(&e);
    int ret = 1, rc = 0;
    float *logits = malloc(sizeof(float) * (size_t)e.info.n_vocab);
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)n * (size_t)np), *prompt = NULL;
    pol_state *ps = calloc((size_t)np, sizeof *ps);
    char *text = NULL;
    if (!logits || !gen || !ps) goto nomem;
    for (int p = 0; p < np; p++) {
        ps[p].pol = pols[p];
        ps[p].r = calloc((size_t)nprompts, sizeof(prompt_result));
        if (!ps[p].r) goto nomem;
    }
    fprintf(stderr, "kvq gen-check: %s, %s prompts, %d prompt(s)%s%s, %d tokens each, f16 + %d polic%s, %d threads\n",
            eval_basename(e.model_path), chat ? "chat" : "completion", nprompts, pfile ? " of " : "", pfile ? pfile : "",
            n, np - 1, np == 2 ? "y" : "ies", co.threads);
    eval_sigint_install();
    eval_progress prog;
    eval_progress_init(&prog, "gen-check");
    double toks = 0;
    int stop = 0;
    for (int i = 0; i < nprompts && !stop; i++) {
        free(text);
        text = NULL;
        const char *ptext = pcomp[i];
        if (chat) {
            size_t need = 0;
            char probe[1];
            rc = kvq_chat_format(e.m, NULL, pchat[i], probe, sizeof probe, &need);
            if (rc && rc != KVQ_ERR_RANGE) { fprintf(stderr, "kvq gen-check: chat: %s\n", kvq_strerror(rc)); goto done; }
            text = malloc(need + 1);
            if (!text) goto nomem;
            if ((rc = kvq_chat_format(e.m, NULL, pchat[i], text, need + 1, &need)))
                goto done;
            ptext = text;
        }
        size_t npr = 0;
        free(prompt);
        prompt = NULL;
        if ((rc = eval_tokenize(e.m, ptext, strlen(ptext), 1, chat, &prompt, &npr))) {
            fprintf(stderr, "kvq gen-check: tokenize: %s\n", kvq_strerror(rc));
            goto done;
        }
        if (e.info.n_ctx_train > 0 && npr + (size_t)n > (size_t)e.info.n_ctx_train) {
            fprintf(stderr, "kvq gen-check: prompt %d: %zu tokens + %d to generate exceed the model's context (%d)\n", i,
                    npr, n, e.info.n_ctx_train);
            goto done;
        }
        for (int p = 0; p < np; p++) {
            int32_t *g = gen + (size_t)p * (size_t)n;
            prompt_result *r = &ps[p].r[i];
            r->prompt_tokens = (int)npr;
            if ((rc = generate(&e, &ps[p], &co, prompt, npr, n, logits, g, &r->generated, &r->eos))) {
                fprintf(stderr, "kvq gen-check: eval: %s\n", kvq_strerror(rc));
                goto done;
            }
            ps[p].tokens += (size_t)r->generated;
            toks += r->generated;
            r->degen = -1;
            for (int t = 1; t <= r->generated && r->degen < 0; t++) r->degen = degenerate_start(g, (size_t)t);
            r->coherent = r->degen >= 0 ? (int)r->degen : r->generated;
            r->beyond_f16 = r->degen >= 0 && ps[0].r[i].degen < 0;
            /* divergence from the f16 stream (p = 0) */
            const int32_t *ref = gen;
            int nref = ps[0].r[i].generated, m = r->generated < nref ? r->generated : nref;
            r->diverge = -1;
            for (int t = 0; t < m && r->diverge < 0; t++)
                if (g[t] != ref[t]) r->diverge = t;
            if (r->diverge < 0 && (r->generated != nref || r->eos != ps[0].r[i].eos)) r->diverge = m;
            ps[p].done = i + 1;
            char *out = (show || (co.json && per_prompt)) ? detok(e.m, g, r->generated) : NULL;
            if (co.json && per_prompt) {
                printf("{\"tool\":\"gen-check\",\"record\":\"prompt\",\"model\":");
                eval_json_str(stdout, eval_basename(e.model_path));
                eval_json_weights(stdout, &e);
                printf(",");
                tool_policy_json(&ps[p].pol, stdout);
                printf(",\"n\":%d,\"prompt\":%d,\"generated\":%d,\"stop\":\"%s\",\"coherent\":%d,\"diverge\":", n, i,
                       r->generated, r->eos ? "eos" : "length", r->coherent);
                if (r->diverge >= 0) printf("%ld", r->diverge);
                else printf("null");
                printf(",\"text\":");
                eval_json_str(stdout, out ? out : "");
                printf("}\n");
                fflush(stdout);
            }
            if (show && !co.json && out) {
                char name[TOOL_POLICY_NAME];
                tool_policy_name(&ps[p].pol, name, sizeof name);
                printf("--- prompt %d, %s (%d tokens, coherent %d, diverge %ld):\n%s\n", i, name, r->generated,
                       r->coherent, r->diverge, out);
            }
            free(out);
            char what[64];
            snprintf(what, sizeof what, "prompt %d/%d policy %d/%d", i + 1, nprompts, p + 1, np);
            eval_progress_update(&prog, (double)i * np + p + 1, (double)nprompts * np, toks, what);
        }
        if (eval_interrupted()) stop = 1;
    }
    eval_progress_end(&prog);
    if (stop) fprintf(stderr, "kvq gen-check: interrupted\n");
    if (co.json) {
        for (int p = 0; p < np; p++) print_summary(stdout, &e, n, &ps[p], chat, pfile, stop);
    } else {
        printf("model %s, %s prompts, %d tokens max, greedy; per prompt: coherent tokens / first divergence from f16 "
               "('=' identical)%s\n\n%-28s",
               eval_basename(e.model_path), chat ? "chat" : "completion", n,
               stop ? " (PARTIAL: interrupted)" : "", "policy");
        for (int i = 0; i < ps[0].done; i++) printf("  %9d", i);
        printf("  %9s %9s %6s %6s %6s\n", "coherent", "diverge", "ident", "degen", "beyond");
        for (int p = 0; p < np; p++) {
            char name[TOOL_POLICY_NAME];
            tool_policy_name(&ps[p].pol, name, sizeof name);
            printf("%-28s", name);
            double sc = 0, sd = 0;
            int ident = 0, ndeg = 0, nbeyond = 0;
            for (int i = 0; i < ps[p].done; i++) {
                prompt_result *r = &ps[p].r[i];
                char cell[48], dv[24];
                if (r->diverge < 0) snprintf(dv, sizeof dv, "=");
                else snprintf(dv, sizeof dv, "%ld", r->diverge);
                snprintf(cell, sizeof cell, "%d/%s", r->coherent, dv);
                printf("  %9s", cell);
                sc += r->coherent;
                sd += r->diverge < 0 ? r->generated : r->diverge;
                ident += r->diverge < 0;
                ndeg += r->degen >= 0;
                nbeyond += r->beyond_f16;
            }
            printf("  %9.1f %9.1f %6d %6d %6d\n", ps[p].done ? sc / ps[p].done : NAN,
                   ps[p].done ? sd / ps[p].done : NAN, ident, ndeg, nbeyond);
        }
        fflush(stdout);
    }
    ret = stop ? TOOL_EXIT_INTERRUPTED : 0;
    goto done;
nomem:
    fprintf(stderr, "kvq gen-check: out of memory\n");
done:
    if (ps)
        for (int p = 0; p < np; p++) free(ps[p].r);
    free(ps);
    free(logits);
    free(gen);
    free(prompt);
    free(text);
    tool_prompts_free(&file);
    eval_env_close(&e);
    return ret;
}
