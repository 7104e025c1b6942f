// Training-state checkpoints (our format, shared by both trainers). A checkpoint of step S in
// the log dir is: model_S.bin (the model file), state_S_RANK.bin for every rank (its optimizer
// shard and where training stands), and DONE_S, written last by rank 0 once every rank has
// finished. Files go to temporary names and are renamed, so a crash never leaves a checkpoint
// that looks complete. Resuming needs the same mesh, ZeRO stage and batch shape.
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <dirent.h>
#include <stdint.h>
#include "utils.h"

#define STATE_MAGIC 20261122
#define STATE_VERSION 1

typedef struct {
    int rank, world, dp_shard, zero_stage;
    int B, T, total_batch;
    int step;        // optimizer steps completed
    int epoch, file_pos;
    long row_pos;    // data loader position
    uint64_t rng;    // sampling generator
    uint64_t owned;  // elements of m, v (and master weights) in this file
    int has_master;  // whether fp32 master weights follow m and v
} TrainState;

static void checkpoint_path(char* out, size_t len, const char* dir, const char* kind, int step, int rank) {
    if (rank >= 0) { snprintf(out, len, "%s/%s_%08d_%05d.bin", dir, kind, step, rank); }
    else { snprintf(out, len, "%s/%s_%08d%s", dir, kind, step, strcmp(kind, "DONE") ? ".bin" : ""); }
}

static void state_write(const char* path, const TrainState* s, const float* m, const float* v, const float* master) {
    int header[256] = {0};
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s->rank; header[3] = s->world; header[4] = s->dp_shard; header[5] = s->zero_stage;
    header[6] = s->B; header[7] = s->T; header[8] = s->total_batch; header[9] = s->step;
    header[10] = s->epoch; header[11] = s->file_pos; header[16] = s->has_master;
    memcpy(&header[12], &s->row_pos, sizeof(long) <= 8 ? sizeof(long) : 8);
    memcpy(&header[14], &s->rng, 8);
    memcpy(&header[18], &s->owned, 8);
    char tmp[4096];
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(header, sizeof(int), 256, f, tmp);
    fwrite_check(m, sizeof(float), s->owned, f, tmp);
    fwrite_check(v, sizeof(float), s->owned, f, tmp);
    if (s->has_master && master) { fwrite_check(master, sizeof(float), s->owned, f, tmp); }
    commit_tmp(f, tmp, path);
}

// Reads a state file written by the same mesh, stage and batch shape as `expect`; fills the
// position fields of out and the arrays (master may be NULL when not kept).
static void state_read(const char* path, const TrainState* expect, TrainState* out, float* m, float* v, float* master) {
    FILE* f = fopen_check(path, "rb");
    int header[256];
    fread_check(header, sizeof(int), 256, f, path, "state header");
    if (header[0] != STATE_MAGIC) { fail("%s: bad magic %d in state file (expected %d)", path, header[0], STATE_MAGIC); }
    if (header[1] != STATE_VERSION) { fail("%s: unsupported state version %d (expected %d)", path, header[1], STATE_VERSION); }
    *out = *expect;
    out->rank = header[2]; out->world = header[3]; out->dp_shard = header[4]; out->zero_stage = header[5];
    out->B = header[6]; out->T = header[7]; out->total_batch = header[8]; out->step = header[9];
    out->epoch = header[10]; out->file_pos = header[11]; out->has_master = header[16];
    memcpy(&out->row_pos, &header[12], 8);
    memcpy(&out->rng, &header[14], 8);
    memcpy(&out->owned, &header[18], 8);
    if (out->rank != expect->rank || out->world != expect->world || out->dp_shard != expect->dp_shard ||
        out->zero_stage != expect->zero_stage) {
        fail("%s: written by rank %d of %d, dp_shard %d, ZeRO %d; this run is rank %d of %d, dp_shard %d, ZeRO %d",
             path, out->rank, out->world, out->dp_shard, out->zero_stage, expect->rank, expect->world,
             expect->dp_shard, expect->zero_stage);
    }
    if (out->B != expect->B || out->T != expect->T || out->total_batch != expect->total_batch) {
        fail("%s: written with -b %d -t %d -d %d; this run has -b %d -t %d -d %d", path, out->B, out->T,
             out->total_batch, expect->B, expect->T, expect->total_batch);
    }
    if (out->owned != expect->owned || out->has_master != expect->has_master) {
        fail("%s: holds %llu optimizer elements (master weights %d), expected %llu (%d)", path,
             (unsigned long long)out->owned, out->has_master, (unsigned long long)expect->owned, expect->has_master);
    }
    long expected_size = 1024 + (long)(out->owned * 4 * (out->has_master ? 3 : 2));
    if (file_size_of(f) != expected_size) { fail("%s: file size %ld, expected %ld", path, file_size_of(f), expected_size); }
    fread_check(m, sizeof(float), out->owned, f, path, "m");
    fread_check(v, sizeof(float), out->owned, f, path, "v");
    if (out->has_master) { fread_check(master, sizeof(float), out->owned, f, path, "master weights"); }
    fclose(f);
}

static void checkpoint_mark_done(const char* dir, int step) {
    char path[4096], tmp[4096];
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fprintf(f, "complete\n");
    commit_tmp(f, tmp, path);
}

// Step of the latest complete checkpoint in dir, or -1.
static int checkpoint_latest(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return -1; }
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char rest;
        if (sscanf(e->d_name, "DONE_%d%c", &step, &rest) == 1 && step > best) { best = step; }
    }
    closedir(d);
    return best;
}

#endif
