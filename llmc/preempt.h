// Preemption: SIGUSR1 or SIGTERM (from the scheduler, or SIGUSR1 forwarded by mpirun) asks the
// run to stop. The handler only records the request; the training loop finishes the step in
// progress, all ranks agree through the step's loss all-reduce (a slot of it carries each rank's
// request), every rank writes the checkpoint of that step (also with -n 0), and the run exits 0
// without a model_final.bin (exit 1, with an error, when that checkpoint cannot be written). A second signal ends the process at once (exit 128 + signal): the
// checkpoint being written, if any, then has no DONE manifest and is never resumed from.
#ifndef LLMC_PREEMPT_H
#define LLMC_PREEMPT_H

#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"
#include "logger.h"

static volatile sig_atomic_t preempt_signals = 0; // signals received
static volatile sig_atomic_t preempt_signo = 0;   // the first one
static volatile sig_atomic_t preempt_step = 0;    // the step in progress (1-based), for messages
static const char* volatile preempt_phase = "the start-up"; // what the step is doing, for messages
static int preempt_rank = 0;

// Appends the decimal digits of v to buf at *len (async-signal-safe).
static void preempt_append_int(char* buf, int* len, long v) {
    char digits[24];
    int n = 0;
    if (v < 0) { buf[(*len)++] = '-'; v = -v; }
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
    while (n > 0) { buf[(*len)++] = digits[--n]; }
}

static void preempt_append(char* buf, int* len, const char* s) {
    while (*s) { buf[(*len)++] = *s++; }
}

static void preempt_handler(int sig) {
    preempt_signals++;
    char msg[256];
    int len = 0;
    preempt_append(msg, &len, "rank ");
    preempt_append_int(msg, &len, preempt_rank);
    preempt_append(msg, &len, sig == SIGTERM ? ": SIGTERM" : ": SIGUSR1");
    preempt_append(msg, &len, " during step ");
    preempt_append_int(msg, &len, preempt_step);
    if (preempt_signals >= 2) {
        preempt_append(msg, &len, ": second signal, exiting now without a checkpoint\n");
        if (write(STDERR_FILENO, msg, (size_t)len) < 0) { /* nothing to do */ }
        _exit(128 + sig);
    }
    preempt_signo = sig;
    preempt_append(msg, &len, ": finishing the step, then a checkpoint and exit (a second signal exits at once)\n");
    if (write(STDERR_FILENO, msg, (size_t)len) < 0) { /* nothing to do */ }
}

static void preempt_install(int rank) {
    preempt_rank = rank;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = preempt_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

// This rank's vote for the step's agreement: 1 once a signal arrived.
static float preempt_requested(void) { return preempt_signals > 0 ? 1.0f : 0.0f; }

// After the checkpoint of `step` is complete (every rank): says so on stdout and in main.log.
static void preempt_report(Logger* logger, const char* log_dir, int step, int rank) {
    if (rank != 0) { return; }
    if (log_dir[0] == '\0') {
        printf("preempted after step %d: no log dir (-o), so no checkpoint; exiting\n", step);
    } else {
        printf("preempted after step %d: checkpoint %s/DONE_%08d written; exiting (resume with -y 1)\n", step, log_dir,
               step);
    }
    fflush(stdout);
    logger_line(logger, "s:%d preempted checkpoint:%s\n", step, log_dir[0] ? "written" : "none");
}

#endif
