// The decision, taken identically on every rank from all-reduced values, whether a step's
// update is applied: a loss or gradient norm that is NaN or infinite skips it (weights and
// optimizer state untouched), and so does, with -sz Z, a loss more than Z standard deviations
// above the mean of the last -sw applied steps (a spike). The run stops with an error after -sk
// consecutive skipped steps. Skipped steps do not count as AdamW steps (its t = step - skipped).
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
    int n = s->loss_count < g->window ? s->loss_count : g->window;
    memcpy(g->history, s->loss_history + (s->loss_count - n), n * sizeof(float));
    g->count = n;
}

static void step_guard_save(const StepGuard* g, TrainState* s) {
    s->skipped = g->skipped;
    s->consecutive_skips = g->consecutive;
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
// run after max_consecutive skips in a row. print: rank 0 says why a step is skipped.
static StepVerdict step_guard_judge(StepGuard* g, int step, float loss, float norm, int print) {
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
    char why[160];
    if (v == STEP_SKIP_NONFINITE) { snprintf(why, sizeof(why), "loss %g, grad norm %g: not finite", loss, norm); }
    else { snprintf(why, sizeof(why), "loss %g is %.1f standard deviations above the last %d steps (-sz %g)", loss, z, g->count, g->spike_z); }
    if (print) {
        printf("step %d: update skipped on every rank (%s); %d in a row, %d in all\n", step, why, g->consecutive,
               g->skipped);
        fflush(stdout);
    }
    if (g->max_consecutive > 0 && g->consecutive >= g->max_consecutive) {
        fail("step %d: %d consecutive steps skipped (-sk %d), the last with %s; stopping", step, g->consecutive,
             g->max_consecutive, why);
    }
    return v;
}

#endif
