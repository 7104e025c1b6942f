// GELU with the tanh approximation, elementwise. The training forward gets GELU from the
// cuBLASLt epilogue of the MLP matmul, and its backward from the DGELU epilogue of the MLP
// projection's backward matmul; this kernel recomputes GELU in backward (-r 1 and 2) from the
// saved pre-activation, with the same formula as the CPU trainer, 128 bits at a time.
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)

__device__ __forceinline__ float gelu_f(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

// In: inp (n) the pre-activation. Out: out (n) = GELU(inp). Nothing saved (inp is). One thread
// per pack of X128 elements; vec: both pointers 16-byte aligned (else element by element).
__global__ void gelu_forward_kernel(floatX* __restrict__ out, const floatX* __restrict__ inp, size_t n, bool vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128;
    if (i >= n) { return; }
    int count = n - i < (size_t)X128 ? (int)(n - i) : X128;
    bool full = vec && count == X128;
    Packed128<floatX> x = load_pack(inp + i, full, count), y;
    for (int k = 0; k < X128; k++) { y.v[k] = to_X(gelu_f(x.f(k))); }
    store_pack(out + i, y, full, count);
}

static void gelu_forward(floatX* out, const floatX* inp, size_t n) {
    gelu_forward_kernel<<<ceil_div_u(n, 256 * X128), 256>>>(out, inp, n, aligned16(out) && aligned16(inp));
    cudaLaunchCheck();
}

#endif
