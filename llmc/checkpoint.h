// Training-state checkpoints (our format, shared by both trainers). A checkpoint of step S in
// the log dir is: model_S.bin (the model file), state_S_RANK.bin for every rank (its optimizer
// shard and where training stands, with a CRC-32C of its header and of its payload inside), and
// DONE_S, the manifest, written last by rank 0 once every rank has finished: every file of the
// checkpoint with its size and (the model file) its CRC-32C, then a CRC-32C of the manifest
// itself. Every file goes to a temporary name, is fsync'ed and renamed, so a checkpoint is
// complete and verifiable the moment DONE_S exists, and a crash at any moment never leaves one
// that verifies but is incomplete. A checkpoint resumes on any world size, -ds, -z and -b with
// the same -t and -d (the optimizer shards are re-cut). With -ls (llmc/outer_sync.h) a state file
// also holds the rank's owned local parameters (the replicas differ between syncs) and its outer
// parameters and momentum; such a checkpoint resumes on its own layout at any step, and on
// another layout with the same dp_replicate only where the replicas agreed. With -lo exchanges in
// flight it also holds their held sums and local snapshots (the same layout only). See
// docs/checkpoints.md.
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <stdint.h>
#include "utils.h"
#include "crc32c.h"
#include "mesh.h"
#include "wire_format.h"

#define STATE_MAGIC 20261122
#define STATE_VERSION 2
#define STATE_HEADER_INTS 256
#define LOSS_HISTORY_MAX 192 // loss-spike guard window kept in the state header (slots 64..255)
#define MANIFEST_TITLE "train_gpt2 checkpoint manifest v1"

typedef struct {
    int rank, world, dp_shard, zero_stage;
    int B, T, total_batch;
    int step;        // optimizer steps completed (the loop's step count, skipped ones included)
    int epoch, file_pos;
    long row_pos;    // data loader position
    uint64_t rng;    // sampling generator
    uint64_t owned;  // elements of m, v (and master weights) in this file
    int has_master;  // whether fp32 master weights follow m and v
    int skipped;     // updates skipped so far (non-finite or spiking steps): AdamW's t = step - skipped
    int consecutive_skips;
    int loss_count;  // entries of loss_history (the spike guard's window, oldest first)
    float loss_history[LOSS_HISTORY_MAX];
    // -ls (0 without): the run's -ls and -lss, its -ol and -om, whether the replicas held the same
    // parameters at this step, and which arrays follow m, v (and master): the owned local
    // parameters (as fp32; exact for bf16), the outer parameters and the outer momentum.
    int outer_every, outer_start, in_agreement;
    float outer_lr, outer_momentum;
    int has_local, has_outer;
    // -rq (llmc/wire_format.h; 0 = fp32), -ref, -rqs and -rk of an -ls run, and whether the rank's
    // error-feedback residual follows the outer momentum (owned elements, fp32).
    int wire, feedback, wire_start, has_residual;
    float topk; // -rk (0 = off)
    int fragments; // -lf F of an -ls run when F > 1 (slot 36; 0 = one fragment, the files of plain -ls)
    // -lo tau of an -ls run (slot 37; 0 without), and whether exchanges were in flight at this step
    // (slot 38): then the local snapshots and the held sums (owned order) follow the residual
    int overlap, has_pending;
} TrainState;

// The arrays of a state file, in file order; an absent one is skipped (llmc/outer_sync.h for
// the last three).
enum { STATE_M, STATE_V, STATE_MASTER, STATE_LOCAL, STATE_OUTER, STATE_OUTER_M, STATE_RESIDUAL, STATE_PEND_SNAP,
       STATE_PEND_SUM, STATE_ARRAYS };
typedef struct {
    float* a[STATE_ARRAYS]; // this rank's owned elements of each, or NULL
} StateArrays;

// Where array `kind` sits in a file with header s (0-based, in units of owned elements), or -1.
static int state_array_slot(const TrainState* s, int kind) {
    int present[STATE_ARRAYS] = {1, 1, s->has_master, s->has_local, s->has_outer, s->has_outer, s->has_residual,
                                 s->has_pending, s->has_pending};
    if (!present[kind]) { return -1; }
    int slot = 0;
    for (int k = 0; k < kind; k++) { slot += present[k]; }
    return slot;
}

static int state_array_count(const TrainState* s) {
    return 2 + s->has_master + s->has_local + 2 * s->has_outer + s->has_residual + 2 * s->has_pending;
}

static void checkpoint_path(char* out, size_t len, const char* dir, const char* kind, int step, int rank) {
    if (rank >= 0) { snprintf(out, len, "%s/%s_%08d_%05d.bin", dir, kind, step, rank); }
    else { snprintf(out, len, "%s/%s_%08d%s", dir, kind, step, strcmp(kind, "DONE") ? ".bin" : ""); }
}

static long state_file_bytes(const TrainState* s) { return 1024 + (long)(s->owned * 4 * state_array_count(s)); }

static void state_pack_header(int* h, const TrainState* s) {
    memset(h, 0, STATE_HEADER_INTS * sizeof(int));
    h[0] = STATE_MAGIC;
    h[1] = STATE_VERSION;
    h[2] = s->rank; h[3] = s->world; h[4] = s->dp_shard; h[5] = s->zero_stage;
    h[6] = s->B; h[7] = s->T; h[8] = s->total_batch; h[9] = s->step;
    h[10] = s->epoch; h[11] = s->file_pos;
    int64_t row = s->row_pos;
    memcpy(&h[12], &row, 8);
    memcpy(&h[14], &s->rng, 8);
    h[16] = s->has_master; h[17] = s->skipped;
    memcpy(&h[18], &s->owned, 8);
    h[22] = s->consecutive_skips;
    h[23] = s->loss_count;
    h[24] = s->has_local; h[25] = s->has_outer;
    h[26] = s->outer_every; h[27] = s->outer_start; h[28] = s->in_agreement;
    memcpy(&h[29], &s->outer_lr, 4);
    memcpy(&h[30], &s->outer_momentum, 4);
    h[31] = s->has_residual; h[32] = s->wire; h[33] = s->feedback; h[34] = s->wire_start;
    memcpy(&h[35], &s->topk, 4);
    h[36] = s->fragments;
    h[37] = s->overlap; h[38] = s->has_pending;
    memcpy(&h[64], s->loss_history, LOSS_HISTORY_MAX * sizeof(float));
}

static void state_unpack_header(const int* h, TrainState* s) {
    memset(s, 0, sizeof(*s));
    s->rank = h[2]; s->world = h[3]; s->dp_shard = h[4]; s->zero_stage = h[5];
    s->B = h[6]; s->T = h[7]; s->total_batch = h[8]; s->step = h[9];
    s->epoch = h[10]; s->file_pos = h[11];
    int64_t row;
    memcpy(&row, &h[12], 8);
    s->row_pos = (long)row;
    memcpy(&s->rng, &h[14], 8);
    s->has_master = h[16]; s->skipped = h[17];
    memcpy(&s->owned, &h[18], 8);
    s->consecutive_skips = h[22];
    s->loss_count = h[23];
    s->has_local = h[24]; s->has_outer = h[25];
    s->outer_every = h[26]; s->outer_start = h[27]; s->in_agreement = h[28];
    memcpy(&s->outer_lr, &h[29], 4);
    memcpy(&s->outer_momentum, &h[30], 4);
    s->has_residual = h[31]; s->wire = h[32]; s->feedback = h[33]; s->wire_start = h[34];
    memcpy(&s->topk, &h[35], 4);
    s->fragments = h[36];
    s->overlap = h[37]; s->has_pending = h[38];
    memcpy(s->loss_history, &h[64], LOSS_HISTORY_MAX * sizeof(float));
}

static uint32_t state_header_crc(const int* h) {
    int copy[STATE_HEADER_INTS];
    memcpy(copy, h, sizeof(copy));
    copy[21] = 0;
    return crc32c_update(0, copy, sizeof(copy));
}

static void fwrite_crc(const void* src, size_t bytes, FILE* f, const char* path, uint32_t* crc) {
    fwrite_check(src, 1, bytes, f, path);
    *crc = crc32c_update(*crc, src, bytes);
}

// Writes a state file: the header, then the arrays its header names (m, v, and master, local,
// outer, outer momentum where present) while computing the payload's CRC, then the header again
// with both CRCs (slot 20: payload, slot 21: header). In soft mode (llmc/utils.h) an error is recorded, not
// fatal, and the file is not renamed into place.
static void state_write_arrays(const char* path, const TrainState* s, const StateArrays* arrays) {
    int header[STATE_HEADER_INTS];
    state_pack_header(header, s);
    char tmp[4096];
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(header, sizeof(int), STATE_HEADER_INTS, f, tmp);
    uint32_t crc = 0;
    for (int k = 0; k < STATE_ARRAYS; k++) {
        if (state_array_slot(s, k) < 0) { continue; }
        if (arrays->a[k] == NULL) { fail("%s: state array %d missing (a bug)", path, k); }
        fwrite_crc(arrays->a[k], s->owned * sizeof(float), f, tmp, &crc);
    }
    header[20] = (int)crc;
    header[21] = (int)state_header_crc(header);
    if (!soft_write_skip(f) && fseek(f, 0, SEEK_SET) != 0) { write_error("seek", tmp); }
    fwrite_check(header, sizeof(int), STATE_HEADER_INTS, f, tmp);
    commit_tmp(f, tmp, path);
}

// A state file without -ls arrays: m, v (and master when s->has_master).
static void state_write(const char* path, const TrainState* s, const float* m, const float* v, const float* master) {
    StateArrays arrays = {{(float*)m, (float*)v, (float*)master, NULL, NULL, NULL}};
    state_write_arrays(path, s, &arrays);
}

// Reads and checks a state file's header (magic, version, header CRC, size); fills s. Returns 1,
// or 0 with the reason in why (no exit: callers decide).
static int state_read_header(FILE* f, const char* path, TrainState* s, int* header, char* why, size_t why_len) {
    long size = file_size_of(f);
    fseek(f, 0, SEEK_SET);
    if (size < 1024 || fread(header, sizeof(int), STATE_HEADER_INTS, f) != STATE_HEADER_INTS) {
        snprintf(why, why_len, "%s: truncated (%ld bytes, the header alone is 1024)", path, size);
        return 0;
    }
    if (header[0] != STATE_MAGIC) {
        snprintf(why, why_len, "%s: bad magic %d in state file (expected %d)", path, header[0], STATE_MAGIC);
        return 0;
    }
    if (header[1] != STATE_VERSION) {
        snprintf(why, why_len, "%s: unsupported state version %d (expected %d)", path, header[1], STATE_VERSION);
        return 0;
    }
    if ((uint32_t)header[21] != state_header_crc(header)) {
        snprintf(why, why_len, "%s: header checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[21],
                 state_header_crc(header));
        return 0;
    }
    state_unpack_header(header, s);
    if ((unsigned)s->has_master > 1 || (unsigned)s->has_local > 1 || (unsigned)s->has_outer > 1 ||
        (unsigned)s->has_residual > 1 || (unsigned)s->has_pending > 1) {
        snprintf(why, why_len, "%s: header names arrays %d %d %d %d %d (each must be 0 or 1)", path, s->has_master,
                 s->has_local, s->has_outer, s->has_residual, s->has_pending);
        return 0;
    }
    long expected = state_file_bytes(s);
    if (size != expected) {
        snprintf(why, why_len, "%s: file size %ld, expected %ld (truncated or appended to)", path, size, expected);
        return 0;
    }
    return 1;
}

// The whole check of one state file: header as above plus the payload's CRC.
static int state_check_file(const char* path, TrainState* s, char* why, size_t why_len) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_len, "%s: missing", path);
        return 0;
    }
    int header[STATE_HEADER_INTS];
    int ok = state_read_header(f, path, s, header, why, why_len);
    if (ok) {
        uint32_t crc = crc32c_file_from(f, 1024, NULL);
        if (crc != (uint32_t)header[20]) {
            snprintf(why, why_len, "%s: checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[20], crc);
            ok = 0;
        }
    }
    fclose(f);
    return ok;
}

// Reads one state file written by exactly the layout of `expect` (rank, world, dp_shard, ZeRO
// stage, -b -t -d, element count, master weights) into out and m, v (and master), checking both
// CRCs; any mismatch ends the run naming the file. (Resuming uses state_load, which accepts
// other layouts; this strict reader serves tools and the fuzz harness.)
static void state_read(const char* path, const TrainState* expect, TrainState* out, float* m, float* v,
                       float* master) {
    char why[4096 + 256];
    int header[STATE_HEADER_INTS];
    FILE* f = fopen_check(path, "rb");
    if (!state_read_header(f, path, out, header, why, sizeof(why))) { fail("%s", why); }
    if (out->rank != expect->rank || out->world != expect->world || out->dp_shard != expect->dp_shard ||
        out->zero_stage != expect->zero_stage) {
        fail("%s: written by rank %d of %d, dp_shard %d, ZeRO %d; expected rank %d of %d, dp_shard %d, ZeRO %d", path,
             out->rank, out->world, out->dp_shard, out->zero_stage, expect->rank, expect->world, expect->dp_shard,
             expect->zero_stage);
    }
    if (out->B != expect->B || out->T != expect->T || out->total_batch != expect->total_batch) {
        fail("%s: written with -b %d -t %d -d %d; expected -b %d -t %d -d %d", path, out->B, out->T, out->total_batch,
             expect->B, expect->T, expect->total_batch);
    }
    if (out->owned != expect->owned || out->has_master != expect->has_master || out->has_local != expect->has_local ||
        out->has_outer != expect->has_outer) {
        fail("%s: holds %llu optimizer elements (master weights %d), expected %llu (%d)", path,
             (unsigned long long)out->owned, out->has_master, (unsigned long long)expect->owned, expect->has_master);
    }
    fseek(f, 1024, SEEK_SET);
    fread_check(m, sizeof(float), out->owned, f, path, "m");
    fread_check(v, sizeof(float), out->owned, f, path, "v");
    uint32_t crc = crc32c_update(0, m, out->owned * sizeof(float));
    crc = crc32c_update(crc, v, out->owned * sizeof(float));
    if (out->has_master) {
        fread_check(master, sizeof(float), out->owned, f, path, "master weights");
        crc = crc32c_update(crc, master, out->owned * sizeof(float));
    }
    fclose(f);
    if (crc != (uint32_t)header[20]) {
        fail("%s: checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[20], crc);
    }
}

// What a resuming rank has: its place in the mesh and the shape of its optimizer state.
typedef struct {
    int rank, world, dp_shard, zero_stage;
    int B, T, total_batch;
    uint64_t owned;
    int has_master;
    const GPT2Config* config; // the model (shapes the shard layouts)
    int outer_every, outer_start; // -ls and -lss of this run (0 without)
    int wire, wire_start, has_residual; // -rq, -rqs and whether this run keeps a residual
    float topk;                         // -rk
    int fragments;                      // -lf (0 or 1: one fragment)
    int overlap;                        // -lo
} StateTarget;

// The files of a checkpoint written on another layout, opened as needed: shard s of the old
// layout is old rank replica * old dp_shard + s (replica 0 but with -ls, where each replica reads
// its own); a ZeRO-0 checkpoint holds everything in the replica's first rank's file.
typedef struct {
    const char* dir;
    int step;
    int replica;
    TrainState old;       // rank 0's header: the old layout
    ShardLayout layout;   // the old shard layout (ZeRO 1, 2)
    FILE** files;         // per old shard
} OldShards;

static const char* state_array_names[STATE_ARRAYS] = {"m", "v", "master weights", "local parameters",
                                                      "outer parameters", "outer momentum", "residual",
                                                      "-lo local snapshots", "-lo held sums"};

// Reads elements [e0, e0 + n) of unit u (or, for a ZeRO-0 checkpoint, of the flat parameters
// from unit u's offset) into each non-NULL dst array (advanced past them).
static void old_shards_read(OldShards* o, const ShardUnit* unit, int u, size_t e0, size_t n, float** dst) {
    while (n > 0) {
        int s = 0;
        size_t pos = unit->offset + e0, take = n;
        if (o->old.zero_stage != 0) {
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
            int slot = state_array_slot(&o->old, k);
            long at = 1024 + (long)(((uint64_t)slot * o->old.owned + pos) * sizeof(float));
            if (fseek(f, at, SEEK_SET) != 0) { fail("%s: seek to %ld failed", path, at); }
            fread_check(dst[k], sizeof(float), take, f, path, state_array_names[k]);
            dst[k] += take;
        }
        e0 += take;
        n -= take;
    }
}

// Re-cuts the state of a checkpoint written with another world size, -ds or -z for this rank:
// for every unit, the elements this rank owns (all of them in ZeRO 0), read from the old shard
// that holds each piece, into every array both the checkpoint and `arrays` have (the others are
// zeroed). Padding elements stay 0. replica: whose files to read (-ls; else 0).
static void state_load_resharded_arrays(const char* dir, int step, const StateTarget* t, const TrainState* old,
                                        int replica, const StateArrays* arrays) {
    OldShards o;
    o.dir = dir;
    o.step = step;
    o.replica = replica;
    o.old = *old;
    int old_files = old->zero_stage == 0 ? 1 : old->dp_shard;
    o.files = (FILE**)calloc_check(old_files, sizeof(FILE*));
    shard_layout_init(&o.layout, t->config, old->zero_stage == 0 ? 1 : old->dp_shard);
    ShardLayout now;
    shard_layout_init(&now, t->config, t->zero_stage == 0 ? 1 : t->dp_shard);
    int shard_idx = t->rank % t->dp_shard;
    float* base[STATE_ARRAYS];
    for (int k = 0; k < STATE_ARRAYS; k++) {
        base[k] = state_array_slot(old, k) >= 0 ? arrays->a[k] : NULL;
        if (arrays->a[k]) { memset(arrays->a[k], 0, t->owned * sizeof(float)); }
    }
    for (int u = 0; u < now.num_units; u++) {
        const ShardUnit* unit = &now.units[u];
        size_t first = 0, count = unit->size, at = unit->offset;
        if (t->zero_stage != 0) {
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

// m, v (and master, when both the checkpoint and the target keep them) re-cut from replica 0.
static void state_load_resharded(const char* dir, int step, const StateTarget* t, const TrainState* old, float* m,
                                 float* v, float* master) {
    StateArrays arrays = {{m, v, old->has_master && t->has_master ? master : NULL, NULL, NULL, NULL}};
    state_load_resharded_arrays(dir, step, t, old, 0, &arrays);
}

// The -ls rules of a resume (rank 0's header `old` of checkpoint `path`): the same -ls and -lss
// (a checkpoint of synchronous training also serves a run whose windows start later) and the same
// -rq, -rk, -rqs; another layout only with the same dp_replicate (with -ls or a residual) and where
// the replicas agreed (-ls).
static void state_check_outer(const char* path, const TrainState* old, const StateTarget* t, int same_layout) {
    int old_R = old->world / old->dp_shard, R = t->world / t->dp_shard;
    if (old->outer_every != t->outer_every || old->outer_start != t->outer_start) {
        int from_sync = old->outer_every == 0 && old->step <= t->outer_start;
        if (!from_sync) {
            fail("%s: written with -ls %d -lss %d at step %d; this run has -ls %d -lss %d (resume with the same, or "
                 "a checkpoint of synchronous training with -lss at or after its step)", path, old->outer_every,
                 old->outer_start, old->step, t->outer_every, t->outer_start);
        }
    }
    if (old->wire != t->wire || old->wire_start != t->wire_start || old->has_residual != t->has_residual ||
        old->topk != t->topk) {
        fail("%s: written with -rq %s -rk %g -rqs %d and %s residual; this run has -rq %s -rk %g -rqs %d and %s "
             "(resume with the same)", path, wire_format_names[(unsigned)old->wire % WIRE_FORMATS], old->topk,
             old->wire_start, old->has_residual ? "a" : "no", wire_format_names[(unsigned)t->wire % WIRE_FORMATS],
             t->topk, t->wire_start, t->has_residual ? "one" : "none");
    }
    int old_F = old->fragments > 1 ? old->fragments : 1, F = t->fragments > 1 ? t->fragments : 1;
    if (old->outer_every > 0 && old_F != F) {
        fail("%s: written with -lf %d; this run has -lf %d (resume with the same)", path, old_F, F);
    }
    if (old->has_pending && old->overlap != t->overlap) {
        fail("%s: written with -lo %d and exchanges in flight at step %d; this run has -lo %d (resume with the same)",
             path, old->overlap, old->step, t->overlap);
    }
    if (old->has_pending && !same_layout) {
        fail("%s: step %d has -lo exchanges in flight: it resumes only on its own layout (%d ranks, -ds %d, -z %d)",
             path, old->step, old->world, old->dp_shard, old->zero_stage);
    }
    if (same_layout || (old->outer_every == 0 && !old->has_residual)) { return; }
    if (old_R != R) { // each replica has its own local parameters (-ls) or residual (-rq, -rk)
        fail("%s: written by %d replicas (-ls %d -rq %s -rk %g); a resume on another layout needs the same "
             "dp_replicate, this run has %d", path, old_R, old->outer_every,
             wire_format_names[(unsigned)old->wire % WIRE_FORMATS], old->topk, R);
    }
    if (old->outer_every > 0 && !old->in_agreement) {
        fail("%s: step %d is inside an -ls window (the replicas differ): it resumes only on its own layout (%d ranks, "
             "-ds %d, -z %d)", path, old->step, old->world, old->dp_shard, old->zero_stage);
    }
}

// Loads this rank's state (every array `arrays` has room for and the checkpoint holds; out says
// which came) and the run position of checkpoint `step` (already verified by checkpoint_select).
// The same world size, -ds and -z read this rank's own file (exact); any other layout with the
// same -t and -d re-cuts the old shards (state_load_resharded_arrays), from the rank's own replica
// under -ls or with a residual (-rq, -rk).
static void state_load_arrays(const char* dir, int step, const StateTarget* t, TrainState* out,
                              const StateArrays* arrays) {
    char path[4096], why[4096 + 256];
    checkpoint_path(path, sizeof(path), dir, "state", step, 0);
    int header[STATE_HEADER_INTS];
    FILE* f = fopen_check(path, "rb");
    if (!state_read_header(f, path, out, header, why, sizeof(why))) { fail("%s", why); }
    fclose(f);
    if (out->T != t->T || out->total_batch != t->total_batch) {
        fail("%s: written with -t %d -d %d; a resume needs the same sequence length and tokens per step (this run: "
             "-t %d -d %d)", path, out->T, out->total_batch, t->T, t->total_batch);
    }
    int same = out->world == t->world && out->dp_shard == t->dp_shard && out->zero_stage == t->zero_stage;
    state_check_outer(path, out, t, same);
    if (!same) {
        int replica = out->outer_every > 0 || out->has_residual ? t->rank / t->dp_shard : 0;
        state_load_resharded_arrays(dir, step, t, out, replica, arrays);
    } else {
        checkpoint_path(path, sizeof(path), dir, "state", step, t->rank);
        f = fopen_check(path, "rb");
        if (!state_read_header(f, path, out, header, why, sizeof(why))) { fail("%s", why); }
        if (out->owned != t->owned) {
            fail("%s: holds %llu optimizer elements, this run %llu", path, (unsigned long long)out->owned,
                 (unsigned long long)t->owned);
        }
        for (int k = 0; k < STATE_ARRAYS; k++) {
            int slot = state_array_slot(out, k);
            if (slot < 0 || arrays->a[k] == NULL) { continue; }
            fseek(f, 1024 + (long)((uint64_t)slot * out->owned * sizeof(float)), SEEK_SET);
            fread_check(arrays->a[k], sizeof(float), out->owned, f, path, state_array_names[k]);
        }
        fclose(f);
    }
    out->has_master = out->has_master && arrays->a[STATE_MASTER] != NULL;
    out->has_local = out->has_local && arrays->a[STATE_LOCAL] != NULL;
    out->has_outer = out->has_outer && arrays->a[STATE_OUTER] != NULL && arrays->a[STATE_OUTER_M] != NULL;
    out->has_residual = out->has_residual && arrays->a[STATE_RESIDUAL] != NULL;
    out->has_pending = out->has_pending && arrays->a[STATE_PEND_SNAP] != NULL && arrays->a[STATE_PEND_SUM] != NULL;
}

// m, v (and master): state_load_arrays without the -ls arrays. out->has_master says whether
// master received fp32 master weights.
static void state_load(const char* dir, int step, const StateTarget* t, TrainState* out, float* m, float* v,
                       float* master) {
    StateArrays arrays = {{m, v, t->has_master ? master : NULL, NULL, NULL, NULL}};
    state_load_arrays(dir, step, t, out, &arrays);
}

// ----------------------------------------------------------------------------
// the manifest DONE_S

// Rank 0, after every rank has written its state file: the manifest, atomically (in soft mode an
// error is recorded, not fatal, and DONE_S does not appear).
static void checkpoint_write_manifest(const char* dir, int step, uint32_t model_crc, long model_bytes, int world,
                                      long state_bytes) {
    char path[4096], tmp[4200], name[512];
    size_t cap = 512 + (size_t)world * 96 + 16, len = 0;
    char* text = (char*)malloc_check(cap);
    len += snprintf(text + len, cap - len, "%s\nstep %d\nworld %d\n", MANIFEST_TITLE, step, world);
    checkpoint_path(name, sizeof(name), "", "model", step, -1);
    len += snprintf(text + len, cap - len, "file %s %ld %08x\n", name + 1, model_bytes, model_crc);
    for (int r = 0; r < world; r++) {
        checkpoint_path(name, sizeof(name), "", "state", step, r);
        len += snprintf(text + len, cap - len, "file %s %ld self\n", name + 1, state_bytes);
    }
    uint32_t crc = crc32c_update(0, text, len);
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    len += snprintf(text + len, cap - len, "end %08x\n", crc);
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(text, 1, len, f, tmp);
    commit_tmp(f, tmp, path);
    free(text);
}

// Checks checkpoint `step` of dir: the manifest's own CRC, then every file it lists (size, then
// CRC: the model file against the manifest, state files against their own). Returns 1 when all
// match, else 0 with the first problem in why. world_out: the world size that wrote it.
static int checkpoint_verify(const char* dir, int step, int* world_out, char* why, size_t why_len) {
    char path[4096];
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_len, "%s: cannot be read", path);
        return 0;
    }
    long size = file_size_of(f);
    if (size <= 0 || size > (1 << 24)) {
        fclose(f);
        snprintf(why, why_len, "%s: manifest of %ld bytes", path, size);
        return 0;
    }
    char* text = (char*)malloc_check((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = '\0';
    int ok = 0;
    char* end = got >= 13 ? text + got - 13 : NULL; // the last line: "end xxxxxxxx\n"
    unsigned stored = 0;
    char hex[9] = {0};
    if (end) { memcpy(hex, end + 4, 8); }
    if (end == NULL || (end != text && end[-1] != '\n') || strncmp(end, "end ", 4) != 0 || end[12] != '\n' ||
        strspn(hex, "0123456789abcdef") != 8 || sscanf(hex, "%8x", &stored) != 1) {
        snprintf(why, why_len, "%s: manifest incomplete or not a manifest (no end line)", path);
    } else if (crc32c_update(0, text, (size_t)(end - text)) != stored) {
        snprintf(why, why_len, "%s: manifest checksum mismatch", path);
    } else if (strncmp(text, MANIFEST_TITLE "\n", strlen(MANIFEST_TITLE) + 1) != 0) {
        snprintf(why, why_len, "%s: not a %s", path, MANIFEST_TITLE);
    } else {
        ok = 1;
        int mstep = -1, world = 0, files = 0;
        char* save = NULL;
        for (char* line = strtok_r(text, "\n", &save); ok && line && line < end; line = strtok_r(NULL, "\n", &save)) {
            char name[512], crc_text[16];
            long bytes;
            if (sscanf(line, "step %d", &mstep) == 1 || sscanf(line, "world %d", &world) == 1) { continue; }
            if (sscanf(line, "file %511s %ld %15s", name, &bytes, crc_text) != 3) { continue; }
            files++;
            char file[4096 + 600];
            snprintf(file, sizeof(file), "%s/%s", dir, name);
            FILE* g = fopen(file, "rb");
            if (g == NULL) {
                snprintf(why, why_len, "%s: missing", file);
                ok = 0;
                break;
            }
            long actual = file_size_of(g);
            if (actual != bytes) {
                snprintf(why, why_len, "%s: %ld bytes, the manifest says %ld (truncated or replaced)", file, actual, bytes);
                ok = 0;
            } else if (strcmp(crc_text, "self") == 0) {
                TrainState s;
                ok = state_check_file(file, &s, why, why_len);
            } else {
                uint32_t crc = crc32c_file_from(g, 0, NULL);
                unsigned want = (unsigned)strtoul(crc_text, NULL, 16);
                if (crc != want) {
                    snprintf(why, why_len, "%s: checksum mismatch (manifest %08x, file %08x)", file, want, crc);
                    ok = 0;
                }
            }
            fclose(g);
        }
        if (ok && (mstep != step || world < 1 || files != world + 1)) {
            snprintf(why, why_len, "%s: manifest names step %d, world %d, %d files", path, mstep, world, files);
            ok = 0;
        }
        if (world_out) { *world_out = world; }
    }
    free(text);
    return ok;
}

// Steps of the DONE_S markers in dir, newest first (malloc'd; *count of them; NULL if none).
static int* checkpoint_list(const char* dir, int* count) {
    *count = 0;
    DIR* d = opendir(dir);
    if (d == NULL) { return NULL; }
    int cap = 16, n = 0;
    int* steps = (int*)malloc_check(cap * sizeof(int));
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char rest;
        if (sscanf(e->d_name, "DONE_%d%c", &step, &rest) == 1 && step >= 0) {
            if (n == cap) {
                cap *= 2;
                int* grown = (int*)malloc_check(cap * sizeof(int));
                memcpy(grown, steps, n * sizeof(int));
                free(steps);
                steps = grown;
            }
            steps[n++] = step;
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) { // insertion sort, descending
        int v = steps[i], j = i - 1;
        while (j >= 0 && steps[j] < v) { steps[j + 1] = steps[j]; j--; }
        steps[j + 1] = v;
    }
    *count = n;
    return steps;
}

// The step to resume from: the newest checkpoint in dir that verifies, or -1 when dir holds no
// complete-looking checkpoint (a missing or empty dir, or only unfinished writes: start fresh).
// Newer ones that fail verification are named with the reason (print: rank 0) and skipped;
// when there are some but none verifies, the run stops.
static int checkpoint_select(const char* dir, int print) {
    int count;
    int* steps = checkpoint_list(dir, &count);
    int chosen = -1;
    char why[8192];
    for (int i = 0; i < count && chosen < 0; i++) {
        if (checkpoint_verify(dir, steps[i], NULL, why, sizeof(why))) {
            chosen = steps[i];
        } else if (print) {
            printf("checkpoint %d skipped: %s\n", steps[i], why);
            fflush(stdout);
        }
    }
    if (count > 0 && chosen < 0) {
        fail("-y 1: none of the %d checkpoints in %s verifies (newest, step %d: %s)", count, dir, steps[0], why);
    }
    free(steps);
    return chosen;
}

// Rank 0, before training: a fresh run (-y 0) or a resume from step `start` will write
// checkpoints of later steps, so the DONE markers of any later ones (those that failed
// verification, or an earlier run's) are renamed DONE_S.stale: a crash in the middle of
// rewriting such a step can then never leave an old manifest over new files. Leftover
// temporary files of an interrupted write are removed.
static void checkpoint_prepare_dir(const char* dir, int start) {
    int count;
    int* steps = checkpoint_list(dir, &count);
    for (int i = 0; i < count; i++) {
        if (steps[i] <= start) { continue; }
        char path[4096], stale[4200];
        checkpoint_path(path, sizeof(path), dir, "DONE", steps[i], -1);
        snprintf(stale, sizeof(stale), "%s.stale", path);
        if (rename(path, stale) == 0) { printf("checkpoint %d set aside: %s renamed %s\n", steps[i], path, stale); }
    }
    free(steps);
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int ours = strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0 ||
                   strncmp(e->d_name, "DONE_", 5) == 0;
        if (ours && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            char path[4096 + 300];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            remove(path);
        }
    }
    closedir(d);
    fsync_parent_dir(dir);
}

// Removes every file of checkpoint `step` (its DONE marker first, so that a crash in between
// leaves files without a marker, never a marker without files).
static void checkpoint_remove(const char* dir, int step) {
    char path[4096], prefix[64];
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    remove(path);
    fsync_parent_dir(path);
    checkpoint_path(path, sizeof(path), dir, "model", step, -1);
    remove(path);
    snprintf(prefix, sizeof(prefix), "state_%08d_", step);
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            char file[4096 + 300];
            snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
            remove(file);
        }
    }
    closedir(d);
}

// After a checkpoint of `step` failed (on any rank): removes what this rank wrote of it, finished
// or not, so that no file of the step remains and its space is free again: the state file (and
// its .tmp) of `rank`, and on rank 0 the DONE marker first, then the model file (and their .tmp).
static void remove_with_tmp(const char* path) {
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(path);
    remove(tmp);
}

static void checkpoint_remove_partial(const char* dir, int step, int rank) {
    char path[4096];
    if (rank == 0) {
        checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
        remove_with_tmp(path);
        fsync_parent_dir(path);
        checkpoint_path(path, sizeof(path), dir, "model", step, -1);
        remove_with_tmp(path);
    }
    checkpoint_path(path, sizeof(path), dir, "state", step, rank);
    remove_with_tmp(path);
    fsync_parent_dir(path);
}

// -nk K (rank 0, after DONE_S is written): keeps the K newest complete checkpoints.
static void checkpoint_retain(const char* dir, int keep) {
    if (keep <= 0) { return; }
    int count;
    int* steps = checkpoint_list(dir, &count);
    for (int i = keep; i < count; i++) { checkpoint_remove(dir, steps[i]); }
    free(steps);
}

#endif
