// Broken: the host reads a result straight from a cudaMalloc pointer instead of copying it back.
#include "common.h"
__global__ void seven(float* x) { *x = 7.0f; }
int main() {
    float *d, got, want = 7.0f;
    CK(cudaMalloc(&d, sizeof(float)));
    seven<<<1, 1>>>(d);
    CK(cudaDeviceSynchronize());
#ifdef FIXED
    CK(cudaMemcpy(&got, d, sizeof(float), cudaMemcpyDeviceToHost));
#else
    got = *d;
#endif
    return expect_equal(&got, &want, 1, "seven");
}
