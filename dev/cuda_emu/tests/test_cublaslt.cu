// test_cublaslt.cu: every cuBLASLt matmul combination the project uses, against a naive loop in
// double: fp32 and bf16 operands (fp32 compute), all four transpose combinations, padded leading
// dimensions, alpha/beta with D == C accumulation, strided batches, and the epilogues DEFAULT, BIAS,
// GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA, BGRADB; plus cublasSgemm,
// cublasSgemmStridedBatched and cublasGemmEx. Leading dimensions and batch strides are padded to
// multiples of 8 elements (cuBLASLt's 16-byte rules for bf16). Under the emulator, also its strict
// rules: the heuristic refuses a bf16 leading dimension or aux_ld off the 16-byte rules, and a
// matmul refuses a pointer aligned to less than the heuristic was asked for. Real CUDA: it also
// compiles with nvcc.
#include <vector>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include "check.h"

#define BLAS_CHECK(call)                                                                       \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d: %s failed with status %d\n", __FILE__, __LINE__, #call, (int)s_); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// A device buffer of fp32 or bf16 values, with a host mirror of the values as stored.
struct Buf {
    bool bf16;
    std::vector<float> host;
    void* dev = nullptr;
    Buf(bool b, size_t n, unsigned seed) : bf16(b), host(n) {
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            float v = (float)((seed >> 9) % 2001) / 1000.0f - 1.0f;
            host[i] = bf16 ? __bfloat162float(__float2bfloat16(v)) : v;
        }
        CUDA_CHECK(cudaMalloc(&dev, n * (bf16 ? 2 : 4)));
        upload();
    }
    ~Buf() { cudaFree(dev); }
    void upload() {
        if (!bf16) { CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice)); return; }
        std::vector<__nv_bfloat16> t(host.size());
        for (size_t i = 0; i < t.size(); i++) t[i] = __float2bfloat16(host[i]);
        CUDA_CHECK(cudaMemcpy(dev, t.data(), t.size() * 2, cudaMemcpyHostToDevice));
    }
    std::vector<float> download() const {
        std::vector<float> r(host.size());
        if (!bf16) { CUDA_CHECK(cudaMemcpy(r.data(), dev, r.size() * 4, cudaMemcpyDeviceToHost)); return r; }
        std::vector<__nv_bfloat16> t(host.size());
        CUDA_CHECK(cudaMemcpy(t.data(), dev, t.size() * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < t.size(); i++) r[i] = __bfloat162float(t[i]);
        return r;
    }
    cudaDataType_t type() const { return bf16 ? CUDA_R_16BF : CUDA_R_32F; }
};

struct Case { bool ab_bf16, cd_bf16; int ta, tb, batch; cublasLtEpilogue_t epi; float alpha, beta; };
static int cases_run = 0;

static void run_case(cublasLtHandle_t lt, const Case& c) {
    const int m = 13, n = 7, k = 9, pad = 3;
    auto round8 = [](int x) { return (x + 7) / 8 * 8; };
    int arows = c.ta ? k : m, acols = c.ta ? m : k, brows = c.tb ? n : k, bcols = c.tb ? k : n;
    int lda = round8(arows + pad), ldb = round8(brows + pad), ldc = round8(m + pad), ldaux = round8(m + 1);
    long long sa = (long long)lda * acols + 8, sb = (long long)ldb * bcols + 16, sc = (long long)ldc * n + 8;
    unsigned seed = 17u * cases_run + 1u;
    Buf A(c.ab_bf16, sa * c.batch, seed), B(c.ab_bf16, sb * c.batch, seed + 7), D(c.cd_bf16, sc * c.batch, seed + 13);
    bool has_bias = c.epi & CUBLASLT_EPILOGUE_BIAS, gelu = c.epi == CUBLASLT_EPILOGUE_GELU || c.epi == CUBLASLT_EPILOGUE_GELU_BIAS ||
                    c.epi == CUBLASLT_EPILOGUE_GELU_AUX || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool aux_out = c.epi == CUBLASLT_EPILOGUE_GELU_AUX || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    bool dgelu = c.epi == CUBLASLT_EPILOGUE_DGELU || c.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    bool bgrad = c.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD || c.epi == CUBLASLT_EPILOGUE_BGRADA || c.epi == CUBLASLT_EPILOGUE_BGRADB;
    int bias_len = c.epi == CUBLASLT_EPILOGUE_BGRADB ? n : m;
    Buf bias(c.cd_bf16, bias_len, seed + 3), aux(c.cd_bf16, (size_t)ldaux * n, seed + 5);
    std::vector<float> C0 = D.host;  // C == D: the result accumulates onto D when beta != 0

    cublasLtMatmulDesc_t desc;
    BLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi, sizeof(c.epi)));
    if (has_bias || bgrad) BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias.dev, sizeof(void*)));
    if (aux_out || dgelu) {
        int64_t ld = ldaux;
        BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux.dev, sizeof(void*)));
        BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&la, A.type(), arows, acols, lda));
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, B.type(), brows, bcols, ldb));
    BLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, D.type(), m, n, ldc));
    if (c.batch > 1) {
        long long strides[3] = {sa, sb, sc};
        cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
        for (int i = 0; i < 3; i++) {
            BLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c.batch, sizeof(c.batch)));
            BLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof(long long)));
        }
    }
    cublasLtMatmulPreference_t pref;
    size_t ws_size = 1 << 20;
    void* ws;
    CUDA_CHECK(cudaMalloc(&ws, ws_size));
    BLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    BLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found));
    EXPECT(found == 1, "heuristic found %d", found);
    BLAS_CHECK(cublasLtMatmul(lt, desc, &c.alpha, A.dev, la, B.dev, lb, &c.beta, D.dev, lc, D.dev, lc, &heur.algo, ws, ws_size, 0));
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> got = D.download(), got_bias = bias.download(), got_aux = aux.download();
    double tol = c.cd_bf16 ? 1e-2 : 1e-5;
    int bad = 0;
    for (int b = 0; b < c.batch; b++) {
        auto opA = [&](int i, int kk) { return (double)A.host[b * sa + (c.ta ? kk + (long long)i * lda : i + (long long)kk * lda)]; };
        auto opB = [&](int kk, int j) { return (double)B.host[b * sb + (c.tb ? j + (long long)kk * ldb : kk + (long long)j * ldb)]; };
        std::vector<double> rowsum(m, 0.0);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int kk = 0; kk < k; kk++) acc += opA(i, kk) * opB(kk, j);
                double v = c.alpha * acc + c.beta * C0[b * sc + i + (long long)j * ldc];
                if (has_bias) v += bias.host[i];
                if (aux_out) bad += !close_to(got_aux[i + j * ldaux], v, tol);
                if (gelu) v = gelu_ref(v);
                if (dgelu) v *= gelu_grad_ref(aux.host[i + j * ldaux]);
                rowsum[i] += v;
                bad += !close_to(got[b * sc + i + (long long)j * ldc], v, tol);
            }
        if (c.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD)
            for (int i = 0; i < m; i++) bad += !close_to(got_bias[i], rowsum[i], tol * 4);
        for (int i = 0; c.epi == CUBLASLT_EPILOGUE_BGRADA && i < m; i++) {
            double s = 0;
            for (int kk = 0; kk < k; kk++) s += opA(i, kk);
            bad += !close_to(got_bias[i], s, tol * 4);
        }
        for (int j = 0; c.epi == CUBLASLT_EPILOGUE_BGRADB && j < n; j++) {
            double s = 0;
            for (int kk = 0; kk < k; kk++) s += opB(kk, j);
            bad += !close_to(got_bias[j], s, tol * 4);
        }
        // elements outside the matrices (padding rows, gaps between batches) must be untouched
        for (long long e = 0; e < sc; e++)
            if (e % ldc >= m || e >= (long long)ldc * n) bad += got[b * sc + e] != D.host[b * sc + e];
    }
    EXPECT(bad == 0, "cuBLASLt ab_bf16=%d cd_bf16=%d ta=%d tb=%d batch=%d epilogue=%d alpha=%g beta=%g: %d mismatches",
           c.ab_bf16, c.cd_bf16, c.ta, c.tb, c.batch, (int)c.epi, c.alpha, c.beta, bad);
    cases_run++;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(ws);
}

// cuBLAS: C = alpha op(A) op(B) + beta C, single and strided batched, fp32 and bf16 (GemmEx).
static void run_cublas(cublasHandle_t h, int ta, int tb, bool bf16, int batch) {
    const int m = 6, n = 5, k = 4, lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 1;
    long long sa = (long long)lda * (ta ? m : k), sb = (long long)ldb * (tb ? k : n), sc = (long long)ldc * n;
    Buf A(bf16, sa * batch, 3), B(bf16, sb * batch, 5), C(false, sc * batch, 9);
    float alpha = 0.5f, beta = 2.0f;
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (bf16)
        BLAS_CHECK(cublasGemmStridedBatchedEx(h, oa, ob, m, n, k, &alpha, A.dev, CUDA_R_16BF, lda, sa, B.dev, CUDA_R_16BF, ldb, sb,
                                              &beta, C.dev, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    else if (batch == 1)
        BLAS_CHECK(cublasSgemm(h, oa, ob, m, n, k, &alpha, (float*)A.dev, lda, (float*)B.dev, ldb, &beta, (float*)C.dev, ldc));
    else
        BLAS_CHECK(cublasSgemmStridedBatched(h, oa, ob, m, n, k, &alpha, (float*)A.dev, lda, sa, (float*)B.dev, ldb, sb, &beta,
                                             (float*)C.dev, ldc, sc, batch));
    std::vector<float> got = C.download();
    int bad = 0;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int kk = 0; kk < k; kk++)
                    acc += (double)A.host[b * sa + (ta ? kk + i * lda : i + kk * lda)] * B.host[b * sb + (tb ? j + kk * ldb : kk + j * ldb)];
                bad += !close_to(got[b * sc + i + j * ldc], alpha * acc + beta * C.host[b * sc + i + j * ldc], 1e-5);
            }
    EXPECT(bad == 0, "cuBLAS ta=%d tb=%d bf16=%d batch=%d: %d mismatches", ta, tb, bf16, batch, bad);
}

#ifdef EMU_CUDA
// The emulator's strict cuBLASLt rules (dev/cuda_emu/README.md): refusals where cuBLASLt refuses.
static void strict_rules(cublasLtHandle_t lt) {
    const int m = 16, n = 8, k = 16;
    Buf A(true, 2 * k * m + 64, 1), B(true, k * n, 2), D(true, m * n, 3), aux(true, 16 * n, 4);
    auto heuristic = [&](int lda, int64_t aux_ld, uint32_t align_a, size_t a_offset, cublasLtMatmulHeuristicResult_t* heur) {
        cublasLtMatmulDesc_t desc;
        BLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        if (aux_ld > 0) {
            cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_GELU_AUX;
            BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
            BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux.dev, sizeof(void*)));
            BLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        }
        cublasLtMatrixLayout_t la, lb, ld;
        BLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, lda));
        BLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
        BLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
        cublasLtMatmulPreference_t pref;
        BLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        if (align_a) BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, heur, &found);
        float one = 1.0f, zero = 0.0f;
        const void* a = (const char*)A.dev + a_offset;
        cublasStatus_t mm = found ? cublasLtMatmul(lt, desc, &one, a, la, B.dev, lb, &zero, D.dev, ld, D.dev, ld, &heur->algo,
                                                   nullptr, 0, 0) : CUBLAS_STATUS_NOT_SUPPORTED;
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(ld);
        cublasLtMatmulDescDestroy(desc);
        return std::make_pair(st == CUBLAS_STATUS_SUCCESS ? found : 0, mm);
    };
    cublasLtMatmulHeuristicResult_t heur;
    fprintf(stderr, "(the refusals below are expected)\n");
    EXPECT(heuristic(m, 0, 0, 0, &heur).first == 1, "strict: a plain bf16 matmul has an algorithm");
    EXPECT(heuristic(m + 4, 0, 0, 0, &heur).first == 0, "strict: bf16 lda 20 (40 bytes) has no algorithm");
    EXPECT(heuristic(m, 16, 0, 0, &heur).first == 1, "strict: aux_ld 16 has an algorithm");
    EXPECT(heuristic(m, 20, 0, 0, &heur).first == 0, "strict: aux_ld 20 has no algorithm");
    EXPECT(heuristic(m, 0, 8, 0, &heur).first == 0, "strict: a bf16 operand asked for at 8-byte alignment has no algorithm");
    // A placed 128 bytes past a 256-byte boundary: refused under the default preference (256), runs when asked for at 128
    EXPECT(heuristic(m, 0, 0, 128, &heur).second == CUBLAS_STATUS_NOT_SUPPORTED, "strict: a 128-byte aligned A under the default 256-byte preference is refused");
    EXPECT(heuristic(m, 0, 128, 128, &heur).second == CUBLAS_STATUS_SUCCESS, "strict: a 128-byte aligned A asked for at 128 bytes runs");
    CUDA_CHECK(cudaDeviceSynchronize());
}
#endif

int main() {
    cublasLtHandle_t lt;
    BLAS_CHECK(cublasLtCreate(&lt));
#ifdef EMU_CUDA
    const char* strict_env = getenv("EMU_STRICT");
    if (!(strict_env && strict_env[0] == '0')) strict_rules(lt);
#endif
    const cublasLtEpilogue_t epis[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU,
                                       CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                       CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,
                                       CUBLASLT_EPILOGUE_BGRADB};
    const bool types[3][2] = {{false, false}, {true, true}, {true, false}};  // (A/B bf16, C/D bf16)
    for (const auto& t : types)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t e = 0; e < sizeof(epis) / sizeof(epis[0]); e++) {
                    float beta = (e + ta + tb) % 2 ? 1.0f : 0.0f;  // accumulate into D == C on half the cases
                    run_case(lt, {t[0], t[1], ta, tb, 1, epis[e], e % 3 ? 1.0f : 0.75f, beta});
                }
    for (const auto& t : types)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) run_case(lt, {t[0], t[1], ta, tb, 3, CUBLASLT_EPILOGUE_DEFAULT, 0.125f, (float)tb});
    BLAS_CHECK(cublasLtDestroy(lt));

    cublasHandle_t h;
    BLAS_CHECK(cublasCreate(&h));
    BLAS_CHECK(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH));
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            run_cublas(h, ta, tb, false, 1);
            run_cublas(h, ta, tb, false, 4);
            run_cublas(h, ta, tb, true, 2);
        }
    BLAS_CHECK(cublasDestroy(h));
    printf("%d cuBLASLt cases\n", cases_run);
    return finish("test_cublaslt");
}
