/*
 * kvq run: text generation on a compressed KV cache. Streams the text to
 * stdout; prompt and generation speed and the KV-cache memory go to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "policy.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq run [-m MODEL] -p PROMPT [options]\n"
            "  -m MODEL             GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf, installed\n"
            "                       by scripts/fetch-models.sh when missing)\n"
            "  -p PROMPT            prompt text\n"
            "  -n N                 tokens to generate (default 128)\n"
            "  --chat               wrap the prompt in the model's chat template\n"
            "  --system TEXT        system prompt with --chat (default: the template's)\n"
            "  --cache-k SPEC       key cache method (default f16; see docs/METHODS.md)\n"
            "  --cache-v SPEC       value cache method (default f16)\n"
            "  --kv-window W        keep the W most recent tokens in f16\n"
            "  --kv-f16-layers L    comma-separated layers kept in f16 (e.g. 0,-1; negative: from the end)\n"
            "  --kv-compress-sliding  compress the sliding-window layers too (Gemma 3)\n"
            "  --kv-calib N         tokens kept f16 until +center/+chscale/+outliers calibrate (default 128)\n"
            "  --policy POLICY      the whole cache policy in one string (docs/CACHE.md), e.g.\n"
            "                       'tq-mse:4+chscale/tq-mse:4,w=128,sliding=1'\n"
            "  --threads T          threads (default 2)\n"
            "  --seed S             sampling seed (default 0)\n"
            "  --temp T             temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K            (default 40; 0 = off)\n"
            "  --top-p P            (default 0.95; 1 = off)\n"
            "  --min-p P            (default 0.05; 0 = off)\n"
            "  --repeat-penalty R   (default 1.0 = off) over the last 64 tokens\n"
            "  --acts q8|f32        activations of quantized-weight products (default q8)\n"
            "  --batch N            prompt tokens per forward chunk (default 256)\n"
            "  --quiet              do not stream the text (speed runs)\n");
}

typedef struct {
    const char *model, *prompt, *system, *acts;
    int n_gen, chat, threads, batch, quiet;
    tool_policy pol;
    kvq_sampler_params sp;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 128;
    o->threads = 2;
    o->acts = "q8";
    o->sp = kvq_sampler_run_params();
    tool_policy_init(&o->pol);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!strcmp(a, "--chat")) { o->chat = 1; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        char err[512] = "";
        int pc = tool_policy_option(&o->pol, a, v, err, sizeof err);
        if (pc < 0) { fprintf(stderr, "kvq run: %s\n", err); return 2; }
        if (pc > 0) { i += pc - 1; continue; }
        if (!v) { fprintf(stderr, "kvq run: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-n")) o->n_gen = atoi(v);
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else if (!strcmp(a, "--seed")) o->sp.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--temp")) o->sp.temperature = strtof(v, NULL);
        else if (!strcmp(a, "--top-k")) o->sp.top_k = atoi(v);
        else if (!strcmp(a, "--top-p")) o->sp.top_p = strtof(v, NULL);
        else if (!strcmp(a, "--min-p")) o->sp.min_p = strtof(v, NULL);
        else if (!strcmp(a, "--repeat-penalty")) o->sp.repeat_penalty = strtof(v, NULL);
        else if (!strcmp(a, "--acts")) o->acts = v;
        else if (!strcmp(a, "--batch")) o->batch = atoi(v);
        else { fprintf(stderr, "kvq run: unknown option %s\n", a); usage(stderr); return 2; }
    }
    if (!o->prompt) { fprintf(stderr, "kvq run: -p PROMPT is required\n"); usage(stderr); return 2; }
    if (o->n_gen < 0 || o->threads < 1 || o->threads > 256 || (strcmp(o->acts, "q8") && strcmp(o->acts, "f32"))) {
        fprintf(stderr, "kvq run: bad option value\n");
        return 2;
    }
    return 0;
}

/* kvq_generate's callback: writes the bytes of a token to stdout. */
typedef struct {
    const kvq_model *m;
    int quiet;
    double t_first; /* when the first token came (the prompt's eval is done) */
} emitter;

static int emit(void *user, int32_t id) {
    emitter *e = user;
    if (e->t_first == 0) e->t_first = tool_now();
    char buf[256];
    size_t n = 0;
    if (!e->quiet && kvq_token_to_piece(e->m, id, buf, sizeof buf, &n) == KVQ_OK && n) {
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : prc;
    char def[4096];
    if (!o.model) {
        if (tool_default_model(def, sizeof def, 1)) {
            fprintf(stderr, "kvq run: no -m given and the default model could not be installed "
                            "(bash scripts/fetch-models.sh)\n");
            return 1;
        }
        o.model = def;
    }
    char err[256] = "";
    kvq_model *m = NULL;
    kvq_pool *pool = NULL;
    kvq_session *s = NULL;
    kvq_sampler *smp = NULL;
    int32_t *ids = NULL;
    char *text = NULL;
    int ret = 1, rc;

    if ((rc = kvq_model_load(&m, o.model, err, sizeof err))) { fprintf(stderr, "kvq run: %s\n", err); return 1; }
    kvq_model_info mi;
    kvq_model_get_info(m, &mi);
    if (!mi.has_tokenizer) { fprintf(stderr, "kvq run: %s has no tokenizer\n", o.model); rc = 0; goto done; }
    /* prompt text */
    const char *ptext = o.prompt;
    if (o.chat) {
        size_t need = 0;
        char probe[1];
        rc = kvq_chat_format(m, o.system, o.prompt, probe, sizeof probe, &need);
        if (rc && rc != KVQ_ERR_RANGE) { fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc)); rc = 0; goto done; }
        text = malloc(need + 1);
        if (!text) goto done;
        if ((rc = kvq_chat_format(m, o.system, o.prompt, text, need + 1, &need))) {
            fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc));
            rc = 0;
            goto done;
        }
        ptext = text;
    }
    size_t cap = strlen(ptext) + 16, n_prompt = 0;
    ids = malloc(sizeof(int32_t) * cap);
    if (!ids) goto done;
    rc = kvq_tokenize(m, ptext, strlen(ptext), 1, o.chat, ids, cap, &n_prompt);
    if (rc == KVQ_ERR_RANGE) {
        int32_t *bigger = realloc(ids, sizeof(int32_t) * n_prompt);
        if (!bigger) goto done;
        ids = bigger;
        cap = n_prompt;
        rc = kvq_tokenize(m, ptext, strlen(ptext), 1, o.chat, ids, cap, &n_prompt);
    }
    if (rc) { fprintf(stderr, "kvq run: tokenize: %s\n", kvq_strerror(rc)); rc = 0; goto done; }
    if (n_prompt == 0) { fprintf(stderr, "kvq run: the prompt has no tokens\n"); goto done; }

    kvq_session_params p = kvq_session_default_params();
    if (tool_policy_session_params(&o.pol, mi.n_layers, &p, err, sizeof err)) {
        fprintf(stderr, "kvq run: %s\n", err);
        rc = 0;
        goto done;
    }
    p.f32_acts = !strcmp(o.acts, "f32");
    if (o.batch > 0) p.n_batch = o.batch;
    char pname[TOOL_POLICY_NAME];
    tool_policy_name(&o.pol, pname, sizeof pname);
    if ((rc = kvq_pool_create(&pool, o.threads))) goto done;
    if ((rc = kvq_session_create(&s, m, &p, pool))) {
        fprintf(stderr, "kvq run: cache policy %s: %s\n", pname, kvq_strerror(rc));
        rc = 0;
        goto done;
    }
    if ((rc = kvq_sampler_create(&smp, &o.sp, (size_t)mi.n_vocab))) {
        fprintf(stderr, "kvq run: sampler: %s\n", kvq_strerror(rc));
        rc = 0;
        goto done;
    }
    if (!o.quiet && !o.chat) {
        fputs(o.prompt, stdout);
        fflush(stdout);
    }

    /* prompt time: until the first token comes (the prompt's eval and one sampling step) */
    emitter em = {m, o.quiet, 0};
    double t0 = tool_now();
    size_t n_done = 0;
    kvq_stop why = KVQ_STOP_LENGTH;
    rc = kvq_generate(s, smp, ids, n_prompt, (size_t)o.n_gen, emit, &em, &n_done, &why);
    if (rc) goto done;
    double t2 = tool_now(), t1 = em.t_first > 0 ? em.t_first : t2;
    static const char *const stops[] = {"length", "end of generation token", "context length", "callback"};
    if (!o.quiet) printf("\n");
    fflush(stdout);
    kvq_cache *c = kvq_session_cache(s);
    /* generation speed counts the decode steps (n_done - 1 forward passes) */
    size_t steps = n_done > 1 ? n_done - 1 : 0;
    fprintf(stderr, "\n[kvq run] model %s (%s), kernels %s, threads %d, cache %s", mi.name[0] ? mi.name : o.model,
            mi.arch, kvq_session_kernels(s), o.threads, pname);
    fprintf(stderr, "\n[kvq run] prompt: %zu tokens in %.3f s = %.1f tok/s\n", n_prompt, t1 - t0,
            (double)n_prompt / (t1 - t0));
    fprintf(stderr, "[kvq run] generation: %zu tokens, %zu decode steps in %.3f s = %.1f tok/s (stop: %s)\n", n_done,
            steps, t2 - t1, steps ? (double)steps / (t2 - t1) : 0.0, stops[why]);
    fprintf(stderr, "[kvq run] kv cache: %zu bytes for %zu tokens (%zu bytes/token compressed, f16 would be %zu)\n",
            kvq_cache_memory_bytes(c), kvq_session_pos(s), kvq_cache_bytes_per_token(c),
            (size_t)mi.n_layers * (size_t)mi.n_head_kv * (size_t)mi.head_dim * 4);
    ret = 0;
done:
    if (rc && ret) fprintf(stderr, "kvq run: %s\n", kvq_strerror(rc));
    kvq_sampler_free(smp);
    kvq_session_free(s);
    kvq_pool_free(pool);
    kvq_model_free(m);
    free(ids);
    free(text);
    return ret;
}
