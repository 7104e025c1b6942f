// The training run both trainers share, from start-up to the final model file: the model source
// (the latest checkpoint, a model file or a descriptor), this data rank's loaders, the optimizer
// settings, resuming a checkpoint, the start-up report, and the loop itself: validation and
// sampling (and HellaSwag, -h 1) on their schedule, one optimizer step made of grad_accum
// micro-steps (skipped when non-finite or spiking), the step's stdout and main.log lines, the
// periodic checkpoints (one that cannot be written, a full disk say, is removed on every rank and
// training goes on; -nf in a row stop the run), and the preemption checkpoint and exit
// (docs/checkpoints.md), and with -op 1 the op profile's table and record (llmc/op_profile.h). The
// replica sync (-ls, -rq/-rk, -le) is llmc/replica_run.h's, called at its few points in the step.
// A trainer brings its model and its communication through TrainerOps (its data-parallel layer
// through TrainerOps.dp, llmc/dp_ops.h, its replica sync through TrainerOps.replica,
// llmc/replica_ops.h); whatever both trainers do alike lives here, once.
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
#include "faults.h"
#include "preempt.h"
#include "step_guard.h"
#include "watchdog.h"
#include "eval_loader.h"
#include "outer_sync.h"
#include "replica_run.h"
#include "op_profile.h"
#include "dp_ops.h"
#include "dp_plan.h"

// What a trainer does its own way. ctx is the trainer's own state (model, optimizer, communicators).
typedef struct {
    // Before a step's first micro-step: mark the gradients (and the loss sum) zero.
    void (*begin_step)(void* ctx);
    // Forward and backward of one (B, T) micro-batch, backward starting from dloss (1 / grad_accum,
    // times -fi's factor); its mean loss counts in the step's with weight 1 / grad_accum; last: the
    // step's last micro-step (ZeRO 1 reduces its gradients during that backward).
    void (*micro_step)(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, float weight,
                       int last);
    // The step's agreement, before the update: this rank's loss (times loss_factor, 1 but under
    // -fi) and its preemption vote summed over every rank in one small all-reduce; returns the
    // mean token loss over every micro-step of every rank, *votes the sum of the votes.
    float (*agree)(void* ctx, float loss_factor, float vote, float* votes);
    // The mean loss over `batches` batches of val (from its start), averaged over every rank.
    float (*evaluate)(void* ctx, DataLoader* val, int batches);
    NextLogitsFn next_logits;
    // Rank 0: the model file (v3 fp32 or v5 bf16) at path; crc (may be NULL) receives its CRC-32C.
    void (*write_model)(void* ctx, const char* path, uint32_t* crc);
    // Returns once every rank has called it (after a failed checkpoint's clean-up).
    void (*barrier)(void* ctx);
    // Bytes this rank has sent so far (the communication report), or NULL where not counted.
    size_t (*comm_bytes_sent)(void* ctx);
    // HellaSwag: the B*T per-position losses of a (B, T) forward with targets, in host memory.
    EvalForwardFn eval_losses;
    // The sum over every rank of one count per rank (HellaSwag; a checkpoint's agreement on failures).
    int (*sum_count)(void* ctx, int count);
    // The MFU's peak of one rank in TFLOP/s unless -pk says otherwise, and where it comes from
    // (the GPU trainer's datasheet; the CPU trainer fills in its copy with the peak it measures).
    double peak_tflops;
    const char* peak_source;
    // The trainer's name in metrics.jsonl.
    const char* name;
    // The data-parallel layer (llmc/dp_ops.h): the reduction, the update and the state file's
    // arrays, with the layer's own state; and its replica sync (llmc/replica_ops.h; empty without one).
    DataParallelOps dp;
    ReplicaOps replica;
} TrainerOps;

// A trainer's TrainerOps from its functions PREFIX_begin_step, PREFIX_micro_step, PREFIX_agree,
// PREFIX_evaluate, PREFIX_next_logits, PREFIX_write_model, PREFIX_barrier, PREFIX_eval_losses and
// PREFIX_sum_count, with its byte count (or NULL), peak, the peak's source and name; dp and
// replica are filled in at start-up by its data-parallel layer.
#define TRAINER_OPS(PREFIX, bytes_sent, peak, source, trainer_name)                                          \
    {.begin_step = PREFIX##_begin_step, .micro_step = PREFIX##_micro_step, .agree = PREFIX##_agree,             \
     .evaluate = PREFIX##_evaluate, .next_logits = PREFIX##_next_logits, .write_model = PREFIX##_write_model,   \
     .barrier = PREFIX##_barrier, .comm_bytes_sent = bytes_sent, .eval_losses = PREFIX##_eval_losses,           \
     .sum_count = PREFIX##_sum_count, .peak_tflops = peak, .peak_source = source, .name = trainer_name}

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
    OptimizerConfig opt;      // -opt and its settings, the learning rates of the current step
    Rng sample_rng;
    Logger logger;
    EvalRun hellaswag;        // -h 1
    size_t opt_owned;         // optimizer elements this rank holds (its state file's m, v, master)
    int sync_stage;           // the replica sync's layout and elements (its -ls arrays; llmc/dp_plan.h)
    size_t sync_owned;
    int opt_has_master;       // whether it keeps fp32 master weights
    StepGuard guard;          // skipped (non-finite, spiking) steps
    int preempted;            // the run stopped on a signal (llmc/preempt.h)
    ReplicaRun sync;          // the replica sync (llmc/replica_run.h): its state, the replicas training
    int ckpt_failures;        // checkpoints in a row that could not be written (-nf)
    int last_complete;        // the newest complete checkpoint this run knows of (-1: none)
} TrainRun;

// Start-up, part 1 (before the trainer builds its model): the tokenizer, the checkpoint to
// resume (-y 1), the model's parameters (fp32, malloc'd; returned) and config, grad_accum (which
// also fills in -d when it was 0).
static float* run_load_model(TrainRun* r, TrainArgs* args, int world, int rank) {
    memset(r, 0, sizeof(*r));
    r->args = args;
    r->world = world;
    r->rank = rank;
    run_fault = fault_parse(args->fault);
    preempt_install(rank);
    if (world > 1) { watchdog_start(rank, args->peer_wait); }
    r->resume_step = checkpoint_start(args, rank);
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
    TrainState s = train_state_now(a, r->mesh, r->zero_stage, step, &r->train, &r->sample_rng, r->opt_owned,
                                   r->opt_has_master);
    s.sync_stage = r->sync_stage;
    s.sync_owned = r->sync_owned;
    step_guard_save(&r->guard, &s);
    replica_train_state(&r->sync, step, &s);
    return s;
}



// Start-up, part 2 (the trainer has built its model and optimizer): the loaders, the schedule,
// AdamW's settings, the sampler; when resuming, this rank's optimizer state, the step, the
// sampler and the data position from the checkpoint; then main.log (appended to when resuming).
static void run_prepare(TrainRun* r, const DpPlan* plan, int opt_has_master, const TrainerOps* ops) {
    const TrainArgs* a = r->args;
    const Mesh* mesh = &plan->mesh;
    int zero_stage = plan->zero_stage;
    size_t opt_owned = plan->owned;
    r->mesh = mesh;
    r->zero_stage = zero_stage;
    r->opt_owned = opt_owned;
    r->sync_stage = plan->sync_stage;
    r->sync_owned = plan->sync_owned;
    r->opt_has_master = opt_has_master;
    r->have_val = dataloaders_for_run(a, mesh, r->grad_accum, r->config.vocab_size, &r->train, &r->val, &r->max_steps);
    r->schedule = schedule_from_args(a, r->max_steps);
    r->opt = optimizer_config_from_args(a);
    rng_seed(&r->sample_rng, (uint64_t)a->seed + 1);
    r->start_step = 0;
    r->ckpt_failures = 0;
    r->last_complete = r->resume_step;
    const OuterConfig* outer = &a->outer;
    replica_run_init(&r->sync, &ops->replica, a, mesh, r->rank, r->max_steps, r->config.num_layers, &r->logger,
                     &r->guard);
    step_guard_init(&r->guard, a->max_skips, a->spike_z, a->spike_window);
    if (r->resume_step >= 0) {
        StateTarget target = {.rank = r->rank, .world = r->world, .dp_shard = mesh->dp_shard, .zero_stage = zero_stage,
                              .B = a->B, .T = a->T, .total_batch = a->total_batch, .owned = opt_owned,
                              .has_master = opt_has_master, .sync_stage = plan->sync_stage,
                              .sync_owned = plan->sync_owned, .config = &r->config, .outer = outer,
                              .has_residual = outer_has_residual(outer), .optimizer = r->opt.kind};
        TrainState got;
        ops->dp.read_state(ops->dp.ctx, a->log_dir, r->resume_step, &target, &got);
        replica_resumed(&r->sync, &got);
        r->start_step = got.step;
        step_guard_restore(&r->guard, &got);
        r->sample_rng.state = got.rng;
        dataloader_seek(&r->train, got.epoch, got.file_pos, got.row_pos);
    }
    logger_init(&r->logger, a->log_dir, r->rank, r->resume_step);
    if (r->resume_step >= 0) { replica_note_rebuilt(&r->sync, r->resume_step); }
    if (a->hellaswag) {
        eval_open(&r->hellaswag, a->hellaswag_path, a->hellaswag_examples, r->config.vocab_size, a->T);
    }
}




// HellaSwag after `step` steps: this rank's share of the examples, the count right summed over
// the ranks, printed and logged.
static void run_hellaswag(TrainRun* r, const TrainerOps* ops, void* ctx, int step) {
    const TrainArgs* a = r->args;
    preempt_phase = "the HellaSwag evaluation";
    int mine = eval_step(&r->hellaswag, r->rank, r->world, a->B, a->T, ops->eval_losses, ctx, step);
    fault_hang_at(&run_fault, FAULT_HANG_EVAL, step, r->rank, "the HellaSwag evaluation");
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

// A failed part of a checkpoint as one positive int that a sum over the ranks carries exactly
// (below 2^24): errno + 4096 * (operation + 8 * file), file 1 the model file, 2 the state file,
// 3 the manifest. 0: no failure (soft_write, llmc/utils.h, has none).
static const char* ckpt_ops[8] = {"open", "write", "seek", "fsync", "close", "rename", "stat", "?"};

static int ckpt_failure_code(const char* dir, int step, int rank) {
    if (!soft_write.failed) { return 0; }
    char path[4096];
    int file = 3;
    checkpoint_path(path, sizeof(path), dir, "model", step, -1);
    if (strncmp(soft_write.path, path, strlen(path)) == 0) { file = 1; }
    checkpoint_path(path, sizeof(path), dir, "state", step, rank);
    if (strncmp(soft_write.path, path, strlen(path)) == 0) { file = 2; }
    int op = 7;
    for (int k = 0; k < 7; k++) {
        if (strcmp(soft_write.op, ckpt_ops[k]) == 0) { op = k; }
    }
    int err = soft_write.err > 0 && soft_write.err < 4096 ? soft_write.err : 4095;
    return err + 4096 * (op + 8 * file);
}

// The text of a failure code of rank `rank`: "FILE: OP: the system's reason".
static void ckpt_failure_text(char* out, size_t len, const char* dir, int step, int rank, int code) {
    int err = code % 4096, op = code / 4096 % 8, file = code / 4096 / 8;
    char path[4096];
    const char* kinds[4] = {"DONE", "model", "state", "DONE"};
    checkpoint_path(path, sizeof(path), dir, kinds[file & 3], step, file == 2 ? rank : -1);
    snprintf(out, len, "%s%s: %s: %s", path, op == 6 ? "" : ".tmp", ckpt_ops[op], strerror(err));
}

// Every rank, the same: whether any rank's code is non-zero (one collective, a sum over the
// ranks); if so (rare), the lowest such rank (*who, a binary search of log2(world) more) and its
// code, which is returned (0: none failed).
static int run_agree_failure(const TrainerOps* ops, void* ctx, int rank, int world, int code, int* who) {
    watchdog_grace(); // rank 0 may still be writing
    *who = 0;
    if (ops->sum_count(ctx, code != 0) == 0) { return 0; }
    int lo = 0, hi = world; // the lowest failing rank is in [lo, hi)
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (ops->sum_count(ctx, code != 0 && rank >= lo && rank < mid) > 0) { hi = mid; }
        else { lo = mid; }
    }
    *who = lo;
    return ops->sum_count(ctx, rank == lo ? code : 0);
}




// A checkpoint of `step`: rank 0's model file (its CRC-32C computed while writing), every rank's
// state file (CRCs inside), then the ranks agree whether all of it reached the disk (a sum over
// the ranks, which is also the barrier), rank 0 writes the DONE manifest and applies -nk
// retention (llmc/checkpoint.h), and the ranks agree again on the manifest (-le 1 with replicas
// lost: it names them, and their ranks' files are not in it). The writes are soft
// (llmc/utils.h): a full disk or an I/O error on any rank makes every rank remove what it wrote
// of this step (finished files too), so that nothing of it remains; returns 1 when the
// checkpoint is complete, else 0 with the lowest failing rank's file and error in why.
static int run_save_checkpoint(TrainRun* r, int step, const TrainerOps* ops, void* ctx, char* why, size_t why_len) {
    char path[4096], model[4096];
    const char* dir = r->args->log_dir;
    uint32_t model_crc = 0;
    checkpoint_path(model, sizeof(model), dir, "model", step, -1);
    checkpoint_path(path, sizeof(path), dir, "state", step, r->rank);
    TrainState s = run_train_state(r, step);
    preempt_phase = "the checkpoint write";
    soft_write_begin();
    fault_disk_full(&run_fault, FAULT_ENOSPC_MODEL, step, r->rank, 5120, "its model file");
    int writer = replica_writer(&r->sync);
    if (r->rank == writer) { ops->write_model(ctx, model, &model_crc); }
    fault_disk_full(&run_fault, FAULT_ENOSPC, step, r->rank, state_file_bytes(&s) / 2, "its state file");
    ops->dp.write_state(ops->dp.ctx, path, &s);
    soft_write_end();
    fault_in_checkpoint(&run_fault, step, r->rank);
    int who, live = replica_live(&r->sync, NULL);
    int code = run_agree_failure(ops, ctx, r->rank, r->world, ckpt_failure_code(dir, step, r->rank), &who);
    if (replica_live(&r->sync, NULL) != live) { // -le 1: a replica was dropped in the agreement, its files may be missing
        snprintf(why, why_len, "a replica was lost while it was written (-le 1)");
        checkpoint_remove_partial(dir, step, r->rank, writer);
        return 0;
    }
    if (code == 0) {
        fault_disk_full(&run_fault, FAULT_ENOSPC_DONE, step, r->rank, 16, "the manifest");
        uint8_t* lost = (uint8_t*)malloc_check((size_t)r->mesh->dp_replicate);
        int done = r->rank != writer || checkpoint_commit(r->args, step, model, model_crc, r->world, &s,
                                                          replica_lost(&r->sync, lost));
        free(lost);
        watchdog_grace();
        code = ops->sum_count(ctx, done ? 0 : ckpt_failure_code(dir, step, writer));
        who = writer;
    }
    if (code == 0) { return 1; }
    ckpt_failure_text(why, why_len, dir, step, who, code);
    if (r->world > 1) {
        size_t n = strlen(why);
        snprintf(why + n, why_len - n, " (rank %d)", who);
    }
    checkpoint_remove_partial(dir, step, r->rank, writer);
    watchdog_grace();
    ops->barrier(ctx); // every rank's files of the step are gone before any goes on, or stops
    return 0;
}

// After checkpoint `step` failed (every rank, with the same why): main.log and metrics.jsonl
// record it; rank 0 warns, and training goes on from the state in memory, unless the run was
// stopping (a preemption: no checkpoint, exit 1) or -nf checkpoints in a row have failed (exit 1).
static void run_checkpoint_failed(TrainRun* r, int step, const char* why, int stopping) {
    r->ckpt_failures++;
    logger_log_ckpt_failed(&r->logger, step);
    char newest[96];
    if (r->last_complete >= 0) {
        snprintf(newest, sizeof(newest), "-y 1 resumes from the newest complete checkpoint, step %d", r->last_complete);
    } else {
        snprintf(newest, sizeof(newest), "no checkpoint is complete: -y 1 starts fresh");
    }
    int nf = r->args->max_ckpt_failures;
    if (stopping || (nf > 0 && r->ckpt_failures >= nf)) {
        logger_flush_record(&r->logger);
        if (stopping) {
            fail("checkpoint %d failed: %s; its files are removed; stopping %s without a checkpoint of step %d (%s)",
                 step, why, r->sync.rank0_lost ? "with replica 0 lost" : r->sync.below_min ? "with fewer than -lm replicas left" :
                 "on the signal", step, newest);
        }
        fail("checkpoint %d failed: %s; its files are removed; %d checkpoints in a row failed (-nf %d): stopping "
             "(%s)", step, why, r->ckpt_failures, nf, newest);
    }
    if (r->rank == 0) {
        fprintf(stderr, "warning: checkpoint %d failed: %s; its files are removed, training goes on from the state in "
                "memory and the next checkpoint tries again (%d failed in a row, -nf %d)\n", step, why,
                r->ckpt_failures, nf);
        fflush(stderr);
    }
}

// Rank 0, at the end: model_final.bin. A failed write (a full disk) removes the partial file, and
// a model_final.bin of an earlier run that this one was about to replace (room for the new one),
// and tries once more; a second failure ends the run with an error (exit 1).
static void run_write_final_model(TrainRun* r, const TrainerOps* ops, void* ctx) {
    char path[4096], tmp[4200], why[4600];
    snprintf(path, sizeof(path), "%s/model_final.bin", r->args->log_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    for (int attempt = 1;; attempt++) {
        if (attempt == 1) { fault_disk_full(&run_fault, FAULT_ENOSPC_FINAL, r->max_steps, r->rank, 5120, path); }
        soft_write_begin();
        ops->write_model(ctx, path, NULL);
        if (!soft_write_end()) { return; }
        snprintf(why, sizeof(why), "%s: %s: %s", soft_write.path, soft_write.op, strerror(soft_write.err));
        remove(tmp);
        if (attempt == 2) {
            fail("%s cannot be written: %s (also on a second try; the partial file is removed)", path, why);
        }
        int replaced = remove(path) == 0;
        fprintf(stderr, "warning: %s cannot be written: %s; the partial file%s removed, trying once more\n", path, why,
                replaced ? " and the earlier run's model_final.bin are" : " is");
        fflush(stderr);
    }
}




// -le 1, a rank whose replica rejoined a running job after the outer sync of `step`: it trains on
// from there (llmc/replica_run.h, replica_join).
static void run_join(TrainRun* r, int step) {
    replica_join(&r->sync, r->start_step, step, &r->train, r->grad_accum);
    r->start_step = step;
}

// -lw: the run starts without the replicas that were not all there (replica_start_partial).
static void run_start_partial(TrainRun* r) { replica_start_partial(&r->sync, r->start_step); }

// One optimizer step (0-based `step`): grad_accum micro-steps, the gradient reduction and norm,
// the agreement (loss and preemption votes), the skip decision (llmc/step_guard.h), clipping,
// the scheduled lr, AdamW unless skipped, then (-ls) the outer sync when one is due. Fills the
// step's loss and grad norm; returns the verdict, *stop whether a rank was asked to stop, *synced
// whether an outer sync ran.
static StepVerdict run_optimizer_step(TrainRun* r, const TrainerOps* ops, void* ctx, int step, float* loss,
                                      float* norm, int* stop, int* synced) {
    const TrainArgs* a = r->args;
    preempt_phase = "the forward, backward and update";
    if (a->overfit) { dataloader_reset(&r->train); }
    replica_before_step(&r->sync, step, &r->train);
    ops->begin_step(ctx);
    float grad_factor = fault_grad_factor(&run_fault, step + 1, r->rank);
    for (int micro = 0; micro < r->grad_accum; micro++) {
        OP_TIMED(OP_DATA, 0.0, 0.0, dataloader_next(&r->train));
        ops->micro_step(ctx, r->train.inputs, r->train.targets, a->B, a->T, grad_factor / r->grad_accum,
                        1.0f / r->grad_accum, micro == r->grad_accum - 1);
        if (micro == 0) { fault_hang_at(&run_fault, FAULT_HANG_FWD, step + 1, r->rank, "the forward"); }
    }
    *norm = ops->dp.reduce_gradients(ops->dp.ctx);
    float votes = 0.0f;
    fault_die_in_ring(&run_fault, step + 1, r->rank);
    *loss = ops->agree(ctx, fault_loss_factor(&run_fault, step + 1, r->rank), preempt_requested(), &votes);
    *stop = votes > 0.0f;
    replica_membership(&r->sync, step + 1, stop);
    StepVerdict verdict = step_guard_judge(&r->guard, step + 1, *loss, *norm, outer_active(&a->outer, step + 1),
                                           r->mesh);
    optimizer_set_lr(&r->opt, a, schedule_lr(&r->schedule, step));
    if (verdict == STEP_APPLY) {
        ops->dp.update(ops->dp.ctx, &r->opt, clip_scale(*norm, a->grad_clip), step + 1 - r->guard.skipped);
    }
    *synced = replica_after_step(&r->sync, step + 1);
    replica_membership(&r->sync, step + 1, stop); // a replica lost in the sync
    if (*synced && !*stop) { replica_admit(&r->sync, step + 1); }
    return verdict;
}


// -op 1: the profile's table on stdout and its record in metrics.jsonl (rank 0's).
static void run_log_profile(TrainRun* r, double peak_per_rank) {
    op_profile_print(peak_per_rank, r->rank);
    char line[4096];
    logger_log_record(&r->logger, line, op_profile_json(line, sizeof(line), peak_per_rank));
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
    size_t step_bytes = 0, sync_step_bytes = 0, plain_step_bytes = 0;
    op_profile.on = a->op_profile;
    watchdog_grace(); // ranks reach the first collective after start-ups of different lengths
    replica_begin(&r->sync, r->start_step, r->have_val || a->hellaswag);
    for (int step = r->start_step; step <= r->max_steps; step++) {
        preempt_step = step + 1;
        int last = step == r->max_steps;
        if (r->have_val && (step % a->val_every == 0 || last)) {
            preempt_phase = "the validation loss";
            float val_loss = ops->evaluate(ctx, &r->val, a->val_batches);
            if (r->rank == 0) { printf("step %d: val loss %.6f\n", step, val_loss); }
            logger_log_val(&r->logger, step, val_loss);
        }
        if (a->sample_every > 0 && step > 0 && (step % a->sample_every == 0 || last)) { watchdog_grace(); }
        if (a->hellaswag && (step % a->val_every == 0 || last)) { run_hellaswag(r, ops, ctx, step); }
        if (r->rank == 0 && a->sample_every > 0 && step > 0 && (step % a->sample_every == 0 || last)) {
            preempt_phase = "the text sample";
            sample_text(ops->next_logits, ctx, a->T, r->config.vocab_size, r->have_tokenizer ? &r->tokenizer : NULL,
                        eot, a->gen_tokens, &r->sample_rng);
        }
        if (last) { break; }

        fault_step_begin(&run_fault, step + 1, r->rank);
        op_profile_step_begin();
        double t0 = now_seconds();
        size_t bytes_before = ops->comm_bytes_sent ? ops->comm_bytes_sent(ctx) : 0;
        float loss, norm;
        int stop, synced, before = r->sync.live;
        StepVerdict verdict = run_optimizer_step(r, ops, ctx, step, &loss, &norm, &stop, &synced);
        step_bytes = ops->comm_bytes_sent ? ops->comm_bytes_sent(ctx) - bytes_before : 0;
        if (outer_active(&a->outer, step + 1)) { *(synced ? &sync_step_bytes : &plain_step_bytes) = step_bytes; }
        double dt = now_seconds() - t0;
        op_profile_step_end(dt, step > times.first_step);
        char mark[64] = "";
        if (synced) { snprintf(mark, sizeof(mark), " | outer sync, pseudo-grad norm %.4f", r->sync.last_pg_norm); }
        progress_step(&times, step, r->max_steps, dt, loss, norm, r->opt.adamw.lr, r->sync.tokens_per_step, mark, r->rank == 0);
        if (verdict == STEP_APPLY) {
            logger_log_train(&r->logger, step + 1, loss, r->opt.adamw.lr, norm, dt * 1000.0, r->sync.tokens_per_step / dt,
                             times.last_mfu);
        } else {
            logger_log_skip(&r->logger, step + 1, loss, r->opt.adamw.lr, norm, verdict == STEP_SKIP_SPIKE);
        }
        if (synced) { logger_log_outer(&r->logger, step + 1, r->sync.last_pg_norm); }
        int no_joiner = r->sync.live <= before; // the ranks rejoining now start at the next step
        // -le 1 -lo: no checkpoint holds an exchange in flight while a replica is missing (its held sum is
        // cut into the survivors' slices; the checkpoint layout is the full mesh's)
        int holdable = r->sync.live == r->mesh->dp_replicate || !replica_pending(&r->sync);
        if (a->log_dir[0] && no_joiner && holdable && (stop || (a->checkpoint_every > 0 && (step + 1) % a->checkpoint_every == 0))) {
            char why[4600];
            if (run_save_checkpoint(r, step + 1, ops, ctx, why, sizeof(why))) {
                r->ckpt_failures = 0;
                r->last_complete = step + 1;
            } else {
                run_checkpoint_failed(r, step + 1, why, stop);
            }
        }
        if (r->sync.rank0_lost || r->sync.below_min) { replica_stop(&r->sync, step + 1, r->last_complete); }
        if (stop) {
            preempt_report(&r->logger, a->log_dir, step + 1, r->rank);
            r->preempted = 1;
            break;
        }
    }
    preempt_phase = "the end of the run";
    op_profile_finish();
    if (r->rank == 0) {
        progress_summary(&times, r->sync.tokens_per_step);
        if (ops->comm_bytes_sent) {
            printf("communication measured: %zu bytes sent per rank in the last step\n", step_bytes);
            if (a->outer.every > 0) {
                printf("communication measured (-ls): %zu bytes sent per rank in a step without an outer sync, %zu in "
                       "one with (the last of each)\n", plain_step_bytes, sync_step_bytes);
            }
        }
        run_log_profile(r, times.peak_flops / r->world);
    }
    if (a->log_dir[0] != '\0' && r->rank == 0 && !r->preempted) { run_write_final_model(r, ops, ctx); }
}

static void run_free(TrainRun* r) {
    logger_free(&r->logger);
    if (r->args->hellaswag) { eval_close(&r->hellaswag); }
    dataloader_free(&r->train);
    if (r->have_val) { dataloader_free(&r->val); }
    if (r->have_tokenizer) { tokenizer_free(&r->tokenizer); }
    replica_run_free(&r->sync);
}

#endif
