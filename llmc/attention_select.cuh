// Which attention the GPU trainer runs (-at ours | cudnn) and the two calls that dispatch to it:
// our kernels (llmc/attention_fa2*.cuh for BF16 head sizes 32, 64, 128, llmc/attention.cuh for the rest) or cuDNN's SDPA (llmc/cudnn_att.h, built with make USE_CUDNN=1,
// which defines ENABLE_CUDNN). Both keep the same buffers: out (B, T, C), lse (B, NH, T) fp32 (the
// natural log-sum-exp per query row, which is cuDNN's softmax stats), dqkv (B, T, 3C) written.
// The default is cuDNN where it is built in (BF16), our kernels elsewhere (docs/gpu.md says why).
#ifndef LLMC_ATTENTION_SELECT_CUH
#define LLMC_ATTENTION_SELECT_CUH

#include "attention.cuh"
#ifndef ENABLE_FP32
#include "attention_fa2_backward.cuh"
#endif
#if defined(ENABLE_CUDNN) && !defined(ENABLE_FP32)
#include "cudnn_att.h"
#define ATT_HAVE_CUDNN 1
#endif

// -at cudnn where this build cannot serve it: a one-line error at start-up (before any rank starts).
static void attention_flag_check(const char* at) {
    if (strcmp(at, "cudnn") != 0) { return; }
#ifndef ENABLE_CUDNN
    fail("-at cudnn: this train_gpt2 was built without cuDNN (build it with make USE_CUDNN=1)");
#elif !defined(ATT_HAVE_CUDNN)
    fail("-at cudnn: cuDNN's attention is BF16 only and this is the FP32 build (PRECISION=FP32)");
#endif
}

// -at (one of "", "ours", "cudnn": llmc/args.h) for a model: 1 for cuDNN, 0 for ours.
static int attention_use_cudnn(const char* at, int C, int NH) {
    attention_flag_check(at);
#ifdef ATT_HAVE_CUDNN
    int hs = C / NH;
    if (hs % 8 != 0 || hs > 128) { // cuDNN's flash attention: head sizes 8..128 in steps of 8 (sm_80 and up)
        if (strcmp(at, "cudnn") == 0) {
            fail("-at cudnn: head size %d (C %d / NH %d) is not a multiple of 8 up to 128", hs, C, NH);
        }
        return 0;
    }
    return strcmp(at, "ours") != 0;
#else
    (void)C; (void)NH;
    return 0;
#endif
}

static const char* attention_name(int cudnn, int C, int NH) {
    if (cudnn) { return "cuDNN SDPA (frontend graph, bf16, fp32 softmax stats)"; }
#ifndef ENABLE_FP32
    if (fa2_head_size_ok(C / NH)) {
        return "tensor-core flash attention (mma.sync, ldmatrix, cp.async; bf16, head size 32, 64 or 128)";
    }
#endif
    return attention_path(C, NH);
}

static void attention_forward_select(int cudnn, floatX* out, float* lse, const floatX* qkv, int B, int T, int C,
                                     int NH) {
#ifdef ATT_HAVE_CUDNN
    if (cudnn) {
        const char* err = cudnn_att_forward(out, lse, qkv, B, T, C, NH, 0);
        if (err) { fail("-at cudnn: %s", err); }
        return;
    }
#endif
    (void)cudnn;
#ifndef ENABLE_FP32
    if (fa2_head_size_ok(C / NH)) {
        attention_forward_fa2(out, lse, qkv, B, T, C, NH);
        return;
    }
#endif
    attention_forward_scalar(out, lse, qkv, B, T, C, NH);
}

// delta (B, NH, T) fp32 scratch: our kernels' only (cuDNN keeps its own in its workspace)
static void attention_backward_select(int cudnn, floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* lse, int B, int T, int C, int NH) {
#ifdef ATT_HAVE_CUDNN
    if (cudnn) {
        const char* err = cudnn_att_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 0);
        if (err) { fail("-at cudnn: %s", err); }
        return;
    }
#endif
    (void)cudnn;
#ifndef ENABLE_FP32
    if (fa2_head_size_ok(C / NH)) {
        attention_backward_fa2(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
        return;
    }
#endif
    attention_backward_scalar(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
}

static void attention_select_free(int cudnn) {
#ifdef ATT_HAVE_CUDNN
    if (cudnn) { cudnn_att_free(); }
#endif
    (void)cudnn;
}

#endif
