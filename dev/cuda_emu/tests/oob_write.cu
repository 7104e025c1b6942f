// oob_write.cu: a kernel with an off-by-one bug (it writes one element past the end of a cudaMalloc
// buffer). The emulator's ASan build must stop it with a heap-buffer-overflow report.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill_one_too_many(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;  // bug: i == n is out of bounds
}

int main() {
    const int n = 256;
    float* d;
    cudaMalloc(&d, n * sizeof(float));
    fill_one_too_many<<<2, 256>>>(d, n);
    cudaDeviceSynchronize();
    cudaFree(d);
    printf("no error detected\n");
    return 0;
}
