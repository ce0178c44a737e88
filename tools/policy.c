/* Cache policy strings shared by the evaluation tools (format: policy.h). */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "tools.h"

static void seterr(char *err, size_t cap, const char *fmt, const char *a) {
    if (err && cap) snprintf(err, cap, fmt, a);
}

/* ------------------------------------------------------------------------ */
/* Methods in messages                                                       */
/* ------------------------------------------------------------------------ */
void tool_methods_list(char *buf, size_t cap) {
    size_t n = 0;
    if (!cap) return;
    buf[0] = 0;
    for (int i = 0; i < kvq_method_count() && n < cap; i++) {
        kvq_method_info mi;
        if (kvq_method_get(i, &mi)) continue;
        int w;
        if (mi.colon_rows) w = snprintf(buf + n, cap - n, "%s%s[:M]", n ? " " : "", mi.name);
        else if (mi.max_bits > 0)
            w = snprintf(buf + n, cap - n, "%s%s:%d..%d", n ? " " : "", mi.name, mi.min_bits, mi.max_bits);
        else w = snprintf(buf + n, cap - n, "%s%s", n ? " " : "", mi.name);
        if (w < 0) break;
        n += (size_t)w;
    }
}

/* The registry row whose name starts spec (up to ':' or '+'), or -1. */
static int method_of(const char *spec, kvq_method_info *out) {
    size_t len = strcspn(spec, ":+");
    for (int i = 0; i < kvq_method_count(); i++)
        if (!kvq_method_get(i, out) && strlen(out->name) == len && !strncmp(out->name, spec, len)) return i;
    return -1;
}

void tool_spec_error(const char *spec, int rc, const char *why, char *err, size_t cap) {
    char list[512];
    kvq_method_info mi;
    int known = spec ? method_of(spec, &mi) >= 0 : 0;
    if (rc == KVQ_ERR_BITS_RANGE && known && mi.max_bits > 0) {
        snprintf(err, cap, "%s (%s takes widths %d..%d, e.g. %s:%d)", why, mi.name, mi.min_bits, mi.max_bits, mi.name,
                 mi.default_bits);
    } else if (rc == KVQ_ERR_UNKNOWN_METHOD && !known) {
        tool_methods_list(list, sizeof list);
        snprintf(err, cap, "%s (methods: %s; options +outliers=K +center +chscale +norot +scale32 ...: "
                 "docs/METHODS.md)", why, list);
    } else if (rc == KVQ_ERR_UNKNOWN_METHOD && known && mi.max_bits > 0) {
        snprintf(err, cap, "%s (%s takes widths %d..%d, as %s:%d; options: docs/METHODS.md)", why, mi.name,
                 mi.min_bits, mi.max_bits, mi.name, mi.default_bits);
    } else snprintf(err, cap, "%s", why);
    const char *kvq_name = spec ? tool_policy_llama_type(spec) : NULL;
    if (kvq_name && kvq_name != spec) {
        size_t n = strlen(err);
        if (n < cap)
            snprintf(err + n, cap - n, "; llama.cpp's %s is kvq's %s (-ctk/-ctv accept llama.cpp's names)", spec,
                     kvq_name);
    }
}

/* The method spec of a failed policy string: the first of its specs (the
 * shorthand's K and V, the k= and v= fields) that fails alone; s itself if none. */
static const char *failed_spec(const char *s, char *buf, size_t cap) {
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",/");
        const char *c = p;
        if (len > 2 && (c[0] == 'k' || c[0] == 'v') && c[1] == '=') { c += 2; len -= 2; }
        if (len && !memchr(c, '=', len)) {
            snprintf(buf, cap, "%.*s", (int)len, c);
            tool_policy tmp;
            char why[8];
            if (kvq_policy_parse(&tmp, buf, why, sizeof why)) return buf;
        }
        p = c + len;
        if (*p) p++;
    }
    snprintf(buf, cap, "%s", s);
    return buf;
}

/* kvq_policy_parse with the accepted methods or widths added to its reason. */
static int parse_explained(const char *s, tool_policy *p, const char *spec, char *err, size_t err_cap) {
    char why[256] = "", sb[TOOL_POLICY_NAME];
    int rc = kvq_policy_parse(p, s, why, sizeof why);
    if (!rc) return 0;
    if (err && err_cap) tool_spec_error(spec ? spec : failed_spec(s, sb, sizeof sb), rc, why, err, err_cap);
    return -1;
}

/* The library's parser with the tool's calling convention. */
int tool_policy_parse(const char *s, tool_policy *p, char *err, size_t err_cap) {
    return parse_explained(s, p, NULL, err, err_cap);
}

int tool_policy_list(const char *s, tool_policy *out, int max, char *err, size_t err_cap) {
    int n = 0;
    while (s && *s) {
        while (*s == ' ' || *s == '|' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        size_t len = strcspn(s, " |\t\n");
        char one[TOOL_POLICY_NAME];
        if (len >= sizeof one) { seterr(err, err_cap, "%s", "policy too long"); return -1; }
        if (n >= max) { seterr(err, err_cap, "%s", "too many policies"); return -1; }
        memcpy(one, s, len);
        one[len] = 0;
        if (tool_policy_parse(one, &out[n], err, err_cap)) return -1;
        n++;
        s += len;
    }
    if (n == 0) seterr(err, err_cap, "%s", "no policy given");
    return n ? n : -1;
}

void tool_policy_name(const tool_policy *p, char *buf, size_t cap) {
    if (cap) kvq_policy_name(p, buf, cap); /* truncated on KVQ_ERR_RANGE */
}

int tool_policy_session_params(tool_policy *p, int n_layers, kvq_session_params *sp, char *err, size_t err_cap) {
    for (int i = 0; i < p->n_f16_layers; i++) {
        int l = p->f16_layers[i] < 0 ? n_layers + p->f16_layers[i] : p->f16_layers[i];
        if (l < 0 || l >= n_layers) {
            char num[64];
            snprintf(num, sizeof num, "%d (the model has layers 0..%d)", p->f16_layers[i], n_layers - 1);
            seterr(err, err_cap, "f16 layer %s out of range", num);
            return -1;
        }
    }
    kvq_session_params_set_policy(sp, p);
    return 0;
}

void tool_policy_json(const tool_policy *p, FILE *f) {
    char name[TOOL_POLICY_NAME];
    tool_policy_name(p, name, sizeof name);
    fprintf(f, "\"policy\":\"%s\",\"k\":\"%s\",\"v\":\"%s\",\"window\":%d,\"f16_layers\":[", name, p->k_spec, p->v_spec,
            p->f16_window);
    for (int i = 0; i < p->n_f16_layers; i++) fprintf(f, "%s%d", i ? "," : "", p->f16_layers[i]);
    fprintf(f, "],\"compress_sliding\":%d,\"calib_tokens\":%d,\"sink_tokens\":%d", p->compress_sliding,
            p->calib_tokens, p->sink_tokens);
}

static int spec_bits(const char *spec, int d, double *bits) {
    int calib = 0;
    if (kvq_spec_needs_calibration(spec, &calib)) return -1;
    float *rows = calloc((size_t)d, sizeof *rows);
    if (!rows) return -1;
    kvq_plan *pl = NULL;
    int rc = kvq_plan_create(&pl, spec, d, 0, calib ? rows : NULL, calib ? 1 : 0);
    free(rows);
    if (rc) return -1;
    *bits = 8.0 * (double)kvq_plan_code_bytes(pl) / d;
    kvq_plan_free(pl);
    return 0;
}

int tool_policy_bits(const tool_policy *p, int d, double *bits_k, double *bits_v) {
    return spec_bits(p->k_spec, d, bits_k) || spec_bits(p->v_spec, d, bits_v) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* The policy options of a command line (order-independent)                 */
/* ------------------------------------------------------------------------ */
/* The per-field options: spellings (the first is the canonical one), the
 * policy field they set, 1 if llama.cpp's type names are accepted. */
static const struct { const char *names, *field; int llama; } FIELDS[] = {
    {"--cache-k", "k=", 0},       {"-ctk|--cache-type-k", "k=", 1},
    {"--cache-v", "v=", 0},       {"-ctv|--cache-type-v", "v=", 1},
    {"--kv-window", "w=", 0},     {"--kv-f16-layers", "f16layers=", 0},
    {"--kv-calib", "calib=", 0},         {"--kv-sink", "sink=", 0},
};
#define N_FIELDS (sizeof FIELDS / sizeof FIELDS[0])

const char *tool_policy_llama_type(const char *name) {
    static const struct { const char *llama, *kvq; } map[] = {
        {"q8_0", "q8"}, /* the same block layout */
        {"q4_1", "q4"}, /* the same block layout */
        {"q4_0", "q4"}, /* nearest: q4 stores a block minimum too (5.0 bits, not 4.5) */
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(name, map[i].llama)) return map[i].kvq;
    return name;
}

/* The FIELDS row of a spelling, or -1. */
static int field_of(const char *name) {
    size_t len = strlen(name);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *s = FIELDS[i].names;
        while (*s) {
            size_t l = strcspn(s, "|");
            if (l == len && !strncmp(s, name, len)) return (int)i;
            s += l;
            if (*s == '|') s++;
        }
    }
    return -1;
}

static int on_field(void *user, const char *name, const char *val, char *err, size_t cap) {
    tool_policy_args *a = user;
    if (a->n >= TOOL_POLICY_ARGS_MAX) {
        snprintf(err, cap, "%s: more than %d policy options", val, TOOL_POLICY_ARGS_MAX);
        return -1;
    }
    a->f[a->n].field = field_of(name);
    snprintf(a->f[a->n].opt, sizeof a->f[a->n].opt, "%s", name); /* name is the parser's buffer */
    a->f[a->n].val = val;
    a->n++;
    a->set = 1;
    return 0;
}

static int on_policy(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name;
    tool_policy_args *a = user;
    tool_policy p;
    char why[768];
    if (tool_policy_parse(val, &p, why, sizeof why)) { /* said at once, with the option */
        snprintf(err, cap, "%s: %s", val, why);
        return -1;
    }
    a->base = val;
    a->set = 1;
    return 0;
}

static int on_sliding(void *user, const char *name, const char *val, char *err, size_t cap) {
    (void)name, (void)val, (void)err, (void)cap;
    tool_policy_args *a = user;
    a->sliding = a->set = 1;
    return 0;
}

void tool_policy_args_init(tool_policy_args *a) {
    memset(a, 0, sizeof *a);
    int r = 0;
    a->rows[r++] = (tool_opt){.names = "--policy", .kind = TOOL_ARG_FN, .fn = on_policy, .user = a};
    for (size_t i = 0; i < N_FIELDS; i++)
        a->rows[r++] = (tool_opt){.names = FIELDS[i].names, .kind = TOOL_ARG_FN, .fn = on_field, .user = a};
    a->rows[r++] = (tool_opt){.names = "--kv-compress-sliding|--compress-sliding", .kind = TOOL_ARG_FN0,
                              .fn = on_sliding, .user = a};
    a->rows[r] = (tool_opt){0};
}

const tool_opt *tool_policy_args_table(tool_policy_args *a) { return a->rows; }

int tool_policy_args_build(const tool_policy_args *a, tool_policy *out, char *err, size_t err_cap) {
    tool_policy p;
    tool_policy_init(&p);
    if (a->base && tool_policy_parse(a->base, &p, err, err_cap)) return -1;
    for (int i = 0; i < a->n; i++) {
        int fi = a->f[i].field;
        if (fi < 0) { seterr(err, err_cap, "%s: not a policy option", a->f[i].opt); return -1; }
        const char *val = FIELDS[fi].llama ? tool_policy_llama_type(a->f[i].val) : a->f[i].val;
        char field[TOOL_POLICY_NAME], name[TOOL_POLICY_NAME], s[2 * TOOL_POLICY_NAME], why[768] = "";
        if ((size_t)snprintf(field, sizeof field, "%s%s", FIELDS[fi].field, val) >= sizeof field) {
            if (err && err_cap) snprintf(err, err_cap, "%s %.64s...: value too long", a->f[i].opt, val);
            return -1;
        }
        if (FIELDS[fi].field[0] == 'f')
            for (char *c = field; *c; c++)
                if (*c == ',') *c = ';'; /* --kv-f16-layers 0,29 */
        tool_policy_name(&p, name, sizeof name);
        snprintf(s, sizeof s, "%s,%s", name, field);
        int spec_field = FIELDS[fi].field[1] == '=' && (FIELDS[fi].field[0] == 'k' || FIELDS[fi].field[0] == 'v');
        if (parse_explained(s, &p, spec_field ? val : NULL, why, sizeof why)) {
            if (err && err_cap) snprintf(err, err_cap, "%s %s: %s", a->f[i].opt, a->f[i].val, why);
            return -1;
        }
    }
    if (a->sliding) p.compress_sliding = 1;
    *out = p;
    return 0;
}

void tool_policy_args_usage(FILE *f) {
    char list[512];
    tool_methods_list(list, sizeof list);
    fprintf(f,
            "cache policy (any order; --policy first, then the per-field options, later ones win):\n"
            "  --policy P             the whole policy in one string (docs/CACHE.md), e.g.\n"
            "                         'tq-mse:4+chscale/tq-mse:4,w=128,sliding=1'\n"
            "  --cache-k SPEC         key cache method (default f16; docs/METHODS.md)\n"
            "  --cache-v SPEC         value cache method (default f16)\n"
            "  -ctk, --cache-type-k T key method; also llama.cpp's type names: f16, bf16, f32 as\n"
            "                         themselves, q8_0 as q8 and q4_1 as q4 (the same blocks),\n"
            "                         q4_0 as q4 (nearest: q4 keeps a block minimum, 5.0 bits)\n"
            "  -ctv, --cache-type-v T value method, the same names\n"
            "  --kv-window W          keep the W most recent tokens in f16\n"
            "  --kv-f16-layers L,L    layers kept in f16 (negative: from the end, -1 = last)\n"
            "  --kv-compress-sliding, --compress-sliding\n"
            "                         compress the sliding-window layers too (Gemma 3; default: they stay f16)\n"
            "  --kv-calib N           tokens kept f16 until +center/+chscale/+outliers plans calibrate (default 128)\n"
            "  --kv-sink N            the first N positions of compressed global layers kept f16 (attention sink)\n"
            "  methods: %s\n"
            "           (NAME alone: its default width; options +outliers=K +center +chscale ...)\n",
            list);
}

/* ------------------------------------------------------------------------ */
/* Key methods known to fail on real models                                  */
/* ------------------------------------------------------------------------ */
/* Measured in docs/RESULTS.md (kvq kld, SmolLM2-135M, prose-heldout, ctx
 * 1024; f16 ppl 33.52, tq-mse:4 keys 35.69). */
static const struct { const char *method, *why; } BAD_KEYS[] = {
    {"qjl", "ppl 1270.7 (KLD 3.82, top-1 0.10) against f16's 33.5: the text will be garbage"},
    {"tq-prod", "ppl 47.8 (tq-prod:4/tq-mse:4) and 103.5 (tq-prod:3/tq-mse:4) against f16's 33.5 and tq-mse:4's "
                "35.7"},
};

int tool_policy_key_warning(const tool_policy *p, char *buf, size_t cap) {
    size_t len = strcspn(p->k_spec, ":+");
    for (size_t i = 0; i < sizeof BAD_KEYS / sizeof BAD_KEYS[0]; i++) {
        if (strlen(BAD_KEYS[i].method) != len || strncmp(p->k_spec, BAD_KEYS[i].method, len)) continue;
        if (cap)
            snprintf(buf, cap,
                     "key method %s is known to fail on real models: on SmolLM2 %s (docs/RESULTS.md); "
                     "tq-mse:4+chscale keys are the tested choice",
                     p->k_spec, BAD_KEYS[i].why);
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Bits per value and compressed layers                                      */
/* ------------------------------------------------------------------------ */
double tool_bits_per_value(size_t bytes_per_token, const kvq_model_info *mi) {
    double values = 2.0 * mi->n_layers * mi->n_head_kv * mi->head_dim;
    return values > 0 ? 8.0 * (double)bytes_per_token / values : 0.0;
}

void tool_policy_layers(const tool_policy *p, const kvq_model_info *mi, int *n_comp, int *n_sliding_f16, int *n_listed) {
    int comp = 0, sl = 0, listed = 0, L = mi->n_layers;
    int plain = !strcmp(p->k_spec, "f16") && !strcmp(p->v_spec, "f16");
    for (int l = 0; l < L && l < KVQ_MAX_LAYERS; l++) {
        int in_list = 0;
        for (int i = 0; i < p->n_f16_layers; i++) in_list |= (p->f16_layers[i] < 0 ? L + p->f16_layers[i] : p->f16_layers[i]) == l;
        if (in_list) listed++;
        else if (mi->sliding_window[l] > 0 && !p->compress_sliding) sl++;
        else comp += !plain;
    }
    *n_comp = comp;
    *n_sliding_f16 = sl;
    *n_listed = listed;
}
