// two_units_main.cu: with two_units_kernels.cu and c_helper.c, a program built from several
// translation units (CUDA, CUDA compiled separately with -c, and C), as emucc must link them.
#include <cstdio>
#include <cuda_runtime.h>

extern "C" int c_scale(int x);           // c_helper.c
void launch_iota(int* d, int n, int k);  // two_units_kernels.cu

__global__ void add_one(int* d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d[i] += 1;
}

int main() {
    const int n = 100;
    int* d;
    int h[n];
    cudaMalloc(&d, n * sizeof(int));
    launch_iota(d, n, c_scale(2));
    add_one<<<(n + 31) / 32, 32>>>(d, n);
    cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    cudaFree(d);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != 6 * i + 1;
    printf("two_units: %d wrong\n", bad);
    return bad != 0;
}
