/* Token sampler (see sampler.h for the steps and their order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sampler.h"

/* ------------------------------------------------------------------------ */
/* RNG: xoshiro256** seeded through splitmix64                               */
/* ------------------------------------------------------------------------ */

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double rng_uniform(uint64_t s[4]) { return kvq_unit53(rng_next(s)); }

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = kvq_splitmix64(&seed); /* rng.h */
}

/* ------------------------------------------------------------------------ */
/* setup                                                                     */
/* ------------------------------------------------------------------------ */

kvq_sampler_params kvq_sampler_default_params(void) {
    kvq_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 0;
    p.seed = 0;
    return p;
}

int kvq_sampler_init(kvq_sampler *s, const kvq_sampler_params *p, size_t n_vocab) {
    if (!s || !p) return KVQ_ERR_NULL;
    if (n_vocab == 0 || n_vocab > INT32_MAX) return KVQ_ERR_INVALID_ARG;
    if (isnan(p->temperature) || isnan(p->top_p) || isnan(p->min_p) || !(p->repeat_penalty > 0) ||
        !isfinite(p->repeat_penalty) || p->repeat_last_n < 0)
        return KVQ_ERR_INVALID_ARG;
    kvq_sampler z;
    memset(&z, 0, sizeof z);
    z.p = *p;
    z.n_vocab = n_vocab;
    z.cand = malloc(n_vocab * sizeof *z.cand);
    if (!z.cand) return KVQ_ERR_NOMEM;
    if (p->repeat_last_n > 0) {
        z.recent = malloc((size_t)p->repeat_last_n * sizeof *z.recent);
        if (!z.recent) {
            free(z.cand);
            return KVQ_ERR_NOMEM;
        }
    }
    rng_seed(z.rng, p->seed);
    *s = z;
    return KVQ_OK;
}

void kvq_sampler_release(kvq_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->recent);
    s->cand = NULL;
    s->recent = NULL;
    s->n_recent = s->pos_recent = 0;
}

void kvq_sampler_reset(kvq_sampler *s, uint64_t seed) {
    if (!s) return;
    s->n_recent = s->pos_recent = 0;
    s->p.seed = seed;
    rng_seed(s->rng, seed);
}

int kvq_sampler_accept(kvq_sampler *s, int32_t token) {
    if (!s) return KVQ_ERR_NULL;
    if (token < 0 || (size_t)token >= s->n_vocab) return KVQ_ERR_INVALID_ARG;
    size_t cap = (size_t)s->p.repeat_last_n;
    if (cap == 0 || !s->recent) return KVQ_OK;
    s->recent[s->pos_recent] = token;
    s->pos_recent = (s->pos_recent + 1) % cap;
    if (s->n_recent < cap) s->n_recent++;
    return KVQ_OK;
}

/* ------------------------------------------------------------------------ */
/* candidate order: higher logit first, lower id on ties                     */
/* ------------------------------------------------------------------------ */

static int before(const kvq_sampler_cand *a, const kvq_sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *x, const void *y) {
    const kvq_sampler_cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

/* Min-heap (the worst candidate at the root) of h[0..n). */
static void sift_worst(kvq_sampler_cand *h, size_t n, size_t i) {
    kvq_sampler_cand x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h[c], &h[c + 1])) c++;
        if (!before(&x, &h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Moves the k best of c[0..n) to c[0..k), sorted best first. O(n log k). */
static void select_top_k(kvq_sampler_cand *c, size_t n, size_t k) {
    for (size_t i = k / 2; i-- > 0;) sift_worst(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_worst(c, k, 0);
        }
    }
    qsort(c, k, sizeof *c, cmp_cand);
}

/* Logit distance below the maximum -> one of NBUCKET buckets of width 1/4. */
enum { NBUCKET = 128 };
static int bucket_of(float maxl, float l) {
    float d = (maxl - l) * 4.0f;
    return d < (float)(NBUCKET - 1) ? (int)d : NBUCKET - 1;
}

/* ------------------------------------------------------------------------ */
/* sampling                                                                  */
/* ------------------------------------------------------------------------ */

int kvq_sampler_sample(kvq_sampler *s, const float *logits, int32_t *out) {
    if (!s || !logits || !out || !s->cand) return KVQ_ERR_NULL;
    size_t n = s->n_vocab;
    kvq_sampler_cand *c = s->cand;
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l) || l == INFINITY) return KVQ_ERR_NONFINITE;
        any |= l != -INFINITY;
        c[i].logit = l;
        c[i].id = (int32_t)i;
    }
    if (!any) return KVQ_ERR_NONFINITE;

    /* 1. repetition penalty, once per distinct recent token (marked by a negative id) */
    if (s->p.repeat_penalty != 1.0f && s->n_recent) {
        float pen = s->p.repeat_penalty;
        for (size_t j = 0; j < s->n_recent; j++) {
            kvq_sampler_cand *x = &c[s->recent[j]];
            if (x->id < 0) continue;
            x->logit = x->logit > 0 ? x->logit / pen : x->logit * pen;
            x->id = -1 - x->id;
        }
        for (size_t j = 0; j < s->n_recent; j++) {
            kvq_sampler_cand *x = &c[s->recent[j]];
            if (x->id < 0) x->id = -1 - x->id;
        }
    }

    /* 2. greedy */
    float temp = s->p.temperature;
    if (!(temp > 0) || s->p.top_k == 1) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        *out = c[best].id;
        return KVQ_OK;
    }

    float itemp = 1.0f / temp;
    size_t k = s->p.top_k > 0 && (size_t)s->p.top_k < n ? (size_t)s->p.top_k : n;
    int use_p = s->p.top_p < 1.0f, use_min = s->p.min_p > 0.0f;
    float maxl = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > maxl) maxl = c[i].logit;

    if (k == n && !use_p && !use_min) {
        /* no truncation: one pass over the unsorted candidates */
        double total = 0;
        for (size_t i = 0; i < n; i++) total += (double)expf((c[i].logit - maxl) * itemp);
        double u = rng_uniform(s->rng) * total, cum = 0;
        size_t pick = 0;
        for (size_t i = 0; i < n; i++) {
            double w = (double)expf((c[i].logit - maxl) * itemp);
            if (w <= 0) continue;
            pick = i;
            cum += w;
            if (cum > u) break;
        }
        *out = c[pick].id;
        return KVQ_OK;
    }

    /* 3-5. truncations: the survivors end up in c[0..m) */
    size_t m = n;
    if (k < n) {
        select_top_k(c, n, k); /* sorted best first */
        m = k;
        if (use_p) {
            double zsum = 0, cum = 0;
            for (size_t r = 0; r < m; r++) zsum += (double)expf(c[r].logit - maxl);
            double target = (double)s->p.top_p * zsum;
            for (size_t r = 0; r < m; r++) {
                cum += (double)expf(c[r].logit - maxl);
                if (cum >= target) {
                    m = r + 1;
                    break;
                }
            }
        }
    } else if (use_p) {
        /* The mass per bucket of logit distance tells in which bucket j the
         * cut falls: buckets before j stay whole, only bucket j is sorted. */
        double mass[NBUCKET] = {0}, zsum = 0;
        for (size_t i = 0; i < n; i++) {
            double w = (double)expf(c[i].logit - maxl);
            zsum += w;
            mass[bucket_of(maxl, c[i].logit)] += w;
        }
        double target = (double)s->p.top_p * zsum, cum = 0;
        int j = NBUCKET - 1;
        for (int bk = 0; bk < NBUCKET; bk++) {
            if (cum + mass[bk] >= target) {
                j = bk;
                break;
            }
            cum += mass[bk];
        }
        size_t a = 0;
        for (size_t i = 0; i < n; i++) {
            if (bucket_of(maxl, c[i].logit) < j) {
                kvq_sampler_cand x = c[a];
                c[a++] = c[i];
                c[i] = x;
            }
        }
        size_t e = a;
        for (size_t i = a; i < n; i++) {
            if (bucket_of(maxl, c[i].logit) == j) {
                kvq_sampler_cand x = c[e];
                c[e++] = c[i];
                c[i] = x;
            }
        }
        qsort(c + a, e - a, sizeof *c, cmp_cand);
        m = e; /* if rounding keeps cum below target, the whole bucket stays */
        for (size_t r = a; r < e; r++) {
            cum += (double)expf(c[r].logit - maxl);
            if (cum >= target) {
                m = r + 1;
                break;
            }
        }
    }
    if (use_min) {
        /* the best token (logit maxl, always among the survivors) passes */
        float thr = fminf(maxl + logf(s->p.min_p), maxl);
        size_t w = 0;
        for (size_t r = 0; r < m; r++)
            if (c[r].logit >= thr) c[w++] = c[r];
        m = w;
    }

    /* 6. temperature and the draw over c[0..m) */
    double total = 0;
    for (size_t r = 0; r < m; r++) total += (double)expf((c[r].logit - maxl) * itemp);
    double u = rng_uniform(s->rng) * total, cum = 0;
    const kvq_sampler_cand *pick = &c[0];
    for (size_t r = 0; r < m; r++) {
        double w = (double)expf((c[r].logit - maxl) * itemp);
        if (w <= 0) continue;
        pick = &c[r];
        cum += w;
        if (cum > u) break;
    }
    *out = pick->id;
    return KVQ_OK;
}
