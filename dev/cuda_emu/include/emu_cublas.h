// emu_cublas.h: the cuBLASLt and cuBLAS calls the project makes, computed on the CPU from NVIDIA's
// documented semantics: column-major matrices with leading dimensions, op() transposes, strided
// batches, alpha/beta, fp32 and bf16 operands with fp32 compute, and the bias/GELU/bias-gradient
// epilogues. Accumulation is in float. Under the strict rules (emu::strict(), the default) nothing is
// computed as the project's own kernels compute it, as on a GPU, where cuBLASLt is its own code: k is
// summed in blocks of 64 (each block in increasing k, then the blocks' sums in order, as a split-K
// kernel does), and the GELU epilogue and its gradient use x * sigmoid(2u), algebraically equal to
// 0.5 x (1 + tanh(u)) but rounded differently. EMU_STRICT=0: k in increasing order, the tanh form.
#ifndef EMU_CUBLAS_H
#define EMU_CUBLAS_H
#include "emu_cuda.h"
#include "cuda_bf16.h"
#include <cstdarg>

enum cudaDataType_t {
    CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_8I = 3, CUDA_R_32I = 10, CUDA_R_16BF = 14,
    CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29,
};
typedef cudaDataType_t cudaDataType;

enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cublasComputeType_t {
    CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_PEDANTIC = 69, CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_16F = 74, CUBLAS_COMPUTE_32F_FAST_16BF = 75, CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};
enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 };
enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36, CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192, CUBLASLT_EPILOGUE_DGELU_BGRAD = 208,
    CUBLASLT_EPILOGUE_BGRADA = 256, CUBLASLT_EPILOGUE_BGRADB = 512,
};
enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0, CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1, CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
    CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_TRANSC = 5,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7, CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
    CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
};
enum cublasLtMatrixLayoutAttribute_t {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0, CUBLASLT_MATRIX_LAYOUT_ORDER = 1, CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
    CUBLASLT_MATRIX_LAYOUT_COLS = 3, CUBLASLT_MATRIX_LAYOUT_LD = 4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
};
enum cublasLtOrder_t { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 };
enum cublasLtPointerMode_t { CUBLASLT_POINTER_MODE_HOST = 0, CUBLASLT_POINTER_MODE_DEVICE = 1 };
enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

struct cublasLtContext { cudaStream_t stream; };
struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t pointer_mode = 0, transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    void* aux = nullptr;
    int64_t bias_batch_stride = 0, aux_ld = 0, aux_batch_stride = 0;
    int32_t bias_type = -1, aux_type = -1, sm_count = 0;  // -1: the type of D
    int8_t fast_accum = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
    int32_t type;
    int32_t order = CUBLASLT_ORDER_COL;
    uint64_t rows, cols;
    int64_t ld, stride = 0;
    int32_t batch = 1;
};
// min_align: CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, 256 unless set (cuBLASLt's default)
struct cublasLtMatmulPreferenceOpaque_t { uint32_t search_mode = 0; uint64_t max_workspace = 0; uint32_t min_align[4] = {256, 256, 256, 256}; };
struct cublasLtMatmulAlgo_t { uint64_t data[8]; };
struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
};
typedef cublasLtContext* cublasLtHandle_t;
typedef cublasLtMatmulDescOpaque_t* cublasLtMatmulDesc_t;
typedef cublasLtMatrixLayoutOpaque_t* cublasLtMatrixLayout_t;
typedef cublasLtMatmulPreferenceOpaque_t* cublasLtMatmulPreference_t;

namespace emu {
inline bool blas_type_ok(int t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
// (EMU_UNCHECKED: under --check the matmul's own loads and stores are not instrumented)
EMU_UNCHECKED inline float blas_load(const void* p, int t, int64_t i) {
    if (t == CUDA_R_32F) return ((const float*)p)[i];
    uint32_t u = (uint32_t)((const unsigned short*)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
EMU_UNCHECKED inline void blas_store(void* p, int t, int64_t i, float v) {
    if (t == CUDA_R_32F) ((float*)p)[i] = v;
    else ((__nv_bfloat16*)p)[i] = __nv_bfloat16(v);
}
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
inline bool strict();
EMU_UNCHECKED inline float gelu(float x) {
    float u = kGeluScale * (x + 0.044715f * x * x * x);
    if (strict()) return x / (1.0f + expf(-2.0f * u));  // 0.5 (1 + tanh u) = sigmoid(2u)
    return 0.5f * x * (1.0f + tanhf(u));
}
EMU_UNCHECKED inline float gelu_grad(float x) {
    float u = kGeluScale * (x + 0.044715f * x * x * x);
    float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    if (strict()) {  // with s = sigmoid(2u): d/dx x s = s + 2 x s (1 - s) du
        float sg = 1.0f / (1.0f + expf(-2.0f * u));
        return sg + 2.0f * x * sg * (1.0f - sg) * du;
    }
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
constexpr int kSplitK = 64;  // the strict rules' k block

struct Operand { const void* p; int type; int64_t ld, stride; };
struct Epilogue {
    uint32_t kind = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int bias_type = CUDA_R_32F;
    int64_t bias_stride = 0;
    void* aux = nullptr;
    int aux_type = CUDA_R_32F;
    int64_t aux_ld = 0, aux_stride = 0;
};

// out[i + j m] = the sum over kk of a[i k + kk] * b[j k + kk], in blocks of kb: each block summed in
// increasing kk from 0.0f, then the blocks' sums added in order to 0.0f (kb = k: one block, which is
// the plain sum in increasing kk, since a sum started at +0.0f is never -0.0f). Four rows and two
// columns at a time, each output its own chain of the same operations in the same order, so the
// result is that of one output at a time, bit for bit (no reassociation: only independent chains).
EMU_UNCHECKED inline float gemm_dot(const float* a, const float* b, int k, int kb) {
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += kb) {
        float part = 0.0f;
        for (int kk = k0; kk < k && kk < k0 + kb; kk++) part += a[kk] * b[kk];
        acc += part;
    }
    return acc;
}
EMU_UNCHECKED inline void gemm_sums(const float* pa, const float* pb, int m, int n, int k, int kb, float* out) {
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        const float *b0 = pb + (size_t)j * k, *b1 = b0 + k;
        int i = 0;
        for (; i + 4 <= m; i += 4) {
            const float *a0 = pa + (size_t)i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
            float c00 = 0.0f, c10 = 0.0f, c20 = 0.0f, c30 = 0.0f, c01 = 0.0f, c11 = 0.0f, c21 = 0.0f, c31 = 0.0f;
            for (int k0 = 0; k0 < k; k0 += kb) {
                float p00 = 0.0f, p10 = 0.0f, p20 = 0.0f, p30 = 0.0f, p01 = 0.0f, p11 = 0.0f, p21 = 0.0f, p31 = 0.0f;
                const int k1 = k - k0 < kb ? k : k0 + kb;
                for (int kk = k0; kk < k1; kk++) {
                    const float x0 = a0[kk], x1 = a1[kk], x2 = a2[kk], x3 = a3[kk], y0 = b0[kk], y1 = b1[kk];
                    p00 += x0 * y0; p10 += x1 * y0; p20 += x2 * y0; p30 += x3 * y0;
                    p01 += x0 * y1; p11 += x1 * y1; p21 += x2 * y1; p31 += x3 * y1;
                }
                c00 += p00; c10 += p10; c20 += p20; c30 += p30; c01 += p01; c11 += p11; c21 += p21; c31 += p31;
            }
            float* o0 = out + i + (size_t)j * m;
            float* o1 = o0 + m;
            o0[0] = c00; o0[1] = c10; o0[2] = c20; o0[3] = c30;
            o1[0] = c01; o1[1] = c11; o1[2] = c21; o1[3] = c31;
        }
        for (; i < m; i++) {
            out[i + (size_t)j * m] = gemm_dot(pa + (size_t)i * k, b0, k, kb);
            out[i + (size_t)(j + 1) * m] = gemm_dot(pa + (size_t)i * k, b1, k, kb);
        }
    }
    for (; j < n; j++)
        for (int i = 0; i < m; i++) out[i + (size_t)j * m] = gemm_dot(pa + (size_t)i * k, pb + (size_t)j * k, k, kb);
}

// D = epilogue(alpha * op(A) op(B) + beta * C) for each batch; op(A) is m x k, op(B) is k x n.
// C is not read when beta == 0 (as in BLAS). D may alias C.
EMU_UNCHECKED inline cublasStatus_t gemm(int ta, int tb, int m, int n, int k, float alpha, Operand A, Operand B, float beta,
                           Operand C, Operand D, int batch, const Epilogue& e) {
    if (m < 0 || n < 0 || k < 0 || batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
    switch (e.kind) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU: case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    for (const Operand* o : {&A, &B, &C, &D})
        if (!blas_type_ok(o->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (A.type != B.type || C.type != D.type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (A.ld < (ta ? k : m) || B.ld < (tb ? n : k) || C.ld < m || D.ld < m) return CUBLAS_STATUS_INVALID_VALUE;
    const bool has_bias = e.kind & CUBLASLT_EPILOGUE_BIAS, gelu_fwd = (e.kind & 32) && !(e.kind & 64);
    const bool aux_out = gelu_fwd && (e.kind & 128), dgelu = e.kind & 64, bgrad_d = e.kind == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    if ((has_bias || bgrad_d || e.kind >= CUBLASLT_EPILOGUE_BGRADA) && !e.bias) return CUBLAS_STATUS_INVALID_VALUE;
    if ((aux_out || dgelu) && (!e.aux || e.aux_ld < m)) return CUBLAS_STATUS_INVALID_VALUE;
    const bool blocked = strict();
    std::vector<float> out_buf((size_t)m * n), pa((size_t)m * k), pb((size_t)n * k);
    float* out = out_buf.data();
    for (int b = 0; b < batch; b++) {
        const void* a = (const char*)A.p + b * A.stride * (A.type == CUDA_R_32F ? 4 : 2);
        const void* bm = (const char*)B.p + b * B.stride * (B.type == CUDA_R_32F ? 4 : 2);
        const void* c = (const char*)C.p + b * C.stride * (C.type == CUDA_R_32F ? 4 : 2);
        void* d = (char*)D.p + b * D.stride * (D.type == CUDA_R_32F ? 4 : 2);
        auto opA = [&](int i, int kk) EMU_UNCHECKED { return blas_load(a, A.type, ta ? kk + (int64_t)i * A.ld : i + (int64_t)kk * A.ld); };
        auto opB = [&](int kk, int j) EMU_UNCHECKED { return blas_load(bm, B.type, tb ? j + (int64_t)kk * B.ld : kk + (int64_t)j * B.ld); };
        const void* bias = e.bias ? (const char*)e.bias + b * e.bias_stride * (e.bias_type == CUDA_R_32F ? 4 : 2) : nullptr;
        void* aux = e.aux ? (char*)e.aux + b * e.aux_stride * (e.aux_type == CUDA_R_32F ? 4 : 2) : nullptr;
        // op(A)'s rows and op(B)'s columns as contiguous floats (the loads are exact), then the sums
        for (int i = 0; i < m; i++)
            for (int kk = 0; kk < k; kk++) pa[(size_t)i * k + kk] = opA(i, kk);
        for (int j = 0; j < n; j++)
            for (int kk = 0; kk < k; kk++) pb[(size_t)j * k + kk] = opB(kk, j);
        gemm_sums(pa.data(), pb.data(), m, n, k, blocked ? kSplitK : k, out);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float v = alpha * out[i + (size_t)j * m];
                if (beta != 0.0f) v += beta * blas_load(c, C.type, i + (int64_t)j * C.ld);
                if (has_bias) v += blas_load(bias, e.bias_type, i);
                if (aux_out) blas_store(aux, e.aux_type, i + (int64_t)j * e.aux_ld, v);
                if (gelu_fwd) v = gelu(v);
                if (dgelu) v *= gelu_grad(blas_load(aux, e.aux_type, i + (int64_t)j * e.aux_ld));
                out[i + (size_t)j * m] = v;
            }
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) blas_store(d, D.type, i + (int64_t)j * D.ld, out[i + (size_t)j * m]);
        void* grad = (void*)bias;
        if (bgrad_d)  // bias gradient: sum of the (GELU-backpropagated) result over the columns of D
            for (int i = 0; i < m; i++) {
                float s = 0.0f;
                for (int j = 0; j < n; j++) s += out[i + (size_t)j * m];
                blas_store(grad, e.bias_type, i, s);
            }
        if (e.kind == CUBLASLT_EPILOGUE_BGRADA)  // sum of op(A) over k: one value per row of D
            for (int i = 0; i < m; i++) {
                float s = 0.0f;
                for (int kk = 0; kk < k; kk++) s += opA(i, kk);
                blas_store(grad, e.bias_type, i, s);
            }
        if (e.kind == CUBLASLT_EPILOGUE_BGRADB)  // sum of op(B) over k: one value per column of D
            for (int j = 0; j < n; j++) {
                float s = 0.0f;
                for (int kk = 0; kk < k; kk++) s += opB(kk, j);
                blas_store(grad, e.bias_type, j, s);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

template <class T> cublasStatus_t set_attr(T& field, const void* buf, size_t n) {
    if (!buf || n != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&field, buf, n);
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace emu

// ---- cuBLASLt ----
inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) { *h = new cublasLtContext{nullptr}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = new cublasLtMatmulDescOpaque_t{compute, scale};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                     const void* buf, size_t n) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return emu::set_attr(d->compute, buf, n);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return emu::set_attr(d->scale, buf, n);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return emu::set_attr(d->pointer_mode, buf, n);
    case CUBLASLT_MATMUL_DESC_TRANSA: return emu::set_attr(d->transa, buf, n);
    case CUBLASLT_MATMUL_DESC_TRANSB: return emu::set_attr(d->transb, buf, n);
    case CUBLASLT_MATMUL_DESC_TRANSC: return emu::set_attr(d->transc, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return emu::set_attr(d->epilogue, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return emu::set_attr(d->bias, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return emu::set_attr(d->bias_batch_stride, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return emu::set_attr(d->aux, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return emu::set_attr(d->aux_ld, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return emu::set_attr(d->aux_batch_stride, buf, n);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return emu::set_attr(d->sm_count, buf, n);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return emu::set_attr(d->aux_type, buf, n);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return emu::set_attr(d->fast_accum, buf, n);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return emu::set_attr(d->bias_type, buf, n);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t t, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
    *l = new cublasLtMatrixLayoutOpaque_t{t, CUBLASLT_ORDER_COL, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                       const void* buf, size_t n) {
    switch (a) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return emu::set_attr(l->type, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return emu::set_attr(l->order, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return emu::set_attr(l->rows, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return emu::set_attr(l->cols, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_LD: return emu::set_attr(l->ld, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return emu::set_attr(l->batch, buf, n);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return emu::set_attr(l->stride, buf, n);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
    *p = new cublasLtMatmulPreferenceOpaque_t{};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t a, const void* buf, size_t n) {
    if (a == CUBLASLT_MATMUL_PREF_SEARCH_MODE) return emu::set_attr(p->search_mode, buf, n);
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return emu::set_attr(p->max_workspace, buf, n);
    if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        return emu::set_attr(p->min_align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, n);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

namespace emu {
// The strict rules of cuBLASLt (emu::strict(); EMU_STRICT=0: any pointer and leading dimension):
// a 16-bit operand needs 16-byte aligned pointers and ld * 2 % 16 == 0 (tensor-core tiles), every
// operand at least its element size; the bias and aux pointers 16-byte alignment and the aux
// leading dimension a multiple of 8; an algorithm returned by the heuristic may assume the
// alignment it was asked for (the preference's minimum, 256 bytes by default), so cublasLtMatmul
// refuses a pointer aligned to less. Each refusal says why on stderr.
constexpr uint64_t kAlgoMagic = 0x656d75616c676f31ull;  // marks an algorithm from our heuristic
inline void blas_refuse(const char* fn, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void blas_refuse(const char* fn, const char* fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda_emu: %s refuses: %s (cuBLASLt: CUBLAS_STATUS_NOT_SUPPORTED)\n", fn, msg);
}
inline int blas_elem(int type) { return type == CUDA_R_32F ? 4 : 2; }
inline const char* kOperand[4] = {"A", "B", "C", "D"};
// The layout rules of the four operands and the epilogue's aux leading dimension; true if they hold.
inline bool blas_layouts_ok(const char* fn, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t const* l) {
    for (int i = 0; i < 4; i++) {
        int es = blas_elem(l[i]->type);
        if (es == 2 && (l[i]->ld * es) % 16 != 0) {
            blas_refuse(fn, "%s is 16-bit with leading dimension %lld: ld * 2 bytes must be a multiple of 16",
                        kOperand[i], (long long)l[i]->ld);
            return false;
        }
    }
    bool aux = d->epilogue & 128;  // GELU_AUX(_BIAS), DGELU(_BGRAD)
    if (aux && d->aux_ld % 8 != 0) {
        blas_refuse(fn, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD %lld is not divisible by 8", (long long)d->aux_ld);
        return false;
    }
    return true;
}
inline int ptr_align(const void* p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}
}  // namespace emu

// One algorithm fits every problem; it needs no workspace. Under the strict rules there is none
// where cuBLASLt has none (count 0, CUBLAS_STATUS_NOT_SUPPORTED): a layout rule broken, or an
// alignment preference below what an operand type needs; the algorithm remembers the alignments
// it was chosen for.
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Al,
                                                     cublasLtMatrixLayout_t Bl, cublasLtMatrixLayout_t Cl, cublasLtMatrixLayout_t Dl,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t* results, int* count) {
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    memset(results, 0, sizeof(*results));
    *count = 0;
    if (emu::strict()) {
        const char* fn = "cublasLtMatmulAlgoGetHeuristic";
        cublasLtMatrixLayout_t l[4] = {Al, Bl, Cl, Dl};
        if (!emu::blas_layouts_ok(fn, desc, l)) return CUBLAS_STATUS_NOT_SUPPORTED;
        for (int i = 0; i < 4; i++) {
            uint32_t need = emu::blas_elem(l[i]->type) == 2 ? 16 : 4;
            if (pref && pref->min_align[i] < need) {
                emu::blas_refuse(fn, "%s: a minimum alignment of %u bytes, below the %u its type needs", emu::kOperand[i],
                                 pref->min_align[i], need);
                return CUBLAS_STATUS_NOT_SUPPORTED;
            }
        }
    }
    results->state = CUBLAS_STATUS_SUCCESS;
    results->wavesCount = 1.0f;
    results->algo.data[0] = emu::kAlgoMagic;
    for (int i = 0; i < 4; i++) results->algo.data[1 + i] = pref ? pref->min_align[i] : 256;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}
// A matmul runs as an operation of its stream (under --check: after the stream's earlier work, unchecked;
// plain builds: emu_async.h).
template <class F> cublasStatus_t blas_run(cudaStream_t s, F f) {
#ifdef EMU_CHECK
    cublasStatus_t r = CUBLAS_STATUS_SUCCESS;
    emu::chk::run_now(s, "a cuBLAS matmul", [&] { r = f(); });
    return r;
#else
    if (emu::stream_ticket(s) <= emu::drain()) return f();
    emu::enqueue(s, [f]() mutable { f(); });  // queued behind a pending collective (emu_async.h): its status is lost
    return CUBLAS_STATUS_SUCCESS;
#endif
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t Al, const void* B, cublasLtMatrixLayout_t Bl,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t Cl, void* D,
                                     cublasLtMatrixLayout_t Dl, const cublasLtMatmulAlgo_t* algo, void*, size_t, cudaStream_t stream) {
    for (auto l : {Al, Bl, Cl, Dl})
        if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (emu::strict()) {
        const char* fn = "cublasLtMatmul";
        cublasLtMatrixLayout_t l[4] = {Al, Bl, Cl, Dl};
        const void* p[4] = {A, B, C, D};
        if (!emu::blas_layouts_ok(fn, desc, l)) return CUBLAS_STATUS_NOT_SUPPORTED;
        for (int i = 0; i < 4; i++) {
            int have = emu::ptr_align(p[i]), need = emu::blas_elem(l[i]->type) == 2 ? 16 : 4;
            const char* why = "its type needs";
            if (algo && algo->data[0] == emu::kAlgoMagic && (int)algo->data[1 + i] > need) {
                need = (int)algo->data[1 + i];
                why = "the algorithm was chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256)";
            }
            if (have < need) {
                emu::blas_refuse(fn, "%s at %p is %d-byte aligned, below the %d bytes %s", emu::kOperand[i], p[i], have,
                                 need, why);
                return CUBLAS_STATUS_NOT_SUPPORTED;
            }
        }
        uint32_t ep = desc->epilogue;
        bool aux = ep & 128, bias = (ep & CUBLASLT_EPILOGUE_BIAS) || ep == CUBLASLT_EPILOGUE_DGELU_BGRAD || ep >= CUBLASLT_EPILOGUE_BGRADA;
        if (bias && emu::ptr_align(desc->bias) < 16) {
            emu::blas_refuse(fn, "the bias pointer %p is not 16-byte aligned", desc->bias);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (aux && emu::ptr_align(desc->aux) < 16) {
            emu::blas_refuse(fn, "the epilogue aux pointer %p is not 16-byte aligned", desc->aux);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
    }
    if (desc->scale != CUDA_R_32F || desc->transc != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    int m = (int)(desc->transa ? Al->cols : Al->rows), k = (int)(desc->transa ? Al->rows : Al->cols);
    int kb = (int)(desc->transb ? Bl->cols : Bl->rows), n = (int)(desc->transb ? Bl->rows : Bl->cols);
    if (k != kb || Dl->rows != (uint64_t)m || Dl->cols != (uint64_t)n || Cl->rows != Dl->rows || Cl->cols != Dl->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    int batch = Dl->batch;
    if (Al->batch != batch || Bl->batch != batch || Cl->batch != batch) return CUBLAS_STATUS_INVALID_VALUE;
    emu::Epilogue e;
    e.kind = desc->epilogue;
    e.bias = desc->bias;
    e.bias_type = desc->bias_type >= 0 ? desc->bias_type : Dl->type;
    e.bias_stride = desc->bias_batch_stride;
    e.aux = desc->aux;
    e.aux_type = desc->aux_type >= 0 ? desc->aux_type : Dl->type;
    e.aux_ld = desc->aux_ld;
    e.aux_stride = desc->aux_batch_stride;
    float al = *(const float*)alpha, be = *(const float*)beta;
    int ta = desc->transa, tb = desc->transb;  // read now, as cuBLASLt reads its descriptors at the call
    emu::Operand oa{A, Al->type, Al->ld, Al->stride}, ob{B, Bl->type, Bl->ld, Bl->stride};
    emu::Operand oc{C, Cl->type, Cl->ld, Cl->stride}, od{D, Dl->type, Dl->ld, Dl->stride};
    return blas_run(stream, [=] {
        return emu::gemm(ta, tb, m, n, k, al, oa, ob, be, oc, od, batch, e);
    });
}

// ---- cuBLAS (v2 API) ----
struct cublasContext { cudaStream_t stream; cublasMath_t math; };
typedef cublasContext* cublasHandle_t;
inline cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH}; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t* s) { *s = h->stream; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                                 int k, const void* alpha, const void* A, cudaDataType_t At, int lda,
                                                 long long sa, const void* B, cudaDataType_t Bt, int ldb, long long sb,
                                                 const void* beta, void* C, cudaDataType_t Ct, int ldc, long long sc,
                                                 int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (compute == CUBLAS_COMPUTE_16F || compute == CUBLAS_COMPUTE_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
    float al = *(const float*)alpha, be = *(const float*)beta;
    return blas_run(h->stream, [=] {
        return emu::gemm(ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, m, n, k, al, {A, At, lda, sa}, {B, Bt, ldb, sb}, be,
                         {C, Ct, ldc, sc}, {C, Ct, ldc, sc}, batch, emu::Epilogue{});
    });
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType_t At, int lda, const void* B,
                                   cudaDataType_t Bt, int ldb, const void* beta, void* C, cudaDataType_t Ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, At, lda, 0, B, Bt, ldb, 0, beta, C, Ct, ldc, 0, 1,
                                      compute, algo);
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float* alpha, const float* A, int lda, long long sa,
                                                const float* B, int ldb, long long sb, const float* beta, float* C,
                                                int ldc, long long sc, int batch) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, beta, C,
                                      CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float* alpha, const float* A, int lda, const float* B, int ldb,
                                  const float* beta, float* C, int ldc) {
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}
inline const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasGetStatusString(s); }

#endif
