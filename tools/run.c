/*
 * kvq run: text generation on a compressed KV cache. Streams the text to
 * stdout; prompt and generation speed and the KV-cache memory go to stderr.
 * -i / -cnv: an interactive chat (run_chat.c) on the same session.
 */
#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "eval_util.h"
#include "progress.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq run [-m MODEL] -p PROMPT [options]\n"
            "       kvq run [-m MODEL] -i [options]        (interactive chat)\n"
            "  -m, --model MODEL      GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf, installed\n"
            "                         by scripts/fetch-models.sh when missing)\n"
            "  -p, --prompt PROMPT    prompt text\n"
            "  -f, --file FILE        prompt read from FILE ('-': standard input)\n"
            "  -n, --n-predict N      tokens to generate, -1 = until end of text or context (default 128;\n"
            "                         in a chat: per reply, default -1)\n"
            "  -c, --ctx-size N       context in tokens: prompt + generation must fit (default and most: the\n"
            "                         model's trained context); a longer prompt is an error, -n is cut to fit\n"
            "  --chat                 wrap the prompt in the model's chat template\n"
            "  -i, --interactive, -cnv, --conversation\n"
            "                         chat: one turn per line of input, the model's chat template, the cache\n"
            "                         kept across turns; /exit or end of input quits, Ctrl-C stops a reply\n"
            "  --system, -sys, --system-prompt TEXT\n"
            "                         system prompt with --chat / -i (default: the template's)\n"
            "  -t, --threads T        threads, 1..256 (default 2)\n"
            "  -s, --seed S           sampling seed (default 0)\n"
            "  --temp T               temperature, 0..100 (default 0.8; 0 = greedy)\n"
            "  --top-k K              0..1000000 (default 40; 0 = off)\n"
            "  --top-p P              0..1 (default 0.95; 1 = off)\n"
            "  --min-p P              0..1 (default 0.05; 0 = off)\n"
            "  --repeat-penalty R     0.01..100 (default 1.0 = off) over the last --repeat-last-n tokens\n"
            "  --repeat-last-n N      0..4096 (default 64)\n"
            "  --acts q8|f32          activations of quantized-weight products (default q8)\n"
            "  -b, --batch, --batch-size N\n"
            "                         prompt tokens per forward chunk, 1..65536 (default 256)\n"
            "  --quiet                do not stream the text (speed runs)\n"
            TOOL_WEIGHTS_USAGE
            "  -ngl N                 refused: kvq's engine runs on the CPU (GPUs: the Python/PyTorch\n"
            "                         integration, docs/TRANSFORMERS.md)\n"
            "  -r                     refused: llama.cpp's -r is --reverse-prompt, which kvq run lacks\n");
    tool_policy_args_usage(f);
}

/* The cache policy of `kvq run` when no policy option is given (docs/CACHE.md);
 * the policy options apply on top of it (--policy replaces it). */
static const char RUN_DEFAULT_POLICY[] = "f16";

typedef struct {
    const char *model, *prompt, *file, *system, *acts, *weights, *keep;
    long n_gen, n_ctx;
    int chat, interactive, threads, batch, quiet;
    tool_policy_args pa;
    tool_policy pol;
    kvq_sampler_params sp;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = -2; /* unset: 128, or -1 in a chat */
    o->threads = 2;
    o->acts = "q8";
    o->sp = kvq_sampler_run_params();
    tool_policy_args_init(&o->pa);
    o->pa.base = RUN_DEFAULT_POLICY;
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &o->model},
        {.names = "-p|--prompt", .kind = TOOL_ARG_STR, .dst = &o->prompt},
        {.names = "-f|--file", .kind = TOOL_ARG_STR, .dst = &o->file},
        {.names = "-n|--n-predict", .kind = TOOL_ARG_LONG, .dst = &o->n_gen, .min = -1, .max = 1 << 24},
        {.names = "-c|--ctx-size", .kind = TOOL_ARG_LONG, .dst = &o->n_ctx, .min = 0, .max = 1 << 24},
        {.names = "--chat", .kind = TOOL_ARG_SET, .dst = &o->chat},
        {.names = "-i|--interactive|-cnv|--conversation", .kind = TOOL_ARG_SET, .dst = &o->interactive},
        {.names = "--system|-sys|--system-prompt", .kind = TOOL_ARG_STR, .dst = &o->system},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &o->threads, .min = 1, .max = 256},
        {.names = "-s|--seed", .kind = TOOL_ARG_U64, .dst = &o->sp.seed},
        {.names = "--temp|--temperature", .kind = TOOL_ARG_FLOAT, .dst = &o->sp.temperature, .min = 0, .max = 100},
        {.names = "--top-k", .kind = TOOL_ARG_INT, .dst = &o->sp.top_k, .min = 0, .max = 1000000},
        {.names = "--top-p", .kind = TOOL_ARG_FLOAT, .dst = &o->sp.top_p, .min = 0, .max = 1},
        {.names = "--min-p", .kind = TOOL_ARG_FLOAT, .dst = &o->sp.min_p, .min = 0, .max = 1},
        {.names = "--repeat-penalty", .kind = TOOL_ARG_FLOAT, .dst = &o->sp.repeat_penalty, .min = 0.01, .max = 100},
        {.names = "--repeat-last-n", .kind = TOOL_ARG_INT, .dst = &o->sp.repeat_last_n, .min = 0, .max = 4096},
        {.names = "--acts", .kind = TOOL_ARG_CHOICE, .dst = &o->acts, .choices = "q8|f32"},
        {.names = "--batch|-b|--batch-size", .kind = TOOL_ARG_INT, .dst = &o->batch, .min = 0, .max = 65536},
        {.names = "--quiet", .kind = TOOL_ARG_SET, .dst = &o->quiet},
        {.names = "--weights", .kind = TOOL_ARG_STR, .dst = &o->weights},
        {.names = "--keep", .kind = TOOL_ARG_STR, .dst = &o->keep},
        TOOL_OPT_NGL,
        {.names = "-r|--reverse-prompt", .kind = TOOL_ARG_FAIL,
         .help = "llama.cpp's -r is --reverse-prompt, which kvq run does not have (the repetition penalty is "
                 "--repeat-penalty R)"},
        {0}};
    const tool_opt *tables[] = {opts, tool_policy_args_table(&o->pa), NULL};
    const tool_cmd cmd = {.name = "run", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr;
    char err[1024];
    if (tool_policy_args_build(&o->pa, &o->pol, err, sizeof err)) return tool_usage_error("run", "%s", err);
    if (o->prompt && o->file) return tool_usage_error("run", "-p and -f both give the prompt: use one");
    if (!o->prompt && !o->file && !o->interactive)
        return tool_usage_error("run", "a prompt is required: -p PROMPT, -f FILE, or -i for a chat (see 'kvq run --help')");
    if (o->n_gen == -2) o->n_gen = o->interactive ? -1 : 128;
    return 0;
}

/* The prompt of -f (a file, or standard input for "-"), malloc'd. */
static char *read_prompt(const char *path) {
    size_t len = 0;
    if (strcmp(path, "-")) {
        char *t = eval_read_file(path, &len);
        if (!t) fprintf(stderr, "kvq run: -f %s: %s\n", path, strerror(errno));
        return t;
    }
    size_t cap = 1 << 12;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, stdin);
        len += r;
        if (r == 0) break;
        if (len == cap) {
            char *b = realloc(buf, (cap *= 2) + 1);
            if (!b) { free(buf); buf = NULL; }
            else buf = b;
        }
    }
    if (!buf) { fprintf(stderr, "kvq run: -f -: out of memory\n"); return NULL; }
    buf[len] = 0;
    return buf;
}

/* ------------------------------------------------------------------------ */
/* One reply                                                                 */
/* ------------------------------------------------------------------------ */
typedef struct {
    run_ctx *r;
    double t_first;  /* when the first token came (the prompt's eval is done) */
    int32_t last;    /* last token handed out */
    int interrupted; /* the callback stopped generation on Ctrl-C */
} emitter;

static int emit(void *user, int32_t id) {
    emitter *e = user;
    if (e->t_first == 0) e->t_first = tool_now();
    e->last = id;
    char buf[256];
    size_t n = 0;
    if (!e->r->quiet && kvq_token_to_piece(e->r->m, id, buf, sizeof buf, &n) == KVQ_OK && n) {
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
    if (tool_interrupted()) e->interrupted = 1;
    return e->interrupted;
}

int run_tokenize(const kvq_model *m, const char *text, int add_special, int parse_special, int32_t **ids, size_t *n) {
    return eval_tokenize(m, text, strlen(text), add_special, parse_special, ids, n);
}

int run_reply(run_ctx *r, const int32_t *ids, size_t n, size_t max_gen, int32_t *last, run_end *why, size_t *n_done) {
    *last = -1;
    *n_done = 0;
    *why = RUN_END_LENGTH;
    double t0 = tool_now();
    /* prefill the chunks kvq_generate would evaluate before the last one, with a progress line */
    size_t B = (size_t)r->batch, head = n > B ? (n - 1) / B * B : 0;
    tool_progress prog;
    tool_progress_init(&prog, "run");
    int rc = KVQ_OK;
    for (size_t a = 0; a < head && !rc; a += B) {
        for (size_t i = a; i < a + B && !rc; i++) rc = kvq_sampler_accept(r->smp, ids[i]);
        if (!rc) rc = kvq_session_eval(r->s, ids + a, B, NULL, 0);
        tool_progress_update(&prog, (double)(a + B), (double)n, "tokens", "prompt");
        if (tool_interrupted()) break;
    }
    tool_progress_clear(&prog);
    if (rc) { fprintf(stderr, "kvq run: prompt: %s\n", kvq_strerror(rc)); return rc; }
    if (tool_interrupted()) {
        *why = RUN_END_INTERRUPT;
        r->t_prompt = tool_now() - t0;
        r->t_gen = 0;
        return KVQ_OK;
    }
    emitter em = {r, 0, -1, 0};
    kvq_stop stop = KVQ_STOP_LENGTH;
    rc = kvq_generate(r->s, r->smp, ids + head, n - head, max_gen, emit, &em, n_done, &stop);
    double t2 = tool_now(), t1 = em.t_first > 0 ? em.t_first : t2;
    r->t_prompt = t1 - t0;
    r->t_gen = t2 - t1;
    r->n_gen_total += *n_done;
    if (rc) { fprintf(stderr, "\nkvq run: generation: %s\n", kvq_strerror(rc)); return rc; }
    if (stop != KVQ_STOP_EOG) *last = *n_done ? em.last : -1; /* sampled, not evaluated */
    if (stop == KVQ_STOP_EOG) *why = RUN_END_EOG;
    else if (stop == KVQ_STOP_CONTEXT) *why = RUN_END_CONTEXT;
    else if (stop == KVQ_STOP_CALLBACK) *why = RUN_END_INTERRUPT;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* kvq run                                                                   */
/* ------------------------------------------------------------------------ */
static void print_stats(const run_ctx *r, const char *model, const tool_policy *pol, int threads, size_t n_prompt,
                        size_t n_done, run_end why) {
    char pname[TOOL_POLICY_NAME];
    tool_policy_name(pol, pname, sizeof pname);
    static const char *const ends[] = {"length", "end of generation token", "context length", "interrupted"};
    kvq_cache *c = kvq_session_cache(r->s);
    size_t steps = n_done > 1 ? n_done - 1 : 0; /* decode steps: n_done - 1 forward passes */
    size_t pos = kvq_session_pos(r->s), bpt = kvq_cache_bytes_per_token(c);
    size_t f16 = (size_t)r->mi.n_layers * (size_t)r->mi.n_head_kv * (size_t)r->mi.head_dim * 4;
    fprintf(stderr, "\n[kvq run] model %s (%s), kernels %s, threads %d, cache %s", r->mi.name[0] ? r->mi.name : model,
            r->mi.arch, kvq_session_kernels(r->s), threads, pname);
    fprintf(stderr, "\n[kvq run] prompt: %zu tokens in %.3f s = %.1f tok/s\n", n_prompt, r->t_prompt,
            r->t_prompt > 0 ? (double)n_prompt / r->t_prompt : 0.0);
    fprintf(stderr, "[kvq run] generation: %zu tokens, %zu decode steps in %.3f s = %.1f tok/s (stop: %s)\n", n_done,
            steps, r->t_gen, steps && r->t_gen > 0 ? (double)steps / r->t_gen : 0.0, ends[why]);
    fprintf(stderr,
            "[kvq run] kv cache: %zu tokens x %zu bytes/token compressed = %zu bytes used (f16: %zu bytes/token); "
            "%zu bytes allocated (pages, f16 windows and rings included)\n",
            pos, bpt, pos * bpt, f16, kvq_cache_memory_bytes(c));
    int comp, sl, listed;
    tool_policy_layers(pol, &r->mi, &comp, &sl, &listed);
    fprintf(stderr, "[kvq run] layers: %d of %d compressed", comp, r->mi.n_layers);
    if (listed) fprintf(stderr, ", %d kept f16 by the policy", listed);
    if (sl) fprintf(stderr, ", %d sliding-window layers kept f16 (--compress-sliding compresses them)", sl);
    fprintf(stderr, "; %.3f bits per value over all layers (scales included)%s\n", tool_bits_per_value(bpt, &r->mi),
            pol->f16_window ? ", the f16 window on top" : "");
}

/* The prompt's tokens after the context check (a prompt that does not fit is an error, -n is cut to fit). */
static int fit_context(run_ctx *r, size_t n_prompt, long *n_gen, const char *ctx_src) {
    if (n_prompt >= r->n_ctx) {
        fprintf(stderr,
                "kvq run: the prompt is %zu tokens, %s the context of %zu (%s): no room to generate; "
                "shorten the prompt%s\n",
                n_prompt, n_prompt > r->n_ctx ? "longer than" : "as long as", r->n_ctx, ctx_src, r->mi.n_ctx_train > 0 && r->n_ctx < (size_t)r->mi.n_ctx_train
                                                 ? " or raise -c" : "");
        return -1;
    }
    size_t room = r->n_ctx - n_prompt;
    if (*n_gen < 0) *n_gen = (long)room;
    else if ((size_t)*n_gen > room) {
        fprintf(stderr, "kvq run: warning: -n %ld cut to %zu: the prompt's %zu tokens + %ld exceed the context %zu (%s)\n",
                *n_gen, room, n_prompt, *n_gen, r->n_ctx, ctx_src);
        *n_gen = (long)room;
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    char def[4096];
    if (!o.model) {
        if (tool_default_model(def, sizeof def, 1)) {
            fprintf(stderr, "kvq run: no -m given and the default model could not be installed "
                            "(bash scripts/fetch-models.sh)\n");
            return TOOL_EXIT_RUNTIME;
        }
        o.model = def;
    }
    char err[512] = "", warn[512];
    if (!tool_policy_key_warning(&o.pol, warn, sizeof warn)) fprintf(stderr, "kvq run: warning: %s\n", warn);
    kvq_model *m = NULL;
    kvq_pool *pool = NULL;
    run_ctx r;
    memset(&r, 0, sizeof r);
    int32_t *ids = NULL;
    char *text = NULL, *ftext = NULL;
    int ret = TOOL_EXIT_RUNTIME, rc;

    if ((rc = kvq_model_load(&m, o.model, err, sizeof err))) {
        fprintf(stderr, "kvq run: %s\n", err);
        return TOOL_EXIT_RUNTIME;
    }
    r.m = m;
    kvq_model_get_info(m, &r.mi);
    if (!r.mi.has_tokenizer) { fprintf(stderr, "kvq run: %s has no tokenizer\n", o.model); goto done; }
    /* the context: -c, capped at the model's trained context */
    const char *ctx_src = "the model's trained context";
    size_t train = r.mi.n_ctx_train > 0 ? (size_t)r.mi.n_ctx_train : (size_t)1 << 24;
    r.n_ctx = train;
    if (o.n_ctx > 0 && (size_t)o.n_ctx > train)
        fprintf(stderr, "kvq run: warning: -c %ld beyond the model's trained context %zu: using %zu\n", o.n_ctx, train,
                train);
    else if (o.n_ctx > 0) { r.n_ctx = (size_t)o.n_ctx; ctx_src = "-c"; }

    kvq_session_params p = kvq_session_default_params();
    if (tool_policy_session_params(&o.pol, r.mi.n_layers, &p, err, sizeof err)) {
        fprintf(stderr, "kvq run: %s\n", err);
        ret = TOOL_EXIT_USAGE;
        goto done;
    }
    p.f32_acts = !strcmp(o.acts, "f32");
    r.batch = o.batch > 0 ? o.batch : 256;
    p.n_batch = r.batch;
    r.quiet = o.quiet;
    char pname[TOOL_POLICY_NAME];
    tool_policy_name(&o.pol, pname, sizeof pname);
    if ((rc = kvq_pool_create(&pool, o.threads))) { fprintf(stderr, "kvq run: thread pool: %s\n", kvq_strerror(rc)); goto done; }
    if (tool_code_weights(m, o.weights, o.keep, pool, "run", o.quiet)) goto done;
    if ((rc = kvq_session_create(&r.s, m, &p, pool))) {
        fprintf(stderr, "kvq run: cache policy %s: %s\n", pname, kvq_strerror(rc));
        goto done;
    }
    if ((rc = kvq_sampler_create(&r.smp, &o.sp, (size_t)r.mi.n_vocab))) {
        fprintf(stderr, "kvq run: sampler: %s\n", kvq_strerror(rc));
        goto done;
    }
    tool_interrupt_install();
    if (o.file && !(ftext = read_prompt(o.file))) goto done;
    const char *prompt = o.file ? ftext : o.prompt;
    if (o.interactive) {
        r.stop_on_sigint = 1;
        ret = run_chat(&r, o.system, prompt, o.n_gen);
        goto done;
    }

    /* the prompt's text: as given, or in the chat template */
    const char *ptext = prompt;
    if (o.chat) {
        size_t need = 0;
        char probe[1];
        rc = kvq_chat_format(m, o.system, prompt, probe, sizeof probe, &need);
        if (rc && rc != KVQ_ERR_RANGE) { fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc)); goto done; }
        text = malloc(need + 1);
        if (!text) goto done;
        if ((rc = kvq_chat_format(m, o.system, prompt, text, need + 1, &need))) {
            fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc));
            goto done;
        }
        ptext = text;
    }
    size_t n_prompt = 0;
    if ((rc = run_tokenize(m, ptext, 1, o.chat, &ids, &n_prompt))) {
        fprintf(stderr, "kvq run: tokenize: %s\n", kvq_strerror(rc));
        goto done;
    }
    if (n_prompt == 0) { fprintf(stderr, "kvq run: the prompt has no tokens\n"); goto done; }
    long n_gen = o.n_gen;
    if (fit_context(&r, n_prompt, &n_gen, ctx_src)) goto done;
    if (!o.quiet && !o.chat) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    int32_t last;
    run_end why;
    size_t n_done = 0;
    if ((rc = run_reply(&r, ids, n_prompt, (size_t)n_gen, &last, &why, &n_done))) goto done;
    if (why == RUN_END_LENGTH && (o.n_gen < 0 || n_gen < o.n_gen)) why = RUN_END_CONTEXT; /* -n cut to the context */
    if (!o.quiet) printf("\n");
    fflush(stdout);
    print_stats(&r, o.model, &o.pol, o.threads, n_prompt, n_done, why);
    ret = why == RUN_END_INTERRUPT ? TOOL_EXIT_INTERRUPTED : 0;
done:
    kvq_sampler_free(r.smp);
    kvq_session_free(r.s);
    kvq_pool_free(pool);
    kvq_model_free(m);
    free(ids);
    free(text);
    free(ftext);
    return ret;
}
