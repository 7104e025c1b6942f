// train_gpt2: GPT-2 training on one NVIDIA GPU, the same model, flags, files and logs as the
// CPU trainer train_gpt2cpu (train_gpt2.c). Kernels live in llmc/*.cuh; matmuls go through
// cuBLASLt. PRECISION=BF16 (default): bf16 parameters, activations and gradients, fp32 AdamW
// state and (-w 1) fp32 master weights, stochastic rounding of the bf16 parameters.
// PRECISION=FP32 (-DENABLE_FP32): fp32 throughout, for tight testing against the CPU.
// Memory: -r 0|1|2 recomputes nothing, GELU, or GELU and both LayerNorms in backward.
// Several GPUs and nodes: data parallel over NCCL with ZeRO stages 0, 1, 2 and hybrid meshes, the
// CPU trainer's semantics (docs/design.md sections 3-5) through the shared layout and step logic of
// llmc/mesh.h; backward reports each finished layer through a GradsReadyFn hook, and the layer's
// reduce-scatter then runs on a communication stream while backward goes on. -ls H (DiLoCo): the
// replicas train alone and meet every H steps in an outer Nesterov step on their owned elements
// (llmc/outer_sync.h; its kernels in llmc/outer_kernels.cuh), with -rq's wire formats
// (llmc/wire_kernels.cuh), -lf fragments and -lo overlapped exchanges.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/rng.h"
#include "llmc/gpt2_model.h"
#include "llmc/args.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/mesh.h"
#include "llmc/checkpoint.h"
#include "llmc/optimizer.h"
#include "llmc/train_loop.h"
#include "llmc/activation_table.h"
#include "llmc/cuda_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/gelu.cuh"
#include "llmc/attention_select.cuh"
#include "llmc/classifier.cuh"
#include "llmc/matmul.cuh"
#include "llmc/adamw.cuh"
#include "llmc/process_info.h"
#include "llmc/nccl_setup.cuh"
#include "llmc/device_wait.cuh"
#include "llmc/shard_kernels.cuh"
#include "llmc/outer_kernels.cuh"
#include "llmc/wire_kernels.cuh"
#include "llmc/op_events.cuh"
#include "llmc/dp_device.cuh"
#include "llmc/replica_device.cuh"

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };

// ----------------------------------------------------------------------------
// the model

// The GPU trainer's activation table (llmc/activation_table.h): the shared rows in floatX, plus
// attention's log-sum-exp per row (all its backward needs besides qkv and atty: llmc/attention.cuh),
// a projection's output, the token ids, and backward's scratch. proj, d4C and dqkv have no memory
// of their own: they sit at the start of the logits buffer, which is dead while they live (proj in
// the forward's layers before the logits are computed; d4C and dqkv, never live at once, in
// backward's layers after the dlogits are consumed); logits rows are max(Vp, 4C) wide for them.
// backward's column-sum scratch: the bias gradients' chunk sums (OC up to 4C) and the LayerNorm
// backward's block sums of dweight and dbias, never live at once.
static size_t backward_partial_floats(size_t BT, size_t C) {
    size_t bias = colsum_partial_floats(BT, 4 * C), ln = layernorm_backward_partial_floats(BT, C);
    return bias > ln ? bias : ln;
}
#define ACTIVATIONS(X)                                                                              \
    GPT2_ACTIVATIONS(X, floatX, (Vp > 4 * C ? Vp : 4 * C))                                          \
    X(lse, float, LAYERS, B * NH * T)         /* (L, B, NH, T) attention log-sum-exp per row */     \
    X(proj, floatX, IN_LOGITS, BT * C)        /* (B, T, C) a projection before its residual add */  \
    X(inputs, int, ONE, BT)                   /* (B, T) token ids */                                \
    X(targets, int, ONE, BT)                  /* (B, T) next-token ids */
#define ACTIVATION_GRADS(X)                                                                         \
    GPT2_ACTIVATION_GRADS(X, floatX, IN_LOGITS)                                                     \
    X(att_delta, float, ONE, B * NH * T)      /* (B, NH, T) attention backward's rowsum(dout out) */ \
    X(partial, float, ONE, backward_partial_floats(BT, C)) /* bias and LayerNorm partial sums */    \
    X(norm, float, ONE, NORM_BLOCKS + 1)      /* the grad norm's block sums */
DEFINE_ACTIVATION_STRUCTS

// Called by the forward just before it first uses layer l's weights (layer -1: wte, wpe, lnfw,
// lnfb), so that it can wait for them (ZeRO's parameter all-gathers on the communication stream).
typedef void (*ParamsWaitFn)(void* ctx, int layer);

typedef struct {
    GPT2Config config;
    size_t num_parameters;
    size_t sizes[NUM_PARAMETER_TENSORS];
    floatX* params_memory;
    floatX* params[NUM_PARAMETER_TENSORS];
    floatX* grads_memory;
    floatX* grads[NUM_PARAMETER_TENSORS];
    int grad_layers;       // layers of per-layer gradients held: L, or (ZeRO 2) slots used in turn
    size_t grads_elements; // of grads_memory (padded)
    int B, T;      // the largest micro-batch the buffers hold
    int recompute; // -r
    int att_cudnn; // -at: 1 cuDNN's SDPA, 0 our kernels (llmc/attention_select.cuh); 0 after gpt2_build
    Activations acts;
    ActivationGrads acts_grad;
    size_t activation_bytes;
    int* staging[2];         // pinned host slots (2 B T ints: inputs, targets), used in turn
    cudaEvent_t staged[2];   // stream 0: slot i's copy to the device has run
    int stage_slot;          // the slot the next forward fills
    ParamsWaitFn params_wait; // NULL, or the data-parallel wait for a layer's gathered weights
    void* params_ctx;
    float* losses_host; // (B, T)
    cudaEvent_t forward_done; // the host's wait for a forward's losses
    EncoderBuckets buckets;
    int dlogits_ready;  // the last forward turned logits into dlogits
} GPT2;

// Layer l's slice of per-layer tensor i.
static floatX* layer_slice(floatX* const* tensors, const GPT2* m, int i, int l) {
    return tensors[i] + (size_t)l * (m->sizes[i] / m->config.num_layers);
}

// Where layer l's gradient of per-layer tensor i lives (slot l % grad_layers).
static floatX* grad_slice(const GPT2* m, int i, int l) {
    return m->grads[i] + (size_t)(l % m->grad_layers) * (m->sizes[i] / m->config.num_layers);
}

static void point_tensors(floatX** tensors, floatX* base, const size_t* sizes) {
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { tensors[i] = base; base += sizes[i]; }
}

DEFINE_ACTIVATION_BUFFERS

// Layers of full gradients a rank holds: all of them, or two slots in turn in ZeRO stage 2.
static int grad_layers_for_stage(int zero_stage, int num_layers) {
    return zero_stage == 2 && num_layers > 2 ? 2 : num_layers;
}

// Builds the model on the device from fp32 host parameters (converted to floatX).
// grad_layers: layers of gradients held (grad_layers_for_stage), slots used in turn when < L;
// the gradient block is padded to a multiple of grads_padding (the stage-0 all-reduce).
static void gpt2_build(GPT2* m, const GPT2Config* config, const float* params, int B, int T, int recompute,
                       int grad_layers, size_t grads_padding) {
    attention_path(config->channels, config->num_heads); // fails here, at start-up, on a head size we cannot serve
    matmul_check_model(config->channels, config->padded_vocab_size); // and on a width cuBLASLt cannot serve
    m->config = *config;
    m->num_parameters = gpt2_num_parameters(config);
    gpt2_parameter_sizes(config, m->sizes);
    size_t n = m->num_parameters;
    m->grad_layers = grad_layers;
    size_t grad_sizes[NUM_PARAMETER_TENSORS];
    GPT2Config held = *config;
    held.num_layers = m->grad_layers;
    gpt2_parameter_sizes(&held, grad_sizes);
    m->grads_elements = round_up(gpt2_num_parameters(&held), grads_padding);
    m->params_memory = (floatX*)device_alloc(n * sizeof(floatX));
    m->grads_memory = (floatX*)device_alloc(m->grads_elements * sizeof(floatX));
    point_tensors(m->params, m->params_memory, m->sizes);
    point_tensors(m->grads, m->grads_memory, grad_sizes);
    upload_floatX(m->params_memory, params, n);
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->att_cudnn = 0;
    ActBuffer bufs[NUM_ACT_BUFFERS];
    m->activation_bytes = activation_buffers(m, act_shape(config, B, T, recompute, 1), bufs);
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) {
        if (bufs[i].bytes > 0) { *bufs[i].slot = device_alloc(bufs[i].bytes); }
    }
    // the IN_LOGITS rows (see ACTIVATIONS)
    m->acts.proj = m->acts.logits;
    m->acts_grad.d4C = m->acts.logits;
    m->acts_grad.dqkv = m->acts.logits;
    size_t BT = (size_t)B * T;
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaMallocHost((void**)&m->staging[i], 2 * BT * sizeof(int)));
        cudaCheck(cudaEventCreateWithFlags(&m->staged[i], cudaEventDisableTiming));
    }
    m->stage_slot = 0;
    m->params_wait = NULL;
    m->params_ctx = NULL;
    m->losses_host = (float*)malloc_check(BT * sizeof(float));
    cudaCheck(cudaEventCreateWithFlags(&m->forward_done, cudaEventDisableTiming));
    encoder_buckets_init(&m->buckets, (int)BT, config->vocab_size);
    m->dlogits_ready = 0;
}

static void gpt2_free(GPT2* m) {
    cudaCheck(cudaFree(m->params_memory));
    cudaCheck(cudaFree(m->grads_memory));
    ActBuffer bufs[NUM_ACT_BUFFERS];
    activation_buffers(m, act_shape(&m->config, m->B, m->T, m->recompute, 1), bufs);
    for (int i = 0; i < NUM_ACT_BUFFERS; i++) {
        if (bufs[i].bytes > 0) { cudaCheck(cudaFree(*bufs[i].slot)); }
    }
    encoder_buckets_free(&m->buckets);
    attention_select_free(m->att_cudnn);
    for (int i = 0; i < 2; i++) {
        cudaCheck(cudaFreeHost(m->staging[i]));
        cudaCheck(cudaEventDestroy(m->staged[i]));
    }
    free(m->losses_host);
    cudaCheck(cudaEventDestroy(m->forward_done));
}

// The model's parameters as fp32 on the host (n floats).
static void gpt2_download_params(const GPT2* m, float* out) { download_floatX(out, m->params_memory, m->num_parameters); }

// One layer's slices of the saved activations. Layer slabs are spaced for the built B, T; with
// recomputation the LayerNorm (-r 2) and GELU (-r 1) outputs share one slab for all layers.
typedef struct {
    const floatX* x; // the layer's input: the embeddings or the previous layer's output
    floatX *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
    float *lse, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
} LayerActivations;

static LayerActivations layer_activations(const GPT2* m, int l) {
    const Activations* a = &m->acts;
    size_t C = m->config.channels, NH = m->config.num_heads, stride = (size_t)m->B * m->T;
    size_t ln_stride = m->recompute >= 2 ? 0 : stride, gelu_stride = m->recompute >= 1 ? 0 : stride;
    LayerActivations la;
    la.x = l == 0 ? a->encoded : a->residual3 + (l - 1) * stride * C;
    la.ln1 = a->ln1 + l * ln_stride * C;
    la.qkv = a->qkv + l * stride * 3 * C;
    la.atty = a->atty + l * stride * C;
    la.lse = a->lse + l * stride * NH;
    la.res2 = a->residual2 + l * stride * C;
    la.ln2 = a->ln2 + l * ln_stride * C;
    la.fch = a->fch + l * stride * 4 * C;
    la.fch_gelu = a->fch_gelu + l * gelu_stride * 4 * C;
    la.res3 = a->residual3 + l * stride * C;
    la.ln1_mean = a->ln1_mean + l * stride;
    la.ln1_rstd = a->ln1_rstd + l * stride;
    la.ln2_mean = a->ln2_mean + l * stride;
    la.ln2_rstd = a->ln2_rstd + l * stride;
    return la;
}

// Before the forward's first use of layer's weights (-1: wte, wpe, lnfw, lnfb).
static void params_needed(GPT2* m, int layer) {
    if (m->params_wait) { m->params_wait(m->params_ctx, layer); }
}

// The micro-batch's token ids (and targets) to the device without a host wait on the device: they
// go through a pinned staging slot (two, used in turn) and an asynchronous copy on stream 0; the
// host only waits, before refilling a slot, for the copy that used it two forwards ago.
static void upload_tokens(GPT2* m, const int* inputs, const int* targets, int BT) {
    int s = m->stage_slot;
    m->stage_slot ^= 1;
    wait_event(m->staged[s], "the token copy of two forwards ago", 0);
    int* slot = m->staging[s];
    for (int i = 0; i < BT; i++) { slot[i] = inputs[i]; }
    if (targets) {
        for (int i = 0; i < BT; i++) { slot[BT + i] = targets[i]; }
    }
    Activations* a = &m->acts;
    cudaCheck(cudaMemcpyAsync(a->inputs, slot, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    if (targets) {
        cudaCheck(cudaMemcpyAsync(a->targets, slot + BT, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    }
    cudaCheck(cudaEventRecord(m->staged[s], 0));
}

// -op 1's spans (llmc/op_events.cuh) of the forward and backward, on stream 0, with the counts
// from the shapes: matmuls 2 N C OC FLOPs forward and twice that backward, attention over the
// unmasked half (backward twice forward), and bytes with every tensor an op reads or writes moved
// once (op_bytes: `tensors` arrays of n floatX).
static double op_bytes(size_t n, int tensors) { return (double)sizeof(floatX) * (double)n * tensors; }
static double att_flops(int B, int T, int C) { return 2.0 * B * C * (double)T * (T + 1); }

static void mm_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                       int OC) {
    double bytes = (double)sizeof(floatX) * ((double)N * C + (double)C * OC + (double)N * OC);
    OP_SPAN(OP_MATMUL_FWD, 0, 2.0 * N * C * (double)OC, bytes, matmul_forward(out, inp, weight, bias, N, C, OC));
}

// matmul_backward without GELU's gradient (gelu_pre NULL), timed.
static void mm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                        const floatX* inp, const floatX* weight, int N, int C, int OC) {
    double bytes = (double)sizeof(floatX) * (2.0 * N * C + 3.0 * C * OC + (double)N * OC);
    OP_SPAN(OP_MATMUL_BWD, 0, 4.0 * N * C * (double)OC, bytes,
            matmul_backward(dinp, dweight, dbias, partial, dout, inp, weight, NULL, N, C, OC));
}

// The MLP's first matmul and GELU (matmul_forward_gelu): with cuBLASLt's GELU epilogue (-ge 1) one
// call, timed as a matmul; with ours the matmul and the GELU kernel, timed apart.
static void fc_gelu_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                            int N, int C, int OC) {
    if (!matmul_ctx.gelu_fusion) {
        mm_forward(pre, inp, weight, bias, N, C, OC);
        OP_SPAN(OP_GELU, 0, 0.0, op_bytes((size_t)N * OC, 2), gelu_forward(out, pre, (size_t)N * OC));
        return;
    }
    double bytes = (double)sizeof(floatX) * ((double)N * C + (double)C * OC + 2.0 * N * OC);
    OP_SPAN(OP_MATMUL_FWD, 0, 2.0 * N * C * (double)OC, bytes,
            matmul_forward_gelu(out, pre, inp, weight, bias, N, C, OC));
}

// matmul_backward through GELU (gelu_pre given): the DGELU epilogue (-ge 1) inside the matmul, or
// our GELU gradient kernel after it (it reads only dinp and gelu_pre, which the weight and bias
// gradients do not read), timed apart. rebuild (-ge 0 under -r 1 or 2: inp, GELU's output, was
// not kept): dinp's matmul, then one pass that takes GELU's gradient and writes GELU's output into
// inp (gelu_backward_rebuild), then the weight gradient from it.
static void fc_gelu_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                             floatX* inp, const floatX* weight, const floatX* gelu_pre, int N, int C, int OC,
                             int rebuild) {
    if (!matmul_ctx.gelu_fusion && rebuild) {
        double sz = sizeof(floatX), flops = 2.0 * N * C * (double)OC;
        OP_SPAN(OP_MATMUL_BWD, 0, flops, sz * ((double)N * OC + (double)C * OC + (double)N * C),
                matmul_backward_input(dinp, dout, weight, N, C, OC));
        OP_SPAN(OP_GELU, 0, 0.0, op_bytes((size_t)N * C, 4), gelu_backward_rebuild(dinp, inp, gelu_pre, (size_t)N * C));
        OP_SPAN(OP_MATMUL_BWD, 0, flops, sz * ((double)N * OC + (double)N * C + 2.0 * C * OC),
                matmul_backward_weight(dweight, dbias, partial, dout, inp, N, C, OC));
        return;
    }
    if (!matmul_ctx.gelu_fusion) {
        mm_backward(dinp, dweight, dbias, partial, dout, inp, weight, N, C, OC);
        OP_SPAN(OP_GELU, 0, 0.0, op_bytes((size_t)N * C, 3), gelu_backward_inplace(dinp, gelu_pre, (size_t)N * C));
        return;
    }
    double bytes = (double)sizeof(floatX) * (3.0 * N * C + 3.0 * C * OC + (double)N * OC);
    OP_SPAN(OP_MATMUL_BWD, 0, 4.0 * N * C * (double)OC, bytes,
            matmul_backward(dinp, dweight, dbias, partial, dout, inp, weight, gelu_pre, N, C, OC));
}

// residual_layernorm_forward timed: with a residual (b) it reads two (B, T, C) tensors and writes two.
static void ln_forward(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a, const floatX* b,
                       const floatX* weight, const floatX* bias, int N, int C) {
    OP_SPAN(OP_LAYERNORM, 0, 0.0, op_bytes((size_t)N * C, b ? 4 : 2),
            residual_layernorm_forward(out, mean, rstd, residual, a, b, weight, bias, N, C));
}

// layernorm_backward timed: dout and inp read, dinp read and written.
static void ln_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                        const floatX* inp, const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    OP_SPAN(OP_LAYERNORM, 0, 0.0, op_bytes((size_t)N * C, 4),
            layernorm_backward(dinp, dweight, dbias, partial, dout, inp, weight, mean, rstd, N, C));
}

// Forward pass over a (B, T) micro-batch (B, T no larger than built for), leaving the per-token
// losses on the device (acts.losses) when there are targets. dloss > 0 makes it the forward of
// a training micro-step: the classifier then also turns the logits into dlogits for
// gpt2_backward, weighting this micro-batch's mean loss by dloss (1 / grad_accum).
static void gpt2_forward_device(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    if (B > m->B || T > m->T) { fail("forward of B %d T %d on a model built for B %d T %d", B, T, m->B, m->T); }
    int BT = B * T;
    Activations* a = &m->acts;
    upload_tokens(m, inputs, targets, BT);
    floatX* const* p = m->params;
    params_needed(m, -1);
    encoder_forward(a->encoded, a->inputs, p[WTE], p[WPE], B, T, C);
    params_needed(m, 0);
    ln_forward(a->ln1, a->ln1_mean, a->ln1_rstd, NULL, a->encoded, NULL, p[LN1W], p[LN1B], BT, C);
    for (int l = 0; l < L; l++) {
        LayerActivations la = layer_activations(m, l);
        mm_forward(la.qkv, la.ln1, layer_slice(p, m, QKVW, l), layer_slice(p, m, QKVB, l), BT, C, 3 * C);
        OP_SPAN(OP_ATTENTION_FWD, 0, att_flops(B, T, C), op_bytes((size_t)BT * C, 4) + 4.0 * BT * NH,
                attention_forward_select(m->att_cudnn, la.atty, la.lse, la.qkv, B, T, C, NH));
        mm_forward(a->proj, la.atty, layer_slice(p, m, ATTPROJW, l), layer_slice(p, m, ATTPROJB, l), BT, C, C);
        ln_forward(la.ln2, la.ln2_mean, la.ln2_rstd, la.res2, la.x, a->proj, layer_slice(p, m, LN2W, l),
                   layer_slice(p, m, LN2B, l), BT, C);
        fc_gelu_forward(la.fch_gelu, la.fch, la.ln2, layer_slice(p, m, FCW, l), layer_slice(p, m, FCB, l), BT, C,
                        4 * C);
        mm_forward(a->proj, la.fch_gelu, layer_slice(p, m, FCPROJW, l), layer_slice(p, m, FCPROJB, l), BT, 4 * C,
                       C);
        // the residual add fused with the next LayerNorm: the next layer's ln1, or lnf
        if (l + 1 < L) {
            params_needed(m, l + 1);
            LayerActivations next = layer_activations(m, l + 1);
            ln_forward(next.ln1, next.ln1_mean, next.ln1_rstd, la.res3, la.res2, a->proj,
                       layer_slice(p, m, LN1W, l + 1), layer_slice(p, m, LN1B, l + 1), BT, C);
        } else {
            ln_forward(a->lnf, a->lnf_mean, a->lnf_rstd, la.res3, la.res2, a->proj, p[LNFW], p[LNFB], BT, C);
        }
    }
    mm_forward(a->logits, a->lnf, p[WTE], NULL, BT, C, Vp);
    m->dlogits_ready = 0;
    if (!targets) { return; }
    int training = !(dloss <= 0.0f); // a NaN dloss (fault injection, -fi nan) is a training forward too
    OP_SPAN(OP_SOFTMAX_XENT, 0, 0.0, op_bytes((size_t)BT * Vp, training ? 2 : 1),
            fused_classifier(a->logits, a->losses, a->targets, dloss / (float)BT, training, BT, V, Vp));
    m->dlogits_ready = training;
    // a training forward: the encoder backward's token buckets, built on the host while the GPU runs
    // the forward just queued (2.2 ms of host work at B T 65536, measured on the build machine), their
    // copy queued on stream 0 behind it, ahead of the backward that reads them
    if (dloss > 0.0f) { encoder_buckets_prepare(&m->buckets, inputs, BT); }
}

// gpt2_forward_device, then (with targets) the mean loss on the host; without targets, -1.
static float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T, float dloss) {
    gpt2_forward_device(m, inputs, targets, B, T, dloss);
    if (!targets) { return -1.0f; }
    int BT = B * T;
    // the forward may stand behind collectives (a parameter all-gather): wait with the deadline first
    wait_device(0, m->forward_done, "a forward's losses");
    cudaCheck(cudaMemcpy(m->losses_host, m->acts.losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += m->losses_host[i]; }
    return (float)(sum / BT);
}

// Called by gpt2_backward when a layer's parameter gradients are complete (layer -1: wte,
// wpe, lnfw, lnfb), so a distributed layer can reduce them while the rest of backward runs.
typedef void (*GradsReadyFn)(void* ctx, GPT2* m, int layer);

// Backward of the last (training) forward, same B, T, accumulating into the parameter gradients.
static void gpt2_backward(GPT2* m, int B, int T, GradsReadyFn ready, void* ctx) {
    if (!m->dlogits_ready) { fail("gpt2_backward: the last forward was not a training forward (targets, dloss > 0)"); }
    const GPT2Config* c = &m->config;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    int BT = B * T;
    Activations* a = &m->acts;
    ActivationGrads* g = &m->acts_grad;
    floatX* const* p = m->params;
    floatX* const* d = m->grads;
    mm_backward(g->dC, d[WTE], NULL, NULL, a->logits, a->lnf, p[WTE], BT, C, Vp);
    cudaCheck(cudaMemset(g->dresidual, 0, (size_t)BT * C * sizeof(floatX)));
    const floatX* last = layer_activations(m, L - 1).res3;
    ln_backward(g->dresidual, d[LNFW], d[LNFB], g->partial, g->dC, last, p[LNFW], a->lnf_mean, a->lnf_rstd, BT, C);
    for (int l = L - 1; l >= 0; l--) {
        LayerActivations la = layer_activations(m, l);
        if (m->recompute >= 1 && matmul_ctx.gelu_fusion) { // (with -ge 0 fc_gelu_backward rebuilds it)
            OP_SPAN(OP_GELU, 0, 0.0, op_bytes((size_t)BT * 4 * C, 2),
                    gelu_forward(la.fch_gelu, la.fch, (size_t)BT * 4 * C));
        }
        if (m->recompute >= 2) {
            ln_forward(la.ln2, la.ln2_mean, la.ln2_rstd, NULL, la.res2, NULL, layer_slice(p, m, LN2W, l),
                       layer_slice(p, m, LN2B, l), BT, C);
        }
        // the residual gradient feeds the MLP projection directly; GELU's gradient is its epilogue
        fc_gelu_backward(g->d4C, grad_slice(m, FCPROJW, l), grad_slice(m, FCPROJB, l), g->partial, g->dresidual,
                         la.fch_gelu, layer_slice(p, m, FCPROJW, l), la.fch, BT, 4 * C, C, m->recompute >= 1);
        mm_backward(g->dC, grad_slice(m, FCW, l), grad_slice(m, FCB, l), g->partial, g->d4C, la.ln2,
                    layer_slice(p, m, FCW, l), BT, C, 4 * C);
        ln_backward(g->dresidual, grad_slice(m, LN2W, l), grad_slice(m, LN2B, l), g->partial, g->dC,
                    la.res2, layer_slice(p, m, LN2W, l), la.ln2_mean, la.ln2_rstd, BT, C);
        mm_backward(g->dC, grad_slice(m, ATTPROJW, l), grad_slice(m, ATTPROJB, l), g->partial, g->dresidual, la.atty,
                    layer_slice(p, m, ATTPROJW, l), BT, C, C);
        OP_SPAN(OP_ATTENTION_BWD, 0, 2.0 * att_flops(B, T, C), op_bytes((size_t)BT * C, 8) + 8.0 * BT * NH,
                attention_backward_select(m->att_cudnn, g->dqkv, g->att_delta, g->dC, la.qkv, la.atty, la.lse, B, T, C,
                                          NH));
        if (m->recompute >= 2) {
            ln_forward(la.ln1, la.ln1_mean, la.ln1_rstd, NULL, la.x, NULL, layer_slice(p, m, LN1W, l),
                       layer_slice(p, m, LN1B, l), BT, C);
        }
        mm_backward(g->dC, grad_slice(m, QKVW, l), grad_slice(m, QKVB, l), g->partial, g->dqkv, la.ln1,
                    layer_slice(p, m, QKVW, l), BT, C, 3 * C);
        ln_backward(g->dresidual, grad_slice(m, LN1W, l), grad_slice(m, LN1B, l), g->partial, g->dC, la.x,
                    layer_slice(p, m, LN1W, l), la.ln1_mean, la.ln1_rstd, BT, C);
        if (ready) { ready(ctx, m, l); }
    }
    encoder_backward(d[WTE], d[WPE], &m->buckets, g->dresidual, NULL, B, T, C);
    if (ready) { ready(ctx, m, -1); }
    m->dlogits_ready = 0;
}

static void gpt2_zero_grads(GPT2* m) {
    cudaCheck(cudaMemset(m->grads_memory, 0, m->grads_elements * sizeof(floatX)));
}

// ----------------------------------------------------------------------------
// training: the GPU trainer's side of llmc/train_loop.h

// The peak the MFU is measured against unless -pk says otherwise, from NVIDIA's H100 SXM
// datasheet, dense (without sparsity): 989 TFLOP/s bf16 on tensor cores for BF16 builds, and
// 67 TFLOP/s fp32 for FP32 builds (their matmuls compute in fp32 without TF32).
#ifdef ENABLE_FP32
#define GPU_PEAK_TFLOPS 67.0
#define GPU_PEAK_SOURCE "H100 SXM datasheet, fp32 without tensor cores; -pk to set yours"
#else
#define GPU_PEAK_TFLOPS 989.0
#define GPU_PEAK_SOURCE "H100 SXM datasheet, bf16 dense tensor cores; -pk to set yours"
#endif

typedef struct {
    GPT2 model;
    DeviceDP dp;   // the data-parallel layer (llmc/dp_device.cuh; its replica sync llmc/replica_device.cuh)
} GpuTrainer;

static void gpu_begin_step(void* ctx) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    gpt2_zero_grads(&g->model);
    dev_dp_begin_step(&g->dp);
}

// Backward's hook: a finished layer goes to the data-parallel layer (ZeRO 1, 2 reduce-scatter it).
static void gpu_grads_ready(void* ctx, GPT2* m, int layer) {
    (void)m;
    dev_dp_grads_ready((DeviceDP*)ctx, layer);
}

// No host wait on the device here: the tokens go up asynchronously (upload_tokens); the step's
// host waits (with NCCL's error checks and the deadline) are the grad norm's and the loss's.
static void gpu_micro_step(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, float weight,
                           int last) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    watchdog_span_begin("a micro-step's kernel launches"); // a full launch queue blocks behind a hung collective
    gpt2_forward_device(&g->model, inputs, targets, B, T, dloss);
    loss_accumulate(g->dp.loss, g->model.acts.losses, B * T, weight);
    g->dp.last_micro_step = last;
    dev_dp_backward_begin(&g->dp);
    gpt2_backward(&g->model, B, T, gpu_grads_ready, &g->dp);
    watchdog_span_end();
}

static float gpu_agree(void* ctx, float loss_factor, float vote, float* votes) {
    return dev_dp_agree(&((GpuTrainer*)ctx)->dp, loss_factor, vote, votes);
}

// Mean loss over the val batches, all-reduced over every rank (summed on the device).
static float gpu_evaluate(void* ctx, DataLoader* val, int batches) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dataloader_reset(val);
    cudaCheck(cudaMemsetAsync(g->dp.loss, 0, g->dp.plan.mesh.world * sizeof(float), 0));
    for (int i = 0; i < batches; i++) {
        dataloader_next(val);
        gpt2_forward_device(&g->model, val->inputs, val->targets, val->B, val->T, 0.0f);
        loss_accumulate(g->dp.loss, g->model.acts.losses, val->B * val->T, 1.0f / (float)batches);
    }
    return dev_dp_mean_over_world(&g->dp, "the validation loss");
}

// Sampling's next-token logits (llmc/sampler.h): a forward of the context, batch 1.
static void gpu_next_logits(void* ctx, const int* context, int len, float* logits) {
    GPT2* m = &((GpuTrainer*)ctx)->model;
    gpt2_forward(m, context, NULL, 1, len, 0.0f);
    download_floatX(logits, m->acts.logits + (size_t)(len - 1) * m->config.padded_vocab_size,
                    (size_t)m->config.vocab_size);
}

// HellaSwag's forward (llmc/eval_loader.h): the per-position losses of (B, T) rows, on the host.
static const float* gpu_eval_losses(void* ctx, const int* inputs, const int* targets, int B, int T) {
    GPT2* m = &((GpuTrainer*)ctx)->model;
    gpt2_forward(m, inputs, targets, B, T, 0.0f);
    return m->losses_host;
}

static int gpu_sum_count(void* ctx, int count) {
    return dev_dp_sum_count(&((GpuTrainer*)ctx)->dp, count,
                            "a count summed over the ranks (HellaSwag, the checkpoint agreement)");
}

// The model file: v5 (bf16) in BF16, v3 (fp32) in FP32.
static void gpu_write_model(void* ctx, const char* path, uint32_t* crc) {
    GPT2* m = &((GpuTrainer*)ctx)->model;
    device_link_host_wait(&((GpuTrainer*)ctx)->dp.link, "the parameters before writing the model"); // the all-gathers
    float* params = (float*)malloc_check(m->num_parameters * sizeof(float));
    gpt2_download_params(m, params);
    gpt2_write_model_crc(path, &m->config, params, sizeof(floatX) == 4 ? MODEL_VERSION_FP32 : MODEL_VERSION_BF16,
                         crc);
    free(params);
}

// An all-reduce of the (zeroed) loss slots: returns once every rank got there.
static void gpu_barrier(void* ctx) {
    DeviceDP* dp = &((GpuTrainer*)ctx)->dp;
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->plan.mesh.world * sizeof(float), 0));
    dev_dp_mean_over_world(dp, "the checkpoint barrier");
}

#ifdef EMU_CUDA
// The emulated NCCL counts what it sends; a real one does not say.
static size_t gpu_comm_bytes_sent(void* ctx) {
    (void)ctx;
    return emu_nccl_bytes_sent();
}
#define GPU_COMM_BYTES_SENT gpu_comm_bytes_sent
#else
#define GPU_COMM_BYTES_SENT NULL
#endif

static const TrainerOps gpu_trainer_ops =
    TRAINER_OPS(gpu, GPU_COMM_BYTES_SENT, GPU_PEAK_TFLOPS, GPU_PEAK_SOURCE, "train_gpt2 " PRECISION_NAME);

#ifndef TESTING
int main(int argc, char** argv) {
    TrainArgs args;
    args_parse(&args, argc, argv, 1);
    process_method_check(args.init_method);
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fail("no CUDA GPU found; use ./train_gpt2cpu for CPU training");
    }
    args_validate(&args, 1);
    attention_flag_check(args.attention);

    // processes: ranks, this rank's GPU (its local rank, or the one GPU it sees), the NCCL communicators
    ProcessInfo proc;
    process_info_init(&proc, args.init_method, &argc, &argv);
    if (proc.world > 1) { fail_rank = proc.rank; }
    fail_abort_all = abort_all_ranks;
    event_wait_fn = wait_event_short; // host waits on events with the deadline (llmc/device_wait.cuh)
#ifdef EMU_CUDA
    fault_stop_hook = emu_nccl_stop_answering; // -fi hang_*: the emulator's `peer stops` fault
    fault_ring_hook = emu_nccl_die_in_next_ring; // -fi die_ring: dies inside a collective
#endif
    char why[512];
    int device = process_device(proc.local_rank, devices, why, sizeof(why));
    if (device < 0) { fail("%s", why); }
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    Rendezvous rdv = {.rank = proc.rank, .world = proc.world, .timeout_s = peer_timeout_s(), .keep_listening = args.elastic,
                      .start_wait = args.start_wait, .shard = args.dp_shard > 0 ? args.dp_shard : proc.world,
                      .min_replicas = args.min_replicas};
    rendezvous_job(&rdv, args.job_token, argc, argv);
    RdvJoin join = {-1, 0, 0, NULL, 0}; // -le 1: whether this rank's replica rejoins a running job (-lw: or starts without some)
    ncclComm_t world_comm = nccl_world_init(&proc, args.init_method, args.init_path, args.server_ip, args.server_port,
                                            &rdv, args.elastic ? &join : NULL,
                                            args.dp_shard > 0 ? args.dp_shard : proc.world, args.fault);
    watch_comm(world_comm);
    int world = proc.world, rank = proc.rank, zero = args.zero_stage;
    matmul_init();
    matmul_ctx.gelu_fusion = args.gelu_fusion;

    TrainRun run;
    float* params = run_load_model(&run, &args, world, rank);
    GpuTrainer gpu;
    int grad_layers = grad_layers_for_stage(zero, run.config.num_layers);
    gpt2_build(&gpu.model, &run.config, params, args.B, args.T, args.recompute, grad_layers,
               zero == 0 ? (size_t)world : 1);
    gpu.model.att_cudnn = attention_use_cudnn(args.attention, run.config.channels, run.config.num_heads);
    ShardLayout units; // where each unit's gradient lives (stage 2: its layer's slot)
    shard_layout_init(&units, &run.config, 1);
    floatX** unit_grads = (floatX**)malloc_check(units.num_units * sizeof(floatX*));
    for (int u = 0; u < units.num_units; u++) {
        const ShardUnit* unit = &units.units[u];
        unit_grads[u] = unit->layer >= 0 ? grad_slice(&gpu.model, unit->tensor, unit->layer) : gpu.model.grads[unit->tensor];
    }
    shard_layout_free(&units);
    dev_dp_init(&gpu.dp, world_comm, rank, world, &run.config, args.dp_shard, zero, &args.outer,
                gpu.model.params_memory, gpu.model.grads_memory, gpu.model.grads_elements, unit_grads, grad_layers,
                args.master_weights, params);
    gpu.dp.seed = (uint32_t)args.seed;
    if (strcmp(args.optimizer, "muon") == 0) { dev_dp_init_muon(&gpu.dp, &run.config, args.muon_split_qkv, params); }
    dev_replica_init(&gpu.dp);
    dev_dp_elastic_init(&gpu.dp, &args, &rdv, &join); // -le 1: the agreement on rank 0's -pi tcp port
    gpu.model.params_wait = dev_dp_params_wait;
    gpu.model.params_ctx = &gpu.dp;
    free(params);
    const DpPlan* plan = &gpu.dp.plan;
    TrainerOps ops = gpu_trainer_ops;
    ops.dp = dev_dp_ops(&gpu.dp);
    ops.replica = dev_replica_ops(&gpu.dp);
    run_prepare(&run, plan, gpu.dp.opt.master != NULL, &ops);
    if (join.step >= 0) { // -le 1: the outer state from replica 0, its data skipped to the survivors' step
        printf("rank %d: rejoins after the outer sync of step %d (its checkpoint: %s)\n", rank, join.step,
               run.resume_step >= 0 ? "resumed" : "none, fresh");
        fflush(stdout);
        run_join(&run, join.step);
        free(join.alive);
    } else if (join.partial) { // -lw: the run starts without some replicas
        run_start_partial(&run);
        free(join.alive);
    }

    MemoryBytes mem = memory_bytes_per_rank(&plan->layout, zero, plan->num_parameters, sizeof(floatX), sizeof(floatX),
                                            gpu.dp.opt.master != NULL, grad_layers, args.outer.every > 0);
    mem.activations = gpu.model.activation_bytes;
    dev_replica_memory(&gpu.dp, &mem);
    mem.muon = gpu.dp.muon_sharded ? gpu.dp.owned.plan.bytes : 0;
    CommBytes comm = comm_bytes_per_step(&plan->layout, &plan->mesh, zero, run.grad_accum, plan->num_parameters,
                                         sizeof(floatX), sizeof(floatX), gpu.dp.opt.master ? 4 : 0, &args.outer);
    char extra[1536], opt_line[768];
    const MuonPlan* owners = gpu.dp.muon_sharded ? &gpu.dp.owned.plan : NULL; // ZeRO 1, 2: each matrix on one rank
    muon_plan_describe(&run.opt, &run.config, gpu.model.num_parameters, zero, owners, comm.total, sizeof(floatX),
                       sizeof(floatX), zero == 2 ? run.grad_accum : 1,
                       muon_plan_replicas(plan->mesh.dp_replicate, args.outer.every, outer_compressed(&args.outer)),
                       opt_line, sizeof(opt_line));
    snprintf(extra, sizeof(extra),
             "start-up: -pi %s | ranks from %s | NCCL %d.%d.%d | GPU %s\n"
             "device: %s | precision %s | recompute %d | master weights %s | GELU %s\n"
             "attention: %s\n%s\n",
             args.init_method, proc.source, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
             devices == 1 ? "0 of 1 visible" : "= local rank", prop.name, PRECISION_NAME,
             args.recompute, gpu.dp.opt.master ? "fp32" : "none", args.gelu_fusion ? "cuBLASLt epilogues" : "ours",
             attention_name(gpu.model.att_cudnn, gpu.model.config.channels, gpu.model.config.num_heads), opt_line);
    run_print_start(&run, gpu.model.num_parameters, &mem, &comm, extra);

    if (args.op_profile) {
        int side = zero != 0 || args.outer.every > 0 || outer_compressed(&args.outer); // the communication stream runs collectives
        op_events_init(side ? "the communication stream (reduce-scatters, all-reduces, all-gathers)" : NULL);
        op_profile.peak_unknown = args.peak_tflops <= 0.0f; // the default peak is a datasheet's, not this device's
    }
    double train_start = now_seconds();
    run_train(&run, &ops, &gpu);
    if (args.outer.link_mbps > 0.0f && rank == 0) { // the time stream 0 waited on replica exchanges (-rb)
        double total = now_seconds() - train_start, *waited = gpu.dp.link.waited;
        printf("modelled link (-rb %g MB/s): rank 0 waited %.1f ms for it in %.1f ms of training (%.2f%%), and %.1f ms "
               "after the last step (every fragment lands)\n", args.outer.link_mbps, waited[0] * 1e3, total * 1e3,
               100.0 * waited[0] / total, waited[1] * 1e3);
    }
    op_events_free();

    run_free(&run);
    gpt2_free(&gpu.model);
    dev_replica_free(&gpu.dp);
    dev_dp_free(&gpu.dp);
    nccl_destroy(gpu.dp.link.world); // world_comm, or (-le 1) what it shrank to
    num_watched_comms = 0;
    matmul_free();
    if (proc.use_mpi) { MPI_Finalize(); }
    return 0;
}
#endif
