// Broken: per-row sums accumulated with atomicAdd into memory that is never zeroed (cudaMalloc does
// not clear memory; on a fresh GPU it often happens to be zero).
#include "common.h"
__global__ void row_sums(const float* x, float* sums, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) atomicAdd(&sums[i / cols], x[i]);
}
int main() {
    const int rows = 16, cols = 100;
    float h[rows * cols], want[rows] = {0}, got[rows], *dx, *ds;
    for (int i = 0; i < rows * cols; i++) { h[i] = (float)(i % 5); want[i / cols] += h[i]; }
    CK(cudaMalloc(&dx, sizeof(h)));
    CK(cudaMalloc(&ds, sizeof(got)));
#ifdef FIXED
    CK(cudaMemset(ds, 0, sizeof(got)));
#endif
    CK(cudaMemcpy(dx, h, sizeof(h), cudaMemcpyHostToDevice));
    row_sums<<<(rows * cols + 255) / 256, 256>>>(dx, ds, rows, cols);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, ds, sizeof(got), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, rows, "row_sums");
}
