// -ls on the GPU: the element kernels of the replicas' outer sync (llmc/outer_sync.h), one launch
// per owned span (or -lf run: a unit's owned elements) (a run of a rank's owned elements, contiguous both in the parameters and in the
// owned order of the AdamW and outer state). The math is outer_sync.h's OUTER_HD functions, the
// same the CPU trainer calls in its loops. A span's "local" values are its fp32 master weights
// where the optimizer keeps them, else its floatX parameters read as float.
#ifndef LLMC_OUTER_KERNELS_CUH
#define LLMC_OUTER_KERNELS_CUH

#include "cuda_common.cuh"
#include "outer_sync.h"

#define OUTER_THREADS 256
#define OUTER_MAX_BLOCKS 4096

static unsigned int outer_blocks(size_t n) {
    unsigned int blocks = ceil_div_u(n == 0 ? 1 : n, OUTER_THREADS);
    return blocks > OUTER_MAX_BLOCKS ? OUTER_MAX_BLOCKS : blocks;
}

// dst[i] = the local value of element i: master[i] when master, else params[i] as float.
__global__ void outer_local_kernel(float* __restrict__ dst, const float* __restrict__ master,
                                   const floatX* __restrict__ params, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = master ? master[i] : to_f(params[i]);
    }
}

// msg[i] = outer_message(outer[i], local[i], plain) (+ res[i], the error-feedback residual, where
// res): what this replica sends of element i.
__global__ void outer_message_kernel(float* __restrict__ msg, const float* __restrict__ outer,
                                     const float* __restrict__ master, const floatX* __restrict__ params,
                                     const float* __restrict__ res, size_t n, int plain) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float local = master ? master[i] : to_f(params[i]);
        float d = outer_message(outer[i], local, plain);
        msg[i] = res ? __fadd_rn(d, res[i]) : d;
    }
}

// outer_update on element i: sum[i] holds the messages summed over the replicas and receives the
// mean pseudo-gradient (for its norm); outer[i] and buf[i] are updated in place; the new local
// value goes to master[i] (when master) and to params[i], rounded to nearest (exact in FP32). -lo
// (snap non-NULL: the local values when the exchange started): the new local value is
// outer_merge(outer_new, local_now, snap[i]) instead of outer_new.
__global__ void outer_update_kernel(float* __restrict__ outer, float* __restrict__ buf, float* __restrict__ sum,
                                    float* __restrict__ master, floatX* __restrict__ params,
                                    const float* __restrict__ snap, size_t n, float inv_R, float lr, float momentum,
                                    int plain) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float o = outer[i], b = buf[i], delta;
        float local = outer_update(&o, &b, sum[i], inv_R, lr, momentum, plain, &delta);
        if (snap) { local = outer_merge(local, master ? master[i] : to_f(params[i]), snap[i]); }
        outer[i] = o;
        buf[i] = b;
        sum[i] = delta;
        if (master) { master[i] = local; }
        params[i] = to_X(local);
    }
}

// flag[0] = 1 where any of x[0..n) is not finite, else 0: one block, a fixed reduction (no atomics).
__global__ void outer_nonfinite_kernel(float* flag, const float* __restrict__ x, size_t n) {
    __shared__ int any[OUTER_THREADS];
    int t = threadIdx.x, bad = 0;
    for (size_t i = t; i < n; i += OUTER_THREADS) { bad |= !isfinite(x[i]); }
    any[t] = bad;
    __syncthreads();
    for (int s = OUTER_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) { any[t] |= any[t + s]; }
        __syncthreads();
    }
    if (t == 0) { flag[0] = any[0] ? 1.0f : 0.0f; }
}

static void outer_nonfinite(float* flag, const float* x, size_t n, cudaStream_t stream) {
    outer_nonfinite_kernel<<<1, OUTER_THREADS, 0, stream>>>(flag, x, n);
    cudaLaunchCheck();
}

// The launches (stream 0), one span of n elements each; master may be NULL.
static void outer_local(float* dst, const float* master, const floatX* params, size_t n) {
    if (n == 0) { return; }
    outer_local_kernel<<<outer_blocks(n), OUTER_THREADS>>>(dst, master, params, n);
    cudaLaunchCheck();
}

static void outer_span_message(float* msg, const float* outer, const float* master, const floatX* params,
                               const float* res, size_t n, int plain) {
    if (n == 0) { return; }
    outer_message_kernel<<<outer_blocks(n), OUTER_THREADS>>>(msg, outer, master, params, res, n, plain);
    cudaLaunchCheck();
}

static void outer_span_update(float* outer, float* buf, float* sum, float* master, floatX* params, const float* snap,
                              size_t n, float inv_R, const OuterConfig* c) {
    if (n == 0) { return; }
    outer_update_kernel<<<outer_blocks(n), OUTER_THREADS>>>(outer, buf, sum, master, params, snap, n, inv_R, c->lr,
                                                             c->momentum, outer_plain_average(c));
    cudaLaunchCheck();
}

#endif
