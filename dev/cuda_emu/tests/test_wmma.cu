// test_wmma.cu: nvcuda::wmma (16x16x16, bf16 and fp16 inputs, fp32 accumulator) against a naive loop:
// a tiled GEMM C = alpha A B + beta C0 for every combination of A/B row/col-major and C row/col-major
// storage, with leading dimensions larger than the tile, an element-wise pass over the accumulator's
// x[i] (scaled by alpha), fragments filled, loaded from and stored to shared memory. Inputs are exact
// in bf16/fp16 products summed in fp32, compared with the loop at 1e-5 relative.
// Real CUDA: it also compiles with nvcc for sm_80 and sm_90.
#include <mma.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector>
#include "check.h"
using namespace nvcuda;

// C (M x N, ldc) = alpha * A (M x K) B (K x N) + beta * C0; one warp per 16x16 tile of C, tiles over
// blockIdx.x (rows) and blockIdx.y (cols). A_ROW: A stored row-major (lda = K + padA) else column-major
// (lda = M + padA); likewise B; C_ROW: C stored row-major. C0 is staged through shared memory.
template <class T, class LA, class LB, bool C_ROW>
__global__ void wmma_gemm(const T* A, const T* B, const float* C0, float* C, int M, int N, int K, int lda, int ldb,
                          int ldc, float alpha, float beta) {
    __shared__ __align__(32) float stage[16 * 16];
    int tm = blockIdx.x * 16, tn = blockIdx.y * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, c0;
    wmma::fill_fragment(acc, 0.0f);
    const bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    for (int k = 0; k < K; k += 16) {
        const T* pa = a_row ? A + (size_t)tm * lda + k : A + (size_t)k * lda + tm;
        const T* pb = b_row ? B + (size_t)k * ldb + tn : B + (size_t)tn * ldb + k;
        wmma::load_matrix_sync(a, pa, lda);
        wmma::load_matrix_sync(b, pb, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= alpha;
    // C0's tile into shared memory (row-major, ld 16) by all lanes, then into a fragment
    for (int e = threadIdx.x; e < 256; e += 32) {
        int r = e / 16, c = e % 16;
        stage[e] = C_ROW ? C0[(size_t)(tm + r) * ldc + tn + c] : C0[(size_t)(tn + c) * ldc + tm + r];
    }
    __syncwarp();
    wmma::load_matrix_sync(c0, stage, 16, wmma::mem_row_major);
    for (int i = 0; i < c0.num_elements; i++) acc.x[i] += beta * c0.x[i];
    float* pc = C_ROW ? C + (size_t)tm * ldc + tn : C + (size_t)tn * ldc + tm;
    wmma::store_matrix_sync(pc, acc, ldc, C_ROW ? wmma::mem_row_major : wmma::mem_col_major);
}

// Every lane writes its lane number at the positions its accumulator elements store to: each of the
// 256 positions must be written exactly once (checked on the host), whatever the mapping.
__global__ void wmma_owner(float* out) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (float)threadIdx.x;
    wmma::store_matrix_sync(out, f, 16, wmma::mem_row_major);
}

static float rnd(unsigned& s) {  // small integers / 8: exact in bf16 and fp16, products exact in fp32
    s = s * 1664525u + 1013904223u;
    return (float)((int)(s >> 24) % 17 - 8) / 8.0f;
}

template <class T, class LA, class LB, bool C_ROW> void run(const char* name) {
    const int M = 32, N = 48, K = 64, padA = 8, padB = 16, ldc = (C_ROW ? N : M) + 4 * 2;
    const bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    int lda = (a_row ? K : M) + padA, ldb = (b_row ? N : K) + padB;
    size_t na = (size_t)(a_row ? M : K) * lda, nb = (size_t)(b_row ? K : N) * ldb, nc = (size_t)(C_ROW ? M : N) * ldc;
    std::vector<T> hA(na), hB(nb);
    std::vector<float> fA(na), fB(nb), hC0(nc), hC(nc);
    unsigned s = 12345;
    for (size_t i = 0; i < na; i++) { hA[i] = T(rnd(s)); fA[i] = (float)hA[i]; }
    for (size_t i = 0; i < nb; i++) { hB[i] = T(rnd(s)); fB[i] = (float)hB[i]; }
    for (size_t i = 0; i < nc; i++) hC0[i] = rnd(s);
    T *dA, *dB;
    float *dC0, *dC;
    CUDA_CHECK(cudaMalloc(&dA, na * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&dB, nb * sizeof(T)));
    CUDA_CHECK(cudaMalloc(&dC0, nc * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dC, nc * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dA, hA.data(), na * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, hB.data(), nb * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC0, hC0.data(), nc * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC, hC0.data(), nc * sizeof(float), cudaMemcpyHostToDevice));
    const float alpha = 0.5f, beta = 2.0f;
    wmma_gemm<T, LA, LB, C_ROW><<<dim3(M / 16, N / 16), 32>>>(dA, dB, dC0, dC, M, N, K, lda, ldb, ldc, alpha, beta);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpy(hC.data(), dC, nc * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double ref = 0.0;
            for (int k = 0; k < K; k++)
                ref += (double)(a_row ? fA[(size_t)m * lda + k] : fA[(size_t)k * lda + m]) *
                       (b_row ? fB[(size_t)k * ldb + n] : fB[(size_t)n * ldb + k]);
            size_t ic = C_ROW ? (size_t)m * ldc + n : (size_t)n * ldc + m;
            ref = alpha * ref + beta * hC0[ic];
            double err = std::fabs(hC[ic] - ref) / std::fmax(1.0, std::fabs(ref));
            worst = std::fmax(worst, err);
        }
    EXPECT(worst <= 1e-5, "%s: max relative error %.3g > 1e-5", name, worst);
    printf("%-28s max relative error %.3g\n", name, worst);
    CUDA_CHECK(cudaFree(dA));
    CUDA_CHECK(cudaFree(dB));
    CUDA_CHECK(cudaFree(dC0));
    CUDA_CHECK(cudaFree(dC));
}

int main() {
    run<__nv_bfloat16, wmma::row_major, wmma::row_major, true>("bf16 A row B row C row");
    run<__nv_bfloat16, wmma::row_major, wmma::col_major, false>("bf16 A row B col C col");
    run<__nv_bfloat16, wmma::col_major, wmma::row_major, true>("bf16 A col B row C row");
    run<__nv_bfloat16, wmma::col_major, wmma::col_major, false>("bf16 A col B col C col");
    run<__half, wmma::row_major, wmma::col_major, true>("fp16 A row B col C row");
    run<__half, wmma::col_major, wmma::row_major, false>("fp16 A col B row C col");
    run<__half, wmma::row_major, wmma::row_major, false>("fp16 A row B row C col");
    float* d;
    CUDA_CHECK(cudaMalloc(&d, 256 * sizeof(float)));
    wmma_owner<<<1, 32>>>(d);
    CUDA_CHECK(cudaGetLastError());
    float h[256];
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    int count[32] = {0};
    for (int i = 0; i < 256; i++)
        if (h[i] >= 0 && h[i] < 32 && h[i] == (int)h[i]) count[(int)h[i]]++;
    for (int l = 0; l < 32; l++) EXPECT(count[l] == 8, "lane %d owns %d accumulator elements, want 8", l, count[l]);
    CUDA_CHECK(cudaFree(d));
    return finish("test_wmma");
}
