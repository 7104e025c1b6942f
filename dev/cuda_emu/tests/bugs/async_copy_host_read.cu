// Broken: the host reads the destination of a cudaMemcpyAsync (pinned memory) before it has waited
// for the stream: the copy may not have run yet.
#include "common.h"
__global__ void square(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = (float)i * i; }
int main() {
    const int n = 512;
    float *d, *h, want[n];
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMallocHost(&h, n * sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    square<<<(n + 127) / 128, 128, 0, s>>>(d, n);
    CK(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
#ifdef FIXED
    CK(cudaStreamSynchronize(s));
#endif
    for (int i = 0; i < n; i++) want[i] = (float)i * i;
    int rc = expect_equal(h, want, n, "square");
    CK(cudaStreamSynchronize(s));
    return rc;
}
