// The fused classifier: per row of logits, softmax, the cross-entropy loss and (when asked)
// dlogits = (softmax - onehot(target)) * dloss written over the logits, in two passes over the
// row: one read for the online max and sum, one that turns each logit into its gradient.
// Only the first V of Vp columns take part; the padded columns' gradient is 0.
#ifndef LLMC_CLASSIFIER_CUH
#define LLMC_CLASSIFIER_CUH

#include "cuda_common.cuh"

#define CLASSIFIER_THREADS 256

__global__ void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss,
                                        int write_dlogits, int V, int Vp) {
    int row = blockIdx.x;
    floatX* x = logits + (size_t)row * Vp;
    int target = targets[row];
    float target_logit = to_f(x[target]);
    float m = -INFINITY, sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = to_f(x[i]);
        if (v > m) { sum = sum * expf(m - v) + 1.0f; m = v; }
        else { sum += expf(v - m); }
    }
    float maxv = block_max(m);
    float total = block_sum(m == -INFINITY ? 0.0f : sum * expf(m - maxv));
    if (threadIdx.x == 0) { losses[row] = logf(total) + maxv - target_logit; }
    if (!write_dlogits) { return; }
    float inv = 1.0f / total;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float d = 0.0f;
        if (i < V) { d = (expf(to_f(x[i]) - maxv) * inv - (i == target ? 1.0f : 0.0f)) * dloss; }
        x[i] = to_X(d);
    }
}

// losses (N) = per-row loss; with write_dlogits, logits (N, Vp) become dlogits scaled by dloss.
static void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int write_dlogits, int N,
                             int V, int Vp) {
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS>>>(logits, losses, targets, dloss, write_dlogits, V, Vp);
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
