// The small kernels of the sharded gradient path (ZeRO 1 and 2): adding a reduce-scattered
// slice into the fp32 shard accumulator, and scaling it by 1 / world.
#ifndef LLMC_SHARD_KERNELS_CUH
#define LLMC_SHARD_KERNELS_CUH

#include "cuda_common.cuh"

// acc[i] += x[i]: a reduce-scattered floatX slice into the fp32 shard accumulator.
__global__ void accumulate_kernel(float* acc, const floatX* x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        acc[i] += to_f(x[i]);
    }
}

static void accumulate(float* acc, const floatX* x, size_t n, cudaStream_t stream) {
    unsigned int blocks = ceil_div_u(n, 256);
    accumulate_kernel<<<blocks > 4096 ? 4096 : blocks, 256, 0, stream>>>(acc, x, n);
    cudaLaunchCheck();
}

__global__ void scale_kernel(float* x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        x[i] *= s;
    }
}

static void scale(float* x, size_t n, float s, cudaStream_t stream) {
    unsigned int blocks = ceil_div_u(n, 256);
    scale_kernel<<<blocks > 4096 ? 4096 : blocks, 256, 0, stream>>>(x, n, s);
    cudaLaunchCheck();
}

#endif
