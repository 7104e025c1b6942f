// Fault injection for the resilience tests (-fi KIND@STEP[:RANK], rank 0 if not given): the
// step numbers are those of main.log (1-based). KIND is
//   nan       this rank's loss and gradients of step STEP are NaN
//   spike     this rank's loss of step STEP is reported 100 times too large (gradients intact)
//   die       this rank kills itself (SIGKILL) as step STEP begins
//   hang      this rank stops answering (sleeps forever) as step STEP begins
//   die_ckpt  this rank kills itself in the checkpoint write of step STEP, after its state file
//             is written and before the DONE manifest
//   preempt   this rank sends itself SIGUSR1 as step STEP begins (a preemption at a known step)
//   hang_fwd  this rank stops answering inside step STEP, after issuing its first forward
//   hang_ckpt this rank stops answering in the checkpoint write of step STEP, after its state file
//   hang_eval this rank stops answering in the HellaSwag evaluation after step STEP, after its forwards
#ifndef LLMC_FAULTS_H
#define LLMC_FAULTS_H

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"

typedef enum {
    FAULT_NONE, FAULT_NAN, FAULT_DIE, FAULT_HANG, FAULT_DIE_CKPT, FAULT_SPIKE, FAULT_USR1, FAULT_HANG_FWD, FAULT_HANG_CKPT,
    FAULT_HANG_EVAL
} FaultKind;
#define FAULT_KINDS 10

typedef struct {
    FaultKind kind;
    int step, rank;
} Fault;

static Fault run_fault = {FAULT_NONE, -1, 0}; // this run's -fi, set by the trainer

static Fault fault_parse(const char* spec) {
    Fault f = {FAULT_NONE, -1, 0};
    if (spec == NULL || spec[0] == '\0') { return f; }
    static const char* names[] = {"", "nan", "die", "hang", "die_ckpt", "spike", "preempt", "hang_fwd", "hang_ckpt",
                                  "hang_eval"};
    char kind[32];
    int step = -1, rank = 0, used = 0;
    int n = sscanf(spec, "%31[a-z_]@%d%n:%d%n", kind, &step, &used, &rank, &used);
    for (int k = 1; k < FAULT_KINDS && n >= 2; k++) {
        if (strcmp(kind, names[k]) == 0) { f.kind = (FaultKind)k; }
    }
    if (n < 2 || f.kind == FAULT_NONE || spec[used] != '\0' || step < 1 || rank < 0) {
        fail("-fi %s: expected KIND@STEP[:RANK] with KIND nan, spike, die, hang, die_ckpt, preempt, hang_fwd, "
             "hang_ckpt or hang_eval", spec);
    }
    f.step = step;
    f.rank = rank;
    return f;
}

static int fault_is(const Fault* f, FaultKind kind, int step, int rank) {
    return f->kind == kind && f->step == step && f->rank == rank;
}

// At the start of step `step` (1-based): die or hang when told to.
static void fault_step_begin(const Fault* f, int step, int rank) {
    if (fault_is(f, FAULT_DIE, step, rank)) {
        fprintf(stderr, "fault injection: rank %d kills itself at step %d\n", rank, step);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (fault_is(f, FAULT_USR1, step, rank)) {
        fprintf(stderr, "fault injection: rank %d sends itself SIGUSR1 at step %d\n", rank, step);
        fflush(stderr);
        raise(SIGUSR1);
    }
    if (fault_is(f, FAULT_HANG, step, rank)) {
        fprintf(stderr, "fault injection: rank %d hangs at step %d\n", rank, step);
        fflush(stderr);
        for (;;) { sleep(1000); }
    }
}

// The factor on this rank's loss of step `step` (NaN for nan, 100 for spike, else 1), and on its
// gradients (NaN for nan, else 1).
static float fault_loss_factor(const Fault* f, int step, int rank) {
    if (fault_is(f, FAULT_NAN, step, rank)) { return NAN; }
    return fault_is(f, FAULT_SPIKE, step, rank) ? 100.0f : 1.0f;
}

static float fault_grad_factor(const Fault* f, int step, int rank) {
    return fault_is(f, FAULT_NAN, step, rank) ? NAN : 1.0f;
}

// This rank stops answering (sleeps forever) where `kind` at `step` says, naming `where`.
static void fault_hang_at(const Fault* f, FaultKind kind, int step, int rank, const char* where) {
    if (fault_is(f, kind, step, rank)) {
        fprintf(stderr, "fault injection: rank %d stops answering in %s of step %d\n", rank, where, step);
        fflush(stderr);
        for (;;) { sleep(1000); }
    }
}

// Inside the checkpoint write of step `step`, after this rank's state file.
static void fault_in_checkpoint(const Fault* f, int step, int rank) {
    fault_hang_at(f, FAULT_HANG_CKPT, step, rank, "the checkpoint write");
    if (fault_is(f, FAULT_DIE_CKPT, step, rank)) {
        fprintf(stderr, "fault injection: rank %d kills itself inside checkpoint %d\n", rank, step);
        fflush(stderr);
        raise(SIGKILL);
    }
}

#endif
