// Broken: a warp-synchronous tree reduction in shared memory (volatile, no __syncwarp): lane t adds
// the partial sum lane t - d wrote in the step before. Since Volta the lanes of a warp are not in
// lockstep, so that partial sum may not be written yet. (It works if lanes run in increasing order.)
#include "common.h"
__global__ void warp_sum(const float* in, float* out) {
    __shared__ float s[32];
    volatile float* v = s;
    int t = threadIdx.x;
    v[t] = in[t];
#ifdef FIXED
    __syncwarp();
#endif
    for (int d = 1; d < 32; d *= 2) {
        if ((t & (2 * d - 1)) == 2 * d - 1) v[t] += v[t - d];
#ifdef FIXED
        __syncwarp();
#endif
    }
    if (t == 31) *out = v[31];
}
int main() {
    float h[32], want = 0.0f, got, *din, *dout;
    for (int i = 0; i < 32; i++) { h[i] = (float)(i % 7 + 1); want += h[i]; }
    CK(cudaMalloc(&din, sizeof(h)));
    CK(cudaMalloc(&dout, sizeof(float)));
    CK(cudaMemcpy(din, h, sizeof(h), cudaMemcpyHostToDevice));
    warp_sum<<<1, 32>>>(din, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&got, dout, sizeof(float), cudaMemcpyDeviceToHost));
    return expect_equal(&got, &want, 1, "warp_sum");
}
