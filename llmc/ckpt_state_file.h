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

// The header's slots, one row each, in slot order: what the file keeps and where. pack and
// unpack, the checks that name a slot, and docs/checkpoints.md's slot table (`ckpt_tool slots`)
// are generated from it. A row's group says when it is written: always, with -ls, on a compressed
// link (-rq other than fp32, or -rk), or where the sync's layout differs from ZeRO's (sync_stage,
// sync_owned); a row outside its group stays 0, so a file is byte for byte what it was before the
// group existed. Every row is read back as it stands (0 where it was not written).
enum { SLOT_INT, SLOT_FLOAT, SLOT_INT64, SLOT_UINT64, SLOT_PLUS_ONE, SLOT_FRAGMENTS, SLOT_CONST, SLOT_CRC,
       SLOT_HISTORY };
enum { SLOT_ALWAYS, SLOT_WITH_LS, SLOT_WITH_WIRE, SLOT_WITH_LAYOUT };
typedef struct {
    int slot, type, group;
    size_t offset; // in TrainState (unused by SLOT_CONST and SLOT_CRC)
    int value;     // SLOT_CONST's
    const char* name;
    const char* meaning;
} StateSlot;
#define SLOT(slot, type, group, field, meaning) {slot, type, group, offsetof(TrainState, field), 0, #field, meaning}
#define SLOT_FIXED(slot, type, value, name, meaning) {slot, type, SLOT_ALWAYS, 0, value, name, meaning}
enum { STATE_SLOT_PAYLOAD_CRC = 20, STATE_SLOT_HEADER_CRC = 21, STATE_SLOT_SYNC_STAGE = 42, STATE_SLOT_HISTORY = 64 };
#ifdef STATE_PLANT_OVERLAP // test only: a row laid over another, which `ckpt_tool slots` must refuse
#define STATE_SLOT_OPTIMIZER 42
#else
#define STATE_SLOT_OPTIMIZER 43
#endif
static const StateSlot state_slots[] = {
    SLOT_FIXED(0, SLOT_CONST, STATE_MAGIC, "magic", "the state file's magic number"),
    SLOT_FIXED(1, SLOT_CONST, STATE_VERSION, "version", "the format's version"),
    SLOT(2, SLOT_INT, SLOT_ALWAYS, rank, "the rank that wrote it"),
    SLOT(3, SLOT_INT, SLOT_ALWAYS, world, "ranks in the run"),
    SLOT(4, SLOT_INT, SLOT_ALWAYS, dp_shard, "-ds: ranks in a shard group"),
    SLOT(5, SLOT_INT, SLOT_ALWAYS, zero_stage, "-z"),
    SLOT(6, SLOT_INT, SLOT_ALWAYS, B, "-b"),
    SLOT(7, SLOT_INT, SLOT_ALWAYS, T, "-t"),
    SLOT(8, SLOT_INT, SLOT_ALWAYS, total_batch, "-d"),
    SLOT(9, SLOT_INT, SLOT_ALWAYS, step, "optimizer steps completed (skipped ones included)"),
    SLOT(10, SLOT_INT, SLOT_ALWAYS, epoch, "the data loader's epoch"),
    SLOT(11, SLOT_INT, SLOT_ALWAYS, file_pos, "its shard file"),
    SLOT(12, SLOT_INT64, SLOT_ALWAYS, row_pos, "its row in the file (int64)"),
    SLOT(14, SLOT_UINT64, SLOT_ALWAYS, rng, "the sampler's generator (uint64)"),
    SLOT(16, SLOT_INT, SLOT_ALWAYS, has_master, "1: fp32 master weights follow m and v"),
    SLOT(17, SLOT_INT, SLOT_ALWAYS, skipped, "updates skipped so far (the optimizer's t = step - skipped)"),
    SLOT(18, SLOT_UINT64, SLOT_ALWAYS, owned, "elements of m, v, master (uint64)"),
    SLOT_FIXED(STATE_SLOT_PAYLOAD_CRC, SLOT_CRC, 0, "payload_crc", "CRC-32C of everything after the header"),
    SLOT_FIXED(STATE_SLOT_HEADER_CRC, SLOT_CRC, 0, "header_crc", "CRC-32C of the header with this slot 0"),
    SLOT(22, SLOT_INT, SLOT_ALWAYS, consecutive_skips, "skipped steps in a row (-sk)"),
    SLOT(23, SLOT_INT, SLOT_ALWAYS, loss_count, "entries of the spike guard's window"),
    SLOT(24, SLOT_INT, SLOT_ALWAYS, has_local, "1: the owned local parameters follow (-ls)"),
    SLOT(25, SLOT_INT, SLOT_ALWAYS, has_outer, "1: the outer parameters and momentum follow (-ls)"),
    SLOT(26, SLOT_INT, SLOT_WITH_LS, outer.every, "-ls"),
    SLOT(27, SLOT_INT, SLOT_WITH_LS, outer.start, "-lss"),
    SLOT(28, SLOT_INT, SLOT_ALWAYS, in_agreement, "1: the replicas held the same parameters at this step"),
    SLOT(29, SLOT_FLOAT, SLOT_WITH_LS, outer.lr, "-ol (float)"),
    SLOT(30, SLOT_FLOAT, SLOT_WITH_LS, outer.momentum, "-om (float)"),
    SLOT(31, SLOT_INT, SLOT_ALWAYS, has_residual, "1: the error-feedback residual follows"),
    SLOT(32, SLOT_INT, SLOT_WITH_WIRE, outer.wire, "-rq: 0 fp32, 1 bf16, 2 int8, 3 int4"),
    SLOT(33, SLOT_INT, SLOT_WITH_WIRE, outer.feedback, "-ref"),
    SLOT(34, SLOT_INT, SLOT_WITH_WIRE, outer.wire_start, "-rqs"),
    SLOT(35, SLOT_FLOAT, SLOT_WITH_WIRE, outer.topk, "-rk (float)"),
    SLOT(36, SLOT_FRAGMENTS, SLOT_WITH_LS, outer.fragments, "-lf (0 for one fragment)"),
    SLOT(37, SLOT_INT, SLOT_WITH_LS, outer.overlap, "-lo"),
    SLOT(38, SLOT_INT, SLOT_ALWAYS, has_pending, "1: -lo exchanges were in flight: snapshots and held sums follow"),
    SLOT(39, SLOT_INT, SLOT_ALWAYS, consecutive_sync_skips, "outer syncs skipped in a row (-sk)"),
    SLOT(40, SLOT_UINT64, SLOT_WITH_LAYOUT, sync_owned, "elements of each replica-sync array (uint64)"),
    SLOT(STATE_SLOT_SYNC_STAGE, SLOT_PLUS_ONE, SLOT_WITH_LAYOUT, sync_stage, "the sync arrays' layout plus one"),
    SLOT(STATE_SLOT_OPTIMIZER, SLOT_INT, SLOT_ALWAYS, optimizer, "-opt: 0 adamw, 1 muon (whose momentum m holds)"),
    SLOT(STATE_SLOT_HISTORY, SLOT_HISTORY, SLOT_ALWAYS, loss_history, "the spike guard's window, oldest first (floats)"),
};
#undef SLOT
#undef SLOT_FIXED
#define STATE_NUM_SLOTS ((int)(sizeof(state_slots) / sizeof(state_slots[0])))

// How many header ints a row fills.
static int state_slot_width(int type) {
    return type == SLOT_INT64 || type == SLOT_UINT64 ? 2 : type == SLOT_HISTORY ? LOSS_HISTORY_MAX : 1;
}

// Whether a row's group applies to s (its value is written).
static int state_slot_written(const StateSlot* e, const TrainState* s) {
    const OuterConfig* o = &s->outer;
    switch (e->group) {
    case SLOT_WITH_LS: return o->every > 0;
    case SLOT_WITH_WIRE: return o->wire != WIRE_FP32 || o->topk > 0.0f;
    case SLOT_WITH_LAYOUT: return s->sync_stage != s->zero_stage || s->sync_owned != s->owned;
    default: return 1;
    }
}

static void state_pack_header(int* h, const TrainState* s) {
    memset(h, 0, STATE_HEADER_INTS * sizeof(int));
    for (int k = 0; k < STATE_NUM_SLOTS; k++) {
        const StateSlot* e = &state_slots[k];
        const char* field = (const char*)s + e->offset;
        if (e->type == SLOT_CRC || !state_slot_written(e, s)) { continue; }
        if (e->type == SLOT_CONST) {
            h[e->slot] = e->value;
        } else if (e->type == SLOT_PLUS_ONE || e->type == SLOT_FRAGMENTS) {
            int v;
            memcpy(&v, field, 4);
            h[e->slot] = e->type == SLOT_PLUS_ONE ? v + 1 : v > 1 ? v : 0;
        } else {
            memcpy(&h[e->slot], field, 4 * (size_t)state_slot_width(e->type));
        }
    }
}

static void state_unpack_header(const int* h, TrainState* s) {
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < STATE_NUM_SLOTS; k++) {
        const StateSlot* e = &state_slots[k];
        char* field = (char*)s + e->offset;
        if (e->type == SLOT_CONST || e->type == SLOT_CRC) { continue; }
        if (e->type == SLOT_PLUS_ONE) {
            int v = h[e->slot] - 1;
            memcpy(field, &v, 4);
        } else {
            memcpy(field, &h[e->slot], 4 * (size_t)state_slot_width(e->type));
        }
    }
    if (h[STATE_SLOT_SYNC_STAGE] == 0) { // not written: the sync's layout is ZeRO's
        s->sync_stage = s->zero_stage;
        s->sync_owned = s->owned;
    }
}

static uint32_t state_header_crc(const int* h) {
    int copy[STATE_HEADER_INTS];
    memcpy(copy, h, sizeof(copy));
    copy[STATE_SLOT_HEADER_CRC] = 0;
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
    header[STATE_SLOT_PAYLOAD_CRC] = (int)crc;
    header[STATE_SLOT_HEADER_CRC] = (int)state_header_crc(header);
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
    if ((uint32_t)header[STATE_SLOT_HEADER_CRC] != state_header_crc(header)) {
        snprintf(why, why_len, "%s: header checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[STATE_SLOT_HEADER_CRC],
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
        snprintf(why, why_len, "%s: header slot %d names sync layout %d (0-3)", path, STATE_SLOT_SYNC_STAGE,
                 header[STATE_SLOT_SYNC_STAGE]);
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
        if (crc != (uint32_t)header[STATE_SLOT_PAYLOAD_CRC]) {
            snprintf(why, why_len, "%s: checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[STATE_SLOT_PAYLOAD_CRC], crc);
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
    if (crc != (uint32_t)header[STATE_SLOT_PAYLOAD_CRC]) {
        fail("%s: checksum mismatch (stored %08x, computed %08x)", path, (uint32_t)header[STATE_SLOT_PAYLOAD_CRC], crc);
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
