/* Cache policy strings shared by the evaluation tools (format: policy.h). */
#include "policy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tools.h"

static void seterr(char *err, size_t cap, const char *fmt, const char *a) {
    if (err && cap) snprintf(err, cap, fmt, a);
}

void tool_policy_init(tool_policy *p) {
    memset(p, 0, sizeof *p);
    strcpy(p->k, "f16");
    strcpy(p->v, "f16");
}

/* Copies s[0..n) as a spec; -1 if empty, too long or holding a separator. */
static int set_spec(char *dst, const char *s, size_t n) {
    if (n == 0 || n >= TOOL_POLICY_SPEC) return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',' || s[i] == '/' || s[i] == ' ' || s[i] == '|' || s[i] == '"' || s[i] == '\\') return -1;
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

static int parse_int(const char *s, size_t n, long lo, long hi, long *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (*end || errno || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* "0;-1;5" (also ',' when given on its own, as --kv-f16-layers). */
static int parse_layers(tool_policy *p, const char *s, size_t n, int comma_ok) {
    p->n_f16_layers = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != ';' && !(comma_ok && s[j] == ',')) j++;
        long v;
        if (p->n_f16_layers >= TOOL_POLICY_MAX_F16 || parse_int(s + i, j - i, -KVQ_MAX_LAYERS, KVQ_MAX_LAYERS - 1, &v))
            return -1;
        p->f16_layers[p->n_f16_layers++] = (int)v;
        i = j + 1;
    }
    return 0;
}

static int parse_field(tool_policy *p, const char *s, size_t n, int first, char *err, size_t cap) {
    char field[TOOL_POLICY_NAME];
    snprintf(field, sizeof field, "%.*s", (int)n, s);
    long v;
    if (n > 2 && (s[0] == 'k' || s[0] == 'v') && s[1] == '=') {
        if (set_spec(s[0] == 'k' ? p->k : p->v, s + 2, n - 2)) { seterr(err, cap, "bad method in '%s'", field); return -1; }
        return 0;
    }
    if (n > 2 && !strncmp(s, "w=", 2)) {
        if (parse_int(s + 2, n - 2, 0, 1L << 30, &v)) { seterr(err, cap, "bad window in '%s'", field); return -1; }
        p->window = (int)v;
        return 0;
    }
    if (n > 10 && !strncmp(s, "f16layers=", 10)) {
        if (parse_layers(p, s + 10, n - 10, 0)) { seterr(err, cap, "bad layer list in '%s'", field); return -1; }
        return 0;
    }
    if (n > 8 && !strncmp(s, "sliding=", 8)) {
        if (parse_int(s + 8, n - 8, 0, 1, &v)) { seterr(err, cap, "bad value in '%s' (0 or 1)", field); return -1; }
        p->compress_sliding = (int)v;
        return 0;
    }
    if (n > 6 && !strncmp(s, "calib=", 6)) {
        if (parse_int(s + 6, n - 6, 1, 1L << 20, &v)) { seterr(err, cap, "bad value in '%s' (1..2^20)", field); return -1; }
        p->calib_tokens = (int)v;
        return 0;
    }
    if (first) { /* shorthand SPEC or KSPEC/VSPEC */
        const char *slash = memchr(s, '/', n);
        if (!slash) {
            if (set_spec(p->k, s, n) || set_spec(p->v, s, n)) { seterr(err, cap, "bad method '%s'", field); return -1; }
        } else if (set_spec(p->k, s, (size_t)(slash - s)) || set_spec(p->v, slash + 1, n - (size_t)(slash - s) - 1)) {
            seterr(err, cap, "bad K/V methods '%s'", field);
            return -1;
        }
        return 0;
    }
    seterr(err, cap, "unknown policy field '%s' (k= v= w= f16layers= sliding= calib=)", field);
    return -1;
}

int tool_policy_parse(const char *s, tool_policy *p, char *err, size_t err_cap) {
    tool_policy_init(p);
    if (!s || !*s) { seterr(err, err_cap, "%s", "empty policy"); return -1; }
    size_t i = 0, n = strlen(s);
    int first = 1;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != ',') j++;
        if (j == i) { seterr(err, err_cap, "empty field in policy '%s'", s); return -1; }
        if (parse_field(p, s + i, j - i, first, err, err_cap)) return -1;
        first = 0;
        i = j + 1;
    }
    return 0;
}

int tool_policy_option(tool_policy *p, const char *opt, const char *val, char *err, size_t err_cap) {
    long v;
    if (!strcmp(opt, "--kv-compress-sliding")) { p->compress_sliding = 1; return 1; }
    int known = !strcmp(opt, "--cache-k") || !strcmp(opt, "--cache-v") || !strcmp(opt, "--kv-window") ||
                !strcmp(opt, "--kv-f16-layers") || !strcmp(opt, "--kv-calib") || !strcmp(opt, "--policy");
    if (!known) return 0;
    if (!val) { seterr(err, err_cap, "%s needs a value", opt); return -1; }
    if (!strcmp(opt, "--policy")) return tool_policy_parse(val, p, err, err_cap) ? -1 : 2;
    if (!strcmp(opt, "--cache-k") || !strcmp(opt, "--cache-v")) {
        if (set_spec(opt[8] == 'k' ? p->k : p->v, val, strlen(val))) { seterr(err, err_cap, "bad method '%s'", val); return -1; }
        return 2;
    }
    if (!strcmp(opt, "--kv-window")) {
        if (parse_int(val, strlen(val), 0, 1L << 30, &v)) { seterr(err, err_cap, "bad --kv-window '%s'", val); return -1; }
        p->window = (int)v;
        return 2;
    }
    if (!strcmp(opt, "--kv-calib")) {
        if (parse_int(val, strlen(val), 1, 1L << 20, &v)) { seterr(err, err_cap, "bad --kv-calib '%s'", val); return -1; }
        p->calib_tokens = (int)v;
        return 2;
    }
    if (parse_layers(p, val, strlen(val), 1)) { seterr(err, err_cap, "bad --kv-f16-layers '%s'", val); return -1; }
    return 2;
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

/* Appends text at *pos of buf (bounded). */
static void put(char *buf, size_t cap, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos + 1 >= cap) return;
    if (n > cap - 1 - *pos) n = cap - 1 - *pos;
    memcpy(buf + *pos, s, n);
    *pos += n;
    buf[*pos] = 0;
}

void tool_policy_name(const tool_policy *p, char *buf, size_t cap) {
    if (!cap) return;
    size_t pos = 0;
    buf[0] = 0;
    char num[32];
    put(buf, cap, &pos, p->k);
    if (strcmp(p->k, p->v)) {
        put(buf, cap, &pos, "/");
        put(buf, cap, &pos, p->v);
    }
    if (p->window) {
        snprintf(num, sizeof num, ",w=%d", p->window);
        put(buf, cap, &pos, num);
    }
    if (p->n_f16_layers) {
        put(buf, cap, &pos, ",f16layers=");
        for (int i = 0; i < p->n_f16_layers; i++) {
            snprintf(num, sizeof num, "%s%d", i ? ";" : "", p->f16_layers[i]);
            put(buf, cap, &pos, num);
        }
    }
    if (p->compress_sliding) put(buf, cap, &pos, ",sliding=1");
    if (p->calib_tokens) {
        snprintf(num, sizeof num, ",calib=%d", p->calib_tokens);
        put(buf, cap, &pos, num);
    }
}

int tool_policy_session_params(tool_policy *p, int n_layers, kvq_session_params *sp, char *err, size_t err_cap) {
    for (int i = 0; i < p->n_f16_layers; i++) {
        int l = p->f16_layers[i] < 0 ? n_layers + p->f16_layers[i] : p->f16_layers[i];
        if (l < 0 || l >= n_layers) {
            char num[16];
            snprintf(num, sizeof num, "%d", p->f16_layers[i]);
            seterr(err, err_cap, "f16 layer %s out of range", num);
            return -1;
        }
        p->resolved[i] = l;
    }
    sp->k_spec = p->k;
    sp->v_spec = p->v;
    sp->f16_window = p->window;
    sp->f16_layers = p->n_f16_layers ? p->resolved : NULL;
    sp->n_f16_layers = p->n_f16_layers;
    sp->compress_sliding = p->compress_sliding;
    sp->calib_tokens = p->calib_tokens;
    return 0;
}

void tool_policy_json(const tool_policy *p, FILE *f) {
    char name[TOOL_POLICY_NAME];
    tool_policy_name(p, name, sizeof name);
    fprintf(f, "\"policy\":\"%s\",\"k\":\"%s\",\"v\":\"%s\",\"window\":%d,\"f16_layers\":[", name, p->k, p->v,
            p->window);
    for (int i = 0; i < p->n_f16_layers; i++) fprintf(f, "%s%d", i ? "," : "", p->f16_layers[i]);
    fprintf(f, "],\"compress_sliding\":%d,\"calib_tokens\":%d", p->compress_sliding, p->calib_tokens);
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
    return spec_bits(p->k, d, bits_k) || spec_bits(p->v, d, bits_v) ? -1 : 0;
}
