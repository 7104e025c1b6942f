// Matmuls through cuBLASLt, y = x W^T + b with W stored (out, in) as in the model file, and their
// backward. Row-major (N, C) data is column-major (C, N) to cuBLASLt, so the forward is D (OC x N) =
// W^T(op T on the stored C x OC) * X (C x N). Epilogues: bias in the forward and, with -ge 1
// (matmul_ctx.gelu_fusion), GELU (keeping the pre-activation as aux) in the MLP forward and the GELU
// gradient (from that aux) in the backward of the MLP projection; with -ge 0 (the default: docs/gpu.md
// says why) our own GELU kernels (llmc/gelu.cuh) run after the matmul. Bias gradients use our
// one-launch column-sum kernel, since they accumulate over micro-steps (cuBLASLt's BGRAD epilogues
// overwrite). Compute is fp32 (no TF32) in both precisions. Descriptors, layouts and heuristic results
// are cached per shape and operand alignment (MatmulPlan), with one workspace for all: cuBLASLt's
// heuristic may pick an algorithm that assumes 256-byte aligned operands unless told otherwise, and
// layer slices are often only 128-byte aligned (odd layer counts, C 1600), so each plan is asked for
// with the real alignment of A, B and D (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, up to 256), part
// of its key. cuBLASLt's 16-byte rules (16-byte aligned bf16 operands, bias and aux, leading
// dimensions of 16 bytes' multiples, EPILOGUE_AUX_LD divisible by 8) hold for C % 8 == 0, which
// matmul_check_model requires at build time.
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <cublasLt.h>
#include "cuda_common.cuh"
#include "gelu.cuh"

#ifdef ENABLE_FP32
#define CUBLAS_FLOATX CUDA_R_32F
#else
#define CUBLAS_FLOATX CUDA_R_16BF
#endif

#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)
static void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) { fail("cuBLASLt error %d at %s:%d (%s)", (int)status, file, line, what); }
}

// A cached matmul: its descriptor, layouts and the heuristic's algorithm, per shape and epilogue
// (the bias and aux pointers are set on the cached descriptor at each call).
typedef struct {
    int m, n, k, trans_a, trans_b, has_bias, has_aux;
    int align_a, align_b, align_d; // the operands' alignment in bytes (a power of two up to 256)
    cublasLtEpilogue_t epilogue;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

#define MATMUL_PLANS 64

typedef struct {
    cublasLtHandle_t handle;
    void* workspace; // one workspace for every matmul
    size_t workspace_size;
    MatmulPlan plans[MATMUL_PLANS];
    int num_plans, next_evict;
    long plan_misses; // plans built (heuristic queries), for tests and the curious
    int gelu_fusion;  // -ge: 1 GELU and its gradient as cuBLASLt epilogues, 0 our kernels after the matmul
} MatmulContext;

static MatmulContext matmul_ctx;

static void matmul_init(void) {
    cublasCheck(cublasLtCreate(&matmul_ctx.handle));
    matmul_ctx.workspace_size = 32u << 20;
    cudaCheck(cudaMalloc(&matmul_ctx.workspace, matmul_ctx.workspace_size));
    matmul_ctx.num_plans = 0;
    matmul_ctx.next_evict = 0;
    matmul_ctx.plan_misses = 0;
    matmul_ctx.gelu_fusion = 0;
}

static void matmul_plan_destroy(MatmulPlan* p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->ld));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

static void matmul_free(void) {
    for (int i = 0; i < matmul_ctx.num_plans; i++) { matmul_plan_destroy(&matmul_ctx.plans[i]); }
    matmul_ctx.num_plans = 0;
    cudaCheck(cudaFree(matmul_ctx.workspace));
    cublasCheck(cublasLtDestroy(matmul_ctx.handle));
}

// The alignment of a device pointer in bytes: the largest power of two up to 256 dividing it.
static int matmul_alignment(const void* ptr) {
    uintptr_t a = (uintptr_t)ptr;
    int align = 256;
    while (align > 1 && a % (uintptr_t)align != 0) { align >>= 1; }
    return align;
}

// A model cuBLASLt serves: C a multiple of 8, so that every bf16 row, layer slice, bias and
// GELU aux buffer is 16-byte aligned and every leading dimension (C, 3C, 4C, Vp) a multiple of 8
// elements (the fp32 build keeps the same rule, so that both precisions take the same models).
static void matmul_check_model(int channels, int padded_vocab) {
    if (channels % 8 != 0 || padded_vocab % 8 != 0) {
        fail("channels %d (padded vocab %d): cuBLASLt needs multiples of 8 (16-byte aligned bf16 operands, bias and "
             "aux pointers, leading dimensions of 16-byte multiples, EPILOGUE_AUX_LD divisible by 8)", channels,
             padded_vocab);
    }
}

// Builds the descriptor, layouts and heuristic choice of one shape and alignment into p.
static void matmul_plan_build(MatmulPlan* p, int m, int n, int k, int trans_a, int trans_b,
                              cublasLtEpilogue_t epilogue, int has_bias, int has_aux, int align_a, int align_b,
                              int align_d) {
    p->m = m; p->n = n; p->k = k; p->trans_a = trans_a; p->trans_b = trans_b;
    p->epilogue = epilogue; p->has_bias = has_bias; p->has_aux = has_aux;
    p->align_a = align_a; p->align_b = align_b; p->align_d = align_d;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (has_aux) {
        int64_t ld = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, CUBLAS_FLOATX, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, CUBLAS_FLOATX, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, CUBLAS_FLOATX, m, n, m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &matmul_ctx.workspace_size, sizeof(matmul_ctx.workspace_size)));
    uint32_t aligns[4] = {(uint32_t)align_a, (uint32_t)align_b, (uint32_t)align_d, (uint32_t)align_d}; // C is D
    cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i])));
    }
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(matmul_ctx.handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1,
                                               &heuristic, &found));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fail("cuBLASLt has no algorithm for m %d n %d k %d transa %d transb %d epilogue %d alignments %d %d %d", m, n, k,
             trans_a, trans_b, (int)epilogue, align_a, align_b, align_d);
    }
    p->algo = heuristic.algo;
    matmul_ctx.plan_misses++;
}

// The cached plan of a shape and alignment, built on first use (the oldest evicted when the cache is full).
static MatmulPlan* matmul_plan(int m, int n, int k, int trans_a, int trans_b, cublasLtEpilogue_t epilogue,
                               int has_bias, int has_aux, int align_a, int align_b, int align_d) {
    for (int i = 0; i < matmul_ctx.num_plans; i++) {
        MatmulPlan* p = &matmul_ctx.plans[i];
        if (p->m == m && p->n == n && p->k == k && p->trans_a == trans_a && p->trans_b == trans_b &&
            p->epilogue == epilogue && p->has_bias == has_bias && p->has_aux == has_aux && p->align_a == align_a &&
            p->align_b == align_b && p->align_d == align_d) {
            return p;
        }
    }
    MatmulPlan* p;
    if (matmul_ctx.num_plans < MATMUL_PLANS) {
        p = &matmul_ctx.plans[matmul_ctx.num_plans++];
    } else {
        p = &matmul_ctx.plans[matmul_ctx.next_evict];
        matmul_ctx.next_evict = (matmul_ctx.next_evict + 1) % MATMUL_PLANS;
        matmul_plan_destroy(p);
    }
    matmul_plan_build(p, m, n, k, trans_a, trans_b, epilogue, has_bias, has_aux, align_a, align_b, align_d);
    return p;
}

// D (m x n, column-major, ld m) = op(A) op(B) + beta D, then the epilogue. A is stored k x m
// when transposed (else m x k), B n x k when transposed (else k x n); all dense.
static void matmul_lt(floatX* d, const floatX* a, const floatX* b, int m, int n, int k, int trans_a, int trans_b,
                      float beta, cublasLtEpilogue_t epilogue, const floatX* bias, const floatX* aux) {
    MatmulPlan* p = matmul_plan(m, n, k, trans_a, trans_b, epilogue, bias != NULL, aux != NULL, matmul_alignment(a),
                                matmul_alignment(b), matmul_alignment(d));
    if ((bias && matmul_alignment(bias) < 16) || (aux && matmul_alignment(aux) < 16)) {
        fail("matmul: the bias or GELU aux pointer is not 16-byte aligned (cuBLASLt needs 16)");
    }
    if (bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (aux) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                   sizeof(aux)));
    }
    float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(matmul_ctx.handle, p->desc, &alpha, a, p->la, b, p->lb, &beta, d, p->ld, d, p->ld,
                               &p->algo, matmul_ctx.workspace, matmul_ctx.workspace_size, 0));
}

// out (N, OC) = inp (N, C) weight (OC, C)^T + bias (OC); bias may be NULL.
static void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                           int OC) {
    matmul_lt(out, weight, inp, OC, N, C, 1, 0, 0.0f, bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
              bias, NULL);
}

// out = GELU(inp weight^T + bias), pre = the pre-activation (both (N, OC)): one matmul with the
// GELU_AUX_BIAS epilogue (-ge 1), or the matmul with bias into pre, then our GELU kernel (-ge 0).
static void matmul_forward_gelu(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                                int N, int C, int OC) {
    if (matmul_ctx.gelu_fusion) {
        matmul_lt(out, weight, inp, OC, N, C, 1, 0, 0.0f, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias, pre);
    } else {
        matmul_forward(pre, inp, weight, bias, N, C, OC);
        gelu_forward(out, pre, (size_t)N * OC);
    }
}

// dinp (N, C) = dout (N, OC) weight (written), no epilogue: matmul_backward's first half.
static void matmul_backward_input(floatX* dinp, const floatX* dout, const floatX* weight, int N, int C, int OC) {
    matmul_lt(dinp, weight, dout, C, N, OC, 0, 0, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
}

// dweight (OC, C) += dout^T inp; dbias (OC) += column sums of dout (when dbias is given): its second.
static void matmul_backward_weight(floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                                   const floatX* inp, int N, int C, int OC) {
    matmul_lt(dweight, inp, dout, C, OC, N, 0, 1, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
    if (dbias) { bias_backward(dbias, partial, dout, N, OC); }
}

// dinp (N, C) = dout (N, OC) weight (written), times GELU'(gelu_pre) when gelu_pre is given;
// dweight (OC, C) += dout^T inp; dbias (OC) += column sums of dout (when dbias is given).
// partial: scratch for the bias sums (colsum_partial_floats(N, OC) floats).
// The GELU gradient is the DGELU epilogue (-ge 1) or our kernel on dinp after the matmul (-ge 0).
static void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                            const floatX* inp, const floatX* weight, const floatX* gelu_pre, int N, int C, int OC) {
    bool fused = gelu_pre && matmul_ctx.gelu_fusion;
    matmul_lt(dinp, weight, dout, C, N, OC, 0, 0, 0.0f, fused ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT,
              NULL, fused ? gelu_pre : NULL);
    if (gelu_pre && !fused) { gelu_backward_inplace(dinp, gelu_pre, (size_t)N * C); }
    matmul_backward_weight(dweight, dbias, partial, dout, inp, N, C, OC);
}

#endif
