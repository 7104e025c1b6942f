// attention_fa2_backward.cuh: the backward of llmc/attention_fa2.cuh's forward on mma.sync, ldmatrix
// and cp.async (BF16, head size 64). Same interface as attention_backward_flash: dqkv (B, T, 3C)
// written from dout (B, T, C), qkv, out and lse (B, NH, T); delta (B, NH, T) fp32 scratch.
// Deterministic without atomics, two kernels: a query pass (delta = rowsum(dout * out), then
// dq = sum over key tiles of dS K / 8) and a key pass (dv = sum of P^T dout, dk = sum of dS^T Q / 8
// over query tiles in ascending order). Both rebuild S = Q K^T and dP = dout V^T: 7 tile matmuls
// per (query tile, key tile) pair instead of 5, the price of a deterministic dq.
#ifndef LLMC_ATTENTION_FA2_BACKWARD_CUH
#define LLMC_ATTENTION_FA2_BACKWARD_CUH
#ifndef ENABLE_FP32

#include "attention_fa2.cuh"

// shared: two resident 64 x 64 tiles, two double-buffered ones, and two double-buffered float
// vectors of 64 (lse and delta of the streamed query tile, key pass only): 49152 + 1024 bytes
#define FA2_BWD_SMEM (6 * FA2_TILE_ELEMS * 2 + 4 * FA2_TILE * 4)

// A fragments of the warp's 16 rows (row0..) of a swizzled tile, head dims 16kk.. (ldmatrix.x4)
__device__ __forceinline__ void fa2_load_a(uint32_t f[4][4], const bf16* tile, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { ptx_ldmatrix_x4(f[kk], tile + fa2_off(row0 + lane % 16, 16 * kk + (lane / 16) * 8)); }
}

// rows row0 (acc [0..1]) and row0 + 8 ([2..3]) of a 16 x 64 fp32 accumulator times `scale`, as bf16
// pairs into rows of `base` (stride `rs` elements); rows >= T skipped.
__device__ __forceinline__ void fa2_store_acc(bf16* base, size_t rs, const float acc[8][4], float scale, int row0,
                                              int T, int lane) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row0 + hf * 8;
        if (r >= T) { continue; }
        uint32_t* row = reinterpret_cast<uint32_t*>(base + (size_t)r * rs);
#pragma unroll
        for (int n = 0; n < 8; n++) { row[4 * n + lane % 4] = fa2_pack(acc[n][2 * hf] * scale, acc[n][2 * hf + 1] * scale); }
    }
}

__device__ __forceinline__ void fa2_zero(float a[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; j++) { a[j][0] = a[j][1] = a[j][2] = a[j][3] = 0.0f; }
}

// delta for the block's 64 query rows (q0..): 2 threads per row, 32 dims each; into sD (64 floats)
// and, for rows < T, global delta_head. Rows >= T get 0.
__device__ __forceinline__ void fa2_delta(float* sD, float* delta_head, const bf16* dout_head, const bf16* out_head,
                                          int C, int q0, int T) {
    int r = threadIdx.x / 2, half = threadIdx.x % 2, q = q0 + r;
    float d = 0.0f;
    if (q < T) {
        for (int i = 0; i < 32; i++) {
            int c = half * 32 + i;
            d += __bfloat162float(dout_head[(size_t)q * C + c]) * __bfloat162float(out_head[(size_t)q * C + c]);
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    if (half == 0) {
        sD[r] = d;
        if (q < T) { delta_head[q] = d; }
    }
}

// Query pass. Grid (query blocks, last first; NH; B), 4 warps of 16 query rows. Resident: Q, dout
// (A fragments once); K/V tiles double-buffered by cp.async as in the forward. Per key tile kb <= qb:
// S = Q K^T, dP = dout V^T (V row-major as the B operand, like K), P = exp2(S log2e / 8 - lse log2e)
// masked, dS = P (dP - delta) packed to bf16 A fragments, dq += dS K (K by ldmatrix.trans).
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_query_fa2_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
    const bf16* __restrict__ out, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    bf16* sQ = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sDO = sQ + FA2_TILE_ELEMS; // then K (2 buffers), V (2 buffers)
    float* sD = reinterpret_cast<float*>(sQ + 6 * FA2_TILE_ELEMS);
    float* sL = sD + FA2_TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qb * FA2_TILE;
    size_t rs = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * rs + h * FA2_HS;
    const bf16* dout_head = dout + (size_t)b * T * C + h * FA2_HS;
    size_t lrow = ((size_t)b * NH + h) * T;
    fa2_load_tile(sQ, head, rs, q0, T);
    fa2_load_tile(sDO, dout_head, C, q0, T);
    fa2_load_tile(sQ + 2 * FA2_TILE_ELEMS, head + C, rs, 0, T);
    fa2_load_tile(sQ + 4 * FA2_TILE_ELEMS, head + 2 * C, rs, 0, T);
    ptx_cp_async_commit();
    fa2_delta(sD, delta + lrow, dout_head, out + (size_t)b * T * C + h * FA2_HS, C, q0, T);
    int tid = threadIdx.x;
    if (tid < FA2_TILE) { sL[tid] = q0 + tid < T ? lse[lrow + q0 + tid] * 1.4426950408889634f : 0.0f; }
    uint32_t qf[4][4], df[4][4];
    float dq[8][4], s[8][4], dp[8][4], L[2], D[2];
    fa2_zero(dq);
    int row0 = warp * 16 + lane / 4;
    const float sl2 = 0.125f * 1.4426950408889634f;
    for (int kb = 0; kb <= qb; kb++) {
        const bf16* sK = sQ + (2 + kb % 2) * FA2_TILE_ELEMS;
        const bf16* sV = sQ + (4 + kb % 2) * FA2_TILE_ELEMS;
        if (kb < qb) {
            fa2_load_tile(sQ + (2 + (kb + 1) % 2) * FA2_TILE_ELEMS, head + C, rs, (kb + 1) * FA2_TILE, T);
            fa2_load_tile(sQ + (4 + (kb + 1) % 2) * FA2_TILE_ELEMS, head + 2 * C, rs, (kb + 1) * FA2_TILE, T);
            ptx_cp_async_commit();
            ptx_cp_async_wait<1>();
        } else {
            ptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (kb == 0) {
            fa2_load_a(qf, sQ, warp * 16, lane);
            fa2_load_a(df, sDO, warp * 16, lane);
            L[0] = sL[row0]; L[1] = sL[row0 + 8]; D[0] = sD[row0]; D[1] = sD[row0 + 8];
        }
        fa2_scores(s, qf, sK, lane);
        fa2_scores(dp, df, sV, lane);
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                bool vis = fa2_visible(kb * FA2_TILE + 8 * j + 2 * (lane % 4) + i % 2, q0 + row0 + (i / 2) * 8);
                float p = vis ? exp2f(s[j][i] * sl2 - L[i / 2]) : 0.0f;
                s[j][i] = p * (dp[j][i] - D[i / 2]); // dS, in place
            }
        }
        fa2_pv(dq, s, sK, lane);
        __syncthreads();
    }
    fa2_store_acc(dqkv + (size_t)b * T * rs + h * FA2_HS, rs, dq, 0.125f, q0 + row0, T, lane);
}

// Key pass. Grid (key blocks, first (the longest) first; NH; B), 4 warps of 16 keys. Resident: K, V
// (A fragments once); per query tile qb >= kb, ascending, Q and dout tiles double-buffered by
// cp.async, lse and delta of its rows beside them. S^T = K Q^T, dP^T = V dout^T, P^T masked
// (queries >= T too), dS^T = P^T (dP^T - delta); dv += P^T dout, dk += dS^T Q (ldmatrix.trans).
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_key_fa2_kernel(
    bf16* __restrict__ dqkv, const float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    bf16* sK = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sV = sK + FA2_TILE_ELEMS; // then Q (2 buffers), dout (2 buffers)
    float* sL = reinterpret_cast<float*>(sK + 6 * FA2_TILE_ELEMS); // [2][64] lse log2e, then [2][64] delta
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kb * FA2_TILE, nq = gridDim.x;
    size_t rs = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * rs + h * FA2_HS;
    const bf16* dout_head = dout + (size_t)b * T * C + h * FA2_HS;
    size_t lrow = ((size_t)b * NH + h) * T;
    fa2_load_tile(sK, head + C, rs, k0, T);
    fa2_load_tile(sV, head + 2 * C, rs, k0, T);
    fa2_load_tile(sK + 2 * FA2_TILE_ELEMS, head, rs, k0, T); // the first query tile (qb = kb), buffer 0
    fa2_load_tile(sK + 4 * FA2_TILE_ELEMS, dout_head, C, k0, T);
    ptx_cp_async_commit();
    uint32_t kf[4][4], vf[4][4];
    float dk[8][4], dv[8][4], s[8][4], dp[8][4];
    fa2_zero(dk);
    fa2_zero(dv);
    int row0 = warp * 16 + lane / 4, t = lane % 4;
    const float sl2 = 0.125f * 1.4426950408889634f;
    for (int qb = kb; qb < nq; qb++) {
        int buf = (qb - kb) % 2, q0 = qb * FA2_TILE;
        const bf16* sQ = sK + (2 + buf) * FA2_TILE_ELEMS;
        const bf16* sDO = sK + (4 + buf) * FA2_TILE_ELEMS;
        const float* L = sL + buf * FA2_TILE;
        const float* D = sL + (2 + buf) * FA2_TILE;
        if (threadIdx.x < FA2_TILE) { // buffer buf was last read two iterations ago, before a barrier
            int q = q0 + threadIdx.x;
            sL[buf * FA2_TILE + threadIdx.x] = q < T ? lse[lrow + q] * 1.4426950408889634f : 0.0f;
            sL[(2 + buf) * FA2_TILE + threadIdx.x] = q < T ? delta[lrow + q] : 0.0f;
        }
        if (qb + 1 < nq) { // the next tile into the other buffer (read last in the previous iteration)
            fa2_load_tile(sK + (3 - buf) * FA2_TILE_ELEMS, head, rs, q0 + FA2_TILE, T);
            fa2_load_tile(sK + (5 - buf) * FA2_TILE_ELEMS, dout_head, C, q0 + FA2_TILE, T);
            ptx_cp_async_commit();
            ptx_cp_async_wait<1>();
        } else {
            ptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (qb == kb) {
            fa2_load_a(kf, sK, warp * 16, lane);
            fa2_load_a(vf, sV, warp * 16, lane);
        }
        fa2_scores(s, kf, sQ, lane);   // S^T: rows = the warp's keys, columns = queries 8j + 2t + 0/1
        fa2_scores(dp, vf, sDO, lane); // dP^T
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int c = 8 * j + 2 * t + i % 2, q = q0 + c;
                bool vis = q < T && fa2_visible(k0 + row0 + (i / 2) * 8, q);
                float p = vis ? exp2f(s[j][i] * sl2 - L[c]) : 0.0f;
                s[j][i] = p;                      // P^T
                dp[j][i] = p * (dp[j][i] - D[c]); // dS^T
            }
        }
        fa2_pv(dv, s, sDO, lane);
        fa2_pv(dk, dp, sQ, lane);
        __syncthreads();
    }
    bf16* base = dqkv + (size_t)b * T * rs + h * FA2_HS;
    fa2_store_acc(base + C, rs, dk, 0.125f, k0 + row0, T, lane);
    fa2_store_acc(base + 2 * C, rs, dv, 1.0f, k0 + row0, T, lane);
}

static void attention_backward_fa2(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH) {
    if (C / NH != FA2_HS) { fail("attention_backward_fa2: head size %d, these kernels need 64", C / NH); }
    static int setup = 0; // above 48 KiB of dynamic shared memory: raise the limit once per process
    if (!setup) {
        cudaCheck(cudaFuncSetAttribute(attention_backward_query_fa2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_BWD_SMEM));
        cudaCheck(cudaFuncSetAttribute(attention_backward_key_fa2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_BWD_SMEM));
        setup = 1;
    }
    dim3 grid(ceil_div_u(T, FA2_TILE), NH, B);
    attention_backward_query_fa2_kernel<<<grid, FA2_THREADS, FA2_BWD_SMEM>>>(dqkv, delta, dout, qkv, out, lse, T, C, NH);
    cudaLaunchCheck();
    attention_backward_key_fa2_kernel<<<grid, FA2_THREADS, FA2_BWD_SMEM>>>(dqkv, delta, dout, qkv, lse, T, C, NH);
    cudaLaunchCheck();
}

#endif
#endif
