/* kvq command-line tool: dispatches to one subcommand per file in tools/. */
#include <stdio.h>
#include <string.h>

#include "kvq.h"
#include "tools.h"

typedef struct {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *help;
} subcommand;

/* One row per subcommand. */
static const subcommand SUBCOMMANDS[] = {
    {"codec-bench", cmd_codec_bench, "measure every codec method on Gaussian, Laplacian or dumped K/V vectors"},
    {"attn-bench", cmd_attn_bench, "decode attention on a compressed cache vs the f16 cache: time, error, memory"},
    {"logits", cmd_logits, "all-position logits of a token list run as one batch (n_tokens x n_vocab float32)"},
    {"inspect", cmd_inspect, "describe a GGUF model: architecture, layers, heads, head dim, context, rope, weight types"},
    {"run", cmd_run, "generate text on a compressed KV cache (streams text; speed and cache memory on stderr)"},
    {"dump-kv", cmd_dump_kv, "write a model's real K/V vectors for a text as vector files (for codec-bench, attn-bench)"},
    {"ppl", cmd_ppl, "perplexity of a text with attention on the compressed cache (llama.cpp windows, second half scored)"},
    {"kld", cmd_kld, "KL divergence, top-1 agreement, ppl vs the f16/f32 cache; per-layer attention-output error"},
    {"needle", cmd_needle, "passkey retrieval: a number hidden at several depths of filler text, accuracy per ctx and depth"},
    {"gen-check", cmd_gen_check, "greedy generation per policy vs the f16 cache: tokens before EOS or a degenerate repeat, divergence"},
    {"bench", cmd_bench, "prefill and generation tokens/s per cache policy side by side (f16 first), KV bytes per token"},
    {"quantize", cmd_quantize, "write a GGUF whose weight matrices are coded by a kvq method (tq-mse:4, ...), for kvq's engine"},
    {"memplan", cmd_memplan, "longest context that fits in a memory budget per cache policy; KV bytes at 4K/32K/128K"},
};

static void usage(FILE *f) {
    fprintf(f, "kvq %u.%u.%u — KV-cache compression\n\nusage: kvq <command> [options]\n\ncommands:\n",
            KVQ_VERSION_MAJOR, KVQ_VERSION_MINOR, KVQ_VERSION_PATCH);
    for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]; i++)
        fprintf(f, "  %-14s %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].help);
    fprintf(f, "\n'kvq <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kvq %u.%u.%u\n", KVQ_VERSION_MAJOR, KVQ_VERSION_MINOR, KVQ_VERSION_PATCH);
        return 0;
    }
    for (size_t i = 0; i < sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0]; i++)
        if (!strcmp(argv[1], SUBCOMMANDS[i].name)) return SUBCOMMANDS[i].main(argc - 1, argv + 1);
    fprintf(stderr, "kvq: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
