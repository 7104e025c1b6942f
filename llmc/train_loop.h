// The training run both trainers share, from start-up to the final model file: the model source
// (the latest checkpoint, a model file or a descriptor), this data rank's loaders, the optimizer
// settings, resuming a checkpoint, the start-up report, and the loop itself: validation and
// sampling (and HellaSwag, -h 1) on their schedule, one optimizer step made of grad_accum
// micro-steps (skipped when non-finite or spiking), the step's stdout and main.log lines, the
// periodic checkpoints (one that cannot be written, a full disk say, is removed on every rank and
// training goes on; -nf in a row stop the run), and the preemption checkpoint and exit
// (docs/checkpoints.md), with -ls
// the replicas' outer syncs (llmc/outer_sync.h), and with -op 1 the op profile's table and record
// (llmc/op_profile.h). A trainer brings its model and its
// communication through TrainerOps (its data-parallel layer through TrainerOps.dp, llmc/dp_ops.h);
// whatever both trainers do alike lives here, once.
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
    // The data-parallel layer (llmc/dp_ops.h): the reduction, the update, the state file's arrays
    // and the replica sync, with the layer's own state.
    DataParallelOps dp;
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
    int below_min;            // -le 1: fewer than -lm replicas are left (the run stops after a checkpoint)
    int rank0_lost;           // -le 1: replica 0 is lost (the survivors stop after a checkpoint)
    const OuterConfig* outer; // the replica sync's settings (args->outer; every 0: synchronous)
    int outer_ready;          // the outer state holds the outer parameters (from step -lss on)
    int outer_skipped;        // the step after which an outer sync was last skipped (-1: none)
    float last_pg_norm;       // the pseudo-gradient norm of the last outer sync
    int* outer_inflight;      // -lo: the step each fragment's exchange started after, or -1
    int ckpt_failures;        // checkpoints in a row that could not be written (-nf)
    int last_complete;        // the newest complete checkpoint this run knows of (-1: none)
    int live_replicas;        // -le 1: the replicas still training (else dp_replicate)
    int tokens_per_step;      // the global batch of the replicas training (-d, less a dropped replica's share)
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

// -lo: whether an exchange is in flight (started, not yet applied).
static int run_outer_pending(const TrainRun* r) {
    int pending = 0;
    for (int f = 0; r->outer->every > 0 && f < outer_num_fragments(r->outer); f++) {
        pending |= r->outer_inflight[f] >= 0;
    }
    return pending;
}

// The TrainState of this rank at `step` (where the data loader and the sampler stand now).
static TrainState run_train_state(const TrainRun* r, int step) {
    const TrainArgs* a = r->args;
    TrainState s = train_state_now(a, r->mesh, r->zero_stage, step, &r->train, &r->sample_rng, r->opt_owned,
                                   r->opt_has_master);
    s.sync_stage = r->sync_stage;
    s.sync_owned = r->sync_owned;
    step_guard_save(&r->guard, &s);
    s.outer = *r->outer; // its header keeps what applies (state_pack_header)
    if (r->outer->every > 0) {
        s.in_agreement = outer_in_agreement(r->outer, step, r->max_steps);
        s.has_local = 1;
        s.has_outer = r->outer_ready;
        s.has_pending = run_outer_pending(r);
        s.in_agreement = s.in_agreement && !s.has_pending && r->outer_skipped != step; // a skip leaves them apart
    }
    s.has_residual = outer_has_residual(r->outer);
    return s;
}

// -lo, resuming from a checkpoint of step `step` that holds exchanges in flight: which started
// when (the schedule says: a fragment due after a step in (step - tau, step], not the last).
static void run_restore_inflight(TrainRun* r, int step) {
    int n = 0;
    for (int f = 0; f < outer_num_fragments(r->outer); f++) {
        for (int t = step - r->outer->overlap + 1; t <= step; t++) {
            if (t > 0 && t < r->max_steps && outer_fragment_due(r->outer, f, t, r->max_steps)) {
                r->outer_inflight[f] = t;
                n++;
            }
        }
    }
    if (n == 0) {
        fail("%s: checkpoint %d holds -lo exchanges in flight, but -ls %d -lf %d -lo %d -x %d starts none in steps "
             "%d-%d (resume with the run's flags)", r->args->log_dir, step, r->outer->every, r->outer->fragments,
             r->outer->overlap, r->max_steps, step - r->outer->overlap + 1, step);
    }
}

// Resuming a checkpoint written while replicas were lost (-le 1; its manifest names them): rank 0
// says that every replica trains again, their ranks having rebuilt them from the outer state
// (llmc/ckpt_layout.h), and main.log records the replicas from the next step on.
static void run_note_rebuilt(TrainRun* r) {
    int R = r->mesh->dp_replicate;
    if (r->rank != 0 || r->outer->every == 0 || R < 2) { return; }
    uint8_t* lost = (uint8_t*)malloc_check((size_t)R);
    int n = checkpoint_missing_replicas(r->args->log_dir, r->resume_step, R, lost);
    if (n > 0) {
        printf("checkpoint %d was written by %d of %d replicas; the %d lost are rebuilt from the outer state (local "
               "parameters = outer, AdamW moments and residual zero): %d replicas train on\n", r->resume_step, R - n,
               R, n, R);
        fflush(stdout);
        logger_log_replicas(&r->logger, r->resume_step + 1, R);
    }
    free(lost);
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
    r->live_replicas = mesh->dp_replicate;
    r->tokens_per_step = a->total_batch;
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
    r->outer = outer;
    r->outer_ready = 0;
    r->outer_skipped = -1;
    r->last_pg_norm = -1.0f;
    if (outer->fragments > r->config.num_layers) {
        fail("-lf %d: more fragments than the model's %d layers", outer->fragments, r->config.num_layers);
    }
    r->outer_inflight = (int*)malloc_check(outer_num_fragments(outer) * sizeof(int));
    for (int f = 0; f < outer_num_fragments(outer); f++) { r->outer_inflight[f] = -1; }
    step_guard_init(&r->guard, a->max_skips, a->spike_z, a->spike_window);
    if (r->resume_step >= 0) {
        StateTarget target = {.rank = r->rank, .world = r->world, .dp_shard = mesh->dp_shard, .zero_stage = zero_stage,
                              .B = a->B, .T = a->T, .total_batch = a->total_batch, .owned = opt_owned,
                              .has_master = opt_has_master, .sync_stage = plan->sync_stage,
                              .sync_owned = plan->sync_owned, .config = &r->config, .outer = outer,
                              .has_residual = outer_has_residual(outer), .optimizer = r->opt.kind};
        TrainState got;
        ops->dp.read_state(ops->dp.ctx, a->log_dir, r->resume_step, &target, &got);
        r->outer_ready = got.has_outer;
        if (got.has_pending) { run_restore_inflight(r, got.step); }
        r->start_step = got.step;
        step_guard_restore(&r->guard, &got);
        r->sample_rng.state = got.rng;
        dataloader_seek(&r->train, got.epoch, got.file_pos, got.row_pos);
    }
    logger_init(&r->logger, a->log_dir, r->rank, r->resume_step);
    if (r->resume_step >= 0) { run_note_rebuilt(r); }
    if (a->hellaswag) {
        eval_open(&r->hellaswag, a->hellaswag_path, a->hellaswag_examples, r->config.vocab_size, a->T);
    }
}

// -ls: validation, sampling and HellaSwag need the replicas to agree, so each of their steps must
// be an outer sync (or synchronous); refused at start-up otherwise.
static void run_check_outer_schedule(const TrainRun* r) {
    const TrainArgs* a = r->args;
    if (r->outer->every == 0) { return; }
    for (int step = r->start_step; step <= r->max_steps; step++) {
        if (outer_in_agreement(r->outer, step, r->max_steps)) { continue; }
        int val = (r->have_val || a->hellaswag) && a->val_every > 0 && step % a->val_every == 0;
        int sample = a->sample_every > 0 && step > 0 && step % a->sample_every == 0;
        if ((val || sample) && outer_num_fragments(r->outer) > 1) { // every step has a fragment out of sync
            fail("%s %d: with -lf %d the fragments sync at different steps, so the replicas agree only after the "
                 "last step (step %d is inside a window): use %s 0", val ? "-v" : "-s",
                 val ? a->val_every : a->sample_every, outer_num_fragments(r->outer), step, val ? "-v" : "-s");
        }
        if (val || sample) {
            fail("%s %d: step %d falls inside a -ls %d window (the replicas differ there; outer syncs after steps "
                 "-lss + k * %d = %d + k * %d and the last): use a multiple of -ls", val ? "-v" : "-s",
                 val ? a->val_every : a->sample_every, step, r->outer->every, r->outer->every, r->outer->start,
                 r->outer->every);
        }
    }
}

// -ls: the replicas (still training) hold the same outer (outer 1) or local (0) parameters after
// `step` steps, checked through their CRC-32Cs (a few bytes across the replicas); a mismatch stops the job.
static void run_check_replicas(TrainRun* r, const TrainerOps* ops, int step, int outer) {
    int R = r->live_replicas; // -le 1: the replicas still training (crcs in their order)
    if (R == 1) { return; }
    uint32_t* crcs = (uint32_t*)malloc_check(R * sizeof(uint32_t));
    ops->dp.replica_crcs(ops->dp.ctx, outer, crcs);
    outer_check_agreement(crcs, R, r->mesh, step, outer ? "the outer parameters" : "the parameters");
    free(crcs);
}

// -ls, before the first step: the replicas start equal (the outer state too, where it exists),
// and the outer parameters begin at -lss 0.
static void run_outer_begin(TrainRun* r, const TrainerOps* ops) {
    if (r->outer->every == 0) { return; }
    run_check_outer_schedule(r);
    if (!r->outer_ready && r->start_step >= r->outer->start) {
        ops->dp.outer_init(ops->dp.ctx);
        r->outer_ready = 1;
    }
    // -lo: after a resume with exchanges in flight the replicas' local values differ
    if (outer_in_agreement(r->outer, r->start_step, r->max_steps) && !run_outer_pending(r)) {
        run_check_replicas(r, ops, r->start_step, 0);
    }
    if (r->outer_ready) { run_check_replicas(r, ops, r->start_step, 1); }
}

// -ls, after the update of step t (1-based): the outer parameters begin after step -lss; then
// (-lo) every exchange in flight that started tau steps ago (all of them after the last step) is
// applied, and each fragment outer_fragment_due names syncs: blocking, or (-lo, not the last
// step) its exchange starts. Both in fragment order 0..F-1 on every rank. Returns whether an outer
// step was applied; last_pg_norm is the norm over the fragments applied.
static void run_note_replicas(TrainRun* r, const TrainerOps* ops, int step);

static int run_outer_after_step(TrainRun* r, const TrainerOps* ops, int t) {
    if (r->outer->every == 0) { return 0; }
    preempt_phase = "the outer sync";
    if (!r->outer_ready && t >= r->outer->start) {
        ops->dp.outer_init(ops->dp.ctx);
        r->outer_ready = 1;
    }
    int last = t == r->max_steps, applied = 0, F = outer_num_fragments(r->outer);
    float sq = 0.0f;
    for (int f = 0; f < F; f++) {
        int started = r->outer_inflight[f];
        if (started < 0 || (!last && t < started + r->outer->overlap)) { continue; }
        OuterCall then = {outer_config_at(r->outer, started), f, OUTER_FINISH, last, t};
        float part = 0.0f;
        ops->dp.outer_step(ops->dp.ctx, &then, &part);
        sq += part;
        r->outer_inflight[f] = -1;
        applied = 1;
    }
    for (int f = 0; f < F; f++) {
        if (!outer_fragment_due(r->outer, f, t, r->max_steps)) { continue; }
        OuterCall now = {outer_config_at(r->outer, t), f, r->outer->overlap > 0 && !last ? OUTER_START : OUTER_BLOCKING,
                         last, t};
        float part = 0.0f;
        int done = ops->dp.outer_step(ops->dp.ctx, &now, &part); // 0: skipped on every replica
        step_guard_outer(&r->guard, t, f, F, done, r->rank == 0);
        if (!done) {
            r->outer_skipped = t;
            logger_log_outer_skip(&r->logger, t);
            continue;
        }
        sq += part;
        if (now.phase == OUTER_START) {
            r->outer_inflight[f] = t;
        } else {
            applied = 1;
        }
    }
    run_note_replicas(r, ops, t); // -le 1: a replica lost in the sync (the check below is over those left)
    if (!applied) { return 0; }
    r->last_pg_norm = sqrtf(sq);
    run_check_replicas(r, ops, t, 1);
    return 1;
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

// -le 1: the replicas still training (0 where the layer has no elastic replicas); *alive (where
// given): which, R bytes (NULL without -le).
static int run_live_replicas(const TrainerOps* ops, const uint8_t** alive) {
    const char* note = NULL;
    if (alive) { *alive = NULL; }
    return ops->dp.live_replicas ? ops->dp.live_replicas(ops->dp.ctx, &note, alive) : 0;
}

// The rank that writes a checkpoint's model file and manifest: rank 0, or with -le 1 once replica 0
// is lost the first rank of the first replica left (the survivors' checkpoint before they stop).
static int run_writer(const TrainRun* r, const TrainerOps* ops) {
    const uint8_t* alive;
    run_live_replicas(ops, &alive);
    int q = 0;
    while (alive && q < r->mesh->dp_replicate - 1 && !alive[q]) { q++; }
    return q * r->mesh->dp_shard;
}

// -le 1, a checkpoint written while replicas are missing: lost (R bytes) = the replicas not
// training; returns lost, or NULL when every replica is.
static uint8_t* run_lost_replicas(const TrainRun* r, const TrainerOps* ops, uint8_t* lost) {
    const uint8_t* alive;
    int live = run_live_replicas(ops, &alive), R = r->mesh->dp_replicate;
    if (alive == NULL || live == R) { return NULL; }
    for (int q = 0; q < R; q++) { lost[q] = !alive[q]; }
    return lost;
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
    int writer = run_writer(r, ops);
    if (r->rank == writer) { ops->write_model(ctx, model, &model_crc); }
    fault_disk_full(&run_fault, FAULT_ENOSPC, step, r->rank, state_file_bytes(&s) / 2, "its state file");
    ops->dp.write_state(ops->dp.ctx, path, &s);
    soft_write_end();
    fault_in_checkpoint(&run_fault, step, r->rank);
    int who, live = run_live_replicas(ops, NULL);
    int code = run_agree_failure(ops, ctx, r->rank, r->world, ckpt_failure_code(dir, step, r->rank), &who);
    if (run_live_replicas(ops, NULL) != live) { // -le 1: a replica was dropped in the agreement, its files may be missing
        snprintf(why, why_len, "a replica was lost while it was written (-le 1)");
        checkpoint_remove_partial(dir, step, r->rank, writer);
        return 0;
    }
    if (code == 0) {
        fault_disk_full(&run_fault, FAULT_ENOSPC_DONE, step, r->rank, 16, "the manifest");
        uint8_t* lost = (uint8_t*)malloc_check((size_t)r->mesh->dp_replicate);
        int done = r->rank != writer || checkpoint_commit(r->args, step, model, model_crc, r->world, &s,
                                                          run_lost_replicas(r, ops, lost));
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
                 step, why, r->rank0_lost ? "with replica 0 lost" : r->below_min ? "with fewer than -lm replicas left" :
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

// -le 1: after the agreement dropped a replica or one rejoined, rank 0 says so (stdout and
// main.log, from `step` on) and the tokens per step become those of the replicas training.
// Checkpoints go on without the lost replicas' files (a resume rebuilds them from the outer state).
static void run_note_replicas(TrainRun* r, const TrainerOps* ops, int step) {
    if (!ops->dp.live_replicas) { return; }
    const char* note = NULL;
    int live = ops->dp.live_replicas(ops->dp.ctx, &note, NULL), R = r->mesh->dp_replicate;
    if (live == r->live_replicas || note == NULL) { return; }
    r->live_replicas = live;
    r->tokens_per_step = (int)((long)r->args->total_batch / R * live);
    if (r->rank == run_writer(r, ops)) { // rank 0, or once its replica is lost the survivors' first
        printf("%s\n%d of %d replicas train on: %d tokens per step\n", note, live, R, r->tokens_per_step);
        fflush(stdout);
    }
    logger_log_replicas(&r->logger, step, live);
}

// -le 1, after step `step`'s agreement and its outer sync: a replica lost there is noted; fewer than
// -lm replicas left, or replica 0 lost (its roles do not move yet), stop the run after a checkpoint
// of the step (*stop; the same on every survivor).
static void run_membership(TrainRun* r, const TrainerOps* ops, int step, int* stop) {
    if (!r->args->elastic) { return; }
    run_note_replicas(r, ops, step);
    if (r->live_replicas < r->args->min_replicas) {
        r->below_min = 1;
        *stop = 1;
    }
    if (run_writer(r, ops) != 0) {
        r->rank0_lost = 1;
        *stop = 1;
    }
}

// -le 1, after the outer sync of step t: replicas waiting to rejoin are admitted (llmc/dp_elastic.cuh);
// then, as on the joining ranks (run_outer_begin), every replica's local and outer parameters
// are checked equal.
static void run_admit_replicas(TrainRun* r, const TrainerOps* ops, int t) {
    if (!ops->dp.admit || ops->dp.admit(ops->dp.ctx, t) == 0) { return; }
    run_note_replicas(r, ops, t + 1);
    // (-lo: each keeps its steps since the exchange began; -lf: the fragments not synced at t differ, as
    // the joining ranks' run_outer_begin knows too)
    if (r->outer->overlap == 0 && outer_in_agreement(r->outer, t, r->max_steps)) { run_check_replicas(r, ops, t, 0); }
    run_check_replicas(r, ops, t, 1);
}

// -le 1, a rank whose replica rejoined a running job after the outer sync of `step`: the outer
// state from replica 0 (the local parameters become the outer ones, AdamW's moments zero), and its
// data where it would be had it never left: the batches of the steps since its checkpoint skipped.
static void run_join(TrainRun* r, const TrainerOps* ops, int step) {
    ops->dp.join(ops->dp.ctx);
    for (int t = r->start_step; t < step; t++) {
        dataloader_replica_major(&r->train, outer_active(r->outer, t + 1) ? r->mesh->dp_shard : 0);
        for (int micro = 0; micro < r->grad_accum; micro++) { dataloader_next(&r->train); }
    }
    r->start_step = step;
    r->outer_ready = 1;
    for (int f = 0; f < outer_num_fragments(r->outer); f++) { r->outer_inflight[f] = -1; } // (its checkpoint's: gone)
    const char* note = NULL;
    r->live_replicas = ops->dp.live_replicas(ops->dp.ctx, &note, NULL);
    r->tokens_per_step = (int)((long)r->args->total_batch / r->mesh->dp_replicate * r->live_replicas);
}

// -lw: the run starts without the replicas that were not all there (llmc/rendezvous.h): the tokens
// per step are those of the replicas training, rank 0 says so and main.log gets s:S replicas:R' at
// the first step; the missing ones rejoin as lost ones do.
static void run_start_partial(TrainRun* r, const TrainerOps* ops) {
    const char* note = NULL;
    const uint8_t* alive = NULL;
    int R = r->mesh->dp_replicate;
    r->live_replicas = ops->dp.live_replicas(ops->dp.ctx, &note, &alive);
    r->tokens_per_step = (int)((long)r->args->total_batch / R * r->live_replicas);
    if (r->rank == 0) {
        printf("-lw: %d of %d replicas train from step %d (missing:", r->live_replicas, R, r->start_step + 1);
        for (int q = 0; q < R; q++) {
            if (!alive[q]) { printf(" %d", q); }
        }
        printf("): %d tokens per step\n", r->tokens_per_step);
        fflush(stdout);
    }
    logger_log_replicas(&r->logger, r->start_step + 1, r->live_replicas);
}

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
    if (r->outer->every > 0) {
        int alone = outer_active(r->outer, step + 1);
        ops->dp.set_replica_reduce(ops->dp.ctx, !alone);
        dataloader_replica_major(&r->train, alone ? r->mesh->dp_shard : 0);
    } else if (outer_compressed(r->outer)) {
        OuterConfig now = outer_config_at(r->outer, step + 1);
        ops->dp.set_gradient_wire(ops->dp.ctx, &now);
    }
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
    run_membership(r, ops, step + 1, stop);
    StepVerdict verdict = step_guard_judge(&r->guard, step + 1, *loss, *norm, outer_active(r->outer, step + 1), r->mesh);
    optimizer_set_lr(&r->opt, a, schedule_lr(&r->schedule, step));
    if (verdict == STEP_APPLY) {
        ops->dp.update(ops->dp.ctx, &r->opt, clip_scale(*norm, a->grad_clip), step + 1 - r->guard.skipped);
    }
    *synced = run_outer_after_step(r, ops, step + 1);
    run_membership(r, ops, step + 1, stop); // a replica lost in the sync
    if (*synced && !*stop) { run_admit_replicas(r, ops, step + 1); }
    return verdict;
}

// -le 1: replica 0 lost, or fewer than -lm replicas left, after `step` and its checkpoint (where
// one was written): the run stops, saying why and what resumes it.
static void run_stop_elastic(const TrainRun* r, int step) {
    char why[256], then[256];
    if (r->rank0_lost) {
        snprintf(why, sizeof(why), "replica 0, holding world rank 0 (the logs, the rendezvous, the agreement), is lost, "
                 "and moving those roles is not built yet");
    } else {
        snprintf(why, sizeof(why), "%d of %d replicas are left, fewer than -lm %d", r->live_replicas,
                 r->mesh->dp_replicate, r->args->min_replicas);
    }
    if (r->last_complete == step) {
        snprintf(then, sizeof(then), "after checkpoint %d (-y 1 with every replica resumes it, rebuilding the lost ones "
                 "from the outer state)", step);
    } else {
        snprintf(then, sizeof(then), "at step %d without a checkpoint of it (%s): -y 1 resumes from the newest complete "
                 "one", step, r->args->log_dir[0] ? "an -lo exchange was in flight" : "no -o");
    }
    fail("%s: the run stops %s", why, then);
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
    run_outer_begin(r, ops);
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
        int stop, synced, before = r->live_replicas;
        StepVerdict verdict = run_optimizer_step(r, ops, ctx, step, &loss, &norm, &stop, &synced);
        step_bytes = ops->comm_bytes_sent ? ops->comm_bytes_sent(ctx) - bytes_before : 0;
        if (outer_active(r->outer, step + 1)) { *(synced ? &sync_step_bytes : &plain_step_bytes) = step_bytes; }
        double dt = now_seconds() - t0;
        op_profile_step_end(dt, step > times.first_step);
        char mark[64] = "";
        if (synced) { snprintf(mark, sizeof(mark), " | outer sync, pseudo-grad norm %.4f", r->last_pg_norm); }
        progress_step(&times, step, r->max_steps, dt, loss, norm, r->opt.adamw.lr, r->tokens_per_step, mark, r->rank == 0);
        if (verdict == STEP_APPLY) {
            logger_log_train(&r->logger, step + 1, loss, r->opt.adamw.lr, norm, dt * 1000.0, r->tokens_per_step / dt,
                             times.last_mfu);
        } else {
            logger_log_skip(&r->logger, step + 1, loss, r->opt.adamw.lr, norm, verdict == STEP_SKIP_SPIKE);
        }
        if (synced) { logger_log_outer(&r->logger, step + 1, r->last_pg_norm); }
        int no_joiner = r->live_replicas <= before; // the ranks rejoining now start at the next step
        // -le 1 -lo: no checkpoint holds an exchange in flight while a replica is missing (its held sum is
        // cut into the survivors' slices; the checkpoint layout is the full mesh's)
        int holdable = r->live_replicas == r->mesh->dp_replicate || !run_outer_pending(r);
        if (a->log_dir[0] && no_joiner && holdable && (stop || (a->checkpoint_every > 0 && (step + 1) % a->checkpoint_every == 0))) {
            char why[4600];
            if (run_save_checkpoint(r, step + 1, ops, ctx, why, sizeof(why))) {
                r->ckpt_failures = 0;
                r->last_complete = step + 1;
            } else {
                run_checkpoint_failed(r, step + 1, why, stop);
            }
        }
        if (r->rank0_lost || r->below_min) { run_stop_elastic(r, step + 1); }
        if (stop) {
            preempt_report(&r->logger, a->log_dir, step + 1, r->rank);
            r->preempted = 1;
            break;
        }
    }
    preempt_phase = "the end of the run";
    op_profile_finish();
    if (r->rank == 0) {
        progress_summary(&times, r->tokens_per_step);
        if (ops->comm_bytes_sent) {
            printf("communication measured: %zu bytes sent per rank in the last step\n", step_bytes);
            if (r->outer->every > 0) {
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
    free(r->outer_inflight);
}

#endif
