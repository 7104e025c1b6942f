// Broken: an in-place shift in shared memory: each thread reads its upper neighbour's slot and then
// overwrites its own, which the lower neighbour may not have read yet (write after read; it works
// only if threads run in increasing order, as the plain emulator runs them).
#include "common.h"
__global__ void shift_down(const float* in, float* out) {
    __shared__ float s[128];
    int t = threadIdx.x;
    s[t] = in[t];
    __syncthreads();
    float v = t + 1 < 128 ? s[t + 1] : s[t];
#ifdef FIXED
    __syncthreads();
#endif
    if (t + 1 < 128) s[t] = v;
    __syncthreads();
    out[t] = s[t];
}
int main() {
    float h[128], want[128];
    for (int i = 0; i < 128; i++) h[i] = (float)(3 * i + 1);
    for (int i = 0; i < 128; i++) want[i] = i + 1 < 128 ? h[i + 1] : h[i];
    float* din = device_copy(h, 128);
    float* dout = device_nan(128);
    shift_down<<<1, 128>>>(din, dout);
    return expect_device(dout, want, 128, "shift_down");
}
