// GELU with the tanh approximation, elementwise, forward and backward, 128 bits at a time, with
// PyTorch's tanh formulas (the CPU trainer's are algebraically equal). The MLP gets GELU from
// these kernels (-ge 0) or from cuBLASLt's epilogues (-ge 1: GELU_AUX_BIAS on the MLP matmul,
// DGELU on the projection's backward matmul; llmc/matmul.cuh). Under recomputation (-r 1 and 2)
// with -ge 0 the backward's one pass rebuilds GELU's output beside its gradient
// (gelu_backward_rebuild); with -ge 1, gelu_forward rebuilds it from the saved pre-activation.
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)

// tanh u, u = sqrt(2/pi) (x + 0.044715 x^3): the one transcendental both directions share, as
// 1 - 2 / (1 + e^(2u)) with e^(2u) = exp2(2u log2 e) and a fast division (about 8 instructions where
// tanhf takes about 25): within about 2e-7 of tanh u absolutely (1 +- t is what GELU and its
// derivative use); +-1 where e^(2u) overflows to inf or underflows to 0.
__device__ __forceinline__ float gelu_tanh(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 1.0f - __fdividef(2.0f, 1.0f + exp2f(2.8853900817779268f * u));
}
// GELU(x) = x (1 + tanh u) / 2, from t = gelu_tanh(x)
__device__ __forceinline__ float gelu_from_t(float x, float t) { return 0.5f * x * (1.0f + t); }
// d GELU(x) / dx = (1 + tanh u) / 2 + x (1 - tanh^2 u) / 2 * du/dx, from t = gelu_tanh(x)
__device__ __forceinline__ float gelu_grad_from_t(float x, float t) {
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ __forceinline__ float gelu_f(float x) { return gelu_from_t(x, gelu_tanh(x)); }
__device__ __forceinline__ float gelu_grad_f(float x) { return gelu_grad_from_t(x, gelu_tanh(x)); }

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

// In: d (n) the gradient of GELU's output, pre (n) the pre-activation. Out: d (n) = d * GELU'(pre),
// in place. One thread per pack; d is read and written through plain (coherent) accesses, not the
// read-only path: the kernel writes it.
__global__ void gelu_backward_inplace_kernel(floatX* d, const floatX* __restrict__ pre, size_t n, bool vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128;
    if (i >= n) { return; }
    int count = n - i < (size_t)X128 ? (int)(n - i) : X128;
    bool full = vec && count == X128;
    Packed128<floatX> x = load_pack(pre + i, full, count), g;
    if (full) {
        *reinterpret_cast<int4*>(&g) = *reinterpret_cast<const int4*>(d + i);
    } else {
        for (int k = 0; k < X128; k++) { g.v[k] = k < count ? d[i + k] : (floatX)0.0f; }
    }
    for (int k = 0; k < X128; k++) { g.v[k] = to_X(g.f(k) * gelu_grad_f(x.f(k))); }
    if (full) {
        *reinterpret_cast<int4*>(d + i) = *reinterpret_cast<const int4*>(&g);
    } else {
        for (int k = 0; k < count; k++) { d[i + k] = g.v[k]; }
    }
}

static void gelu_backward_inplace(floatX* d, const floatX* pre, size_t n) {
    gelu_backward_inplace_kernel<<<ceil_div_u(n, 256 * X128), 256>>>(d, pre, n, aligned16(d) && aligned16(pre));
    cudaLaunchCheck();
}

// In: d (n) the gradient of GELU's output, pre (n) the pre-activation. Out: d (n) = d * GELU'(pre)
// in place, and out (n) = GELU(pre): the backward under recomputation (-r 1, 2) rebuilds the
// forward's GELU output in the same pass, for the projection's weight gradient after it. One read
// of pre and one tanh per element where gelu_forward then gelu_backward_inplace take two of each:
// 4 n elements moved instead of 5 n, one launch instead of two, the same values bit for bit.
__global__ void gelu_backward_rebuild_kernel(floatX* d, floatX* __restrict__ out, const floatX* __restrict__ pre,
                                             size_t n, bool vec) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128;
    if (i >= n) { return; }
    int count = n - i < (size_t)X128 ? (int)(n - i) : X128;
    bool full = vec && count == X128;
    Packed128<floatX> x = load_pack(pre + i, full, count), g, y;
    if (full) {
        *reinterpret_cast<int4*>(&g) = *reinterpret_cast<const int4*>(d + i);
    } else {
        for (int k = 0; k < X128; k++) { g.v[k] = k < count ? d[i + k] : (floatX)0.0f; }
    }
    for (int k = 0; k < X128; k++) {
        float xk = x.f(k), t = gelu_tanh(xk);
        y.v[k] = to_X(gelu_from_t(xk, t));
        g.v[k] = to_X(g.f(k) * gelu_grad_from_t(xk, t));
    }
    store_pack(out + i, y, full, count);
    if (full) {
        *reinterpret_cast<int4*>(d + i) = *reinterpret_cast<const int4*>(&g);
    } else {
        for (int k = 0; k < count; k++) { d[i + k] = g.v[k]; }
    }
}

static void gelu_backward_rebuild(floatX* d, floatX* out, const floatX* pre, size_t n) {
    gelu_backward_rebuild_kernel<<<ceil_div_u(n, 256 * X128), 256>>>(d, out, pre, n,
                                                                      aligned16(d) && aligned16(out) && aligned16(pre));
    cudaLaunchCheck();
}

#endif
