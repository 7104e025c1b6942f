// Broken: the host takes cudaEventQuery's first answer as "done" (anything but cudaErrorNotReady is
// treated as an error) instead of waiting: on a GPU the kernel is usually still running.
#include "common.h"
__global__ void count(int* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = i; }
int main() {
    const int n = 4096;
    int *d, got[n];
    CK(cudaMalloc(&d, sizeof(got)));
    cudaEvent_t done;
    CK(cudaEventCreate(&done));
    count<<<n / 256, 256>>>(d, n);
    CK(cudaEventRecord(done, 0));
#ifdef FIXED
    CK(cudaEventSynchronize(done));
#else
    CK(cudaEventQuery(done));  // cudaErrorNotReady is not an error; it means "not yet"
#endif
    CK(cudaMemcpyAsync(got, d, sizeof(got), cudaMemcpyDeviceToHost, 0));
    CK(cudaStreamSynchronize(0));
    for (int i = 0; i < n; i++)
        if (got[i] != i) { printf("element %d is %d\n", i, got[i]); return 1; }
    printf("count: ok\n");
    return 0;
}
