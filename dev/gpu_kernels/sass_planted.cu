// Planted faults for the SASS rules: a LayerNorm-named kernel with 2-byte loads, (built with
// -maxrregcount 16) a kernel that keeps 32 values live and so spills, and a residual + LayerNorm
// forward that reads the residual it stored back through a const __restrict__ alias (the
// read-only path), as the trainer's did before issue 24.
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
// (the statistics left out: only the loads matter) res = a + b; out = res * w + bias, res read back
template <int PACKS>
__global__ void residual_layernorm_forward_kernel(float4* res, float4* out, const float4* __restrict__ a,
                                                  const float4* __restrict__ b, const float4* __restrict__ res_again,
                                                  const float4* __restrict__ w, const float4* __restrict__ bias) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        float4 x = a[i + 32 * k], y = b[i + 32 * k];
        res[i + 32 * k] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        float4 r = res_again[i + 32 * k], s = w[32 * k], t = bias[32 * k];
        out[i + 32 * k] = make_float4(r.x * s.x + t.x, r.y * s.y + t.y, r.z * s.z + t.z, r.w * s.w + t.w);
    }
}
template __global__ void residual_layernorm_forward_kernel<3>(float4*, float4*, const float4*, const float4*,
                                                              const float4*, const float4*, const float4*);
