// strict-test: build=check expect="read-only load \(__ldg, ld.global.nc\) in kernel add_then_scale"
// Broken: a kernel that stores a residual sum and reads it back through the read-only path (__ldg,
// PTX ld.global.nc), as residual_layernorm_forward did through const __restrict__ before issue 24:
// the read-only path is for data no thread writes during the kernel, and may return the bytes as
// they were before the store. Fixed: the value the thread computed stays in a register.
#include <cstdio>
#include <cuda_runtime.h>

// res = a + b, out = 2 res (n elements, one thread each)
__global__ void add_then_scale(float* res, float* out, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float r = a[i] + b[i];
    res[i] = r;
#ifdef FIXED
    out[i] = 2.0f * r;
#else
    out[i] = 2.0f * __ldg(&res[i]);
#endif
}

int main() {
    const int n = 300;
    float ha[n], hb[n], hout[n];
    for (int i = 0; i < n; i++) { ha[i] = 0.5f * i; hb[i] = 1.0f - i; }
    float *a, *b, *res, *out;
    cudaMalloc(&a, sizeof(ha)); cudaMalloc(&b, sizeof(hb)); cudaMalloc(&res, sizeof(ha)); cudaMalloc(&out, sizeof(ha));
    cudaMemcpy(a, ha, sizeof(ha), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof(hb), cudaMemcpyHostToDevice);
    add_then_scale<<<(n + 127) / 128, 128>>>(res, out, a, b, n);
    cudaMemcpy(hout, out, sizeof(hout), cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++) { bad += hout[i] != 2.0f * (ha[i] + hb[i]); }
    printf("%d wrong of %d\n", bad, n);
    return bad ? 1 : 0;
}
