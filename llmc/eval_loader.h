// Multiple-choice evaluation (HellaSwag) in llm.c's eval file format, and its scoring, the same
// for both trainers: a model forward is passed in as a callback.
//
// File: a 1024-byte header of int32 (magic 20240522, version 1, number of examples, bytes of the
// longest example), then per example a stream of uint16: 65535 (start), the example's bytes
// (this stream included), its index, the label (the right completion), the number of
// completions, the context length and tokens, then each completion's length and tokens.
//
// Scoring: each (example, completion) is one row: inputs = context + completion without its
// last token, targets shifted by one. A completion's score is the mean token loss over the
// positions that predict its tokens; the choice is the completion with the lowest mean
// (the first on ties), right when it equals the label ("acc_norm" in llm.c's script).
// Each rank takes examples rank, rank + world, ...; the count right is summed by the caller.
#ifndef LLMC_EVAL_LOADER_H
#define LLMC_EVAL_LOADER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_START 65535
#define EVAL_MAX_COMPLETIONS 16

typedef struct {
    int label;
    int num_completions;
    int context_len;
    const uint16_t* context;                       // points into EvalFile.stream
    int completion_len[EVAL_MAX_COMPLETIONS];
    const uint16_t* completion[EVAL_MAX_COMPLETIONS];
} EvalExample;

typedef struct {
    int num_examples;
    EvalExample* examples;
    uint16_t* stream; // the file's payload
} EvalFile;

// Reads and checks the whole file: every token < vocab_size, every row fits in T positions.
static void eval_file_load(EvalFile* f, const char* path, int vocab_size, int T) {
    FILE* fp = fopen_check(path, "rb");
    long size = file_size_of(fp);
    if (size < 1024) { fail("%s: %ld bytes, shorter than the 1024-byte eval header", path, size); }
    int32_t header[256];
    fread_check(header, sizeof(int32_t), 256, fp, path, "the eval header");
    if (header[0] != EVAL_MAGIC) {
        fail("%s: bad magic %d (expected %d, an eval file)", path, header[0], EVAL_MAGIC);
    }
    if (header[1] != EVAL_VERSION) {
        fail("%s: unsupported eval version %d (expected %d)", path, header[1], EVAL_VERSION);
    }
    if (header[2] < 1) { fail("%s: %d examples in the header", path, header[2]); }
    long payload = size - 1024;
    if (payload % 2 != 0) { fail("%s: payload of %ld bytes is not a whole number of uint16", path, payload); }
    size_t n = (size_t)payload / 2;
    if ((size_t)header[2] > n / 9) { // an example is at least 9 uint16
        fail("%s: %d examples in the header cannot fit in %ld bytes", path, header[2], payload);
    }
    f->num_examples = header[2];
    f->stream = (uint16_t*)malloc_check(n * sizeof(uint16_t) + 1);
    fread_check(f->stream, sizeof(uint16_t), n, fp, path, "the eval examples");
    fclose(fp);
    f->examples = (EvalExample*)calloc_check((size_t)f->num_examples, sizeof(EvalExample));
    size_t pos = 0;
    for (int e = 0; e < f->num_examples; e++) {
        EvalExample* ex = &f->examples[e];
        size_t start = pos;
        const uint16_t* s = f->stream;
#define EVAL_NEED(k) do { if (pos + (k) > n) { fail("%s: truncated in example %d", path, e); } } while (0)
        EVAL_NEED(6);
        if (s[pos] != EVAL_START) { fail("%s: example %d does not start with %d", path, e, EVAL_START); }
        size_t bytes = s[pos + 1];
        ex->label = s[pos + 3];
        ex->num_completions = s[pos + 4];
        ex->context_len = s[pos + 5];
        pos += 6;
        if (ex->num_completions < 1 || ex->num_completions > EVAL_MAX_COMPLETIONS) {
            fail("%s: example %d has %d completions (1..%d)", path, e, ex->num_completions, EVAL_MAX_COMPLETIONS);
        }
        if (ex->label >= ex->num_completions) {
            fail("%s: example %d: label %d of %d completions", path, e, ex->label, ex->num_completions);
        }
        if (ex->context_len < 1) { fail("%s: example %d has an empty context", path, e); }
        EVAL_NEED((size_t)ex->context_len);
        ex->context = s + pos;
        pos += ex->context_len;
        for (int c = 0; c < ex->num_completions; c++) {
            EVAL_NEED(1);
            int len = s[pos++];
            EVAL_NEED((size_t)len);
            if (len < 1) { fail("%s: example %d, completion %d is empty", path, e, c); }
            if (ex->context_len + len - 1 > T) {
                fail("%s: example %d, completion %d needs %d positions, more than -t %d", path, e, c,
                     ex->context_len + len - 1, T);
            }
            ex->completion_len[c] = len;
            ex->completion[c] = s + pos;
            pos += len;
        }
#undef EVAL_NEED
        if (bytes != (pos - start) * 2) {
            fail("%s: example %d says %zu bytes but holds %zu", path, e, bytes, (pos - start) * 2);
        }
        for (int i = 0; i < ex->context_len; i++) {
            if (ex->context[i] >= vocab_size) {
                fail("%s: example %d: token %d >= vocab %d", path, e, ex->context[i], vocab_size);
            }
        }
        for (int c = 0; c < ex->num_completions; c++) {
            for (int i = 0; i < ex->completion_len[c]; i++) {
                if (ex->completion[c][i] >= vocab_size) {
                    fail("%s: example %d: token %d >= vocab %d", path, e, ex->completion[c][i], vocab_size);
                }
            }
        }
    }
    if (pos != n) { fail("%s: %zu bytes after the last of %d examples", path, (n - pos) * 2, f->num_examples); }
}

static void eval_file_free(EvalFile* f) {
    free(f->examples);
    free(f->stream);
}

// A forward of (B, T) rows with targets; returns the B*T per-position losses (host memory).
typedef const float* (*EvalForwardFn)(void* ctx, const int* inputs, const int* targets, int B, int T);

// One row of the batch being built: which example and completion it scores.
typedef struct {
    int example, completion;
} EvalRow;

// Fills row r of inputs/targets (T wide, padding 0) with example ex's completion c.
static void eval_fill_row(const EvalExample* ex, int c, int* inputs, int* targets, int T) {
    int n = ex->context_len + ex->completion_len[c]; // tokens in the row, the last one only a target
    memset(inputs, 0, (size_t)T * sizeof(int));
    memset(targets, 0, (size_t)T * sizeof(int));
    for (int i = 0; i < n; i++) {
        int tok = i < ex->context_len ? ex->context[i] : ex->completion[c][i - ex->context_len];
        if (i < n - 1) { inputs[i] = tok; }
        if (i > 0) { targets[i - 1] = tok; }
    }
}

// Scores this rank's share of the first `limit` examples (0 = all) with batches of B rows of T.
// choices (num_examples ints, or NULL) gets each scored example's choice and scores
// (num_examples * EVAL_MAX_COMPLETIONS floats, or NULL) its completions' mean losses.
// Returns the number of this rank's examples chosen right.
static int eval_run(const EvalFile* f, int limit, int rank, int world, int B, int T, EvalForwardFn forward,
                    void* ctx, int* choices, float* scores) {
    int total = (limit > 0 && limit < f->num_examples) ? limit : f->num_examples;
    int* inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    int* targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    EvalRow* rows = (EvalRow*)malloc_check((size_t)B * sizeof(EvalRow));
    float* mean = (float*)malloc_check((size_t)total * EVAL_MAX_COMPLETIONS * sizeof(float));
    int filled = 0;
    // walk this rank's (example, completion) rows in order; run a batch when B are filled or at the end
    int e = rank, c = 0;
    while (1) {
        int done = e >= total;
        if (!done) {
            eval_fill_row(&f->examples[e], c, inputs + (size_t)filled * T, targets + (size_t)filled * T, T);
            rows[filled].example = e;
            rows[filled].completion = c;
            filled++;
            if (++c == f->examples[e].num_completions) { c = 0; e += world; }
        }
        if (filled == B || (done && filled > 0)) {
            const float* losses = forward(ctx, inputs, targets, filled, T);
            for (int r = 0; r < filled; r++) {
                const EvalExample* ex = &f->examples[rows[r].example];
                int len = ex->completion_len[rows[r].completion];
                double sum = 0.0; // positions context_len-1 .. context_len+len-2 predict the completion
                for (int i = 0; i < len; i++) { sum += losses[(size_t)r * T + ex->context_len - 1 + i]; }
                mean[(size_t)rows[r].example * EVAL_MAX_COMPLETIONS + rows[r].completion] = (float)(sum / len);
            }
            filled = 0;
        }
        if (done) { break; }
    }
    int right = 0;
    for (int k = rank; k < total; k += world) {
        const EvalExample* ex = &f->examples[k];
        const float* m = mean + (size_t)k * EVAL_MAX_COMPLETIONS;
        int best = 0;
        for (int j = 1; j < ex->num_completions; j++) {
            if (m[j] < m[best]) { best = j; }
        }
        right += best == ex->label;
        if (choices) { choices[k] = best; }
        if (scores) { memcpy(scores + (size_t)k * EVAL_MAX_COMPLETIONS, m, ex->num_completions * sizeof(float)); }
    }
    free(inputs);
    free(targets);
    free(rows);
    free(mean);
    return right;
}

// Number of examples eval_run scores over all ranks.
static int eval_num_scored(const EvalFile* f, int limit) {
    return (limit > 0 && limit < f->num_examples) ? limit : f->num_examples;
}

// What a trainer holds for in-loop evaluation: the file, how many examples, and result buffers.
typedef struct {
    EvalFile file;
    int limit;      // examples scored (0 = all)
    int total;      // = eval_num_scored
    int* choices;   // per example
    float* scores;  // per example x EVAL_MAX_COMPLETIONS
} EvalRun;

static void eval_open(EvalRun* r, const char* path, int limit, int vocab_size, int T) {
    eval_file_load(&r->file, path, vocab_size, T);
    r->limit = limit;
    r->total = eval_num_scored(&r->file, limit);
    r->choices = (int*)calloc_check((size_t)r->file.num_examples, sizeof(int));
    r->scores = (float*)calloc_check((size_t)r->file.num_examples * EVAL_MAX_COMPLETIONS, sizeof(float));
}

static void eval_close(EvalRun* r) {
    eval_file_free(&r->file);
    free(r->choices);
    free(r->scores);
}

static void eval_dump(const EvalFile* f, int limit, int rank, int world, int step, const int* choices,
                      const float* scores);

// Scores this rank's share (see eval_run) and returns how many it got right; the caller sums
// that over the ranks and divides by r->total.
static int eval_step(EvalRun* r, int rank, int world, int B, int T, EvalForwardFn forward, void* ctx, int step) {
    int right = eval_run(&r->file, r->limit, rank, world, B, T, forward, ctx, r->choices, r->scores);
    eval_dump(&r->file, r->limit, rank, world, step, r->choices, r->scores);
    return right;
}

// With TRAIN_GPT2_EVAL_DUMP=PREFIX set, appends this rank's scored examples to PREFIX.RANK, one
// line each: "step example label choice loss_0 ... loss_{n-1}" (for tests and debugging).
static void eval_dump(const EvalFile* f, int limit, int rank, int world, int step, const int* choices,
                      const float* scores) {
    const char* prefix = getenv("TRAIN_GPT2_EVAL_DUMP");
    if (prefix == NULL || prefix[0] == '\0') { return; }
    char path[4096];
    snprintf(path, sizeof(path), "%s.%d", prefix, rank);
    FILE* fp = fopen_check(path, "a");
    for (int k = rank; k < eval_num_scored(f, limit); k += world) {
        const EvalExample* ex = &f->examples[k];
        fprintf(fp, "%d %d %d %d", step, k, ex->label, choices[k]);
        for (int j = 0; j < ex->num_completions; j++) { fprintf(fp, " %.7g", scores[(size_t)k * EVAL_MAX_COMPLETIONS + j]); }
        fprintf(fp, "\n");
    }
    fclose(fp);
}

#endif
