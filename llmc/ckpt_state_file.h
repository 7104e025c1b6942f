// A checkpoint's per-rank state file (our format, both trainers; docs/checkpoints.md): the 1024-byte
// header (TrainState: the rank's place in the mesh, the batch, where training stands, the loss
// guard's window, the replica sync's settings, which arrays follow), then the arrays of the rank's
// owned elements (StateArrays: m, v, master weights, and with -ls the local parameters, the outer
// state, the residual, -lo's snapshots and held sums), with CRC-32Cs of the header and the payload;
// the paths of a checkpoint's files; writing (temporary name, fsync, rename) and reading one file.
// Loading onto another layout is llmc/ckpt_layout.h, the -ls rules of a resume
// llmc/ckpt_outer_rules.h, the manifest llmc/ckpt_manifest.h, retention llmc/ckpt_retention.h.
#ifndef LLMC_CKPT_STATE_FILE_H
#define LLMC_CKPT_STATE_FILE_H

#include <stdint.h>
#include "utils.h"
#include "crc32c.h"
#include "gpt2_model.h"
#include "wire_format.h"
#include "outer_config.h"

#define STATE_MAGIC 20261122
#define STATE_VERSION 2
#define STATE_HEADER_INTS 256
#define LOSS_HISTORY_MAX 192 // loss-spike guard window kept in the state header (slots 64..255)

typedef struct {
    int rank, world, dp_shard, zero_stage;
    int B, T, total_batch;
    int step;        // optimizer steps completed (the loop's step count, skipped ones included)
    int epoch, file_pos;
    long row_pos;    // data loader position
    uint64_t rng;    // sampling generator
    uint64_t owned;  // elements of m, v (and master weights) in this file
    // the layout (llmc/mesh.h's sync_stage_of) and count of the replica sync's arrays (local, outer,
    // momentum, residual, snapshots, held sums): zero_stage and owned, but with ZeRO 0 and -ls over
    // S > 1 ranks 1 and the rank's ZeRO-1 slices (header slots 40-42, 0 where they are zero_stage
    // and owned: such files are those of the runs before the sync was sharded, byte for byte)
    int sync_stage;
    uint64_t sync_owned;
    int has_master;  // whether fp32 master weights follow m and v
    int skipped;     // updates skipped so far (non-finite or spiking steps): AdamW's t = step - skipped
    int consecutive_skips;
    int consecutive_sync_skips; // -ls: outer syncs skipped in a row (slot 39)
    int optimizer;   // -opt (slot 43: 0 AdamW, as every file before Muon; 1 Muon, whose momentum m holds)
    int loss_count;  // entries of loss_history (the spike guard's window, oldest first)
    float loss_history[LOSS_HISTORY_MAX];
    // The run's replica sync (llmc/outer_config.h), as its header keeps it (state_pack_header): -ls,
    // -lss, -ol, -om, -lf (F > 1) and -lo of an -ls run (0 without), -rq, -ref, -rqs and -rk of a
    // compressed link (0 = fp32 without); -rb is not kept.
    OuterConfig outer;
    // whether the replicas held the same parameters at this step (-ls), and which arrays follow m,
    // v (and master): the owned local parameters (as fp32; exact for bf16), the outer parameters and
    // momentum, the error-feedback residual, and with -lo exchanges in flight at this step the local
    // snapshots and the held sums (owned order)
    int in_agreement;
    int has_local, has_outer, has_residual, has_pending;
    // (not in the file) set by a resume whose checkpoint lost this rank's replica (-le 1): its
    // state was rebuilt from the outer state (llmc/ckpt_layout.h, state_rebuild)
    int rebuilt;
} TrainState;

// The arrays of a state file, in file order; an absent one is skipped (llmc/outer_sync.h for
// the last three).
enum { STATE_M, STATE_V, STATE_MASTER, STATE_LOCAL, STATE_OUTER, STATE_OUTER_M, STATE_RESIDUAL, STATE_PEND_SNAP,
       STATE_PEND_SUM, STATE_ARRAYS };
typedef struct {
    float* a[STATE_ARRAYS]; // this rank's owned elements of each, or NULL
} StateArrays;

// Whether array `kind` is one of the replica sync's (sync_owned elements, else owned).
static int state_array_is_sync(int kind) { return kind >= STATE_LOCAL; }

static uint64_t state_array_elements(const TrainState* s, int kind) {
    return state_array_is_sync(kind) ? s->sync_owned : s->owned;
}

// Where array `kind` starts in a file with header s (in floats after the header), or -1 where absent.
static long long state_array_at(const TrainState* s, int kind) {
    int present[STATE_ARRAYS] = {1, 1, s->has_master, s->has_local, s->has_outer, s->has_outer, s->has_residual,
                                 s->has_pending, s->has_pending};
    if (!present[kind]) { return -1; }
    uint64_t at = 0; // unsigned: a damaged header's counts wrap instead of overflowing (its size check fails)
    for (int k = 0; k < kind; k++) { at += present[k] ? state_array_elements(s, k) : 0; }
    return (long long)at;
}

static void checkpoint_path(char* out, size_t len, const char* dir, const char* kind, int step, int rank) {
    if (rank >= 0) { snprintf(out, len, "%s/%s_%08d_%05d.bin", dir, kind, step, rank); }
    else { snprintf(out, len, "%s/%s_%08d%s", dir, kind, step, strcmp(kind, "DONE") ? ".bin" : ""); }
}

static long state_file_bytes(const TrainState* s) {
    uint64_t n = 0;
    for (int k = 0; k < STATE_ARRAYS; k++) { n += state_array_at(s, k) >= 0 ? state_array_elements(s, k) : 0; }
    return (long)(1024 + n * 4);
}

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
    h[28] = s->in_agreement;
    const OuterConfig* o = &s->outer;
    if (o->every > 0) { // slots 26-30, 36, 37 stay 0 without -ls: the files of a synchronous run
        h[26] = o->every; h[27] = o->start;
        memcpy(&h[29], &o->lr, 4);
        memcpy(&h[30], &o->momentum, 4);
        h[36] = o->fragments > 1 ? o->fragments : 0;
        h[37] = o->overlap;
    }
    if (o->wire != WIRE_FP32 || o->topk > 0.0f) { // slots 32-35 stay 0 without -rq/-rk
        h[32] = o->wire; h[33] = o->feedback; h[34] = o->wire_start;
        memcpy(&h[35], &o->topk, 4);
    }
    h[31] = s->has_residual; h[38] = s->has_pending;
    h[39] = s->consecutive_sync_skips;
    h[43] = s->optimizer;
    if (s->sync_stage != s->zero_stage || s->sync_owned != s->owned) {
        memcpy(&h[40], &s->sync_owned, 8);
        h[42] = s->sync_stage + 1;
    }
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
    s->outer.every = h[26]; s->outer.start = h[27]; s->in_agreement = h[28];
    memcpy(&s->outer.lr, &h[29], 4);
    memcpy(&s->outer.momentum, &h[30], 4);
    s->has_residual = h[31]; s->outer.wire = h[32]; s->outer.feedback = h[33]; s->outer.wire_start = h[34];
    memcpy(&s->outer.topk, &h[35], 4);
    s->outer.fragments = h[36];
    s->outer.overlap = h[37]; s->has_pending = h[38];
    s->consecutive_sync_skips = h[39];
    s->optimizer = h[43];
    memcpy(&s->sync_owned, &h[40], 8);
    s->sync_stage = h[42] - 1;
    if (h[42] == 0) {
        s->sync_stage = s->zero_stage;
        s->sync_owned = s->owned;
    }
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
        if (state_array_at(s, k) < 0) { continue; }
        if (arrays->a[k] == NULL) { fail("%s: state array %d missing (a bug)", path, k); }
        fwrite_crc(arrays->a[k], state_array_elements(s, k) * sizeof(float), f, tmp, &crc);
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
    if ((unsigned)s->sync_stage > 2) {
        snprintf(why, why_len, "%s: header slot 42 names sync layout %d (0-3)", path, header[42]);
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
    int sync_stage;           // the replica sync's layout and elements (TrainState's)
    uint64_t sync_owned;
    const GPT2Config* config; // the model (shapes the shard layouts)
    const OuterConfig* outer; // this run's replica sync (-ls, -lss, -rq, -rqs, -rk, -lf, -lo)
    int has_residual;         // whether this run keeps an error-feedback residual
    int optimizer;            // -opt: a checkpoint of the other optimizer is refused
} StateTarget;

#endif
