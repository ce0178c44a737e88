/*
 * Golden digests of the codec's output: for every method spec (each base
 * method with and without the +outliers=16, +center, +chscale, +norot,
 * +scale=norm and +scale32 options), head dims 64/128/256 and every ISA the
 * CPU runs (scalar, avx2, avx512 without and with the VNNI integer kernels),
 * a fixed seed and fixed random data, the FNV-1a 64 digest of
 *   enc   the codes of f32 rows, then those of the same rows as f16,
 *   dec   the decoded rows,
 *   qp    the prepared queries,
 *   score the scores of the queries against the codes,
 *   acc   the accumulated rows (rotated domain), then their unrotation,
 * pinned in tests/data/codec_golden.txt (one line per spec, dim and ISA:
 * "spec dim isa rc enc dec qp score acc", rc the plan's creation status, 0
 * digests where a step does not apply). Any change of a byte of the codec's
 * output fails here, as a golden file pins a compressed format.
 *
 * Buffers are filled with a fixed pattern first, so bytes a method leaves
 * unwritten are pinned too. Rows of an ISA the CPU lacks are skipped; an
 * ISA the CPU has must have all its rows pinned.
 * KVQ_GOLDEN_WRITE=path writes the computed lines to path (to regenerate
 * after an intended format change, or to add the lines of another CPU:
 * merge them, sorted, into the file).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kvq.h"
#include "testutil.h"

static const char *BASES[] = {"f32",       "f16",       "bf16",      "q8",        "q4",        "tq-mse:1",
                              "tq-mse:2",  "tq-mse:3",  "tq-mse:4",  "tq-mse:5",  "tq-mse:6",  "tq-mse:7",
                              "tq-mse:8",  "tq-prod:2", "tq-prod:3", "tq-prod:4", "tq-prod:5", "tq-prod:6",
                              "tq-prod:7", "tq-prod:8", "qjl",       "polar",     "polar:3",   "rvq:1",
                              "rvq:2",     "rvq:3",     "rvq:4",     "tcq:2",     "tcq:4"};
static const char *OPTS[] = {"", "+outliers=16", "+center", "+chscale", "+norot", "+scale=norm", "+scale32"};
static const int DIMS[] = {64, 128, 256};

#define NROWS 37  /* two 16-record blocks and a tail */
#define NQ 5      /* a 4-row pass and a tail */
#define NCALIB 64
#define SEED 20240601u
#define LINE 256

typedef struct { uint64_t h; } fnv;
static void fnv_init(fnv *f) { f->h = 0xcbf29ce484222325ull; }
static void fnv_add(fnv *f, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}

/* rows with a per-channel mean and scale (so +center/+chscale/+outliers see
 * structure), one large channel */
static void make_rows(float *x, size_t n, int d, tu_rng *r) {
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < d; c++) {
            float mean = (float)((c % 7) - 3) * 0.5f, sc = 0.25f + (float)(c % 5) * 0.5f;
            if (c == 3) sc = 20.0f;
            x[i * (size_t)d + c] = mean + sc * (float)tu_gauss(r);
        }
}

static void pattern(void *p, size_t n) { memset(p, 0xa5, n); }

/* One line for plan p on isa label `isa`. */
static void digest_line(const kvq_plan *p, const char *spec, int d, const char *isa, const float *x,
                        const uint16_t *xh, const float *q, const float *w, char *out) {
    const size_t cb = kvq_plan_code_bytes(p), qf = kvq_plan_query_floats(p);
    uint8_t *codes = malloc(NROWS * cb), *codes_h = malloc(NROWS * cb);
    float *y = malloc(NROWS * (size_t)d * sizeof *y), *qp = malloc(NQ * qf * sizeof *qp);
    float *sc = malloc(NQ * NROWS * sizeof *sc), *acc = calloc(NQ * (size_t)d, sizeof *acc);
    float *un = malloc(NQ * (size_t)d * sizeof *un);
    fnv e, dd, qq, s, a;
    fnv_init(&e), fnv_init(&dd), fnv_init(&qq), fnv_init(&s), fnv_init(&a);
    pattern(codes, NROWS * cb), pattern(codes_h, NROWS * cb);
    int rc = kvq_encode(p, x, KVQ_DTYPE_F32, NROWS, codes);
    fnv_add(&e, &rc, sizeof rc);
    fnv_add(&e, codes, NROWS * cb);
    rc = kvq_encode(p, xh, KVQ_DTYPE_F16, NROWS, codes_h);
    fnv_add(&e, &rc, sizeof rc);
    fnv_add(&e, codes_h, NROWS * cb);
    if (kvq_plan_can_decode(p)) {
        pattern(y, NROWS * (size_t)d * sizeof *y);
        CHECK_OK(kvq_decode(p, codes, NROWS, y));
        fnv_add(&dd, y, NROWS * (size_t)d * sizeof *y);
    }
    pattern(qp, NQ * qf * sizeof *qp);
    for (int j = 0; j < NQ; j++) CHECK_OK(kvq_query_prepare(p, q + j * (size_t)d, qp + j * qf));
    fnv_add(&qq, qp, NQ * qf * sizeof *qp);
    pattern(sc, NQ * NROWS * sizeof *sc);
    CHECK_OK(kvq_score(p, qp, NQ, codes, NROWS, sc));
    fnv_add(&s, sc, NQ * NROWS * sizeof *sc);
    if (kvq_plan_can_decode(p)) {
        CHECK_OK(kvq_accumulate(p, w, NQ, codes, NROWS, acc));
        fnv_add(&a, acc, NQ * (size_t)d * sizeof *acc);
        pattern(un, NQ * (size_t)d * sizeof *un);
        for (int j = 0; j < NQ; j++) CHECK_OK(kvq_unrotate(p, acc + j * (size_t)d, un + j * (size_t)d));
        fnv_add(&a, un, NQ * (size_t)d * sizeof *un);
    }
    snprintf(out, LINE, "%s %d %s 0 %016llx %016llx %016llx %016llx %016llx", spec, d, isa,
             (unsigned long long)e.h, kvq_plan_can_decode(p) ? (unsigned long long)dd.h : 0ull,
             (unsigned long long)qq.h, (unsigned long long)s.h,
             kvq_plan_can_decode(p) ? (unsigned long long)a.h : 0ull);
    free(codes), free(codes_h), free(y), free(qp), free(sc), free(acc), free(un);
}

typedef struct {
    char **line;
    size_t n, cap;
} lines;

static void lines_add(lines *L, const char *s) {
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 1024;
        L->line = realloc(L->line, L->cap * sizeof *L->line);
    }
    L->line[L->n++] = strdup(s);
}

/* the pinned line with the same "spec dim isa" key as s, or NULL */
static const char *lines_find(const lines *L, const char *s) {
    const char *k = strchr(s, ' ');
    k = strchr(k + 1, ' ');
    k = strchr(k + 1, ' ');
    const size_t kl = (size_t)(k - s) + 1;
    for (size_t i = 0; i < L->n; i++)
        if (!strncmp(L->line[i], s, kl)) return L->line[i];
    return NULL;
}

static void load_golden(lines *L) {
    const char *root = getenv("KVQ_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/codec_golden.txt", root ? root : ".");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    char buf[LINE];
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        if (buf[0] && buf[0] != '#') lines_add(L, buf);
    }
    fclose(f);
}

/* ISA labels this CPU runs, and how to make each plan. */
typedef struct { const char *name; kvq_isa isa; int no_vnni; } isa_variant;

int main(void) {
    lines gold = {0}, got = {0};
    load_golden(&gold);
    isa_variant V[4];
    int nv = 0;
    const kvq_isa best = kvq_cpu_isa();
    V[nv++] = (isa_variant){"scalar", KVQ_ISA_SCALAR, 0};
    if (best >= KVQ_ISA_AVX2) V[nv++] = (isa_variant){"avx2", KVQ_ISA_AVX2, 0};
    if (best >= KVQ_ISA_AVX512) {
        V[nv++] = (isa_variant){"avx512", KVQ_ISA_AVX512, 1};
        setenv("KVQ_NO_VNNI", "1", 1);
        if (kvq_cpu_has_avx512vnni()) { /* int8 dot: VNNI and VBMI, read with the variable unset */
            unsetenv("KVQ_NO_VNNI");
            if (kvq_cpu_has_int8_dot()) V[nv++] = (isa_variant){"avx512vnni", KVQ_ISA_AVX512, 0};
        }
    }
    unsetenv("KVQ_NO_VNNI");
    size_t compared = 0, missing = 0;
    for (size_t di = 0; di < sizeof DIMS / sizeof *DIMS; di++) {
        const int d = DIMS[di];
        tu_rng r = {SEED + (uint64_t)d};
        float *x = malloc(NROWS * (size_t)d * sizeof *x), *cal = malloc(NCALIB * (size_t)d * sizeof *cal);
        float *q = malloc(NQ * (size_t)d * sizeof *q), *w = malloc(NQ * NROWS * sizeof *w);
        uint16_t *xh = malloc(NROWS * (size_t)d * sizeof *xh);
        make_rows(x, NROWS, d, &r);
        make_rows(cal, NCALIB, d, &r);
        for (size_t i = 0; i < NQ * (size_t)d; i++) q[i] = (float)tu_gauss(&r);
        tu_softmax_weights(&r, w, NQ, NROWS, 1);
        for (size_t i = 0; i < NROWS * (size_t)d; i++) xh[i] = kvq_f32_to_f16(x[i]);
        for (size_t bi = 0; bi < sizeof BASES / sizeof *BASES; bi++)
            for (size_t oi = 0; oi < sizeof OPTS / sizeof *OPTS; oi++) {
                char spec[64], line[LINE];
                snprintf(spec, sizeof spec, "%s%s", BASES[bi], OPTS[oi]);
                for (int v = 0; v < nv; v++) {
                    if (V[v].no_vnni) setenv("KVQ_NO_VNNI", "1", 1);
                    kvq_plan *base = NULL, *p = NULL;
                    int rc = kvq_plan_create(&base, spec, d, SEED, cal, NCALIB);
                    if (!rc) rc = kvq_plan_clone_isa(&p, base, V[v].isa);
                    if (rc) snprintf(line, sizeof line, "%s %d %s %d 0 0 0 0 0", spec, d, V[v].name, rc);
                    else digest_line(p, spec, d, V[v].name, x, xh, q, w, line);
                    kvq_plan_free(p);
                    kvq_plan_free(base);
                    unsetenv("KVQ_NO_VNNI");
                    lines_add(&got, line);
                    const char *g = lines_find(&gold, line);
                    if (!g) missing++;
                    else compared++;
                    CHECK(g && !strcmp(g, line), "digest changed or not pinned:\n  got    %s\n  pinned %s", line,
                          g ? g : "(none)");
                }
            }
        free(x), free(cal), free(q), free(w), free(xh);
    }
    const char *wpath = getenv("KVQ_GOLDEN_WRITE");
    if (wpath) {
        FILE *f = fopen(wpath, "w");
        CHECK(f != NULL, "cannot write %s", wpath);
        for (size_t i = 0; f && i < got.n; i++) fprintf(f, "%s\n", got.line[i]);
        if (f) fclose(f);
    }
    printf("test_codec_golden: %zu lines compared, %zu not pinned, %zu pinned lines in the file\n", compared, missing,
           gold.n);
    for (size_t i = 0; i < gold.n; i++) free(gold.line[i]);
    for (size_t i = 0; i < got.n; i++) free(got.line[i]);
    free(gold.line), free(got.line);
    return tu_finish("test_codec_golden");
}
