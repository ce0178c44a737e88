/* Helpers shared by the quality evaluation subcommands (eval_util.h). */
#include "eval_util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "tools.h"

/* ------------------------------------------------------------------------ */
/* Model, tokenizer, pool                                                    */
/* ------------------------------------------------------------------------ */
int eval_env_open(eval_env *e, const char *tool, const char *model_path, int threads) {
    memset(e, 0, sizeof *e);
    e->tool = tool;
    e->threads = threads;
    e->weights_seconds = NAN;
    if (!model_path) {
        if (tool_default_model(e->model_buf, sizeof e->model_buf, 1)) {
            fprintf(stderr, "kvq %s: no -m given and the default model could not be installed "
                            "(bash scripts/fetch-models.sh)\n", tool);
            return -1;
        }
        model_path = e->model_buf;
    }
    e->model_path = model_path;
    char err[256] = "";
    int rc = kvq_model_load(&e->m, model_path, err, sizeof err);
    if (rc) { fprintf(stderr, "kvq %s: %s\n", tool, err[0] ? err : kvq_strerror(rc)); return -1; }
    kvq_model_get_info(e->m, &e->info);
    if (!e->info.has_tokenizer) {
        fprintf(stderr, "kvq %s: %s has no tokenizer\n", tool, model_path);
        eval_env_close(e);
        return -1;
    }
    if ((rc = kvq_pool_create(&e->pool, threads))) {
        fprintf(stderr, "kvq %s: thread pool: %s\n", tool, kvq_strerror(rc));
        eval_env_close(e);
        return -1;
    }
    e->add_bos = e->info.add_bos;
    return 0;
}

void eval_env_close(eval_env *e) {
    kvq_pool_free(e->pool);
    if (e->m_test != e->m) kvq_model_free(e->m_test);
    kvq_model_free(e->m);
    e->pool = NULL;
    e->m = e->m_test = NULL;
}

int eval_env_weights(eval_env *e, const eval_common *c, int separate) {
    e->m_test = e->m;
    e->info_test = e->info;
    if (c->test_model && !separate) {
        fprintf(stderr, "kvq %s: --test-model is a kvq kld option\n", e->tool);
        return -1;
    }
    if (!c->weights && !c->test_model) /* nothing to code; --keep alone is refused there */
        return tool_code_weights(e->m, NULL, c->keep, e->pool, e->tool, 1) ? -1 : 0;
    kvq_model *t = e->m;
    if (separate) {
        char err[256] = "";
        const char *path = c->test_model ? c->test_model : e->model_path;
        int rc = kvq_model_load(&t, path, err, sizeof err);
        if (rc) { fprintf(stderr, "kvq %s: %s\n", e->tool, err[0] ? err : kvq_strerror(rc)); return -1; }
        kvq_model_info ti;
        kvq_model_get_info(t, &ti);
        if (!tool_same_model_shape(&e->info, &ti)) {
            fprintf(stderr, "kvq %s: --test-model %s is not the same model shape as %s (vocab %d/%d, layers %d/%d)\n",
                    e->tool, path, e->model_path, ti.n_vocab, e->info.n_vocab, ti.n_layers, e->info.n_layers);
            kvq_model_free(t);
            return -1;
        }
    }
    double t0 = tool_now();
    if (tool_code_weights(t, c->weights, c->keep, e->pool, e->tool, 0)) {
        if (t != e->m) kvq_model_free(t);
        return -1;
    }
    e->weights_seconds = c->weights ? tool_now() - t0 : NAN;
    e->m_test = t;
    e->test_path = c->test_model;
    kvq_model_get_info(t, &e->info_test);
    if (!separate) e->info = e->info_test;
    return 0;
}

void eval_weights_desc(const eval_env *e, char *buf, size_t cap) {
    const kvq_model_info *t = &e->info_test;
    int n = 0;
    buf[0] = 0;
    if (e->test_path) n = snprintf(buf, cap, ", tested on %s", eval_basename(e->test_path));
    if (t->n_coded && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", weights %s (%.3f bits per weight, %d tensors)", t->weights_spec,
                 t->coded_bits, t->n_coded);
}

void eval_json_weights(FILE *f, const eval_env *e) {
    const kvq_model_info *t = &e->info_test;
    fprintf(f, ",\"weights\":");
    if (t->n_coded) eval_json_str(f, t->weights_spec);
    else fprintf(f, "null");
    fprintf(f, ",\"weights_bits\":");
    eval_json_num(f, t->n_coded ? t->coded_bits : NAN);
    fprintf(f, ",\"weight_bytes\":%llu,\"weights_seconds\":", (unsigned long long)t->n_weight_bytes);
    eval_json_num(f, e->weights_seconds); /* coding them at load time (--weights), else null */
    fprintf(f, ",\"test_model\":");
    if (e->test_path) eval_json_str(f, eval_basename(e->test_path));
    else fprintf(f, "null");
}

int eval_model_has_chat(const eval_env *e) {
    return e->info.has_chat_template;
}

const char *eval_basename(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

void eval_find_corpus(const char *path, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", path);
    if (access(path, R_OK) == 0) return;
    const char *base = eval_basename(path), *env = getenv("KVQ_CORPORA_DIR");
    char exe[2048], cand[4608];
    if (env && *env) {
        snprintf(cand, sizeof cand, "%s/%s", env, base);
        if (access(cand, R_OK) == 0) { snprintf(buf, cap, "%s", cand); return; }
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = 0;
    const char *fmt[2] = {"%s/../corpora/%s", "%s/corpora/%s"};
    for (int i = 0; i < 2; i++) {
        snprintf(cand, sizeof cand, fmt[i], exe, base);
        if (access(cand, R_OK) == 0) { snprintf(buf, cap, "%s", cand); return; }
    }
}

char *eval_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
        if (n == cap) {
            char *b = realloc(buf, (cap *= 2) + 1);
            if (!b) { free(buf); buf = NULL; errno = ENOMEM; }
            else buf = b;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return NULL;
    if (bad) { free(buf); errno = EIO; return NULL; }
    buf[n] = 0;
    *len = n;
    return buf;
}

int eval_tokenize(const kvq_model *t, const char *text, size_t len, int add_special, int parse_special,
                  int32_t **ids, size_t *n) {
    size_t cap = len / 2 + 16, need = 0;
    int32_t *buf = malloc(sizeof(int32_t) * cap);
    if (!buf) return KVQ_ERR_NOMEM;
    int rc = kvq_tokenize(t, text, len, add_special, parse_special, buf, cap, &need);
    if (rc == KVQ_ERR_RANGE) {
        free(buf);
        cap = need;
        buf = malloc(sizeof(int32_t) * (cap ? cap : 1));
        if (!buf) return KVQ_ERR_NOMEM;
        rc = kvq_tokenize(t, text, len, add_special, parse_special, buf, cap, &need);
    }
    if (rc) { free(buf); return rc; }
    *ids = buf;
    *n = need;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */
static int on_policies(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name;
    eval_common *c = user;
    char why[768];
    int n = tool_policy_list(val, c->list, EVAL_MAX_POLICIES, why, sizeof why);
    if (n < 0) {
        snprintf(err, cap, "'%s': %s", val, why);
        return -1;
    }
    c->n_list = n;
    return 0;
}

void eval_common_init(eval_common *c) {
    memset(c, 0, sizeof *c);
    c->threads = 2;
    c->acts = "q8";
    tool_policy_init(&c->single);
    tool_policy_args_init(&c->pa);
    int r = 0;
    c->rows[r++] = (tool_opt){.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &c->model};
    c->rows[r++] = (tool_opt){.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &c->threads, .min = 1, .max = 256};
    c->rows[r++] = (tool_opt){.names = "--acts", .kind = TOOL_ARG_CHOICE, .dst = &c->acts, .choices = "q8|f32"};
    c->rows[r++] = (tool_opt){.names = "--seed", .kind = TOOL_ARG_U64, .dst = &c->seed};
    c->rows[r++] = (tool_opt){.names = "--json", .kind = TOOL_ARG_SET, .dst = &c->json};
    c->rows[r++] = (tool_opt){.names = "--policies", .kind = TOOL_ARG_FN, .fn = on_policies, .user = c};
    c->rows[r++] = (tool_opt){.names = "--weights", .kind = TOOL_ARG_STR, .dst = &c->weights};
    c->rows[r++] = (tool_opt){.names = "--keep", .kind = TOOL_ARG_STR, .dst = &c->keep};
    c->rows[r++] = (tool_opt)TOOL_OPT_NGL;
    c->rows[r] = (tool_opt){0};
}

const tool_opt *eval_common_table(eval_common *c) { return c->rows; }
const tool_opt *eval_common_policy_table(eval_common *c) { return tool_policy_args_table(&c->pa); }

int eval_common_finish(eval_common *c, const char *tool) {
    char err[1024] = "";
    if (tool_policy_args_build(&c->pa, &c->single, err, sizeof err)) return tool_usage_error(tool, "%s", err);
    c->single_set = c->pa.set;
    c->f32_acts = !strcmp(c->acts, "f32");
    return 0;
}

int eval_common_policies(const eval_common *c, tool_policy *out, int max) {
    int n = 0;
    if (c->n_list) {
        for (int i = 0; i < c->n_list && n < max; i++) out[n++] = c->list[i];
        if (c->single_set && n < max) out[n++] = c->single;
    } else if (max > 0) out[n++] = c->single;
    return n;
}

void eval_common_usage(FILE *f) {
    fprintf(f,
            "  -m, --model MODEL      GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
            "  --policies \"P P ...\"   several policies, each a result (space- or '|'-separated); the\n"
            "                         policy options below, when given, add one more\n"
            "  -t, --threads T        threads, 1..256 (default 2)\n"
            "  --acts q8|f32          activations of quantized-weight products (default q8)\n"
            "  --seed S               cache rotation seed (default 0)\n"
            "  --json                 one JSON object per result on stdout (flushed per line)\n"
            "  -ngl N                 refused: kvq's engine runs on the CPU (GPUs: the Python/PyTorch integration)\n"
            TOOL_WEIGHTS_USAGE);
    tool_policy_args_usage(f);
}

/* ------------------------------------------------------------------------ */
/* Sessions and bits                                                         */
/* ------------------------------------------------------------------------ */
int eval_session(const eval_env *e, tool_policy *p, int n_batch, int f32_acts, uint64_t seed, kvq_attn_hook hook,
                 void *hook_user, kvq_session **out) {
    return eval_session_on(e, e->m, p, n_batch, f32_acts, seed, hook, hook_user, out);
}

int eval_session_on(const eval_env *e, const kvq_model *m, tool_policy *p, int n_batch, int f32_acts, uint64_t seed,
                    kvq_attn_hook hook, void *hook_user, kvq_session **out) {
    kvq_session_params sp = kvq_session_default_params();
    char err[256] = "";
    if (tool_policy_session_params(p, e->info.n_layers, &sp, err, sizeof err)) {
        fprintf(stderr, "kvq %s: %s\n", e->tool, err);
        return KVQ_ERR_INVALID_ARG;
    }
    sp.n_batch = n_batch;
    sp.f32_acts = f32_acts;
    sp.seed = seed;
    sp.attn_hook = hook;
    sp.attn_hook_user = hook_user;
    int rc = kvq_session_create(out, m, &sp, e->pool);
    if (rc) {
        char name[TOOL_POLICY_NAME];
        tool_policy_name(p, name, sizeof name);
        fprintf(stderr, "kvq %s: cache policy %s: %s\n", e->tool, name, kvq_strerror(rc));
    }
    return rc;
}

int eval_policy_bits(const tool_policy *p, int head_dim, double *bits_k, double *bits_v) {
    return tool_policy_bits(p, head_dim, bits_k, bits_v);
}

double eval_cache_bits_all(kvq_session *s, const kvq_model *m) {
    kvq_model_info mi;
    kvq_model_get_info(m, &mi);
    return tool_bits_per_value(kvq_cache_bytes_per_token(kvq_session_cache(s)), &mi);
}

/* ------------------------------------------------------------------------ */
/* Ctrl-C                                                                    */
/* ------------------------------------------------------------------------ */
/* One handler for the whole CLI (progress.c): a second Ctrl-C kills. */
void eval_sigint_install(void) { tool_interrupt_install(); }

int eval_interrupted(void) { return tool_interrupted(); }

/* ------------------------------------------------------------------------ */
/* Progress                                                                  */
/* ------------------------------------------------------------------------ */
void eval_fmt_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7) { snprintf(buf, cap, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

void eval_progress_init(eval_progress *p, const char *tool) {
    p->tool = tool;
    p->t0 = tool_now();
    p->last = 0;
    p->tty = isatty(STDERR_FILENO);
}

void eval_progress_update(eval_progress *p, double done, double total, double tokens, const char *what) {
    if (!p->tty) return;
    double now = tool_now(), el = now - p->t0;
    if (now - p->last < 0.25 && done < total) return;
    p->last = now;
    char eta[32], els[32];
    eval_fmt_duration(eta, sizeof eta, done > 0 ? el / done * (total - done) : -1);
    eval_fmt_duration(els, sizeof els, el);
    fprintf(stderr, "\r[kvq %s] %s %.0f%%  %.0f tok/s  elapsed %s  ETA %s\033[K", p->tool, what ? what : "",
            total > 0 ? 100.0 * done / total : 0.0, el > 0 ? tokens / el : 0.0, els, eta);
    fflush(stderr);
}

void eval_progress_end(eval_progress *p) {
    if (p->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                      */
/* ------------------------------------------------------------------------ */
void eval_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void eval_json_num(FILE *f, double x) {
    if (!isfinite(x)) fputs("null", f);
    else fprintf(f, "%.9g", x);
}

/* ------------------------------------------------------------------------ */
/* Logit statistics                                                          */
/* ------------------------------------------------------------------------ */
typedef struct {
    const float *logits, *base, *test;
    const double *lse_base, *lse_test;
    int V;
    const int32_t *next;
    double *lse, *nll, *kl;
    int32_t *top;
} stats_job;

static double row_lse(const float *x, int V, int32_t *top) {
    float mx = x[0];
    int arg = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > mx) { mx = x[i]; arg = i; }
    double s = 0.0;
    for (int i = 0; i < V; i++) s += (double)expf(x[i] - mx);
    if (top) *top = arg;
    return (double)mx + log(s);
}

static void stats_task(void *arg, int task, int thread) {
    (void)thread;
    const stats_job *j = arg;
    const float *x = j->logits + (size_t)task * (size_t)j->V;
    double lse = row_lse(x, j->V, &j->top[task]);
    j->lse[task] = lse;
    if (j->next && j->nll) j->nll[task] = lse - (double)x[j->next[task]];
}

int eval_logit_stats(kvq_pool *pool, const float *logits, int n_vocab, size_t n, const int32_t *next, double *lse,
                     int32_t *top, double *nll) {
    if (n == 0) return KVQ_OK;
    stats_job j;
    memset(&j, 0, sizeof j);
    j.logits = logits;
    j.V = n_vocab;
    j.next = next;
    j.lse = lse;
    j.top = top;
    j.nll = nll;
    return kvq_pool_run(pool, stats_task, &j, (int)n);
}

static void kl_task(void *arg, int task, int thread) {
    (void)thread;
    const stats_job *j = arg;
    size_t off = (size_t)task * (size_t)j->V;
    const float *b = j->base + off, *t = j->test + off;
    double lb = j->lse_base[task], lt = j->lse_test[task], d0 = lt - lb, s = 0.0;
    /* sum p_b (log p_b - log p_t) = sum p_b ((b - t) + (lse_t - lse_b)) */
    float lbf = (float)lb;
    for (int i = 0; i < j->V; i++) {
        /* p_b in float (relative error ~1e-7, far below the KLDs measured) */
        double p = (double)expf(b[i] - lbf);
        s += p * (((double)b[i] - (double)t[i]) + d0);
    }
    j->kl[task] = s > 0.0 ? s : 0.0; /* rounding can leave a tiny negative value */
}

int eval_kl(kvq_pool *pool, const float *base, const double *lse_base, const float *test, const double *lse_test,
            int n_vocab, size_t n, double *kl) {
    if (n == 0) return KVQ_OK;
    stats_job j;
    memset(&j, 0, sizeof j);
    j.base = base;
    j.test = test;
    j.lse_base = lse_base;
    j.lse_test = lse_test;
    j.V = n_vocab;
    j.kl = kl;
    return kvq_pool_run(pool, kl_task, &j, (int)n);
}

void eval_mean_se(const double *x, size_t n, double *mean, double *se) {
    if (n == 0) { *mean = NAN; *se = NAN; return; }
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += x[i];
    double m = s / (double)n, v = 0.0;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *se = n > 1 ? sqrt(v / (double)(n - 1) / (double)n) : NAN;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double eval_quantile(const double *x, size_t n, double q) {
    if (n == 0) return NAN;
    double *c = malloc(sizeof(double) * n);
    if (!c) return NAN;
    memcpy(c, x, sizeof(double) * n);
    qsort(c, n, sizeof(double), cmp_double);
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    double f = pos - (double)i, r = i + 1 < n ? c[i] + f * (c[i + 1] - c[i]) : c[i];
    free(c);
    return r;
}

int eval_window_calls(size_t C, size_t first, size_t B, eval_call *calls, int max) {
    int n = 0;
    if (B == 0) {
        if (max > 0) calls[n++] = (eval_call){0, C, 1};
        return n;
    }
    for (size_t a = 0; a < first && n < max; a += B) calls[n++] = (eval_call){a, a + B < first ? a + B : first, 0};
    for (size_t a = first; a < C && n < max; a += B) calls[n++] = (eval_call){a, a + B < C ? a + B : C, 1};
    return n;
}
