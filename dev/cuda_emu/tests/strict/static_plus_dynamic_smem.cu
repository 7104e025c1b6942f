// strict-test: expect="a GPU refuses this launch \(cudaErrorInvalidValue\): kernel stage has 48128 bytes of static and 2048 of dynamic"
// Broken: a kernel with 47 KiB of static shared memory (a staging array) and 2 KiB of dynamic shared
// memory, launched without raising its dynamic limit: a block gets 48 KiB in all by default, so the
// dynamic limit is 48 KiB minus the static bytes (1024) and the GPU refuses the launch.
// Fixed: cudaFuncSetAttribute(MaxDynamicSharedMemorySize) set to the 2 KiB the launch asks for.
#include <cstdio>
#include <cuda_runtime.h>
#define STAGE (47 * 256)  // floats: 48128 bytes
__global__ void stage(const float* x, float* y, int n) {
    __shared__ float keep[STAGE];
    extern __shared__ float extra[];
    for (int i = threadIdx.x; i < STAGE; i += blockDim.x) keep[i] = x[i % n];
    for (int i = threadIdx.x; i < 512; i += blockDim.x) extra[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < STAGE; i++) s += keep[i];
        for (int i = 0; i < 512; i++) s += extra[i];
        y[0] = s;
    }
}
int main() {
    const int n = 256, dyn = 512 * sizeof(float);
    float h[n], *x, *y, got;
    for (int i = 0; i < n; i++) h[i] = 1.0f;
    cudaMalloc(&x, sizeof(h));
    cudaMalloc(&y, sizeof(float));
    cudaMemcpy(x, h, sizeof(h), cudaMemcpyHostToDevice);
#ifdef FIXED
    if (cudaFuncSetAttribute(stage, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn) != cudaSuccess) return 1;
#endif
    stage<<<1, 128, dyn>>>(x, y, n);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { printf("launch: %s\n", cudaGetErrorString(e)); return 1; }
    cudaMemcpy(&got, y, sizeof(float), cudaMemcpyDeviceToHost);
    float want = (float)STAGE + 511.0f * 512.0f / 2.0f;
    if (got != want) { printf("sum %g, want %g\n", got, want); return 1; }
    return 0;
}
