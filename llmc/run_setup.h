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

// Returns the fp32 parameters (malloc'd) and fills config; source receives the path or
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
        params = (float*)malloc_check(gpt2_num_parameters(config) * sizeof(float));
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
