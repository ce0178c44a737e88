/* Subcommands of the kvq CLI (one per file) and small shared CLI helpers. */
#ifndef KVQ_TOOLS_H
#define KVQ_TOOLS_H
#include <stddef.h>
#include <stdint.h>

int cmd_codec_bench(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_dump_kv(int argc, char **argv);
int cmd_ppl(int argc, char **argv);
int cmd_kld(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_gen_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_memplan(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

/* Monotonic wall-clock seconds. */
double tool_now(void);
/* Path of the default model (SmolLM2) into buf: $KVQ_MODELS_DIR, ./models, then
 * the repository's models/; with fetch, runs scripts/fetch-models.sh --default
 * when it is missing. Returns 0 when the file exists. */
int tool_default_model(char *buf, size_t cap, int fetch);

/* --weights SPEC / --keep TENSORS (weights.c): codes m's weights with
 * kvq_model_quantize_weights (seed 0) unless spec is NULL, and prints one
 * line to stderr (tool's name, spec, bits per weight, tensors, seconds)
 * unless quiet. Prints the reason and returns nonzero on failure. */
struct kvq_model;
struct kvq_pool;
int tool_code_weights(struct kvq_model *m, const char *spec, const char *keep, struct kvq_pool *pool,
                      const char *tool, int quiet);
/* 1 if b can stand in for a (another set of weights of the same model: vocabulary, layers and width). */
struct kvq_model_info;
int tool_same_model_shape(const struct kvq_model_info *a, const struct kvq_model_info *b);
/* Help text of --weights / --keep. */
#define TOOL_WEIGHTS_USAGE                                                                                \
    "  --weights SPEC         code the weight matrices with a kvq method at load time (tq-mse:4,\n"       \
    "                         tq-mse:3@128: @B = values per rotated block; docs/METHODS.md \"Weights\")\n" \
    "  --keep TENSORS         tensors left as stored, comma-separated name parts (default\n"              \
    "                         token_embd,output: a part matches from the start or a dot to the\n"\
    "                         end, a dot or an underscore; none = code all)\n"
#endif
