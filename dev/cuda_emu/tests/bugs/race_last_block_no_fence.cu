// Broken: each block writes its partial sum and takes a ticket from an atomic counter; the block
// that draws the last ticket adds every partial. Without __threadfence() between a block's partial
// and its ticket, the last block may read partials other blocks' writes have not yet made visible.
#include "common.h"
__global__ void sum_blocks(const float* in, float* partial, unsigned int* counter, float* out) {
    __shared__ unsigned int ticket;
    if (threadIdx.x == 0) partial[blockIdx.x] = in[blockIdx.x];
#ifdef FIXED
    __threadfence();
#endif
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(counter, 1u);
    __syncthreads();
    if (ticket != gridDim.x - 1) return;
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (unsigned int b = 0; b < gridDim.x; b++) t += partial[b];
        out[0] = t;
    }
}
int main() {
    const int n = 48;
    float h[n], want = 0.0f, got, *din, *dp, *dout;
    unsigned int* dc;
    for (int i = 0; i < n; i++) { h[i] = (float)(i + 1); want += h[i]; }
    CK(cudaMalloc(&din, sizeof(h)));
    CK(cudaMalloc(&dp, sizeof(h)));
    CK(cudaMalloc(&dout, sizeof(float)));
    CK(cudaMalloc(&dc, sizeof(unsigned int)));
    CK(cudaMemset(dc, 0, sizeof(unsigned int)));
    CK(cudaMemcpy(din, h, sizeof(h), cudaMemcpyHostToDevice));
    sum_blocks<<<n, 32>>>(din, dp, dc, dout);
    CK(cudaGetLastError());
    CK(cudaMemcpy(&got, dout, sizeof(float), cudaMemcpyDeviceToHost));
    return expect_equal(&got, &want, 1, "sum");
}
