// strict-test: expect="cublasLtMatmul refuses: A at .* is 128-byte aligned, below the 256 bytes"
// Broken: a matmul plan (heuristic result) cached by shape only, asked for with the default
// preference (operands 256-byte aligned), then used for a layer slice that is only 128-byte
// aligned: the algorithm may assume 256 bytes and cuBLASLt refuses (CUBLAS_STATUS_NOT_SUPPORTED).
// Fixed: the preference says each operand's real alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*).
#include <cstdint>
#include <cstdio>
#include <cublasLt.h>
#include <cuda_runtime.h>
#define LT(call) do { cublasStatus_t s_ = (call); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    printf("cuBLASLt status %d at line %d\n", (int)s_, __LINE__); return 1; } } while (0)
static uint32_t alignment(const void* p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}
int main() {
    const int m = 32, n = 8, k = 32;  // D (m x n) = W (k x m)^T X (k x n), two layers of W
    float *w, *x, *d;
    cudaMalloc(&w, 2 * m * k * sizeof(float) + 128);
    cudaMalloc(&x, k * n * sizeof(float));
    cudaMalloc(&d, m * n * sizeof(float));
    cudaMemset(w, 0, 2 * m * k * sizeof(float) + 128);
    cudaMemset(x, 0, k * n * sizeof(float));
    float* layer1 = w + m * k + 32;  // a slice 128 bytes past a 256-byte boundary
    cublasLtHandle_t h;
    LT(cublasLtCreate(&h));
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    cublasLtMatrixLayout_t lay[3];  // W (k x m, used transposed), X (k x n), D (m x n); column-major, packed
    const int rows[3] = {k, k, m}, cols[3] = {m, n, n};
    for (int i = 0; i < 3; i++) LT(cublasLtMatrixLayoutCreate(&lay[i], CUDA_R_32F, rows[i], cols[i], rows[i]));
    cublasLtMatrixLayout_t la = lay[0], lb = lay[1], ld = lay[2];
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
#ifdef FIXED
    const void* ops[4] = {layer1, x, d, d};
    cublasLtMatmulPreferenceAttributes_t attr[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t a = alignment(ops[i]);
        LT(cublasLtMatmulPreferenceSetAttribute(pref, attr[i], &a, sizeof(a)));
    }
#endif
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    if (!found) { printf("no algorithm\n"); return 1; }
    float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(h, desc, &one, w, la, x, lb, &zero, d, ld, d, ld, &heur.algo, NULL, 0, 0));       // layer 0
    LT(cublasLtMatmul(h, desc, &one, layer1, la, x, lb, &zero, d, ld, d, ld, &heur.algo, NULL, 0, 0));  // layer 1
    cudaDeviceSynchronize();
    printf("layer 1's slice is %u-byte aligned: ok\n", alignment(layer1));
    return 0;
}
