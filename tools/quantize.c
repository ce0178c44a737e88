/*
 * kvq quantize: a GGUF model with its weight matrices coded by a kvq method
 * (kvq_model_quantize_weights + kvq_model_save): the file kvq's engine loads
 * like any other (kvq run/ppl/kld/bench -m OUT), documented in docs/FORMAT.md.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "kvq.h"
#include "kvq_engine.h"
#include "tools.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq quantize [-m IN.gguf] -o OUT.gguf --weights SPEC [--keep TENSORS] [-t T]\n"
            "  writes IN with its weight matrices coded by a kvq method (docs/METHODS.md \"Weights\");\n"
            "  kvq's engine loads OUT like any GGUF (other readers refuse its kvq tensors)\n"
            "  -m, --model IN         source GGUF (default: the default model); its weights are\n"
            "                         dequantized from their stored type, then coded\n"
            "  -o, --output OUT       the file written (through OUT.tmp, renamed when complete)\n"
            "  -t, --threads T        threads, 1..256 (default 2)\n"
            TOOL_WEIGHTS_USAGE
            "  calibrated specs (+center, +chscale, +outliers: tcq:4+chscale) store their plans' stats beside\n"
            "  the codes (docs/FORMAT.md): OUT loads without the source and gives the same logits\n");
}

static double file_mib(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1.0 : (double)st.st_size / (1024.0 * 1024.0);
}

int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *spec = NULL, *keep = NULL;
    int threads = 2;
    const tool_opt opts[] = {
        {.names = "-m|--model", .kind = TOOL_ARG_STR, .dst = &in},
        {.names = "-o|--output", .kind = TOOL_ARG_STR, .dst = &out},
        {.names = "--weights", .kind = TOOL_ARG_STR, .dst = &spec},
        {.names = "--keep", .kind = TOOL_ARG_STR, .dst = &keep},
        {.names = "-t|--threads", .kind = TOOL_ARG_INT, .dst = &threads, .min = 1, .max = 256},
        {0}};
    const tool_opt *tables[] = {opts, NULL};
    const tool_cmd cmd = {.name = "quantize", .usage = usage, .tables = tables};
    int pr = tool_args_parse(&cmd, argc, argv);
    if (pr) return pr < 0 ? 0 : pr;
    if (!out) return tool_usage_error("quantize", "-o OUT.gguf is required");
    if (!spec) return tool_usage_error("quantize", "--weights SPEC is required (e.g. tq-mse:4)");
    char def[4096];
    if (!in) {
        if (tool_default_model(def, sizeof def, 1)) {
            fprintf(stderr, "kvq quantize: no -m given and the default model could not be installed\n");
            return 1;
        }
        in = def;
    }
    if (!strcmp(in, out)) return tool_usage_error("quantize", "-o must differ from -m (the source stays mapped)");
    char err[512] = "";
    kvq_model *m = NULL;
    kvq_pool *pool = NULL;
    int rc = kvq_model_load(&m, in, err, sizeof err);
    if (rc) { fprintf(stderr, "kvq quantize: %s\n", err); return 1; }
    if ((rc = kvq_pool_create(&pool, threads))) {
        fprintf(stderr, "kvq quantize: thread pool: %s\n", kvq_strerror(rc));
        kvq_model_free(m);
        return 1;
    }
    int ret = tool_code_weights(m, spec, keep, pool, "quantize", 0);
    if (!ret) {
        double t0 = tool_now();
        if ((rc = kvq_model_save(m, out, err, sizeof err))) {
            fprintf(stderr, "kvq quantize: %s\n", err[0] ? err : kvq_strerror(rc));
            ret = 1;
        } else {
            kvq_model_info mi;
            kvq_model_get_info(m, &mi);
            printf("%s -> %s: %.1f -> %.1f MiB, weights %s on %d tensors at %.4f bits per weight (written in %.1f s)\n",
                   in, out, file_mib(in), file_mib(out), mi.weights_spec, mi.n_coded, mi.coded_bits, tool_now() - t0);
        }
    }
    kvq_pool_free(pool);
    kvq_model_free(m);
    return ret;
}
