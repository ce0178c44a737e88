/*
 * Cache policies as one string, shared by the evaluation tools (bench,
 * memplan, ppl, kld, needle, gen-check, ...).
 *
 * A policy is a comma-separated list of fields; the first may be a shorthand:
 *
 *   SPEC                 keys and values with the same method      tq-mse:4
 *   KSPEC/VSPEC          keys / values                              q8/tq-mse:4
 *   k=SPEC  v=SPEC       the same, field by field                   k=tq-prod:3,v=q8
 *   w=N                  f16 window of the N most recent tokens     tq-mse:3,w=128
 *   f16layers=L;L;...    layers kept in f16; negative counts from   q4,f16layers=0;-1
 *                        the end (-1 = last layer)
 *   sliding=1            compress sliding-window layers too (Gemma 3;
 *                        default 0: only global layers are compressed)
 *   calib=N              tokens kept f16 until the per-head +center /
 *                        +chscale / +outliers plans are calibrated on them
 *                        (default 128), then encoded like the others
 *
 * SPEC is a method of docs/METHODS.md (it never holds ',' or '/'); missing
 * K or V means f16. Examples: "f16", "q8/q8" (= "q8"),
 * "k=q8,v=tq-mse:4,w=128", "tq-mse:4+outliers=8/tq-mse:4", "tq-mse:3,sliding=1".
 *
 * A list of policies (--policies) separates them with spaces or '|':
 *   --policies "f16 q8 tq-mse:4 tq-mse:4,w=128"
 *
 * The canonical name (tool_policy_name) is the shortest form with the fields
 * in the order above: "tq-mse:4", "q8/tq-mse:4,w=128", "tq-mse:3,f16layers=0;-1".
 * Tools print it as "policy" in their JSON results, followed by the fields
 * (tool_policy_json).
 */
#ifndef KVQ_TOOLS_POLICY_H
#define KVQ_TOOLS_POLICY_H

#include <stddef.h>
#include <stdio.h>

#include "engine/model.h"

#define TOOL_POLICY_SPEC 80       /* longest method spec + 1 */
#define TOOL_POLICY_MAX_F16 64    /* f16 layers listed in one policy */
#define TOOL_POLICY_NAME 256

typedef struct tool_policy {
    char k[TOOL_POLICY_SPEC], v[TOOL_POLICY_SPEC]; /* methods ("f16" by default) */
    int window;                                    /* f16 window (0 = none) */
    int f16_layers[TOOL_POLICY_MAX_F16];           /* as written (may be negative) */
    int n_f16_layers;
    int compress_sliding;                          /* 1: sliding-window layers compressed too */
    int calib_tokens;                              /* calibration tokens (0 = the cache's default) */
    /* filled by tool_policy_session_params: indices resolved for the model */
    int resolved[TOOL_POLICY_MAX_F16];
} tool_policy;

/* f16 keys and values, no window, no f16 layers. */
void tool_policy_init(tool_policy *p);

/* Parses one policy; 0 on success, else -1 with a reason in err. */
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
 * Fills the cache fields of session params (k_spec, v_spec, f16_window,
 * f16_layers, n_f16_layers, compress_sliding, calib_tokens) for a model of n_layers
 * layers. The params point into p, which must outlive the session creation.
 * -1 (reason in err) if an f16 layer is out of range.
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
