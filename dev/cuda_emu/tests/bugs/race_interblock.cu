// Broken: block b reads the partial sum block b-1 wrote in the same launch (blocks run in any order,
// and nothing makes one block's writes visible to another during a launch).
#include "common.h"
__global__ void chain(const float* in, float* partial, float* out) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) {
        partial[b] = in[b];
#ifndef FIXED
        out[b] = b > 0 ? partial[b - 1] + in[b] : in[b];
#endif
    }
}
#ifdef FIXED
__global__ void combine(const float* in, const float* partial, float* out) {
    int b = blockIdx.x;
    if (threadIdx.x == 0) out[b] = b > 0 ? partial[b - 1] + in[b] : in[b];
}
#endif
int main() {
    const int n = 64;
    float h[n], want[n], got[n], *din, *dp, *dout;
    for (int i = 0; i < n; i++) h[i] = (float)(i + 1);
    for (int i = 0; i < n; i++) want[i] = i > 0 ? h[i - 1] + h[i] : h[i];
    CK(cudaMalloc(&din, sizeof(h)));
    CK(cudaMalloc(&dp, sizeof(h)));
    CK(cudaMalloc(&dout, sizeof(h)));
    CK(cudaMemcpy(din, h, sizeof(h), cudaMemcpyHostToDevice));
    chain<<<n, 32>>>(din, dp, dout);
#ifdef FIXED
    combine<<<n, 32>>>(din, dp, dout);
#endif
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dout, sizeof(h), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, n, "chain");
}
