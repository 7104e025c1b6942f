// Broken: the accumulator fragment's elements are written out assuming lane l holds row l / 2,
// columns 8 (l % 2) .. + 7 -- a mapping CUDA does not specify (store_matrix_sync is the portable way).
#include "common.h"
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
__global__ void gemm16(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
#ifdef FIXED
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
#else
    int lane = threadIdx.x;
    for (int i = 0; i < acc.num_elements; i++) c[(lane / 2) * 16 + (lane % 2) * 8 + i] = acc.x[i];
#endif
}
int main() {
    half ha[256], hb[256];
    float fa[256], fb[256], want[256], got[256], *dc;
    half *da, *db;
    for (int i = 0; i < 256; i++) {
        ha[i] = __float2half((float)(i % 5) - 2.0f);
        hb[i] = __float2half((float)(i % 3) - 1.0f);
        fa[i] = __half2float(ha[i]);
        fb[i] = __half2float(hb[i]);
    }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++) s += fa[m * 16 + k] * fb[k * 16 + n];
            want[m * 16 + n] = s;
        }
    CK(cudaMalloc(&da, sizeof(ha)));
    CK(cudaMalloc(&db, sizeof(hb)));
    CK(cudaMalloc(&dc, sizeof(got)));
    CK(cudaMemcpy(da, ha, sizeof(ha), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb, sizeof(hb), cudaMemcpyHostToDevice));
    gemm16<<<1, 32>>>(da, db, dc);
    CK(cudaGetLastError());
    CK(cudaMemcpy(got, dc, sizeof(got), cudaMemcpyDeviceToHost));
    return expect_equal(got, want, 256, "gemm16");
}
