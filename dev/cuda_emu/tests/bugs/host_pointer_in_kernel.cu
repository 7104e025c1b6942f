// Broken: the kernel is given the host (malloc) buffer instead of the device copy.
#include "common.h"
__global__ void negate(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = -in[i];
}
int main() {
    const int n = 300;
    float* h = (float*)malloc(n * sizeof(float));
    float want[n], got[n], *din, *dout;
    for (int i = 0; i < n; i++) { h[i] = (float)i; want[i] = -(float)i; }
    CK(cudaMalloc(&din, n * sizeof(float)));
    CK(cudaMalloc(&dout, n * sizeof(float)));
    CK(cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice));
#ifdef FIXED
    negate<<<(n + 127) / 128, 128>>>(din, dout, n);
#else
    negate<<<(n + 127) / 128, 128>>>(h, dout, n);
#endif
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    free(h);
    return expect_equal(got, want, n, "negate");
}
