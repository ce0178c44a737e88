/* Helpers shared by the engine subcommands (run, logits, dump-kv, inspect). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools.h"

#define DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"

static int readable(const char *p) { return access(p, R_OK) == 0; }

/* Directory of the running executable (Linux), "" if unknown. */
static void exe_dir(char *buf, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) { buf[0] = 0; return; }
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    else buf[0] = 0;
}

/* dst = a + b; -1 (dst = "") if it does not fit. */
static int join(char *dst, size_t cap, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la + lb + 1 > cap) { if (cap) dst[0] = 0; return -1; }
    memcpy(dst, a, la);
    memcpy(dst + la, b, lb + 1);
    return 0;
}

/* Repository root: the first of ., the executable's parent directory and its
 * own directory that holds scripts/fetch-models.sh. */
static int repo_root(char *buf, size_t cap) {
    char ed[PATH_MAX], cand[3][PATH_MAX], p[PATH_MAX];
    exe_dir(ed, sizeof ed);
    join(cand[0], sizeof cand[0], ".", "");
    join(cand[1], sizeof cand[1], ed, "/..");
    join(cand[2], sizeof cand[2], ed, "");
    for (int i = 0; i < 3; i++)
        if (cand[i][0] && !join(p, sizeof p, cand[i], "/scripts/fetch-models.sh") && readable(p))
            return join(buf, cap, cand[i], "") == 0;
    return 0;
}

int tool_default_model(char *buf, size_t cap, int fetch) {
    const char *env = getenv("KVQ_MODELS_DIR");
    char root[PATH_MAX], dir[PATH_MAX];
    int have_root = repo_root(root, sizeof root);
    if (env && *env && !join(dir, sizeof dir, env, "/") && !join(buf, cap, dir, DEFAULT_MODEL) && readable(buf)) return 0;
    if (!join(buf, cap, "models/", DEFAULT_MODEL) && readable(buf)) return 0;
    if (have_root && !join(dir, sizeof dir, root, "/models/") && !join(buf, cap, dir, DEFAULT_MODEL) && readable(buf))
        return 0;
    if (!fetch || !have_root) return -1;
    /* the tool (never the library) may install the default model */
    char cmd[PATH_MAX + 64];
    if (join(dir, sizeof dir, "bash '", root) || join(cmd, sizeof cmd, dir, "/scripts/fetch-models.sh' --default"))
        return -1;
    fprintf(stderr, "kvq: default model missing, running %s\n", cmd);
    if (system(cmd) != 0) return -1;
    if (join(dir, sizeof dir, root, "/models/") || join(buf, cap, dir, DEFAULT_MODEL)) return -1;
    return readable(buf) ? 0 : -1;
}
