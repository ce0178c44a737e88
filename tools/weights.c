/* --weights / --keep of the CLI: the model's matrices coded with kvq (tools.h). */
#include <stdio.h>

#include "kvq.h"
#include "kvq_engine.h"
#include "tools.h"

int tool_code_weights(kvq_model *m, const char *spec, const char *keep, kvq_pool *pool, const char *tool,
                      int quiet) {
    if (!spec) {
        if (keep) {
            fprintf(stderr, "kvq %s: --keep needs --weights\n", tool);
            return 2;
        }
        return 0;
    }
    char err[512] = "";
    double t0 = tool_now();
    int rc = kvq_model_quantize_weights(m, spec, keep, 0, pool, err, sizeof err);
    if (rc) {
        fprintf(stderr, "kvq %s: --weights %s: %s\n", tool, spec, err[0] ? err : kvq_strerror(rc));
        return 1;
    }
    if (!quiet) {
        kvq_model_info mi;
        kvq_model_get_info(m, &mi);
        fprintf(stderr, "kvq %s: weights %s: %d tensors at %.4f bits per weight (kept: %s), %.1f MiB in all, coded in %.1f s\n",
                tool, mi.weights_spec, mi.n_coded, mi.coded_bits, keep ? keep : KVQ_WEIGHTS_KEEP_DEFAULT,
                (double)mi.n_weight_bytes / (1024.0 * 1024.0), tool_now() - t0);
    }
    return 0;
}

int tool_same_model_shape(const kvq_model_info *a, const kvq_model_info *b) {
    return a->n_vocab == b->n_vocab && a->n_layers == b->n_layers && a->n_embd == b->n_embd;
}
