/* kvq_model_load's reasons when a model file cannot be opened: each failure
 * names its cause (No such file, is a directory, Permission denied, empty,
 * not a GGUF file, unsupported version, truncated at byte N). No model needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvq_engine.h"
#include "testutil.h"

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "create %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n, "write %s", path);
    fclose(f);
}

/* Loads path; checks the code and that the reason contains want. */
static void expect(const char *path, int want_rc, const char *want) {
    kvq_model *m = NULL;
    char err[512] = "";
    int rc = kvq_model_load(&m, path, err, sizeof err);
    CHECK(rc == want_rc && m == NULL, "%s: rc %d, want %d (%s)", path, rc, want_rc, err);
    CHECK(strstr(err, want) != NULL, "%s: reason '%s' lacks '%s'", path, err, want);
    CHECK(strstr(err, path) != NULL, "%s: reason '%s' does not name the file", path, err);
    kvq_model_free(m);
}

int main(void) {
    char dir[] = "/tmp/kvq_test_model_open_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char p[256];

    snprintf(p, sizeof p, "%s/missing.gguf", dir);
    expect(p, KVQ_ERR_IO, "No such file or directory");
    expect(dir, KVQ_ERR_IO, "is a directory");

    char empty[256], text[256], v9[256], trunc[256], locked[256];
    snprintf(empty, sizeof empty, "%s/empty.gguf", dir);
    write_file(empty, "", 0);
    expect(empty, KVQ_ERR_TRUNCATED, "empty file");

    snprintf(text, sizeof text, "%s/readme.txt", dir);
    write_file(text, "hello, this is not a model\n", 27);
    expect(text, KVQ_ERR_FORMAT, "not a GGUF file");

    /* "GGUF", version 9 */
    static const unsigned char h9[24] = {'G', 'G', 'U', 'F', 9, 0, 0, 0};
    snprintf(v9, sizeof v9, "%s/v9.gguf", dir);
    write_file(v9, h9, sizeof h9);
    expect(v9, KVQ_ERR_FORMAT, "GGUF version 9 not supported");

    /* version 3, 1 tensor, 1000 metadata pairs, and the file ends: 24 bytes */
    static const unsigned char ht[24] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xe8, 3, 0, 0, 0, 0, 0, 0};
    snprintf(trunc, sizeof trunc, "%s/cut.gguf", dir);
    write_file(trunc, ht, sizeof ht);
    expect(trunc, KVQ_ERR_TRUNCATED, "truncated at byte 24");

    snprintf(locked, sizeof locked, "%s/locked.gguf", dir);
    write_file(locked, ht, sizeof ht);
    chmod(locked, 0);
    if (geteuid() != 0) expect(locked, KVQ_ERR_IO, "Permission denied"); /* root reads anything */

    unlink(empty);
    unlink(text);
    unlink(v9);
    unlink(trunc);
    unlink(locked);
    rmdir(dir);
    return tu_finish("test_model_open");
}
