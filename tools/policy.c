/* Cache policy strings shared by the evaluation tools (format: policy.h). */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

#include "tools.h"

static void seterr(char *err, size_t cap, const char *fmt, const char *a) {
    if (err && cap) snprintf(err, cap, fmt, a);
}

/* The library's parser with the tool's calling convention. */
int tool_policy_parse(const char *s, tool_policy *p, char *err, size_t err_cap) {
    return kvq_policy_parse(p, s, err, err_cap) ? -1 : 0;
}

/* Applies one field ("w=128", "k=q8", ...) to p: the canonical name of p with
 * the field appended goes through the one parser (later fields win). */
static int apply_field(tool_policy *p, const char *field, char *err, size_t err_cap) {
    char name[TOOL_POLICY_NAME], s[2 * TOOL_POLICY_NAME];
    tool_policy_name(p, name, sizeof name);
    if ((size_t)snprintf(s, sizeof s, "%s,%s", name, field) >= sizeof s) {
        seterr(err, err_cap, "option value too long: '%.64s...'", field);
        return -1;
    }
    return tool_policy_parse(s, p, err, err_cap);
}

int tool_policy_option(tool_policy *p, const char *opt, const char *val, char *err, size_t err_cap) {
    if (!strcmp(opt, "--kv-compress-sliding")) { p->compress_sliding = 1; return 1; }
    static const struct { const char *opt, *field; } map[] = {
        {"--cache-k", "k="}, {"--cache-v", "v="}, {"--kv-window", "w="}, {"--kv-f16-layers", "f16layers="},
        {"--kv-calib", "calib="},
    };
    if (!strcmp(opt, "--policy")) {
        if (!val) { seterr(err, err_cap, "%s needs a value", opt); return -1; }
        return tool_policy_parse(val, p, err, err_cap) ? -1 : 2;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(opt, map[i].opt)) continue;
        if (!val) { seterr(err, err_cap, "%s needs a value", opt); return -1; }
        char field[TOOL_POLICY_NAME];
        if ((size_t)snprintf(field, sizeof field, "%s%s", map[i].field, val) >= sizeof field) {
            seterr(err, err_cap, "%s: value too long", opt);
            return -1;
        }
        for (char *c = field; *c; c++)
            if (*c == ',' && map[i].field[0] == 'f') *c = ';'; /* --kv-f16-layers 0,29 */
        char why[256] = "";
        if (apply_field(p, field, why, sizeof why)) {
            if (err && err_cap) snprintf(err, err_cap, "%s %s: %s", opt, val, why);
            return -1;
        }
        return 2;
    }
    return 0;
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
