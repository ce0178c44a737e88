/* Progress lines and SIGINT handling for long-running tools (progress.h). */
#include "progress.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools.h"

/* the one piece of process state a signal handler can set */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    if (interrupted) { /* second Ctrl-C: default action */
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    interrupted = 1;
}

void tool_interrupt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int tool_interrupted(void) { return interrupted != 0; }

void tool_interrupt_clear(void) { interrupted = 0; }

void tool_progress_init(tool_progress *p, const char *tool) {
    memset(p, 0, sizeof *p);
    const char *off = getenv("KVQ_NO_PROGRESS");
    p->tty = isatty(STDERR_FILENO) && !(off && *off && strcmp(off, "0"));
    p->tool = tool;
    p->t0 = tool_now();
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (s < 0 || s > 1e7) snprintf(buf, cap, "?");
    else if (s < 60) snprintf(buf, cap, "%.0fs", s);
    else if (s < 3600) snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

void tool_progress_update(tool_progress *p, double done, double total, const char *unit, const char *fmt, ...) {
    if (!p->tty) return;
    double now = tool_now();
    if (p->shown && now - p->last < 0.25) return;
    p->last = now;
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    double el = now - p->t0, rate = el > 0 ? done / el : 0;
    char eta[32] = "?", spent[32];
    if (rate > 0 && total >= done) fmt_time(eta, sizeof eta, (total - done) / rate);
    fmt_time(spent, sizeof spent, el);
    fprintf(stderr, "\r\033[K[%s] %s  %.0f/%.0f %s  %.1f %s/s  elapsed %s  ETA %s", p->tool, msg, done, total, unit,
            rate, unit, spent, eta);
    fflush(stderr);
    p->shown = 1;
}

void tool_progress_clear(tool_progress *p) {
    if (p->tty && p->shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    p->shown = 0;
}
