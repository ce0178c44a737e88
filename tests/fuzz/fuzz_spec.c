/*
 * Method specs and cache policies on arbitrary strings.
 *
 * Input: byte 0 picks the head dim and the calibration, the rest is the
 * string (up to its first NUL). Checks:
 *  - kvq_spec_needs_calibration and kvq_plan_create return documented codes
 *    and agree (a spec needing calibration fails without rows with
 *    KVQ_ERR_NEEDS_CALIBRATION); a plan's canonical spec builds the same plan
 *    (same canonical spec, sizes, decode ability), and one row encodes and
 *    decodes to finite values;
 *  - kvq_policy_parse leaves *p untouched on error with a NUL-terminated
 *    reason; on success parse(name(parse(s))) == parse(s), the name is a
 *    fixed point, and the policy builds a cache (or is refused with a
 *    documented code) that takes one token and attends to it.
 */
#include "fuzz_common.h"

#define MAX_STR 200

static const int DIMS[8] = {32, 40, 64, 96, 128, 256, 48, 512};

static void fill(float *x, size_t n, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 22);
    }
}

static void check_plan(const char *spec, int dim, int calib_rows) {
    int needs = -1;
    int rc_needs = kvq_spec_needs_calibration(spec, &needs);
    FUZZ_CHECK(fuzz_known_status(rc_needs), "needs_calibration: %d", rc_needs);
    float calib[8 * KVQ_DIM_MAX];
    fill(calib, (size_t)calib_rows * (size_t)dim, (uint32_t)dim);
    kvq_plan *p = NULL;
    int rc = kvq_plan_create(&p, spec, dim, 42, calib_rows ? calib : NULL, (size_t)calib_rows);
    FUZZ_CHECK(fuzz_known_status(rc), "plan_create: %d", rc);
    if (rc_needs) {
        FUZZ_CHECK(rc != KVQ_OK, "plan of a spec needs_calibration refused (%d)", rc_needs);
        return;
    }
    if (needs && !calib_rows) FUZZ_CHECK(rc != KVQ_OK, "a plan needing calibration built without rows");
    if (rc) {
        FUZZ_CHECK(p == NULL, "plan set on error");
        return;
    }
    char canon[128];
    snprintf(canon, sizeof canon, "%s", kvq_plan_spec(p));
    FUZZ_CHECK(strlen(canon) < 80, "canonical spec too long: %s", canon);
    kvq_plan *q = NULL;
    rc = kvq_plan_create(&q, canon, dim, 42, calib_rows ? calib : NULL, (size_t)calib_rows);
    FUZZ_CHECK(rc == KVQ_OK, "canonical spec '%s' of '%s' refused: %d", canon, spec, rc);
    FUZZ_CHECK(!strcmp(kvq_plan_spec(q), canon), "canonical spec not a fixed point: '%s' -> '%s'", canon,
               kvq_plan_spec(q));
    FUZZ_CHECK(kvq_plan_code_bytes(q) == kvq_plan_code_bytes(p) && kvq_plan_can_decode(q) == kvq_plan_can_decode(p) &&
                   kvq_plan_query_floats(q) == kvq_plan_query_floats(p) && kvq_plan_dim(p) == dim,
               "plan of '%s' differs from '%s'", canon, spec);
    int needs2 = -1;
    FUZZ_CHECK(kvq_spec_needs_calibration(canon, &needs2) == KVQ_OK && needs2 == needs, "calibration of canon");
    double bpv = kvq_plan_bits_per_value(p);
    FUZZ_CHECK(bpv > 0 && bpv <= 32 && fabs(bpv - (double)kvq_plan_code_bytes(p) * 8.0 / dim) < 1e-9, "bits %g", bpv);
    /* one row: encode, decode, score */
    float x[KVQ_DIM_MAX], y[KVQ_DIM_MAX];
    fill(x, (size_t)dim, 7);
    uint8_t *code = malloc(kvq_plan_code_bytes(p));
    float *qp = malloc(sizeof(float) * kvq_plan_query_floats(p));
    FUZZ_CHECK(code && qp, "out of memory");
    rc = kvq_encode(p, x, KVQ_DTYPE_F32, 1, code);
    FUZZ_CHECK(rc == KVQ_OK, "encode of a plain row: %d (%s)", rc, canon);
    if (kvq_plan_can_decode(p)) {
        FUZZ_CHECK(kvq_decode(p, code, 1, y) == KVQ_OK, "decode");
        for (int i = 0; i < dim; i++) FUZZ_CHECK(isfinite(y[i]), "decoded value %d not finite", i);
    } else {
        FUZZ_CHECK(kvq_decode(p, code, 1, y) == KVQ_ERR_NO_DECODE, "decode of a key-only method");
    }
    float s = 0;
    FUZZ_CHECK(kvq_query_prepare(p, x, qp) == KVQ_OK && kvq_score(p, qp, 1, code, 1, &s) == KVQ_OK && isfinite(s),
               "score of a plain row");
    free(code);
    free(qp);
    kvq_plan_free(q);
    kvq_plan_free(p);
}

static int same_policy(const kvq_policy *a, const kvq_policy *b) {
    if (strcmp(a->k_spec, b->k_spec) || strcmp(a->v_spec, b->v_spec) || a->f16_window != b->f16_window ||
        a->n_f16_layers != b->n_f16_layers || a->compress_sliding != b->compress_sliding ||
        a->calib_tokens != b->calib_tokens)
        return 0;
    for (int i = 0; i < a->n_f16_layers; i++)
        if (a->f16_layers[i] != b->f16_layers[i]) return 0;
    return 1;
}

static void check_cache(const kvq_policy *p, int n_layers) {
    kvq_cache_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_layers = n_layers;
    cfg.n_kv_heads = 1;
    cfg.head_dim = 64;
    const int sliding[4] = {0, 3, 0, 5};
    cfg.sliding_window = sliding;
    kvq_policy_to_cache_config(p, &cfg);
    if (cfg.f16_window > 64) cfg.f16_window = 64; /* the tail ring is allocated at once */
    if (cfg.outlier_calib_tokens > 4) cfg.outlier_calib_tokens = 4;
    kvq_cache *c = NULL;
    int rc = kvq_cache_create(&c, &cfg);
    FUZZ_CHECK(fuzz_known_status(rc), "cache_create: %d", rc);
    if (rc) return;
    float k[4 * 64], v[4 * 64], q[4 * 64], o[4 * 64];
    fill(k, 4 * 64, 1);
    fill(v, 4 * 64, 2);
    fill(q, 4 * 64, 3);
    for (int l = 0; l < n_layers; l++) {
        FUZZ_CHECK(kvq_cache_append(c, l, k, v, 4) == KVQ_OK, "append");
        FUZZ_CHECK(kvq_cache_attend(c, l, q, 4, 1, 0, 0.125f, o, NULL) == KVQ_OK, "attend");
        for (int i = 0; i < 4 * 64; i++) FUZZ_CHECK(isfinite(o[i]), "attention output not finite");
    }
    size_t at = 0, peak = 0;
    FUZZ_CHECK(kvq_cache_memory_plan(c, 4, 0, &at, &peak) == KVQ_OK && at == kvq_cache_memory_bytes(c),
               "memory plan %zu vs %zu", at, kvq_cache_memory_bytes(c));
    kvq_cache_free(c);
}

static void check_policy(const char *s, int n_layers) {
    kvq_policy p, orig;
    memset(&p, 0x5a, sizeof p);
    orig = p;
    char err[96];
    int rc = kvq_policy_parse(&p, s, err, sizeof err);
    FUZZ_CHECK(fuzz_known_status(rc), "policy_parse: %d", rc);
    FUZZ_CHECK(memchr(err, 0, sizeof err) != NULL, "error message not terminated");
    if (rc) {
        FUZZ_CHECK(!memcmp(&p, &orig, sizeof p), "policy written on error");
        FUZZ_CHECK(err[0] != 0, "no reason for error %d on '%s'", rc, s);
        return;
    }
    char name[KVQ_POLICY_NAME_MAX], name2[KVQ_POLICY_NAME_MAX];
    rc = kvq_policy_name(&p, name, sizeof name);
    FUZZ_CHECK(rc == KVQ_OK, "policy_name: %d", rc);
    kvq_policy p2;
    rc = kvq_policy_parse(&p2, name, err, sizeof err);
    FUZZ_CHECK(rc == KVQ_OK, "name '%s' of '%s' does not parse: %d (%s)", name, s, rc, err);
    FUZZ_CHECK(same_policy(&p, &p2), "parse(name(parse('%s'))) != parse: name '%s'", s, name);
    FUZZ_CHECK(kvq_policy_name(&p2, name2, sizeof name2) == KVQ_OK && !strcmp(name, name2), "name not a fixed point");
    char tiny[4];
    size_t nl = strlen(name);
    rc = kvq_policy_name(&p, tiny, sizeof tiny);
    FUZZ_CHECK(rc == (nl < sizeof tiny ? KVQ_OK : KVQ_ERR_RANGE) && strlen(tiny) < sizeof tiny, "short name buffer");
    check_cache(&p, n_layers);
}

/*
 * Inputs whose plans take seconds to build are skipped, or most executions
 * would be spent there:
 *  - polar:7 and polar:8 (Lloyd-Max over 128 / 256 angle levels, up to
 *    200000 iterations; 4 s for polar:8 in this build);
 *  - for kvq_policy_parse only, +outliers=K with K != 256: it checks specs
 *    by building the plan at dim 512, whose inner plan at 512 - K is not a
 *    power of two (a Haar rotation: QR of a 504 x 504 matrix, 44 s in this
 *    instrumented build). kvq_plan_create covers +outliers at the small dims.
 */
static int slow_spec(const char *s) {
    for (const char *p = strstr(s, "polar:"); p; p = strstr(p + 1, "polar:")) {
        const char *d = p + 6;
        while (*d == '0') d++;
        if ((d[0] == '7' || d[0] == '8') && !(d[1] >= '0' && d[1] <= '9')) return 1;
    }
    return 0;
}

static int slow_policy(const char *s) {
    for (const char *p = strstr(s, "outliers="); p; p = strstr(p + 1, "outliers="))
        if (strncmp(p + 9, "256", 3) || (p[12] >= '0' && p[12] <= '9')) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > MAX_STR) return 0;
    char s[MAX_STR + 1];
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    if (slow_spec(s)) return 0;
    const int dim = DIMS[data[0] & 7], calib_rows = (data[0] >> 3) & 3, n_layers = 1 + ((data[0] >> 5) & 3);
    check_plan(s, dim, calib_rows);
    if (!slow_policy(s)) check_policy(s, n_layers);
    return 0;
}
