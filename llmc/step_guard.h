// The decision, taken identically on every rank from all-reduced values, whether a step's
// update is applied: a loss or gradient norm that is NaN or infinite skips it (weights and
// optimizer state untouched), and so does, with -sz Z, a loss more than Z standard deviations
// above the mean of the last -sw applied steps (a spike). The run stops with an error after -sk
// consecutive skipped steps. Skipped steps do not count as AdamW steps (its t = step - skipped).
// Under -ls between syncs each replica steps on its own gradient, so a non-finite gradient norm
// (the loss, averaged over every rank, finite) skips that replica's update only, and its line says
// so. An outer sync whose pseudo-gradients are not finite on some replica is skipped on every
// replica (the data-parallel layer decides it from one all-reduced flag); -sk outer syncs skipped in
// a row stop the run too.
#ifndef LLMC_STEP_GUARD_H
#define LLMC_STEP_GUARD_H

#include <math.h>
#include <stdio.h>
#include "utils.h"
#include "checkpoint.h"

typedef struct {
    int max_consecutive; // -sk (0 = never stop)
    float spike_z;       // -sz (0 = no spike guard)
    int window;          // -sw
    int skipped;         // steps skipped so far
    int consecutive;     // of them, in a row up to now
    int sync_consecutive; // -ls: outer syncs skipped in a row up to now
    int count;           // applied losses in history (at most window)
    float history[LOSS_HISTORY_MAX];
} StepGuard;

typedef enum { STEP_APPLY, STEP_SKIP_NONFINITE, STEP_SKIP_SPIKE } StepVerdict;

static void step_guard_init(StepGuard* g, int max_consecutive, float spike_z, int window) {
    memset(g, 0, sizeof(*g));
    g->max_consecutive = max_consecutive;
    g->spike_z = spike_z;
    g->window = window;
}

// Carries the counters and the window over a resume (a window of another size keeps the newest).
static void step_guard_restore(StepGuard* g, const TrainState* s) {
    g->skipped = s->skipped;
    g->consecutive = s->consecutive_skips;
    g->sync_consecutive = s->consecutive_sync_skips;
    int n = s->loss_count < g->window ? s->loss_count : g->window;
    memcpy(g->history, s->loss_history + (s->loss_count - n), n * sizeof(float));
    g->count = n;
}

static void step_guard_save(const StepGuard* g, TrainState* s) {
    s->skipped = g->skipped;
    s->consecutive_skips = g->consecutive;
    s->consecutive_sync_skips = g->sync_consecutive;
    s->loss_count = g->count;
    memcpy(s->loss_history, g->history, g->count * sizeof(float));
}

// z-score of loss against the window (0 while the window is not yet full).
static double step_guard_z(const StepGuard* g, float loss) {
    if (g->spike_z <= 0.0f || g->count < g->window) { return 0.0; }
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < g->count; i++) { mean += g->history[i]; }
    mean /= g->count;
    for (int i = 0; i < g->count; i++) { var += (g->history[i] - mean) * (g->history[i] - mean); }
    double sd = sqrt(var / g->count);
    return sd > 0.0 ? (loss - mean) / sd : 0.0;
}

// The verdict for step `step` (1-based) from the all-reduced loss and gradient norm; stops the
// run after max_consecutive skips in a row. alone: under -ls between syncs, where the norm is the
// replica's own (mesh: whose); the line saying why goes to stdout from rank 0, or where only this
// replica skips from the replica's first rank.
static StepVerdict step_guard_judge(StepGuard* g, int step, float loss, float norm, int alone, const Mesh* mesh) {
    StepVerdict v = STEP_APPLY;
    double z = 0.0;
    if (!isfinite(loss) || !isfinite(norm)) {
        v = STEP_SKIP_NONFINITE;
    } else if ((z = step_guard_z(g, loss)) > g->spike_z && g->spike_z > 0.0f) {
        v = STEP_SKIP_SPIKE;
    }
    if (v == STEP_APPLY) {
        g->consecutive = 0;
        if (g->window > 0) {
            if (g->count == g->window) {
                memmove(g->history, g->history + 1, (g->count - 1) * sizeof(float));
                g->count--;
            }
            g->history[g->count++] = loss;
        }
        return v;
    }
    g->skipped++;
    g->consecutive++;
    int own = alone && v == STEP_SKIP_NONFINITE && isfinite(loss); // this replica's gradient alone
    char why[160], where[96];
    if (v == STEP_SKIP_NONFINITE) { snprintf(why, sizeof(why), "loss %g, grad norm %g: not finite", loss, norm); }
    else { snprintf(why, sizeof(why), "loss %g is %.1f standard deviations above the last %d steps (-sz %g)", loss, z, g->count, g->spike_z); }
    if (own) {
        snprintf(where, sizeof(where), "on replica %d (its own gradient: between -ls syncs each replica steps alone)",
                 mesh->replicate_idx);
    } else {
        snprintf(where, sizeof(where), "on every rank");
    }
    if (own ? mesh->shard_idx == 0 : mesh->rank == 0) {
        printf("step %d: update skipped %s (%s); %d in a row, %d in all\n", step, where, why, g->consecutive,
               g->skipped);
        fflush(stdout);
    }
    if (g->max_consecutive > 0 && g->consecutive >= g->max_consecutive) {
        fail("step %d: %d consecutive steps skipped%s%s (-sk %d), the last with %s; stopping", step, g->consecutive,
             own ? " " : "", own ? where : "", g->max_consecutive, why);
    }
    return v;
}

// -ls: the outer sync of fragment f (of F) after `step` was applied (or started), or skipped on
// every replica (applied 0: a pseudo-gradient not finite). Rank 0 (print) says so; -sk skipped syncs
// in a row stop the run.
static void step_guard_outer(StepGuard* g, int step, int f, int F, int applied, int print) {
    if (applied) {
        g->sync_consecutive = 0;
        return;
    }
    g->sync_consecutive++;
    char which[48] = "";
    if (F > 1) { snprintf(which, sizeof(which), " of fragment %d", f); }
    if (print) {
        printf("step %d: outer sync%s skipped on every replica (a replica's pseudo-gradient is not finite): the outer "
               "state and the residuals stay as they were; %d in a row\n", step, which, g->sync_consecutive);
        fflush(stdout);
    }
    if (g->max_consecutive > 0 && g->sync_consecutive >= g->max_consecutive) {
        fail("step %d: %d outer syncs in a row skipped (-sk %d): a replica's pseudo-gradient is not finite; stopping",
             step, g->sync_consecutive, g->max_consecutive);
    }
}

#endif
