/* kvq inspect: what a GGUF model is (architecture, shapes, rope, windows, weight types). */
#include <stdio.h>
#include <string.h>

#include "kvq_engine.h"
#include "kvq.h"
#include "args.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kvq inspect [MODEL | -m MODEL] [--tensors]\n"
               "  architecture, layers, heads, head dim, context, rope, sliding windows, weight types;\n"
               "  MODEL defaults to the installed SmolLM2; --tensors lists every tensor\n");
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL, *pos[1] = {NULL};
    int list = 0, npos = 0;
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &path},
        {.names = "--tensors", .kind = TOOL_ARG_SET, .dst = &list},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "inspect", .usage = usage, .tables = tables, .pos = pos, .max_pos = 1, .n_pos = &npos};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if (npos && path) return tool_usage_error("inspect", "the model is given twice ('%s' and -m %s)", pos[0], path);
    if (npos) path = pos[0];
    char def[4096];
    if (!path) {
        if (tool_default_model(def, sizeof def, 0)) { fprintf(stderr, "kvq inspect: no model given and none installed\n"); return 2; }
        path = def;
    }
    kvq_gguf_file *g = NULL;
    int rc = kvq_gguf_open(&g, path);
    if (rc) { /* the loader says why in words */
        char err[512] = "";
        kvq_model *m = NULL;
        if (kvq_model_load(&m, path, err, sizeof err) == KVQ_OK) kvq_model_free(m);
        fprintf(stderr, "kvq inspect: %s\n", err[0] ? err : kvq_strerror(rc));
        return 1;
    }
    kvq_gguf_info gi;
    kvq_gguf_get_info(g, &gi);
    printf("file           %s\n", path);
    printf("gguf           v%u, %llu metadata keys, %llu tensors, alignment %u, data at %llu, %llu bytes\n",
           gi.version, (unsigned long long)gi.n_kv, (unsigned long long)gi.n_tensors, gi.alignment,
           (unsigned long long)gi.data_offset, (unsigned long long)gi.file_size);
    char tm[32] = "?", pre[64] = "";
    kvq_gguf_get_string(g, "tokenizer.ggml.model", tm, sizeof tm);
    kvq_gguf_get_string(g, "tokenizer.ggml.pre", pre, sizeof pre);
    for (uint64_t i = 0; list && i < gi.n_tensors; i++) {
        kvq_gguf_tensor_info t;
        if (kvq_gguf_get_tensor(g, i, &t)) break;
        printf("  %-40s %-5s [", t.name, kvq_ggml_type_name(t.type));
        for (uint32_t d = 0; d < t.n_dims; d++) printf("%s%llu", d ? ", " : "", (unsigned long long)t.ne[d]);
        printf("] %llu bytes\n", (unsigned long long)t.n_bytes);
    }
    char arch[32] = "?";
    kvq_gguf_get_string(g, "general.architecture", arch, sizeof arch);
    kvq_gguf_close(g);
    char err[256] = "";
    kvq_model *m = NULL;
    rc = kvq_model_load(&m, path, err, sizeof err);
    if (rc) {
        printf("architecture   %s (not loadable: %s)\n", arch, err);
        return 1;
    }
    kvq_model_info ci;
    kvq_model_get_info(m, &ci);
    const kvq_model_info *c = &ci;
    printf("name           %s\n", c->name[0] ? c->name : "(none)");
    printf("architecture   %s\n", c->arch);
    printf("layers         %d\n", c->n_layers);
    printf("embedding      %d\n", c->n_embd);
    printf("feed-forward   %d (%s)\n", c->n_ff, c->gelu ? "GeGLU, tanh GELU" : "SwiGLU");
    printf("heads          %d query / %d kv (group %d)\n", c->n_head, c->n_head_kv, c->n_head / c->n_head_kv);
    printf("head dim       %d\n", c->head_dim);
    printf("context        %d (trained)\n", c->n_ctx_train);
    printf("vocabulary     %d (tokenizer %s%s%s)\n", c->n_vocab, tm, pre[0] ? ", pre " : "", pre);
    printf("rope           %s, %d dims, base %g", c->rope_neox ? "neox" : "norm", c->n_rot, c->rope_base);
    if (c->rope_freq_scale != 1.0f) printf(", linear scale 1/%g", 1.0 / c->rope_freq_scale);
    if (c->has_rope_freqs) printf(", frequency factors");
    printf("\n");
    if (c->n_swa_layers) {
        printf("sliding window %d on %d layers (rope base %g); global layers:", c->n_swa, c->n_swa_layers,
               c->rope_base_swa);
        for (int l = 0; l < c->n_layers; l++)
            if (!c->sliding_window[l]) printf(" %d", l);
        printf("\n");
    } else {
        printf("sliding window none\n");
    }
    printf("norms          RMSNorm eps %g%s%s\n", c->norm_eps, c->qk_norm ? ", QK-norm" : "",
           c->post_norms ? ", post-attention/post-FFN norms" : "");
    printf("attention      scale %g%s\n", c->attn_scale, c->qkv_bias ? ", q/k/v biases" : "");
    if (c->embd_scale != 1.0f) printf("embed scale    %g\n", c->embd_scale);
    if (c->final_softcap > 0) printf("logit softcap  %g\n", c->final_softcap);
    printf("output         %s\n", c->tied_output ? "tied to token_embd" : "output.weight");
    printf("tensor types  ");
    for (int t = 0; t < KVQ_GGML_TYPE_SLOTS; t++)
        if (c->type_count[t]) printf(" %s x%d", kvq_ggml_type_name((uint32_t)t), c->type_count[t]);
    if (c->n_coded) printf(" kvq x%d (%s, %.4f bits per weight)", c->n_coded, c->weights_spec, c->coded_bits);
    printf("\nweights        %.1f MiB\n", (double)c->n_weight_bytes / (1024.0 * 1024.0));
    printf("kv per token   %zu bytes as f16 (%d layers x %d kv heads x %d x 2 x 2)\n",
           (size_t)c->n_layers * (size_t)c->n_head_kv * (size_t)c->head_dim * 4, c->n_layers, c->n_head_kv,
           c->head_dim);
    kvq_model_free(m);
    return 0;
}
