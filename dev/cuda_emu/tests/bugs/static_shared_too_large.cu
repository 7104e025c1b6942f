// Broken: 64 KiB of static __shared__ memory; nvcc (ptxas) refuses more than 48 KiB of static shared
// memory per kernel (larger tiles need dynamic shared memory and cudaFuncSetAttribute).
#include "common.h"
#ifdef FIXED
#define TILE 8192   // 32 KiB
#else
#define TILE 16384  // 64 KiB
#endif
__global__ void reverse(const float* in, float* out) {
    __shared__ float tile[TILE];
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) tile[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < TILE; i += blockDim.x) out[i] = tile[TILE - 1 - i];
}
int main() {
    static float h[TILE], want[TILE];
    for (int i = 0; i < TILE; i++) { h[i] = (float)i; want[i] = (float)(TILE - 1 - i); }
    float* din = device_copy(h, TILE);
    float* dout = device_nan(TILE);
    reverse<<<1, 256>>>(din, dout);
    return expect_device(dout, want, TILE, "reverse");
}
