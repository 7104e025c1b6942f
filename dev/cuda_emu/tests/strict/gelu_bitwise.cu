// strict-test: expect="GELU: element [0-9]+ differs"
// Broken: a claim that cuBLASLt's GELU epilogue gives bit-identical results to our own GELU kernel
// (the claim behind "-r 0 and -r 1 give identical FP32 losses"): cuBLASLt's epilogue is its own
// code, with no such guarantee. Fixed: the two agree within a tolerance.
#include <cmath>
#include <cstdio>
#include <cublasLt.h>
#include <cuda_runtime.h>
#define LT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    printf("cuBLASLt status %d at line %d\n", (int)s_, __LINE__); return 1; } } while (0)
// the trainer's GELU (llmc/gelu.cuh): the tanh approximation
__global__ void gelu_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = in[i], u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}
int main() {
    const int m = 64, n = 16, k = 200, mn = m * n;  // D = GELU(A^T B), the pre-activation as aux
    static float ha[k * m], hb[k * n], lt[mn], ours[mn];
    for (int i = 0; i < k * m; i++) ha[i] = 0.05f * (float)((i * 37) % 41 - 20);
    for (int i = 0; i < k * n; i++) hb[i] = 0.05f * (float)((i * 29) % 31 - 15);
    float *a, *b, *d, *pre, *g;
    cudaMalloc(&a, sizeof(ha)); cudaMalloc(&b, sizeof(hb));
    cudaMalloc(&d, mn * 4); cudaMalloc(&pre, mn * 4); cudaMalloc(&g, mn * 4);
    cudaMemcpy(a, ha, sizeof(ha), cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof(hb), cudaMemcpyHostToDevice);
    cublasLtHandle_t h;
    LT(cublasLtCreate(&h));
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_GELU_AUX;
    int64_t aux_ld = m;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof(pre)));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    cublasLtMatrixLayout_t la, lb, ld;
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, k, m, k));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
    float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(h, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, NULL, NULL, 0, 0));
    gelu_kernel<<<(mn + 255) / 256, 256>>>(g, pre, mn);  // recompute from the saved pre-activation
    cudaMemcpy(lt, d, sizeof(lt), cudaMemcpyDeviceToHost);
    cudaMemcpy(ours, g, sizeof(ours), cudaMemcpyDeviceToHost);
    for (int i = 0; i < mn; i++) {
#ifdef FIXED
        bool same = fabsf(lt[i] - ours[i]) <= 1e-6f * (1.0f + fabsf(ours[i]));
#else
        bool same = lt[i] == ours[i];
#endif
        if (!same) { printf("GELU: element %d differs: cuBLASLt %.9g, ours %.9g\n", i, lt[i], ours[i]); return 1; }
    }
    printf("GELU: cuBLASLt's epilogue and our kernel agree\n");
    return 0;
}
