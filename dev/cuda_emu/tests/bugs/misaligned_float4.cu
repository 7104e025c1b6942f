// Broken: float4 loads from x + 1, which is not 16-byte aligned (a GPU faults: misaligned address).
#include "common.h"
__global__ void sum4(const float* x, float* out, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
#ifdef FIXED
        const float* p = x + 1 + 4 * i;
        float4 v = make_float4(p[0], p[1], p[2], p[3]);
#else
        float4 v = reinterpret_cast<const float4*>(x + 1)[i];
#endif
        out[i] = v.x + v.y + v.z + v.w;
    }
}
int main() {
    const int n4 = 64, n = 4 * n4 + 4;
    float h[n], want[n4], got[n4], *dx, *dout;
    for (int i = 0; i < n; i++) h[i] = (float)i;
    for (int i = 0; i < n4; i++) want[i] = h[1 + 4 * i] + h[2 + 4 * i] + h[3 + 4 * i] + h[4 + 4 * i];
    CK(cudaMalloc(&dx, sizeof(h)));
    CK(cudaMalloc(&dout, sizeof(got)));
    CK(cudaMemcpy(dx, h, sizeof(h), cudaMemcpyHostToDevice));
    sum4<<<1, n4>>>(dx, dout, n4);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, n4, "sum4");
}
