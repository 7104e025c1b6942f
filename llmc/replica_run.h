// The training run's replica sync (-ls, -lf, -lo, -rq/-rk, -le; docs/distributed.md), above the
// ZeRO layer and the optimizer: which steps average over every rank and which over the replica
// alone, the outer syncs after the update (blocking, or -lo's exchanges started and merged tau
// steps later), the replicas' agreement checked through checksums, what a checkpoint keeps of it
// and a resume restores, and with -le 1 the replicas lost, rejoining or missing at the start. It
// reaches the backend only through ReplicaOps (llmc/replica_ops.h); in a synchronous run with an
// fp32 link the table is empty and every function here returns at once.
#ifndef LLMC_REPLICA_RUN_H
#define LLMC_REPLICA_RUN_H

#include <stdio.h>
#include "utils.h"
#include "args.h"
#include "mesh.h"
#include "logger.h"
#include "dataloader.h"
#include "step_guard.h"
#include "preempt.h"
#include "checkpoint.h"
#include "outer_sync.h"
#include "replica_ops.h"

typedef struct {
    ReplicaOps ops;
    const TrainArgs* args;
    const OuterConfig* outer; // the settings (args->outer; every 0: synchronous)
    const Mesh* mesh;
    int rank, max_steps;
    Logger* logger;           // the run's (main.log, metrics.jsonl)
    StepGuard* guard;         // the run's skip guard (an outer sync skipped counts in it)
    int ready;                // the outer state holds the outer parameters (from step -lss on)
    int skipped;              // the step after which an outer sync was last skipped (-1: none)
    float last_pg_norm;       // the pseudo-gradient norm of the last outer sync
    int* inflight;            // -lo: the step each fragment's exchange started after, or -1
    int live;                 // -le 1: the replicas still training (else dp_replicate)
    int tokens_per_step;      // the global batch of the replicas training (-d, less a dropped replica's share)
    int below_min;            // -le 1: fewer than -lm replicas are left (the run stops after a checkpoint)
    int rank0_lost;           // -le 1: replica 0 is lost (the survivors stop after a checkpoint)
} ReplicaRun;

static void replica_run_init(ReplicaRun* s, const ReplicaOps* ops, const TrainArgs* a, const Mesh* mesh, int rank,
                             int max_steps, int num_layers, Logger* logger, StepGuard* guard) {
    memset(s, 0, sizeof(*s));
    if (replica_sync_on(&a->outer)) { s->ops = *ops; }
    s->args = a;
    s->outer = &a->outer;
    s->mesh = mesh;
    s->rank = rank;
    s->max_steps = max_steps;
    s->logger = logger;
    s->guard = guard;
    s->skipped = -1;
    s->last_pg_norm = -1.0f;
    s->live = mesh->dp_replicate;
    s->tokens_per_step = a->total_batch;
    if (s->outer->fragments > num_layers) {
        fail("-lf %d: more fragments than the model's %d layers", s->outer->fragments, num_layers);
    }
    s->inflight = (int*)malloc_check(outer_num_fragments(s->outer) * sizeof(int));
    for (int f = 0; f < outer_num_fragments(s->outer); f++) { s->inflight[f] = -1; }
}

static void replica_run_free(ReplicaRun* s) { free(s->inflight); }

// -lo: whether an exchange is in flight (started, not yet applied).
static int replica_pending(const ReplicaRun* s) {
    int pending = 0;
    for (int f = 0; s->outer->every > 0 && f < outer_num_fragments(s->outer); f++) { pending |= s->inflight[f] >= 0; }
    return pending;
}

// What a checkpoint of `step` keeps of the sync (its header keeps what applies: state_pack_header).
static void replica_train_state(const ReplicaRun* s, int step, TrainState* ts) {
    ts->outer = *s->outer;
    if (s->outer->every > 0) {
        ts->in_agreement = outer_in_agreement(s->outer, step, s->max_steps);
        ts->has_local = 1;
        ts->has_outer = s->ready;
        ts->has_pending = replica_pending(s);
        ts->in_agreement = ts->in_agreement && !ts->has_pending && s->skipped != step; // a skip leaves them apart
    }
    ts->has_residual = outer_has_residual(s->outer);
}

// -lo, resuming from a checkpoint of step `step` that holds exchanges in flight: which started
// when (the schedule says: a fragment due after a step in (step - tau, step], not the last).
static void replica_restore_inflight(ReplicaRun* s, int step) {
    int n = 0;
    for (int f = 0; f < outer_num_fragments(s->outer); f++) {
        for (int t = step - s->outer->overlap + 1; t <= step; t++) {
            if (t > 0 && t < s->max_steps && outer_fragment_due(s->outer, f, t, s->max_steps)) {
                s->inflight[f] = t;
                n++;
            }
        }
    }
    if (n == 0) {
        fail("%s: checkpoint %d holds -lo exchanges in flight, but -ls %d -lf %d -lo %d -x %d starts none in steps "
             "%d-%d (resume with the run's flags)", s->args->log_dir, step, s->outer->every, s->outer->fragments,
             s->outer->overlap, s->max_steps, step - s->outer->overlap + 1, step);
    }
}

// A resume's view of the checkpoint's sync state (got): the outer parameters there or not, the
// exchanges in flight restored.
static void replica_resumed(ReplicaRun* s, const TrainState* got) {
    s->ready = got->has_outer;
    if (got->has_pending) { replica_restore_inflight(s, got->step); }
}

// Resuming a checkpoint written while replicas were lost (-le 1; its manifest names them): rank 0
// says that every replica trains again, their ranks having rebuilt them from the outer state
// (llmc/ckpt_layout.h), and main.log records the replicas from the next step on.
static void replica_note_rebuilt(const ReplicaRun* s, int resume_step) {
    int R = s->mesh->dp_replicate;
    if (s->rank != 0 || s->outer->every == 0 || R < 2) { return; }
    uint8_t* lost = (uint8_t*)malloc_check((size_t)R);
    int n = checkpoint_missing_replicas(s->args->log_dir, resume_step, R, lost);
    if (n > 0) {
        printf("checkpoint %d was written by %d of %d replicas; the %d lost are rebuilt from the outer state (local "
               "parameters = outer, AdamW moments and residual zero): %d replicas train on\n", resume_step, R - n, R,
               n, R);
        fflush(stdout);
        logger_log_replicas(s->logger, resume_step + 1, R);
    }
    free(lost);
}

// -ls: validation, sampling and HellaSwag need the replicas to agree, so each of their steps must
// be an outer sync (or synchronous); refused at start-up otherwise. val: whether the run has a
// validation (or HellaSwag) schedule.
static void replica_check_schedule(const ReplicaRun* s, int start_step, int val_on) {
    const TrainArgs* a = s->args;
    if (s->outer->every == 0) { return; }
    for (int step = start_step; step <= s->max_steps; step++) {
        if (outer_in_agreement(s->outer, step, s->max_steps)) { continue; }
        int val = val_on && a->val_every > 0 && step % a->val_every == 0;
        int sample = a->sample_every > 0 && step > 0 && step % a->sample_every == 0;
        if ((val || sample) && outer_num_fragments(s->outer) > 1) { // every step has a fragment out of sync
            fail("%s %d: with -lf %d the fragments sync at different steps, so the replicas agree only after the "
                 "last step (step %d is inside a window): use %s 0", val ? "-v" : "-s",
                 val ? a->val_every : a->sample_every, outer_num_fragments(s->outer), step, val ? "-v" : "-s");
        }
        if (val || sample) {
            fail("%s %d: step %d falls inside a -ls %d window (the replicas differ there; outer syncs after steps "
                 "-lss + k * %d = %d + k * %d and the last): use a multiple of -ls", val ? "-v" : "-s",
                 val ? a->val_every : a->sample_every, step, s->outer->every, s->outer->every, s->outer->start,
                 s->outer->every);
        }
    }
}

// -ls: the replicas (still training) hold the same outer (outer 1) or local (0) parameters after
// `step` steps, checked through their CRC-32Cs (a few bytes across the replicas); a mismatch stops the job.
static void replica_check(ReplicaRun* s, int step, int outer) {
    int R = s->live; // -le 1: the replicas still training (crcs in their order)
    if (R == 1) { return; }
    uint32_t* crcs = (uint32_t*)malloc_check(R * sizeof(uint32_t));
    s->ops.replica_crcs(s->ops.ctx, outer, crcs);
    outer_check_agreement(crcs, R, s->mesh, step, outer ? "the outer parameters" : "the parameters");
    free(crcs);
}

// -ls, before the first step (start_step): the replicas start equal (the outer state too, where it
// exists), and the outer parameters begin at -lss 0.
static void replica_begin(ReplicaRun* s, int start_step, int val_on) {
    if (s->outer->every == 0) { return; }
    replica_check_schedule(s, start_step, val_on);
    if (!s->ready && start_step >= s->outer->start) {
        s->ops.outer_init(s->ops.ctx);
        s->ready = 1;
    }
    // -lo: after a resume with exchanges in flight the replicas' local values differ
    if (outer_in_agreement(s->outer, start_step, s->max_steps) && !replica_pending(s)) { replica_check(s, start_step, 0); }
    if (s->ready) { replica_check(s, start_step, 1); }
}

// Before the micro-steps of 0-based `step`: with -ls, whether its gradients average over every
// rank (and the data order that follows, llmc/dataloader.h); with -ls 0 and -rq/-rk, the link's
// format for its gradients.
static void replica_before_step(ReplicaRun* s, int step, DataLoader* train) {
    if (s->outer->every > 0) {
        int alone = outer_active(s->outer, step + 1);
        s->ops.set_replica_reduce(s->ops.ctx, !alone);
        dataloader_replica_major(train, alone ? s->mesh->dp_shard : 0);
    } else if (outer_compressed(s->outer)) {
        OuterConfig now = outer_config_at(s->outer, step + 1);
        s->ops.set_gradient_wire(s->ops.ctx, &now);
    }
}

// -le 1: the replicas still training (0 where the layer has no elastic replicas); *alive (where
// given): which, R bytes (NULL without -le).
static int replica_live(const ReplicaRun* s, const uint8_t** alive) {
    const char* note = NULL;
    if (alive) { *alive = NULL; }
    return s->ops.live_replicas ? s->ops.live_replicas(s->ops.ctx, &note, alive) : 0;
}

// The rank that writes a checkpoint's model file and manifest: rank 0, or with -le 1 once replica 0
// is lost the first rank of the first replica left (the survivors' checkpoint before they stop).
static int replica_writer(const ReplicaRun* s) {
    const uint8_t* alive;
    replica_live(s, &alive);
    int q = 0;
    while (alive && q < s->mesh->dp_replicate - 1 && !alive[q]) { q++; }
    return q * s->mesh->dp_shard;
}

// -le 1, a checkpoint written while replicas are missing: lost (R bytes) = the replicas not
// training; returns lost, or NULL when every replica is.
static uint8_t* replica_lost(const ReplicaRun* s, uint8_t* lost) {
    const uint8_t* alive;
    int live = replica_live(s, &alive), R = s->mesh->dp_replicate;
    if (alive == NULL || live == R) { return NULL; }
    for (int q = 0; q < R; q++) { lost[q] = !alive[q]; }
    return lost;
}

// -le 1: after the agreement dropped a replica or one rejoined, rank 0 says so (stdout and
// main.log, from `step` on) and the tokens per step become those of the replicas training.
// Checkpoints go on without the lost replicas' files (a resume rebuilds them from the outer state).
static void replica_note(ReplicaRun* s, int step) {
    if (!s->ops.live_replicas) { return; }
    const char* note = NULL;
    int live = s->ops.live_replicas(s->ops.ctx, &note, NULL), R = s->mesh->dp_replicate;
    if (live == s->live || note == NULL) { return; }
    s->live = live;
    s->tokens_per_step = (int)((long)s->args->total_batch / R * live);
    if (s->rank == replica_writer(s)) { // rank 0, or once its replica is lost the survivors' first
        printf("%s\n%d of %d replicas train on: %d tokens per step\n", note, live, R, s->tokens_per_step);
        fflush(stdout);
    }
    logger_log_replicas(s->logger, step, live);
}

// -ls, after the update of step t (1-based): the outer parameters begin after step -lss; then
// (-lo) every exchange in flight that started tau steps ago (all of them after the last step) is
// applied, and each fragment outer_fragment_due names syncs: blocking, or (-lo, not the last
// step) its exchange starts. Both in fragment order 0..F-1 on every rank. Returns whether an outer
// step was applied; last_pg_norm is the norm over the fragments applied.
static int replica_after_step(ReplicaRun* s, int t) {
    if (s->outer->every == 0) { return 0; }
    preempt_phase = "the outer sync";
    if (!s->ready && t >= s->outer->start) {
        s->ops.outer_init(s->ops.ctx);
        s->ready = 1;
    }
    int last = t == s->max_steps, applied = 0, F = outer_num_fragments(s->outer);
    float sq = 0.0f;
    for (int f = 0; f < F; f++) {
        int started = s->inflight[f];
        if (started < 0 || (!last && t < started + s->outer->overlap)) { continue; }
        OuterCall then = {outer_config_at(s->outer, started), f, OUTER_FINISH, last, t};
        float part = 0.0f;
        s->ops.outer_step(s->ops.ctx, &then, &part);
        sq += part;
        s->inflight[f] = -1;
        applied = 1;
    }
    for (int f = 0; f < F; f++) {
        if (!outer_fragment_due(s->outer, f, t, s->max_steps)) { continue; }
        OuterCall now = {outer_config_at(s->outer, t), f, s->outer->overlap > 0 && !last ? OUTER_START : OUTER_BLOCKING,
                         last, t};
        float part = 0.0f;
        int done = s->ops.outer_step(s->ops.ctx, &now, &part); // 0: skipped on every replica
        step_guard_outer(s->guard, t, f, F, done, s->rank == 0);
        if (!done) {
            s->skipped = t;
            logger_log_outer_skip(s->logger, t);
            continue;
        }
        sq += part;
        if (now.phase == OUTER_START) {
            s->inflight[f] = t;
        } else {
            applied = 1;
        }
    }
    replica_note(s, t); // -le 1: a replica lost in the sync (the check below is over those left)
    if (!applied) { return 0; }
    s->last_pg_norm = sqrtf(sq);
    replica_check(s, t, 1);
    return 1;
}

// -le 1, after step `step`'s agreement and its outer sync: a replica lost there is noted; fewer than
// -lm replicas left, or replica 0 lost (its roles do not move yet), stop the run after a checkpoint
// of the step (*stop; the same on every survivor).
static void replica_membership(ReplicaRun* s, int step, int* stop) {
    if (!s->args->elastic) { return; }
    replica_note(s, step);
    if (s->live < s->args->min_replicas) {
        s->below_min = 1;
        *stop = 1;
    }
    if (replica_writer(s) != 0) {
        s->rank0_lost = 1;
        *stop = 1;
    }
}

// -le 1, after the outer sync of step t: replicas waiting to rejoin are admitted (llmc/dp_elastic.cuh);
// then, as on the joining ranks (replica_begin), every replica's local and outer parameters
// are checked equal.
static void replica_admit(ReplicaRun* s, int t) {
    if (!s->ops.admit || s->ops.admit(s->ops.ctx, t) == 0) { return; }
    replica_note(s, t + 1);
    // (-lo: each keeps its steps since the exchange began; -lf: the fragments not synced at t differ, as
    // the joining ranks' replica_begin knows too)
    if (s->outer->overlap == 0 && outer_in_agreement(s->outer, t, s->max_steps)) { replica_check(s, t, 0); }
    replica_check(s, t, 1);
}

// -le 1, a rank whose replica rejoined a running job after the outer sync of `step`, its
// checkpoint (or the start) at start_step: the outer state from replica 0 (the local parameters
// become the outer ones, the optimizer's moments zero), and its data where it would be had it
// never left: the batches of the steps since then skipped (grad_accum per step).
static void replica_join(ReplicaRun* s, int start_step, int step, DataLoader* train, int grad_accum) {
    s->ops.join(s->ops.ctx);
    for (int t = start_step; t < step; t++) {
        dataloader_replica_major(train, outer_active(s->outer, t + 1) ? s->mesh->dp_shard : 0);
        for (int micro = 0; micro < grad_accum; micro++) { dataloader_next(train); }
    }
    s->ready = 1;
    for (int f = 0; f < outer_num_fragments(s->outer); f++) { s->inflight[f] = -1; } // (its checkpoint's: gone)
    const char* note = NULL;
    s->live = s->ops.live_replicas(s->ops.ctx, &note, NULL);
    s->tokens_per_step = (int)((long)s->args->total_batch / s->mesh->dp_replicate * s->live);
}

// -lw: the run starts (after start_step) without the replicas that were not all there
// (llmc/rendezvous.h): the tokens per step are those of the replicas training, rank 0 says so and
// main.log gets s:S replicas:R' at the first step; the missing ones rejoin as lost ones do.
static void replica_start_partial(ReplicaRun* s, int start_step) {
    const char* note = NULL;
    const uint8_t* alive = NULL;
    int R = s->mesh->dp_replicate;
    s->live = s->ops.live_replicas(s->ops.ctx, &note, &alive);
    s->tokens_per_step = (int)((long)s->args->total_batch / R * s->live);
    if (s->rank == 0) {
        printf("-lw: %d of %d replicas train from step %d (missing:", s->live, R, start_step + 1);
        for (int q = 0; q < R; q++) {
            if (!alive[q]) { printf(" %d", q); }
        }
        printf("): %d tokens per step\n", s->tokens_per_step);
        fflush(stdout);
    }
    logger_log_replicas(s->logger, start_step + 1, s->live);
}

// -le 1: replica 0 lost, or fewer than -lm replicas left, after `step` and its checkpoint (where
// one was written: last_complete == step): the run stops, saying why and what resumes it.
static void replica_stop(const ReplicaRun* s, int step, int last_complete) {
    char why[256], then[256];
    if (s->rank0_lost) {
        snprintf(why, sizeof(why), "replica 0, holding world rank 0 (the logs, the rendezvous, the agreement), is lost, "
                 "and moving those roles is not built yet");
    } else {
        snprintf(why, sizeof(why), "%d of %d replicas are left, fewer than -lm %d", s->live, s->mesh->dp_replicate,
                 s->args->min_replicas);
    }
    if (last_complete == step) {
        snprintf(then, sizeof(then), "after checkpoint %d (-y 1 with every replica resumes it, rebuilding the lost ones "
                 "from the outer state)", step);
    } else {
        snprintf(then, sizeof(then), "at step %d without a checkpoint of it (%s): -y 1 resumes from the newest complete "
                 "one", step, s->args->log_dir[0] ? "an -lo exchange was in flight" : "no -o");
    }
    fail("%s: the run stops %s", why, then);
}

#endif
