// Loading a checkpoint's state onto this run's layout (docs/checkpoints.md): the rank's own file
// when world size, -ds and -z (and the replica sync's layout) are the checkpoint's (exact), else the
// old shards re-cut unit by unit, AdamW's arrays and the sync's each by its own layout, into the
// elements this rank owns now (any world size, -ds, -z and -b with the same -t and -d),
// from the rank's own replica under -ls or with a residual. The -ls rules are checked first
// (llmc/ckpt_outer_rules.h).
#ifndef LLMC_CKPT_LAYOUT_H
#define LLMC_CKPT_LAYOUT_H

#include "ckpt_state_file.h"
#include "ckpt_outer_rules.h"
#include "ckpt_manifest.h"
#include "mesh.h"

// The files of a checkpoint written on another layout, opened as needed: shard s of the old
// layout is old rank replica * old dp_shard + s (replica 0 but with -ls, where each replica reads
// its own); arrays in a ZeRO-0 layout (stage 0) are all in the replica's first rank's file.
typedef struct {
    const char* dir;
    int step;
    int replica;
    int stage;            // the old layout of the arrays being read: AdamW's or the sync's (TrainState)
    TrainState old;       // the first state file's header: the old layout
    ShardLayout layout;   // the old shard layout (stages 1, 2)
    FILE** files;         // per old shard
} OldShards;

static const char* state_array_names[STATE_ARRAYS] = {"m", "v", "master weights", "local parameters",
                                                      "outer parameters", "outer momentum", "residual",
                                                      "-lo local snapshots", "-lo held sums"};

// Reads elements [e0, e0 + n) of unit u (or, from a ZeRO-0 layout, of the flat parameters from
// unit u's offset) into each non-NULL dst array (advanced past them).
static void old_shards_read(OldShards* o, const ShardUnit* unit, int u, size_t e0, size_t n, float** dst) {
    while (n > 0) {
        int s = 0;
        size_t pos = unit->offset + e0, take = n;
        if (o->stage != 0) {
            const ShardUnit* ou = &o->layout.units[u];
            s = (int)(e0 / ou->slice);
            size_t within = e0 - (size_t)s * ou->slice;
            pos = ou->shard_offset + within;
            if (take > ou->slice - within) { take = ou->slice - within; }
        }
        char path[4096];
        checkpoint_path(path, sizeof(path), o->dir, "state", o->step, o->replica * o->old.dp_shard + s);
        if (o->files[s] == NULL) { o->files[s] = fopen_check(path, "rb"); }
        FILE* f = o->files[s];
        for (int k = 0; k < STATE_ARRAYS; k++) {
            if (dst[k] == NULL) { continue; }
            long at = 1024 + (long)(((uint64_t)state_array_at(&o->old, k) + pos) * sizeof(float));
            if (fseek(f, at, SEEK_SET) != 0) { fail("%s: seek to %ld failed", path, at); }
            fread_check(dst[k], sizeof(float), take, f, path, state_array_names[k]);
            dst[k] += take;
        }
        e0 += take;
        n -= take;
    }
}

// The arrays k in [k0, k1) (one group: AdamW's or the sync's, llmc/ckpt_state_file.h) re-cut from
// the old layout old_stage to this rank's new_stage (new_owned elements): for every unit, the
// elements this rank owns (all of them in stage 0), read from the old shard that holds each piece,
// into every array both the checkpoint and `arrays` have (the others are zeroed). Padding stays 0.
static void state_reshard_group(const char* dir, int step, const StateTarget* t, const TrainState* old, int replica,
                                const StateArrays* arrays, int k0, int k1, int old_stage, int new_stage,
                                size_t new_owned) {
    int any = 0;
    for (int k = k0; k < k1; k++) { any |= arrays->a[k] != NULL; }
    if (!any) { return; }
    OldShards o;
    o.dir = dir;
    o.step = step;
    o.replica = replica;
    o.stage = old_stage;
    o.old = *old;
    int old_files = old_stage == 0 ? 1 : old->dp_shard;
    o.files = (FILE**)calloc_check(old_files, sizeof(FILE*));
    shard_layout_init(&o.layout, t->config, old_stage == 0 ? 1 : old->dp_shard);
    ShardLayout now;
    shard_layout_init(&now, t->config, new_stage == 0 ? 1 : t->dp_shard);
    int shard_idx = t->rank % t->dp_shard;
    float* base[STATE_ARRAYS] = {NULL};
    for (int k = k0; k < k1; k++) {
        base[k] = state_array_at(old, k) >= 0 ? arrays->a[k] : NULL;
        if (arrays->a[k]) { memset(arrays->a[k], 0, new_owned * sizeof(float)); }
    }
    for (int u = 0; u < now.num_units; u++) {
        const ShardUnit* unit = &now.units[u];
        size_t first = 0, count = unit->size, at = unit->offset;
        if (new_stage != 0) {
            count = unit_owned(unit, shard_idx, &first);
            at = unit->shard_offset;
        }
        if (count == 0) { continue; }
        float* dst[STATE_ARRAYS];
        for (int k = 0; k < STATE_ARRAYS; k++) { dst[k] = base[k] ? base[k] + at : NULL; }
        old_shards_read(&o, unit, u, first, count, dst);
    }
    for (int s = 0; s < old_files; s++) {
        if (o.files[s]) { fclose(o.files[s]); }
    }
    free(o.files);
    shard_layout_free(&o.layout);
    shard_layout_free(&now);
}

// Re-cuts the state of a checkpoint written with another world size, -ds or -z (or sync layout)
// for this rank: AdamW's arrays and the sync's, each group from its old layout to its new one.
// replica: whose files to read (-ls; else 0).
static void state_load_resharded_arrays(const char* dir, int step, const StateTarget* t, const TrainState* old,
                                        int replica, const StateArrays* arrays) {
    state_reshard_group(dir, step, t, old, replica, arrays, STATE_M, STATE_LOCAL, old->zero_stage, t->zero_stage,
                        t->owned);
    state_reshard_group(dir, step, t, old, replica, arrays, STATE_LOCAL, STATE_ARRAYS, old->sync_stage,
                        t->sync_stage, t->sync_owned);
}

// -le 1: the replica whose files a rank of `replica` reads from checkpoint `step` (old: its first
// state file's header): its own, or where the checkpoint lost it (its manifest's "missing" line) the first
// replica it has; *rebuilt says which.
static int state_source_replica(const char* dir, int step, const TrainState* old, int replica, int* rebuilt) {
    int R = old->world / old->dp_shard, src = replica;
    *rebuilt = 0;
    if (old->outer.every == 0 || R < 2) { return replica; }
    uint8_t* lost = (uint8_t*)malloc_check((size_t)R);
    if (checkpoint_missing_replicas(dir, step, R, lost) > 0 && lost[replica]) {
        for (src = 0; lost[src]; src++) {}
        *rebuilt = 1;
    }
    free(lost);
    return src;
}

// m, v (and master, when both the checkpoint and the target keep them) re-cut from replica 0 (-le
// 1: the first replica the checkpoint has).
static void state_load_resharded(const char* dir, int step, const StateTarget* t, const TrainState* old, float* m,
                                 float* v, float* master) {
    StateArrays arrays = {{m, v, old->has_master && t->has_master ? master : NULL, NULL, NULL, NULL}};
    int rebuilt;
    state_load_resharded_arrays(dir, step, t, old, state_source_replica(dir, step, old, 0, &rebuilt), &arrays);
}

// A rank of a replica the checkpoint lost, once it has read replica src's arrays: the state of a
// replica rejoining (as train_gpt2.py --rejoin): local parameters = the outer ones, AdamW's
// moments and the residual zero (the trainer sets its master weights from the outer parameters:
// another layout). The step, the step guard, the data position and the sampler are every rank's.
static void state_rebuild(const char* dir, int step, const StateTarget* t, TrainState* out, const StateArrays* arrays,
                          int replica, int src) {
    if (!out->has_outer || arrays->a[STATE_OUTER] == NULL) {
        fail("%s: checkpoint %d lost replica %d but holds no outer state to rebuild it from", dir, step, replica);
    }
    memset(arrays->a[STATE_M], 0, t->owned * sizeof(float));
    memset(arrays->a[STATE_V], 0, t->owned * sizeof(float));
    if (arrays->a[STATE_RESIDUAL]) { memset(arrays->a[STATE_RESIDUAL], 0, t->sync_owned * sizeof(float)); }
    if (arrays->a[STATE_LOCAL]) {
        memcpy(arrays->a[STATE_LOCAL], arrays->a[STATE_OUTER], t->sync_owned * sizeof(float));
        out->has_local = 1;
    }
    out->rebuilt = 1;
    if (t->rank % t->dp_shard == 0) {
        printf("rank %d: checkpoint %d lost replica %d (it was not training when it was written): its state is rebuilt "
               "from replica %d's outer state (local parameters = outer, AdamW moments and residual zero)\n", t->rank,
               step, replica, src);
        fflush(stdout);
    }
}

// Loads this rank's state (every array `arrays` has room for and the checkpoint holds; out says
// which came) and the run position of checkpoint `step` (already verified by checkpoint_select).
// The same world size, -ds and -z read this rank's own file (exact); any other layout with the
// same -t and -d re-cuts the old shards (state_load_resharded_arrays), from the rank's own replica
// under -ls or with a residual (-rq, -rk); a rank of a replica the checkpoint lost (-le 1) reads
// the first replica it has and rebuilds (state_rebuild).
static void state_load_arrays(const char* dir, int step, const StateTarget* t, TrainState* out,
                              const StateArrays* arrays) {
    char path[4096], why[4096 + 256];
    checkpoint_path(path, sizeof(path), dir, "state", step, checkpoint_first_state_rank(dir, step));
    int header[STATE_HEADER_INTS];
    FILE* f = fopen_check(path, "rb");
    if (!state_read_header(f, path, out, header, why, sizeof(why))) { fail("%s", why); }
    fclose(f);
    if (out->T != t->T || out->total_batch != t->total_batch) {
        fail("%s: written with -t %d -d %d; a resume needs the same sequence length and tokens per step (this run: "
             "-t %d -d %d)", path, out->T, out->total_batch, t->T, t->total_batch);
    }
    if (out->optimizer != t->optimizer) {
        static const char* names[] = {"adamw", "muon"};
        int o = out->optimizer == 1 ? 1 : 0;
        fail("%s: written by a run with -opt %s; this run has -opt %s (the optimizer state does not carry over)", path,
             out->optimizer == 0 || out->optimizer == 1 ? names[o] : "(unknown)", names[t->optimizer == 1]);
    }
    // the same mesh and stage read the rank's own file, unless the sync's arrays changed layout (a
    // ZeRO 0 -ls checkpoint from before they were sharded: re-cut inside the replica, exact)
    int nominal = out->world == t->world && out->dp_shard == t->dp_shard && out->zero_stage == t->zero_stage;
    int same = nominal && out->sync_stage == t->sync_stage;
    state_check_outer(path, out, t, nominal);
    int replica = out->outer.every > 0 || out->has_residual ? t->rank / t->dp_shard : 0, rebuilt;
    int src = state_source_replica(dir, step, out, replica, &rebuilt);
    if (!same) {
        state_load_resharded_arrays(dir, step, t, out, src, arrays);
    } else {
        checkpoint_path(path, sizeof(path), dir, "state", step, src * t->dp_shard + t->rank % t->dp_shard);
        f = fopen_check(path, "rb");
        if (!state_read_header(f, path, out, header, why, sizeof(why))) { fail("%s", why); }
        if (out->owned != t->owned || out->sync_owned != t->sync_owned) {
            fail("%s: holds %llu optimizer and %llu replica-sync elements, this run %llu and %llu", path,
                 (unsigned long long)out->owned, (unsigned long long)out->sync_owned, (unsigned long long)t->owned,
                 (unsigned long long)t->sync_owned);
        }
        for (int k = 0; k < STATE_ARRAYS; k++) {
            long long at = state_array_at(out, k);
            if (at < 0 || arrays->a[k] == NULL) { continue; }
            fseek(f, 1024 + (long)(at * (long long)sizeof(float)), SEEK_SET);
            fread_check(arrays->a[k], sizeof(float), state_array_elements(out, k), f, path, state_array_names[k]);
        }
        fclose(f);
    }
    out->has_master = out->has_master && arrays->a[STATE_MASTER] != NULL;
    out->has_local = out->has_local && arrays->a[STATE_LOCAL] != NULL;
    out->has_outer = out->has_outer && arrays->a[STATE_OUTER] != NULL && arrays->a[STATE_OUTER_M] != NULL;
    out->has_residual = out->has_residual && arrays->a[STATE_RESIDUAL] != NULL;
    out->has_pending = out->has_pending && arrays->a[STATE_PEND_SNAP] != NULL && arrays->a[STATE_PEND_SUM] != NULL;
    if (rebuilt) { state_rebuild(dir, step, t, out, arrays, replica, src); }
}

// m, v (and master): state_load_arrays without the -ls arrays. out->has_master says whether
// master received fp32 master weights.
static void state_load(const char* dir, int step, const StateTarget* t, TrainState* out, float* m, float* v,
                       float* master) {
    StateArrays arrays = {{m, v, t->has_master ? master : NULL, NULL, NULL, NULL}};
    state_load_arrays(dir, step, t, out, &arrays);
}

#endif
