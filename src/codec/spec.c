/*
 * Method specs: parsing into a method row and options, and the canonical
 * string of a plan (docs/METHODS.md lists the methods and options).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "codec_internal.h"

/* spec := name [":" int] { "+" opt ["=" int] } */
static int parse_int(const char *s, size_t len, long *out) {
    if (len == 0 || len > 9) return 0;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

int spec_parse(const char *spec, const kvq_method **m, kvq_plan_opts *o) {
    memset(o, 0, sizeof *o);
    o->bits = -1;
    size_t L = strlen(spec);
    if (L == 0 || L >= 80) return KVQ_ERR_UNKNOWN_METHOD;
    size_t nl = strcspn(spec, ":+");
    char name[32];
    if (nl == 0 || nl >= sizeof name) return KVQ_ERR_UNKNOWN_METHOD;
    memcpy(name, spec, nl);
    name[nl] = 0;
    *m = kvq_method_find(name);
    if (!*m) return KVQ_ERR_UNKNOWN_METHOD;
    const char *s = spec + nl;
    if (*s == ':') {
        s++;
        size_t al = strcspn(s, "+");
        long v;
        if (!parse_int(s, al, &v)) return KVQ_ERR_UNKNOWN_METHOD;
        if ((*m)->colon_rows) o->m = v > 0 ? (int)v : -1; /* qjl:M is the sketch size (qjl:0 refused) */
        else if ((*m)->max_bits == 0) return KVQ_ERR_UNKNOWN_METHOD;
        else o->bits = (int)v;
        s += al;
    }
    while (*s == '+') {
        s++;
        size_t ol = strcspn(s, "+");
        const char *eq = memchr(s, '=', ol);
        size_t kl = eq ? (size_t)(eq - s) : ol;
        long v = 0;
        int hasv = eq && parse_int(eq + 1, ol - kl - 1, &v);
        if (eq && !hasv) {
            if (kl == 5 && !strncmp(s, "scale", 5) && ol - kl - 1 == 4 && !strncmp(eq + 1, "norm", 4)) o->scale_norm = 1;
            else if (kl == 2 && !strncmp(s, "cb", 2) && ol - kl - 1 == 5 && !strncmp(eq + 1, "gauss", 5)) o->cb_gauss = 1;
            else return KVQ_ERR_UNKNOWN_METHOD;
        } else if (kl == 1 && s[0] == 'm' && hasv) o->m = v > 0 ? (int)v : -1; /* +m=0: refused, not the default */
        else if (kl == 8 && !strncmp(s, "outliers", 8) && hasv) o->outliers = (int)v;
        else if (!eq && kl == 5 && !strncmp(s, "norot", 5)) o->norot = 1;
        else if (!eq && kl == 7 && !strncmp(s, "scale32", 7)) o->scale32 = 1;
        else if (!eq && kl == 6 && !strncmp(s, "center", 6)) o->center = 1;
        else if (!eq && kl == 7 && !strncmp(s, "chscale", 7)) o->center = o->chscale = 1;
        else return KVQ_ERR_UNKNOWN_METHOD;
        s += ol;
    }
    if (*s) return KVQ_ERR_UNKNOWN_METHOD;
    return KVQ_OK;
}

void spec_canonical(kvq_plan *p) {
    char *s = p->spec;
    size_t cap = sizeof p->spec;
    int n = snprintf(s, cap, "%s", p->m->name);
    if (p->m->max_bits > 0) n += snprintf(s + n, cap - (size_t)n, ":%d", p->bits);
    if (p->qjl_m && p->qjl_m != p->d) n += snprintf(s + n, cap - (size_t)n, "+m=%d", p->qjl_m);
    if (p->o.outliers) n += snprintf(s + n, cap - (size_t)n, "+outliers=%d", p->o.outliers);
    if (p->o.norot) n += snprintf(s + n, cap - (size_t)n, "+norot");
    if (p->o.scale_norm) n += snprintf(s + n, cap - (size_t)n, "+scale=norm");
    if (p->o.scale32) n += snprintf(s + n, cap - (size_t)n, "+scale32");
    if (p->o.cb_gauss) n += snprintf(s + n, cap - (size_t)n, "+cb=gauss");
    if (p->o.center) n += snprintf(s + n, cap - (size_t)n, "+center");
    if (p->o.chscale) snprintf(s + n, cap - (size_t)n, "+chscale");
}
