/*
 * kvq run: text generation on a compressed KV cache. Streams the text to
 * stdout; prompt and generation speed and the KV-cache memory go to stderr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tok_gguf.h"
#include "engine/tokenizer.h"
#include "kvq.h"
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
            "  --kv-f16-layers L    comma-separated layers kept in f16 (e.g. 0,29)\n"
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
    const char *model, *prompt, *system, *ck, *cv, *acts;
    int n_gen, chat, window, threads, batch, quiet;
    long f16_layers[KVQ_MAX_LAYERS];
    int n_f16_layers;
    kvq_sampler_params sp;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_gen = 128;
    o->threads = 2;
    o->acts = "q8";
    o->sp = kvq_sampler_default_params();
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    o->sp.repeat_penalty = 1.0f;
    o->sp.repeat_last_n = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!strcmp(a, "--chat")) { o->chat = 1; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!v) { fprintf(stderr, "kvq run: %s needs a value\n", a); return 2; }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-n")) o->n_gen = atoi(v);
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--cache-k")) o->ck = v;
        else if (!strcmp(a, "--cache-v")) o->cv = v;
        else if (!strcmp(a, "--kv-window")) o->window = atoi(v);
        else if (!strcmp(a, "--kv-f16-layers")) {
            o->n_f16_layers = tool_parse_int_list(v, o->f16_layers, KVQ_MAX_LAYERS);
            if (o->n_f16_layers < 0) { fprintf(stderr, "kvq run: bad --kv-f16-layers\n"); return 2; }
        } else if (!strcmp(a, "--threads")) o->threads = atoi(v);
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
    if (o->n_gen < 0 || o->threads < 1 || o->threads > 256 || o->window < 0 ||
        (strcmp(o->acts, "q8") && strcmp(o->acts, "f32"))) {
        fprintf(stderr, "kvq run: bad option value\n");
        return 2;
    }
    return 0;
}

/* Writes the bytes of a token to stdout. */
static void emit(const kvq_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t n = 0;
    if (kvq_tok_decode_piece(tok, id, buf, sizeof buf, &n) == KVQ_OK && n) {
        fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
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
    kvq_tokenizer *tok = NULL;
    kvq_pool *pool = NULL;
    kvq_session *s = NULL;
    kvq_sampler smp;
    memset(&smp, 0, sizeof smp);
    int32_t *ids = NULL;
    float *logits = NULL;
    char *text = NULL;
    int ret = 1, rc;
    int f16_layers[KVQ_MAX_LAYERS];

    if ((rc = kvq_model_load(&m, o.model, err, sizeof err))) { fprintf(stderr, "kvq run: %s\n", err); return 1; }
    if ((rc = kvq_tok_create_from_gguf(&tok, m->gguf))) {
        fprintf(stderr, "kvq run: tokenizer: %s\n", kvq_strerror(rc));
        rc = 0;
        goto done;
    }
    /* prompt text */
    const char *ptext = o.prompt;
    if (o.chat) {
        size_t need = 0;
        char probe[1];
        rc = kvq_tok_chat_format(tok, m->cfg.arch_name, o.system, o.prompt, probe, sizeof probe, &need);
        if (rc && rc != KVQ_ERR_RANGE) { fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc)); rc = 0; goto done; }
        text = malloc(need + 1);
        if (!text) goto done;
        if ((rc = kvq_tok_chat_format(tok, m->cfg.arch_name, o.system, o.prompt, text, need + 1, &need))) {
            fprintf(stderr, "kvq run: --chat: %s\n", kvq_strerror(rc));
            rc = 0;
            goto done;
        }
        ptext = text;
    }
    size_t cap = strlen(ptext) + 16, n_prompt = 0;
    ids = malloc(sizeof(int32_t) * (cap + (size_t)o.n_gen));
    if (!ids) goto done;
    rc = kvq_tok_encode(tok, ptext, strlen(ptext), 1, o.chat, ids, cap, &n_prompt);
    if (rc == KVQ_ERR_RANGE) {
        int32_t *bigger = realloc(ids, sizeof(int32_t) * (n_prompt + (size_t)o.n_gen));
        if (!bigger) goto done;
        ids = bigger;
        cap = n_prompt;
        rc = kvq_tok_encode(tok, ptext, strlen(ptext), 1, o.chat, ids, cap, &n_prompt);
    }
    if (rc) { fprintf(stderr, "kvq run: tokenize: %s\n", kvq_strerror(rc)); rc = 0; goto done; }
    if (n_prompt == 0) { fprintf(stderr, "kvq run: the prompt has no tokens\n"); goto done; }

    kvq_session_params p = kvq_session_default_params();
    p.k_spec = o.ck;
    p.v_spec = o.cv;
    p.f16_window = o.window;
    for (int i = 0; i < o.n_f16_layers; i++) f16_layers[i] = (int)o.f16_layers[i];
    p.f16_layers = o.n_f16_layers ? f16_layers : NULL;
    p.n_f16_layers = o.n_f16_layers;
    p.f32_acts = !strcmp(o.acts, "f32");
    if (o.batch > 0) p.n_batch = o.batch;
    if ((rc = kvq_pool_create(&pool, o.threads))) goto done;
    if ((rc = kvq_session_create(&s, m, &p, pool))) {
        fprintf(stderr, "kvq run: cache policy k=%s v=%s: %s\n", o.ck ? o.ck : "f16", o.cv ? o.cv : "f16",
                kvq_strerror(rc));
        rc = 0;
        goto done;
    }
    if ((rc = kvq_sampler_init(&smp, &o.sp, (size_t)m->cfg.n_vocab))) {
        fprintf(stderr, "kvq run: sampler: %s\n", kvq_strerror(rc));
        rc = 0;
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    if (!logits) goto done;
    for (size_t i = 0; i < n_prompt; i++) kvq_sampler_accept(&smp, ids[i]);
    if (!o.quiet && !o.chat) {
        fputs(o.prompt, stdout);
        fflush(stdout);
    }

    double t0 = tool_now();
    if ((rc = kvq_session_eval(s, ids, n_prompt, logits, 0))) goto done;
    double t1 = tool_now();
    int n_done = 0;
    size_t ctx_max = m->cfg.n_ctx_train > 0 ? (size_t)m->cfg.n_ctx_train : (size_t)1 << 30;
    const char *stop = "length";
    while (n_done < o.n_gen) {
        int32_t next;
        if ((rc = kvq_sampler_sample(&smp, logits, &next))) goto done;
        if (kvq_tok_is_eog(tok, next)) { stop = "end of generation token"; break; }
        if (!o.quiet) emit(tok, next);
        kvq_sampler_accept(&smp, next);
        ids[n_prompt + (size_t)n_done] = next;
        n_done++;
        if (n_done == o.n_gen) break;
        if (kvq_session_pos(s) >= ctx_max) { stop = "context length"; break; }
        if ((rc = kvq_session_eval(s, &next, 1, logits, 0))) goto done;
    }
    double t2 = tool_now();
    if (!o.quiet) printf("\n");
    fflush(stdout);
    kvq_cache *c = kvq_session_cache(s);
    /* generation speed counts the decode steps (n_done - 1 forward passes) */
    int steps = n_done > 1 ? n_done - 1 : 0;
    fprintf(stderr, "\n[kvq run] model %s (%s), kernels %s, threads %d, cache k=%s v=%s", m->cfg.name[0] ? m->cfg.name : o.model,
            m->cfg.arch_name, kvq_session_kernels(s), o.threads, o.ck ? o.ck : "f16", o.cv ? o.cv : "f16");
    if (o.window) fprintf(stderr, " window %d", o.window);
    fprintf(stderr, "\n[kvq run] prompt: %zu tokens in %.3f s = %.1f tok/s\n", n_prompt, t1 - t0,
            (double)n_prompt / (t1 - t0));
    fprintf(stderr, "[kvq run] generation: %d tokens, %d decode steps in %.3f s = %.1f tok/s (stop: %s)\n", n_done,
            steps, t2 - t1, steps ? (double)steps / (t2 - t1) : 0.0, stop);
    fprintf(stderr, "[kvq run] kv cache: %zu bytes for %zu tokens (%zu bytes/token compressed, f16 would be %zu)\n",
            kvq_cache_memory_bytes(c), kvq_session_pos(s), kvq_cache_bytes_per_token(c),
            (size_t)m->cfg.n_layers * (size_t)m->cfg.n_head_kv * (size_t)m->cfg.head_dim * 4);
    ret = 0;
done:
    if (rc && ret) fprintf(stderr, "kvq run: %s\n", kvq_strerror(rc));
    kvq_sampler_free(&smp);
    kvq_session_free(s);
    kvq_pool_free(pool);
    kvq_tok_free(tok);
    kvq_model_free(m);
    free(ids);
    free(logits);
    free(text);
    return ret;
}
