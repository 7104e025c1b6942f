// Where a training step's time goes, by op family (-op 1): the trainer times its op calls and
// collectives (OP_TIMED; the GPU trainer's CUDA events, llmc/op_events.cuh, arrive a step late
// through the collect hook and op_profile_add_timed), the training loop brackets every step
// (op_profile_step_begin/end) and at the end prints a table (ms per step, share of the step,
// GFLOP/s and GB/s from the FLOPs and bytes counted from the shapes) and writes it as one
// {"profile": {...}} record into metrics.jsonl. "other" is the step time no family covers. Only the
// steps the average step time counts are summed. With -op 0 a timed call costs one branch.
#ifndef LLMC_OP_PROFILE_H
#define LLMC_OP_PROFILE_H

#include <stdio.h>
#include <string.h>
#include "utils.h"

typedef enum {
    OP_MATMUL_FWD, OP_MATMUL_BWD, OP_ATTENTION_FWD, OP_ATTENTION_BWD, OP_LAYERNORM, OP_GELU, OP_SOFTMAX_XENT,
    OP_ADAMW, OP_MUON, OP_GRAD_NORM, OP_COMM, OP_DATA, OP_FAMILIES
} OpFamily;

static const char* const op_family_names[OP_FAMILIES] = {
    "matmul forward", "matmul backward", "attention forward", "attention backward", "layernorm (fwd+bwd)",
    "gelu (fwd+bwd)", "softmax/cross-entropy", "adamw", "muon (newton-schulz)", "grad norm", "communication", "data loading"};
static const char* const op_family_keys[OP_FAMILIES] = {
    "matmul_forward", "matmul_backward", "attention_forward", "attention_backward", "layernorm", "gelu",
    "softmax_xent", "adamw", "muon", "grad_norm", "communication", "data_loading"};

enum { OP_SECONDS, OP_FLOPS, OP_BYTES };

typedef struct {
    int on;                        // -op 1
    int open;                      // a timed op is running: one inside it would count twice
    double step[OP_FAMILIES][3];   // this step's seconds, FLOPs and bytes per family
    double total[OP_FAMILIES][3];  // summed over the timed steps
    double step_seconds;           // the timed steps' wall time
    int steps;
    int in_step;                   // between op_profile_step_begin and _end (-op 1)
    // A trainer whose times arrive late (CUDA events) reads them here: at every step's end (timed:
    // that step counts) and once more at the end of the run (final: wait for the last ones).
    void (*collect)(int timed, int final);
    double side_seconds, side_bytes; // summed over the timed steps: work beside the rows (the GPU's
                                     // communication stream), overlapping them, so in no row
    const char* side_what;         // what side_seconds is (NULL: none)
    int events_per_step;           // CUDA events recorded per step (0: the CPU trainer records none)
    int peak_unknown;              // no peak of this device is known (the GPU trainer without -pk)
} OpProfile;

static OpProfile op_profile;

static void op_profile_add(OpFamily f, double seconds, double flops, double bytes) {
    op_profile.step[f][OP_SECONDS] += seconds;
    op_profile.step[f][OP_FLOPS] += flops;
    op_profile.step[f][OP_BYTES] += bytes;
}

// Adds to the totals directly: the times of a step that counted, read after it ended.
static void op_profile_add_timed(OpFamily f, double seconds, double flops, double bytes) {
    op_profile.total[f][OP_SECONDS] += seconds;
    op_profile.total[f][OP_FLOPS] += flops;
    op_profile.total[f][OP_BYTES] += bytes;
}

static inline double op_start(void) {
    if (!op_profile.on) { return 0.0; }
    if (op_profile.open) { fail("op profile: a timed op inside another one (its time would count twice)"); }
    op_profile.open = 1;
    return now_seconds();
}

static inline void op_stop(OpFamily f, double t0, double flops, double bytes) {
    if (!op_profile.on) { return; }
    op_profile.open = 0;
    op_profile_add(f, now_seconds() - t0, flops, bytes);
}

// Runs call, timed into family with its FLOPs and bytes (evaluated after the call) under -op 1.
#define OP_TIMED(family, flops, bytes, call)     \
    do {                                         \
        double op_t0_ = op_start();              \
        call;                                    \
        op_stop(family, op_t0_, flops, bytes);   \
    } while (0)

static void op_profile_step_begin(void) {
    memset(op_profile.step, 0, sizeof(op_profile.step));
    op_profile.in_step = op_profile.on;
}

// The step took dt seconds; timed: it counts in the average step time.
static void op_profile_step_end(double dt, int timed) {
    if (!op_profile.on) { return; }
    op_profile.in_step = 0;
    if (op_profile.collect) { op_profile.collect(timed, 0); }
    if (!timed) { return; }
    for (int f = 0; f < OP_FAMILIES; f++) {
        for (int k = 0; k < 3; k++) { op_profile.total[f][k] += op_profile.step[f][k]; }
    }
    op_profile.step_seconds += dt;
    op_profile.steps++;
}

// After the last step: the times still to arrive (before the table and the record).
static void op_profile_finish(void) {
    if (op_profile.on && op_profile.collect) { op_profile.collect(0, 1); }
}

// The step time no family covers, in seconds summed over the timed steps.
static double op_profile_other(void) {
    double other = op_profile.step_seconds;
    for (int f = 0; f < OP_FAMILIES; f++) { other -= op_profile.total[f][OP_SECONDS]; }
    return other;
}

// The peak the "% of peak" column divides by: 0 when none is known.
static double op_profile_peak(double peak) { return op_profile.peak_unknown ? 0.0 : peak; }

// One family's "GFLOP/s | % of peak | GB/s |" cells (empty where nothing was counted).
static void op_profile_print_rates(const double* t, double peak) {
    if (t[OP_FLOPS] > 0.0 && t[OP_SECONDS] > 0.0) {
        double fps = t[OP_FLOPS] / t[OP_SECONDS];
        if (peak > 0.0) { printf(" %.1f | %.0f%% |", fps / 1e9, 100.0 * fps / peak); }
        else { printf(" %.1f | n/a |", fps / 1e9); }
    } else {
        printf(" | |");
    }
    if (t[OP_BYTES] > 0.0 && t[OP_SECONDS] > 0.0) { printf(" %.2f |\n", t[OP_BYTES] / t[OP_SECONDS] / 1e9); }
    else { printf(" |\n"); }
}

// The table on stdout; peak: FLOP/s of this rank.
static void op_profile_print(double peak, int rank) {
    int n = op_profile.steps;
    if (!op_profile.on || n == 0) { return; }
    double step = op_profile.step_seconds;
    peak = op_profile_peak(peak);
    char against[96] = "n/a (no -pk: this device's peak is not known)";
    if (peak > 0.0) { snprintf(against, sizeof(against), "against %.3g TFLOP/s", peak / 1e12); }
    printf("op profile (-op 1, rank %d): %d timed steps, %.3f ms per step; FLOPs and bytes counted from the "
           "shapes, %% of peak %s\n", rank, n, step / n * 1e3, against);
    if (op_profile.events_per_step > 0) {
        printf("device times from CUDA events: %d per step, read after the next step's last host wait\n",
               op_profile.events_per_step);
    }
    printf("| op family | ms/step | share | GFLOP/s | %% of peak | GB/s |\n|---|---|---|---|---|---|\n");
    for (int f = 0; f < OP_FAMILIES; f++) {
        const double* t = op_profile.total[f];
        printf("| %s | %.3f | %.1f%% |", op_family_names[f], t[OP_SECONDS] / n * 1e3, 100.0 * t[OP_SECONDS] / step);
        op_profile_print_rates(t, peak);
    }
    double other = op_profile_other();
    printf("| other | %.3f | %.1f%% | | | |\n", other / n * 1e3, 100.0 * other / step);
    printf("| step | %.3f | 100.0%% | | | |\n", step / n * 1e3);
    if (op_profile.side_what) {
        printf("beside the rows (overlapping them): %s %.3f ms per step", op_profile.side_what,
               op_profile.side_seconds / n * 1e3);
        if (op_profile.side_seconds > 0.0 && op_profile.side_bytes > 0.0) {
            printf(", %.2f GB/s", op_profile.side_bytes / op_profile.side_seconds / 1e9);
        }
        printf("\n");
    }
    fflush(stdout);
}

// The record for metrics.jsonl (one line, with its newline) into out; returns its length, 0 when
// there is none (off, or no timed step, or out is too small).
static size_t op_profile_json(char* out, size_t len, double peak) {
    int n = op_profile.steps;
    if (!op_profile.on || n == 0) { return 0; }
    size_t at = 0;
    char pk[32] = "null";
    if (op_profile_peak(peak) > 0.0) { snprintf(pk, sizeof(pk), "%.6g", peak); }
    at += (size_t)snprintf(out, len, "{\"profile\": {\"steps\": %d, \"step_ms\": %.6g, \"peak_flops\": %s", n,
                           op_profile.step_seconds / n * 1e3, pk);
    if (op_profile.side_what && at < len) {
        at += (size_t)snprintf(out + at, len - at, ", \"side\": {\"what\": \"%s\", \"ms\": %.6g, \"bytes\": %.9g}",
                               op_profile.side_what, op_profile.side_seconds / n * 1e3, op_profile.side_bytes / n);
    }
    if (op_profile.events_per_step > 0 && at < len) {
        at += (size_t)snprintf(out + at, len - at, ", \"events_per_step\": %d", op_profile.events_per_step);
    }
    for (int f = 0; f <= OP_FAMILIES && at < len; f++) {
        double s = f < OP_FAMILIES ? op_profile.total[f][OP_SECONDS] : op_profile_other();
        double flops = f < OP_FAMILIES ? op_profile.total[f][OP_FLOPS] : 0.0;
        double bytes = f < OP_FAMILIES ? op_profile.total[f][OP_BYTES] : 0.0;
        at += (size_t)snprintf(out + at, len - at, ", \"%s\": {\"ms\": %.6g, \"share\": %.6g, \"flops\": %.9g, "
                               "\"bytes\": %.9g}", f < OP_FAMILIES ? op_family_keys[f] : "other", s / n * 1e3,
                               s / op_profile.step_seconds, flops / n, bytes / n);
    }
    if (at < len) { at += (size_t)snprintf(out + at, len - at, "}}\n"); }
    return at < len ? at : 0;
}

#endif
