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

#include "args.h"
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
 * Splits a list of policies (separated by spaces or '|') and parses each
 * into out[0..max); returns the count, or -1 (reason in err) on a bad policy
 * or more than max.
 */
int tool_policy_list(const char *s, tool_policy *out, int max, char *err, size_t err_cap);

/*
 * The cache-policy options of a command line, one parser for every tool
 * (run, ppl, kld, needle, gen-check): collected in any order, applied in a
 * fixed one so the result does not depend on it: --policy first (the whole
 * policy), then the per-field options in the order given (a later one wins
 * over an earlier one of the same field), then --kv-compress-sliding.
 *   --policy P                   the whole policy (docs/CACHE.md)
 *   --cache-k SPEC, -ctk|--cache-type-k T   key method
 *   --cache-v SPEC, -ctv|--cache-type-v T   value method
 *   --kv-window W                f16 window
 *   --kv-f16-layers L,L          f16 layers
 *   --kv-calib N                 calibration tokens
 *   --kv-sink N                  f16 attention sink (the first N positions)
 *   --kv-compress-sliding | --compress-sliding   sliding layers compressed too
 * -ctk/-ctv also take llama.cpp's cache type names: f16, bf16, f32 as
 * themselves, q8_0 as q8 and q4_1 as q4 (the same blocks), q4_0 as q4 (the
 * nearest: q4 also stores a block minimum).
 */
#define TOOL_POLICY_ARGS_MAX 32
typedef struct tool_policy_args {
    const char *base;        /* --policy's value (a tool may preset its default), NULL: f16 */
    struct { int field; char opt[24]; const char *val; } f[TOOL_POLICY_ARGS_MAX]; /* as given */
    int n;                   /* per-field options given */
    int sliding;             /* --kv-compress-sliding given */
    int set;                 /* any policy option given */
    tool_opt rows[16];       /* the table for tool_args_parse */
} tool_policy_args;

/* Empty; builds the option table (a must not move afterwards). */
void tool_policy_args_init(tool_policy_args *a);
/* The table of the policy options (for tool_cmd.tables). */
const tool_opt *tool_policy_args_table(tool_policy_args *a);
/*
 * The policy the options describe into *out (f16 when none was given);
 * -1 with "OPTION VALUE: reason" in err.
 */
int tool_policy_args_build(const tool_policy_args *a, tool_policy *out, char *err, size_t err_cap);
/* Help lines of the policy options. */
void tool_policy_args_usage(FILE *f);
/* llama.cpp's name of a cache type as kvq's method (q8_0 -> q8); other names unchanged. */
const char *tool_policy_llama_type(const char *name);

/*
 * The registry's methods as one line: "f32 f16 bf16 q8 q4 tq-mse:1..8
 * tq-prod:2..8 qjl[:M] ..." (kvq_method_get).
 */
void tool_methods_list(char *buf, size_t cap);
/*
 * A bad method spec's message with what is accepted: after the library's
 * reason (why), the list of methods for an unknown method, the method's
 * widths for a width out of range.
 */
void tool_spec_error(const char *spec, int rc, const char *why, char *err, size_t cap);

/*
 * 0 and a warning in buf when the policy's key method is known to fail on
 * real models (qjl keys: ppl 1270 on SmolLM2 where f16 gives 33.5; tq-prod
 * keys: 48 to 104; docs/RESULTS.md), else -1.
 */
int tool_policy_key_warning(const tool_policy *p, char *buf, size_t cap);

/*
 * THE bits per value of every tool: 8 x bytes_per_token (kvq_cache_bytes_per_token:
 * every layer, f16 and sliding-window layers included, codes + scales + norms) /
 * (2 x layers x kv heads x head dim). An f16 window is a fixed cost of W tokens
 * at f16 on top (shown in the tools' KV bytes, not here); per-method detail:
 * tool_policy_bits (the compressed layers' K and V).
 */
double tool_bits_per_value(size_t bytes_per_token, const kvq_model_info *mi);
/* Layers the policy compresses on a model (n_comp), sliding-window layers it
 * leaves f16 (n_sliding_f16), layers its f16 list keeps (n_listed). */
void tool_policy_layers(const tool_policy *p, const kvq_model_info *mi, int *n_comp, int *n_sliding_f16, int *n_listed);

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
