// A failed rank stops the job: a watchdog thread on every rank ends the process (exit 1, with
// a line naming the rank, the step and what it waited for) when one wait for the other ranks in
// a collective lasts longer than -wt seconds (default 45, 0 = off), so a peer that died or hangs
// never leaves the others waiting: each survivor stops on its own, and mpirun or srun then ends
// the rest. Waits that may legitimately be long (the first collective of a run, the one after
// rank 0 samples text, a checkpoint's barrier) get 10 times the timeout (watchdog_grace).
// The trainers arm it around every blocking collective (CPU: each ring exchange; GPU: each NCCL
// call, which blocks in the emulator's --check builds, and each host wait on the device).
#ifndef LLMC_WATCHDOG_H
#define LLMC_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include "utils.h"
#include "preempt.h"

static double watchdog_timeout_s = 0.0;   // -wt; 0 = off
static int watchdog_rank = 0;
static int64_t watchdog_deadline_ms = 0;  // 0 = not waiting; read by the thread (atomic access)
static const char* watchdog_what = "";
static int watchdog_grace_next = 1;       // the next wait gets the long timeout (the run's first one)
static int64_t watchdog_span_deadline_ms = 0; // 0 = no span watched (watchdog_span_begin); atomic access
static const char* watchdog_span_what = "";

static double watchdog_span_limit_s(void) { return 10.0 * watchdog_timeout_s; } // watchdog_span_begin

static int64_t watchdog_now_ms(void) { return (int64_t)(now_seconds() * 1000.0); }

static void* watchdog_thread(void* arg) {
    (void)arg;
    for (;;) {
        usleep(100000);
        int64_t deadline = __atomic_load_n(&watchdog_deadline_ms, __ATOMIC_ACQUIRE);
        int64_t span = __atomic_load_n(&watchdog_span_deadline_ms, __ATOMIC_ACQUIRE);
        if (span > 0 && watchdog_now_ms() > span) {
            fprintf(stderr, "error: rank %d: step %d, %s: %s did not end within %.0f s (10 x -wt: blocked behind a "
                    "collective with a peer that has died or hangs); ending the job\n", watchdog_rank, (int)preempt_step,
                    preempt_phase, watchdog_span_what, watchdog_span_limit_s());
            fflush(stderr);
            _exit(1);
        }
        if (deadline > 0 && watchdog_now_ms() > deadline) {
            fprintf(stderr, "error: rank %d: step %d, %s: no answer from the other ranks within %.0f s (%s-wt) while "
                    "waiting for %s (a peer has died or hangs); ending the job\n", watchdog_rank, (int)preempt_step,
                    preempt_phase, watchdog_timeout_s * (watchdog_grace_next ? 10.0 : 1.0),
                    watchdog_grace_next ? "10 x " : "", watchdog_what);
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

static void watchdog_start(int rank, double timeout_s) {
    watchdog_rank = rank;
    watchdog_timeout_s = timeout_s;
    if (timeout_s <= 0.0) { return; }
    pthread_t t;
    if (pthread_create(&t, NULL, watchdog_thread, NULL) != 0) { fail("cannot start the watchdog thread"); }
    pthread_detach(t);
}

// The next wait may take 10 times the timeout (all ranks call it alike).
static void watchdog_grace(void) { watchdog_grace_next = 1; }

// Seconds the next wait may last.
static double watchdog_limit_s(void) { return watchdog_timeout_s * (watchdog_grace_next ? 10.0 : 1.0); }

static void watchdog_arm(const char* what) {
    if (watchdog_timeout_s <= 0.0) { return; }
    watchdog_what = what;
    __atomic_store_n(&watchdog_deadline_ms, watchdog_now_ms() + (int64_t)(watchdog_limit_s() * 1000.0),
                     __ATOMIC_RELEASE);
}

// After a completed wait; end_grace: it was the wait the grace was for (a ring exchange, a host
// wait on the device), not an NCCL call that only enqueues on a real GPU.
static void watchdog_disarm_after(int end_grace) {
    if (watchdog_timeout_s <= 0.0) { return; }
    __atomic_store_n(&watchdog_deadline_ms, (int64_t)0, __ATOMIC_RELEASE);
    if (end_grace) { watchdog_grace_next = 0; }
}

static void watchdog_disarm(void) { watchdog_disarm_after(1); }

// A span of host work that must not block for long (the GPU trainer's kernel launches of a
// micro-step: a launch blocks once the launch queue fills behind a stalled stream), watched beside
// (and independently of) the waits above: the job ends if it lasts longer than 10 times -wt (the
// span includes the host's own work, and under the emulator the kernels themselves).
static void watchdog_span_begin(const char* what) {
    if (watchdog_timeout_s <= 0.0) { return; }
    watchdog_span_what = what;
    __atomic_store_n(&watchdog_span_deadline_ms, watchdog_now_ms() + (int64_t)(watchdog_span_limit_s() * 1000.0),
                     __ATOMIC_RELEASE);
}

static void watchdog_span_end(void) {
    if (watchdog_timeout_s <= 0.0) { return; }
    __atomic_store_n(&watchdog_span_deadline_ms, (int64_t)0, __ATOMIC_RELEASE);
}

#endif
