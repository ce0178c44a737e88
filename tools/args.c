/* The command-line parser of the kvq subcommands (args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int tool_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvq %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return TOOL_EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                   */
/* ------------------------------------------------------------------------ */
int tool_parse_long(const char *s, long min, long max, long *out, char *err, size_t cap) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    int bad = !*s || end == s || *end || s[0] == ' ' || s[0] == '\t';
    if (bad) {
        snprintf(err, cap, "'%s': not an integer (accepted: %ld..%ld)", s, min, max);
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        snprintf(err, cap, "%s: out of range (accepted: %ld..%ld)", s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int tool_parse_double(const char *s, double min, double max, double *out, char *err, size_t cap) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || end == s || *end || s[0] == ' ' || s[0] == '\t' || !isfinite(v)) {
        snprintf(err, cap, "'%s': not a number (accepted: %g..%g)", s, min, max);
        return -1;
    }
    if (v < min || v > max) {
        snprintf(err, cap, "%s: out of range (accepted: %g..%g)", s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int tool_parse_long_list(const char *s, long min, long max, long *out, int max_n, char *err, size_t cap) {
    int n = 0;
    const char *p = s;
    if (!*p) { snprintf(err, cap, "empty list (a comma-separated list of integers in %ld..%ld)", min, max); return -1; }
    while (*p) {
        size_t len = strcspn(p, ",");
        char one[32];
        if (len == 0 || len >= sizeof one) {
            snprintf(err, cap, "'%s': not a comma-separated list of integers (accepted: %ld..%ld each)", s, min, max);
            return -1;
        }
        if (n >= max_n) { snprintf(err, cap, "'%s': more than %d values", s, max_n); return -1; }
        memcpy(one, p, len);
        one[len] = 0;
        long mul = 1;
        if (len > 1 && (one[len - 1] == 'k' || one[len - 1] == 'K')) { one[len - 1] = 0; mul = 1024; }
        long v;
        char why[160];
        if (tool_parse_long(one, min / mul, max / mul, &v, why, sizeof why) || v * mul < min) {
            if (!strchr(s, ',') && mul == 1) snprintf(err, cap, "%s", why);
            else snprintf(err, cap, "'%.*s' in '%s': not an integer in %ld..%ld", (int)len, p, s, min, max);
            return -1;
        }
        out[n++] = v * mul;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p) { snprintf(err, cap, "'%s': trailing comma", s); return -1; }
        }
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */
/* ------------------------------------------------------------------------ */
/* 1 if name (len bytes) is one of the row's '|'-separated spellings. */
static int has_name(const tool_opt *o, const char *name, size_t len) {
    const char *s = o->names;
    while (*s) {
        size_t l = strcspn(s, "|");
        if (l == len && !strncmp(s, name, len)) return 1;
        s += l;
        if (*s == '|') s++;
    }
    return 0;
}

static const tool_opt *find(const tool_cmd *c, const char *name, size_t len) {
    for (const tool_opt *const *t = c->tables; t && *t; t++)
        for (const tool_opt *o = *t; o->names; o++)
            if (has_name(o, name, len)) return o;
    return NULL;
}

static int takes_value(const tool_opt *o) {
    return o->kind != TOOL_ARG_SET && o->kind != TOOL_ARG_CLEAR && o->kind != TOOL_ARG_FN0 && o->kind != TOOL_ARG_FAIL;
}

/* What a value of the row looks like, for "needs a value" messages. */
static void describe(const tool_opt *o, char *buf, size_t cap) {
    switch (o->kind) {
    case TOOL_ARG_INT:
    case TOOL_ARG_LONG: snprintf(buf, cap, " (an integer in %.0f..%.0f)", o->min, o->max); break;
    case TOOL_ARG_FLOAT:
    case TOOL_ARG_DOUBLE: snprintf(buf, cap, " (a number in %g..%g)", o->min, o->max); break;
    case TOOL_ARG_U64: snprintf(buf, cap, " (an integer in 0..18446744073709551615)"); break;
    case TOOL_ARG_CHOICE: snprintf(buf, cap, " (one of %s)", o->choices); break;
    default: buf[0] = 0;
    }
}

static int choice_ok(const char *choices, const char *v) {
    size_t len = strlen(v);
    const char *s = choices;
    while (*s) {
        size_t l = strcspn(s, "|");
        if (l == len && !strncmp(s, v, len)) return 1;
        s += l;
        if (*s == '|') s++;
    }
    return 0;
}

/* Stores v into the row's destination; -1 with the reason in err. */
static int apply(const tool_opt *o, const char *name, const char *v, char *err, size_t cap) {
    long l;
    double d;
    switch (o->kind) {
    case TOOL_ARG_SET: *(int *)o->dst = 1; return 0;
    case TOOL_ARG_CLEAR: *(int *)o->dst = 0; return 0;
    case TOOL_ARG_INT:
    case TOOL_ARG_LONG:
        if (tool_parse_long(v, (long)o->min, (long)o->max, &l, err, cap)) return -1;
        if (o->kind == TOOL_ARG_INT) *(int *)o->dst = (int)l;
        else *(long *)o->dst = l;
        return 0;
    case TOOL_ARG_U64: {
        char *end = NULL;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (!*v || *v == '-' || *v == ' ' || *end || errno == ERANGE) {
            snprintf(err, cap, "'%s': not an integer (accepted: 0..18446744073709551615)", v);
            return -1;
        }
        *(uint64_t *)o->dst = (uint64_t)u;
        return 0;
    }
    case TOOL_ARG_FLOAT:
    case TOOL_ARG_DOUBLE:
        if (tool_parse_double(v, o->min, o->max, &d, err, cap)) return -1;
        if (o->kind == TOOL_ARG_FLOAT) *(float *)o->dst = (float)d;
        else *(double *)o->dst = d;
        return 0;
    case TOOL_ARG_STR: *(const char **)o->dst = v; return 0;
    case TOOL_ARG_CHOICE:
        if (!choice_ok(o->choices, v)) {
            char list[256];
            snprintf(list, sizeof list, "%s", o->choices);
            for (char *c = list; *c; c++)
                if (*c == '|') *c = ',';
            snprintf(err, cap, "'%s': not one of %s", v, list);
            return -1;
        }
        *(const char **)o->dst = v;
        return 0;
    case TOOL_ARG_FN:
    case TOOL_ARG_FN0: return o->fn(o->user, name, v, err, cap);
    case TOOL_ARG_FAIL: snprintf(err, cap, "%s", o->help ? o->help : "not supported"); return -1;
    }
    return -1;
}

int tool_args_parse(const tool_cmd *c, int argc, char **argv) {
    if (c->n_pos) *c->n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            c->usage(stdout);
            return -1;
        }
        if (a[0] != '-' || !a[1]) { /* a positional argument ("-" is one: stdin) */
            if (!c->pos || !c->n_pos || *c->n_pos >= c->max_pos)
                return tool_usage_error(c->name, "unexpected argument '%s' (see 'kvq %s --help')", a, c->name);
            c->pos[(*c->n_pos)++] = a;
            continue;
        }
        size_t len = strlen(a);
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL, *val = NULL;
        const tool_opt *o = find(c, a, len);
        if (!o && eq) { /* --name=value */
            o = find(c, a, (size_t)(eq - a));
            if (o) { len = (size_t)(eq - a); val = eq + 1; }
        }
        if (!o) return tool_usage_error(c->name, "unknown option '%s' (see 'kvq %s --help')", a, c->name);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, a);
        if (takes_value(o) && !val) {
            if (i + 1 >= argc) {
                char what[96];
                describe(o, what, sizeof what);
                return tool_usage_error(c->name, "option %s needs a value%s", name, what);
            }
            val = argv[++i];
        } else if (!takes_value(o) && val) {
            return tool_usage_error(c->name, "option %s takes no value (got '%s')", name, val);
        }
        char err[768] = "";
        if (apply(o, name, val, err, sizeof err))
            return tool_usage_error(c->name, "%s%s %s", name, o->kind == TOOL_ARG_FAIL ? ":" : "", err);
    }
    return 0;
}
