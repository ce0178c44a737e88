/* Token sampler (see sampler.h for the steps and their order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

/* ------------------------------------------------------------------------ */
/* RNG: xoshiro256** seeded through splitmix64                               */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

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
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = splitmix64(&seed);
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

void kvq_sampler_free(kvq_sampler *s) {
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
/* max-heap of candidates: higher logit first, lower id on ties               */
/* ------------------------------------------------------------------------ */

static int before(const kvq_sampler_cand *a, const kvq_sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void sift_down(kvq_sampler_cand *h, size_t n, size_t i) {
    kvq_sampler_cand x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &x)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* In-place heap sort done lazily: rank r (0 = best) ends up at cand[n-1-r]. */
typedef struct lazy_sorted {
    kvq_sampler_cand *c;
    size_t n, heap; /* heap = cand[0..heap) still unsorted */
} lazy_sorted;

static const kvq_sampler_cand *rank_at(lazy_sorted *L, size_t r) {
    while (L->n - L->heap <= r) {
        size_t last = L->heap - 1;
        kvq_sampler_cand top = L->c[0];
        L->c[0] = L->c[last];
        L->heap = last;
        if (last) sift_down(L->c, last, 0);
        L->c[last] = top;
    }
    return &L->c[L->n - 1 - r];
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

    size_t k = s->p.top_k > 0 && (size_t)s->p.top_k < n ? (size_t)s->p.top_k : n;
    int use_p = s->p.top_p < 1.0f, use_min = s->p.min_p > 0.0f;
    float maxl = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit > maxl) maxl = c[i].logit;

    if (k == n && !use_p && !use_min) {
        /* no truncation: one pass over the unsorted candidates */
        double total = 0;
        for (size_t i = 0; i < n; i++) total += exp((double)(c[i].logit - maxl) / temp);
        double u = rng_uniform(s->rng) * total, cum = 0;
        size_t pick = 0;
        for (size_t i = 0; i < n; i++) {
            double w = exp((double)(c[i].logit - maxl) / temp);
            if (w <= 0) continue;
            pick = i;
            cum += w;
            if (cum > u) break;
        }
        *out = c[pick].id;
        return KVQ_OK;
    }

    /* 3-5. truncations keep a prefix of the candidates by decreasing logit */
    double zsum = 0;
    if (use_p && k == n)
        for (size_t i = 0; i < n; i++) zsum += exp((double)(c[i].logit - maxl));
    for (size_t i = n / 2; i-- > 0;) sift_down(c, n, i);
    lazy_sorted L = {c, n, n};
    size_t m = k; /* kept count */
    if (use_p) {
        if (k < n) {
            zsum = 0;
            for (size_t r = 0; r < k; r++) zsum += exp((double)(rank_at(&L, r)->logit - maxl));
        }
        double cum = 0, target = (double)s->p.top_p * zsum;
        for (size_t r = 0; r < k; r++) {
            cum += exp((double)(rank_at(&L, r)->logit - maxl));
            if (cum >= target) {
                m = r + 1;
                break;
            }
        }
    }
    if (use_min) {
        float thr = maxl + logf(s->p.min_p);
        size_t r = 1; /* the best token always stays */
        while (r < m && rank_at(&L, r)->logit >= thr) r++;
        m = r;
    }

    /* 6. temperature and the draw over ranks 0..m-1 */
    double total = 0;
    for (size_t r = 0; r < m; r++) total += exp((double)(rank_at(&L, r)->logit - maxl) / temp);
    double u = rng_uniform(s->rng) * total, cum = 0;
    const kvq_sampler_cand *pick = rank_at(&L, 0);
    for (size_t r = 0; r < m; r++) {
        const kvq_sampler_cand *x = rank_at(&L, r);
        double w = exp((double)(x->logit - maxl) / temp);
        if (w <= 0) continue;
        pick = x;
        cum += w;
        if (cum > u) break;
    }
    *out = pick->id;
    return KVQ_OK;
}
