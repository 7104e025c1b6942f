// Broken: each thread reads the value its lower neighbour wrote to shared memory, without a
// __syncthreads between the write and the read (a GPU runs warps in any order).
#include "common.h"
__global__ void shift(const float* in, float* out) {
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = in[t] * 2.0f;
#ifdef FIXED
    __syncthreads();
#endif
    out[t] = t > 0 ? s[t - 1] : 0.0f;
}
int main() {
    float h[256], want[256];
    for (int i = 0; i < 256; i++) h[i] = (float)i;
    for (int i = 0; i < 256; i++) want[i] = i > 0 ? 2.0f * (i - 1) : 0.0f;
    float* din = device_copy(h, 256);
    float* dout = device_nan(256);
    shift<<<1, 256>>>(din, dout);
    return expect_device(dout, want, 256, "shift");
}
