/*
 * Cache policy strings (grammar: include/kvq.h, "Cache policies"): the one
 * parser behind the CLI's --policy and the Python package's policy= argument.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq.h"
#include "errfmt.h"

/* Largest layer index a policy may name (and its negative). */
#define POLICY_MAX_LAYER 4096

#define fail kvq_errf

void kvq_policy_init(kvq_policy *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    strcpy(p->k_spec, "f16");
    strcpy(p->v_spec, "f16");
}

/* Copies s[0..n) as a spec; -1 if empty, too long or holding a separator. */
static int set_spec(char *dst, const char *s, size_t n) {
    if (n == 0 || n >= KVQ_POLICY_SPEC_MAX) return -1;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',' || s[i] == '/' || s[i] == ' ' || s[i] == '|' || s[i] == '"' || s[i] == '\\' ||
            (unsigned char)s[i] < 0x20)
            return -1;
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

/* A decimal integer s[0..n) in [lo, hi]. */
static int parse_int(const char *s, size_t n, long lo, long hi, long *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (*end || errno || v < lo || v > hi || buf[0] == ' ' || buf[0] == '+') return -1;
    *out = v;
    return 0;
}

/* "0;-1;5" */
static int parse_layers(kvq_policy *p, const char *s, size_t n) {
    if (n == 0) return -1;
    p->n_f16_layers = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != ';') j++;
        long v;
        if (p->n_f16_layers >= KVQ_POLICY_MAX_F16 || parse_int(s + i, j - i, -POLICY_MAX_LAYER, POLICY_MAX_LAYER - 1, &v))
            return -1;
        p->f16_layers[p->n_f16_layers++] = (int)v;
        i = j + 1;
    }
    return n && s[n - 1] == ';' ? -1 : 0;
}

static int parse_field(kvq_policy *p, const char *s, size_t n, int first, char *err, size_t cap) {
    const int bad = KVQ_ERR_INVALID_ARG;
    int fl = n > 200 ? 200 : (int)n; /* field as printed in messages */
    long v;
    if (n >= 2 && (s[0] == 'k' || s[0] == 'v') && s[1] == '=') {
        if (set_spec(s[0] == 'k' ? p->k_spec : p->v_spec, s + 2, n - 2))
            return fail(err, cap, bad, "bad method in '%.*s' (a method spec, no ',' '/' or spaces)", fl, s);
        return KVQ_OK;
    }
    if (n >= 2 && !strncmp(s, "w=", 2)) {
        if (parse_int(s + 2, n - 2, 0, 1L << 30, &v))
            return fail(err, cap, bad, "bad window in '%.*s' (an integer 0..2^30)", fl, s);
        p->f16_window = (int)v;
        return KVQ_OK;
    }
    if (n >= 10 && !strncmp(s, "f16layers=", 10)) {
        if (parse_layers(p, s + 10, n - 10))
            return fail(err, cap, bad, "bad layer list in '%.*s' (at most %d integers separated by ';')", fl, s,
                        KVQ_POLICY_MAX_F16);
        return KVQ_OK;
    }
    if (n >= 8 && !strncmp(s, "sliding=", 8)) {
        if (parse_int(s + 8, n - 8, 0, 1, &v)) return fail(err, cap, bad, "bad value in '%.*s' (0 or 1)", fl, s);
        p->compress_sliding = (int)v;
        return KVQ_OK;
    }
    if (n >= 6 && !strncmp(s, "calib=", 6)) {
        if (parse_int(s + 6, n - 6, 1, 1L << 20, &v)) return fail(err, cap, bad, "bad value in '%.*s' (1..2^20)", fl, s);
        p->calib_tokens = (int)v;
        return KVQ_OK;
    }
    if (n >= 5 && !strncmp(s, "sink=", 5)) {
        if (parse_int(s + 5, n - 5, 0, KVQ_SINK_MAX, &v))
            return fail(err, cap, bad, "bad value in '%.*s' (0..%d)", fl, s, KVQ_SINK_MAX);
        p->sink_tokens = (int)v;
        return KVQ_OK;
    }
    if (first) { /* shorthand SPEC or KSPEC/VSPEC */
        const char *slash = memchr(s, '/', n);
        if (!slash) {
            if (set_spec(p->k_spec, s, n) || set_spec(p->v_spec, s, n))
                return fail(err, cap, bad, "bad method '%.*s' (a method spec, no spaces or quotes)", fl, s);
        } else if (set_spec(p->k_spec, s, (size_t)(slash - s)) ||
                   set_spec(p->v_spec, slash + 1, n - (size_t)(slash - s) - 1)) {
            return fail(err, cap, bad, "bad K/V methods '%.*s' (KSPEC/VSPEC)", fl, s);
        }
        return KVQ_OK;
    }
    return fail(err, cap, bad, "unknown policy field '%.*s' (fields: k= v= w= f16layers= sliding= calib= sink=)", fl, s);
}

/* Checks a method spec by building a plan of it at the largest head dim
 * (every dim-independent rule of kvq_plan_create applies). */
static int check_spec(const char *spec, int value, char *err, size_t cap) {
    int calib = 0;
    int rc = kvq_spec_needs_calibration(spec, &calib);
    if (rc) return fail(err, cap, rc, "%s method '%s': %s", value ? "value" : "key", spec, kvq_strerror(rc));
    float *rows = calib ? calloc(KVQ_DIM_MAX, sizeof *rows) : NULL;
    if (calib && !rows) return fail(err, cap, KVQ_ERR_NOMEM, "%s", kvq_strerror(KVQ_ERR_NOMEM));
    kvq_plan *pl = NULL;
    rc = kvq_plan_create(&pl, spec, KVQ_DIM_MAX, 0, rows, calib ? 1 : 0);
    free(rows);
    if (rc == KVQ_ERR_INVALID_ARG && (strstr(spec, "+m=") || !strncmp(spec, "qjl:", 4)))
        return fail(err, cap, rc, "%s method '%s': a QJL sketch size (+m=M, qjl:M) is for qjl and tq-prod only, "
                    "M a multiple of 8 in 8..4096", value ? "value" : "key", spec);
    if (rc) return fail(err, cap, rc, "%s method '%s': %s", value ? "value" : "key", spec, kvq_strerror(rc));
    int dec = kvq_plan_can_decode(pl);
    kvq_plan_free(pl);
    if (value && !dec)
        return fail(err, cap, KVQ_ERR_NO_DECODE, "value method '%s' is key-only (values must be reconstructed)", spec);
    return KVQ_OK;
}

int kvq_policy_parse(kvq_policy *out, const char *s, char *err, size_t err_cap) {
    if (err && err_cap) err[0] = 0;
    if (!out || !s) return fail(err, err_cap, KVQ_ERR_NULL, "%s", "no policy (NULL)");
    if (!*s) return fail(err, err_cap, KVQ_ERR_INVALID_ARG, "%s", "empty policy");
    kvq_policy p;
    kvq_policy_init(&p);
    size_t i = 0, n = strlen(s);
    int first = 1;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != ',') j++;
        if (j == i) return fail(err, err_cap, KVQ_ERR_INVALID_ARG, "empty field in policy '%.200s'", s);
        int rc = parse_field(&p, s + i, j - i, first, err, err_cap);
        if (rc) return rc;
        first = 0;
        i = j + 1;
    }
    int rc = check_spec(p.k_spec, 0, err, err_cap);
    if (!rc) rc = check_spec(p.v_spec, 1, err, err_cap);
    if (rc) return rc;
    *out = p;
    return KVQ_OK;
}

/* Appends text to buf[0..cap) at *pos; sets *cut when it does not fit. */
static void put(char *buf, size_t cap, size_t *pos, int *cut, const char *s) {
    size_t n = strlen(s);
    if (*pos + n >= cap) { *cut = 1; n = *pos + 1 < cap ? cap - 1 - *pos : 0; }
    memcpy(buf + *pos, s, n);
    *pos += n;
    buf[*pos] = 0;
}

int kvq_policy_name(const kvq_policy *p, char *buf, size_t cap) {
    if (!p || !buf) return KVQ_ERR_NULL;
    if (!cap) return KVQ_ERR_RANGE;
    size_t pos = 0;
    int cut = 0;
    char num[32];
    buf[0] = 0;
    put(buf, cap, &pos, &cut, p->k_spec);
    if (strcmp(p->k_spec, p->v_spec)) {
        put(buf, cap, &pos, &cut, "/");
        put(buf, cap, &pos, &cut, p->v_spec);
    }
    if (p->f16_window) {
        snprintf(num, sizeof num, ",w=%d", p->f16_window);
        put(buf, cap, &pos, &cut, num);
    }
    int nl = p->n_f16_layers < 0 ? 0 : p->n_f16_layers > KVQ_POLICY_MAX_F16 ? KVQ_POLICY_MAX_F16 : p->n_f16_layers;
    if (nl) {
        put(buf, cap, &pos, &cut, ",f16layers=");
        for (int i = 0; i < nl; i++) {
            snprintf(num, sizeof num, "%s%d", i ? ";" : "", p->f16_layers[i]);
            put(buf, cap, &pos, &cut, num);
        }
    }
    if (p->compress_sliding) put(buf, cap, &pos, &cut, ",sliding=1");
    if (p->calib_tokens) {
        snprintf(num, sizeof num, ",calib=%d", p->calib_tokens);
        put(buf, cap, &pos, &cut, num);
    }
    if (p->sink_tokens) {
        snprintf(num, sizeof num, ",sink=%d", p->sink_tokens);
        put(buf, cap, &pos, &cut, num);
    }
    return cut ? KVQ_ERR_RANGE : KVQ_OK;
}

void kvq_policy_to_cache_config(const kvq_policy *p, kvq_cache_config *cfg) {
    if (!p || !cfg) return;
    cfg->k_spec = p->k_spec;
    cfg->v_spec = p->v_spec;
    cfg->f16_window = p->f16_window;
    cfg->f16_layers = p->n_f16_layers ? p->f16_layers : NULL;
    cfg->n_f16_layers = p->n_f16_layers;
    cfg->compress_sliding = p->compress_sliding;
    cfg->outlier_calib_tokens = p->calib_tokens;
    cfg->sink_tokens = p->sink_tokens;
}
