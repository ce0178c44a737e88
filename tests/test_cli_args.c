/* The CLI's argument parser (tools/args.c) and policy options (tools/policy.c):
 * strict numbers, unknown options wherever they stand, --name=value, the
 * policy options applied in an order-independent way, llama.cpp's type
 * names, method lists from the registry. No model needed. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "policy.h"
#include "testutil.h"

static void usage(FILE *f) { fprintf(f, "usage: kvq test\n"); }

typedef struct {
    int n, flag;
    long l;
    float x;
    const char *s, *choice;
    uint64_t u;
} vals;

/* The words of a command line; the parsed values point into it (as into argv). */
typedef struct { char buf[512]; } words;

/* Parses the words of line (space-separated) with a small table; returns the parser's verdict. */
static int parse_line(const char *line, words *wd, vals *v, tool_policy_args *pa) {
    char *buf = wd->buf, *argv[32];
    int argc = 0;
    snprintf(buf, sizeof wd->buf, "test %s", line);
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " ")) argv[argc++] = t;
    memset(v, 0, sizeof *v);
    v->choice = "q8";
    tool_policy_args_init(pa);
    const tool_opt opts[] = {
        {.names = "-n|--n-predict", .kind = TOOL_ARG_INT, .dst = &v->n, .min = -1, .max = 100},
        {.names = "--flag", .kind = TOOL_ARG_SET, .dst = &v->flag},
        {.names = "--long", .kind = TOOL_ARG_LONG, .dst = &v->l, .min = 8, .max = 1 << 20},
        {.names = "--top-p", .kind = TOOL_ARG_FLOAT, .dst = &v->x, .min = 0, .max = 1},
        {.names = "-p", .kind = TOOL_ARG_STR, .dst = &v->s},
        {.names = "--acts", .kind = TOOL_ARG_CHOICE, .dst = &v->choice, .choices = "q8|f32"},
        {.names = "--seed", .kind = TOOL_ARG_U64, .dst = &v->u},
        TOOL_OPT_NGL,
        {0}};
    const tool_opt *tables[] = {opts, tool_policy_args_table(pa), NULL};
    const tool_cmd cmd = {.name = "test", .usage = usage, .tables = tables};
    return tool_args_parse(&cmd, argc, argv);
}

static void expect_usage(const char *line) {
    vals v;
    tool_policy_args pa;
    words wd;
    int r = parse_line(line, &wd, &v, &pa);
    CHECK(r == TOOL_EXIT_USAGE, "'%s': verdict %d, want %d", line, r, TOOL_EXIT_USAGE);
}

static void test_numbers(void) {
    char err[256];
    long l;
    double d;
    CHECK(tool_parse_long("42", 0, 100, &l, err, sizeof err) == 0 && l == 42, "42");
    CHECK(tool_parse_long("-1", -1, 100, &l, err, sizeof err) == 0 && l == -1, "-1");
    CHECK(tool_parse_long("abc", 0, 100, &l, err, sizeof err) && strstr(err, "not an integer") &&
              strstr(err, "0..100"), "abc: %s", err);
    CHECK(tool_parse_long("12x", 0, 100, &l, err, sizeof err), "trailing text accepted");
    CHECK(tool_parse_long("", 0, 100, &l, err, sizeof err), "empty accepted");
    CHECK(tool_parse_long(" 5", 0, 100, &l, err, sizeof err), "leading space accepted");
    CHECK(tool_parse_long("101", 0, 100, &l, err, sizeof err) && strstr(err, "out of range"), "101: %s", err);
    CHECK(tool_parse_long("99999999999999999999", 0, 100, &l, err, sizeof err) && strstr(err, "out of range"),
          "overflow: %s", err);
    CHECK(tool_parse_double("0.5", 0, 1, &d, err, sizeof err) == 0 && d == 0.5, "0.5");
    CHECK(tool_parse_double("nan", 0, 1, &d, err, sizeof err), "nan accepted");
    CHECK(tool_parse_double("inf", 0, 1e9, &d, err, sizeof err), "inf accepted");
    CHECK(tool_parse_double("5", 0, 1, &d, err, sizeof err) && strstr(err, "0..1"), "5 in 0..1: %s", err);
    long list[4];
    CHECK(tool_parse_long_list("512,4K,16k", 2, 1 << 24, list, 4, err, sizeof err) == 3 && list[1] == 4096 &&
              list[2] == 16384, "list with K");
    CHECK(tool_parse_long_list("512,", 2, 1 << 24, list, 4, err, sizeof err) < 0, "trailing comma");
    CHECK(tool_parse_long_list("1,2,3,4,5", 0, 9, list, 4, err, sizeof err) < 0, "too many");
    CHECK(tool_parse_long_list("1", 2, 9, list, 4, err, sizeof err) < 0 && strstr(err, "2..9"), "range: %s", err);
}

static void test_parser(void) {
    vals v;
    tool_policy_args pa;
    words wd;
    CHECK(parse_line("-n 5 --flag -p hello --acts f32 --seed 7 --top-p 0.9", &wd, &v, &pa) == 0 && v.n == 5 && v.flag &&
              !strcmp(v.s, "hello") && !strcmp(v.choice, "f32") && v.u == 7 && v.x > 0.89f,
          "a valid line");
    CHECK(parse_line("--n-predict=7 --long=64", &wd, &v, &pa) == 0 && v.n == 7 && v.l == 64, "--name=value");
    CHECK(parse_line("-p -5", &wd, &v, &pa) == 0 && !strcmp(v.s, "-5"), "a value that starts with '-'");
    expect_usage("-n 3 --foo");   /* unknown, last */
    expect_usage("--foo -n 3");   /* unknown, first */
    expect_usage("--flag --foo"); /* unknown after a flag */
    expect_usage("-n");           /* missing value */
    expect_usage("-n abc");
    expect_usage("-n -5");
    expect_usage("--top-p 5");
    expect_usage("--acts q4");
    expect_usage("--seed -1");
    expect_usage("--flag=1");     /* a flag takes no value */
    expect_usage("stray");        /* no positional arguments here */
    expect_usage("-ngl 99");      /* refused with a reason */
    expect_usage("--policy foo");
}

static void build(const char *line, tool_policy *p, int want_ok) {
    vals v;
    tool_policy_args pa;
    words wd;
    int r = parse_line(line, &wd, &v, &pa);
    char err[1024] = "";
    if (!r) r = tool_policy_args_build(&pa, p, err, sizeof err);
    CHECK(want_ok ? r == 0 : r != 0, "'%s': verdict %d (%s)", line, r, err);
}

static void test_policy_order(void) {
    tool_policy a, b;
    char na[TOOL_POLICY_NAME], nb[TOOL_POLICY_NAME];
    /* the bug of issue 15: --kv-compress-sliding before --policy was dropped */
    build("--kv-compress-sliding --policy tq-mse:3", &a, 1);
    build("--policy tq-mse:3 --kv-compress-sliding", &b, 1);
    tool_policy_name(&a, na, sizeof na);
    tool_policy_name(&b, nb, sizeof nb);
    CHECK(a.compress_sliding == 1 && !strcmp(na, nb), "order: '%s' vs '%s'", na, nb);
    build("--cache-v q8 --kv-window 64 --policy tq-mse:4 --cache-k q4", &a, 1);
    build("--policy tq-mse:4 --cache-k q4 --cache-v q8 --kv-window 64", &b, 1);
    tool_policy_name(&a, na, sizeof na);
    tool_policy_name(&b, nb, sizeof nb);
    CHECK(!strcmp(na, nb) && !strcmp(a.k_spec, "q4") && !strcmp(a.v_spec, "q8") && a.f16_window == 64,
          "fields over --policy in any order: '%s' vs '%s'", na, nb);
    build("--cache-k tq-mse:4+chscale --cache-v tq-mse:4", &a, 1);
    CHECK(!strcmp(a.k_spec, "tq-mse:4+chscale") && !strcmp(a.v_spec, "tq-mse:4"), "two fields kept: %s/%s",
          a.k_spec, a.v_spec);
    build("--kv-f16-layers 0,-1 --compress-sliding", &a, 1);
    CHECK(a.n_f16_layers == 2 && a.f16_layers[1] == -1 && a.compress_sliding, "f16 layers and --compress-sliding");
    build("--kv-sink 4 --policy tq-mse:4", &a, 1);
    CHECK(a.sink_tokens == 4, "--kv-sink before --policy kept: %d", a.sink_tokens);
    build("-ctk q8_0 -ctv q4_0", &a, 1);
    CHECK(!strcmp(a.k_spec, "q8") && !strcmp(a.v_spec, "q4"), "llama.cpp names: %s/%s", a.k_spec, a.v_spec);
    build("--cache-type-k f16 --cache-type-v bf16", &a, 1);
    CHECK(!strcmp(a.v_spec, "bf16"), "bf16");
    build("--cache-k q8_0", &a, 0); /* kvq's own option takes kvq's names only */
    build("--cache-k tq-mse:9", &a, 0);
    build("--kv-window -3", &a, 0);
    build("--cache-v qjl", &a, 0);  /* key-only method for values */
    build("", &a, 1);
    CHECK(!strcmp(a.k_spec, "f16") && !strcmp(a.v_spec, "f16") && !a.compress_sliding, "no option: f16");
}

static void test_messages(void) {
    char list[512], err[1024];
    tool_methods_list(list, sizeof list);
    /* every registry method is listed with its widths */
    for (int i = 0; i < kvq_method_count(); i++) {
        kvq_method_info mi;
        CHECK(kvq_method_get(i, &mi) == KVQ_OK && strstr(list, mi.name), "method %d (%s) in '%s'", i, mi.name, list);
    }
    CHECK(kvq_method_get(kvq_method_count(), NULL) == KVQ_ERR_NULL, "NULL out");
    kvq_method_info mi;
    CHECK(kvq_method_get(-1, &mi) == KVQ_ERR_RANGE && kvq_method_get(kvq_method_count(), &mi) == KVQ_ERR_RANGE,
          "index out of range");
    CHECK(strstr(list, "tq-mse:1..8") != NULL, "tq-mse widths in '%s'", list);
    tool_policy p;
    CHECK(tool_policy_parse("tq-mse:9", &p, err, sizeof err) && strstr(err, "1..8"), "tq-mse:9: %s", err);
    CHECK(tool_policy_parse("foo", &p, err, sizeof err) && strstr(err, "methods:") && strstr(err, "tq-mse"),
          "foo: %s", err);
    CHECK(tool_policy_parse("q8/bar", &p, err, sizeof err) && strstr(err, "bar") && strstr(err, "methods:"),
          "q8/bar: %s", err);
    CHECK(tool_policy_parse("q8_0", &p, err, sizeof err) && strstr(err, "kvq's q8"), "q8_0: %s", err);
    char w[512];
    tool_policy_init(&p);
    CHECK(tool_policy_key_warning(&p, w, sizeof w) < 0, "no warning for f16");
    CHECK(!tool_policy_parse("qjl/q8", &p, err, sizeof err) && tool_policy_key_warning(&p, w, sizeof w) == 0 &&
              strstr(w, "qjl"), "qjl keys warned: %s", w);
    CHECK(!tool_policy_parse("tq-mse:4+chscale/tq-mse:4", &p, err, sizeof err) &&
              tool_policy_key_warning(&p, w, sizeof w) < 0, "tq-mse keys not warned");
}

int main(void) {
    test_numbers();
    test_parser();
    test_policy_order();
    test_messages();
    return tu_finish("test_cli_args");
}
