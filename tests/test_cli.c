/*
 * The kvq CLI driven as a user drives it ($KVQ_CLI, set by CTest): usage
 * errors with their messages and exit code 2, --help of every subcommand,
 * model-open errors (exit 1), then with the models of models/ (skipped
 * without them unless CI is set): llama.cpp's aliases, a prompt longer than
 * -c, the interactive chat through a pipe (two turns, one cache) and a
 * pseudo-terminal (Ctrl-C stops a reply, /exit), Ctrl-C exit codes (run and
 * ppl: 130, ppl's JSON marked partial), Gemma's 18 layers compressed with
 * --compress-sliding. Each model run is a few tokens (fast under ASan too).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static const char *CLI;
static char SMOL[1024], GEMMA[1024], TEXT[1024];

typedef struct {
    pid_t pid;
    int in, out, err; /* the child's stdin (write end), stdout and stderr (read ends); -1 if closed */
    char o[1 << 16], e[1 << 16];
    size_t no, ne;
} child;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts CLI with args (NULL-terminated); pty_fd >= 0: the child's stdin and stdout are that terminal. */
static int spawn(child *c, const char *const *args, int pty_slave) {
    int pi[2], po[2], pe[2];
    memset(c, 0, sizeof *c);
    if (pipe(pi) || pipe(po) || pipe(pe)) return -1;
    const char *argv[64];
    int n = 0;
    argv[n++] = CLI;
    for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    c->pid = fork();
    if (c->pid < 0) return -1;
    if (c->pid == 0) {
        if (pty_slave >= 0) {
            setsid();
            dup2(pty_slave, 0);
            dup2(pty_slave, 1);
        } else {
            dup2(pi[0], 0);
            dup2(po[1], 1);
        }
        dup2(pe[1], 2);
        for (int fd = 3; fd < 64; fd++) close(fd);
        setenv("KVQ_NO_PROGRESS", "1", 1);
        execv(CLI, (char *const *)argv);
        _exit(127);
    }
    close(pi[0]);
    close(po[1]);
    close(pe[1]);
    c->in = pi[1];
    c->out = po[0];
    c->err = pe[0];
    if (pty_slave >= 0) { close(c->in); c->in = -1; close(c->out); c->out = -1; }
    return 0;
}

/* Reads what is there (waiting at most ms) from fd into buf. */
static void pump(int *fd, char *buf, size_t cap, size_t *n, int ms) {
    if (*fd < 0) return;
    struct pollfd p = {*fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return;
    char tmp[4096];
    ssize_t r = read(*fd, tmp, sizeof tmp);
    if (r <= 0) { close(*fd); *fd = -1; return; }
    size_t k = (size_t)r < cap - 1 - *n ? (size_t)r : cap - 1 - *n;
    memcpy(buf + *n, tmp, k);
    *n += k;
    buf[*n] = 0;
}

/* Pumps both outputs until want appears in out (or err when in_err), or timeout s. 1 if it appeared. */
static int wait_for(child *c, int *out_fd, char *buf, size_t *n, const char *want, double timeout) {
    double t0 = now();
    while (now() - t0 < timeout) {
        if (*n && strstr(buf, want)) return 1;
        pump(out_fd, buf, sizeof c->o, n, 50);
        pump(&c->err, c->e, sizeof c->e, &c->ne, 0);
        if (*out_fd < 0 && c->err < 0) break;
    }
    return *n && strstr(buf, want) != NULL;
}

/* Waits for the exit (draining outputs); the exit code, 128 + signal, or -1 on timeout (killed). */
static int finish(child *c, double timeout) {
    if (c->in >= 0) { close(c->in); c->in = -1; }
    double t0 = now();
    int st = 0;
    for (;;) {
        pump(&c->out, c->o, sizeof c->o, &c->no, 20);
        pump(&c->err, c->e, sizeof c->e, &c->ne, 20);
        pid_t w = waitpid(c->pid, &st, WNOHANG);
        if (w == c->pid) break;
        if (now() - t0 > timeout) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            return -1;
        }
    }
    while (c->out >= 0 || c->err >= 0) {
        pump(&c->out, c->o, sizeof c->o, &c->no, 20);
        pump(&c->err, c->e, sizeof c->e, &c->ne, 20);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs CLI with args and stdin text; checks the exit code and that stderr holds want (NULL: no check). */
static void expect(const char *const *args, const char *input, int want_rc, const char *want, child *c) {
    CHECK(spawn(c, args, -1) == 0, "spawn");
    if (input) {
        ssize_t w = write(c->in, input, strlen(input));
        (void)w;
    }
    int rc = finish(c, 600);
    char line[512] = "";
    for (int i = 0; args[i] && strlen(line) < 400; i++) snprintf(line + strlen(line), sizeof line - strlen(line), " %s", args[i]);
    CHECK(rc == want_rc, "kvq%s: exit %d, want %d; stderr: %.600s", line, rc, want_rc, c->e);
    if (want) CHECK(strstr(c->e, want) != NULL, "kvq%s: stderr lacks '%s': %.600s", line, want, c->e);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_usage(void) {
    child c;
    /* the cases of issue 15, each with its message */
    expect(ARGS("run", "-p", "Hi", "-n", "3", "--foo"), NULL, 2, "unknown option '--foo'", &c);
    expect(ARGS("run", "-p", "Hi", "-i", "--foo"), NULL, 2, "unknown option '--foo'", &c);
    expect(ARGS("run", "-p", "Hi", "--json"), NULL, 2, "unknown option '--json'", &c);
    expect(ARGS("ppl", "-f", "x", "--compress-sliding", "--bar"), NULL, 2, "unknown option '--bar'", &c);
    expect(ARGS("inspect", "--threads", "1", "m.gguf"), NULL, 2, "unknown option '--threads'", &c);
    expect(ARGS("run", "-p", "Hi", "-n", "abc"), NULL, 2, "-n 'abc': not an integer", &c);
    expect(ARGS("run", "-p", "Hi", "--temp", "abc"), NULL, 2, "--temp 'abc': not a number", &c);
    expect(ARGS("run", "-p", "Hi", "--top-p", "5"), NULL, 2, "accepted: 0..1", &c);
    expect(ARGS("run", "-p", "Hi", "--top-k", "-3"), NULL, 2, "--top-k -3: out of range", &c);
    expect(ARGS("run", "-p", "Hi", "--batch", "-1"), NULL, 2, "--batch -1: out of range", &c);
    expect(ARGS("run", "-p", "Hi", "-n", "-5"), NULL, 2, "-n -5: out of range (accepted: -1..", &c);
    expect(ARGS("run", "-p", "Hi", "--threads", "0"), NULL, 2, "--threads 0: out of range (accepted: 1..256)", &c);
    expect(ARGS("run", "-p", "Hi", "-n"), NULL, 2, "option -n needs a value", &c);
    expect(ARGS("ppl", "-f", "x", "--ctx", "2"), NULL, 2, "--ctx 2: out of range (accepted: 8..", &c);
    expect(ARGS("needle", "--ctx", "8"), NULL, 2, "--ctx 8: out of range (accepted: 16..", &c);
    expect(ARGS("run", "-p", "Hi", "--cache-k", "tq-mse:9"), NULL, 2, "tq-mse takes widths 1..8", &c);
    expect(ARGS("run", "-p", "Hi", "--cache-k", "foo"), NULL, 2, "methods: f32 f16", &c);
    expect(ARGS("run", "-p", "Hi", "--cache-k", "q8_0"), NULL, 2, "llama.cpp's q8_0 is kvq's q8", &c);
    expect(ARGS("kld", "-f", "x", "--policies", "q8 tq-mse:3/foo"), NULL, 2, "value method 'foo'", &c);
    expect(ARGS("run", "-p", "Hi", "-ngl", "99"), NULL, 2, "runs on the CPU", &c);
    expect(ARGS("bench", "-ngl", "99"), NULL, 2, "Python/PyTorch", &c);
    expect(ARGS("run", "-p", "Hi", "-r", "User:"), NULL, 2, "--reverse-prompt", &c);
    expect(ARGS("memplan"), NULL, 2, "--mem SIZE is required", &c);
    expect(ARGS("memplan", "--mem", "lots"), NULL, 2, "--mem 'lots': not a size", &c);
    expect(ARGS("run"), NULL, 2, "a prompt is required", &c);
    expect(ARGS("quantize", "--weights", "tq-mse:4"), NULL, 2, "-o OUT.gguf is required", &c);
    expect(ARGS("quantize", "-o", "/tmp/x.gguf"), NULL, 2, "--weights SPEC is required", &c);
    expect(ARGS("nosuch"), NULL, 2, "unknown command 'nosuch'", &c);
    /* --help of every subcommand: exit 0, the usage on stdout */
    static const char *cmds[] = {"codec-bench", "attn-bench", "logits", "inspect", "run", "dump-kv", "ppl",
                                 "kld", "needle", "gen-check", "bench", "memplan", "quantize"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        expect(ARGS(cmds[i], "--help"), NULL, 0, NULL, &c);
        char want[64];
        snprintf(want, sizeof want, "usage: kvq %s", cmds[i]);
        CHECK(strstr(c.o, want) != NULL, "%s --help: stdout lacks '%s'", cmds[i], want);
    }
    expect(ARGS("run", "--help"), NULL, 0, NULL, &c);
    CHECK(strstr(c.o, "-ctk") && strstr(c.o, "q8_0 as q8") && strstr(c.o, "--ctx-size") && strstr(c.o, "tq-mse:1..8"),
          "run --help names the aliases and the registry's methods");
    /* model files that cannot be opened: the real cause, exit 1 */
    expect(ARGS("run", "-m", "/nonexistent/m.gguf", "-p", "Hi"), NULL, 1, "No such file or directory", &c);
    expect(ARGS("run", "-m", "/tmp", "-p", "Hi"), NULL, 1, "is a directory", &c);
    char self[1024];
    snprintf(self, sizeof self, "%s", CLI); /* an ELF file, not a GGUF one */
    expect(ARGS("ppl", "-m", self, "-f", "/dev/null"), NULL, 1, "not a GGUF file", &c);
    expect(ARGS("inspect", "/nonexistent/m.gguf"), NULL, 1, "No such file or directory", &c);
}

static void test_model(void) {
    child c;
    /* llama.cpp's names: -t -s -c -ctk -ctv --ctx-size -n */
    expect(ARGS("run", "-m", SMOL, "-p", "The capital of France is", "-n", "3", "--temp", "0", "-t", "2", "-s", "1",
                "-c", "64", "-ctk", "q8_0", "-ctv", "q4_0"),
           NULL, 0, "cache q8/q4", &c);
    CHECK(strstr(c.o, "The capital of France is") != NULL, "run echoes the prompt: %.200s", c.o);
    CHECK(strstr(c.e, "bytes used") && strstr(c.e, "bytes allocated") && strstr(c.e, "layers: 30 of 30 compressed"),
          "run: used and allocated bytes, layers: %.600s", c.e);
    /* the prompt from a file, '-' = stdin */
    expect(ARGS("run", "-m", SMOL, "-f", "-", "-n", "2", "--temp", "0"), "The capital of France is", 0, NULL, &c);
    CHECK(strstr(c.o, "The capital of France is") != NULL, "-f -: the prompt from stdin: %.200s", c.o);
    /* a prompt longer than the context: a clear error, nothing run */
    char longp[4096] = "";
    for (int i = 0; i < 100; i++) strcat(longp, "one two three ");
    expect(ARGS("run", "-m", SMOL, "-p", longp, "-c", "64"), NULL, 1, "longer than", &c);
    CHECK(strstr(c.e, "the prompt is") && strstr(c.e, "-c"), "prompt too long: %.400s", c.e);
    /* prompt + n beyond the context: -n cut with a warning */
    expect(ARGS("run", "-m", SMOL, "-p", "The capital of France is", "-c", "8", "-n", "50", "--temp", "0"), NULL, 0,
           "-n 50 cut to", &c);
    CHECK(strstr(c.e, "stop: context length") != NULL, "cut -n: stopped at the context: %.400s", c.e);
    /* a key method known to fail: a warning */
    expect(ARGS("run", "-m", SMOL, "-p", "Hi", "-n", "1", "--cache-k", "qjl"), NULL, 0, "known to fail", &c);
    /* order-independent policy options: the same cache either way */
    expect(ARGS("run", "-m", SMOL, "-p", "Hi", "-n", "1", "--kv-window", "16", "--policy", "tq-mse:3"), NULL, 0,
           "cache tq-mse:3,w=16", &c);
    /* the chat through a pipe: two turns on one cache, then the end of input */
    expect(ARGS("run", "-m", SMOL, "-i", "-n", "6", "--temp", "0", "--cache-k", "tq-mse:4+chscale", "--cache-v",
                "tq-mse:4"),
           "My name is Bob.\nWhat is my name?\n", 0, "chat: 2 turn(s)", &c);
    size_t prompts = 0;
    for (const char *p = c.o; (p = strstr(p, "> ")); p += 2) prompts++;
    CHECK(prompts == 3, "chat: %zu prompts on stdout, want 3 (two turns, then the end): %.400s", prompts, c.o);
    /* coded weights: at load time, and through a file */
    expect(ARGS("run", "-m", SMOL, "-p", "The capital of France is", "-n", "4", "--temp", "0", "--weights", "q8"), NULL,
           0, "210 tensors at 8.5000 bits per weight", &c);
    expect(ARGS("run", "-m", SMOL, "-p", "Hi", "-n", "1", "--weights", "qjl"), NULL, 1, "blk.0.attn_q.weight", &c);
    expect(ARGS("run", "-m", SMOL, "-p", "Hi", "-n", "1", "--weights", "tq-mse:4@256"), NULL, 1,
           "cannot be cut into blocks of 256", &c);
    expect(ARGS("ppl", "-m", SMOL, "-f", "/dev/null", "--keep", "ffn"), NULL, 1, "--keep needs --weights", &c);
    char qout[64];
    snprintf(qout, sizeof qout, "/tmp/kvq_test_cli_%d.gguf", (int)getpid());
    expect(ARGS("quantize", "-m", SMOL, "-o", qout, "--weights", "tq-mse:4", "--keep", "ffn_down"), NULL, 0, "MiB",
           &c);
    expect(ARGS("inspect", qout), NULL, 0, NULL, &c);
    CHECK(strstr(c.o, "kvq") != NULL, "inspect names the coded tensors: %.600s", c.o);
    expect(ARGS("run", "-m", qout, "-p", "Hi", "-n", "2", "--temp", "0"), NULL, 0, NULL, &c);
    /* calibrated: the plans' stats go in the file (attention matrices only, to stay quick) */
    expect(ARGS("quantize", "-m", SMOL, "-o", qout, "--weights", "tq-mse:4+chscale", "--keep", "token_embd,output,ffn"),
           NULL, 0, "tq-mse:4+chscale: 120 tensors", &c);
    expect(ARGS("run", "-m", qout, "-p", "Hi", "-n", "2", "--temp", "0"), NULL, 0, NULL, &c);
    remove(qout);
    /* /exit ends it, -p is the first turn */
    expect(ARGS("run", "-m", SMOL, "-cnv", "-p", "Hello", "-n", "4", "--temp", "0"), "/exit\nnever read\n", 0,
           "chat: 1 turn(s)", &c);
}

/* Ctrl-C: the reply stops, the chat goes on; run and ppl exit 130 */
static void test_sigint(void) {
    child c;
    /* kvq run: SIGINT during generation -> the stats, exit 130 */
    CHECK(spawn(&c, ARGS("run", "-m", SMOL, "-p", "Once upon a time", "-n", "2000", "--temp", "0"), -1) == 0, "spawn");
    close(c.in);
    c.in = -1;
    int got = wait_for(&c, &c.out, c.o, &c.no, "Once upon a time", 120);
    usleep(300000);
    kill(c.pid, SIGINT);
    int rc = finish(&c, 120);
    CHECK(got && rc == 130 && strstr(c.e, "stop: interrupted"), "run after SIGINT: exit %d; %.400s", rc, c.e);
    /* kvq ppl: SIGINT after the first window -> summary marked partial, exit 130 */
    CHECK(spawn(&c, ARGS("ppl", "-m", SMOL, "-f", TEXT, "--ctx", "64", "--chunks", "200", "--json", "--per-window"), -1) == 0,
          "spawn");
    got = wait_for(&c, &c.out, c.o, &c.no, "\"record\":\"window\"", 120);
    kill(c.pid, SIGINT);
    rc = finish(&c, 120);
    CHECK(got && rc == 130, "ppl after SIGINT: exit %d; %.300s", rc, c.e);
    CHECK(strstr(c.o, "\"record\":\"summary\"") && strstr(c.o, "\"partial\":true"), "ppl summary partial: %.300s",
          c.o + (c.no > 300 ? c.no - 300 : 0));
    /* the chat on a pseudo-terminal: Ctrl-C stops the reply, the next line is read, /exit ends it */
    int mfd = posix_openpt(O_RDWR | O_NOCTTY);
    CHECK(mfd >= 0 && grantpt(mfd) == 0 && unlockpt(mfd) == 0, "pty");
    if (mfd < 0) return;
    int sfd = open(ptsname(mfd), O_RDWR | O_NOCTTY);
    CHECK(sfd >= 0, "pty slave");
    CHECK(spawn(&c, ARGS("run", "-m", SMOL, "-i", "-n", "2000", "--temp", "0"), sfd) == 0, "spawn on a pty");
    close(sfd);
    char o[1 << 16];
    size_t no = 0;
    o[0] = 0;
    const char *l1 = "Tell me a long story about a dragon.\n";
    got = wait_for(&c, &mfd, o, &no, "> ", 120);
    ssize_t w = write(mfd, l1, strlen(l1));
    (void)w;
    /* the reply streams: wait for some text after the echoed line, then Ctrl-C */
    size_t mark = no;
    double t0 = now();
    while (no < mark + 80 && now() - t0 < 120) pump(&mfd, o, sizeof o, &no, 50);
    kill(c.pid, SIGINT);
    size_t at_kill = no;
    t0 = now();
    while (!strstr(o + at_kill, "> ") && now() - t0 < 120 && mfd >= 0) {
        pump(&mfd, o, sizeof o, &no, 50);
        pump(&c.err, c.e, sizeof c.e, &c.ne, 0);
    }
    int back = strstr(o + at_kill, "> ") != NULL;
    w = write(mfd, "/exit\n", 6);
    rc = finish(&c, 120);
    close(mfd);
    CHECK(got && back && rc == 0 && strstr(c.e, "reply stopped (Ctrl-C)") && strstr(c.e, "chat: 1 turn(s)"),
          "chat on a pty: prompt %d, back at the prompt %d, exit %d; %.400s", got, back, rc, c.e);
}

static void test_gemma(void) {
    child c;
    expect(ARGS("run", "-m", GEMMA, "-p", "The capital of France is", "-n", "2", "--temp", "0", "--policy", "tq-mse:4",
                "--compress-sliding"),
           NULL, 0, "layers: 18 of 18 compressed", &c);
    expect(ARGS("run", "-m", GEMMA, "-p", "The capital of France is", "-n", "2", "--temp", "0", "--policy", "tq-mse:4"),
           NULL, 0, "15 sliding-window layers kept f16", &c);
}

static int have(char *buf, size_t cap, const char *root, const char *rel) {
    snprintf(buf, cap, "%s/%s", root, rel);
    return access(buf, R_OK) == 0;
}

int main(void) {
    CLI = getenv("KVQ_CLI");
    if (!CLI || access(CLI, X_OK)) {
        fprintf(stderr, "test_cli: SKIP: $KVQ_CLI is not the kvq binary (run through CTest)\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    test_usage();
    const char *root = getenv("KVQ_ROOT");
    const char *ci = getenv("CI");
    int smol = root && have(SMOL, sizeof SMOL, root, "models/SmolLM2-135M-Instruct.Q4_1.gguf") &&
               have(TEXT, sizeof TEXT, root, "corpora/prose.txt");
    int gemma = root && have(GEMMA, sizeof GEMMA, root, "models/gemma-3-270m-q4_k_m.gguf");
    if (smol) {
        test_model();
        test_sigint();
    } else {
        fprintf(stderr, "test_cli: SmolLM2 or corpora/prose.txt missing: model cases skipped\n");
        CHECK(!(ci && !strcmp(ci, "true")), "CI needs the models (scripts/fetch-models.sh)");
    }
    if (gemma) test_gemma();
    else fprintf(stderr, "test_cli: Gemma 3 missing: its case skipped\n");
    return tu_finish("test_cli");
}
