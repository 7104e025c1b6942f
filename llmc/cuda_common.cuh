// Shared pieces of the CUDA trainer: the precision switch (floatX is __nv_bfloat16 by default,
// float with -DENABLE_FP32), error checks, float <-> floatX conversion, stochastic rounding,
// warp and block reductions, and the deterministic column sums behind every bias and LayerNorm
// parameter gradient (fixed chunks of rows, then the chunks summed in order: no atomics).
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "utils.h"

#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "FP32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "BF16"
#endif

#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
static void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) { fail("CUDA error %s at %s:%d (%s)", cudaGetErrorString(err), file, line, what); }
}
// After a kernel launch: reports a bad launch configuration at once.
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

static unsigned int ceil_div_u(size_t n, size_t d) { return (unsigned int)((n + d - 1) / d); }

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
#ifdef ENABLE_FP32
__device__ __forceinline__ floatX to_X(float x) { return x; }
#else
__device__ __forceinline__ floatX to_X(float x) { return __float2bfloat16(x); }
#endif

// Random bits for element i under a seed (a murmur3-style finaliser of i and the seed).
__device__ __forceinline__ uint32_t hash_u32(uint32_t i, uint32_t seed) {
    uint32_t x = i * 0x9e3779b1u ^ (seed + 0x7f4a7c15u);
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

// floatX from float with stochastic rounding in bf16: adding 16 random low bits before
// truncating rounds up with probability equal to the discarded fraction. Exact in FP32.
__device__ __forceinline__ floatX round_stochastic(float x, uint32_t bits) {
#ifdef ENABLE_FP32
    (void)bits;
    return x;
#else
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) { return __float2bfloat16(x); } // inf and NaN stay
    u += bits & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, o); }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the total.
__device__ inline float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); // part may still be read by a previous call
    if (lane == 0) { part[warp] = v; }
    __syncthreads();
    return warp_sum(lane < warps ? part[lane] : 0.0f);
}

__device__ inline float block_max(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { part[warp] = v; }
    __syncthreads();
    return warp_max(lane < warps ? part[lane] : -INFINITY);
}

// ----------------------------------------------------------------------------
// Column sums of (N, C) row-major data: blocks of 32 columns x COLSUM_ROWS rows write partial
// sums (chunks, C); column_sum_finish adds each column's chunks, in order, into the output.

#define COLSUM_ROWS 256
#define COLSUM_THREADS_Y 8

static int colsum_chunks(int N) { return (N + COLSUM_ROWS - 1) / COLSUM_ROWS; }

// The 8 row-lanes' sums of one column, combined in a fixed order through shared memory.
__device__ inline float colsum_combine(float v, float (*tile)[33]) {
    tile[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    float s = 0.0f;
    if (threadIdx.y == 0) {
        for (int y = 0; y < COLSUM_THREADS_Y; y++) { s += tile[y][threadIdx.x]; }
    }
    return s;
}

// partial[chunk][c] = sum of x[n][c] over the chunk's rows. Block (32, 8), grid (C/32, chunks).
__global__ void bias_partial_kernel(float* partial, const floatX* x, int N, int C) {
    __shared__ float tile[COLSUM_THREADS_Y][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n0 = blockIdx.y * COLSUM_ROWS, n1 = min(n0 + COLSUM_ROWS, N);
    float s = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += COLSUM_THREADS_Y) { s += to_f(x[(size_t)n * C + c]); }
    }
    s = colsum_combine(s, tile);
    if (threadIdx.y == 0 && c < C) { partial[(size_t)blockIdx.y * C + c] = s; }
}

// out[c] += sum over chunks of partial[chunk][c], in chunk order.
__global__ void column_sum_finish_kernel(floatX* out, const float* partial, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) { s += partial[(size_t)k * C + c]; }
    out[c] = to_X(to_f(out[c]) + s);
}

static void column_sum_finish(floatX* out, const float* partial, int chunks, int C) {
    column_sum_finish_kernel<<<ceil_div_u(C, 128), 128>>>(out, partial, chunks, C);
    cudaLaunchCheck();
}

// dbias (C) += column sums of dout (N, C). partial: colsum_chunks(N) * C floats.
static void bias_backward(floatX* dbias, float* partial, const floatX* dout, int N, int C) {
    dim3 grid(ceil_div_u(C, 32), colsum_chunks(N));
    bias_partial_kernel<<<grid, dim3(32, COLSUM_THREADS_Y)>>>(partial, dout, N, C);
    cudaLaunchCheck();
    column_sum_finish(dbias, partial, colsum_chunks(N), C);
}

#endif
