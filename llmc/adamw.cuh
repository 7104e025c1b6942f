// AdamW on one tensor, and the global gradient norm. AdamW follows the CPU trainer's formula
// step for step; it updates the fp32 master copy when there is one (else the floatX parameter
// read as float) and writes the floatX parameter with stochastic rounding, seeded per step and
// tensor so that runs repeat bit for bit. The norm is a sum of squares over a fixed grid, then
// the block sums added in order: deterministic.
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "cuda_common.cuh"

// G: the gradient type, floatX (whole tensors) or float (a rank's reduced fp32 shard).
// index_offset: where element 0 sits in its tensor, so a slice draws the rounding bits the
// whole tensor would (a sharded update rounds exactly as the unsharded one).
template <class G>
__global__ void adamw_kernel(floatX* params, float* master, const G* grads, float* m, float* v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                             float bias1, float bias2, uint32_t seed, size_t index_offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = to_f(grads[i]) * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bias1, vhat = vi / bias2;
        float p = master ? master[i] : to_f(params[i]);
        p -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
        if (master) { master[i] = p; }
        params[i] = round_stochastic(p, hash_u32((uint32_t)(i + index_offset), seed));
    }
}

template <class G>
static void adamw_update(floatX* params, float* master, const G* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, float bias1,
                         float bias2, uint32_t seed, size_t index_offset = 0) {
    if (n == 0) { return; }
    unsigned int blocks = ceil_div_u(n, 256);
    if (blocks > 4096) { blocks = 4096; }
    adamw_kernel<G><<<blocks, 256>>>(params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                                     bias1, bias2, seed, index_offset);
    cudaLaunchCheck();
}

#define NORM_BLOCKS 256
#define NORM_THREADS 256

template <class T>
__global__ void sum_of_squares_kernel(float* partial, const T* x, size_t n) {
    float s = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = to_f(x[i]);
        s += v * v;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) { partial[blockIdx.x] = s; }
}

// One block: out[0] = sum of the partials, in order of their index within each thread.
__global__ void sum_partials_kernel(float* out, const float* partial, int n) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s += partial[i]; }
    s = block_sum(s);
    if (threadIdx.x == 0) { out[0] = s; }
}

// The sum of squares of x (n elements) into out[0] on the device, no host round trip.
// scratch: NORM_BLOCKS floats.
template <class T>
static void sum_of_squares(float* out, const T* x, size_t n, float* scratch) {
    sum_of_squares_kernel<T><<<NORM_BLOCKS, NORM_THREADS>>>(scratch, x, n);
    cudaLaunchCheck();
    sum_partials_kernel<<<1, NORM_THREADS>>>(out, scratch, NORM_BLOCKS);
    cudaLaunchCheck();
}

// The L2 norm of x (n elements). scratch: NORM_BLOCKS + 1 floats.
static float global_norm(const floatX* x, size_t n, float* scratch) {
    sum_of_squares(scratch + NORM_BLOCKS, x, n, scratch);
    float sq;
    cudaCheck(cudaMemcpy(&sq, scratch + NORM_BLOCKS, sizeof(float), cudaMemcpyDeviceToHost));
    return sqrtf(sq);
}

#endif
