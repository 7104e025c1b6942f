// Broken: the kernel's bound check lets one thread write one element past the end of a cudaMalloc
// allocation (which a GPU, rounding allocations up, rarely notices).
#include "common.h"
__global__ void scale(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef FIXED
    if (i < n) x[i] *= 2.0f;
#else
    if (i <= n) x[i] *= 2.0f;
#endif
}
int main() {
    const int n = 1000;
    float h[n], want[n], got[n], *d;
    for (int i = 0; i < n; i++) { h[i] = (float)i; want[i] = 2.0f * i; }
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    scale<<<(n + 255) / 256, 256>>>(d, n);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, d, sizeof(h), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, n, "scale");
}
