// The data loader: a glob of token shards (magic 20240520, version 1, uint16 tokens), read so
// that each (data rank, micro-step) gets a disjoint block of B rows of the same global batch.
// A row is T+1 consecutive tokens starting at a multiple of T. One global batch is the next
// R = B * dp_degree * grad_accum rows of the current shard (in file order, or in a seeded
// shuffled order); micro-step m of data rank r takes rows [(m * dp_degree + r) * B, +B).
// So the global batch of a step is the same whatever the number of ranks and grad_accum are.
// With -ls (replicas that train alone) the batch is cut replica-major instead: replica i takes
// the i-th run of R / dp_replicate rows, and within it micro-step m of shard rank s takes rows
// [(m * dp_shard + s) * B, +B); a replica's rows then depend only on its index, not on -ds or
// grad_accum (dataloader_replica_major).
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stdint.h>
#include "utils.h"
#include "rng.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1

typedef struct {
    // configuration
    int B, T;
    int dp_rank, dp_degree, grad_accum;
    int replica_major; // dp_shard when the batch is cut replica-major (-ls), else 0
    int vocab_size;
    int shuffle;
    uint64_t seed;
    glob_t files;
    int num_files;
    long* file_tokens; // token count of every file, from its header
    // position: which epoch, which file of the epoch's order, which row of the file's order,
    // which micro-step of the current global batch
    int epoch;
    int file_pos;
    long row_pos;
    int micro_step;
    // the current shard
    int* file_order;
    int loaded_file; // index into files, -1 if none
    uint16_t* tokens;
    long num_tokens;
    long num_rows;
    int* row_order; // NULL when not shuffling
    // this rank's micro-batch
    int* inputs;  // (B, T)
    int* targets; // (B, T)
} DataLoader;

static long dataloader_rows_per_batch(const DataLoader* d) { return (long)d->B * d->dp_degree * d->grad_accum; }
static long dataloader_rows_in(const DataLoader* d, long ntok) { return ntok > 0 ? (ntok - 1) / d->T : 0; }

// Reads and checks a shard header; returns the token count.
static long shard_read_header(FILE* f, const char* path) {
    int header[256];
    fread_check(header, sizeof(int), 256, f, path, "shard header");
    if (header[0] != SHARD_MAGIC) { fail("%s: bad magic %d in data shard (expected %d)", path, header[0], SHARD_MAGIC); }
    if (header[1] != SHARD_VERSION) { fail("%s: unsupported data shard version %d (expected %d)", path, header[1], SHARD_VERSION); }
    long ntok = header[2];
    if (ntok <= 0) { fail("%s: data shard header says %ld tokens", path, ntok); }
    long expected = 1024 + 2 * ntok;
    long actual = file_size_of(f);
    if (actual != expected) {
        fail("%s: file size %ld disagrees with its header (%ld tokens need %ld bytes)", path, actual, ntok, expected);
    }
    return ntok;
}

static void dataloader_order_files(DataLoader* d) {
    for (int i = 0; i < d->num_files; i++) { d->file_order[i] = i; }
    if (d->shuffle) {
        Rng rng;
        rng_seed(&rng, d->seed * 1000003ull + (uint64_t)d->epoch);
        rng_shuffle(&rng, d->file_order, d->num_files);
    }
}

static void dataloader_load_file(DataLoader* d) {
    int file = d->file_order[d->file_pos];
    const char* path = d->files.gl_pathv[file];
    if (d->loaded_file != file) {
        FILE* f = fopen_check(path, "rb");
        long ntok = shard_read_header(f, path);
        if (ntok != d->file_tokens[file]) {
            fail("%s: now holds %ld tokens, %ld when training started (changed during the run)", path, ntok,
                 d->file_tokens[file]);
        }
        fread_check(d->tokens, sizeof(uint16_t), (size_t)ntok, f, path, "tokens");
        fclose(f);
        for (long i = 0; i < ntok; i++) {
            if (d->tokens[i] >= d->vocab_size) {
                fail("%s: token %d at byte offset %ld is >= vocab size %d", path, d->tokens[i], 1024 + 2 * i, d->vocab_size);
            }
        }
        d->num_tokens = ntok;
        d->num_rows = dataloader_rows_in(d, ntok);
        d->loaded_file = file;
    }
    if (d->shuffle) {
        for (long i = 0; i < d->num_rows; i++) { d->row_order[i] = (int)i; }
        Rng rng;
        rng_seed(&rng, (d->seed * 1000003ull + (uint64_t)d->epoch) * 7919ull + (uint64_t)file);
        rng_shuffle(&rng, d->row_order, (int)d->num_rows);
    }
}

// Moves to the next file that holds at least one global batch (wrapping to a new epoch).
static void dataloader_next_file(DataLoader* d) {
    for (int tries = 0; tries <= d->num_files; tries++) {
        d->file_pos++;
        if (d->file_pos >= d->num_files) {
            d->file_pos = 0;
            d->epoch++;
            dataloader_order_files(d);
        }
        if (dataloader_rows_in(d, d->file_tokens[d->file_order[d->file_pos]]) >= dataloader_rows_per_batch(d)) { break; }
    }
    d->row_pos = 0;
    dataloader_load_file(d);
}

// Puts the loader at a given position (a fresh start is epoch 0, file 0, row 0). A position
// from a checkpoint must fit the data, which it need not when the data files changed since.
static void dataloader_seek(DataLoader* d, int epoch, int file_pos, long row_pos) {
    if (epoch < 0 || file_pos < 0 || file_pos >= d->num_files || row_pos < 0) {
        fail("data position (epoch %d, file %d, row %ld) is outside the %d data files (changed since the checkpoint?)",
             epoch, file_pos, row_pos, d->num_files);
    }
    d->epoch = epoch;
    dataloader_order_files(d);
    d->file_pos = file_pos;
    d->row_pos = row_pos;
    d->micro_step = 0;
    long rows = dataloader_rows_in(d, d->file_tokens[d->file_order[file_pos]]);
    if (rows < dataloader_rows_per_batch(d)) {
        d->file_pos--;
        dataloader_next_file(d);
        return;
    }
    if (row_pos + dataloader_rows_per_batch(d) > rows) {
        fail("%s: data position row %ld is past its %ld rows of %d+1 tokens (changed since the checkpoint?)",
             d->files.gl_pathv[d->file_order[file_pos]], row_pos, rows, d->T);
    }
    dataloader_load_file(d);
}

static void dataloader_reset(DataLoader* d) { dataloader_seek(d, 0, 0, 0); }

// flag names the command-line flag the pattern came from, for error messages.
static void dataloader_init(DataLoader* d, const char* pattern, const char* flag, int B, int T, int dp_rank,
                            int dp_degree, int grad_accum, int vocab_size, int shuffle, uint64_t seed) {
    memset(d, 0, sizeof(*d));
    d->B = B;
    d->T = T;
    d->dp_rank = dp_rank;
    d->dp_degree = dp_degree;
    d->grad_accum = grad_accum;
    d->vocab_size = vocab_size;
    d->shuffle = shuffle;
    d->seed = seed;
    if (glob(pattern, 0, NULL, &d->files) != 0 || d->files.gl_pathc == 0) {
        fail("%s %s: no data files match", flag, pattern);
    }
    d->num_files = (int)d->files.gl_pathc;
    d->file_tokens = (long*)malloc_check(d->num_files * sizeof(long));
    long max_tokens = 0, usable_files = 0;
    for (int i = 0; i < d->num_files; i++) {
        FILE* f = fopen_check(d->files.gl_pathv[i], "rb");
        d->file_tokens[i] = shard_read_header(f, d->files.gl_pathv[i]);
        fclose(f);
        if (d->file_tokens[i] > max_tokens) { max_tokens = d->file_tokens[i]; }
        if (dataloader_rows_in(d, d->file_tokens[i]) >= dataloader_rows_per_batch(d)) { usable_files++; }
    }
    if (usable_files == 0) {
        fail("%s %s: no shard holds one global batch of %ld rows of %d+1 tokens (largest has %ld tokens)", flag,
             pattern, dataloader_rows_per_batch(d), T, max_tokens);
    }
    d->file_order = (int*)malloc_check(d->num_files * sizeof(int));
    d->tokens = (uint16_t*)malloc_check((size_t)max_tokens * sizeof(uint16_t));
    d->row_order = shuffle ? (int*)malloc_check((size_t)dataloader_rows_in(d, max_tokens) * sizeof(int)) : NULL;
    d->inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    d->targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    d->loaded_file = -1;
    dataloader_reset(d);
}

// Cuts the following global batches replica-major over replicas of dp_shard ranks (0: rank-major).
static void dataloader_replica_major(DataLoader* d, int dp_shard) { d->replica_major = dp_shard; }

// The first row of this rank's current micro-batch.
static long dataloader_first_row(const DataLoader* d) {
    long m = d->micro_step;
    if (d->replica_major == 0) { return d->row_pos + (m * d->dp_degree + d->dp_rank) * d->B; }
    long S = d->replica_major, replica = d->dp_rank / S, s = d->dp_rank % S;
    return d->row_pos + replica * S * d->grad_accum * d->B + (m * S + s) * d->B;
}

// Fills inputs/targets with this rank's next micro-batch.
static void dataloader_next(DataLoader* d) {
    long first = dataloader_first_row(d);
    for (int b = 0; b < d->B; b++) {
        long row = first + b;
        long start = (d->row_order ? d->row_order[row] : row) * (long)d->T;
        for (int t = 0; t < d->T; t++) {
            d->inputs[b * d->T + t] = d->tokens[start + t];
            d->targets[b * d->T + t] = d->tokens[start + t + 1];
        }
    }
    d->micro_step++;
    if (d->micro_step == d->grad_accum) {
        d->micro_step = 0;
        d->row_pos += dataloader_rows_per_batch(d);
        if (d->row_pos + dataloader_rows_per_batch(d) > d->num_rows) { dataloader_next_file(d); }
    }
}

// Global batches in one pass over all files.
static long dataloader_batches_per_epoch(const DataLoader* d) {
    long n = 0;
    for (int i = 0; i < d->num_files; i++) { n += dataloader_rows_in(d, d->file_tokens[i]) / dataloader_rows_per_batch(d); }
    return n;
}

static void dataloader_free(DataLoader* d) {
    globfree(&d->files);
    free(d->file_tokens);
    free(d->file_order);
    free(d->tokens);
    free(d->row_order);
    free(d->inputs);
    free(d->targets);
}

#endif
