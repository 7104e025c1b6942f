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

enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };

// ----------------------------------------------------------------------------
// host <-> device parameter transfers (floatX on the device, fp32 on the host)

static void upload_floatX(floatX* dst, const float* src, size_t n) {
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { tmp[i] = float_to_bf16(src[i]); }
    cudaCheck(cudaMemcpy(dst, tmp, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(tmp);
}

static void download_floatX(float* dst, const floatX* src, size_t n) {
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(tmp, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) { dst[i] = bf16_to_float(tmp[i]); }
    free(tmp);
}

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

static void* device_alloc(size_t bytes) {
    void* p;
    cudaCheck(cudaMalloc(&p, bytes));
    cudaCheck(cudaMemset(p, 0, bytes));
    return p;
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
// the optimizer: AdamW state (fp32 m, v) and, in BF16 with -w 1, fp32 master weights

typedef struct {
    size_t n;
    float* m;
    float* v;
    float* master;     // NULL without master weights
    AdamWMulti table;  // what one launch updates: every tensor, or this rank's slices (ZeRO 1, 2)
    int table_built;
} Optimizer;

// State for n parameters (all of them, or a rank's ZeRO shard). master: keep fp32 master
// weights, initialised from init (n fp32 host values; ignored in FP32, where the parameters are
// fp32 already).
static void optimizer_init(Optimizer* o, size_t n, int master, const float* params) {
    o->n = n;
    o->m = (float*)device_alloc(o->n * sizeof(float));
    o->v = (float*)device_alloc(o->n * sizeof(float));
    o->master = NULL;
    o->table_built = 0;
    if (master && sizeof(floatX) != sizeof(float)) {
        o->master = (float*)device_alloc(o->n * sizeof(float));
        cudaCheck(cudaMemcpy(o->master, params, o->n * sizeof(float), cudaMemcpyHostToDevice));
    }
}

static void optimizer_free(Optimizer* o) {
    cudaCheck(cudaFree(o->m));
    cudaCheck(cudaFree(o->v));
    if (o->master) { cudaCheck(cudaFree(o->master)); }
    if (o->table_built) { adamw_multi_free(&o->table); }
}

// AdamW (t = 1-based step) on every tensor, one launch; the stochastic rounding is seeded by seed,
// t and the tensor.
static void optimizer_step(Optimizer* o, GPT2* m, const AdamWConfig* h, float grad_scale, int t, uint32_t seed) {
    if (!o->table_built) {
        adamw_multi_init(&o->table, NUM_PARAMETER_TENSORS);
        size_t off = 0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            adamw_multi_add(&o->table, off, off, m->sizes[i], 0, i, parameter_is_matrix[i]);
            off += m->sizes[i];
        }
        adamw_multi_upload(&o->table);
        o->table_built = 1;
    }
    float bias1, bias2;
    adamw_bias_corrections(h, t, &bias1, &bias2);
    adamw_multi_update(&o->table, m->params_memory, o->master, m->grads_memory, o->m, o->v, h->lr, h->beta1, h->beta2,
                       h->eps, h->weight_decay, grad_scale, bias1, bias2, seed + (uint32_t)t * NUM_PARAMETER_TENSORS);
}

// ----------------------------------------------------------------------------
// data parallelism over NCCL (docs/design.md sections 3-5), the CPU trainer's semantics
// Compute (forward, backward, optimizer) runs on the legacy default stream 0. Stages 1 and 2
// reduce-scatter each layer's gradients on comm_stream (non-blocking, so it overlaps stream 0)
// as soon as backward reports the layer, ordered after it by an event: the layer's units in one
// NCCL group, then one add of their slices into an fp32 shard accumulator. Stage 2 keeps two
// layer slots of gradients: layer l's slot is cleared on comm_stream once reduced, and backward
// waits for that before layer l-2 reuses it. After the last micro-step the replicas all-reduce
// the shard (comm_stream), stream 0 waits for it (the norm needs every slice) and updates this
// rank's slices; comm_stream then all-gathers the parameters, one NCCL group and one event per
// layer (wte, wpe, lnf first), and the next forward waits for layer l's event just before it
// uses layer l's weights, so the gathers overlap the next step's start. The host waits for the
// device twice a step (the grad norm, the loss). Stage 0 all-reduces the full gradient after backward.
// The order of collectives: NCCL's collectives on different communicators (world, shard, replica)
// must never overlap (its kernels block; two that run at once on a rank can deadlock the job), so
// every collective of a rank is ordered after all of its earlier ones, on every rank alike: one on
// stream 0 is issued after stream 0 waits for comm_done (the communication stream's last work,
// dp_order_on_main), one on comm_stream after comm_stream waits for an event recorded on stream 0
// (dp_order_on_comm), and comm_done is recorded after every collective comm_stream runs.

// -lf: a unit's owned elements, parameters [param_offset, +count) = owned elements
// [owned_offset, +count), at `packed` in its fragment's message (the CPU trainer's packing: a
// fragment's owned elements in owned order, padding included).
typedef struct {
    size_t param_offset, owned_offset, count, packed;
    int fragment;
} FragRun;

typedef struct {
    Mesh mesh;
    ShardLayout layout;
    int zero_stage;
    int last_micro_step;       // set by the training loop: 1 during the step's last backward
    ncclComm_t world, shard, replica;
    cudaStream_t comm_stream;
    cudaEvent_t grads_ready;   // stream 0: a layer's gradients are complete
    cudaEvent_t comm_done;     // comm_stream: every reduction queued so far
    cudaEvent_t slot_free[2];  // comm_stream, stage 2: a layer slot was reduced and cleared
    cudaEvent_t host_event;    // for wait_device
    cudaEvent_t update_done;   // stream 0: the optimizer wrote this rank's slices
    cudaEvent_t* params_ready; // L + 1, comm_stream: [0] wte, wpe, lnfw, lnfb, [1 + l] layer l gathered
    size_t owned;              // elements of m, v (and master weights) on this rank
    float* shard_grads;        // stages 1, 2: reduced fp32 slices, padded to a multiple of dp_replicate
    floatX* group_pad;         // a group's units S does not divide, each padded to S slices (or NULL)
    floatX* group_recv;        // a group's reduce-scattered slices, in shard order
    float* loss;               // world floats: [0] the loss being summed, the rest 0 (ring padding)
    float* norm;               // dp_shard floats ([0] the squared norm), then NORM_BLOCKS of scratch
    int replica_reduce;        // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    OuterConfig grad_wire;     // -ls 0: how this step's gradients cross the replicas (-rq/-rk, -rqs)
    // -ls (llmc/outer_sync.h; NULL without): the outer parameters and momentum (owned elements,
    // the AdamW state's order), the outer sync's message in ZeRO 0 (also -ls 0 -rq/-rk's; stages 1,
    // 2 use shard_grads, idle between steps), 2 floats per replica for the CRC all-gather
    float* outer;
    float* outer_m;
    float* outer_msg;
    float* crc_buf;
    OwnedSpan* spans;          // this rank's owned elements in the parameters
    int num_spans;
    // -ls: the outer sync's fragments (-lf F; one without it): each unit's owned elements as a run,
    // grouped by fragment (runs[frag_runs[f] .. frag_runs[f + 1])), each fragment's owned count
    // (padding included) and, -lo, where its held sum starts in pend_sum; an event per fragment
    // (its exchange done, comm_stream)
    int num_frags;
    FragRun* runs;
    int* frag_runs;
    size_t* frag_count;
    size_t* pend_off;
    cudaEvent_t* exchanged;
    // -rq/-rk (llmc/wire_kernels.cuh; NULL without): the error-feedback residual (owned order; NULL
    // with -ref 0), this rank's encoded message and every replica's, all-gathered
    float* residual;
    uint8_t* wire_send;
    uint8_t* wire_recv;
    // -lo: each fragment's summed messages while in flight, the owned local values at its start
    float* pend_sum;
    float* pend_snap;
} DataParallel;

// Before a collective on stream 0: stream 0 waits for the communication stream's collectives.
static void dp_order_on_main(DataParallel* dp) { cudaCheck(cudaStreamWaitEvent(0, dp->comm_done, 0)); }

// Before a collective on comm_stream: it waits for stream 0's work so far (its collectives included).
static void dp_order_on_comm(DataParallel* dp) {
    cudaCheck(cudaEventRecord(dp->grads_ready, 0));
    cudaCheck(cudaStreamWaitEvent(dp->comm_stream, dp->grads_ready, 0));
}

// -op 1's bytes of a ring collective (llmc/op_events.cuh): what one of n ranks sends of a buffer of
// `bytes` (every rank's share): 2 (n - 1) / n of it in an all-reduce, (n - 1) / n in a
// reduce-scatter or all-gather.
static double ring_bytes(double bytes, int n, int all_reduce) {
    return n > 1 ? (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes : 0.0;
}

// Elements of the scratch one group of units (a layer, or wte, wpe, lnfw, lnfb) needs: its
// slices (recv) and zero-padded copies of its units that S does not divide (pad).
static void group_scratch(const ShardLayout* layout, size_t* recv, size_t* pad) {
    *recv = 0;
    *pad = 0;
    for (int layer = -1; layer < layout->num_layers; layer++) {
        int first, count;
        layer_units(layout, layer, &first, &count);
        size_t r = 0, p = 0;
        for (int u = first; u < first + count; u++) {
            const ShardUnit* unit = &layout->units[u];
            r += unit->slice;
            if (unit->size != unit->slice * layout->S) { p += unit->slice * layout->S; }
        }
        if (r > *recv) { *recv = r; }
        if (p > *pad) { *pad = p; }
    }
}

static void dp_init(DataParallel* dp, ncclComm_t world, int rank, int world_size, const GPT2Config* c, int zero_stage,
                    int dp_shard) {
    Mesh* mesh = &dp->mesh;
    mesh_init(mesh, world_size, rank, dp_shard);
    dp->zero_stage = zero_stage;
    dp->last_micro_step = 0;
    dp->world = world;
    ncclCheck(ncclCommSplit(world, mesh->replicate_idx, mesh->shard_idx, &dp->shard, NULL));
    ncclCheck(ncclCommSplit(world, mesh->shard_idx, mesh->replicate_idx, &dp->replica, NULL));
    watch_comm(dp->shard);
    watch_comm(dp->replica);
    shard_layout_init(&dp->layout, c, mesh->dp_shard);
    dp->owned = zero_stage == 0 ? gpt2_num_parameters(c) : dp->layout.shard_elements;
    cudaCheck(cudaStreamCreateWithFlags(&dp->comm_stream, cudaStreamNonBlocking));
    cudaEvent_t* events[] = {&dp->grads_ready, &dp->comm_done, &dp->slot_free[0], &dp->slot_free[1], &dp->host_event};
    for (int i = 0; i < 5; i++) { cudaCheck(cudaEventCreateWithFlags(events[i], cudaEventDisableTiming)); }
    cudaCheck(cudaEventCreateWithFlags(&dp->update_done, cudaEventDisableTiming));
    dp->params_ready = (cudaEvent_t*)malloc_check((c->num_layers + 1) * sizeof(cudaEvent_t));
    for (int i = 0; i <= c->num_layers; i++) {
        cudaCheck(cudaEventCreateWithFlags(&dp->params_ready[i], cudaEventDisableTiming));
    }
    dp->shard_grads = NULL;
    dp->group_pad = NULL;
    dp->group_recv = NULL;
    if (zero_stage != 0) {
        dp->shard_grads = (float*)device_alloc(round_up(dp->layout.shard_elements, mesh->dp_replicate) * sizeof(float));
        size_t recv, pad;
        group_scratch(&dp->layout, &recv, &pad);
        dp->group_recv = (floatX*)device_alloc(recv * sizeof(floatX));
        if (pad > 0) { dp->group_pad = (floatX*)device_alloc(pad * sizeof(floatX)); }
    }
    dp->loss = (float*)device_alloc(mesh->world * sizeof(float));
    dp->norm = (float*)device_alloc((mesh->dp_shard + NORM_BLOCKS) * sizeof(float));
    dp->replica_reduce = 1;
    memset(&dp->grad_wire, 0, sizeof(dp->grad_wire));
    dp->outer = NULL;
    dp->outer_m = NULL;
    dp->outer_msg = NULL;
    dp->crc_buf = NULL;
    dp->num_frags = 0;
    dp->runs = NULL;
    dp->frag_runs = NULL;
    dp->frag_count = NULL;
    dp->pend_off = NULL;
    dp->exchanged = NULL;
    dp->residual = NULL;
    dp->wire_send = NULL;
    dp->wire_recv = NULL;
    dp->pend_sum = NULL;
    dp->pend_snap = NULL;
    dp->spans = (OwnedSpan*)malloc_check(dp->layout.num_units * sizeof(OwnedSpan));
    dp->num_spans = owned_spans(&dp->layout, zero_stage, mesh->shard_idx, gpt2_num_parameters(c), dp->spans);
}

static int frag_run_order(const void* pa, const void* pb) { // by fragment, then in owned order
    const FragRun *a = (const FragRun*)pa, *b = (const FragRun*)pb;
    if (a->fragment != b->fragment) { return a->fragment < b->fragment ? -1 : 1; }
    return a->owned_offset < b->owned_offset ? -1 : (a->owned_offset > b->owned_offset);
}

// -ls: every unit's owned elements as a run of its fragment (outer_unit_fragment; F <= 1: one),
// packed as the CPU trainer packs them: a unit's owned length is its size (ZeRO 0) or its slice,
// padding included (stages 1, 2).
static void dp_init_fragments(DataParallel* dp, int F) {
    F = F > 1 ? F : 1;
    int U = dp->layout.num_units, s = dp->mesh.shard_idx;
    dp->num_frags = F;
    dp->runs = (FragRun*)malloc_check(U * sizeof(FragRun));
    size_t* len = (size_t*)malloc_check(U * sizeof(size_t));
    for (int u = 0; u < U; u++) {
        const ShardUnit* unit = &dp->layout.units[u];
        FragRun* r = &dp->runs[u];
        size_t first = 0;
        r->count = dp->zero_stage == 0 ? unit->size : unit_owned(unit, s, &first);
        r->param_offset = unit->offset + first;
        r->owned_offset = dp->zero_stage == 0 ? unit->offset : unit->shard_offset;
        r->fragment = outer_unit_fragment(unit, dp->layout.num_layers, F);
    }
    qsort(dp->runs, U, sizeof(FragRun), frag_run_order);
    dp->frag_runs = (int*)calloc_check(F + 1, sizeof(int));
    dp->frag_count = (size_t*)calloc_check(F, sizeof(size_t));
    for (int i = 0; i < U; i++) { // the unit's owned length: the next run's start in owned order
        FragRun* r = &dp->runs[i];
        size_t next = dp->owned;
        for (int j = 0; j < U; j++) {
            size_t o = dp->runs[j].owned_offset;
            if (o > r->owned_offset && o < next) { next = o; }
        }
        len[i] = next - r->owned_offset;
        r->packed = dp->frag_count[r->fragment];
        dp->frag_count[r->fragment] += len[i];
        dp->frag_runs[r->fragment + 1] = i + 1;
    }
    for (int f = 1; f <= F; f++) { if (dp->frag_runs[f] < dp->frag_runs[f - 1]) { dp->frag_runs[f] = dp->frag_runs[f - 1]; } }
    free(len);
    dp->pend_off = (size_t*)calloc_check(F + 1, sizeof(size_t));
    for (int f = 0; f < F; f++) { dp->pend_off[f + 1] = dp->pend_off[f] + round_up(dp->frag_count[f], dp->mesh.dp_replicate); }
    dp->exchanged = (cudaEvent_t*)malloc_check(F * sizeof(cudaEvent_t));
    for (int f = 0; f < F; f++) { cudaCheck(cudaEventCreateWithFlags(&dp->exchanged[f], cudaEventDisableTiming)); }
}

// -rq/-rk (w compressed): the encoded messages (R slices of `slice` values in w, sent; R received,
// and R of the owners' encodings (-rk: R times the kept values) gathered) and with feedback the
// residual (zero, one per owned element).
static void dp_wire_alloc(DataParallel* dp, const WireSpec* w, size_t slice, int feedback) {
    int R = dp->mesh.dp_replicate;
    WireSpec owner = *w;
    owner.mult = R;
    size_t sent = wire_spec_bytes(w, slice), gathered = wire_spec_bytes(&owner, slice);
    dp->wire_send = (uint8_t*)device_alloc(R * sent);
    dp->wire_recv = (uint8_t*)device_alloc(R * (sent > gathered ? sent : gathered));
    if (feedback) {
        dp->residual = (float*)device_alloc(dp->owned * sizeof(float));
        cudaCheck(cudaMemset(dp->residual, 0, dp->owned * sizeof(float)));
    }
}

// -ls 0 with -rq/-rk: the wire buffers for the owned gradient (padded to R slices) and, ZeRO 0, its
// fp32 message buffer (stages 1, 2 send shard_grads in place). Not in the memory line but the residual.
static void dp_gradient_wire_alloc(DataParallel* dp, const WireSpec* w, int feedback) {
    size_t padded = round_up(dp->owned, dp->mesh.dp_replicate);
    dp_wire_alloc(dp, w, padded / dp->mesh.dp_replicate, feedback);
    if (dp->zero_stage == 0) { dp->outer_msg = (float*)device_alloc(padded * sizeof(float)); }
}

// -ls: the outer state (zeroed; outer_init fills it), ZeRO 0's message buffer (owned elements
// padded to a multiple of dp_replicate; not in the printed memory, which is the closed form of
// llmc/accounting.h) and the CRC all-gather's buffer; the fragments (-lf F); -rq/-rk (w not NULL):
// dp_wire_alloc for the largest fragment; -lo: the held sums and local values (not in the memory line).
static void dp_outer_alloc(DataParallel* dp, int F, const WireSpec* w, int feedback, int overlap) {
    int R = dp->mesh.dp_replicate;
    dp->outer = (float*)device_alloc(dp->owned * sizeof(float));
    dp->outer_m = (float*)device_alloc(dp->owned * sizeof(float));
    dp->crc_buf = (float*)device_alloc(2 * (size_t)R * sizeof(float));
    if (dp->zero_stage == 0) { dp->outer_msg = (float*)device_alloc(round_up(dp->owned, R) * sizeof(float)); }
    dp_init_fragments(dp, F);
    if (w) {
        size_t most = 0;
        for (int f = 0; f < dp->num_frags; f++) {
            size_t n = round_up(dp->frag_count[f], R) / R;
            if (n > most) { most = n; }
        }
        dp_wire_alloc(dp, w, most, feedback);
    }
    if (overlap > 0) {
        dp->pend_sum = (float*)device_alloc(dp->pend_off[dp->num_frags] * sizeof(float));
        dp->pend_snap = (float*)device_alloc(dp->owned * sizeof(float));
        cudaCheck(cudaMemset(dp->pend_sum, 0, dp->pend_off[dp->num_frags] * sizeof(float)));
        cudaCheck(cudaMemset(dp->pend_snap, 0, dp->owned * sizeof(float)));
    }
}

static void dp_free(DataParallel* dp) {
    void* bufs[] = {dp->shard_grads, dp->group_pad, dp->group_recv, dp->loss, dp->norm, dp->outer, dp->outer_m,
                    dp->outer_msg, dp->crc_buf, dp->residual, dp->wire_send, dp->wire_recv, dp->pend_sum,
                    dp->pend_snap};
    for (int i = 0; i < 14; i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    for (int f = 0; f < dp->num_frags; f++) { cudaCheck(cudaEventDestroy(dp->exchanged[f])); }
    free(dp->exchanged);
    free(dp->runs);
    free(dp->frag_runs);
    free(dp->frag_count);
    free(dp->pend_off);
    free(dp->spans);
    cudaEvent_t events[] = {dp->grads_ready, dp->comm_done, dp->slot_free[0], dp->slot_free[1], dp->host_event,
                            dp->update_done};
    for (int i = 0; i < 6; i++) { cudaCheck(cudaEventDestroy(events[i])); }
    for (int i = 0; i <= dp->layout.num_layers; i++) { cudaCheck(cudaEventDestroy(dp->params_ready[i])); }
    free(dp->params_ready);
    cudaCheck(cudaStreamDestroy(dp->comm_stream));
    ncclCheck(ncclCommDestroy(dp->shard));
    ncclCheck(ncclCommDestroy(dp->replica));
    shard_layout_free(&dp->layout);
}

// Where a unit's full gradient lives.
static floatX* unit_grad(const GPT2* m, const ShardUnit* u) {
    return u->layer >= 0 ? grad_slice(m, u->tensor, u->layer) : m->grads[u->tensor];
}

// On comm_stream: reduce-scatters units [first, first + count) (a layer's, or the globals) over the
// shard group (in floatX) in one NCCL group, then adds this rank's slices of the sums (contiguous
// in the shard layout, as in group_recv) into the fp32 shard accumulator in one launch. A group's
// collectives start at ncclGroupEnd, so each unit has its own send and receive space. Returns the
// slices' elements.
static size_t dp_reduce_scatter_group(DataParallel* dp, GPT2* m, int first, int count) {
    int S = dp->mesh.dp_shard;
    cudaStream_t cs = dp->comm_stream;
    floatX* pad = dp->group_pad;
    ncclCheck(ncclGroupStart());
    size_t received = 0;
    for (int u = first; u < first + count; u++) {
        const ShardUnit* unit = &dp->layout.units[u];
        const floatX* send = unit_grad(m, unit);
        if (unit->size != unit->slice * S) { // issued before the group's collectives run
            cudaCheck(cudaMemcpyAsync(pad, send, unit->size * sizeof(floatX), cudaMemcpyDeviceToDevice, cs));
            cudaCheck(cudaMemsetAsync(pad + unit->size, 0, (unit->slice * S - unit->size) * sizeof(floatX), cs));
            send = pad;
            pad += unit->slice * S;
        }
        ncclCheck(ncclReduceScatter(send, dp->group_recv + received, unit->slice, ncclFloatX, ncclSum, dp->shard, cs));
        received += unit->slice;
    }
    ncclCheck(ncclGroupEnd());
    accumulate(dp->shard_grads + dp->layout.units[first].shard_offset, dp->group_recv, received, cs);
    return received;
}

// On comm_stream, after the update (stages 1, 2): the parameters all-gathered from every rank's
// slices, one NCCL group per layer (wte, wpe, lnfw, lnfb first: the forward needs them first),
// each followed by its params_ready event. Units S does not divide go through a zero-padded copy.
// fragment >= 0 (-lf, of F): that fragment's units only.
static void dp_all_gather_units(DataParallel* dp, GPT2* m, int fragment, int F) {
    int s = dp->mesh.shard_idx, S = dp->mesh.dp_shard, L = dp->layout.num_layers;
    cudaStream_t cs = dp->comm_stream;
    cudaCheck(cudaEventRecord(dp->update_done, 0));
    cudaCheck(cudaStreamWaitEvent(cs, dp->update_done, 0));
    int span = op_span_begin(OP_COMM, cs);
    size_t gathered = 0;
    for (int layer = -1; layer < dp->layout.num_layers; layer++) {
        int first, count;
        layer_units(&dp->layout, layer, &first, &count);
        floatX* pad = dp->group_pad;
        ncclCheck(ncclGroupStart());
        for (int u = first; u < first + count; u++) {
            const ShardUnit* unit = &dp->layout.units[u];
            if (fragment >= 0 && outer_unit_fragment(unit, L, F) != fragment) { continue; }
            gathered += unit->slice;
            size_t mine;
            size_t owned = unit_owned(unit, s, &mine);
            floatX* p = m->params_memory + unit->offset;
            if (unit->size == unit->slice * S) {
                ncclCheck(ncclAllGather(p + mine, p, unit->slice, ncclFloatX, dp->shard, cs));
                continue;
            }
            cudaCheck(cudaMemcpyAsync(pad + mine, p + mine, owned * sizeof(floatX), cudaMemcpyDeviceToDevice, cs));
            cudaCheck(cudaMemsetAsync(pad + mine + owned, 0, (unit->slice - owned) * sizeof(floatX), cs));
            ncclCheck(ncclAllGather(pad + mine, pad, unit->slice, ncclFloatX, dp->shard, cs));
            pad += unit->slice * S;
        }
        ncclCheck(ncclGroupEnd());
        pad = dp->group_pad;
        for (int u = first; u < first + count; u++) {
            const ShardUnit* unit = &dp->layout.units[u];
            if (fragment >= 0 && outer_unit_fragment(unit, L, F) != fragment) { continue; }
            if (unit->size == unit->slice * S) { continue; }
            floatX* p = m->params_memory + unit->offset;
            cudaCheck(cudaMemcpyAsync(p, pad, unit->size * sizeof(floatX), cudaMemcpyDeviceToDevice, cs));
            pad += unit->slice * S;
        }
        cudaCheck(cudaEventRecord(dp->params_ready[layer + 1], cs));
    }
    op_span_end(span, 0.0, ring_bytes((double)gathered * S * sizeof(floatX), S, 0));
    cudaCheck(cudaEventRecord(dp->comm_done, cs));
}

static void dp_all_gather_params(DataParallel* dp, GPT2* m) { dp_all_gather_units(dp, m, -1, 1); }

// The forward's hook (ParamsWaitFn): stream 0 waits for layer's gathered weights.
static void dp_params_wait(void* ctx, int layer) {
    DataParallel* dp = (DataParallel*)ctx;
    if (dp->zero_stage != 0) {
        OP_SPAN(OP_COMM, 0, 0.0, 0.0, cudaCheck(cudaStreamWaitEvent(0, dp->params_ready[layer + 1], 0)));
    }
}

// Stream 0 waits for every collective issued so far (before the parameters are read other than by a forward).
static void dp_comm_wait(DataParallel* dp) {
    cudaCheck(cudaStreamWaitEvent(0, dp->comm_done, 0));
}

// The host waits, with the deadline and NCCL's error checks (wait_device), for every collective
// issued so far and stream 0's work: before a blocking copy of what they write.
static void dp_host_wait_comm(DataParallel* dp, const char* what) {
    dp_comm_wait(dp);
    wait_device(0, dp->host_event, what);
}

// Before a micro-step's backward writes gradients: stream 0 waits for the reductions still
// reading (and, in stage 2, clearing) them. The forward before it overlaps them.
static void dp_backward_begin(DataParallel* dp) {
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, cudaCheck(cudaStreamWaitEvent(0, dp->comm_done, 0)));
}

// Backward hook (GradsReadyFn): the layer's reduce-scatters go onto comm_stream when this stage
// reduces in this micro-step (llmc/mesh.h).
static void dp_grads_ready(void* ctx, GPT2* m, int layer) {
    DataParallel* dp = (DataParallel*)ctx;
    if (!zero_reduces_in_micro_step(dp->zero_stage, dp->last_micro_step)) { return; }
    cudaStream_t cs = dp->comm_stream;
    dp_order_on_comm(dp); // after the layer's gradients (and stream 0's collectives)
    int first, count;
    layer_units(&dp->layout, layer, &first, &count);
    int span = op_span_begin(OP_COMM, cs);
    size_t slices = dp_reduce_scatter_group(dp, m, first, count);
    if (dp->zero_stage == 2) {
        for (int u = first; u < first + count; u++) {
            const ShardUnit* unit = &dp->layout.units[u];
            cudaCheck(cudaMemsetAsync(unit_grad(m, unit), 0, unit->size * sizeof(floatX), cs));
        }
    }
    int S = dp->mesh.dp_shard;
    op_span_end(span, 0.0, ring_bytes((double)slices * S * sizeof(floatX), S, 0));
    if (dp->zero_stage == 2 && layer >= 0) {
        cudaCheck(cudaEventRecord(dp->slot_free[layer % m->grad_layers], cs));
        // the next layer down reuses the slot of the layer above this one
        if (layer > 0) {
            OP_SPAN(OP_COMM, 0, 0.0, 0.0,
                    cudaCheck(cudaStreamWaitEvent(0, dp->slot_free[(layer - 1) % m->grad_layers], 0)));
        }
    }
    cudaCheck(cudaEventRecord(dp->comm_done, cs));
}

static void dp_wire_exchange(DataParallel* dp, const WireSpec* w, float* dst, size_t slice, cudaStream_t cs);

// -ls 0 with -rq/-rk, the CPU trainer's dp_replica_sum_gradient: the owned gradient summed over
// the shard group (ZeRO 0: an all-reduce on stream 0, then copied as fp32 into outer_msg; stages 1,
// 2: shard_grads, the reduce-scattered sums) plus the residual, padded to R slices, encoded (the
// residual keeps what that lost) and summed over the replicas (dp_wire_exchange), then divided by
// the world, all on comm_stream; stream 0 waits for it.
static void dp_compressed_gradients(DataParallel* dp, GPT2* m) {
    int R = dp->mesh.dp_replicate, S = dp->mesh.dp_shard;
    size_t padded = round_up(dp->owned, R);
    if (dp->zero_stage == 0 && S > 1) {
        int span = op_span_begin(OP_COMM, 0);
        dp_order_on_main(dp);
        size_t p = round_up(m->num_parameters, S);
        ncclCheck(ncclAllReduce(m->grads_memory, m->grads_memory, p, ncclFloatX, ncclSum, dp->shard, 0));
        op_span_end(span, 0.0, ring_bytes((double)p * sizeof(floatX), S, 1));
    }
    cudaStream_t cs = dp->comm_stream;
    dp_order_on_comm(dp);
    float* msg = dp->zero_stage == 0 ? dp->outer_msg : dp->shard_grads;
    WireSpec w = outer_wire_spec(&dp->grad_wire, 0, R);
    wire_gradient_message(msg, dp->zero_stage == 0 ? m->grads_memory : NULL, dp->residual, dp->owned, padded, cs);
    wire_spec_encode_slices(&w, msg, padded / R, R, dp->wire_send, dp->residual != NULL, cs);
    if (dp->residual) {
        cudaCheck(cudaMemcpyAsync(dp->residual, msg, dp->owned * sizeof(float), cudaMemcpyDeviceToDevice, cs));
    }
    dp_wire_exchange(dp, &w, msg, padded / R, cs);
    float inv = 1.0f / (float)dp->mesh.world;
    if (dp->zero_stage == 0) {
        wire_gradient_back(m->grads_memory, msg, dp->owned, inv, cs);
    } else {
        scale(dp->shard_grads, dp->owned, inv, cs);
    }
    cudaCheck(cudaEventRecord(dp->comm_done, cs));
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, cudaCheck(cudaStreamWaitEvent(0, dp->comm_done, 0)));
}

// After the last micro-step: the reduction finished across ranks and averaged over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients;
// -ls 0 with -rq/-rk: dp_compressed_gradients).
static void dp_finish_gradients(DataParallel* dp, GPT2* m) {
    int W = dp->mesh.world, S = dp->mesh.dp_shard;
    if (dp->replica_reduce && dp->mesh.dp_replicate > 1 && outer_compressed(&dp->grad_wire)) {
        dp_compressed_gradients(dp, m);
        return;
    }
    if (dp->zero_stage == 0) {
        int span = op_span_begin(OP_COMM, 0);
        dp_order_on_main(dp);
        double bytes = 0.0;
        if (dp->replica_reduce && W > 1) {
            ncclCheck(ncclAllReduce(m->grads_memory, m->grads_memory, m->grads_elements, ncclFloatX, ncclAvg, dp->world, 0));
            bytes = ring_bytes((double)m->grads_elements * sizeof(floatX), W, 1);
        } else if (!dp->replica_reduce && S > 1) {
            size_t padded = round_up(m->num_parameters, S);
            ncclCheck(ncclAllReduce(m->grads_memory, m->grads_memory, padded, ncclFloatX, ncclAvg, dp->shard, 0));
            bytes = ring_bytes((double)padded * sizeof(floatX), S, 1);
        }
        op_span_end(span, 0.0, bytes);
        return;
    }
    cudaStream_t cs = dp->comm_stream;
    dp_order_on_comm(dp);
    int span = op_span_begin(OP_COMM, cs);
    double bytes = 0.0;
    if (dp->replica_reduce && dp->mesh.dp_replicate > 1) {
        size_t padded = round_up(dp->layout.shard_elements, dp->mesh.dp_replicate);
        ncclCheck(ncclAllReduce(dp->shard_grads, dp->shard_grads, padded, ncclFloat, ncclSum, dp->replica, cs));
        bytes = ring_bytes((double)padded * sizeof(float), dp->mesh.dp_replicate, 1);
    }
    scale(dp->shard_grads, dp->layout.shard_elements, 1.0f / (float)(dp->replica_reduce ? W : S), cs);
    op_span_end(span, 0.0, bytes);
    cudaCheck(cudaEventRecord(dp->comm_done, cs));
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, cudaCheck(cudaStreamWaitEvent(0, dp->comm_done, 0)));
}

// The norm of the full averaged gradient (stages 1, 2: the slices' squares summed over the
// shard group only; the replicas hold copies, or under -ls between syncs each its own gradient,
// whose norm this is). The step's one host wait before the update.
static float dp_grad_norm(DataParallel* dp, GPT2* m) {
    int S = dp->mesh.dp_shard;
    if (dp->zero_stage == 0) {
        OP_SPAN(OP_GRAD_NORM, 0, 0.0, (double)m->num_parameters * sizeof(floatX),
                sum_of_squares(dp->norm, m->grads_memory, m->num_parameters, dp->norm + S));
    } else {
        OP_SPAN(OP_GRAD_NORM, 0, 0.0, (double)dp->layout.shard_elements * sizeof(float),
                sum_of_squares(dp->norm, dp->shard_grads, dp->layout.shard_elements, dp->norm + S));
        int span = op_span_begin(OP_COMM, 0);
        dp_order_on_main(dp);
        if (S > 1) { ncclCheck(ncclAllReduce(dp->norm, dp->norm, S, ncclFloat, ncclSum, dp->shard, 0)); }
        op_span_end(span, 0.0, ring_bytes((double)S * sizeof(float), S, 1));
    }
    wait_device(0, dp->host_event, "the gradient norm");
    float sq;
    cudaCheck(cudaMemcpy(&sq, dp->norm, sizeof(float), cudaMemcpyDeviceToHost));
    return sqrtf(sq);
}

// -op 1's bytes of an AdamW update of o->n elements with gradients of grad_size bytes: the
// parameters (floatX), m, v (and master weights) read and written, the gradients read.
static double adamw_bytes(const Optimizer* o, size_t grad_size) {
    double per = 2.0 * sizeof(floatX) + (double)grad_size + 4.0 * sizeof(float);
    if (o->master) { per += 2.0 * sizeof(float); }
    return per * (double)o->n;
}

// AdamW (t = 1-based step) on what this rank owns (one launch, stream 0), then (stages 1, 2) the
// parameter all-gathers on comm_stream (dp_all_gather_params). Each slice draws the
// stochastic-rounding bits its whole tensor would.
static void dp_optimizer_step(DataParallel* dp, GPT2* m, Optimizer* o, const AdamWConfig* h, float grad_scale, int t,
                              uint32_t seed) {
    if (dp->zero_stage == 0) {
        OP_SPAN(OP_ADAMW, 0, 0.0, adamw_bytes(o, sizeof(floatX)), optimizer_step(o, m, h, grad_scale, t, seed));
        return;
    }
    float bias1, bias2;
    adamw_bias_corrections(h, t, &bias1, &bias2);
    int s = dp->mesh.shard_idx;
    if (!o->table_built) { // this rank's slice of every unit, one segment each
        adamw_multi_init(&o->table, dp->layout.num_units);
        for (int u = 0; u < dp->layout.num_units; u++) {
            const ShardUnit* unit = &dp->layout.units[u];
            size_t first;
            size_t count = unit_owned(unit, s, &first);
            size_t in_tensor = (unit->layer >= 0 ? unit->layer * unit->size : 0) + first;
            adamw_multi_add(&o->table, unit->offset + first, unit->shard_offset, count, in_tensor, unit->tensor,
                            parameter_is_matrix[unit->tensor]);
        }
        adamw_multi_upload(&o->table);
        o->table_built = 1;
    }
    OP_SPAN(OP_ADAMW, 0, 0.0, adamw_bytes(o, sizeof(float)),
            adamw_multi_update(&o->table, m->params_memory, o->master, dp->shard_grads, o->m, o->v, h->lr, h->beta1,
                               h->beta2, h->eps, h->weight_decay, grad_scale, bias1, bias2,
                               seed + (uint32_t)t * NUM_PARAMETER_TENSORS));
    dp_all_gather_params(dp, m);
}

static void dp_zero_shard_grads(DataParallel* dp) {
    if (dp->shard_grads) {
        size_t n = round_up(dp->layout.shard_elements, dp->mesh.dp_replicate);
        cudaCheck(cudaMemsetAsync(dp->shard_grads, 0, n * sizeof(float), 0));
    }
}

// The mean of the per-rank values summed into dp->loss[0], over every rank: one all-reduce and
// one host wait.
static float dp_mean_over_world(DataParallel* dp, const char* what) {
    int W = dp->mesh.world;
    int span = op_span_begin(OP_COMM, 0);
    dp_order_on_main(dp); // e.g. after the shard group's parameter all-gathers, on every rank
    if (W > 1) { ncclCheck(ncclAllReduce(dp->loss, dp->loss, W, ncclFloat, ncclSum, dp->world, 0)); }
    op_span_end(span, 0.0, ring_bytes((double)W * sizeof(float), W, 1));
    wait_device(0, dp->host_event, what);
    float sum;
    cudaCheck(cudaMemcpy(&sum, dp->loss, sizeof(float), cudaMemcpyDeviceToHost));
    return sum / (float)W;
}

// The owned parameters as fp32 host values: everything (stage 0) or this rank's slices, in the
// shard layout, padding 0 (the master weights' initial values).
static float* dp_owned_values(const DataParallel* dp, const float* params) {
    float* out = (float*)calloc_check(dp->owned, sizeof(float));
    if (dp->zero_stage == 0) {
        memcpy(out, params, dp->owned * sizeof(float));
        return out;
    }
    for (int u = 0; u < dp->layout.num_units; u++) {
        const ShardUnit* unit = &dp->layout.units[u];
        size_t first;
        size_t count = unit_owned(unit, dp->mesh.shard_idx, &first);
        memcpy(out + unit->shard_offset, params + unit->offset + first, count * sizeof(float));
    }
    return out;
}

// ----------------------------------------------------------------------------
// -ls: the outer sync of the replicas (llmc/outer_sync.h) on this rank's owned elements, the CPU
// trainer's semantics. A rank's local parameters are its owned elements of the fp32 master
// weights where the optimizer keeps them (master, in owned order), else of the floatX parameters
// (at the owned spans). Everything here waits for the last parameter all-gather first (it writes
// the parameters the owned spans lie in); outer syncs are rare.

// dst (dp->owned fp32 host values, owned order, padding 0) = the owned floatX parameters.
static void dp_download_owned(DataParallel* dp, const GPT2* m, float* dst) {
    dp_host_wait_comm(dp, "the owned parameters");
    memset(dst, 0, dp->owned * sizeof(float));
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        download_floatX(dst + sp->owned_offset, m->params_memory + sp->param_offset, sp->count);
    }
}

// The owned floatX parameters = src (owned order, fp32 host values), then (stages 1, 2) the
// all-gather inside the replica, so that its ranks hold the same full parameters again; stream 0
// waits for it.
static void dp_upload_owned(DataParallel* dp, GPT2* m, const float* src) {
    dp_comm_wait(dp);
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        upload_floatX(m->params_memory + sp->param_offset, src + sp->owned_offset, sp->count);
    }
    if (dp->zero_stage == 0) { return; }
    dp_all_gather_params(dp, m);
    dp_comm_wait(dp);
    wait_device(0, dp->host_event, "the all-gather of the resumed parameters");
}

// outer = the owned local parameters (fp32), the outer momentum 0 (stream 0).
static void dp_outer_init(DataParallel* dp, GPT2* m, const float* master) {
    dp_comm_wait(dp);
    cudaCheck(cudaMemsetAsync(dp->outer, 0, dp->owned * sizeof(float), 0));
    cudaCheck(cudaMemsetAsync(dp->outer_m, 0, dp->owned * sizeof(float), 0));
    for (int i = 0; i < dp->num_spans; i++) {
        const OwnedSpan* sp = &dp->spans[i];
        size_t o = sp->owned_offset;
        outer_local(dp->outer + o, master ? master + o : NULL, m->params_memory + sp->param_offset, sp->count);
    }
}

// The sum over the replicas of dst (R slices of `slice` values, packed), into dst, on cs; records
// comm_done. Dense fp32: one all-reduce. A format or -rk (w; wire_send: this replica's R slices,
// encoded on stream 0), as the CPU trainer's owners do (llmc/outer_sync.h): slice j goes to replica j
// (one group of ncclSend/ncclRecv; its own by a copy), which decodes the R it holds and sums them in
// fp32 in replica order 0..R-1 and encodes that sum (the owner's spec: -rk keeps R times the values)
// into its place of wire_recv; the owners' encodings are all-gathered and every replica (the owner
// too) decodes all R. Bytes per rank: (R-1) slices in w and (R-1) in the owner's spec, the CPU's
// closed form; wire_recv: R slices of the larger.
static void dp_wire_exchange(DataParallel* dp, const WireSpec* w, float* dst, size_t slice, cudaStream_t cs) {
    int R = dp->mesh.dp_replicate, me = dp->mesh.replicate_idx, dense = w->format == WIRE_FP32 && w->density == 0.0f;
    if (dense && R == 1) { return; }
    int span = op_span_begin(OP_COMM, cs);
    if (dense) {
        ncclCheck(ncclAllReduce(dst, dst, slice * R, ncclFloat, ncclSum, dp->replica, cs));
        op_span_end(span, 0.0, ring_bytes((double)slice * R * sizeof(float), R, 1));
    } else {
        WireSpec owner = *w;
        owner.mult = R;
        size_t bytes = wire_spec_bytes(w, slice), obytes = wire_spec_bytes(&owner, slice);
        uint8_t *send = dp->wire_send, *recv = dp->wire_recv;
        ncclCheck(ncclGroupStart());
        for (int j = 0; j < R; j++) {
            if (j == me) { continue; }
            ncclCheck(ncclSend(send + j * bytes, bytes, ncclUint8, j, dp->replica, cs));
            ncclCheck(ncclRecv(recv + j * bytes, bytes, ncclUint8, j, dp->replica, cs));
        }
        ncclCheck(ncclGroupEnd());
        cudaCheck(cudaMemcpyAsync(recv + me * bytes, send + me * bytes, bytes, cudaMemcpyDeviceToDevice, cs));
        float* mine = dst + (size_t)me * slice;
        wire_spec_decode_sum(w, mine, recv, slice, 1, R, cs);
        wire_spec_encode_slices(&owner, mine, slice, 1, recv + me * obytes, 0, cs);
        ncclCheck(ncclAllGather(recv + me * obytes, recv, obytes, ncclUint8, dp->replica, cs));
        wire_spec_decode_sum(&owner, dst, recv, slice, R, 1, cs);
        op_span_end(span, 0.0, (double)(R - 1) * (double)(bytes + obytes));
    }
    cudaCheck(cudaEventRecord(dp->comm_done, cs));
}

// The spec of an exchange under c (fp32, dense, where -rqs has not switched yet).
static WireSpec dp_wire_spec(const OuterConfig* c) {
    WireSpec fp32 = {WIRE_FP32, 0.0f, 1};
    return outer_compressed(c) ? outer_wire_spec(c, 0, 1) : fp32;
}

// Fragment c->fragment's exchange (the whole model without -lf), the CPU trainer's: each owned
// element's outer_message (plus its residual with -rq/-rk and feedback) packed into dst (the fragment's
// owned elements in owned order, zero-padded to R slices), then the sum over the replicas into dst
// (dp_wire_exchange). -rq/-rk: every slice encoded on stream 0 (llmc/wire_kernels.cuh; the residual
// keeps what that lost). snap (-lo): receives the fragment's owned local values. Stream 0 first
// waits for every collective issued (the parameters' all-gather, an earlier exchange still reading
// wire_send); the collectives and the sum run on comm_stream, which records comm_done and the
// fragment's `exchanged` event.
static void dp_fragment_exchange(DataParallel* dp, GPT2* m, float* master, const OuterConfig* c, float* dst,
                                 float* snap) {
    int R = dp->mesh.dp_replicate, f = c->fragment;
    WireSpec w = dp_wire_spec(c);
    size_t padded = round_up(dp->frag_count[f], R), slice = padded / R;
    const float* res = outer_compressed(c) ? dp->residual : NULL;
    dp_comm_wait(dp);
    cudaCheck(cudaMemsetAsync(dst, 0, padded * sizeof(float), 0));
    for (int i = dp->frag_runs[f]; i < dp->frag_runs[f + 1]; i++) {
        const FragRun* r = &dp->runs[i];
        size_t o = r->owned_offset;
        const float* mw = master ? master + o : NULL;
        if (snap) { outer_local(snap + o, mw, m->params_memory + r->param_offset, r->count); }
        outer_span_message(dst + r->packed, dp->outer + o, mw, m->params_memory + r->param_offset, res ? res + o : NULL,
                           r->count, outer_plain_average(c));
    }
    if (outer_compressed(c)) {
        wire_spec_encode_slices(&w, dst, slice, R, dp->wire_send, res != NULL, 0);
        for (int i = dp->frag_runs[f]; res && i < dp->frag_runs[f + 1]; i++) { // the residual back in owned order
            const FragRun* r = &dp->runs[i];
            cudaCheck(cudaMemcpyAsync(dp->residual + r->owned_offset, dst + r->packed, r->count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, 0));
        }
    }
    cudaStream_t cs = dp->comm_stream;
    dp_order_on_comm(dp);
    dp_wire_exchange(dp, &w, dst, slice, cs);
    cudaCheck(cudaEventRecord(dp->exchanged[f], cs));
}

// The outer step of fragment c->fragment with its summed messages `sum` (packed): outer_update on
// each owned element (the new local value to master and the floatX parameter; snap, -lo: merged with
// the local values held at the exchange's start), the mean pseudo-gradient back into sum and its
// squares summed (over the shard group in stages 1, 2), then (stages 1, 2) the all-gather of the
// fragment's units inside the replica, which the next forward waits for layer by layer. Returns
// the squared norm (one host wait).
static float dp_fragment_apply(DataParallel* dp, GPT2* m, float* master, const OuterConfig* c, float* sum,
                               const float* snap) {
    int R = dp->mesh.dp_replicate, S = dp->mesh.dp_shard, f = c->fragment;
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, cudaCheck(cudaStreamWaitEvent(0, dp->exchanged[f], 0)));
    dp_comm_wait(dp); // the parameters' last all-gather
    float inv_R = 1.0f / (float)R;
    for (int i = dp->frag_runs[f]; i < dp->frag_runs[f + 1]; i++) {
        const FragRun* r = &dp->runs[i];
        size_t o = r->owned_offset;
        outer_span_update(dp->outer + o, dp->outer_m + o, sum + r->packed, master ? master + o : NULL,
                          m->params_memory + r->param_offset, snap ? snap + o : NULL, r->count, inv_R, c);
    }
    sum_of_squares(dp->norm, sum, round_up(dp->frag_count[f], R), dp->norm + S);
    if (dp->zero_stage != 0) {
        int span = op_span_begin(OP_COMM, 0);
        dp_order_on_main(dp);
        if (S > 1) { ncclCheck(ncclAllReduce(dp->norm, dp->norm, S, ncclFloat, ncclSum, dp->shard, 0)); }
        op_span_end(span, 0.0, ring_bytes((double)S * sizeof(float), S, 1));
        dp_all_gather_units(dp, m, dp->num_frags > 1 ? f : -1, dp->num_frags);
    }
    wait_device(0, dp->host_event, "the outer sync");
    float sq;
    cudaCheck(cudaMemcpy(&sq, dp->norm, sizeof(float), cudaMemcpyDeviceToHost));
    return sq;
}

// The outer step of fragment c->fragment in phase c->phase (llmc/outer_sync.h): OUTER_BLOCKING
// exchanges in the idle buffer (stages 1, 2: shard_grads; ZeRO 0: outer_msg) and applies at once;
// OUTER_START (-lo) exchanges into the fragment's held sum and keeps its owned local values, without
// waiting (the exchange runs on comm_stream beside the next steps); OUTER_FINISH applies the held sum
// once its `exchanged` event has passed. Returns the applied squared norm (0 for OUTER_START).
static float dp_outer_step(DataParallel* dp, GPT2* m, float* master, const OuterConfig* c) {
    int f = c->fragment;
    if (c->phase == OUTER_BLOCKING) {
        float* buf = dp->zero_stage == 0 ? dp->outer_msg : dp->shard_grads;
        dp_fragment_exchange(dp, m, master, c, buf, NULL);
        return dp_fragment_apply(dp, m, master, c, buf, NULL);
    }
    float* held = dp->pend_sum + dp->pend_off[f];
    if (c->phase == OUTER_START) {
        dp_fragment_exchange(dp, m, master, c, held, dp->pend_snap);
        return 0.0f;
    }
    return dp_fragment_apply(dp, m, master, c, held, dp->pend_snap);
}

// The CRC-32C of the owned outer parameters (outer 1: all owned elements, padding included) or
// of the owned local parameters as fp32 (0: span by span, no padding), as the CPU trainer computes
// them, all-gathered over the replicas (2 floats each, llmc/outer_sync.h).
static void dp_replica_crcs(DataParallel* dp, GPT2* m, const float* master, int outer, uint32_t* crcs) {
    int R = dp->mesh.dp_replicate, me = dp->mesh.replicate_idx;
    float* host = (float*)malloc_check((dp->owned > 2 * (size_t)R ? dp->owned : 2 * (size_t)R) * sizeof(float));
    uint32_t crc = 0;
    if (outer) { // written on stream 0 (-lo: an exchange may still run on comm_stream)
        wait_device(0, dp->host_event, "the outer parameters");
        cudaCheck(cudaMemcpy(host, dp->outer, dp->owned * sizeof(float), cudaMemcpyDeviceToHost));
        crc = crc32c_update(0, host, dp->owned * sizeof(float));
    } else {
        if (master) {
            cudaCheck(cudaMemcpy(host, master, dp->owned * sizeof(float), cudaMemcpyDeviceToHost));
        } else {
            dp_download_owned(dp, m, host);
        }
        for (int i = 0; i < dp->num_spans; i++) {
            crc = crc32c_update(crc, host + dp->spans[i].owned_offset, dp->spans[i].count * sizeof(float));
        }
    }
    float mine[2];
    crc_to_floats(crc, mine);
    cudaCheck(cudaMemcpy(dp->crc_buf + 2 * me, mine, sizeof(mine), cudaMemcpyHostToDevice));
    dp_order_on_main(dp);
    ncclCheck(ncclAllGather(dp->crc_buf + 2 * me, dp->crc_buf, 2, ncclFloat, dp->replica, 0));
    wait_device(0, dp->host_event, "the replicas' CRC-32Cs");
    cudaCheck(cudaMemcpy(host, dp->crc_buf, 2 * (size_t)R * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(host + 2 * r); }
    free(host);
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
    DataParallel dp;
    Optimizer opt;
    uint32_t seed; // stochastic rounding (-rs)
} GpuTrainer;

static void gpu_begin_step(void* ctx) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    gpt2_zero_grads(&g->model);
    dp_zero_shard_grads(&g->dp);
    cudaCheck(cudaMemsetAsync(g->dp.loss, 0, g->dp.mesh.world * sizeof(float), 0));
}

// No host wait on the device here: the tokens go up asynchronously (upload_tokens); the step's
// host waits (with NCCL's error checks and the deadline) are the grad norm's and the loss's.
static void gpu_micro_step(void* ctx, const int* inputs, const int* targets, int B, int T, float dloss, int last) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    watchdog_span_begin("a micro-step's kernel launches"); // a full launch queue blocks behind a hung collective
    gpt2_forward_device(&g->model, inputs, targets, B, T, dloss);
    loss_accumulate(g->dp.loss, g->model.acts.losses, B * T, dloss);
    g->dp.last_micro_step = last;
    dp_backward_begin(&g->dp);
    gpt2_backward(&g->model, B, T, dp_grads_ready, &g->dp);
    watchdog_span_end();
}

static float gpu_reduce_gradients(void* ctx) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dp_finish_gradients(&g->dp, &g->model);
    return dp_grad_norm(&g->dp, &g->model);
}

static void gpu_update(void* ctx, const AdamWConfig* h, float grad_scale, int t) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dp_optimizer_step(&g->dp, &g->model, &g->opt, h, grad_scale, t, g->seed);
}

// The loss (slot 0 of dp.loss, times loss_factor) and the preemption vote (slot 1) in the one
// all-reduce of the loss slots.
static float gpu_agree(void* ctx, float loss_factor, float vote, float* votes) {
    DataParallel* dp = &((GpuTrainer*)ctx)->dp;
    static float host_vote; // outlives the asynchronous copy
    host_vote = vote;
    if (loss_factor != 1.0f) { scale(dp->loss, 1, loss_factor, 0); }
    if (dp->mesh.world > 1) {
        cudaCheck(cudaMemcpyAsync(dp->loss + 1, &host_vote, sizeof(float), cudaMemcpyHostToDevice, 0));
    }
    float mean = dp_mean_over_world(dp, "the step's loss");
    float got[2] = {0.0f, vote};
    if (dp->mesh.world > 1) { cudaCheck(cudaMemcpy(got, dp->loss, 2 * sizeof(float), cudaMemcpyDeviceToHost)); }
    *votes = got[1];
    return mean;
}

// Mean loss over the val batches, all-reduced over every rank (summed on the device).
static float gpu_evaluate(void* ctx, DataLoader* val, int batches) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dataloader_reset(val);
    cudaCheck(cudaMemsetAsync(g->dp.loss, 0, g->dp.mesh.world * sizeof(float), 0));
    for (int i = 0; i < batches; i++) {
        dataloader_next(val);
        gpt2_forward_device(&g->model, val->inputs, val->targets, val->B, val->T, 0.0f);
        loss_accumulate(g->dp.loss, g->model.acts.losses, val->B * val->T, 1.0f / (float)batches);
    }
    return dp_mean_over_world(&g->dp, "the validation loss");
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

// The sum over every rank of one count per rank (exact below 2^24), through the loss slots.
static int gpu_sum_count(void* ctx, int count) {
    DataParallel* dp = &((GpuTrainer*)ctx)->dp;
    float v = (float)count;
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->mesh.world * sizeof(float), 0));
    cudaCheck(cudaMemcpy(dp->loss, &v, sizeof(float), cudaMemcpyHostToDevice));
    return (int)lroundf(dp_mean_over_world(dp, "a count summed over the ranks (HellaSwag, the checkpoint agreement)") * (float)dp->mesh.world);
}

// The model file: v5 (bf16) in BF16, v3 (fp32) in FP32.
static void gpu_write_model(void* ctx, const char* path, uint32_t* crc) {
    GPT2* m = &((GpuTrainer*)ctx)->model;
    dp_host_wait_comm(&((GpuTrainer*)ctx)->dp, "the parameters before writing the model"); // the last all-gathers
    float* params = (float*)malloc_check(m->num_parameters * sizeof(float));
    gpt2_download_params(m, params);
    gpt2_write_model_crc(path, &m->config, params, sizeof(floatX) == 4 ? MODEL_VERSION_FP32 : MODEL_VERSION_BF16,
                         crc);
    free(params);
}

// -lo: the held sums (device, packed per fragment) as host values in owned order (to_owned 1;
// padding 0, as the CPU trainer's state files hold them), or back from them.
static void dp_pending_sums(DataParallel* dp, float* owned_order, int to_owned) {
    size_t total = dp->pend_off[dp->num_frags];
    float* packed = (float*)calloc_check(total, sizeof(float));
    if (to_owned) {
        cudaCheck(cudaMemcpy(packed, dp->pend_sum, total * sizeof(float), cudaMemcpyDeviceToHost));
        memset(owned_order, 0, dp->owned * sizeof(float));
    }
    for (int f = 0; f < dp->num_frags; f++) {
        for (int i = dp->frag_runs[f]; i < dp->frag_runs[f + 1]; i++) {
            const FragRun* r = &dp->runs[i];
            float* held = packed + dp->pend_off[f] + r->packed;
            float* own = owned_order + r->owned_offset;
            memcpy(to_owned ? own : held, to_owned ? held : own, r->count * sizeof(float));
        }
    }
    if (!to_owned) { cudaCheck(cudaMemcpy(dp->pend_sum, packed, total * sizeof(float), cudaMemcpyHostToDevice)); }
    free(packed);
}

// This rank's m, v (and master weights) through a host copy; with -ls also its owned local
// parameters (the floatX parameters as fp32, exact; the replicas differ between syncs), the
// outer state, the residual (-rq) and, with -lo exchanges in flight, the local snapshots and the
// held sums (once every exchange has landed).
static void gpu_write_state(void* ctx, const char* path, const TrainState* s) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    Optimizer* o = &g->opt;
    DataParallel* dp = &g->dp;
    size_t n = o->n;
    float* host = (float*)malloc_check(n * sizeof(float) * STATE_ARRAYS);
    StateArrays arrays = {{host, host + n, NULL, NULL, NULL, NULL}};
    cudaCheck(cudaMemcpy(host, o->m, n * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(host + n, o->v, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (o->master) {
        arrays.a[STATE_MASTER] = host + STATE_MASTER * n;
        cudaCheck(cudaMemcpy(arrays.a[STATE_MASTER], o->master, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (s->has_local) {
        arrays.a[STATE_LOCAL] = host + STATE_LOCAL * n;
        dp_download_owned(dp, &g->model, arrays.a[STATE_LOCAL]);
    }
    if (s->has_outer) {
        arrays.a[STATE_OUTER] = host + STATE_OUTER * n;
        arrays.a[STATE_OUTER_M] = host + STATE_OUTER_M * n;
        cudaCheck(cudaMemcpy(arrays.a[STATE_OUTER], dp->outer, n * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(arrays.a[STATE_OUTER_M], dp->outer_m, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (s->has_pending) { // every exchange landed first (comm_stream)
        dp_host_wait_comm(dp, "the -lo exchanges in flight");
        arrays.a[STATE_PEND_SNAP] = host + STATE_PEND_SNAP * n;
        arrays.a[STATE_PEND_SUM] = host + STATE_PEND_SUM * n;
        cudaCheck(cudaMemcpy(arrays.a[STATE_PEND_SNAP], dp->pend_snap, n * sizeof(float), cudaMemcpyDeviceToHost));
        dp_pending_sums(dp, arrays.a[STATE_PEND_SUM], 1);
    }
    if (s->has_residual) {
        arrays.a[STATE_RESIDUAL] = host + STATE_RESIDUAL * n;
        dp_host_wait_comm(dp, "the residual"); // written on stream 0 at an exchange's start
        cudaCheck(cudaMemcpy(arrays.a[STATE_RESIDUAL], dp->residual, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    state_write_arrays(path, s, &arrays);
    free(host);
}

// m, v (and master weights); with -ls the owned local parameters (written into the floatX
// parameters, then all-gathered inside the replica) and the outer state, where the checkpoint
// holds them.
static void gpu_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    Optimizer* o = &g->opt;
    DataParallel* dp = &g->dp;
    size_t n = o->n;
    float* host = (float*)malloc_check(STATE_ARRAYS * n * sizeof(float));
    StateArrays arrays = {{host, host + n, NULL, NULL, NULL, NULL}};
    if (o->master) { arrays.a[STATE_MASTER] = host + STATE_MASTER * n; }
    if (dp->outer) {
        for (int k = STATE_LOCAL; k <= STATE_OUTER_M; k++) { arrays.a[k] = host + k * n; }
    }
    if (dp->residual) { arrays.a[STATE_RESIDUAL] = host + STATE_RESIDUAL * n; }
    if (dp->pend_sum) {
        arrays.a[STATE_PEND_SNAP] = host + STATE_PEND_SNAP * n;
        arrays.a[STATE_PEND_SUM] = host + STATE_PEND_SUM * n;
    }
    state_load_arrays(dir, step, target, got, &arrays);
    cudaCheck(cudaMemcpy(o->m, host, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(o->v, host + n, n * sizeof(float), cudaMemcpyHostToDevice));
    if (o->master && got->has_master) {
        cudaCheck(cudaMemcpy(o->master, arrays.a[STATE_MASTER], n * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (got->has_local) { dp_upload_owned(dp, &g->model, arrays.a[STATE_LOCAL]); }
    if (got->has_outer) {
        cudaCheck(cudaMemcpy(dp->outer, arrays.a[STATE_OUTER], n * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dp->outer_m, arrays.a[STATE_OUTER_M], n * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (dp->residual && got->has_residual) {
        cudaCheck(cudaMemcpy(dp->residual, arrays.a[STATE_RESIDUAL], n * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (got->has_pending) {
        cudaCheck(cudaMemcpy(dp->pend_snap, arrays.a[STATE_PEND_SNAP], n * sizeof(float), cudaMemcpyHostToDevice));
        dp_pending_sums(dp, arrays.a[STATE_PEND_SUM], 0);
    }
    free(host);
}

// An all-reduce of the (zeroed) loss slots: returns once every rank got there.
static void gpu_barrier(void* ctx) {
    DataParallel* dp = &((GpuTrainer*)ctx)->dp;
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->mesh.world * sizeof(float), 0));
    dp_mean_over_world(dp, "the checkpoint barrier");
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

static void gpu_set_replica_reduce(void* ctx, int every_step) { ((GpuTrainer*)ctx)->dp.replica_reduce = every_step; }

static void gpu_set_gradient_wire(void* ctx, const OuterConfig* c) { ((GpuTrainer*)ctx)->dp.grad_wire = *c; }

static void gpu_outer_init(void* ctx) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dp_outer_init(&g->dp, &g->model, g->opt.master);
}

static float gpu_outer_step(void* ctx, const OuterConfig* c) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    return dp_outer_step(&g->dp, &g->model, g->opt.master, c);
}

static void gpu_replica_crcs(void* ctx, int outer, uint32_t* crcs) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    dp_replica_crcs(&g->dp, &g->model, g->opt.master, outer, crcs);
}

static const TrainerOps gpu_trainer_ops = {gpu_begin_step, gpu_micro_step, gpu_reduce_gradients, gpu_update,
                                           gpu_agree, gpu_evaluate, gpu_next_logits, gpu_write_model,
                                           gpu_write_state, gpu_read_state, gpu_barrier, GPU_COMM_BYTES_SENT,
                                           gpu_eval_losses, gpu_sum_count, GPU_PEAK_TFLOPS, GPU_PEAK_SOURCE,
                                           "train_gpt2 " PRECISION_NAME, gpu_set_replica_reduce, gpu_outer_init,
                                           gpu_outer_step, gpu_replica_crcs, gpu_set_gradient_wire, 1};

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
#endif
    char why[512];
    int device = process_device(proc.local_rank, devices, why, sizeof(why));
    if (device < 0) { fail("%s", why); }
    cudaCheck(cudaSetDevice(device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    ncclComm_t world_comm = nccl_world_init(&proc, args.init_method, args.init_path, args.server_ip, args.server_port);
    watch_comm(world_comm);
    int world = proc.world, rank = proc.rank, zero = args.zero_stage;
    matmul_init();
    matmul_ctx.gelu_fusion = args.gelu_fusion;

    TrainRun run;
    float* params = run_load_model(&run, &args, world, rank);
    GpuTrainer gpu;
    gpu.seed = (uint32_t)args.seed;
    dp_init(&gpu.dp, world_comm, rank, world, &run.config, zero, args.dp_shard);
    int outer_state = args.outer_every > 0;
    WireSpec wire = {wire_format_from_name(args.wire_name), args.topk, 1};
    int compressed = wire.format != WIRE_FP32 || wire.density > 0.0f;
    if (args.link_mbps > 0.0f) { fail("-rb %g: the modelled link is train_gpt2cpu's only", args.link_mbps); }
    if (outer_state) {
        dp_outer_alloc(&gpu.dp, args.fragments, compressed ? &wire : NULL, args.error_feedback, args.overlap);
    } else if (compressed) {
        dp_gradient_wire_alloc(&gpu.dp, &wire, args.error_feedback);
    }
    gpt2_build(&gpu.model, &run.config, params, args.B, args.T, args.recompute,
               grad_layers_for_stage(zero, run.config.num_layers), zero == 0 ? (size_t)world : 1);
    gpu.model.att_cudnn = attention_use_cudnn(args.attention, run.config.channels, run.config.num_heads);
    gpu.model.params_wait = dp_params_wait;
    gpu.model.params_ctx = &gpu.dp;
    float* owned_init = dp_owned_values(&gpu.dp, params);
    optimizer_init(&gpu.opt, gpu.dp.owned, args.master_weights, owned_init);
    free(owned_init);
    free(params);
    run_prepare(&run, &gpu.dp.mesh, zero, gpu.opt.n, gpu.opt.master != NULL, &gpu_trainer_ops, &gpu);

    MemoryBytes mem = memory_bytes_per_rank(&gpu.dp.layout, zero, gpu.model.num_parameters, sizeof(floatX),
                                            sizeof(floatX), gpu.opt.master != NULL, gpu.model.grad_layers,
                                            outer_state);
    mem.activations = gpu.model.activation_bytes;
    mem.residual = gpu.dp.residual ? gpu.dp.owned * sizeof(float) : 0;
    if (gpu.dp.pend_sum) { // -lo (the -rq exchange buffers, used with or without it, are not in the line)
        mem.overlap_snap = gpu.dp.owned * sizeof(float);
        mem.overlap_held = gpu.dp.pend_off[gpu.dp.num_frags] * sizeof(float);
        mem.overlap = mem.overlap_snap + mem.overlap_held;
    }
    CommBytes comm = comm_bytes_per_step(&gpu.dp.layout, &gpu.dp.mesh, zero, run.grad_accum,
                                         gpu.model.num_parameters, sizeof(floatX), sizeof(floatX), &run.outer);
    char extra[640];
    snprintf(extra, sizeof(extra),
             "start-up: -pi %s | ranks from %s | NCCL %d.%d.%d | GPU %s\n"
             "device: %s | precision %s | recompute %d | master weights %s | GELU %s\n"
             "attention: %s\n",
             args.init_method, proc.source, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
             devices == 1 ? "0 of 1 visible" : "= local rank", prop.name, PRECISION_NAME,
             args.recompute, gpu.opt.master ? "fp32" : "none", args.gelu_fusion ? "cuBLASLt epilogues" : "ours",
             attention_name(gpu.model.att_cudnn, gpu.model.config.channels, gpu.model.config.num_heads));
    run_print_start(&run, gpu.model.num_parameters, &mem, &comm, extra);

    if (args.op_profile) {
        int side = zero != 0 || args.outer_every > 0 || compressed; // the communication stream runs collectives
        op_events_init(side ? "the communication stream (reduce-scatters, all-reduces, all-gathers)" : NULL);
        op_profile.peak_unknown = args.peak_tflops <= 0.0f; // the default peak is a datasheet's, not this device's
    }
    run_train(&run, &gpu_trainer_ops, &gpu);
    op_events_free();

    run_free(&run);
    optimizer_free(&gpu.opt);
    gpt2_free(&gpu.model);
    dp_free(&gpu.dp);
    ncclCheck(ncclCommDestroy(world_comm));
    num_watched_comms = 0;
    matmul_free();
    if (proc.use_mpi) { MPI_Finalize(); }
    return 0;
}
#endif
