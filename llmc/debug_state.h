// The reference state train_gpt2.py writes for the tests (llm.c's debug state, magic 20240327,
// version 2): one (B, T) batch's inputs and targets, its logits over the V real tokens, its
// loss, and the gradients of all 16 tensors (padded layout); and the comparisons the tests
// make against it, each printed as one ok/FAIL line and counted in check_failures.
#ifndef LLMC_DEBUG_STATE_H
#define LLMC_DEBUG_STATE_H

#include <math.h>
#include "utils.h"
#include "gpt2_model.h"

#define DEBUG_STATE_MAGIC 20240327
#define DEBUG_STATE_VERSION 2

typedef struct {
    int B, T;
    int* x;        // (B, T)
    int* y;        // (B, T)
    float* logits; // (B, T, V)
    float loss;
    float* grads;  // all parameters, file order
} DebugState;

// Reads the state of a batch on the model with config c; fails on a header or size mismatch.
static void debug_state_read(DebugState* s, const char* path, const GPT2Config* c) {
    FILE* f = fopen_check(path, "rb");
    int header[256];
    fread_check(header, sizeof(int), 256, f, path, "debug state header");
    if (header[0] != DEBUG_STATE_MAGIC || header[1] != DEBUG_STATE_VERSION) {
        fail("%s: bad debug state magic/version %d %d (expected %d %d)", path, header[0], header[1],
             DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION);
    }
    s->B = header[2];
    s->T = header[3];
    size_t BT = (size_t)s->B * s->T, V = c->vocab_size, n = gpt2_num_parameters(c);
    long size = file_size_of(f);
    // B and T come from the file: bounded by its size first, so that the sum below cannot wrap
    if (s->B <= 0 || s->T <= 0 || BT > (size_t)size / (2 * sizeof(int) + V * sizeof(float))) {
        fail("%s: B %d, T %d do not fit a file of %ld bytes", path, s->B, s->T, size);
    }
    long expected = 1024 + (long)(2 * BT * sizeof(int) + (BT * V + 1 + n) * sizeof(float));
    if (size != expected) {
        fail("%s: size %ld disagrees with B %d, T %d and the model (%ld bytes expected)", path, size, s->B, s->T,
             expected);
    }
    s->x = (int*)malloc_check(BT * sizeof(int));
    s->y = (int*)malloc_check(BT * sizeof(int));
    s->logits = (float*)malloc_check(BT * V * sizeof(float));
    s->grads = (float*)malloc_check(n * sizeof(float));
    fread_check(s->x, sizeof(int), BT, f, path, "x");
    fread_check(s->y, sizeof(int), BT, f, path, "y");
    fread_check(s->logits, sizeof(float), BT * V, f, path, "logits");
    fread_check(&s->loss, sizeof(float), 1, f, path, "loss");
    fread_check(s->grads, sizeof(float), n, f, path, "grads");
    fclose(f);
}

static void debug_state_free(DebugState* s) {
    free(s->x);
    free(s->y);
    free(s->logits);
    free(s->grads);
}

static int check_failures = 0;

static void check_report(const char* what, float err, float tol) {
    int ok = err <= tol;
    printf("%-4s %-22s error %.3e (tolerance %.0e)\n", ok ? "ok" : "FAIL", what, err, tol);
    if (!ok) { check_failures++; }
}

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) { if (fabsf(x[i]) > m) { m = fabsf(x[i]); } }
    return m;
}

// NaN counts as an infinite difference.
static float max_abs_diff(const float* a, const float* b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) { m = d; }
    }
    return m;
}

// Largest |logit - reference| over the V real columns of (B*T, Vp) padded logits.
static void check_logits(const float* logits, int Vp, const DebugState* s, int V, float tol) {
    float err = 0.0f;
    for (size_t bt = 0; bt < (size_t)s->B * s->T; bt++) {
        float e = max_abs_diff(logits + bt * Vp, s->logits + bt * V, V);
        if (!(e <= err)) { err = e; }
    }
    check_report("logits", err, tol);
}

// Each tensor's largest error relative to its largest reference magnitude. perturb >= 0 first
// adds 10 x tol x that magnitude to one element of tensor perturb: the test of the test.
static void check_gradients(float* grads, const DebugState* s, const GPT2Config* c, int perturb, float tol) {
    size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_parameter_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        float scale = max_abs(s->grads + off, sizes[i]);
        if (scale == 0.0f) { scale = 1.0f; }
        if (i == perturb) { grads[off + sizes[i] / 2] += 10.0f * tol * scale; }
        char what[64];
        snprintf(what, sizeof(what), "grad %s", parameter_names[i]);
        check_report(what, max_abs_diff(grads + off, s->grads + off, sizes[i]) / scale, tol);
        off += sizes[i];
    }
}

// The bf16 model file holds the fp32 parameters rounded to nearest even, every one of them.
static void check_bf16_copy(const float* loaded, const float* params, size_t n) {
    size_t mismatches = 0;
    for (size_t i = 0; i < n; i++) { mismatches += loaded[i] != bf16_to_float(float_to_bf16(params[i])); }
    check_report("bf16 file == rounded", (float)mismatches, 0.0f);
}

// The losses train_gpt2.py --write-losses wrote, one per line.
static void read_reference_losses(const char* path, float* losses, int n) {
    FILE* f = fopen_check(path, "r");
    for (int i = 0; i < n; i++) {
        if (fscanf(f, "%f", &losses[i]) != 1) { fail("%s: fewer than %d losses", path, n); }
    }
    fclose(f);
}

#endif
