// Command-line flags shared by both trainers (llm.c-compatible names), their defaults and
// help text, parsing with errors for unknown or malformed flags, and range checks.
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "wire_format.h"
#include "outer_config.h"

typedef struct {
    const char* train_pattern; // -i
    const char* val_pattern;   // -j
    const char* model;         // -e: model .bin or descriptor dN
    const char* log_dir;       // -o
    const char* tokenizer;     // -tk
    int vocab_size;            // -V (descriptor only; 0 = the tokenizer's, else 50257)
    int max_seq_len;           // -sl (descriptor only)
    int B, T;                  // -b, -t
    int total_batch;           // -d (tokens per step; 0 = B*T*world)
    int max_steps;             // -x (-1 = one epoch)
    float lr;                  // -l
    int warmup;                // -u
    float final_fraction;      // -q
    const char* schedule;      // -k
    float weight_decay;        // -c
    float grad_clip;           // -gc
    const char* optimizer;     // -opt: adamw | muon (llmc/optimizer.h)
    float muon_lr;             // -ml: Muon's peak lr (scheduled as -l is)
    float muon_momentum;       // -mm
    int muon_split_qkv;        // -mq: each layer's qkvw as three C x C matrices (q, k, v; 0|1)
    int val_every;             // -v (0 = off)
    int val_batches;           // -m
    int sample_every;          // -s (0 = off)
    int gen_tokens;            // -g
    int checkpoint_every;      // -n (0 = off)
    int resume;                // -y
    int keep_checkpoints;      // -nk (0 = keep all)
    int max_ckpt_failures;     // -nf (0 = never stop)
    int overfit;               // -a
    int zero_stage;            // -z
    int dp_shard;              // -ds (0 = world)
    int seed;                  // -sd
    int shuffle;               // -sf
    int max_skips;             // -sk (0 = never stop)
    float spike_z;             // -sz (0 = off)
    int spike_window;          // -sw
    float peer_wait;           // -wt (0 = wait forever)
    const char* fault;         // -fi (tests only)
    int hellaswag;             // -h (0|1)
    const char* hellaswag_path; // -hf
    int hellaswag_examples;    // -hn (0 = all)
    float peak_tflops;         // -pk (0 = the trainer's default)
    int op_profile;            // -op (0|1)
    OuterConfig outer;         // -ls -ol -om -lss -lf -lo -rb -ref -rqs -rk, and -rq's format (llmc/outer_config.h)
    const char* wire_name;     // -rq: fp32 | bf16 | int8 | int4 (llmc/wire_format.h; outer.wire after parsing)
    int elastic;               // -le: a lost replica is dropped, the others train on (0|1; GPU trainer, -pi tcp)
    int min_replicas;          // -lm: -le stops the run when fewer replicas are left
    float start_wait;          // -lw: -le starts without the replicas not all there after this long (0: waits for all)
    // GPU trainer only
    int recompute;             // -r
    int master_weights;        // -w
    const char* attention;     // -at: ours | cudnn ("" = the build's default, llmc/attention_select.cuh)
    int gelu_fusion;           // -ge
    const char* init_method;   // -pi: mpi | fs | tcp
    const char* init_path;     // -pf
    const char* server_ip;     // -ps
    int server_port;           // -pp
    const char* job_token;     // -pj: the job's identity at the -pi fs / tcp rendezvous (llmc/rendezvous.h)
} TrainArgs;

typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING } ArgType;

typedef struct {
    const char* flag;
    ArgType type;
    size_t offset;
    int gpu_only;
    const char* help;
} ArgSpec;

#define ARG(flag, type, field, gpu, help) {flag, type, offsetof(TrainArgs, field), gpu, help}
static const ArgSpec arg_specs[] = {
    ARG("-i", ARG_STRING, train_pattern, 0, "train data: glob of token shards"),
    ARG("-j", ARG_STRING, val_pattern, 0, "val data: glob of token shards (empty = no validation)"),
    ARG("-e", ARG_STRING, model, 0, "model: a .bin file, or a descriptor dN built with GPT-2 init"),
    ARG("-o", ARG_STRING, log_dir, 0, "log dir for main.log and checkpoints (empty = none)"),
    ARG("-tk", ARG_STRING, tokenizer, 0, "tokenizer file for samples (empty = print token ids)"),
    ARG("-V", ARG_INT, vocab_size, 0, "vocab size of a descriptor model (0 = tokenizer's, else 50257)"),
    ARG("-sl", ARG_INT, max_seq_len, 0, "max sequence length of a descriptor model"),
    ARG("-b", ARG_INT, B, 0, "micro-batch size B per rank"),
    ARG("-t", ARG_INT, T, 0, "sequence length T"),
    ARG("-d", ARG_INT, total_batch, 0, "tokens per optimizer step (0 = B*T*ranks)"),
    ARG("-x", ARG_INT, max_steps, 0, "optimizer steps (-1 = one epoch of the train data)"),
    ARG("-l", ARG_FLOAT, lr, 0, "peak learning rate"),
    ARG("-u", ARG_INT, warmup, 0, "warmup steps"),
    ARG("-q", ARG_FLOAT, final_fraction, 0, "final lr as a fraction of the peak"),
    ARG("-k", ARG_STRING, schedule, 0, "lr schedule: cosine | linear | constant | wsd"),
    ARG("-c", ARG_FLOAT, weight_decay, 0, "AdamW weight decay (2-D tensors only)"),
    ARG("-gc", ARG_FLOAT, grad_clip, 0, "global grad-norm clip (0 = off)"),
    ARG("-opt", ARG_STRING, optimizer, 0, "optimizer: adamw | muon (Muon on the block matrices, AdamW at -l on the rest)"),
    ARG("-ml", ARG_FLOAT, muon_lr, 0, "-opt muon: Muon's peak learning rate (scheduled as -l is)"),
    ARG("-mm", ARG_FLOAT, muon_momentum, 0, "-opt muon: Muon's momentum (Nesterov)"),
    ARG("-mq", ARG_INT, muon_split_qkv, 0, "-opt muon: each layer's qkvw as three C x C matrices, q, k, v (0|1)"),
    ARG("-v", ARG_INT, val_every, 0, "validate every N steps (0 = off)"),
    ARG("-m", ARG_INT, val_batches, 0, "val batches per validation"),
    ARG("-s", ARG_INT, sample_every, 0, "sample text every N steps (0 = off)"),
    ARG("-g", ARG_INT, gen_tokens, 0, "tokens to generate per sample"),
    ARG("-n", ARG_INT, checkpoint_every, 0, "checkpoint every N steps into the log dir (0 = off)"),
    ARG("-nk", ARG_INT, keep_checkpoints, 0, "keep the K newest checkpoints, delete older ones (0 = keep all)"),
    ARG("-nf", ARG_INT, max_ckpt_failures, 0, "stop after N checkpoints in a row could not be written (0 = never)"),
    ARG("-y", ARG_INT, resume, 0, "resume from the latest complete checkpoint in the log dir (0|1)"),
    ARG("-a", ARG_INT, overfit, 0, "overfit a single batch (0|1)"),
    ARG("-z", ARG_INT, zero_stage, 0, "ZeRO stage 0 | 1 | 2"),
    ARG("-ds", ARG_INT, dp_shard, 0, "shard group size dp_shard (0 = all ranks)"),
    ARG("-sd", ARG_INT, seed, 0, "seed for init, shuffling and sampling"),
    ARG("-sf", ARG_INT, shuffle, 0, "shuffle train shards and rows (0|1)"),
    ARG("-sk", ARG_INT, max_skips, 0, "stop after N consecutive skipped (non-finite or spiking) steps (0 = never)"),
    ARG("-sz", ARG_FLOAT, spike_z, 0, "skip a step whose loss is Z std devs above the last -sw steps (0 = off)"),
    ARG("-sw", ARG_INT, spike_window, 0, "window of the loss-spike guard, in steps (max 192)"),
    ARG("-wt", ARG_FLOAT, peer_wait, 0, "seconds to wait for the other ranks in a collective, then stop (0 = forever)"),
    ARG("-fi", ARG_STRING, fault, 0, "tests only: inject a fault KIND@STEP[:RANK] (llmc/faults.h)"),
    ARG("-h", ARG_INT, hellaswag, 0, "HellaSwag accuracy at every validation (0|1; -h alone: this help)"),
    ARG("-hf", ARG_STRING, hellaswag_path, 0, "HellaSwag eval file (llm.c format, dev/data/hellaswag.py)"),
    ARG("-hn", ARG_INT, hellaswag_examples, 0, "HellaSwag examples to score (0 = all)"),
    ARG("-pk", ARG_FLOAT, peak_tflops, 0, "peak TFLOP/s per rank for the MFU (0 = CPU: measured, GPU: datasheet)"),
    ARG("-op", ARG_INT, op_profile, 0, "print and log where a step's time went by op family (0|1)"),
    ARG("-ls", ARG_INT, outer.every, 0, "replicas train alone, outer sync every H steps (DiLoCo; 0 = every step)"),
    ARG("-ol", ARG_FLOAT, outer.lr, 0, "-ls: outer learning rate (Nesterov SGD on the pseudo-gradients)"),
    ARG("-om", ARG_FLOAT, outer.momentum, 0, "-ls: outer Nesterov momentum"),
    ARG("-lf", ARG_INT, outer.fragments, 0, "-ls: streaming fragments, F groups of layers synced at staggered steps"),
    ARG("-lo", ARG_INT, outer.overlap, 0, "-ls: a fragment's exchange overlaps tau steps, then merged (0 = blocking)"),
    ARG("-rb", ARG_FLOAT, outer.link_mbps, 0, "-ls, tests: outer-sync exchanges take >= bytes / (MB/s) (0 = off)"),
    ARG("-lss", ARG_INT, outer.start, 0, "-ls: synchronous steps before the first window (outer starts there)"),
    ARG("-rq", ARG_STRING, wire_name, 0, "replica link format fp32 | bf16 | int8 | int4 (blocks of 128, fp32 scales)"),
    ARG("-ref", ARG_INT, outer.feedback, 0, "-rq/-rk: error feedback, what encoding lost added to the next message (0|1)"),
    ARG("-rqs", ARG_INT, outer.wire_start, 0, "-rq/-rk: steps <= S (and their syncs) send fp32, later ones -rq/-rk"),
    ARG("-rk", ARG_FLOAT, outer.topk, 0, "top-k: send the fraction D of each 4096-value chunk, largest first (0 = all)"),
    ARG("-le", ARG_INT, elastic, 0, "-ls: elastic replicas, a lost one is dropped and the others train on (0|1; -pi tcp or fs)"),
    ARG("-lm", ARG_INT, min_replicas, 0, "-le: stop when fewer than M replicas are left"),
    ARG("-lw", ARG_FLOAT, start_wait, 0, "-le: start without the replicas whose ranks are not all there after S s (0 = wait for all)"),
    ARG("-r", ARG_INT, recompute, 1, "recompute activations: 0 none, 1 GELU, 2 GELU and LayerNorm"),
    ARG("-w", ARG_INT, master_weights, 1, "keep fp32 master weights (0|1)"),
    ARG("-at", ARG_STRING, attention, 1, "attention: ours | cudnn (empty: cudnn in make USE_CUDNN=1 BF16 builds, else ours)"),
    ARG("-ge", ARG_INT, gelu_fusion, 1, "GELU: 0 our kernels, 1 cuBLASLt's GELU and DGELU epilogues"),
    ARG("-pi", ARG_STRING, init_method, 1, "multi-process start-up: mpi | fs | tcp"),
    ARG("-pf", ARG_STRING, init_path, 1, "shared directory for -pi fs"),
    ARG("-ps", ARG_STRING, server_ip, 1, "rank 0's address for -pi tcp"),
    ARG("-pp", ARG_INT, server_port, 1, "rank 0's port for -pi tcp"),
    ARG("-pj", ARG_STRING, job_token, 1, "the job's identity at the -pi fs/tcp rendezvous (default: the launcher's job id, else the command line)"),
};
#undef ARG
#define NUM_ARG_SPECS ((int)(sizeof(arg_specs) / sizeof(arg_specs[0])))

static void args_defaults(TrainArgs* a) {
    memset(a, 0, sizeof(*a)); // every default not set below is 0
    // data, model, logs
    a->train_pattern = "data/kjv/kjv_train.bin"; a->val_pattern = "data/kjv/kjv_val.bin";
    a->model = "d12"; a->max_seq_len = 1024; a->log_dir = ""; a->tokenizer = "";
    // batch, schedule, optimizer
    a->B = 4; a->T = 256; a->max_steps = -1;
    a->lr = 3e-4f; a->final_fraction = 1.0f; a->schedule = "cosine"; a->grad_clip = 1.0f;
    a->optimizer = "adamw"; a->muon_lr = 0.02f; a->muon_momentum = 0.95f; a->muon_split_qkv = 0;
    // evaluation, sampling, checkpoints
    a->val_every = 20; a->val_batches = 20; a->sample_every = 20; a->gen_tokens = 64; a->max_ckpt_failures = 3;
    a->hellaswag_path = "data/hellaswag/hellaswag_val.bin";
    // data parallelism, guards, faults
    a->seed = 1337; a->shuffle = 1; a->max_skips = 10; a->spike_window = 50; a->peer_wait = 45.0f; a->fault = "";
    // the replica sync: plain averaging (-ol 1 -om 0; docs/distributed.md's table says why), fp32, feedback on
    a->outer.lr = 1.0f; a->outer.fragments = 1; a->outer.feedback = 1; a->wire_name = "fp32";
    a->min_replicas = 1;
    // the GPU trainer (-ge 0: docs/gpu.md measured accuracy both ways)
    a->recompute = 1; a->master_weights = 1; a->attention = "";
#ifdef NO_MPI
    a->init_method = "fs"; // no Open MPI in this build (llmc/process_info.h)
#else
    a->init_method = "mpi";
#endif
    a->init_path = "/tmp"; a->server_ip = ""; a->server_port = 12345; a->job_token = "";
}

static void args_print_help(const char* program, int gpu) {
    TrainArgs d;
    args_defaults(&d);
    printf("usage: %s [flags]   (each flag takes one value)\n", program);
    for (int i = 0; i < NUM_ARG_SPECS; i++) {
        const ArgSpec* s = &arg_specs[i];
        if (s->gpu_only && !gpu) { continue; }
        const char* field = (const char*)&d + s->offset;
        char value[256];
        if (s->type == ARG_INT) { snprintf(value, sizeof(value), "%d", *(const int*)field); }
        else if (s->type == ARG_FLOAT) { snprintf(value, sizeof(value), "%g", *(const float*)field); }
        else { snprintf(value, sizeof(value), "\"%s\"", *(const char* const*)field); }
        printf("  %-4s %-66s default %s\n", s->flag, s->help, value);
    }
}

// Parses argv into a; --help, and -h without a value (last, or before another flag), print the
// flags and exit 0 (-h 1 turns on HellaSwag, llm.c's flag). gpu: 1 for the GPU trainer.
static void args_parse(TrainArgs* a, int argc, char** argv, int gpu) {
    args_defaults(a);
    for (int i = 1; i < argc; i++) {
        int bare_h = strcmp(argv[i], "-h") == 0 && (i + 1 >= argc || argv[i + 1][0] == '-');
        if (bare_h || strcmp(argv[i], "--help") == 0) {
            args_print_help(argv[0], gpu);
            exit(0);
        }
        const ArgSpec* spec = NULL;
        for (int k = 0; k < NUM_ARG_SPECS; k++) {
            if (strcmp(argv[i], arg_specs[k].flag) == 0) { spec = &arg_specs[k]; }
        }
        if (spec == NULL) { fail("unknown flag %s (see --help)", argv[i]); }
        if (spec->gpu_only && !gpu) { fail("%s is a flag of the GPU trainer train_gpt2 only", argv[i]); }
        if (i + 1 >= argc) { fail("%s needs a value", argv[i]); }
        const char* value = argv[++i];
        char* field = (char*)a + spec->offset;
        char* end = NULL;
        errno = 0;
        if (spec->type == ARG_INT) {
            long v = strtol(value, &end, 10);
            if (*value == '\0' || *end != '\0' || errno != 0 || v < -2147483647L || v > 2147483647L) {
                fail("%s %s: not an integer", spec->flag, value);
            }
            *(int*)field = (int)v;
        } else if (spec->type == ARG_FLOAT) {
            float v = strtof(value, &end);
            if (*value == '\0' || *end != '\0' || errno != 0) { fail("%s %s: not a number", spec->flag, value); }
            *(float*)field = v;
        } else {
            *(const char**)field = value;
        }
    }
    a->outer.wire = wire_format_from_name(a->wire_name); // -1 when unknown: args_validate says so
}

static void require_int(const char* flag, int value, int lo, int hi) {
    if (value < lo || value > hi) { fail("%s %d: must be in %d..%d", flag, value, lo, hi); }
}

static void require_float(const char* flag, float value, float lo, float hi) {
    if (!(value >= lo && value <= hi)) { fail("%s %g: must be in %g..%g", flag, value, lo, hi); }
}

// -rq, -ref, -rqs, -rk: compressed pseudo-gradients (-ls H) or gradients (-ls 0) across the replicas
// (docs/distributed.md).
static void args_validate_wire(const TrainArgs* a) {
    int f = wire_format_from_name(a->wire_name);
    if (f < 0) { fail("-rq %s: must be fp32, bf16, int8 or int4", a->wire_name); }
    require_int("-ref", a->outer.feedback, 0, 1);
    require_int("-rqs", a->outer.wire_start, 0, 2147483647);
    require_float("-rk", a->outer.topk, 0.0f, 1.0f);
    if (f == WIRE_FP32 && a->outer.topk == 0.0f && a->outer.wire_start > 0) {
        fail("-rqs %d: needs -rq bf16, int8 or int4, or -rk", a->outer.wire_start);
    }
}

// -le, -lm: elastic replicas (docs/distributed.md, "Elastic replicas"): the GPU trainer's, started
// with -pi tcp or fs, with -ls; what is not built yet is refused by name.
static void args_validate_elastic(const TrainArgs* a, int gpu) {
    require_int("-le", a->elastic, 0, 1);
    require_int("-lm", a->min_replicas, 1, 1 << 20);
    require_float("-lw", a->start_wait, 0.0f, 1e7f);
    if (a->start_wait > 0.0f && !a->elastic) { fail("-lw %g: needs -le 1 (a start without some replicas)", a->start_wait); }
    if (!a->elastic) { return; }
    if (!gpu) {
        fail("-le 1: the CPU trainer's ranks talk over Open MPI 4.1, which has no fault-tolerant communicators "
             "(a dead rank ends the job); elastic replicas are the GPU trainer's (train_gpt2 -le 1 -pi tcp)");
    }
    if (a->outer.every == 0) { fail("-le 1: needs -ls H > 0 (replicas that train alone between syncs can drop out)"); }
    if (strcmp(a->init_method, "mpi") == 0) {
        fail("-le 1: under -pi mpi Open MPI ends the whole job when one process dies; start the ranks with -pi tcp or "
             "-pi fs");
    }
    if (a->peer_wait <= 0.0f) { fail("-le 1: needs -wt > 0 (how long a silent replica has before it is dropped)"); }
}

// Range checks that need no model or data.
static void args_validate(const TrainArgs* a, int gpu) {
    const int big = 2147483647;
    require_int("-b", a->B, 1, 1 << 20);
    require_int("-t", a->T, 1, 1 << 20);
    require_int("-d", a->total_batch, 0, big);
    if (a->max_steps == 0 || a->max_steps < -1) { fail("-x %d: must be -1 (one epoch) or positive", a->max_steps); }
    require_float("-l", a->lr, 0.0f, 10.0f);
    require_int("-u", a->warmup, 0, big);
    require_float("-q", a->final_fraction, 0.0f, 1.0f);
    require_float("-c", a->weight_decay, 0.0f, 10.0f);
    require_float("-gc", a->grad_clip, 0.0f, 1e30f);
    if (strcmp(a->optimizer, "adamw") && strcmp(a->optimizer, "muon")) {
        fail("-opt %s: must be adamw or muon", a->optimizer);
    }
    require_float("-ml", a->muon_lr, 0.0f, 10.0f);
    require_float("-mm", a->muon_momentum, 0.0f, 0.999f);
    require_int("-mq", a->muon_split_qkv, 0, 1);
    if (a->muon_split_qkv && strcmp(a->optimizer, "muon") != 0) {
        fail("-mq %d: needs -opt muon (it says how Muon cuts qkvw)", a->muon_split_qkv);
    }
    require_int("-v", a->val_every, 0, big);
    require_int("-m", a->val_batches, 1, big);
    require_int("-s", a->sample_every, 0, big);
    require_int("-g", a->gen_tokens, 1, 1 << 20);
    require_int("-n", a->checkpoint_every, 0, big);
    require_int("-y", a->resume, 0, 1);
    require_int("-nk", a->keep_checkpoints, 0, big);
    require_int("-nf", a->max_ckpt_failures, 0, big);
    require_int("-a", a->overfit, 0, 1);
    require_int("-z", a->zero_stage, 0, 2);
    require_int("-ds", a->dp_shard, 0, 1 << 20);
    require_int("-sf", a->shuffle, 0, 1);
    require_int("-sk", a->max_skips, 0, big);
    require_float("-sz", a->spike_z, 0.0f, 1e6f);
    require_int("-sw", a->spike_window, 2, 192);
    require_float("-wt", a->peer_wait, 0.0f, 1e7f);
    require_int("-h", a->hellaswag, 0, 1);
    require_int("-hn", a->hellaswag_examples, 0, big);
    require_float("-pk", a->peak_tflops, 0.0f, 1e9f);
    require_int("-op", a->op_profile, 0, 1);
    require_int("-V", a->vocab_size, 0, 65536);
    require_int("-sl", a->max_seq_len, 1, 1 << 20);
    require_int("-ls", a->outer.every, 0, big);
    require_float("-ol", a->outer.lr, 1e-6f, 10.0f);
    require_float("-om", a->outer.momentum, 0.0f, 0.999f);
    require_int("-lss", a->outer.start, 0, big);
    if (a->outer.start > 0 && a->outer.every == 0) { fail("-lss %d: needs -ls H > 0", a->outer.start); }
    require_int("-lf", a->outer.fragments, 1, big);
    if (a->outer.fragments > 1 && a->outer.every == 0) { fail("-lf %d: needs -ls H > 0", a->outer.fragments); }
    require_int("-lo", a->outer.overlap, 0, big);
    if (a->outer.overlap > 0 && a->outer.overlap >= a->outer.every) {
        fail("-lo %d: needs -ls H > tau (a fragment's exchange lands before its next one starts)", a->outer.overlap);
    }
    require_float("-rb", a->outer.link_mbps, 0.0f, 1e9f);
    if (a->outer.link_mbps > 0.0f && a->outer.every == 0) { fail("-rb %g: needs -ls H > 0", a->outer.link_mbps); }
    args_validate_wire(a);
    args_validate_elastic(a, gpu);
    if (a->hellaswag && a->val_every == 0) { fail("-h 1: HellaSwag runs at every validation, so -v must be > 0"); }
    if ((a->resume || a->checkpoint_every) && a->log_dir[0] == '\0') {
        fail("-y/-n: checkpoints need a log dir (-o)");
    }
    if (gpu) {
        require_int("-r", a->recompute, 0, 2);
        require_int("-w", a->master_weights, 0, 1);
        if (a->attention[0] && strcmp(a->attention, "ours") && strcmp(a->attention, "cudnn")) {
            fail("-at %s: must be ours or cudnn", a->attention);
        }
        require_int("-ge", a->gelu_fusion, 0, 1);
        if (strcmp(a->init_method, "mpi") && strcmp(a->init_method, "fs") && strcmp(a->init_method, "tcp")) {
            fail("-pi %s: must be mpi, fs or tcp", a->init_method);
        }
        require_int("-pp", a->server_port, 1, 65535);
    }
}

// The batch arithmetic: tokens per step (-d, 0 = one micro-batch on every rank) must be a
// multiple of B*T*ranks; returns the micro-steps per step (grad_accum) and fills in -d.
static int args_grad_accum(TrainArgs* a, int ranks) {
    long tokens_per_micro = (long)a->B * a->T * ranks;
    if (tokens_per_micro > 2147483647L) {
        fail("-b %d -t %d: %ld tokens per micro-step on %d ranks, more than -d can count (2^31-1)", a->B, a->T,
             tokens_per_micro, ranks);
    }
    if (a->total_batch == 0) { a->total_batch = (int)tokens_per_micro; }
    if (a->total_batch % tokens_per_micro != 0) {
        fail("-d %d: not a multiple of B*T*ranks = %d*%d*%d = %ld", a->total_batch, a->B, a->T, ranks,
             tokens_per_micro);
    }
    return (int)(a->total_batch / tokens_per_micro);
}

#endif
