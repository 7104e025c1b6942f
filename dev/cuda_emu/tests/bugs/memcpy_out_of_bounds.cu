// Broken: the copy back asks for one element more than the allocation holds.
#include "common.h"
__global__ void ramp(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] = 0.5f * i; }
int main() {
    const int n = 100;
    float got[n + 1], want[n], *d;
    for (int i = 0; i < n; i++) want[i] = 0.5f * i;
    CK(cudaMalloc(&d, n * sizeof(float)));
    ramp<<<1, 128>>>(d, n);
    CK(cudaGetLastError());
#ifdef FIXED
    CK(cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost));
#else
    CK(cudaMemcpy(got, d, (n + 1) * sizeof(float), cudaMemcpyDeviceToHost));
#endif
    return expect_equal(got, want, n, "ramp");
}
