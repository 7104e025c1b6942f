// What a training run prints on stdout, the same for both trainers: the model and accounting
// lines at start, one line per step (loss, grad norm, lr, time, tokens/s, ETA) and the average
// step time at the end. The first step of a run is not timed (it pays for warm-up).
#ifndef LLMC_PROGRESS_H
#define LLMC_PROGRESS_H

#include <stdio.h>
#include "utils.h"
#include "gpt2_model.h"
#include "mesh.h"
#include "accounting.h"

typedef struct {
    double total;   // seconds of the timed steps
    int steps;      // timed steps
    int first_step; // the run's first step (resumed runs start later)
} StepTimes;

static void format_eta(char* out, size_t len, double seconds) {
    int s = (int)(seconds + 0.5);
    if (s >= 3600) { snprintf(out, len, "%dh%02dm", s / 3600, (s / 60) % 60); }
    else { snprintf(out, len, "%dm%02ds", s / 60, s % 60); }
}

static void progress_model(const char* source, const GPT2Config* c, size_t num_parameters) {
    printf("model: %s | L %d | NH %d | C %d | V %d (padded %d) | T_max %d | %zu parameters\n", source, c->num_layers,
           c->num_heads, c->channels, c->vocab_size, c->padded_vocab_size, c->max_seq_len, num_parameters);
}

static void progress_accounting(const Mesh* mesh, int zero_stage, const MemoryBytes* mem, const CommBytes* comm) {
    printf("mesh: dp_replicate %d x dp_shard %d | ZeRO stage %d\n", mesh->dp_replicate, mesh->dp_shard, zero_stage);
    printf("memory per rank: params %zu grads %zu optimizer %zu activations %zu bytes\n", mem->params, mem->grads,
           mem->optimizer, mem->activations);
    printf("communication per step: %zu bytes sent per rank (gradients %zu, replicas %zu, parameters %zu, "
           "scalars %zu)\n", comm->total, comm->grad_reduce, comm->replica, comm->param_gather, comm->scalars);
}

// Records a step of dt seconds (step: 0-based) and, when print is set, prints its line.
static void progress_step(StepTimes* t, int step, int max_steps, double dt, float loss, float norm, float lr,
                          int tokens, int print) {
    if (step > t->first_step) { t->total += dt; t->steps++; }
    if (!print) { return; }
    char eta[32];
    double avg = t->steps > 0 ? t->total / t->steps : dt;
    format_eta(eta, sizeof(eta), avg * (max_steps - step - 1));
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s | eta %s\n", step + 1, max_steps,
           loss, norm, lr, dt * 1000.0, tokens / dt, eta);
    fflush(stdout);
}

static void progress_eval(int step, int right, int total) {
    printf("step %d: hellaswag accuracy %.4f (%d/%d)\n", step, total > 0 ? right / (double)total : 0.0, right, total);
    fflush(stdout);
}

static void progress_summary(const StepTimes* t, int tokens) {
    if (t->steps > 0) {
        printf("average step time: %.1f ms (%.0f tok/s)\n", t->total / t->steps * 1000.0, tokens / (t->total / t->steps));
    }
}

#endif
