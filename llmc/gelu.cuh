// GELU with the tanh approximation, elementwise. The training forward gets GELU from the
// cuBLASLt epilogue of the MLP matmul; this kernel recomputes it in backward (-r 1 and 2),
// from the saved pre-activation, with the same formula as the CPU trainer.
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)

__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float x = to_f(inp[i]);
    out[i] = to_X(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))));
}

static void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<ceil_div_u(n, 256), 256>>>(out, inp, n);
    cudaLaunchCheck();
}

#endif
