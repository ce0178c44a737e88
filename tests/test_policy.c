/*
 * Cache policy strings (kvq_policy_parse / kvq_policy_name /
 * kvq_policy_to_cache_config): the documented examples, canonical names and
 * their round trip, every malformed field and bad method with its status,
 * untouched output on error, and caches built from policies (negative f16
 * layer indices count from the end).
 */
#include <string.h>

#include "kvq.h"
#include "testutil.h"

static int same(const kvq_policy *a, const kvq_policy *b) {
    if (strcmp(a->k_spec, b->k_spec) || strcmp(a->v_spec, b->v_spec) || a->f16_window != b->f16_window ||
        a->n_f16_layers != b->n_f16_layers || a->compress_sliding != b->compress_sliding ||
        a->calib_tokens != b->calib_tokens)
        return 0;
    for (int i = 0; i < a->n_f16_layers; i++)
        if (a->f16_layers[i] != b->f16_layers[i]) return 0;
    return 1;
}

static void test_valid(void) {
    static const struct { const char *in, *name; } cases[] = {
        {"f16", "f16"},
        {"q8/q8", "q8"},
        {"q8", "q8"},
        {"k=q8,v=tq-mse:4,w=128", "q8/tq-mse:4,w=128"},
        {"tq-mse:4+outliers=8/tq-mse:4", "tq-mse:4+outliers=8/tq-mse:4"},
        {"tq-mse:3,sliding=1", "tq-mse:3,sliding=1"},
        {"q4,f16layers=0;-1", "q4,f16layers=0;-1"},
        {"tq-mse:4+chscale/tq-mse:4,calib=64,w=16", "tq-mse:4+chscale/tq-mse:4,w=16,calib=64"},
        {"k=tq-prod:3,v=q8", "tq-prod:3/q8"},
        {"qjl/f16", "qjl/f16"},
        {"w=0", "f16"},
        {"q8,w=4,w=8", "q8,w=8"}, /* later fields win */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvq_policy p, q;
        char err[256] = "x", name[KVQ_POLICY_NAME_MAX];
        int rc = kvq_policy_parse(&p, cases[i].in, err, sizeof err);
        CHECK(rc == KVQ_OK && err[0] == 0, "parse '%s': %d (%s)", cases[i].in, rc, err);
        if (rc) continue;
        CHECK_OK(kvq_policy_name(&p, name, sizeof name));
        CHECK(!strcmp(name, cases[i].name), "name of '%s' is '%s', expected '%s'", cases[i].in, name, cases[i].name);
        CHECK_OK(kvq_policy_parse(&q, name, err, sizeof err));
        CHECK(same(&p, &q), "parse(name(parse('%s'))) differs", cases[i].in);
    }
    kvq_policy p;
    CHECK_OK(kvq_policy_parse(&p, "q8/tq-mse:4,w=128,f16layers=0;-1;5,sliding=1,calib=32", NULL, 0));
    CHECK(!strcmp(p.k_spec, "q8") && !strcmp(p.v_spec, "tq-mse:4") && p.f16_window == 128 && p.n_f16_layers == 3 &&
              p.f16_layers[0] == 0 && p.f16_layers[1] == -1 && p.f16_layers[2] == 5 && p.compress_sliding == 1 &&
              p.calib_tokens == 32,
          "fields of a full policy");
}

static void test_invalid(void) {
    static const struct { const char *in; int rc; } cases[] = {
        {"", KVQ_ERR_INVALID_ARG},
        {",", KVQ_ERR_INVALID_ARG},
        {"q8,", KVQ_ERR_INVALID_ARG},
        {"q8,,w=1", KVQ_ERR_INVALID_ARG},
        {"q8,w=", KVQ_ERR_INVALID_ARG},
        {"q8,w=abc", KVQ_ERR_INVALID_ARG},
        {"q8,w=-1", KVQ_ERR_INVALID_ARG},
        {"q8,w=+4", KVQ_ERR_INVALID_ARG},
        {"q8,w=99999999999999999999", KVQ_ERR_INVALID_ARG},
        {"q8,f16layers=", KVQ_ERR_INVALID_ARG},
        {"q8,f16layers=1;", KVQ_ERR_INVALID_ARG},
        {"q8,f16layers=1;x", KVQ_ERR_INVALID_ARG},
        {"q8,sliding=2", KVQ_ERR_INVALID_ARG},
        {"q8,calib=0", KVQ_ERR_INVALID_ARG},
        {"q8,x=1", KVQ_ERR_INVALID_ARG},
        {"q8,q4", KVQ_ERR_INVALID_ARG},      /* a shorthand only first */
        {"q8/", KVQ_ERR_INVALID_ARG},
        {"/q8", KVQ_ERR_INVALID_ARG},
        {"q8 q4", KVQ_ERR_INVALID_ARG},
        {"k=", KVQ_ERR_INVALID_ARG},
        {"foo", KVQ_ERR_UNKNOWN_METHOD},
        {"q8_0", KVQ_ERR_UNKNOWN_METHOD},
        {"tq-mse:9", KVQ_ERR_BITS_RANGE},
        {"tq-mse:0", KVQ_ERR_BITS_RANGE},
        {"q8/qjl", KVQ_ERR_NO_DECODE},
        {"tq-prod:3", KVQ_ERR_NO_DECODE},   /* values too */
        {"tq-mse:4+outliers=8+center", KVQ_ERR_INVALID_ARG},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvq_policy p;
        memset(&p, 0x5a, sizeof p);
        kvq_policy before = p;
        char err[256] = "";
        int rc = kvq_policy_parse(&p, cases[i].in, err, sizeof err);
        CHECK(rc == cases[i].rc, "parse '%s': %d (%s), expected %d", cases[i].in, rc, err, cases[i].rc);
        CHECK(err[0] != 0, "parse '%s': no reason given", cases[i].in);
        CHECK(!memcmp(&p, &before, sizeof p), "parse '%s' wrote the policy on error", cases[i].in);
    }
    char long_spec[400];
    memset(long_spec, 'a', sizeof long_spec - 1);
    long_spec[sizeof long_spec - 1] = 0;
    kvq_policy p;
    char err[64];
    CHECK(kvq_policy_parse(&p, long_spec, err, sizeof err) == KVQ_ERR_INVALID_ARG, "a 399-byte method");
    CHECK(strlen(err) < sizeof err, "reason truncated to the buffer");
    CHECK(kvq_policy_parse(NULL, "q8", err, sizeof err) == KVQ_ERR_NULL, "NULL policy");
    CHECK(kvq_policy_parse(&p, NULL, err, sizeof err) == KVQ_ERR_NULL, "NULL string");
    char many[600] = "q8,f16layers=0";
    for (int i = 1; i <= KVQ_POLICY_MAX_F16; i++) snprintf(many + strlen(many), sizeof many - strlen(many), ";%d", i);
    CHECK(kvq_policy_parse(&p, many, err, sizeof err) == KVQ_ERR_INVALID_ARG, "more than %d f16 layers",
          KVQ_POLICY_MAX_F16);
}

static void test_name_truncation(void) {
    kvq_policy p;
    CHECK_OK(kvq_policy_parse(&p, "q8/tq-mse:4,w=128", NULL, 0));
    char buf[8];
    CHECK(kvq_policy_name(&p, buf, sizeof buf) == KVQ_ERR_RANGE && strlen(buf) == 7 && !strncmp(buf, "q8/tq-m", 7),
          "truncated name '%s'", buf);
    CHECK(kvq_policy_name(&p, buf, 0) == KVQ_ERR_RANGE, "zero capacity");
    CHECK(kvq_policy_name(NULL, buf, sizeof buf) == KVQ_ERR_NULL, "NULL policy");
}

static void test_cache_from_policy(void) {
    kvq_policy p;
    CHECK_OK(kvq_policy_parse(&p, "q8/tq-mse:4,f16layers=-1;0", NULL, 0));
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = 4;
    cfg.n_kv_heads = 2;
    cfg.head_dim = 64;
    kvq_policy_to_cache_config(&p, &cfg);
    CHECK(cfg.f16_layers == p.f16_layers && cfg.n_f16_layers == 2 && !strcmp(cfg.k_spec, "q8"), "config fields");
    kvq_cache *c = NULL;
    CHECK_OK(kvq_cache_create(&c, &cfg));
    /* layers 0 and 3 are f16: they cost 2 * 2 * 64 * 2 bytes per token, layers 1-2 q8 / tq-mse:4 less */
    kvq_policy f16;
    CHECK_OK(kvq_policy_parse(&f16, "f16", NULL, 0));
    kvq_cache_config cf = cfg;
    kvq_policy_to_cache_config(&f16, &cf);
    kvq_cache *cfull = NULL;
    CHECK_OK(kvq_cache_create(&cfull, &cf));
    size_t bt = c ? kvq_cache_bytes_per_token(c) : 0, bf = cfull ? kvq_cache_bytes_per_token(cfull) : 0;
    CHECK(bf == 4 * 2 * 2 * 64 * 2 && bt > bf / 2 && bt < bf, "bytes per token %zu (f16 %zu)", bt, bf);
    kvq_cache_free(c);
    kvq_cache_free(cfull);
    /* -5 is out of range for 4 layers, -4 is layer 0 */
    CHECK_OK(kvq_policy_parse(&p, "q8,f16layers=-5", NULL, 0));
    kvq_policy_to_cache_config(&p, &cfg);
    c = NULL;
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_INVALID_ARG && !c, "f16 layer -5 of 4");
    CHECK_OK(kvq_policy_parse(&p, "q8,f16layers=-4;4", NULL, 0));
    kvq_policy_to_cache_config(&p, &cfg);
    CHECK(kvq_cache_create(&c, &cfg) == KVQ_ERR_INVALID_ARG && !c, "f16 layer 4 of 4");
}

int main(void) {
    test_valid();
    test_invalid();
    test_name_truncation();
    test_cache_from_policy();
    return tu_finish("test_policy");
}
