// The training run both trainers share, from start-up to the final model file: the model source
// (the latest checkpoint, a model file or a descriptor), this data rank's loaders, the optimizer
// settings, resuming a checkpoint, the start-up report, and the loop itself: validation and
// sampling (and HellaSwag, -h 1) on their schedule, one optimizer step made of grad_accum
// micro-steps, the step's stdout and main.log lines, and the periodic checkpoints. A trainer brings its model and its
// communication through TrainerOps; whatever both trainers do alike lives here, once.
#ifndef LLMC_TRAIN_LOOP_H
#define LLMC_TRAIN_LOOP_H

#include <stdio.h>
#include "utils.h"
#include "args.h"
#include "gpt2_model.h"
#include "tokenizer.h"
#include "dataloader.h"
#include "schedulers.h"
#include "optimizer.h"
#include "checkpoint.h"
#include "logger.h"
#include "mesh.h"
#include "progress.h"
#include "rng.h"
#include "run_setup.h"
#include "sampler.h"
#include "eval_loader.h"

// What a trainer does its own way. ctx is the trainer's own state (model, optimizer, communicators).
typedef struct {
    // Before a step's first micro-step: mark the gradients (and the loss sum) zero.
    void (*begin_step)(void* ctx);
    // Forward and backward of one (B, T) micro-batch, the loss weighted by dloss (1 / grad_accum);
    // last: the step's last micro-step (ZeRO 1 reduces its gradients during that backward).
    void (*micro_step)(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, int last);
    // After the last micro-step: finish the gradient reduction; returns the global grad norm.
    float (*reduce_gradients)(void* ctx);
    // AdamW at the 1-based step t on what this rank owns (gradients times grad_scale), then the
    // parameter all-gather of ZeRO 1 and 2.
    void (*update)(void* ctx, const AdamWConfig* h, float grad_scale, int t);
    // The step's loss: the mean token loss over every micro-step of every rank.
    float (*step_loss)(void* ctx);
    // The mean loss over `batches` batches of val (from its start), averaged over every rank.
    float (*evaluate)(void* ctx, DataLoader* val, int batches);
    NextLogitsFn next_logits;
    // Rank 0: the model file (v3 fp32 or v5 bf16) at path.
    void (*write_model)(void* ctx, const char* path);
    // This rank's optimizer state file (state_write with the arrays it holds).
    void (*write_state)(void* ctx, const char* path, const TrainState* s);
    // Reads this rank's optimizer state file into the optimizer (state_read).
    void (*read_state)(void* ctx, const char* path, const TrainState* expect, TrainState* got);
    // Returns once every rank has called it.
    void (*barrier)(void* ctx);
    // Bytes this rank has sent so far (the communication report), or NULL where not counted.
    size_t (*comm_bytes_sent)(void* ctx);
    // HellaSwag: the B*T per-position losses of a (B, T) forward with targets, in host memory.
    EvalForwardFn eval_losses;
    // The sum over every rank of one count per rank.
    int (*sum_count)(void* ctx, int count);
    // The MFU's peak of one rank in TFLOP/s unless -pk says otherwise, and where it comes from.
    double peak_tflops;
    const char* peak_source;
    // The trainer's name in metrics.jsonl.
    const char* name;
} TrainerOps;

typedef struct {
    const TrainArgs* args;
    int world, rank;
    const Mesh* mesh;
    int zero_stage;
    int grad_accum, max_steps, start_step;
    int resume_step;          // the checkpoint resumed from, or -1
    GPT2Config config;
    char model_source[4096];  // the model file, checkpoint or descriptor the run started from
    Tokenizer tokenizer;
    int have_tokenizer;
    DataLoader train, val;
    int have_val;
    LRSchedule schedule;
    AdamWConfig adamw;
    Rng sample_rng;
    Logger logger;
    EvalRun hellaswag;        // -h 1
    size_t opt_owned;         // optimizer elements this rank holds (its state file's m, v, master)
    int opt_has_master;       // whether it keeps fp32 master weights
} TrainRun;

// Start-up, part 1 (before the trainer builds its model): the tokenizer, the checkpoint to
// resume (-y 1), the model's parameters (fp32, malloc'd; returned) and config, grad_accum (which
// also fills in -d when it was 0).
static float* run_load_model(TrainRun* r, TrainArgs* args, int world, int rank) {
    memset(r, 0, sizeof(*r));
    r->args = args;
    r->world = world;
    r->rank = rank;
    r->resume_step = args->resume ? checkpoint_latest(args->log_dir) : -1;
    r->have_tokenizer = args->tokenizer[0] != '\0';
    if (r->have_tokenizer) { tokenizer_init(&r->tokenizer, args->tokenizer); }
    float* params = model_load_for_run(args, r->resume_step, r->have_tokenizer ? r->tokenizer.vocab_size : 0,
                                       &r->config, r->model_source, sizeof(r->model_source));
    r->grad_accum = args_grad_accum(args, world);
    return params;
}

// The TrainState of this rank at `step` (where the data loader and the sampler stand now).
static TrainState run_train_state(const TrainRun* r, int step) {
    const TrainArgs* a = r->args;
    TrainState s = {r->rank, r->world, r->mesh->dp_shard, r->zero_stage, a->B, a->T, a->total_batch, step,
                    r->train.epoch, r->train.file_pos, r->train.row_pos, r->sample_rng.state, r->opt_owned,
                    r->opt_has_master};
    return s;
}

// Start-up, part 2 (the trainer has built its model and optimizer): the loaders, the schedule,
// AdamW's settings, the sampler; when resuming, this rank's optimizer state, the step, the
// sampler and the data position from the checkpoint; then main.log (appended to when resuming).
static void run_prepare(TrainRun* r, const Mesh* mesh, int zero_stage, size_t opt_owned, int opt_has_master,
                        const TrainerOps* ops, void* ctx) {
    const TrainArgs* a = r->args;
    r->mesh = mesh;
    r->zero_stage = zero_stage;
    r->opt_owned = opt_owned;
    r->opt_has_master = opt_has_master;
    r->have_val = dataloaders_for_run(a, mesh, r->grad_accum, r->config.vocab_size, &r->train, &r->val, &r->max_steps);
    r->schedule = schedule_from_args(a, r->max_steps);
    r->adamw = adamw_config_from_args(a);
    rng_seed(&r->sample_rng, (uint64_t)a->seed + 1);
    r->start_step = 0;
    if (r->resume_step >= 0) {
        char path[4096];
        checkpoint_path(path, sizeof(path), a->log_dir, "state", r->resume_step, r->rank);
        TrainState expect = run_train_state(r, 0), got;
        ops->read_state(ctx, path, &expect, &got);
        r->start_step = got.step;
        r->sample_rng.state = got.rng;
        dataloader_seek(&r->train, got.epoch, got.file_pos, got.row_pos);
    }
    logger_init(&r->logger, a->log_dir, r->rank, r->resume_step >= 0);
    if (a->hellaswag) {
        eval_open(&r->hellaswag, a->hellaswag_path, a->hellaswag_examples, r->config.vocab_size, a->T);
    }
}

// HellaSwag after `step` steps: this rank's share of the examples, the count right summed over
// the ranks, printed and logged.
static void run_hellaswag(TrainRun* r, const TrainerOps* ops, void* ctx, int step) {
    const TrainArgs* a = r->args;
    int mine = eval_step(&r->hellaswag, r->rank, r->world, a->B, a->T, ops->eval_losses, ctx, step);
    int right = ops->sum_count(ctx, mine);
    if (r->rank == 0) { progress_eval(step, right, r->hellaswag.total); }
    logger_log_eval(&r->logger, step, right / (float)r->hellaswag.total);
}

// Rank 0's start-up report: the model, the batch, the trainer's own lines (extra, may be ""),
// the per-rank memory and per-step communication, and the checkpoint resumed from.
static void run_print_start(const TrainRun* r, size_t num_parameters, const MemoryBytes* mem, const CommBytes* comm,
                            const char* extra) {
    if (r->rank != 0) { return; }
    const TrainArgs* a = r->args;
    progress_model(r->model_source, &r->config, num_parameters);
    printf("batch: B %d | T %d | ranks %d | grad_accum %d | %d tokens per step | %d steps\n", a->B, a->T, r->world,
           r->grad_accum, a->total_batch, r->max_steps);
    printf("%s", extra);
    progress_accounting(r->mesh, r->zero_stage, mem, comm);
    if (r->resume_step >= 0) { printf("resumed from step %d of %s\n", r->resume_step, a->log_dir); }
    fflush(stdout);
}

// A complete checkpoint of `step`: rank 0's model file, every rank's state file, a barrier,
// then rank 0's DONE marker (llmc/checkpoint.h).
static void run_save_checkpoint(TrainRun* r, int step, const TrainerOps* ops, void* ctx) {
    char path[4096];
    const char* dir = r->args->log_dir;
    if (r->rank == 0) {
        checkpoint_path(path, sizeof(path), dir, "model", step, -1);
        ops->write_model(ctx, path);
    }
    TrainState s = run_train_state(r, step);
    checkpoint_path(path, sizeof(path), dir, "state", step, r->rank);
    ops->write_state(ctx, path, &s);
    ops->barrier(ctx);
    if (r->rank == 0) { checkpoint_mark_done(dir, step); }
}

// One optimizer step (0-based `step`): grad_accum micro-steps, the gradient reduction and norm,
// clipping, the scheduled lr, AdamW. Fills the step's loss and grad norm.
static void run_optimizer_step(TrainRun* r, const TrainerOps* ops, void* ctx, int step, float* loss, float* norm) {
    const TrainArgs* a = r->args;
    if (a->overfit) { dataloader_reset(&r->train); }
    ops->begin_step(ctx);
    for (int micro = 0; micro < r->grad_accum; micro++) {
        dataloader_next(&r->train);
        ops->micro_step(ctx, r->train.inputs, r->train.targets, a->B, a->T, 1.0f / r->grad_accum,
                        micro == r->grad_accum - 1);
    }
    *norm = ops->reduce_gradients(ctx);
    r->adamw.lr = schedule_lr(&r->schedule, step);
    ops->update(ctx, &r->adamw, clip_scale(*norm, a->grad_clip), step + 1);
    *loss = ops->step_loss(ctx);
}

// The loop: at every step a multiple of -v (and at the end) the val loss, at every multiple of
// -s (and at the end) a sample, then the optimizer step, its lines and, every -n steps, a
// checkpoint. Ends with the timing summary and rank 0's model_final.bin in the log dir.
static void run_train(TrainRun* r, const TrainerOps* ops, void* ctx) {
    const TrainArgs* a = r->args;
    int eot = r->have_tokenizer ? r->tokenizer.eot_token : r->config.vocab_size - 1;
    StepTimes times = {0.0, 0, r->start_step, 0.0, 0.0, -1.0};
    size_t num_parameters = gpt2_num_parameters(&r->config);
    progress_mfu_init(&times, &r->config, num_parameters, a->T, r->world, a->peak_tflops, ops->peak_tflops,
                      ops->peak_source, r->rank == 0);
    logger_log_config(&r->logger, ops->name, r->model_source, &r->config, num_parameters, a, r->world, r->grad_accum,
                      r->max_steps, times.flops_per_token, times.peak_flops);
    size_t step_bytes = 0;
    for (int step = r->start_step; step <= r->max_steps; step++) {
        int last = step == r->max_steps;
        if (r->have_val && (step % a->val_every == 0 || last)) {
            float val_loss = ops->evaluate(ctx, &r->val, a->val_batches);
            if (r->rank == 0) { printf("step %d: val loss %.6f\n", step, val_loss); }
            logger_log_val(&r->logger, step, val_loss);
        }
        if (a->hellaswag && (step % a->val_every == 0 || last)) { run_hellaswag(r, ops, ctx, step); }
        if (r->rank == 0 && a->sample_every > 0 && step > 0 && (step % a->sample_every == 0 || last)) {
            sample_text(ops->next_logits, ctx, a->T, r->config.vocab_size, r->have_tokenizer ? &r->tokenizer : NULL,
                        eot, a->gen_tokens, &r->sample_rng);
        }
        if (last) { break; }

        double t0 = now_seconds();
        size_t bytes_before = ops->comm_bytes_sent ? ops->comm_bytes_sent(ctx) : 0;
        float loss, norm;
        run_optimizer_step(r, ops, ctx, step, &loss, &norm);
        step_bytes = ops->comm_bytes_sent ? ops->comm_bytes_sent(ctx) - bytes_before : 0;
        double dt = now_seconds() - t0;
        progress_step(&times, step, r->max_steps, dt, loss, norm, r->adamw.lr, a->total_batch, r->rank == 0);
        logger_log_train(&r->logger, step + 1, loss, r->adamw.lr, norm, dt * 1000.0, a->total_batch / dt,
                         times.last_mfu);
        if (a->checkpoint_every > 0 && (step + 1) % a->checkpoint_every == 0) {
            run_save_checkpoint(r, step + 1, ops, ctx);
        }
    }
    if (r->rank == 0) {
        progress_summary(&times, a->total_batch);
        if (ops->comm_bytes_sent) {
            printf("communication measured: %zu bytes sent per rank in the last step\n", step_bytes);
        }
    }
    if (a->log_dir[0] != '\0' && r->rank == 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/model_final.bin", a->log_dir);
        ops->write_model(ctx, path);
    }
}

static void run_free(TrainRun* r) {
    logger_free(&r->logger);
    if (r->args->hellaswag) { eval_close(&r->hellaswag); }
    dataloader_free(&r->train);
    if (r->have_val) { dataloader_free(&r->val); }
    if (r->have_tokenizer) { tokenizer_free(&r->tokenizer); }
}

#endif
