// Text generation shared by both trainers: from an end-of-text prompt, each next token is drawn
// from the softmax of the model's logits for the last position (a sliding window of T tokens),
// and printed through the tokenizer (or as ids without one).
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"
#include "rng.h"
#include "tokenizer.h"

// Writes the logits (V floats) of position len-1 after a forward of context[0..len).
typedef void (*NextLogitsFn)(void* ctx, const int* context, int len, float* logits);

// A token drawn from softmax(logits[0..V)) with rng.
static int sample_token(const float* logits, int V, Rng* rng) {
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++) { if (logits[v] > maxv) { maxv = logits[v]; } }
    double sum = 0.0;
    for (int v = 0; v < V; v++) { sum += exp(logits[v] - maxv); }
    double r = rng_uniform(rng) * sum, acc = 0.0;
    for (int v = 0; v < V; v++) {
        acc += exp(logits[v] - maxv);
        if (acc > r) { return v; }
    }
    return V - 1;
}

// Samples gen_tokens tokens after an end-of-text prompt and prints them between --- lines.
static void sample_text(NextLogitsFn next_logits, void* ctx, int T, int V, const Tokenizer* tok, int eot,
                        int gen_tokens, Rng* rng) {
    int* context = (int*)malloc_check((size_t)T * sizeof(int));
    float* logits = (float*)malloc_check((size_t)V * sizeof(float));
    int len = 1;
    context[0] = eot;
    printf("---\n");
    for (int i = 0; i < gen_tokens; i++) {
        next_logits(ctx, context, len, logits);
        int next = sample_token(logits, V, rng);
        if (tok) { tokenizer_print(tok, next); } else { printf("%d ", next); }
        if (len == T) { memmove(context, context + 1, (T - 1) * sizeof(int)); len--; }
        context[len++] = next;
    }
    printf("\n---\n");
    fflush(stdout);
    free(context);
    free(logits);
}

#endif
