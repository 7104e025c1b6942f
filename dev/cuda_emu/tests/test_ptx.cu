// test_ptx.cu: llmc/ptx.cuh (mma.sync m16n8k16, ldmatrix, cp.async) against naive CPU loops, at
// the PTX ISA's documented per-lane layouts, restated independently here (not taken from ptx.cuh):
//   ldmatrix  every variant (.x1/.x2/.x4, .trans) of 4 distinct 8x8 matrices whose rows lie scattered
//             in shared memory: each lane's registers equal the documented pairs exactly
//   mma       bf16 and f16 fragments assembled by hand from the documented layout: bitwise equal to
//             the loop for inputs whose products and sums are exact in fp32 (k/64, |k| < 128), within
//             2^-20 sum|a b| of a double loop for random full-mantissa bf16 inputs
//   pipeline  a 16x8x16 mma whose A comes from ldmatrix.x4 and B from ldmatrix.x2.trans (bitwise),
//             and a 64x64x64 bf16 matmul (4 warps, cp.async double-buffered 16-wide k tiles,
//             ldmatrix.x4 / .x4.trans, mma) against the loop: bitwise (exact inputs) and 2^-20 sum|a b|
// Built with -DEMU_PTX_PLANT=1 or 2 (a swapped lane pair in the emulator's mma or ldmatrix) it must fail.
// Real CUDA: it also compiles with nvcc for sm_80 and sm_90 (the SASS has HMMA, LDSM, LDGSTS).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cstring>
#include <vector>
#include "check.h"
#include "../../../llmc/ptx.cuh"

// ---- ldmatrix: out[v][lane][4] for variant v = 0..5 (x1, x2, x4, x1.trans, x2.trans, x4.trans) ----
// Matrix j, row r lives at element offset 8 (4 r + (3 - j)) of a 256-element shared buffer; its
// element c has the value 64 j + 8 r + c.
__global__ void ldmatrix_all(uint32_t* out) {
    __shared__ __align__(16) uint16_t s[256];
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) {
        int row_slot = i / 8, c = i % 8, r = row_slot / 4, j = 3 - row_slot % 4;
        s[i] = (uint16_t)(64 * j + 8 * r + c);
    }
    __syncwarp();
    const uint16_t* row = s + 8 * (4 * (lane % 8) + (3 - (lane / 8)));  // lane 8j + r: matrix j, row r
    uint32_t r[4] = {0, 0, 0, 0};
    uint32_t* o = out + lane * 4;
    ptx_ldmatrix_x1(r, row);       for (int k = 0; k < 4; k++) o[0 * 128 + k] = k < 1 ? r[k] : 0;
    ptx_ldmatrix_x2(r, row);       for (int k = 0; k < 4; k++) o[1 * 128 + k] = k < 2 ? r[k] : 0;
    ptx_ldmatrix_x4(r, row);       for (int k = 0; k < 4; k++) o[2 * 128 + k] = r[k];
    ptx_ldmatrix_x1_trans(r, row); for (int k = 0; k < 4; k++) o[3 * 128 + k] = k < 1 ? r[k] : 0;
    ptx_ldmatrix_x2_trans(r, row); for (int k = 0; k < 4; k++) o[4 * 128 + k] = k < 2 ? r[k] : 0;
    ptx_ldmatrix_x4_trans(r, row); for (int k = 0; k < 4; k++) o[5 * 128 + k] = r[k];
}

static void test_ldmatrix() {
    uint32_t* d;
    CUDA_CHECK(cudaMalloc(&d, 6 * 128 * sizeof(uint32_t)));
    ldmatrix_all<<<1, 32>>>(d);
    std::vector<uint32_t> got(6 * 128);
    CUDA_CHECK(cudaMemcpy(got.data(), d, got.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int v = 0; v < 6; v++) {
        int num = v % 3 == 0 ? 1 : v % 3 == 1 ? 2 : 4;
        bool trans = v >= 3;
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < 4; j++) {
                uint32_t want = 0;
                if (j < num) {
                    int g = lane / 4, t = lane % 4;  // documented: (row g; cols 2t, 2t+1) or its transpose
                    uint32_t lo = trans ? 64 * j + 8 * (2 * t) + g : 64 * j + 8 * g + 2 * t;
                    uint32_t hi = trans ? 64 * j + 8 * (2 * t + 1) + g : 64 * j + 8 * g + 2 * t + 1;
                    want = lo | hi << 16;
                }
                if (got[v * 128 + lane * 4 + j] != want && bad++ < 4)
                    fprintf(stderr, "ldmatrix variant %d lane %d reg %d: got 0x%08x want 0x%08x\n", v, lane, j,
                            got[v * 128 + lane * 4 + j], want);
            }
    }
    EXPECT(bad == 0, "ldmatrix: %d registers differ from the documented layout", bad);
    CUDA_CHECK(cudaFree(d));
}

// ---- mma with hand-assembled fragments: A 16x16 row-major, B 16x8 row-major (k x n), C/D 16x8 ----
static __host__ __device__ uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }
template <bool BF16>
__global__ void mma_by_hand(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    float c[4], d[4];
    for (int r = 0; r < 4; r++) {  // a[r]: row g + 8 (r % 2), cols 2t + 8 (r / 2) and +1
        int m = g + 8 * (r % 2), k = 2 * t + 8 * (r / 2);
        a[r] = pack2(A[m * 16 + k], A[m * 16 + k + 1]);
    }
    for (int r = 0; r < 2; r++) {  // b[r]: rows 2t + 8 r and +1, col g
        int k = 2 * t + 8 * r;
        b[r] = pack2(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    for (int i = 0; i < 4; i++) c[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    if (BF16) ptx_mma_bf16_16816(d, a, b, c);
    else ptx_mma_f16_16816(d, a, b, c);
    for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

static uint16_t bits_bf16(float x) { __nv_bfloat16 h = __float2bfloat16(x); uint16_t u; memcpy(&u, &h, 2); return u; }
static uint16_t bits_f16(float x) { __half h = __float2half(x); uint16_t u; memcpy(&u, &h, 2); return u; }
static float bf16_val(uint16_t u) { uint32_t w = (uint32_t)u << 16; float f; memcpy(&f, &w, 4); return f; }
static uint32_t rng = 12345;
static int rand_int(int n) { rng = rng * 1664525u + 1013904223u; return (int)((rng >> 8) % (uint32_t)n); }
// exact: k/64 with |k| < 128 (exact in bf16 and f16; products and 16- or 64-term sums exact in fp32)
static float exact_val() { return (float)(rand_int(255) - 127) / 64.0f; }
// random: a full-mantissa bf16 in +-[1/4, 4)
static float random_bf16() {
    float x = (1.0f + (float)rand_int(128) / 128.0f) * (float)(1 << rand_int(4)) / 4.0f;
    return bf16_val(bits_bf16(rand_int(2) ? -x : x));
}

// D = C + A B on the CPU; abssum = sum |a b| (for the tolerance)
static void ref_mm(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& C, int M, int N,
                   int K, std::vector<double>& D, std::vector<double>& abssum) {
    D.assign(M * N, 0.0);
    abssum.assign(M * N, 0.0);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = C.empty() ? 0.0 : C[m * N + n], a = 0;
            for (int k = 0; k < K; k++) { s += (double)A[m * K + k] * B[k * N + n]; a += std::fabs((double)A[m * K + k] * B[k * N + n]); }
            D[m * N + n] = s;
            abssum[m * N + n] = a;
        }
}

// Compare got with the loop: bitwise when exact, else within 2^-20 sum|a b|.
static void compare(const char* what, const std::vector<float>& got, const std::vector<double>& want,
                    const std::vector<double>& abssum, bool exact) {
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double err = std::fabs((double)got[i] - want[i]);
        bool ok = exact ? got[i] == (float)want[i] : err <= std::ldexp(abssum[i], -20) + 1e-30;
        if (abssum[i] > 0) worst = std::fmax(worst, err / abssum[i]);
        if (!ok && bad++ < 4) fprintf(stderr, "%s: element %zu is %.9g, want %.9g\n", what, i, got[i], want[i]);
    }
    EXPECT(bad == 0, "%s: %d elements differ", what, bad);
    printf("%s: %s, worst |error| / sum|a b| = %.3g\n", what, bad ? "MISMATCH" : "ok", worst);
}

template <bool BF16> static void test_mma_by_hand(bool exact) {
    std::vector<float> A(256), B(128), C(128);
    std::vector<uint16_t> Ab(256), Bb(128);
    for (int i = 0; i < 256; i++) {
        A[i] = exact || !BF16 ? exact_val() : random_bf16();
        Ab[i] = BF16 ? bits_bf16(A[i]) : bits_f16(A[i]);
    }
    for (int i = 0; i < 128; i++) {
        B[i] = exact || !BF16 ? exact_val() : random_bf16();
        Bb[i] = BF16 ? bits_bf16(B[i]) : bits_f16(B[i]);
        C[i] = exact ? exact_val() : random_bf16();
    }
    uint16_t *dA, *dB;
    float *dC, *dD;
    CUDA_CHECK(cudaMalloc(&dA, 512)); CUDA_CHECK(cudaMalloc(&dB, 256));
    CUDA_CHECK(cudaMalloc(&dC, 512)); CUDA_CHECK(cudaMalloc(&dD, 512));
    CUDA_CHECK(cudaMemcpy(dA, Ab.data(), 512, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, Bb.data(), 256, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dC, C.data(), 512, cudaMemcpyHostToDevice));
    mma_by_hand<BF16><<<1, 32>>>(dA, dB, dC, dD);
    std::vector<float> D(128);
    CUDA_CHECK(cudaMemcpy(D.data(), dD, 512, cudaMemcpyDeviceToHost));
    std::vector<double> want, abssum;
    ref_mm(A, B, C, 16, 8, 16, want, abssum);
    char what[64];
    snprintf(what, sizeof(what), "mma m16n8k16 %s, fragments by hand, %s inputs", BF16 ? "bf16" : "f16", exact ? "exact" : "random");
    compare(what, D, want, abssum, exact);
    cudaFree(dA); cudaFree(dB); cudaFree(dC); cudaFree(dD);
}

// ---- ldmatrix into mma: A (16x16) and B (16x8, k x n) row-major in shared memory; D = A B ----
__global__ void mma_from_ldmatrix(const uint16_t* A, const uint16_t* B, float* D) {
    __shared__ __align__(16) uint16_t sA[256], sB[128];
    int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (int i = lane; i < 256; i += 32) sA[i] = A[i];
    for (int i = lane; i < 128; i += 32) sB[i] = B[i];
    __syncwarp();
    uint32_t a[4], b[2];
    ptx_ldmatrix_x4(a, sA + (lane % 16) * 16 + (lane / 16) * 8);  // lanes 0-15 rows at col 0, 16-31 at col 8
    ptx_ldmatrix_x2_trans(b, sB + (lane % 16) * 8);                  // lanes 0-15: rows k = 0..15
    float c[4] = {0, 0, 0, 0}, d[4];
    ptx_mma_bf16_16816(d, a, b, c);
    for (int i = 0; i < 4; i++) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d[i];
}

// A (m x k) and B (k x n), row-major and bf16-exact, go to the device as bf16; launch(dA, dB, dD) writes
// D (m x n, fp32), which must match ref_mm (bit for bit with exact inputs)
template <typename Launch>
static void check_bf16_mm(const char* what, const std::vector<float>& A, const std::vector<float>& B, int m, int n,
                          int k, bool exact, Launch launch) {
    std::vector<uint16_t> Ab(A.size()), Bb(B.size());
    for (size_t i = 0; i < A.size(); i++) Ab[i] = bits_bf16(A[i]);
    for (size_t i = 0; i < B.size(); i++) Bb[i] = bits_bf16(B[i]);
    uint16_t *dA, *dB;
    float* dD;
    CUDA_CHECK(cudaMalloc(&dA, 2 * A.size())); CUDA_CHECK(cudaMalloc(&dB, 2 * B.size()));
    CUDA_CHECK(cudaMalloc(&dD, 4 * (size_t)m * n));
    CUDA_CHECK(cudaMemcpy(dA, Ab.data(), 2 * A.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dB, Bb.data(), 2 * B.size(), cudaMemcpyHostToDevice));
    launch(dA, dB, dD);
    std::vector<float> got((size_t)m * n), C;
    CUDA_CHECK(cudaMemcpy(got.data(), dD, 4 * (size_t)m * n, cudaMemcpyDeviceToHost));
    std::vector<double> want, abssum;
    ref_mm(A, B, C, m, n, k, want, abssum);
    compare(what, got, want, abssum, exact);
    cudaFree(dA); cudaFree(dB); cudaFree(dD);
}

static void test_mma_from_ldmatrix() {
    std::vector<float> A(256), B(128);
    for (int i = 0; i < 256; i++) A[i] = exact_val();
    for (int i = 0; i < 128; i++) B[i] = exact_val();
    check_bf16_mm("mma m16n8k16 bf16 from ldmatrix.x4 / .x2.trans, exact inputs", A, B, 16, 8, 16, true,
                  [](uint16_t* dA, uint16_t* dB, float* dD) { mma_from_ldmatrix<<<1, 32>>>(dA, dB, dD); });
}

// ---- 64x64x64: C (fp32, row-major) = A (64x64 bf16 row-major) B (64x64 bf16 row-major, k x n) ----
// One block of 4 warps; warp w computes rows 16w..16w+15, all 64 columns (8 n-tiles of 8). The k
// dimension runs in 4 tiles of 16, double-buffered: tile kt+1 is copied (cp.async, one 16-byte chunk
// of A and one of B per thread) while tile kt is multiplied.
__global__ void matmul64(const uint16_t* A, const uint16_t* B, float* C) {
    __shared__ __align__(16) uint16_t sA[2][64 * 16], sB[2][16 * 64];
    int tid = threadIdx.x, lane = tid % 32, w = tid / 32, g = lane / 4, t = lane % 4;
    auto load = [&](int kt, int buf) {
        int ar = tid / 2, ac = (tid % 2) * 8;   // A tile 64 x 16: row ar, cols ac..ac+7
        ptx_cp_async_cg16(&sA[buf][ar * 16 + ac], A + ar * 64 + kt * 16 + ac);
        int br = tid / 8, bc = (tid % 8) * 8;   // B tile 16 x 64: row br, cols bc..bc+7
        ptx_cp_async_cg16(&sB[buf][br * 64 + bc], B + (kt * 16 + br) * 64 + bc);
        ptx_cp_async_commit();
    };
    float acc[8][4];
    for (int n = 0; n < 8; n++) for (int i = 0; i < 4; i++) acc[n][i] = 0.0f;
    load(0, 0);
    for (int kt = 0; kt < 4; kt++) {
        if (kt + 1 < 4) { load(kt + 1, (kt + 1) % 2); ptx_cp_async_wait<1>(); }
        else ptx_cp_async_wait<0>();
        __syncthreads();
        const uint16_t* a_tile = sA[kt % 2];
        const uint16_t* b_tile = sB[kt % 2];
        uint32_t a[4];
        ptx_ldmatrix_x4(a, a_tile + (16 * w + lane % 16) * 16 + (lane / 16) * 8);
        for (int n = 0; n < 8; n += 2) {
            uint32_t b[4];  // lanes 0-15: k rows at col 8n, lanes 16-31: at col 8n + 8 -> two B fragments
            ptx_ldmatrix_x4_trans(b, b_tile + (lane % 16) * 64 + n * 8 + (lane / 16) * 8);
            ptx_mma_bf16_16816(acc[n], a, b, acc[n]);
            ptx_mma_bf16_16816(acc[n + 1], a, b + 2, acc[n + 1]);
        }
        __syncthreads();  // the buffer is refilled next iteration
    }
    for (int n = 0; n < 8; n++)
        for (int i = 0; i < 4; i++) C[(16 * w + g + 8 * (i / 2)) * 64 + 8 * n + 2 * t + i % 2] = acc[n][i];
}

static void test_matmul64(bool exact) {
    std::vector<float> A(4096), B(4096);
    for (int i = 0; i < 4096; i++) {
        A[i] = exact ? exact_val() : random_bf16();
        B[i] = exact ? exact_val() : random_bf16();
    }
    check_bf16_mm(exact ? "matmul 64x64x64 (cp.async, ldmatrix, mma), exact inputs"
                        : "matmul 64x64x64 (cp.async, ldmatrix, mma), random bf16 inputs", A, B, 64, 64, 64, exact,
                  [](uint16_t* dA, uint16_t* dB, float* dC) { matmul64<<<1, 128>>>(dA, dB, dC); });
}

int main() {
    test_ldmatrix();
    test_mma_by_hand<true>(true);
    test_mma_by_hand<true>(false);
    test_mma_by_hand<false>(true);
    test_mma_from_ldmatrix();
    test_matmul64(true);
    test_matmul64(false);
    return finish("test_ptx");
}
