/*
 * Cache policies of the engine tools (bench, memplan, ppl, kld, needle,
 * gen-check, run): the library's kvq_policy (grammar: include/kvq.h, "Cache
 * policies"; one parser for the CLI and the Python package), plus what only
 * the command line needs: the per-field options, lists of policies, JSON.
 *
 * A list of policies (--policies) separates them with spaces or '|':
 *   --policies "f16 q8 tq-mse:4 tq-mse:4,w=128"
 * Tools print the canonical name (kvq_policy_name) as "policy" in their JSON
 * results, followed by the fields (tool_policy_json).
 */
#ifndef KVQ_TOOLS_POLICY_H
#define KVQ_TOOLS_POLICY_H

#include <stddef.h>
#include <stdio.h>

#include "kvq.h"
#include "kvq_engine.h"

#define TOOL_POLICY_MAX_F16 KVQ_POLICY_MAX_F16
#define TOOL_POLICY_NAME KVQ_POLICY_NAME_MAX

typedef kvq_policy tool_policy;

/* f16 keys and values, no window, no f16 layers. */
#define tool_policy_init kvq_policy_init

/* Parses one policy (kvq_policy_parse); 0 on success, else -1 with a reason in err. */
int tool_policy_parse(const char *s, tool_policy *p, char *err, size_t err_cap);

/*
 * The per-field command-line options of the engine tools, applied to p:
 * --cache-k SPEC, --cache-v SPEC, --kv-window W, --kv-f16-layers L,L,...,
 * --kv-compress-sliding (no value: val is ignored), --kv-calib N, --policy POLICY.
 * Returns 2 if opt was consumed with its value, 1 if consumed alone
 * (--kv-compress-sliding), 0 if opt is not a policy option, -1 on a bad value.
 */
int tool_policy_option(tool_policy *p, const char *opt, const char *val, char *err, size_t err_cap);

/*
 * Splits a list of policies (separated by spaces or '|') and parses each
 * into out[0..max); returns the count, or -1 (reason in err) on a bad policy
 * or more than max.
 */
int tool_policy_list(const char *s, tool_policy *out, int max, char *err, size_t err_cap);

/* Canonical name into buf (truncated to cap). */
void tool_policy_name(const tool_policy *p, char *buf, size_t cap);

/*
 * Fills the cache fields of session params (kvq_session_params_set_policy)
 * after checking the f16 layers against a model of n_layers layers; sp
 * points into p, which must outlive the session creation. -1 (reason in err)
 * if an f16 layer is out of range.
 */
int tool_policy_session_params(tool_policy *p, int n_layers, kvq_session_params *sp, char *err, size_t err_cap);

/*
 * Bits per value of the policy's K and V methods at head dim d (everything a
 * record stores: codes, scales, norms), as the plans count them; f16 layers,
 * windows and sliding layers are not included. -1 on a bad spec.
 */
int tool_policy_bits(const tool_policy *p, int d, double *bits_k, double *bits_v);

/*
 * Writes the JSON fields of the policy (no braces, no leading comma):
 * "policy":"NAME","k":"..","v":"..","window":W,"f16_layers":[..],"compress_sliding":0
 */
void tool_policy_json(const tool_policy *p, FILE *f);

#endif
