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
#include "llmc/dp_host.h"
#include "llmc/replica_host.h"

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
        float m = vf_array_sum(x, C) / C;
        vf_lanes v = vf_lanes_splat(0.0f); // sum of (x - m)^2; past the row's end x reads as m
        for (int c = 0; c < C; c += VF_LANES) {
            vf_lanes xc = vf_lanes_load(x + c, C - c, m);
            for (int j = 0; j < VF_PARTS; j++) { vfloat d = xc.p[j] - m; v.p[j] = vf_fma(d, d, v.p[j]); }
        }
        float var = vf_lanes_sum(v) / C;
        float s = 1.0f / sqrtf(var + 1e-5f);
        float* y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) { y[c] = fmaf((x[c] - m) * s, weight[c], bias[c]); }
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
        // sums of dnorm = dy w and of dnorm norm, norm = (x - m) s; past the row's end dy and w read
        // as 0 and x as m, so both terms are +0 there
        vf_lanes sd = vf_lanes_splat(0.0f), sdn = vf_lanes_splat(0.0f);
        for (int c = 0; c < C; c += VF_LANES) {
            vf_lanes dyc = vf_lanes_load(dy + c, C - c, 0.0f), wc = vf_lanes_load(weight + c, C - c, 0.0f);
            vf_lanes xc = vf_lanes_load(x + c, C - c, m);
            for (int j = 0; j < VF_PARTS; j++) {
                vfloat dnorm = dyc.p[j] * wc.p[j], norm = (xc.p[j] - m) * s;
                sd.p[j] += dnorm;
                sdn.p[j] = vf_fma(dnorm, norm, sdn.p[j]);
            }
        }
        float mean_dnorm = vf_lanes_sum(sd) / C, mean_dnorm_norm = vf_lanes_sum(sdn) / C;
        float* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = dy[c] * weight[c];
            dx[c] = fmaf(s, fmaf(-norm, mean_dnorm_norm, dnorm - mean_dnorm), dx[c]);
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
                dweight[c] = fmaf(dy[c], (x[c] - m) * s, dweight[c]);
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
    HostDP dp;       // the data-parallel layer (llmc/dp_host.h)
    HostReplica sync; // its replica sync (llmc/replica_host.h; empty without -ls, -rq/-rk)
    double loss_sum; // this step's micro-batch mean losses
    int micro_steps; // and how many there were
} CpuTrainer;

static CpuTrainer* cpu_of(void* ctx) { return (CpuTrainer*)ctx; }

static void cpu_begin_step(void* ctx) {
    CpuTrainer* c = cpu_of(ctx);
    gpt2_zero_grads(&c->model);
    host_dp_zero_shard_grads(&c->dp);
    c->loss_sum = 0.0;
    c->micro_steps = 0;
}

// Backward's hook: a finished layer goes to the data-parallel layer (ZeRO 1, 2 reduce-scatter it);
// stage 2 then marks the one-layer slot's gradients zero for the next micro-step.
static void cpu_grads_ready(void* ctx, GPT2* m, int layer) {
    if (host_dp_grads_ready((HostDP*)ctx, layer)) { gpt2_zero_grads(m); }
}

static void cpu_micro_step(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, float weight,
                           int last) {
    CpuTrainer* c = cpu_of(ctx);
    (void)weight; // the step's loss is the mean over its micro-steps (cpu_agree)
    c->loss_sum += gpt2_forward(&c->model, inputs, targets, B, T);
    c->micro_steps++;
    c->dp.last_micro_step = last;
    gpt2_backward(&c->model, B, T, dloss, cpu_grads_ready, &c->dp);
}

// The loss and the preemption votes in one ring all-reduce (the bytes of the loss alone).
static float cpu_agree(void* ctx, float loss_factor, float vote, float* votes) {
    CpuTrainer* c = cpu_of(ctx);
    float agreed[2] = {(float)(c->loss_sum / c->micro_steps) * loss_factor, vote};
    COMM_TIMED(all_reduce_sum_small(&c->dp.world, agreed, 2));
    *votes = agreed[1];
    return agreed[0] / c->dp.world.size;
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
    return all_reduce_sum_scalar(&c->dp.world, (float)(sum / batches)) / c->dp.world.size;
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

// peak_tflops and peak_source are filled in by main (measured at start-up), dp by the data-parallel layer.
static const TrainerOps cpu_trainer_ops = TRAINER_OPS(cpu, cpu_comm_bytes_sent, 0.0, NULL, "train_gpt2cpu");

static void mpi_abort_all(void) {
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) { MPI_Abort(MPI_COMM_WORLD, 1); }
}

#ifndef TESTING
int main(int argc, char** argv) {
    int thread_level; // -lo's communication thread needs MPI_THREAD_MULTIPLE (checked in host_replica_init_overlap)
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (world > 1) { fail_rank = rank; }
    fail_abort_all = mpi_abort_all;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); // ring_exchange reports errors with the step

    vf_check_no_contraction("train_gpt2cpu");
    TrainArgs args;
    args_parse(&args, argc, argv, 0);
    args_validate(&args, 0);

    TrainRun run;
    float* params = run_load_model(&run, &args, world, rank);
    CpuTrainer cpu;
    int zero = args.zero_stage;
    gpt2_build(&cpu.model, &run.config, params, args.B, args.T, (size_t)world, zero == 2);
    float* grad_tensors[NUM_PARAMETER_TENSORS];
    memcpy(grad_tensors, &cpu.model.grads, sizeof(grad_tensors));
    host_dp_init(&cpu.dp, &run.config, world, rank, args.dp_shard, zero, &args.outer, cpu.model.params_memory,
                 cpu.model.grads_memory, grad_tensors, cpu.model.grads_one_layer);
    host_replica_init(&cpu.sync, &cpu.dp);
    if (args.outer.every > 0 && args.outer.overlap > 0) { host_replica_init_overlap(&cpu.sync); }
    if (strcmp(args.optimizer, "muon") == 0) { host_dp_init_muon(&cpu.dp, &run.config, args.muon_split_qkv); }
    TrainerOps ops = cpu_trainer_ops;
    ops.dp = host_dp_ops(&cpu.dp);
    ops.replica = host_replica_ops(&cpu.sync);
    char peak_source[160] = "-pk";
    if (args.peak_tflops == 0.0f) { ops.peak_tflops = cpu_measured_peak_tflops(peak_source, sizeof(peak_source)); }
    ops.peak_source = peak_source;
    const DpPlan* plan = &cpu.dp.plan;
    run_prepare(&run, plan, 0, &ops);

    MemoryBytes mem = memory_bytes_per_rank(&plan->layout, zero, plan->num_parameters, 4, 4, 0, 1,
                                            args.outer.every > 0);
    mem.activations = cpu.model.activation_bytes;
    host_replica_memory(&cpu.sync, &mem);
    mem.muon = cpu.dp.muon_sharded ? cpu.dp.muon_plan.bytes : 0;
    CommBytes comm = comm_bytes_per_step(&plan->layout, &plan->mesh, zero, run.grad_accum, plan->num_parameters, 4, 4, 0,
                                         &args.outer);
    char extra[1024], line[768];
    const MuonPlan* owners = cpu.dp.muon_sharded ? &cpu.dp.muon_plan : NULL; // ZeRO 1, 2: each matrix on one rank
    muon_plan_describe(&run.opt, &run.config, plan->num_parameters, zero, owners, comm.total, 4, 4,
                       zero == 2 ? run.grad_accum : 1,
                       muon_plan_replicas(plan->mesh.dp_replicate, args.outer.every, outer_compressed(&args.outer)),
                       line, sizeof(line));
    snprintf(extra, sizeof(extra), "threads: %d OpenMP threads per rank | matmul tile %dx%d of %d-bit vectors\n%s\n",
             omp_get_max_threads(), GEMM_MR, GEMM_NR, GEMM_VW * 32, line);
    run_print_start(&run, plan->num_parameters, &mem, &comm, extra);

    double train_start = now_seconds();
    run_train(&run, &ops, &cpu);
    if (args.outer.link_mbps > 0.0f && rank == 0) {
        double total = now_seconds() - train_start, *waited = cpu.sync.link_waited;
        printf("modelled link (-rb %g MB/s): rank 0 waited %.1f ms for it in %.1f ms of training (%.2f%%), and %.1f ms "
               "after the last step (every fragment lands)\n", args.outer.link_mbps, waited[0] * 1e3, total * 1e3,
               100.0 * waited[0] / total, waited[1] * 1e3);
    }

    run_free(&run);
    host_replica_free(&cpu.sync);
    host_dp_free(&cpu.dp);
    gpt2_free(&cpu.model);
    MPI_Finalize();
    return 0;
}
#endif
