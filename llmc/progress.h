// What a training run prints on stdout, the same for both trainers: the model and accounting
// lines at start, one line per step (loss, grad norm, lr, time, tokens/s, model FLOP utilisation,
// ETA) and the average step time at the end. The first step of a run is not timed (it pays for
// warm-up).
#ifndef LLMC_PROGRESS_H
#define LLMC_PROGRESS_H

#include <stdio.h>
#include "utils.h"
#include "gpt2_model.h"
#include "mesh.h"
#include "accounting.h"

typedef struct {
    double total;           // seconds of the timed steps
    int steps;              // timed steps
    int first_step;         // the run's first step (resumed runs start later)
    double flops_per_token; // model FLOPs per trained token (model_flops_per_token)
    double peak_flops;      // FLOP/s the MFU is a fraction of
    double last_mfu;        // the last step's
} StepTimes;

// Training FLOPs per token: 6 per parameter (2 forward, 4 backward; wte counts once, as the
// classifier's matmul) plus causal attention, 6 L C (T + 1): QK^T and AV over the unmasked half,
// forward and backward. dev/bench/cpu.py counts the same matmuls (without biases and LayerNorms).
static double model_flops_per_token(const GPT2Config* c, size_t num_parameters, int T) {
    return 6.0 * (double)num_parameters + 6.0 * c->num_layers * (double)c->channels * (T + 1);
}

// Sets up MFU: the peak of one rank (one GPU, or one CPU process with its threads) is -pk's
// peak_tflops, else default_tflops (source says where that comes from); the run's peak is that
// times the ranks, since the step's tokens are every rank's.
static void progress_mfu_init(StepTimes* t, const GPT2Config* c, size_t num_parameters, int T, int ranks,
                              float peak_tflops, double default_tflops, const char* source, int print) {
    double per_rank = peak_tflops > 0.0f ? peak_tflops : default_tflops;
    t->flops_per_token = model_flops_per_token(c, num_parameters, T);
    t->peak_flops = per_rank * 1e12 * ranks;
    t->last_mfu = -1.0;
    if (print) {
        printf("mfu: %.4g MFLOPs per token (6N + attention) against a peak of %g TFLOP/s per rank x %d (%s)\n",
               t->flops_per_token / 1e6, per_rank, ranks, peak_tflops > 0.0f ? "-pk" : source);
    }
}

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
    printf("memory per rank: params %zu grads %zu optimizer %zu activations %zu bytes", mem->params, mem->grads,
           mem->optimizer, mem->activations);
    if (mem->outer) { printf(" | outer state %zu bytes (-ls: outer parameters and momentum, fp32)", mem->outer); }
    if (mem->residual) { printf(" | residual %zu bytes (-rq error feedback, fp32)", mem->residual); }
    if (mem->wire) { printf(" | exchange buffers %zu bytes (-rq, -rk)", mem->wire); }
    if (mem->muon) {
        printf(" | muon owners %zu bytes (-opt muon, ZeRO %d: the owned matrices' whole gradients, momentum, buffers)",
               mem->muon, zero_stage);
    }
    if (mem->overlap) {
        printf(" | -lo in flight %zu bytes (local snapshots %zu, held sums %zu, exchange buffers %zu)", mem->overlap,
               mem->overlap_snap, mem->overlap_held, mem->overlap_wire);
    }
    printf("\n");
    const char* avg = comm->sync_every ? ", averaged over a window of -ls steps" : "";
    printf("communication per step: %zu bytes sent per rank (gradients %zu, replicas %zu, parameters %zu, "
           "scalars %zu)%s\n", comm->total, comm->grad_reduce, comm->replica, comm->param_gather, comm->scalars, avg);
    if (!comm->sync_every && (comm->wire != WIRE_FP32 || comm->topk > 0.0f)) {
        printf("replica link format: -rq %s -rk %g (scales, indices and padding included): %zu bytes per step "
               "across replicas, %zu in fp32 (%.4fx)\n", wire_format_names[comm->wire], comm->topk, comm->replica,
               comm->sync_replica_fp32,
               comm->sync_replica_fp32 ? comm->replica / (double)comm->sync_replica_fp32 : 0.0);
    }
    if (comm->sync_every) {
        int H = comm->sync_every;
        printf("communication per outer sync (every %d steps): %zu bytes sent per rank across replicas, %zu inside "
               "the replica and in the finiteness flag over every rank; a step without a sync sends %zu\n", H,
               comm->sync_replica, comm->sync_inner,
               comm->step_no_sync);
        if (comm->fragments > 1) {
            printf("streaming fragments (-lf %d): the outer sync above is the sum of the fragments' syncs of a "
                   "window, the largest sends %zu bytes per rank across replicas (%.3f of the sum)\n", comm->fragments,
                   comm->sync_replica_peak,
                   comm->sync_replica ? comm->sync_replica_peak / (double)comm->sync_replica : 0.0);
        }
        if (comm->wire != WIRE_FP32 || comm->topk > 0.0f) {
            printf("replica link format: -rq %s -rk %g (scales, indices and padding included): %zu bytes per outer "
                   "sync across replicas, %zu in fp32 (%.4fx)\n", wire_format_names[comm->wire], comm->topk,
                   comm->sync_replica, comm->sync_replica_fp32,
                   comm->sync_replica_fp32 ? comm->sync_replica / (double)comm->sync_replica_fp32 : 0.0);
        }
        if (mesh->dp_replicate == 1) { return; }
        printf("communication across replicas: %.1f bytes per rank per step with -ls %d, %zu with synchronous "
               "training (%.1fx fewer)\n", (double)comm->sync_replica / H, H, comm->replica_sync_training,
               comm->sync_replica ? comm->replica_sync_training * (double)H / comm->sync_replica : 0.0);
    }
}

// Records a step of dt seconds (step: 0-based) and, when print is set, prints its line (mark: a
// suffix, "" or the -ls outer sync's).
static void progress_step(StepTimes* t, int step, int max_steps, double dt, float loss, float norm, float lr,
                          int tokens, const char* mark, int print) {
    if (step > t->first_step) { t->total += dt; t->steps++; }
    t->last_mfu = t->peak_flops > 0.0 ? t->flops_per_token * tokens / dt / t->peak_flops : -1.0;
    if (!print) { return; }
    char eta[32];
    double avg = t->steps > 0 ? t->total / t->steps : dt;
    format_eta(eta, sizeof(eta), avg * (max_steps - step - 1));
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s | mfu %.1f%% | eta %s%s\n", step + 1,
           max_steps, loss, norm, lr, dt * 1000.0, tokens / dt, 100.0 * t->last_mfu, eta, mark);
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
