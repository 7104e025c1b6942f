// Broken: a kernel compiled for at most 256 threads per block (__launch_bounds__(256)) is launched
// with 512; a GPU refuses the launch, which the error check after it reports.
#include "common.h"
__global__ void __launch_bounds__(256) iota(float* x) { x[blockIdx.x * blockDim.x + threadIdx.x] = (float)(blockIdx.x * blockDim.x + threadIdx.x); }
int main() {
    const int n = 1024;
#ifdef FIXED
    const int threads = 256;
#else
    const int threads = 512;
#endif
    float *d, got[n], want[n];
    for (int i = 0; i < n; i++) want[i] = (float)i;
    CK(cudaMalloc(&d, sizeof(got)));
    iota<<<n / threads, threads>>>(d);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, d, sizeof(got), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, n, "iota");
}
