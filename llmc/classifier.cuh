// The fused classifier: per row of logits, softmax, the cross-entropy loss and (when asked)
// dlogits = (softmax - onehot(target)) * dloss written over the logits, one HBM read and one
// write of the row: a read for the online max and sum, then (from L2) one that turns each logit
// into its gradient, 128 bits at a time.
// Only the first V of Vp columns take part; the padded columns' gradient is 0.
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include "cuda_common.cuh"

#define CLASSIFIER_THREADS 1024

// In: logits (N, Vp), targets (N). Out: losses (N); with write_dlogits, logits become dlogits =
// (softmax - onehot(target)) * dloss (padded columns 0). Nothing else saved. One block per row:
// pass 1 reads the row once from HBM (an online max and sum per thread, one pack of X128 at a time:
// the pack's max first, so the running sum is rescaled at most once per pack and every lane takes
// the same path); pass 2 reads it again (from L2: a 100 KB row per block) and writes softmax times
// dloss over it, then the target's thread writes (softmax - 1) times dloss there. Whole packs take
// loops without per-element tests; the row's last partial pack and the padding their own.
// Exponentials as exp2 of x log2(e) - max log2(e) (one FMA and one exp2 per element).
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    fused_classifier_kernel(floatX* __restrict__ logits, float* __restrict__ losses, const int* __restrict__ targets,
                            float dloss, int write_dlogits, int V, int Vp, bool vec) {
    const float l2e = 1.4426950408889634f;
    const int stride = blockDim.x * X128;
    int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    int target = targets[row];
    float m = -INFINITY, sum = 0.0f;
    int c = threadIdx.x * X128;
    for (; c + X128 <= V; c += stride) { // whole packs
        Packed128<floatX> p = load_pack(x + c, vec, X128);
        float pm = p.f(0);
#pragma unroll
        for (int i = 1; i < X128; i++) { pm = fmaxf(pm, p.f(i)); }
        if (pm > m) {
            sum *= exp2f((m - pm) * l2e); // 0 on the first pack (m = -inf)
            m = pm;
        }
        float ml = m * l2e;
#pragma unroll
        for (int i = 0; i < X128; i++) { sum += exp2f(fmaf(p.f(i), l2e, -ml)); }
    }
    if (c < V) { // the row's last columns, fewer than a pack (one thread: the next pack is past V)
        float pm = -INFINITY;
        for (int j = c; j < V; j++) { pm = fmaxf(pm, to_f(x[j])); }
        if (pm > m) { sum *= exp2f((m - pm) * l2e); m = pm; }
        for (int j = c; j < V; j++) { sum += exp2f(fmaf(to_f(x[j]), l2e, -m * l2e)); }
    }
    float maxv = block_max(m);
    float total = block_sum(m == -INFINITY ? 0.0f : sum * exp2f((m - maxv) * l2e));
    float target_logit = to_f(x[target]);
    if (threadIdx.x == 0) { losses[row] = logf(total) + maxv - target_logit; }
    if (!write_dlogits) { return; }
    __syncthreads(); // every thread has read x[target] before it is overwritten
    float inv = 1.0f / total, maxl = maxv * l2e;
    c = threadIdx.x * X128;
    for (; c + X128 <= V; c += stride) { // whole packs: softmax * dloss (the target's fixed below)
        Packed128<floatX> p = load_pack(x + c, vec, X128), d;
#pragma unroll
        for (int i = 0; i < X128; i++) { d.v[i] = to_X(exp2f(fmaf(p.f(i), l2e, -maxl)) * inv * dloss); }
        store_pack(x + c, d, vec, X128);
    }
    for (; c < Vp; c += stride) { // the last columns and the padding (columns >= V: 0), element-wise
        for (int j = c; j < c + X128 && j < Vp; j++) {
            x[j] = to_X(j < V ? exp2f(fmaf(to_f(x[j]), l2e, -maxl)) * inv * dloss : 0.0f);
        }
    }
    if ((target / X128) % blockDim.x == threadIdx.x) { // after this thread's own store of that pack
        x[target] = to_X((exp2f(fmaf(target_logit, l2e, -maxl)) * inv - 1.0f) * dloss);
    }
}

// losses (N) = per-row loss; with write_dlogits, logits (N, Vp) become dlogits scaled by dloss.
static void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int write_dlogits, int N,
                             int V, int Vp) {
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS>>>(logits, losses, targets, dloss, write_dlogits, V, Vp,
                                                       vec_ok(Vp, sizeof(floatX), logits));
    cudaLaunchCheck();
}

// acc[0] += weight * (mean of losses[0..N)): one block in a fixed order (deterministic), so
// a step's loss stays on the device until the step's one all-reduce.
__global__ void loss_accumulate_kernel(float* acc, const float* losses, int N, float weight) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) { s += losses[i]; }
    s = block_sum(s);
    if (threadIdx.x == 0) { acc[0] += s / (float)N * weight; }
}

static void loss_accumulate(float* acc, const float* losses, int N, float weight) {
    loss_accumulate_kernel<<<1, CLASSIFIER_THREADS>>>(acc, losses, N, weight);
    cudaLaunchCheck();
}

#endif
