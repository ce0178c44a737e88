/*
 * Progress lines and SIGINT handling for long-running tools (bench, ppl, ...).
 * Progress goes to stderr only when stderr is a terminal (and KVQ_NO_PROGRESS
 * is unset): one line rewritten in place, at most 4 times a second, with the
 * rate and an ETA. After tool_interrupt_install(), the first Ctrl-C only sets
 * a flag that long loops poll (tool_interrupted) so they can stop after the
 * current step and keep the results already written; a second Ctrl-C kills.
 */
#ifndef KVQ_TOOLS_PROGRESS_H
#define KVQ_TOOLS_PROGRESS_H

typedef struct tool_progress {
    int tty;          /* progress is shown */
    const char *tool; /* prefix, e.g. "bench" */
    double t0;        /* start (tool_now) */
    double last;      /* last line printed */
    int shown;        /* a line is on the terminal */
} tool_progress;

void tool_progress_init(tool_progress *p, const char *tool);
/*
 * Shows "[tool] MESSAGE  done/total units  R units/s  ETA" (rate over the
 * time since init, for the units counted in `done`). msg is printf-style.
 */
void tool_progress_update(tool_progress *p, double done, double total, const char *unit, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Clears the progress line (call before printing other text to stderr). */
void tool_progress_clear(tool_progress *p);

/* Ctrl-C sets the flag read by tool_interrupted (a second one terminates). */
void tool_interrupt_install(void);
int tool_interrupted(void);
/* Forgets a Ctrl-C already handled (kvq run -i: one stops the current reply only). */
void tool_interrupt_clear(void);

#endif
