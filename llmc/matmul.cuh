// Matmuls through cuBLASLt, y = x W^T + b with W stored (out, in) as in the model file, and
// their backward. Row-major (N, C) data is column-major (C, N) to cuBLASLt, so the forward is
// D (OC x N) = W^T(op T on the stored C x OC) * X (C x N). Epilogues: bias in the forward,
// GELU (keeping the pre-activation as aux) in the MLP forward, and the GELU gradient (from that
// aux) in the backward of the MLP projection. Bias gradients use our column-sum kernel, since
// they accumulate over micro-steps. Compute is fp32 (no TF32) in both precisions.
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <cublasLt.h>
#include "cuda_common.cuh"

#ifdef ENABLE_FP32
#define CUBLAS_FLOATX CUDA_R_32F
#else
#define CUBLAS_FLOATX CUDA_R_16BF
#endif

#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)
static void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) { fail("cuBLASLt error %d at %s:%d (%s)", (int)status, file, line, what); }
}

typedef struct {
    cublasLtHandle_t handle;
    void* workspace;
    size_t workspace_size;
} MatmulContext;

static MatmulContext matmul_ctx;

static void matmul_init(void) {
    cublasCheck(cublasLtCreate(&matmul_ctx.handle));
    matmul_ctx.workspace_size = 32u << 20;
    cudaCheck(cudaMalloc(&matmul_ctx.workspace, matmul_ctx.workspace_size));
}

static void matmul_free(void) {
    cudaCheck(cudaFree(matmul_ctx.workspace));
    cublasCheck(cublasLtDestroy(matmul_ctx.handle));
}

// D (m x n, column-major, ld m) = op(A) op(B) + beta D, then the epilogue. A is stored k x m
// when transposed (else m x k), B n x k when transposed (else k x n); all dense.
static void matmul_lt(floatX* d, const floatX* a, const floatX* b, int m, int n, int k, int trans_a, int trans_b,
                      float beta, cublasLtEpilogue_t epilogue, const floatX* bias, const floatX* aux) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux) {
        int64_t ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t la, lb, ld_;
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUBLAS_FLOATX, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUBLAS_FLOATX, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&ld_, CUBLAS_FLOATX, m, n, m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &matmul_ctx.workspace_size, sizeof(matmul_ctx.workspace_size)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(matmul_ctx.handle, desc, la, lb, ld_, ld_, pref, 1, &heuristic, &found));
    if (found == 0) {
        fail("cuBLASLt has no algorithm for m %d n %d k %d transa %d transb %d epilogue %d", m, n, k, trans_a, trans_b,
             (int)epilogue);
    }
    float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(matmul_ctx.handle, desc, &alpha, a, la, b, lb, &beta, d, ld_, d, ld_, &heuristic.algo,
                               matmul_ctx.workspace, matmul_ctx.workspace_size, 0));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld_));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

// out (N, OC) = inp (N, C) weight (OC, C)^T + bias (OC); bias may be NULL.
static void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                           int OC) {
    matmul_lt(out, weight, inp, OC, N, C, 1, 0, 0.0f, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
              bias, NULL);
}

// out = GELU(inp weight^T + bias), pre = the pre-activation (both (N, OC)).
static void matmul_forward_gelu(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                                int N, int C, int OC) {
    matmul_lt(out, weight, inp, OC, N, C, 1, 0, 0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre);
}

// dinp (N, C) = dout (N, OC) weight (written), times GELU'(gelu_pre) when gelu_pre is given;
// dweight (OC, C) += dout^T inp; dbias (OC) += column sums of dout (when dbias is given).
// partial: scratch for the bias sums (colsum_chunks(N) * OC floats).
static void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                            const floatX* inp, const floatX* weight, const floatX* gelu_pre, int N, int C, int OC) {
    matmul_lt(dinp, weight, dout, C, N, OC, 0, 0, 0.0f, gelu_pre ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT,
              NULL, gelu_pre);
    matmul_lt(dweight, inp, dout, C, OC, N, 0, 1, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dbias) { bias_backward(dbias, partial, dout, N, OC); }
}

#endif
