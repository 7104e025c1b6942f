// Fault injection for the resilience tests (-fi KIND@STEP[:RANK], rank 0 if not given, or several
// of them separated by commas): the step numbers are those of main.log (1-based). KIND is
//   nan       this rank's loss and gradients of step STEP are NaN
//   nan_grad  this rank's gradients of step STEP are NaN, its loss is not (under -ls between syncs
//             only its replica's gradient norm sees it)
//   nan_pg, inf_pg   the pseudo-gradient messages this rank packs for the outer syncs after step
//             STEP (-ls) have a NaN (an infinity) as their first value
//   spike     this rank's loss of step STEP is reported 100 times too large (gradients intact)
//   die       this rank kills itself (SIGKILL) as step STEP begins
//   hang      this rank stops answering (sleeps forever) as step STEP begins
//   die_ckpt  this rank kills itself in the checkpoint write of step STEP, after its state file
//             is written and before the DONE manifest
//   die_sync  (-ls) this rank kills itself as the outer sync after step STEP begins, before the
//             finiteness flag of its pseudo-gradients
//   die_xchg  (-ls) the same after that flag, as the exchange of the pseudo-gradients is issued
//   die_join  (-le 1) this rank, started again to rejoin, kills itself once rank 0 has admitted it
//             after the outer sync of step STEP or a later one, before it builds the grown communicator
//   die_ring  (-le 1, the emulated GPU trainer only) this rank kills itself inside the loss all-reduce
//             of step STEP, just before its last ring send: the all-reduce ends on the ranks that
//             get their last chunk around the ring the other way, not on the next rank (a collective
//             that ends on some survivors only, as NCCL's rings can)
//   preempt   this rank sends itself SIGUSR1 as step STEP begins (a preemption at a known step)
//   enospc    this rank's checkpoint write of step STEP fails as a full disk would (ENOSPC), half
//             way through its state file (rank 0 has written the model file by then)
//   enospc_model, enospc_done   the same in rank 0's model file (after its first 5 KiB) or in its
//             DONE manifest (after 16 bytes) of checkpoint STEP
//   enospc_final   the same in rank 0's first try at model_final.bin after the last step, STEP
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
    FAULT_NONE, FAULT_NAN, FAULT_DIE, FAULT_HANG, FAULT_DIE_CKPT, FAULT_SPIKE, FAULT_USR1, FAULT_ENOSPC,
    FAULT_ENOSPC_MODEL, FAULT_ENOSPC_DONE, FAULT_ENOSPC_FINAL, FAULT_HANG_FWD, FAULT_HANG_CKPT, FAULT_HANG_EVAL,
    FAULT_NAN_GRAD, FAULT_NAN_PG, FAULT_INF_PG, FAULT_DIE_SYNC, FAULT_DIE_XCHG, FAULT_DIE_JOIN, FAULT_DIE_RING
} FaultKind;

#define FAULT_MAX 16

typedef struct {
    int count;
    FaultKind kind[FAULT_MAX];
    int step[FAULT_MAX], rank[FAULT_MAX];
} Fault;

static Fault run_fault = {0, {FAULT_NONE}, {0}, {0}}; // this run's -fi, set by the trainer

static Fault fault_parse(const char* spec) {
    Fault f;
    memset(&f, 0, sizeof(f));
    if (spec == NULL || spec[0] == '\0') { return f; }
    static const char* names[] = {"", "nan", "die", "hang", "die_ckpt", "spike", "preempt", "enospc", "enospc_model",
                                  "enospc_done", "enospc_final", "hang_fwd", "hang_ckpt", "hang_eval", "nan_grad",
                                  "nan_pg", "inf_pg", "die_sync", "die_xchg", "die_join", "die_ring"};
    const int num_names = (int)(sizeof(names) / sizeof(names[0]));
    const char* at = spec;
    for (;;) {
        char kind[32];
        int step = -1, rank = 0, used = 0;
        FaultKind k = FAULT_NONE;
        int n = sscanf(at, "%31[a-z_]@%d%n:%d%n", kind, &step, &used, &rank, &used);
        for (int i = 1; i < num_names && n >= 2; i++) {
            if (strcmp(kind, names[i]) == 0) { k = (FaultKind)i; }
        }
        if (n < 2 || k == FAULT_NONE || (at[used] != '\0' && at[used] != ',') || step < 1 || rank < 0 ||
            f.count == FAULT_MAX) {
            fail("-fi %s: expected KIND@STEP[:RANK] (at most %d, separated by commas) with KIND nan, spike, die, "
                 "hang, die_ckpt, preempt, enospc, enospc_model, enospc_done, enospc_final, hang_fwd, hang_ckpt, "
                 "hang_eval, nan_grad, nan_pg, inf_pg, die_sync, die_xchg, die_join or die_ring", spec, FAULT_MAX);
        }
        f.kind[f.count] = k;
        f.step[f.count] = step;
        f.rank[f.count] = rank;
        f.count++;
        if (at[used] == '\0') { break; }
        at += used + 1;
    }
    return f;
}

static int fault_is(const Fault* f, FaultKind kind, int step, int rank) {
    for (int i = 0; i < f->count; i++) {
        if (f->kind[i] == kind && f->step[i] == step && f->rank[i] == rank) { return 1; }
    }
    return 0;
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
// gradients (NaN for nan and nan_grad, else 1).
static float fault_loss_factor(const Fault* f, int step, int rank) {
    if (fault_is(f, FAULT_NAN, step, rank)) { return NAN; }
    return fault_is(f, FAULT_SPIKE, step, rank) ? 100.0f : 1.0f;
}

static float fault_grad_factor(const Fault* f, int step, int rank) {
    return fault_is(f, FAULT_NAN, step, rank) || fault_is(f, FAULT_NAN_GRAD, step, rank) ? NAN : 1.0f;
}

// nan_pg, inf_pg: the value this rank's pseudo-gradient messages of the outer syncs after step
// `step` start with (NaN, infinity), or 0 (no fault).
static float fault_pseudo_grad(const Fault* f, int step, int rank) {
    if (fault_is(f, FAULT_NAN_PG, step, rank)) { return NAN; }
    return fault_is(f, FAULT_INF_PG, step, rank) ? INFINITY : 0.0f;
}

// The emulated GPU trainer's way to stop answering its peers' collectives too (the emulator's
// `peer stops` fault, emu_nccl_stop_answering); NULL elsewhere (a hung process, no more).
static void (*fault_stop_hook)(void) = NULL;

// The emulated GPU trainer's way to die inside a collective (emu_nccl_die_in_next_ring); NULL elsewhere.
static void (*fault_ring_hook)(void) = NULL;

// die_ring at `step`: this rank dies inside the collective that comes next (the step's loss
// all-reduce), before its last ring send; refused where no emulator can do that.
static void fault_die_in_ring(const Fault* f, int step, int rank) {
    if (!fault_is(f, FAULT_DIE_RING, step, rank)) { return; }
    if (!fault_ring_hook) { fail("-fi die_ring: only the emulated GPU trainer can die inside a collective"); }
    fprintf(stderr, "fault injection: rank %d kills itself inside the loss all-reduce of step %d, before its last ring "
            "send\n", rank, step);
    fflush(stderr);
    fault_ring_hook();
}

// This rank stops answering (sleeps forever) where `kind` at `step` says, naming `where`.
static void fault_hang_at(const Fault* f, FaultKind kind, int step, int rank, const char* where) {
    if (fault_is(f, kind, step, rank)) {
        fprintf(stderr, "fault injection: rank %d stops answering in %s of step %d\n", rank, where, step);
        fflush(stderr);
        if (fault_stop_hook) { fault_stop_hook(); }
        for (;;) { sleep(1000); }
    }
}

// This rank kills itself (SIGKILL) where `kind` at `step` says, naming `where`.
static void fault_die_at(const Fault* f, FaultKind kind, int step, int rank, const char* where) {
    if (fault_is(f, kind, step, rank)) {
        fprintf(stderr, "fault injection: rank %d kills itself in %s after step %d\n", rank, where, step);
        fflush(stderr);
        raise(SIGKILL);
    }
}

// The same where `kind` names `step` or an earlier one.
static void fault_die_from(const Fault* f, FaultKind kind, int step, int rank, const char* where) {
    for (int i = 0; i < f->count; i++) {
        if (f->kind[i] == kind && f->step[i] <= step && f->rank[i] == rank) { fault_die_at(f, kind, f->step[i], rank, where); }
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

// The checkpoint writes of step `step` (kind: FAULT_ENOSPC, FAULT_ENOSPC_MODEL, ...), or the final
// model file (FAULT_ENOSPC_FINAL, step = the last step): when told to, the soft writes that
// follow (llmc/utils.h) fail with ENOSPC after `bytes` more bytes.
static void fault_disk_full(const Fault* f, FaultKind kind, int step, int rank, long bytes, const char* what) {
    if (!fault_is(f, kind, step, rank)) { return; }
    fprintf(stderr, "fault injection: rank %d's disk is full after %ld more bytes of %s\n", rank, bytes, what);
    fflush(stderr);
    soft_write.budget = bytes;
}

#endif
