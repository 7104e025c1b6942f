// Broken: a kernel on stream b reads what a kernel on stream a wrote, with nothing ordering the two
// streams (no event recorded on a and waited for on b).
#include "common.h"
__global__ void fill(float* x, int n, float v) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v * i; }
__global__ void twice(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }
int main() {
    const int n = 1000;
    float *x, *y, got[n], want[n];
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    fill<<<(n + 255) / 256, 256, 0, a>>>(x, n, 3.0f);
#ifdef FIXED
    cudaEvent_t ready;
    CK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CK(cudaEventRecord(ready, a));
    CK(cudaStreamWaitEvent(b, ready, 0));
#endif
    twice<<<(n + 255) / 256, 256, 0, b>>>(x, y, n);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(b));
    CK(cudaMemcpy(got, y, sizeof(got), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) want[i] = 6.0f * i;
    return expect_equal(got, want, n, "twice");
}
