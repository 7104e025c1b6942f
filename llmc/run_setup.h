// The start of a training run, the same for both trainers: the model (the latest complete
// checkpoint when resuming, else a model file, else a descriptor dN built with GPT-2
// initialisation, seeded so that every rank builds the same weights, then -t and the tokenizer
// checked against it), and this data rank's train and val loaders with the run's step count.
#ifndef LLMC_RUN_SETUP_H
#define LLMC_RUN_SETUP_H

#include <string.h>
#include <sys/stat.h>
#include "utils.h"
#include "gpt2_model.h"
#include "args.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "mesh.h"
#include "optimizer.h"

// Returns the fp32 parameters (huge_alloc_check'd) and fills config; source receives the path or
// descriptor used. tokenizer_vocab: the tokenizer's vocab size, 0 without one.
static float* model_load_for_run(const TrainArgs* args, int resume_step, int tokenizer_vocab, GPT2Config* config,
                                 char* source, size_t source_len) {
    snprintf(source, source_len, "%s", args->model);
    if (resume_step >= 0) { checkpoint_path(source, source_len, args->log_dir, "model", resume_step, -1); }
    float* params = NULL;
    struct stat st;
    if (stat(source, &st) == 0) {
        if (args->vocab_size != 0 && resume_step < 0) {
            fail("-V %d: applies to descriptor models only, not %s", args->vocab_size, source);
        }
        params = gpt2_load_model(source, config);
    } else if (source[0] == 'd' && strchr(source, '/') == NULL && strchr(source, '.') == NULL) {
        int V = args->vocab_size ? args->vocab_size : (tokenizer_vocab ? tokenizer_vocab : 50257);
        gpt2_config_from_descriptor(config, source, V, args->max_seq_len);
        params = (float*)huge_alloc_check(gpt2_num_parameters(config) * sizeof(float), "the parameters");
        gpt2_init_parameters(params, config, (uint64_t)args->seed);
    } else {
        fail("-e %s: no such model file", source);
    }
    if (args->T > config->max_seq_len) {
        fail("-t %d: larger than the model's max_seq_len %d (%s)", args->T, config->max_seq_len, source);
    }
    if (tokenizer_vocab > config->vocab_size) {
        fail("-tk %s: tokenizer vocab %d is larger than the model's %d", args->tokenizer, tokenizer_vocab,
             config->vocab_size);
    }
    return params;
}

// The checkpoint to resume from (every rank; -y 1: the newest that verifies, -1: start fresh),
// then (rank 0) the log dir made ready for this run's checkpoints.
static int checkpoint_start(const TrainArgs* args, int rank) {
    if (args->log_dir[0] == '\0') { return -1; }
    int step = args->resume ? checkpoint_select(args->log_dir, rank == 0) : -1;
    if (rank == 0) {
        if (args->resume && step < 0) { printf("-y 1: no complete checkpoint in %s, starting fresh\n", args->log_dir); }
        checkpoint_prepare_dir(args->log_dir, step < 0 ? 0 : step);
        fflush(stdout);
    }
    return step;
}

// This rank's training state after `step` steps, for its state file.
static TrainState train_state_now(const TrainArgs* a, const Mesh* mesh, int zero_stage, int step,
                                  const DataLoader* train, const Rng* rng, uint64_t owned, int has_master) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.rank = mesh->rank; s.world = mesh->world; s.dp_shard = mesh->dp_shard; s.zero_stage = zero_stage;
    s.B = a->B; s.T = a->T; s.total_batch = a->total_batch; s.step = step;
    s.epoch = train->epoch; s.file_pos = train->file_pos; s.row_pos = train->row_pos;
    s.rng = rng->state; s.owned = owned; s.has_master = has_master;
    s.optimizer = strcmp(a->optimizer, "muon") == 0 ? OPT_MUON : OPT_ADAMW;
    return s;
}

// Rank 0, once every rank's state file of checkpoint `step` is written: the manifest DONE_S
// (the model file's size and CRC-32C, the state files' size), then -nk retention (older
// checkpoints go only once this one is complete). Returns 1, or 0 when the manifest could not be
// written (soft_write says why: llmc/utils.h; then nothing is deleted).
static int checkpoint_commit(const TrainArgs* args, int step, const char* model_path, uint32_t model_crc, int world,
                             const TrainState* s, const uint8_t* lost) {
    struct stat st;
    soft_write_begin();
    if (stat(model_path, &st) != 0) {
        write_error("stat", model_path);
    } else {
        checkpoint_write_manifest(args->log_dir, step, model_crc, (long)st.st_size, world, state_file_bytes(s),
                                  s->dp_shard, lost);
    }
    if (soft_write_end()) { return 0; }
    checkpoint_retain(args->log_dir, args->keep_checkpoints);
    return 1;
}

// The train loader (grad_accum micro-batches per step) and, when validating, the val loader of
// this data rank; returns whether there is validation. *max_steps: -x, or one epoch of train data.
static int dataloaders_for_run(const TrainArgs* args, const Mesh* mesh, int grad_accum, int vocab_size,
                               DataLoader* train, DataLoader* val, int* max_steps) {
    dataloader_init(train, args->train_pattern, "-i", args->B, args->T, mesh->dp_rank, mesh->dp_degree, grad_accum,
                    vocab_size, args->shuffle, (uint64_t)args->seed);
    int have_val = args->val_pattern[0] != '\0' && args->val_every > 0;
    if (have_val) {
        dataloader_init(val, args->val_pattern, "-j", args->B, args->T, mesh->dp_rank, mesh->dp_degree, 1, vocab_size,
                        0, 0);
    }
    *max_steps = args->max_steps > 0 ? args->max_steps : (int)dataloader_batches_per_epoch(train);
    return have_val;
}

#endif
