// train_gpt2cpu: GPT-2 training in fp32 on the CPU with OpenMP, data-parallel over MPI with
// ZeRO stages 0, 1 and 2 and hybrid (dp_replicate x dp_shard) meshes. The numerical reference
// for the CUDA trainer. Layers are plain loops; matmuls live in llmc/cpu_matmul.h.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/utils.h"
#include "llmc/rng.h"
#include "llmc/gpt2_model.h"
#include "llmc/args.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/mesh.h"
#include "llmc/comm_mpi.h"
#include "llmc/comm_thread.h"
#include "llmc/checkpoint.h"
#include "llmc/optimizer.h"
#include "llmc/train_loop.h"
#include "llmc/activation_table.h"
#include "llmc/cpu_matmul.h"
#include "llmc/cpu_vecmath.h"
#include "llmc/cpu_attention.h"
#include "llmc/cpu_peak.h"
#include "llmc/cpu_memory.h"
#include "llmc/op_profile.h"

// ----------------------------------------------------------------------------
// layers, forward
// Shapes use B (batch rows), T (positions), C (channels), NH (heads), hs = C / NH, V (vocabulary),
// Vp (padded vocabulary) and N = B * T. Each layer says what backward needs from it: gpt2_forward
// keeps those tensors in Activations, one slab per layer.

// out (B, T, C) = wte[token] + wpe[position]. Saves nothing: backward needs only the token ids
// (kept in Activations.tokens) to know which rows of wte receive the gradient.
static void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float* e = wte + (size_t)tokens[bt] * C;
        const float* p = wpe + (size_t)(bt % T) * C;
        float* o = out + (size_t)bt * C;
        for (int c = 0; c < C; c++) { o[c] = e[c] + p[c]; }
    }
}

// out (N, C) = (inp - mean) * rstd * weight + bias, statistics per row over C, eps 1e-5.
// Saves mean and rstd (N): with the input (kept anyway, it is the residual stream) they give
// backward the normalised row without a second pass over it. out is kept too: it is the input
// of the next matmul, whose weight gradient needs it.
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = 0.0f;
        #pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) { m += x[c]; }
        m /= C;
        float var = 0.0f;
        #pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++) { float d = x[c] - m; var += d * d; }
        var /= C;
        float s = 1.0f / sqrtf(var + 1e-5f);
        float* y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) { y[c] = (x[c] - m) * s * weight[c] + bias[c]; }
        mean[n] = m;
        rstd[n] = s;
    }
}

// out (n) = gelu(inp), tanh form, one vector of VEC_W elements at a time (llmc/cpu_vecmath.h).
// Both are kept: gelu'(x) needs the input, and the output is the next matmul's input.
static void gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += VEC_W) {
        int w = n - i < VEC_W ? (int)(n - i) : VEC_W;
        vf_store_n(out + i, vf_gelu(vf_load_n(inp + i, w, 0.0f)), w);
    }
}

// inout (n) += other: the residual connection. Saves nothing: a sum passes its gradient through
// unchanged to both operands.
static void residual_add(float* inout, const float* other, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { inout[i] += other[i]; }
}

// losses (N) = -log softmax(logits)[target] per position, over the first V of Vp columns (the
// padded ones are never part of the softmax). logits (N, Vp) stay: backward turns them into
// dlogits in place, with each row's max and sum of exp(logit - max) (row_max, row_sum (N)), so
// that it needs one pass over the logits instead of three.
static void crossentropy_forward(float* losses, float* row_max, float* row_sum, const float* logits,
                                 const int* targets, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float maxv = vf_array_max(l, V);
        float sum = vf_array_exp_sum(NULL, l, V, maxv);
        losses[n] = logf(sum) + maxv - l[targets[n]];
        row_max[n] = maxv;
        row_sum[n] = sum;
    }
}

// ----------------------------------------------------------------------------
// layers, backward

// Turns logits (N, Vp) into dloss/dlogits in place: (softmax - onehot(target)) * dloss, where
// dloss is the weight of each position's loss in the objective, from forward's row_max and
// row_sum; padded columns 0.
static void crossentropy_softmax_backward(float* logits, const float* row_max, const float* row_sum,
                                          const int* targets, float dloss, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* l = logits + (size_t)n * Vp;
        float shift = row_max[n], scale = dloss / row_sum[n];
        int full = V / VEC_W * VEC_W;
        for (int i = 0; i < full; i += VEC_W) { vf_store(l + i, vf_exp(vf_load(l + i) - shift) * scale); }
        if (full < V) { vf_store_n(l + full, vf_exp(vf_load_n(l + full, V - full, 0.0f) - shift) * scale, V - full); }
        l[targets[n]] -= dloss;
        for (int i = V; i < Vp; i++) { l[i] = 0.0f; }
    }
}

// dout (N, C) -> dinp (N, C) += LayerNorm backward (added: dinp is the residual stream's gradient,
// which also flows around the layer); dweight, dbias (C) = (accumulate ? themselves : 0) + their
// gradients (reduced per channel, so every channel sums its rows in a fixed order). The
// normalised row is rebuilt from inp, mean and rstd.
static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C,
                               int accumulate) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* dy = dout + (size_t)n * C;
        const float* x = inp + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float mean_dnorm = 0.0f, mean_dnorm_norm = 0.0f;
        #pragma omp simd reduction(+ : mean_dnorm, mean_dnorm_norm)
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = dy[c] * weight[c];
            mean_dnorm += dnorm;
            mean_dnorm_norm += dnorm * norm;
        }
        mean_dnorm /= C;
        mean_dnorm_norm /= C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = dy[c] * weight[c];
            dx[c] += s * (dnorm - mean_dnorm - norm * mean_dnorm_norm);
        }
    }
    int nthreads = omp_get_max_threads();
    #pragma omp parallel for schedule(static)
    for (int part = 0; part < nthreads; part++) {
        int c0 = (int)((long)C * part / nthreads), c1 = (int)((long)C * (part + 1) / nthreads);
        if (!accumulate) {
            memset(dweight + c0, 0, (size_t)(c1 - c0) * sizeof(float));
            memset(dbias + c0, 0, (size_t)(c1 - c0) * sizeof(float));
        }
        for (int n = 0; n < N; n++) {
            const float* dy = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dweight[c] += dy[c] * (x[c] - m) * s;
                dbias[c] += dy[c];
            }
        }
    }
}

// dinp (n) = dout * gelu'(inp), inp the saved pre-activation; dinp may be dout.
static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += VEC_W) {
        int w = n - i < VEC_W ? (int)(n - i) : VEC_W;
        vfloat g = vf_load_n(dout + i, w, 0.0f) * vf_gelu_grad(vf_load_n(inp + i, w, 0.0f));
        vf_store_n(dinp + i, g, w);
    }
}

// dout (B, T, C) -> dwte[token] += dout, dwpe[t] += dout; parallel over channel ranges so no two threads touch
// the same element and each element sums in position order.
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    int nthreads = omp_get_max_threads();
    #pragma omp parallel for schedule(static)
    for (int part = 0; part < nthreads; part++) {
        int c0 = (int)((long)C * part / nthreads), c1 = (int)((long)C * (part + 1) / nthreads);
        for (int bt = 0; bt < B * T; bt++) {
            const float* d = dout + (size_t)bt * C;
            float* e = dwte + (size_t)tokens[bt] * C;
            float* p = dwpe + (size_t)(bt % T) * C;
            for (int c = c0; c < c1; c++) { e[c] += d[c]; p[c] += d[c]; }
        }
    }
}

// ----------------------------------------------------------------------------
// the model

// One layer's slice of the 12 per-layer tensors.
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;

static LayerTensors layer_tensors(const ParameterTensors* p, int C, int l) {
    size_t C1 = C;
    LayerTensors t = {
        p->ln1w + l * C1, p->ln1b + l * C1, p->qkvw + l * 3 * C1 * C1, p->qkvb + l * 3 * C1,
        p->attprojw + l * C1 * C1, p->attprojb + l * C1, p->ln2w + l * C1, p->ln2b + l * C1,
        p->fcw + l * 4 * C1 * C1, p->fcb + l * 4 * C1, p->fcprojw + l * 4 * C1 * C1, p->fcprojb + l * C1};
    return t;
}

// The CPU trainer's activation table (llmc/activation_table.h): the shared rows in fp32, plus
// attention's probabilities, the token ids and the softmax's row statistics.
#define ACTIVATIONS(X)                                                                              \
    GPT2_ACTIVATIONS(X, float, Vp)                                                                  \
    X(att, float, LAYERS, B * NH * T * T)     /* (L, B, NH, T, T) attention probabilities */        \
    X(tokens, int, ONE, BT)                   /* (B, T) inputs of the last forward */               \
    X(targets, int, ONE, BT)                  /* (B, T) its next-token ids */                       \
    X(row_max, float, ONE, BT)                /* (B, T) max logit of each position */               \
    X(row_sum, float, ONE, BT)                /* (B, T) its sum of exp(logit - max) */
#define ACTIVATION_GRADS(X)                                                                         \
    GPT2_ACTIVATION_GRADS(X, float, ONE)
DEFINE_ACTIVATION_STRUCTS

typedef struct {
    GPT2Config config;
    size_t num_parameters;
    float* params_memory;
    ParameterTensors params;
    float* grads_memory;    // stage 0, 1: all gradients; stage 2: wte, wpe, lnf + one layer
    ParameterTensors grads; // stage 2: the per-layer pointers all point at the one-layer slot
    int grads_one_layer;    // 1 in stage 2
    int grads_stale;        // set by gpt2_zero_grads: the next backward writes the gradients, not adds
    int B, T;               // the largest micro-batch the buffers hold
    Activations acts;
    ActivationGrads acts_grad;
    size_t activation_bytes;
} GPT2;

DEFINE_ACTIVATION_BUFFERS

// Builds the model's buffers. grads_padding: the gradient block is padded to a multiple of it
// (the world size, for the stage-0 all-reduce). one_layer_grads: stage 2's layout.
static void gpt2_build(GPT2* m, const GPT2Config* config, float* params, int B, int T, size_t grads_padding,
                       int one_layer_grads) {
    m->config = *config;
    m->num_parameters = gpt2_num_parameters(config);
    m->params_memory = params;
    gpt2_point_parameters(&m->params, config, params);
    m->grads_one_layer = one_layer_grads;
    m->grads_stale = 0;
    if (!one_layer_grads) {
        size_t n = round_up(m->num_parameters, grads_padding);
        m->grads_memory = (float*)cpu_zeroed_touched(n, sizeof(float), "the gradients");
        gpt2_point_parameters(&m->grads, config, m->grads_memory);
    } else {
        // wte, wpe, lnfw, lnfb at full size, then one layer of the 12 per-layer tensors
        GPT2Config one = *config;
        one.num_layers = 1;
        size_t n = gpt2_num_parameters(&one);
        m->grads_memory = (float*)calloc_check(n, sizeof(float));
        gpt2_point_parameters(&m->grads, &one, m->grads_memory);
    }
    m->B = B;
    m->T = T;
    ActBuffer bufs[NUM_ACT_BUFFERS];
    m->activation_bytes = activation_buffers(m, act_shape(config, B, T, 0, omp_get_max_threads()), bufs);
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) { *bufs[i].slot = cpu_zeroed_touched(bufs[i].bytes, 1, "activations"); }
}

static void gpt2_free(GPT2* m) {
    free(m->params_memory);
    free(m->grads_memory);
    ActBuffer bufs[NUM_ACT_BUFFERS];
    activation_buffers(m, act_shape(&m->config, m->B, m->T, 0, omp_get_max_threads()), bufs);
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) { free(*bufs[i].slot); }
}

// One layer's slices of the saved activations (layer slabs are spaced for the built B, T).
typedef struct {
    const float* x; // the layer's input: the embeddings or the previous layer's output
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *res3;
} LayerActivations;

static LayerActivations layer_activations(const GPT2* m, int l) {
    const Activations* a = &m->acts;
    size_t C = m->config.channels, NH = m->config.num_heads, stride = (size_t)m->B * m->T;
    LayerActivations la = {
        l == 0 ? a->encoded : a->residual3 + (l - 1) * stride * C,
        a->ln1 + l * stride * C, a->ln1_mean + l * stride, a->ln1_rstd + l * stride, a->qkv + l * stride * 3 * C,
        a->atty + l * stride * C, a->att + l * stride * NH * m->T, a->residual2 + l * stride * C,
        a->ln2 + l * stride * C, a->ln2_mean + l * stride, a->ln2_rstd + l * stride, a->fch + l * stride * 4 * C,
        a->fch_gelu + l * stride * 4 * C, a->residual3 + l * stride * C};
    return la;
}

// -op 1's counts (llmc/op_profile.h), from the shapes: the FLOPs of the matmuls and of attention
// (over the unmasked half; backward twice forward's), and bytes with each tensor moved once per
// pass (op_bytes: `tensors` arrays of n floats).
static double op_bytes(size_t n, int tensors) { return 4.0 * (double)n * tensors; }
static double att_flops(int B, int T, int C) { return 2.0 * B * C * (double)T * (T + 1); }
static double att_bytes(int B, int T, int C, int NH) {
    return 4.0 * (4.0 * B * T * C + (double)B * NH * T * (T + 1) / 2.0);
}

// matmul_forward and matmul_backward timed (-op 1): 2 N C OC FLOPs forward, twice that backward.
static void mm_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    double bytes = 4.0 * ((double)N * C + (double)C * OC + (double)N * OC);
    OP_TIMED(OP_MATMUL_FWD, 2.0 * N * C * (double)OC, bytes, matmul_forward(out, inp, weight, bias, N, C, OC));
}

static void mm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, int N, int C, int OC, int accumulate) {
    double bytes = 4.0 * (2.0 * N * C + 3.0 * C * OC + (double)N * OC);
    OP_TIMED(OP_MATMUL_BWD, 4.0 * N * C * (double)OC, bytes,
             matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate));
}

// Forward pass over a (B, T) micro-batch (B, T no larger than built for). With targets,
// returns the mean loss; without, -1 (logits only).
static float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    memcpy(m->acts.tokens, inputs, BT * sizeof(int));
    if (targets) { memcpy(m->acts.targets, targets, BT * sizeof(int)); }
    Activations* a = &m->acts;
    // x = wte[tokens] + wpe[0..T)                                             (B, T, C)
    encoder_forward(a->encoded, inputs, m->params.wte, m->params.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        LayerTensors w = layer_tensors(&m->params, C, l);
        LayerActivations la = layer_activations(m, l);
        // x = x + attn(ln1(x)): qkv = ln1(x) Wqkv^T + b (B, T, 3C), heads mixed back by attproj
        OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 2),
                 layernorm_forward(la.ln1, la.ln1_mean, la.ln1_rstd, la.x, w.ln1w, w.ln1b, (int)BT, C));
        mm_forward(la.qkv, la.ln1, w.qkvw, w.qkvb, (int)BT, C, 3 * C);
        OP_TIMED(OP_ATTENTION_FWD, att_flops(B, T, C), att_bytes(B, T, C, NH),
                 attention_forward(la.atty, la.att, la.qkv, B, T, C, NH));
        mm_forward(la.res2, la.atty, w.attprojw, w.attprojb, (int)BT, C, C);
        residual_add(la.res2, la.x, BT * C);
        // x = x + mlp(ln2(x)): C -> 4C, gelu, 4C -> C
        OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 2),
                 layernorm_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, w.ln2w, w.ln2b, (int)BT, C));
        mm_forward(la.fch, la.ln2, w.fcw, w.fcb, (int)BT, C, 4 * C);
        OP_TIMED(OP_GELU, 0.0, op_bytes(BT * 4 * C, 2), gelu_forward(la.fch_gelu, la.fch, BT * 4 * C));
        mm_forward(la.res3, la.fch_gelu, w.fcprojw, w.fcprojb, (int)BT, 4 * C, C);
        residual_add(la.res3, la.res2, BT * C);
    }
    // logits = lnf(x) wte^T (B, T, Vp): the output projection is the token embedding (tied)
    const float* last = layer_activations(m, L - 1).res3;
    OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 2),
             layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, m->params.lnfw, m->params.lnfb, (int)BT, C));
    mm_forward(a->logits, a->lnf, m->params.wte, NULL, (int)BT, C, Vp);
    if (!targets) { return -1.0f; }
    // loss = mean over positions of -log softmax(logits)[target]
    OP_TIMED(OP_SOFTMAX_XENT, 0.0, op_bytes(BT * Vp, 1),
             crossentropy_forward(a->losses, a->row_max, a->row_sum, a->logits, targets, (int)BT, V, Vp));
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) { sum += a->losses[i]; }
    return (float)(sum / BT);
}

// Called by gpt2_backward when a layer's parameter gradients are complete (layer -1: wte,
// wpe, lnfw, lnfb), so the distributed layer can reduce them while the rest of backward runs.
typedef void (*GradsReadyFn)(void* ctx, GPT2* m, int layer);

// Backward of the last forward (same B, T), accumulating into the parameter gradients (after
// gpt2_zero_grads: writing every element, the tensors' first kernel stores and the rest add).
// dloss: the weight of this micro-batch's mean loss in the step's objective (1 / grad_accum).
static void gpt2_backward(GPT2* m, int B, int T, float dloss, GradsReadyFn ready, void* ctx) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    Activations* a = &m->acts;
    ActivationGrads* g = &m->acts_grad;
    int acc = !m->grads_stale;
    m->grads_stale = 0; // before the hooks, which may mark the gradients stale for the next backward
    // The forward in reverse. dresidual carries d loss / d x for the residual stream x, from the
    // top down; every layer adds its branch's gradient to it.
    OP_TIMED(OP_SOFTMAX_XENT, 0.0, op_bytes(BT * Vp, 2),
             crossentropy_softmax_backward(a->logits, a->row_max, a->row_sum, a->targets, dloss / (float)BT, (int)BT,
                                           V, Vp));
    // logits = lnf(x) wte^T: the classifier's share of wte's gradient, then lnf's backward
    mm_backward(g->dC, m->grads.wte, NULL, a->logits, a->lnf, m->params.wte, (int)BT, C, Vp, acc);
    memset(g->dresidual, 0, BT * C * sizeof(float));
    const float* last = layer_activations(m, L - 1).res3;
    OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 6),
             layernorm_backward(g->dresidual, m->grads.lnfw, m->grads.lnfb, g->dC, last, m->params.lnfw,
                                a->lnf_mean, a->lnf_rstd, (int)BT, C, acc));
    for (int l = L - 1; l >= 0; l--) {
        LayerTensors w = layer_tensors(&m->params, C, l);
        LayerTensors dw = layer_tensors(&m->grads, C, m->grads_one_layer ? 0 : l);
        LayerActivations la = layer_activations(m, l);
        // x = x + mlp(ln2(x)): the residual gradient feeds the MLP projection directly, and the
        // MLP's input gradient is added back onto it by ln2's backward
        mm_backward(g->d4C, dw.fcprojw, dw.fcprojb, g->dresidual, la.fch_gelu, w.fcprojw, (int)BT, 4 * C, C, acc);
        OP_TIMED(OP_GELU, 0.0, op_bytes(BT * 4 * C, 3), gelu_backward(g->d4C, la.fch, g->d4C, BT * 4 * C));
        mm_backward(g->dC, dw.fcw, dw.fcb, g->d4C, la.ln2, w.fcw, (int)BT, C, 4 * C, acc);
        OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 6),
                 layernorm_backward(g->dresidual, dw.ln2w, dw.ln2b, g->dC, la.res2, w.ln2w, la.ln2_mean, la.ln2_rstd,
                                    (int)BT, C, acc));
        // x = x + attn(ln1(x)), the same way
        mm_backward(g->dC, dw.attprojw, dw.attprojb, g->dresidual, la.atty, w.attprojw, (int)BT, C, C, acc);
        OP_TIMED(OP_ATTENTION_BWD, 2.0 * att_flops(B, T, C), 2.0 * att_bytes(B, T, C, NH),
                 attention_backward(g->dqkv, g->dC, la.qkv, la.att, B, T, C, NH));
        mm_backward(g->dC, dw.qkvw, dw.qkvb, g->dqkv, la.ln1, w.qkvw, (int)BT, C, 3 * C, acc);
        OP_TIMED(OP_LAYERNORM, 0.0, op_bytes(BT * C, 6),
                 layernorm_backward(g->dresidual, dw.ln1w, dw.ln1b, g->dC, la.x, w.ln1w, la.ln1_mean, la.ln1_rstd,
                                    (int)BT, C, acc));
        if (ready) { ready(ctx, m, l); }
    }
    // wte already holds the classifier's gradient; wpe rows from T on get nothing
    if (!acc) { memset(m->grads.wpe, 0, (size_t)c->max_seq_len * C * sizeof(float)); }
    encoder_backward(m->grads.wte, m->grads.wpe, g->dresidual, m->acts.tokens, B, T, C);
    if (ready) { ready(ctx, m, -1); }
}

// Zeroes the gradients lazily: the next backward overwrites them (no pass over the memory).
static void gpt2_zero_grads(GPT2* m) { m->grads_stale = 1; }

// ----------------------------------------------------------------------------
// data parallelism (docs/design.md sections 3 and 4)

// A collective timed as communication (-op 1), with the bytes it sent (untimed on the -lo
// communication thread: the profile is the trainer thread's).
#define COMM_TIMED(call)                                                                          \
    do {                                                                                          \
        if (comm_on_worker) {                                                                     \
            call;                                                                                 \
            break;                                                                                \
        }                                                                                         \
        size_t comm_sent0_ = comm_bytes_sent;                                                     \
        OP_TIMED(OP_COMM, 0.0, (double)(comm_bytes_sent - comm_sent0_), call);                    \
    } while (0)

// The buffers of one compressed or fp32 replica exchange (outer_exchange_buffers' sizes).
typedef struct {
    float* tmp;      // a slice, fp32
    uint8_t* sent;   // R encoded slices (or sums)
    uint8_t* got;    // R encoded slices received
    float* packed;   // error feedback: the fragment's residual packed like its messages, else NULL
} ExchangeBuffers;

// Allocates wb with the sizes b; returns their total bytes.
static size_t exchange_buffers_alloc(ExchangeBuffers* wb, OuterExchangeBuffers b) {
    wb->tmp = (float*)malloc_check(b.tmp);
    wb->sent = b.sent ? (uint8_t*)malloc_check(b.sent) : NULL;
    wb->got = b.got ? (uint8_t*)malloc_check(b.got) : NULL;
    wb->packed = b.packed ? (float*)malloc_check(b.packed) : NULL;
    return b.tmp + b.sent + b.got + b.packed;
}

static void exchange_buffers_free(ExchangeBuffers* wb) {
    free(wb->tmp);
    free(wb->sent);
    free(wb->got);
    free(wb->packed);
}

struct DataParallel;

// -ls: a run of owned elements of one fragment: parameters [param, +count) are owned elements
// [owned, +count) and places [pos, +count) of the fragment's packed message.
typedef struct {
    size_t param, owned, pos, count;
    int fragment;
} FragmentRun;

// -lo: one fragment's exchange handed to the communication thread.
typedef struct {
    struct DataParallel* dp;
    OuterConfig c;   // its config (c.fragment), as at its start
    float* msg;      // in: the fragment's packed messages; out: their sums over the replicas
    size_t expect;   // the bytes it sends (counted by the trainer at its start)
} PendingExchange;

typedef struct DataParallel {
    Mesh mesh;
    CommGroup world, shard, replica;
    CommGroup replica_async; // -lo: the communication thread's duplicate of the replica communicator
    ShardLayout layout;
    int zero_stage;
    int grad_accum;
    int last_micro_step;  // set by the training loop: 1 during the step's last backward
    int replica_reduce;   // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    float* outer;         // -ls: outer parameters and momentum (owned elements), else NULL
    float* outer_m;
    float* residual;      // -rq with error feedback: what encoding lost (owned elements, padded), else NULL
    OuterConfig grad_wire; // -ls 0: how the gradients cross the replicas (outer_compressed: -rq, -rk)
    OwnedSpan* spans;     // this rank's owned elements in the parameters (llmc/outer_sync.h)
    int num_spans;
    size_t owned;         // elements of m and v on this rank
    int* frag_of;         // -ls: each owned element's fragment (-lf; all 0 without it), else NULL
    size_t* frag_pos;     // -ls: an owned element's place among its fragment's, in owned order
    size_t* frag_count;   // -ls: owned elements (padding slots included) of each fragment
    FragmentRun* runs;    // -ls: the owned spans cut where the fragment changes, in owned order
    int num_runs;
    float* pend_sum;      // -lo: each fragment's summed messages while in flight (packed, padded to R)
    size_t* pend_off;     // -lo: where fragment f's starts in pend_sum
    float* pend_snap;     // -lo: the owned local values when their fragment's exchange started
    PendingExchange* pend_jobs; // -lo: each fragment's job on the communication thread
    CommWorker worker;    // -lo: the communication thread (llmc/comm_thread.h)
    ExchangeBuffers wbuf; // -lo: its exchange buffers, for the largest fragment
    OuterExchangeBuffers wbuf_bytes; // their sizes
    ExchangeBuffers sbuf; // -rq/-rk: the trainer thread's exchange buffers, kept from start-up
    size_t sbuf_bytes;    // their total
    float* shard_grads;   // stages 1, 2: this rank's reduced gradient slices (padded to dp_replicate)
    float* opt_m;
    float* opt_v;
    float* scratch;       // a padded unit, or the stage-0 all-reduce slice
    float* ring_tmp;      // one slice
    float** unit_grads;   // where each unit's full gradient lives
} DataParallel;

static void dp_init(DataParallel* dp, GPT2* m, int zero_stage, int grad_accum, int dp_shard, int outer_state) {
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    mesh_init(&dp->mesh, world, rank, dp_shard);
    comm_group_from(&dp->world, MPI_COMM_WORLD);
    MPI_Comm shard_comm, replica_comm;
    MPI_Comm_split(MPI_COMM_WORLD, dp->mesh.replicate_idx, dp->mesh.shard_idx, &shard_comm);
    MPI_Comm_split(MPI_COMM_WORLD, dp->mesh.shard_idx, dp->mesh.replicate_idx, &replica_comm);
    comm_group_from(&dp->shard, shard_comm);
    comm_group_from(&dp->replica, replica_comm);
    dp->zero_stage = zero_stage;
    dp->grad_accum = grad_accum;
    dp->last_micro_step = 0;
    dp->replica_reduce = 1;
    shard_layout_init(&dp->layout, &m->config, dp->mesh.dp_shard);
    dp->owned = zero_stage == 0 ? m->num_parameters : dp->layout.shard_elements;
    dp->opt_m = (float*)cpu_zeroed_touched(dp->owned, sizeof(float), "AdamW's m");
    dp->opt_v = (float*)cpu_zeroed_touched(dp->owned, sizeof(float), "AdamW's v");
    dp->outer = outer_state ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    dp->outer_m = outer_state ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    dp->residual = NULL; // dp_init_residual
    dp->sbuf = (ExchangeBuffers){NULL, NULL, NULL, NULL}; // dp_init_wire_buffers
    dp->sbuf_bytes = 0;
    dp->frag_of = NULL;  // dp_init_fragments
    dp->frag_pos = NULL;
    dp->runs = NULL;
    dp->num_runs = 0;
    dp->frag_count = NULL;
    dp->pend_sum = NULL;  // dp_init_fragments
    dp->pend_off = NULL;
    dp->pend_snap = NULL;
    dp->pend_jobs = NULL; // dp_init_overlap
    memset(&dp->grad_wire, 0, sizeof(dp->grad_wire));
    dp->spans = (OwnedSpan*)malloc_check(dp->layout.num_units * sizeof(OwnedSpan));
    dp->num_spans = owned_spans(&dp->layout, zero_stage, dp->mesh.shard_idx, m->num_parameters, dp->spans);
    size_t padded_shard = round_up(dp->layout.shard_elements, dp->mesh.dp_replicate);
    dp->shard_grads = zero_stage == 0 ? NULL : (float*)calloc_check(padded_shard, sizeof(float));
    // scratch: a padded unit (stages 1, 2) or one slice of the stage-0 all-reduce (over the shard
    // group with -ls, or the outer sync's over the replicas); ring_tmp: the largest slice a ring
    // step receives
    int groups = dp->mesh.dp_shard < dp->mesh.dp_replicate ? dp->mesh.dp_shard : dp->mesh.dp_replicate;
    size_t scratch = zero_stage == 0 ? ceil_div(m->num_parameters, outer_state ? groups : world) : dp->layout.max_padded;
    size_t tmp = zero_stage == 0 ? 1 : dp->layout.max_padded / dp->mesh.dp_shard;
    if (zero_stage != 0 && padded_shard / dp->mesh.dp_replicate > tmp) { tmp = padded_shard / dp->mesh.dp_replicate; }
    dp->scratch = (float*)calloc_check(scratch, sizeof(float));
    dp->ring_tmp = (float*)calloc_check(tmp, sizeof(float));
    dp->unit_grads = (float**)malloc_check(dp->layout.num_units * sizeof(float*));
    float* grad_tensors[NUM_PARAMETER_TENSORS];
    memcpy(grad_tensors, &m->grads, sizeof(grad_tensors));
    for (int u = 0; u < dp->layout.num_units; u++) {
        // in stage 2 the one-layer slot serves every layer
        const ShardUnit* unit = &dp->layout.units[u];
        size_t layer_offset = (m->grads_one_layer || unit->layer < 0) ? 0 : unit->layer * unit->size;
        dp->unit_grads[u] = grad_tensors[unit->tensor] + layer_offset;
    }
}

// -rq with error feedback: the residual, zero, one per owned element (padded to the replicas).
static void dp_init_residual(DataParallel* dp) {
    dp->residual = (float*)calloc_check(round_up(dp->owned, dp->mesh.dp_replicate), sizeof(float));
}

// -ls 0 with -rq/-rk in ZeRO 0: the shard group's all-reduce of the gradient needs a larger slice.
static void dp_init_gradient_wire(DataParallel* dp, size_t num_parameters) {
    if (dp->zero_stage != 0) { return; }
    free(dp->scratch);
    dp->scratch = (float*)calloc_check(ceil_div(num_parameters, dp->mesh.dp_shard), sizeof(float));
}

// -rq/-rk: the trainer thread's exchange buffers (in the format after -rqs, o), so that no exchange
// allocates: for the largest fragment with -ls, for the owned gradient (padded to the replicas;
// its residual is not packed) with -ls 0.
static void dp_init_wire_buffers(DataParallel* dp, const OuterConfig* o, int outer) {
    int R = dp->replica.size;
    OuterConfig late = outer_config_at(o, o->wire_start + 1);
    size_t largest = round_up(dp->owned, R);
    if (outer) {
        largest = 0;
        for (int f = 0; f < outer_num_fragments(o); f++) {
            largest = dp->frag_count[f] > largest ? dp->frag_count[f] : largest;
        }
    }
    OuterExchangeBuffers b = outer_exchange_buffers(&late, R, largest);
    if (!outer) { b.packed = 0; }
    dp->sbuf_bytes = exchange_buffers_alloc(&dp->sbuf, b);
}

// Reduce-scatters one unit's gradient over the shard group and adds this rank's slice of the
// sum into shard_grads.
static void dp_reduce_scatter_unit(DataParallel* dp, int u) {
    const ShardUnit* unit = &dp->layout.units[u];
    float* buf = dp->scratch;
    memcpy(buf, dp->unit_grads[u], unit->size * sizeof(float));
    memset(buf + unit->size, 0, (unit->slice * dp->shard.size - unit->size) * sizeof(float));
    COMM_TIMED(ring_reduce_scatter(&dp->shard, buf, unit->slice, dp->ring_tmp));
    float* mine = buf + (size_t)dp->shard.rank * unit->slice;
    float* acc = dp->shard_grads + unit->shard_offset;
    for (size_t i = 0; i < unit->slice; i++) { acc[i] += mine[i]; }
}

// Backward hook: stage 1 reduce-scatters a finished layer on the last micro-step, stage 2 on
// every micro-step. Stage 2 then marks its gradients zero for the next micro-step, so every
// backward writes (not adds) each layer into the one-layer slot.
static void dp_grads_ready(void* ctx, GPT2* m, int layer) {
    DataParallel* dp = (DataParallel*)ctx;
    if (!zero_reduces_in_micro_step(dp->zero_stage, dp->last_micro_step)) { return; }
    int first, count;
    layer_units(&dp->layout, layer, &first, &count);
    for (int u = first; u < first + count; u++) { dp_reduce_scatter_unit(dp, u); }
    if (dp->zero_stage == 2 && layer < 0) { gpt2_zero_grads(m); }
}

static void dp_replica_sum_wire(CommGroup* g, float* msg, size_t slice, const OuterConfig* c, float* residual,
                                const ExchangeBuffers* wb);

// -ls 0 with -rq/-rk: the gradient (ZeRO 0: all of it after the shard group's all-reduce; 1, 2:
// the shard accumulator) plus the residual, summed over the replicas by dp_replica_sum_wire.
static void dp_replica_sum_gradient(DataParallel* dp, GPT2* m) {
    int R = dp->replica.size;
    float* g = dp->zero_stage == 0 ? m->grads_memory : dp->shard_grads;
    if (dp->zero_stage == 0) {
        COMM_TIMED(ring_all_reduce(&dp->shard, g, round_up(m->num_parameters, dp->shard.size), dp->scratch));
    }
    size_t padded = round_up(dp->owned, R);
    memset(g + dp->owned, 0, (padded - dp->owned) * sizeof(float));
    if (dp->residual) {
        for (size_t i = 0; i < dp->owned; i++) { g[i] += dp->residual[i]; }
    }
    const ExchangeBuffers* wb = dp->sbuf_bytes ? &dp->sbuf : NULL;
    dp_replica_sum_wire(&dp->replica, g, padded / R, &dp->grad_wire, dp->residual, wb);
}

// After the last micro-step: finish the reduction across ranks and average over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients).
static void dp_finish_gradients(DataParallel* dp, GPT2* m) {
    CommGroup* group = dp->replica_reduce ? &dp->world : &dp->shard;
    if (group->size == 1) { return; } // nothing to reduce, and the average is the gradient itself
    float inv = 1.0f / (float)group->size;
    if (dp->replica_reduce && dp->replica.size > 1 && outer_compressed(&dp->grad_wire)) {
        dp_replica_sum_gradient(dp, m);
        float* g = dp->zero_stage == 0 ? m->grads_memory : dp->shard_grads;
        for (size_t i = 0; i < dp->owned; i++) { g[i] *= inv; }
        return;
    }
    if (dp->zero_stage == 0) {
        size_t padded = round_up(m->num_parameters, group->size);
        COMM_TIMED(ring_all_reduce(group, m->grads_memory, padded, dp->scratch));
        for (size_t i = 0; i < m->num_parameters; i++) { m->grads_memory[i] *= inv; }
    } else {
        if (dp->replica_reduce) {
            size_t padded = round_up(dp->layout.shard_elements, dp->replica.size);
            COMM_TIMED(ring_all_reduce(&dp->replica, dp->shard_grads, padded, dp->ring_tmp));
        }
        for (size_t i = 0; i < dp->layout.shard_elements; i++) { dp->shard_grads[i] *= inv; }
    }
}

// Sum of squares of x[0..n) in double, in 64 fixed chunks: the same result for any thread count.
static double sum_of_squares(const float* x, size_t n) {
    double parts[64];
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < 64; p++) {
        size_t i0 = n * p / 64, i1 = n * (p + 1) / 64;
        double s = 0.0;
        #pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) { s += (double)x[i] * x[i]; }
        parts[p] = s;
    }
    double total = 0.0;
    for (int p = 0; p < 64; p++) { total += parts[p]; }
    return total;
}

// The norm of the full averaged gradient (slices summed over the shard group only).
static float dp_grad_norm(DataParallel* dp, GPT2* m) {
    double sq;
    if (dp->zero_stage == 0) {
        size_t n = m->num_parameters;
        OP_TIMED(OP_GRAD_NORM, 0.0, op_bytes(n, 1), sq = sum_of_squares(m->grads_memory, n));
        return (float)sqrt(sq);
    }
    size_t n = dp->layout.shard_elements;
    OP_TIMED(OP_GRAD_NORM, 0.0, op_bytes(n, 1), sq = sum_of_squares(dp->shard_grads, n));
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->shard, (float)sq));
    return sqrtf(total);
}

static void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float grad_scale,
                         float weight_decay, const AdamWConfig* h, float bias1, float bias2) {
    // the hyperparameters in locals: stores through the float pointers cannot alias them, so the
    // loop vectorises
    const float beta1 = h->beta1, beta2 = h->beta2, lr = h->lr, eps = h->eps;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bias1, vhat = vi / bias2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
    }
}

// Stages 1, 2: unit u's parameters all-gathered over the shard group from each rank's slice.
static void dp_all_gather_unit(DataParallel* dp, GPT2* m, int u) {
    const ShardUnit* unit = &dp->layout.units[u];
    size_t first;
    size_t count = unit_owned(unit, dp->shard.rank, &first);
    float* p = m->params_memory + unit->offset;
    float* buf = dp->scratch;
    memset(buf + first, 0, unit->slice * sizeof(float));
    memcpy(buf + first, p + first, count * sizeof(float));
    COMM_TIMED(ring_all_gather(&dp->shard, buf, unit->slice));
    memcpy(p, buf, unit->size * sizeof(float));
}

// AdamW (t = 1-based step) on what this rank owns, then (stages 1, 2) the parameter all-gather.
static void dp_optimizer_step(DataParallel* dp, GPT2* m, const AdamWConfig* h, float grad_scale, int t) {
    float bias1, bias2;
    adamw_bias_corrections(h, t, &bias1, &bias2);
    if (dp->zero_stage == 0) {
        size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
        gpt2_parameter_sizes(&m->config, sizes);
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            float wd = adamw_weight_decay(h, i);
            OP_TIMED(OP_ADAMW, 0.0, op_bytes(sizes[i], 7),
                     adamw_update(m->params_memory + off, m->grads_memory + off, dp->opt_m + off, dp->opt_v + off,
                                  sizes[i], grad_scale, wd, h, bias1, bias2));
            off += sizes[i];
        }
        return;
    }
    int s = dp->shard.rank;
    for (int u = 0; u < dp->layout.num_units; u++) {
        const ShardUnit* unit = &dp->layout.units[u];
        size_t first;
        size_t count = unit_owned(unit, s, &first);
        float wd = adamw_weight_decay(h, unit->tensor);
        float* p = m->params_memory + unit->offset;
        OP_TIMED(OP_ADAMW, 0.0, op_bytes(count, 7),
                 adamw_update(p + first, dp->shard_grads + unit->shard_offset, dp->opt_m + unit->shard_offset,
                              dp->opt_v + unit->shard_offset, count, grad_scale, wd, h, bias1, bias2));
        dp_all_gather_unit(dp, m, u);
    }
}

// ----------------------------------------------------------------------------
// -ls: the outer sync of the replicas (llmc/outer_sync.h) on this rank's owned elements

// dst (owned order) = the owned parameters.
static void dp_owned_params(const DataParallel* dp, const GPT2* m, float* dst) {
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        memcpy(dst + sp->owned_offset, m->params_memory + sp->param_offset, sp->count * sizeof(float));
    }
}

// The owned parameters = src (owned order), then (stages 1, 2) every unit all-gathered in the
// shard group, so that the replica's ranks hold the same full parameters again.
static void dp_set_owned_params(DataParallel* dp, GPT2* m, const float* src) {
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        memcpy(m->params_memory + sp->param_offset, src + sp->owned_offset, sp->count * sizeof(float));
    }
    if (dp->zero_stage == 0) { return; }
    for (int u = 0; u < dp->layout.num_units; u++) { dp_all_gather_unit(dp, m, u); }
}

static void dp_outer_init(DataParallel* dp, GPT2* m) {
    memset(dp->outer, 0, dp->owned * sizeof(float));
    memset(dp->outer_m, 0, dp->owned * sizeof(float));
    dp_owned_params(dp, m, dp->outer);
}

// -rq/-rk: msg (R slices of `slice` elements: this rank's messages) summed over the replicas through
// the wire format of c (llmc/wire_format.h). Every slice is encoded (the residual keeps what that lost,
// where given) and slice j sent to replica j; each replica decodes the R encodings of its own
// slice and sums them in fp32 in replica order 0..R-1, encodes the sum and sends it to every
// replica; msg then holds the decoded sums, the same on every replica.
// Runs over group g (the replicas: the trainer's communicator, or the communication thread's) in the
// buffers wb (NULL: allocated here for the call).
static void dp_replica_sum_wire(CommGroup* g, float* msg, size_t slice, const OuterConfig* c, float* residual,
                                const ExchangeBuffers* wb) {
    int R = g->size, me = g->rank;
    WireSpec mine = outer_wire_spec(c, 0, R), owner = outer_wire_spec(c, 1, R);
    size_t sb = wire_spec_bytes(&mine, slice), ob = wire_spec_bytes(&owner, slice);
    uint8_t* sent = wb ? wb->sent : (uint8_t*)malloc_check((size_t)R * (sb > ob ? sb : ob));
    uint8_t* got = wb ? wb->got : (uint8_t*)malloc_check((size_t)R * sb);
    float* tmp = wb ? wb->tmp : (float*)malloc_check(slice * sizeof(float));
    for (int j = 0; j < R; j++) {
        wire_encode_feedback(&mine, msg + j * slice, slice, sent + j * sb, residual ? residual + j * slice : NULL,
                             tmp);
    }
    memcpy(got + me * sb, sent + me * sb, sb);
    for (int k = 1; k < R; k++) {
        int to = (me + k) % R, from = (me + R - k) % R;
        COMM_TIMED(pair_exchange_bytes(g, sent + to * sb, to, got + from * sb, from, sb));
    }
    float* sum = msg + me * slice;
    wire_spec_decode(&mine, got, slice, sum);
    for (int r = 1; r < R; r++) {
        wire_spec_decode(&mine, got + r * sb, slice, tmp);
        for (size_t i = 0; i < slice; i++) { sum[i] += tmp[i]; }
    }
    wire_spec_encode(&owner, sum, slice, sent + me * ob);
    for (int k = 1; k < R; k++) {
        int to = (me + k) % R, from = (me + R - k) % R;
        COMM_TIMED(pair_exchange_bytes(g, sent + me * ob, to, sent + from * ob, from, ob));
    }
    for (int j = 0; j < R; j++) { wire_spec_decode(&owner, sent + j * ob, slice, msg + j * slice); }
    if (wb) { return; }
    free(sent);
    free(got);
    free(tmp);
}

// -lf F: each owned element's fragment (outer_unit_fragment of its unit; stages 1, 2: the unit's
// whole slice, padding included), its place in its fragment's message and each fragment's count.
static void dp_init_fragments(DataParallel* dp, int F) {
    dp->frag_of = (int*)calloc_check(dp->owned, sizeof(int));
    dp->frag_pos = (size_t*)calloc_check(dp->owned, sizeof(size_t));
    dp->frag_count = (size_t*)calloc_check(F, sizeof(size_t));
    int L = dp->layout.num_layers;
    for (int u = 0; u < dp->layout.num_units; u++) {
        const ShardUnit* unit = &dp->layout.units[u];
        size_t first = dp->zero_stage == 0 ? unit->offset : unit->shard_offset;
        size_t n = dp->zero_stage == 0 ? unit->size : unit->slice;
        for (size_t i = 0; i < n; i++) { dp->frag_of[first + i] = outer_unit_fragment(unit, L, F); }
    }
    for (size_t o = 0; o < dp->owned; o++) { dp->frag_pos[o] = dp->frag_count[dp->frag_of[o]]++; }
    dp->runs = (FragmentRun*)malloc_check((dp->num_spans + dp->layout.num_units) * sizeof(FragmentRun));
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        for (size_t j = 0, k; j < sp->count; j = k) {
            size_t o = sp->owned_offset + j;
            for (k = j; k < sp->count && dp->frag_of[sp->owned_offset + k] == dp->frag_of[o]; k++) {}
            FragmentRun run = {sp->param_offset + j, o, dp->frag_pos[o], k - j, dp->frag_of[o]};
            dp->runs[dp->num_runs++] = run;
        }
    }
    dp->pend_off = (size_t*)calloc_check(F + 1, sizeof(size_t));
    for (int f = 0; f < F; f++) {
        dp->pend_off[f + 1] = dp->pend_off[f] + round_up(dp->frag_count[f], dp->replica.size);
    }
}

static size_t dp_fragment_exchange_job(void* arg);

// -lo: the buffers of the exchanges in flight (a summed message and a local snapshot per element),
// and the communication thread with its own replica communicator and exchange buffers, sized for
// the largest fragment in the format after -rqs (o). The thread calls MPI while the trainer does:
// the library must provide MPI_THREAD_MULTIPLE.
static void dp_init_overlap(DataParallel* dp, const OuterConfig* o) {
    int F = outer_num_fragments(o), R = dp->replica.size, level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (R > 1 && level < MPI_THREAD_MULTIPLE) {
        fail("-lo %d: the MPI library provides thread level %d, the communication thread needs MPI_THREAD_MULTIPLE "
             "(%d); use -lo 0 or an MPI built with thread support", o->overlap, level, MPI_THREAD_MULTIPLE);
    }
    dp->pend_sum = (float*)calloc_check(dp->pend_off[F], sizeof(float));
    dp->pend_snap = (float*)calloc_check(dp->owned, sizeof(float));
    dp->pend_jobs = (PendingExchange*)calloc_check(F, sizeof(PendingExchange));
    MPI_Comm dup;
    MPI_Comm_dup(dp->replica.comm, &dup);
    comm_group_from(&dp->replica_async, dup);
    size_t largest = 0;
    for (int f = 0; f < F; f++) { largest = dp->frag_count[f] > largest ? dp->frag_count[f] : largest; }
    OuterConfig late = outer_config_at(o, o->wire_start + 1);
    dp->wbuf_bytes = outer_exchange_buffers(&late, R, largest);
    exchange_buffers_alloc(&dp->wbuf, dp->wbuf_bytes);
    comm_worker_start(&dp->worker, F, dp_fragment_exchange_job, o->link_mbps);
}

// -lo: the memory the exchanges in flight keep per rank (the start-up report's memory line).
static size_t dp_overlap_bytes(const DataParallel* dp, int F, size_t* snap, size_t* held, size_t* wire) {
    *snap = dp->pend_snap ? dp->owned * 4 : 0;
    *held = dp->pend_sum ? dp->pend_off[F] * 4 : 0;
    const OuterExchangeBuffers* b = &dp->wbuf_bytes;
    *wire = dp->pend_sum ? b->tmp + b->sent + b->got + b->packed : 0;
    return *snap + *held + *wire;
}

// -rb: returns when `t0` + bytes / (mbps * 1e6) seconds have passed (at once when mbps is 0).
static double link_ready_time(double t0, size_t bytes, float mbps) {
    return mbps > 0.0f ? t0 + (double)bytes / ((double)mbps * 1e6) : 0.0;
}
// -rb: seconds the trainer thread was held by replica exchanges before / after the last step: a
// blocking exchange whole (its packing, its sums and the modelled link), an -lo one while the
// trainer waited for it to land
static double link_waited[2];
static void wait_until(double when) {
    for (double now = now_seconds(); now < when; now = now_seconds()) {
        double s = when - now;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

// The messages of fragment f (outer_message: the pseudo-gradient outer - local, plus the residual
// with -rq and error feedback) packed in owned order into msg (zeroed to `padded` first).
static void dp_fragment_messages(const DataParallel* dp, const GPT2* m, int f, int plain, const float* res,
                                 float* msg, size_t padded) {
    memset(msg, 0, padded * sizeof(float));
    for (int i = 0; i < dp->num_runs; i++) {
        const FragmentRun* run = &dp->runs[i];
        if (run->fragment != f) { continue; }
        const float* local = m->params_memory + run->param;
        const float* outer = dp->outer + run->owned;
        float* out = msg + run->pos;
        for (size_t j = 0; j < run->count; j++) {
            float d = outer_message(outer[j], local[j], plain);
            if (res) { d += res[run->owned + j]; }
            out[j] = d;
        }
    }
}

// Fragment f's residual packed like its messages (into packed, `padded` long), or (back 1) unpacked.
static void dp_fragment_residual(DataParallel* dp, int f, float* packed, size_t padded, int back) {
    if (!back) { memset(packed, 0, padded * sizeof(float)); }
    for (size_t o = 0; o < dp->owned; o++) {
        if (dp->frag_of[o] != f) { continue; }
        if (back) {
            dp->residual[o] = packed[dp->frag_pos[o]];
        } else {
            packed[dp->frag_pos[o]] = dp->residual[o];
        }
    }
}

// Fragment c->fragment's packed messages msg (padded to the replicas) summed over group g (fp32:
// one ring all-reduce; -rq: dp_replica_sum_wire, the residual updated) in buffers wb (NULL: the
// trainer's scratch, or allocated for the call). Only fragment f's residual is touched.
static void dp_fragment_sum(DataParallel* dp, CommGroup* g, const OuterConfig* c, float* msg, const ExchangeBuffers* wb) {
    int R = g->size, f = c->fragment;
    size_t padded = round_up(dp->frag_count[f], R);
    if (!outer_compressed(c)) {
        float* tmp = wb ? wb->tmp : dp->zero_stage == 0 ? dp->scratch : dp->ring_tmp;
        COMM_TIMED(ring_all_reduce(g, msg, padded, tmp));
        return;
    }
    float* packed = !dp->residual ? NULL : wb ? wb->packed : (float*)malloc_check(padded * sizeof(float));
    if (packed) { dp_fragment_residual(dp, f, packed, padded, 0); }
    dp_replica_sum_wire(g, msg, padded / R, c, packed, wb);
    if (packed) { dp_fragment_residual(dp, f, packed, padded, 1); }
    if (!wb) { free(packed); }
}

// Fragment c->fragment's exchange on the trainer thread: its messages packed into msg, summed.
// Returns when the modelled link (-rb) would have carried its bytes (0 without -rb).
static double dp_fragment_exchange(DataParallel* dp, GPT2* m, const OuterConfig* c, float* msg) {
    int f = c->fragment;
    const float* res = outer_compressed(c) ? dp->residual : NULL;
    double t0 = now_seconds();
    size_t sent0 = comm_bytes_sent;
    dp_fragment_messages(dp, m, f, outer_plain_average(c), res, msg, round_up(dp->frag_count[f], dp->replica.size));
    dp_fragment_sum(dp, &dp->replica, c, msg, dp->sbuf_bytes ? &dp->sbuf : NULL); // fp32: the trainer's scratch
    return link_ready_time(t0, comm_bytes_sent - sent0, c->link_mbps);
}

// -lo, on the communication thread: a PendingExchange's sum over the replicas through the thread's
// communicator, its tags the fragment's (a rank that issued the fragments in another order waits
// for a tag that never comes: the watchdog's span ends the job). Returns the bytes it sent, which
// must be those the trainer counted when it started it.
static size_t dp_fragment_exchange_job(void* arg) {
    PendingExchange* job = (PendingExchange*)arg;
    DataParallel* dp = job->dp;
    CommGroup g = dp->replica_async;
    g.tag = 16 * (job->c.fragment + 1);
    size_t sent0 = comm_bytes_sent; // this thread's own count
    dp_fragment_sum(dp, &g, &job->c, job->msg, &dp->wbuf);
    size_t sent = comm_bytes_sent - sent0;
    if (sent != job->expect) {
        fail("-lo: fragment %d's exchange sent %zu bytes, the closed form %zu (a bug)", job->c.fragment, sent,
             job->expect);
    }
    return sent;
}

// The outer step of fragment c->fragment with its summed messages: outer_update on each owned
// element, local = outer (snap NULL) or outer_merge with the local value snap held at the exchange's
// start (-lo), then the all-gather of the fragment's units in the replica. Returns the fragment's
// mean pseudo-gradient's squared norm over the whole replica.
static float dp_fragment_apply(DataParallel* dp, GPT2* m, const OuterConfig* c, const float* sum, const float* snap) {
    int R = dp->replica.size, plain = outer_plain_average(c), f = c->fragment, F = outer_num_fragments(c);
    float inv_R = 1.0f / (float)R;
    double sq = 0.0;
    for (int i = 0; i < dp->num_runs; i++) {
        const FragmentRun* run = &dp->runs[i];
        if (run->fragment != f) { continue; }
        float* local = m->params_memory + run->param;
        for (size_t j = 0; j < run->count; j++) {
            size_t o = run->owned + j;
            float delta;
            float now = outer_update(&dp->outer[o], &dp->outer_m[o], sum[run->pos + j], inv_R, c->lr, c->momentum,
                                     plain, &delta);
            local[j] = snap ? outer_merge(now, local[j], snap[o]) : now;
            sq += (double)delta * delta;
        }
    }
    if (dp->zero_stage == 0) { return (float)sq; }
    for (int u = 0; u < dp->layout.num_units; u++) {
        if (outer_unit_fragment(&dp->layout.units[u], dp->layout.num_layers, F) == f) { dp_all_gather_unit(dp, m, u); }
    }
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->shard, (float)sq));
    return total;
}

// -lo: fragment f's exchange starts: its owned local values kept, its messages packed into its
// held buffer (the residual added), and the sum handed to the communication thread, behind the
// exchanges started before it. Its bytes count in the step that starts it.
static void dp_fragment_start(DataParallel* dp, GPT2* m, const OuterConfig* c) {
    int f = c->fragment, R = dp->replica.size;
    for (int i = 0; i < dp->num_runs; i++) { // fragment f's owned local values (others may be in flight)
        const FragmentRun* run = &dp->runs[i];
        if (run->fragment != f) { continue; }
        memcpy(dp->pend_snap + run->owned, m->params_memory + run->param, run->count * sizeof(float));
    }
    PendingExchange* job = &dp->pend_jobs[f];
    job->dp = dp;
    job->c = *c;
    job->msg = dp->pend_sum + dp->pend_off[f];
    job->expect = outer_wire_bytes(dp->frag_count[f], c, R);
    const float* res = outer_compressed(c) ? dp->residual : NULL;
    dp_fragment_messages(dp, m, f, outer_plain_average(c), res, job->msg, round_up(dp->frag_count[f], R));
    comm_bytes_sent += job->expect;
    comm_worker_submit(&dp->worker, f, job);
}

// -lo: every exchange in flight has landed (their sums held, not applied): before a checkpoint.
static void dp_overlap_drain(DataParallel* dp) {
    if (dp->pend_jobs) { comm_worker_drain(&dp->worker); }
}

// The outer step of fragment c->fragment (-lf; the whole model without it) in phase c->phase:
// OUTER_BLOCKING exchanges in the idle gradient buffer on this thread, waits out the modelled
// link (-rb) and applies at once; OUTER_START (-lo) hands the exchange to the communication thread
// (dp_fragment_start); OUTER_FINISH waits for it (unless it landed before a checkpoint this run
// resumed from) and applies the held sum. With one fragment the packing is the identity. Returns
// the applied squared norm (0 for OUTER_START).
static float dp_outer_step(DataParallel* dp, GPT2* m, const OuterConfig* c) {
    int f = c->fragment;
    if (c->phase == OUTER_BLOCKING) {
        float* msg = dp->zero_stage == 0 ? m->grads_memory : dp->shard_grads;
        double t0 = now_seconds();
        wait_until(dp_fragment_exchange(dp, m, c, msg));
        link_waited[c->last] += now_seconds() - t0;
        return dp_fragment_apply(dp, m, c, msg, NULL);
    }
    if (c->phase == OUTER_START) {
        dp_fragment_start(dp, m, c);
        return 0.0f;
    }
    if (comm_worker_has(&dp->worker, f)) { link_waited[c->last] += comm_worker_wait(&dp->worker, f); }
    return dp_fragment_apply(dp, m, c, dp->pend_sum + dp->pend_off[f], dp->pend_snap);
}

// The CRC-32C of the owned outer (outer 1) or local parameters, all-gathered over the replicas.
static void dp_replica_crcs(DataParallel* dp, GPT2* m, int outer, uint32_t* crcs) {
    uint32_t crc = 0;
    if (outer) {
        crc = crc32c_update(0, dp->outer, dp->owned * sizeof(float));
    } else {
        for (int i = 0; i < dp->num_spans; i++) {
            const OwnedSpan* sp = &dp->spans[i];
            crc = crc32c_update(crc, m->params_memory + sp->param_offset, sp->count * sizeof(float));
        }
    }
    int R = dp->replica.size;
    float* all = (float*)calloc_check(2 * (size_t)R, sizeof(float));
    crc_to_floats(crc, all + 2 * dp->replica.rank);
    COMM_TIMED(ring_all_gather(&dp->replica, all, 2));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(all + 2 * r); }
    free(all);
}

static void dp_zero_shard_grads(DataParallel* dp) {
    if (dp->shard_grads) {
        memset(dp->shard_grads, 0, round_up(dp->layout.shard_elements, dp->replica.size) * sizeof(float));
    }
}

static void dp_free(DataParallel* dp) {
    free(dp->outer);
    free(dp->outer_m);
    free(dp->frag_of);
    free(dp->frag_pos);
    free(dp->runs);
    free(dp->frag_count);
    free(dp->pend_sum);
    free(dp->pend_off);
    free(dp->pend_snap);
    if (dp->pend_jobs) {
        comm_worker_stop(&dp->worker);
        MPI_Comm_free(&dp->replica_async.comm);
        exchange_buffers_free(&dp->wbuf);
    }
    exchange_buffers_free(&dp->sbuf);
    free(dp->pend_jobs);
    free(dp->residual);
    free(dp->spans);
    free(dp->opt_m);
    free(dp->opt_v);
    free(dp->shard_grads);
    free(dp->scratch);
    free(dp->ring_tmp);
    free(dp->unit_grads);
    shard_layout_free(&dp->layout);
}

// ----------------------------------------------------------------------------
// training: the CPU trainer's side of llmc/train_loop.h

// The MFU's peak unless -pk says otherwise: measured at start-up (llmc/cpu_peak.h), every rank at
// once with its threads (ranks on one machine share it), the mean over the ranks, to 3 digits.
#define CPU_PEAK_ITERS 2000000L // about 3 ms a repetition at 250 GFLOP/s per thread
#define CPU_PEAK_REPS 5

static double cpu_measured_peak_tflops(char* source, size_t len) {
    MPI_Barrier(MPI_COMM_WORLD);
    double mine = cpu_peak_measure(CPU_PEAK_ITERS, CPU_PEAK_REPS) / 1e12, sum = mine;
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) { MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); }
    int threads = omp_get_max_threads();
    snprintf(source, len, "measured at start-up: %d FMA chains of %d-bit vectors on %d thread%s%s; -pk to set",
             CPU_PEAK_CHAINS, CPU_PEAK_BITS, threads, threads > 1 ? "s" : "", world > 1 ? ", mean over the ranks" : "");
    char digits[32];
    snprintf(digits, sizeof(digits), "%.3g", sum / world);
    return atof(digits);
}

typedef struct {
    GPT2 model;
    DataParallel dp;
    double loss_sum; // this step's micro-batch mean losses
    int micro_steps; // and how many there were
} CpuTrainer;

static CpuTrainer* cpu_of(void* ctx) { return (CpuTrainer*)ctx; }

static void cpu_begin_step(void* ctx) {
    CpuTrainer* c = cpu_of(ctx);
    gpt2_zero_grads(&c->model);
    dp_zero_shard_grads(&c->dp);
    c->loss_sum = 0.0;
    c->micro_steps = 0;
}

static void cpu_micro_step(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, int last) {
    CpuTrainer* c = cpu_of(ctx);
    c->loss_sum += gpt2_forward(&c->model, inputs, targets, B, T);
    c->micro_steps++;
    c->dp.last_micro_step = last;
    gpt2_backward(&c->model, B, T, dloss, dp_grads_ready, &c->dp);
}

static float cpu_reduce_gradients(void* ctx) {
    dp_finish_gradients(&cpu_of(ctx)->dp, &cpu_of(ctx)->model);
    return dp_grad_norm(&cpu_of(ctx)->dp, &cpu_of(ctx)->model);
}

static void cpu_update(void* ctx, const AdamWConfig* h, float grad_scale, int t) {
    dp_optimizer_step(&cpu_of(ctx)->dp, &cpu_of(ctx)->model, h, grad_scale, t);
}

// The loss and the preemption votes in one ring all-reduce (the bytes of the loss alone).
static float cpu_agree(void* ctx, float loss_factor, float vote, float* votes) {
    CpuTrainer* c = cpu_of(ctx);
    float agreed[2] = {(float)(c->loss_sum / c->micro_steps) * loss_factor, vote};
    COMM_TIMED(all_reduce_sum_small(&c->dp.world, agreed, 2));
    *votes = agreed[1];
    return agreed[0] / c->dp.mesh.world;
}

// Mean loss over the val batches, all-reduced over every rank.
static float cpu_evaluate(void* ctx, DataLoader* val, int batches) {
    CpuTrainer* c = cpu_of(ctx);
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        dataloader_next(val);
        sum += gpt2_forward(&c->model, val->inputs, val->targets, val->B, val->T);
    }
    return all_reduce_sum_scalar(&c->dp.world, (float)(sum / batches)) / c->dp.mesh.world;
}

// Sampling's next-token logits (llmc/sampler.h): a forward of the context, batch 1.
static void cpu_next_logits(void* ctx, const int* context, int len, float* logits) {
    GPT2* m = &cpu_of(ctx)->model;
    gpt2_forward(m, context, NULL, 1, len);
    memcpy(logits, m->acts.logits + (size_t)(len - 1) * m->config.padded_vocab_size,
           (size_t)m->config.vocab_size * sizeof(float));
}

// HellaSwag's forward (llmc/eval_loader.h): the per-position losses of (B, T) rows.
static const float* cpu_eval_losses(void* ctx, const int* inputs, const int* targets, int B, int T) {
    GPT2* m = &cpu_of(ctx)->model;
    gpt2_forward(m, inputs, targets, B, T);
    return m->acts.losses;
}

static int cpu_sum_count(void* ctx, int count) {
    return (int)lroundf(all_reduce_sum_scalar(&cpu_of(ctx)->dp.world, (float)count));
}

static void cpu_write_model(void* ctx, const char* path, uint32_t* crc) {
    GPT2* m = &cpu_of(ctx)->model;
    gpt2_write_model_crc(path, &m->config, m->params_memory, MODEL_VERSION_FP32, crc);
}

// -lo: the held sums in owned order (to_owned 1; fragment f's element o at pend_off[f] +
// frag_pos[o]), or back into the packed buffers.
static void dp_pending_sums(DataParallel* dp, float* owned_order, int to_owned) {
    for (size_t o = 0; o < dp->owned; o++) {
        float* held = dp->pend_sum + dp->pend_off[dp->frag_of[o]] + dp->frag_pos[o];
        if (to_owned) {
            owned_order[o] = *held;
        } else {
            *held = owned_order[o];
        }
    }
}

// m, v and, with -ls, the owned local parameters (the replicas differ between syncs) and the
// outer state; with an -lo exchange in flight (s->has_pending), every exchange is first waited for
// and the held sums and local snapshots follow (their fragments merge at the scheduled steps).
static void cpu_write_state(void* ctx, const char* path, const TrainState* s) {
    DataParallel* dp = &cpu_of(ctx)->dp;
    float* local = s->has_local ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    if (local) { dp_owned_params(dp, &cpu_of(ctx)->model, local); }
    float* sums = s->has_pending ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    if (sums) {
        dp_overlap_drain(dp);
        dp_pending_sums(dp, sums, 1);
    }
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL, local, dp->outer, dp->outer_m, dp->residual,
                           s->has_pending ? dp->pend_snap : NULL, sums}};
    state_write_arrays(path, s, &arrays);
    free(local);
    free(sums);
}

static void cpu_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    DataParallel* dp = &cpu_of(ctx)->dp;
    float* local = dp->outer ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    float* sums = dp->pend_sum ? (float*)calloc_check(dp->owned, sizeof(float)) : NULL;
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL, local, dp->outer, dp->outer_m, dp->residual, dp->pend_snap,
                           sums}};
    state_load_arrays(dir, step, target, got, &arrays);
    if (got->has_local) { dp_set_owned_params(dp, &cpu_of(ctx)->model, local); }
    if (got->has_pending) { dp_pending_sums(dp, sums, 0); }
    free(local);
    free(sums);
}

static void cpu_barrier(void* ctx) {
    (void)ctx;
    watchdog_arm("the checkpoint barrier");
    MPI_Barrier(MPI_COMM_WORLD);
    watchdog_disarm();
}

static size_t cpu_comm_bytes_sent(void* ctx) {
    (void)ctx;
    return comm_bytes_sent;
}

static void cpu_set_replica_reduce(void* ctx, int every_step) { cpu_of(ctx)->dp.replica_reduce = every_step; }

static void cpu_set_gradient_wire(void* ctx, const OuterConfig* c) { cpu_of(ctx)->dp.grad_wire = *c; }

static void cpu_outer_init(void* ctx) { dp_outer_init(&cpu_of(ctx)->dp, &cpu_of(ctx)->model); }

static float cpu_outer_step(void* ctx, const OuterConfig* c) {
    return dp_outer_step(&cpu_of(ctx)->dp, &cpu_of(ctx)->model, c);
}

static void cpu_replica_crcs(void* ctx, int outer, uint32_t* crcs) {
    dp_replica_crcs(&cpu_of(ctx)->dp, &cpu_of(ctx)->model, outer, crcs);
}

// peak_tflops and peak_source are filled in by main (measured at start-up).
static const TrainerOps cpu_trainer_ops = {cpu_begin_step, cpu_micro_step, cpu_reduce_gradients, cpu_update,
                                           cpu_agree, cpu_evaluate, cpu_next_logits, cpu_write_model,
                                           cpu_write_state, cpu_read_state, cpu_barrier, cpu_comm_bytes_sent,
                                           cpu_eval_losses, cpu_sum_count, 0.0, NULL,
                                           "train_gpt2cpu", cpu_set_replica_reduce, cpu_outer_init, cpu_outer_step,
                                           cpu_replica_crcs, cpu_set_gradient_wire, 1};

static void mpi_abort_all(void) {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) { MPI_Abort(MPI_COMM_WORLD, 1); }
}

#ifndef TESTING
int main(int argc, char** argv) {
    int thread_level; // -lo's communication thread needs MPI_THREAD_MULTIPLE (checked in dp_init_overlap)
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (world > 1) { fail_rank = rank; }
    fail_abort_all = mpi_abort_all;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); // ring_exchange reports errors with the step

    TrainArgs args;
    args_parse(&args, argc, argv, 0);
    args_validate(&args, 0);

    TrainRun run;
    float* params = run_load_model(&run, &args, world, rank);
    CpuTrainer cpu;
    int zero = args.zero_stage;
    gpt2_build(&cpu.model, &run.config, params, args.B, args.T, (size_t)world, zero == 2);
    int outer = args.outer_every > 0;
    dp_init(&cpu.dp, &cpu.model, zero, run.grad_accum, args.dp_shard, outer);
    if (outer) { dp_init_fragments(&cpu.dp, args.fragments); }
    OuterConfig outer_args = outer_config_from_args(&args);
    if (outer && args.overlap > 0) { dp_init_overlap(&cpu.dp, &outer_args); }
    int compressed = wire_format_from_name(args.wire_name) != WIRE_FP32 || args.topk > 0.0f;
    if (compressed && args.error_feedback) { dp_init_residual(&cpu.dp); }
    if (compressed && !outer) { dp_init_gradient_wire(&cpu.dp, cpu.model.num_parameters); }
    if (compressed) { dp_init_wire_buffers(&cpu.dp, &outer_args, outer); }
    TrainerOps ops = cpu_trainer_ops;
    char peak_source[160] = "-pk";
    if (args.peak_tflops == 0.0f) { ops.peak_tflops = cpu_measured_peak_tflops(peak_source, sizeof(peak_source)); }
    ops.peak_source = peak_source;
    run_prepare(&run, &cpu.dp.mesh, zero, cpu.dp.owned, 0, &ops, &cpu);

    MemoryBytes mem = memory_bytes_per_rank(&cpu.dp.layout, zero, cpu.model.num_parameters, 4, 4, 0, 1, outer);
    mem.activations = cpu.model.activation_bytes;
    mem.residual = cpu.dp.residual ? cpu.dp.owned * 4 : 0;
    mem.wire = cpu.dp.sbuf_bytes;
    mem.overlap = dp_overlap_bytes(&cpu.dp, outer_num_fragments(&outer_args), &mem.overlap_snap, &mem.overlap_held,
                                   &mem.overlap_wire);
    CommBytes comm = comm_bytes_per_step(&cpu.dp.layout, &cpu.dp.mesh, zero, run.grad_accum,
                                         cpu.model.num_parameters, 4, 4, &run.outer);
    char extra[128];
    snprintf(extra, sizeof(extra), "threads: %d OpenMP threads per rank | matmul tile %dx%d of %d-bit vectors\n",
             omp_get_max_threads(), GEMM_MR, GEMM_NR, GEMM_VW * 32);
    run_print_start(&run, cpu.model.num_parameters, &mem, &comm, extra);

    double train_start = now_seconds();
    run_train(&run, &ops, &cpu);
    if (args.link_mbps > 0.0f && rank == 0) {
        double total = now_seconds() - train_start;
        printf("modelled link (-rb %g MB/s): rank 0 waited %.1f ms for it in %.1f ms of training (%.2f%%), and %.1f ms "
               "after the last step (every fragment lands)\n", args.link_mbps, link_waited[0] * 1e3, total * 1e3,
               100.0 * link_waited[0] / total, link_waited[1] * 1e3);
    }

    run_free(&run);
    dp_free(&cpu.dp);
    gpt2_free(&cpu.model);
    MPI_Finalize();
    return 0;
}
#endif
