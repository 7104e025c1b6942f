// Planted faults for the SASS rules: a LayerNorm-named kernel with 2-byte loads, and (built with
// -maxrregcount 16) a kernel that keeps 32 values live and so spills.
#include <cuda_bf16.h>
__global__ void layernorm_scalar_kernel(__nv_bfloat16* out, const __nv_bfloat16* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = __float2bfloat16(__bfloat162float(in[i]) * 2.0f); }
}
__global__ void pressure_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v[32];
#pragma unroll
    for (int j = 0; j < 32; j++) { v[j] = in[i + j * n]; }
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j++) { acc += v[j] * v[(j * 7 + 3) % 32]; }
#pragma unroll
    for (int j = 0; j < 32; j++) { out[i + j * n] = v[j] * acc; }
}
