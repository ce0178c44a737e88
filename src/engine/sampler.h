/*
 * Token sampler: greedy, temperature, top-k, top-p, min-p and a repetition
 * penalty over the last N tokens, with its own seeded RNG.
 *
 * The struct is the caller's (on the stack or inside a session); it holds its
 * RNG state, the recent-token window and a scratch buffer of n_vocab
 * candidates, so two samplers never share state and no globals are used.
 *
 * Order of the steps in kvq_sampler_sample (as llama.cpp's default chain):
 *   1. repetition penalty: every distinct token among the last repeat_last_n
 *      accepted ones has its logit divided by repeat_penalty if positive,
 *      multiplied if negative;
 *   2. temperature <= 0 (or top_k == 1): the argmax (lowest id on ties), done;
 *   3. top-k: keep the k highest logits;
 *   4. top-p: keep the smallest prefix (by decreasing probability, softmax of
 *      the survivors at temperature 1) whose mass reaches top_p;
 *   5. min-p: keep tokens with probability >= min_p * the highest one;
 *   6. temperature: sample from softmax(logit / temperature) of the survivors.
 * Always at least one token survives. Cost: O(n_vocab) passes plus small
 * sorts: top-k selects with a k-heap and sorts k; top-p finds the bucket of
 * logit distance (width 1/4) where the cut falls and sorts that bucket only;
 * min-p is a threshold. The whole vocabulary is never sorted.
 */
#ifndef KVQ_ENGINE_SAMPLER_H
#define KVQ_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"
#include "kvq_engine.h"

typedef struct kvq_sampler_cand {
    float logit;
    int32_t id;
} kvq_sampler_cand;

struct kvq_sampler {
    kvq_sampler_params p;
    size_t n_vocab;
    uint64_t rng[4];          /* xoshiro256** state */
    int32_t *recent;          /* (repeat_last_n) ring of accepted tokens */
    size_t n_recent, pos_recent;
    kvq_sampler_cand *cand;   /* (n_vocab) scratch */
};

/*
 * Prepares *s for vocabularies of n_vocab tokens. Errors: KVQ_ERR_NULL,
 * KVQ_ERR_INVALID_ARG (n_vocab 0 or > INT32_MAX, NaN parameters,
 * repeat_penalty <= 0, negative repeat_last_n), KVQ_ERR_NOMEM.
 */
int kvq_sampler_init(kvq_sampler *s, const kvq_sampler_params *p, size_t n_vocab);
/* Frees the buffers (s itself is the caller's); accepts NULL and repeated calls.
 * (kvq_sampler_create / kvq_sampler_free of kvq_engine.h wrap init / release.) */
void kvq_sampler_release(kvq_sampler *s);
/* kvq_sampler_reset, kvq_sampler_accept, kvq_sampler_sample: include/kvq_engine.h. */

#endif
