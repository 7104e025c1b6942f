// two_units_kernels.cu: the second CUDA translation unit of two_units_main.cu.
#include <cuda_runtime.h>

__global__ void iota(int* d, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] = k * i;
}

void launch_iota(int* d, int n, int k) { iota<<<(n + 63) / 64, 64>>>(d, n, k); }
