// attention_fa2_backward.cuh: the backward of llmc/attention_fa2.cuh's forward on mma.sync, ldmatrix
// and cp.async (BF16, head sizes D = 32, 64, 128). Same interface as attention_backward_scalar: dqkv
// (B, T, 3C) written from dout (B, T, C), qkv, out and lse (B, NH, T); delta (B, NH, T) fp32 scratch.
// Two kernels, each with one block per 64-row tile of every (batch, head), so that a launch has
// B x NH x ceil(T/64) blocks at every batch size:
//   dq pass (one block per query tile): delta = rowsum(dout * out) of its rows (written for the
//     other pass), then per key tile kb <= qb: S = Q K^T, dP = dout V^T, dS = P (dP - delta),
//     dq += dS K (3 tile matmuls per pair);
//   dk/dv pass (one block per key tile): per query tile qb >= kb: S^T = K Q^T, dP^T = V dout^T,
//     dv += P^T dout, dk += dS^T Q (4 tile matmuls per pair).
// Every sum runs in one block's registers in a fixed order (ascending tiles): no atomics, so reruns
// are bitwise equal. S and dP are computed twice (7 tile matmuls where a single kernel needs 5): the
// price of dq without atomics at full occupancy (docs/gpu.md, "FlashAttention-2-style kernels").
#ifndef LLMC_ATTENTION_FA2_BACKWARD_CUH
#define LLMC_ATTENTION_FA2_BACKWARD_CUH
#ifndef ENABLE_FP32

#include "attention_fa2.cuh"

// shared, both passes: two resident 64 x D tiles and two double-buffered ones (6 tiles: 49152 bytes
// at D 64); the dk/dv pass adds lse and delta of its streamed query tile, double-buffered (1 KiB)
#define FA2_DQ_SMEM(D) (6 * FA2_TILE_ELEMS(D) * 2)
#define FA2_DKV_SMEM(D) (6 * FA2_TILE_ELEMS(D) * 2 + 4 * FA2_TILE * 4)

// A fragments of the warp's 16 rows (row0..) of a swizzled tile, head dims 16kk.. (ldmatrix.x4)
template <int D> __device__ __forceinline__ void fa2_load_a(uint32_t f[D / 16][4], const bf16* tile, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        ptx_ldmatrix_x4(f[kk], tile + fa2_off<D>(row0 + lane % 16, 16 * kk + (lane / 16) * 8));
    }
}

// head size 128's dimension loops (16 dims each) unrolled by 2, on sm_80 (an A100) not at all: there
// ptxas spills 32 bytes of the dk/dv pass otherwise
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
static constexpr int FA2_BIG_KK_UNROLL = 1;
#else
static constexpr int FA2_BIG_KK_UNROLL = 2;
#endif

// fa2_scores with the A fragments (the warp's 16 rows arow0.. of the swizzled tile sA) loaded from
// shared memory per 16 dims instead of held in registers (head size 128: the register budget)
template <int D>
__device__ __forceinline__ void fa2_scores_smem(float s[8][4], const bf16* sA, int arow0, const bf16* sB, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++) { s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f; }
    int mat = lane / 8, r = lane % 8;
#pragma unroll(FA2_BIG_KK_UNROLL)
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ptx_ldmatrix_x4(a, sA + fa2_off<D>(arow0 + lane % 16, 16 * kk + (lane / 16) * 8));
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            uint32_t kb[4];
            ptx_ldmatrix_x4(kb, sB + fa2_off<D>(16 * jj + (mat / 2) * 8 + r, 16 * kk + (mat % 2) * 8));
            ptx_mma_bf16_16816(s[2 * jj], a, kb, s[2 * jj]);
            ptx_mma_bf16_16816(s[2 * jj + 1], a, kb + 2, s[2 * jj + 1]);
        }
    }
}

// The warp's 16 x 64 scores against a tile: from A fragments in registers (D <= 64) or from the
// swizzled tile sA in shared memory (D 128)
template <int D>
__device__ __forceinline__ void fa2_scores_any(float s[8][4], const uint32_t af[][4], const bf16* sA, int arow0,
                                               const bf16* sB, int lane) {
    if constexpr (D > 64) { fa2_scores_smem<D>(s, sA, arow0, sB, lane); }
    else { fa2_scores<D>(s, af, sB, lane); }
}

// rows row0 (acc [0..1]) and row0 + 8 ([2..3]) of a 16 x D fp32 accumulator times `scale`, as bf16
// pairs into rows of `base` (stride `rs` elements); rows >= T skipped.
template <int D>
__device__ __forceinline__ void fa2_store_acc(bf16* base, size_t rs, const float acc[D / 8][4], float scale, int row0,
                                              int T, int lane) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row0 + hf * 8;
        if (r >= T) { continue; }
        uint32_t* row = reinterpret_cast<uint32_t*>(base + (size_t)r * rs);
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            row[4 * n + lane % 4] = fa2_pack(acc[n][2 * hf] * scale, acc[n][2 * hf + 1] * scale);
        }
    }
}

template <int N> __device__ __forceinline__ void fa2_zero(float a[N][4]) {
#pragma unroll
    for (int j = 0; j < N; j++) { a[j][0] = a[j][1] = a[j][2] = a[j][3] = 0.0f; }
}

// delta = rowsum(dout * out) for the 64 rows q0.. of one head (2 threads per row, D / 2 dims each, in
// dimension order, then one shuffle) into delta_head (global, for the dk/dv pass) and sD (this
// block's copy, 0 for rows >= T); the caller syncs before reading sD.
template <int D>
__device__ __forceinline__ void fa2_delta_tile(float* delta_head, float* sD, const bf16* dout_head,
                                               const bf16* out_head, int C, int q0, int T) {
    int r = threadIdx.x / 2, q = q0 + r, half = threadIdx.x % 2;
    float d = 0.0f;
    if (q < T) {
        for (int i = 0; i < D / 2; i++) {
            int c = half * (D / 2) + i;
            d += __bfloat162float(dout_head[(size_t)q * C + c]) * __bfloat162float(out_head[(size_t)q * C + c]);
        }
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    if (half == 0) {
        sD[r] = d;
        if (q < T) { delta_head[q] = d; }
    }
}

// dS = P (dP - delta) in place of dp for the warp's query rows q (s[j][0..1]) and q + 8 ([2..3]) of
// one key tile (keys k0 + 8j + 2t + 0/1), P = exp2(S sl2 - L) from the scores s; masked (0) above
// the diagonal and for rows >= T. L: the rows' lse in log2 units; dl: their delta.
template <int D>
__device__ __forceinline__ void fa2_query_ds(float dp[8][4], const float s[8][4], const float L[2], const float dl[2],
                                             int k0, int q, int T, int lane) {
    const float sl2 = fa2_sl2<D>();
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int row = q + (i / 2) * 8;
            bool vis = row < T && fa2_visible(k0 + 8 * j + 2 * (lane % 4) + i % 2, row);
            float p = vis ? exp2f(s[j][i] * sl2 - L[i / 2]) : 0.0f;
            dp[j][i] = p * (dp[j][i] - dl[i / 2]);
        }
    }
}

// Grid (ceil(T/64) query tiles, heaviest (last) first; NH; B), 4 warps; warp w owns query rows
// q0 + 16w .. +15. Q and dout resident (their A fragments in registers at D <= 64), K and V tiles
// double-buffered by cp.async (tile kb + 1 in flight while kb is used); delta of the block's rows
// first (global for the dk/dv pass, shared for this one). Per key tile kb <= qb, ascending: S, dP,
// dS (fa2_query_ds), dq += dS K (fa2_pv with K as the B operand). dq / sqrt(D) into dqkv's q columns.
template <int D>
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_fa2_dq_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
    const bf16* __restrict__ out, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    constexpr int TE = FA2_TILE_ELEMS(D);
    __shared__ float sD[FA2_TILE];
    bf16* sQ = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sDO = sQ + TE; // then K (2 buffers), V (2 buffers)
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qb * FA2_TILE;
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * D;
    const bf16* dout_head = dout + (size_t)b * T * C + h * D;
    fa2_load_tile<D>(sQ, head, rs, q0, T);
    fa2_load_tile<D>(sDO, dout_head, C, q0, T);
    fa2_load_tile<D>(sQ + 2 * TE, head + C, rs, 0, T);
    fa2_load_tile<D>(sQ + 4 * TE, head + 2 * C, rs, 0, T);
    ptx_cp_async_commit();
    fa2_delta_tile<D>(delta + lrow, sD, dout_head, out + (size_t)b * T * C + h * D, C, q0, T);
    int row = warp * 16 + lane / 4, q = q0 + row; // the lane's rows: q and q + 8
    float L[2], dl[2];
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = q + 8 * hf;
        L[hf] = r < T ? lse[lrow + r] * 1.4426950408889634f : 0.0f;
    }
    uint32_t qf[D <= 64 ? D / 16 : 1][4], of[D <= 64 ? D / 16 : 1][4];
    float dq[D / 8][4], s[8][4], dp[8][4];
    fa2_zero<D / 8>(dq);
    for (int kb = 0; kb <= qb; kb++) {
        const bf16* sK = sQ + (2 + kb % 2) * TE;
        const bf16* sV = sQ + (4 + kb % 2) * TE;
        if (kb < qb) { // the next tile into the other buffer (read last in iteration kb - 1)
            fa2_load_tile<D>(sQ + (2 + (kb + 1) % 2) * TE, head + C, rs, (kb + 1) * FA2_TILE, T);
            fa2_load_tile<D>(sQ + (4 + (kb + 1) % 2) * TE, head + 2 * C, rs, (kb + 1) * FA2_TILE, T);
            ptx_cp_async_commit();
            ptx_cp_async_wait<1>();
        } else {
            ptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (kb == 0) { // Q, dout and sD are complete (the first wait and barrier)
            dl[0] = sD[row];
            dl[1] = sD[row + 8];
            if constexpr (D <= 64) {
                fa2_load_a<D>(qf, sQ, warp * 16, lane);
                fa2_load_a<D>(of, sDO, warp * 16, lane);
            }
        }
        fa2_scores_any<D>(s, qf, sQ, warp * 16, sK, lane);   // S
        fa2_scores_any<D>(dp, of, sDO, warp * 16, sV, lane); // dP
        fa2_query_ds<D>(dp, s, L, dl, kb * FA2_TILE, q, T, lane);
        fa2_pv<D>(dq, dp, sK, lane); // dq += dS K
        __syncthreads(); // this tile's buffers are refilled in the next iteration
    }
    fa2_store_acc<D>(dqkv + (size_t)b * T * rs + h * D, rs, dq, fa2_sl2<D>() * 0.6931471805599453f, q, T, lane);
}

// P^T (masked: queries >= T and above the diagonal) in place of S^T for the warp's keys row0, row0 + 8
template <int D>
__device__ __forceinline__ void fa2_key_probs(float s[8][4], const float* L, int k0, int q0, int row0, int T, int lane) {
    const float sl2 = fa2_sl2<D>();
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = 8 * j + 2 * (lane % 4) + i % 2, q = q0 + c;
            bool vis = q < T && fa2_visible(k0 + row0 + (i / 2) * 8, q);
            s[j][i] = vis ? exp2f(s[j][i] * sl2 - L[c]) : 0.0f;
        }
    }
}

// One (key tile, query tile) pair at head size 128, in an order that fits 255 registers beside dk
// and dv (128 fp32): K's and V's A fragments come from shared memory; dv += P^T dout while P^T is
// in the score registers, then dP^T and dS^T by halves of the query tile (32 queries each), each
// half's dS^T going straight into dk += dS^T Q for those 32 queries.
template <int D>
__device__ __forceinline__ void fa2_key_pair_big(float dk[D / 8][4], float dv[D / 8][4], const bf16* sK,
                                                 const bf16* sV, const bf16* sQ, const bf16* sDO, const float* L,
                                                 const float* Dl, int k0, int q0, int row0, int T, int lane) {
    float s[8][4];
    fa2_scores_smem<D>(s, sK, (threadIdx.x / 32) * 16, sQ, lane); // S^T
    fa2_key_probs<D>(s, L, k0, q0, row0, T, lane);
    fa2_pv<D>(dv, s, sDO, lane);
    int mat = lane / 8, r = lane % 8, arow = (threadIdx.x / 32) * 16 + lane % 16;
#pragma unroll
    for (int half = 0; half < 2; half++) { // queries 32 half .. 32 half + 31: key groups j = 4 half ..
        float dp[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) { dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f; }
#pragma unroll(FA2_BIG_KK_UNROLL)
        for (int kk = 0; kk < D / 16; kk++) { // dP^T for the half: V (the warp's keys) against dout's 32 rows
            uint32_t a[4];
            ptx_ldmatrix_x4(a, sV + fa2_off<D>(arow, 16 * kk + (lane / 16) * 8));
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                uint32_t kb[4];
                ptx_ldmatrix_x4(kb, sDO + fa2_off<D>(32 * half + 16 * jj + (mat / 2) * 8 + r, 16 * kk + (mat % 2) * 8));
                ptx_mma_bf16_16816(dp[2 * jj], a, kb, dp[2 * jj]);
                ptx_mma_bf16_16816(dp[2 * jj + 1], a, kb + 2, dp[2 * jj + 1]);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) { dp[j][i] = s[4 * half + j][i] * (dp[j][i] - Dl[32 * half + 8 * j + 2 * (lane % 4) + i % 2]); }
        }
#pragma unroll
        for (int kc = 0; kc < 2; kc++) { // dk += dS^T Q over the half's two 16-query chunks
            uint32_t a[4] = {fa2_pack(dp[2 * kc][0], dp[2 * kc][1]), fa2_pack(dp[2 * kc][2], dp[2 * kc][3]),
                             fa2_pack(dp[2 * kc + 1][0], dp[2 * kc + 1][1]), fa2_pack(dp[2 * kc + 1][2], dp[2 * kc + 1][3])};
            fa2_mma_bt<D, D / 8>(dk, a, sQ, 2 * half + kc, lane);
        }
    }
}

// One (key tile, query tile) pair for the warp's 16 keys (row0 = its row g in the key tile):
// S^T, dP^T, P^T (masked: queries >= T and above the diagonal), dS^T = P^T (dP^T - delta),
// dv += P^T dout, dk += dS^T Q. L, Dl: the query tile's lse (log2 units) and delta. kf, vf: K's and
// V's A fragments (D <= 64), or, at D 128, loaded from sK, sV per pair (fa2_scores_smem).
template <int D>
__device__ __forceinline__ void fa2_key_pair(float dk[D / 8][4], float dv[D / 8][4], const uint32_t kf[][4],
                                             const uint32_t vf[][4], const bf16* sK, const bf16* sV, const bf16* sQ,
                                             const bf16* sDO, const float* L, const float* Dl, int k0, int q0, int row0,
                                             int T, int lane) {
    if constexpr (D > 64) {
        fa2_key_pair_big<D>(dk, dv, sK, sV, sQ, sDO, L, Dl, k0, q0, row0, T, lane);
    } else {
        float s[8][4], dp[8][4];
        fa2_scores<D>(s, kf, sQ, lane);   // S^T: rows = the warp's keys, columns = queries 8j + 2t + 0/1
        fa2_scores<D>(dp, vf, sDO, lane); // dP^T
        fa2_key_probs<D>(s, L, k0, q0, row0, T, lane); // P^T
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int i = 0; i < 4; i++) { dp[j][i] = s[j][i] * (dp[j][i] - Dl[8 * j + 2 * (lane % 4) + i % 2]); } // dS^T
        }
        fa2_pv<D>(dv, s, sDO, lane);
        fa2_pv<D>(dk, dp, sQ, lane);
    }
}

// Grid (ceil(T/64) key tiles, heaviest (first) first; NH; B), 4 warps; warp w owns keys
// k0 + 16w .. +15. K and V resident (their A fragments in registers at D <= 64); per query tile
// qb = kb .. last, ascending, Q and dout double-buffered by cp.async with the tile's lse and delta
// (written by the dq pass) beside them: fa2_key_pair. dk / sqrt(D) and dv into dqkv's k and v columns.
template <int D>
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_fa2_dkv_kernel(
    bf16* __restrict__ dqkv, const float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    constexpr int TE = FA2_TILE_ELEMS(D);
    bf16* sK = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sV = sK + TE; // then Q (2 buffers), dout (2 buffers)
    float* sL = reinterpret_cast<float*>(sK + 6 * TE); // [2][64] lse log2e, then [2][64] delta
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nq = (T + FA2_TILE - 1) / FA2_TILE;
    int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kb * FA2_TILE;
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * D;
    const bf16* dout_head = dout + (size_t)b * T * C + h * D;
    fa2_load_tile<D>(sK, head + C, rs, k0, T);
    fa2_load_tile<D>(sV, head + 2 * C, rs, k0, T);
    fa2_load_tile<D>(sK + 2 * TE, head, rs, k0, T); // the first query tile (qb = kb), buffer 0
    fa2_load_tile<D>(sK + 4 * TE, dout_head, C, k0, T);
    ptx_cp_async_commit();
    int row0 = warp * 16 + lane / 4;
    uint32_t kf[D <= 64 ? D / 16 : 1][4], vf[D <= 64 ? D / 16 : 1][4];
    float dk[D / 8][4], dv[D / 8][4];
    fa2_zero<D / 8>(dk);
    fa2_zero<D / 8>(dv);
    for (int qb = kb; qb < nq; qb++) {
        int buf = (qb - kb) % 2, q0 = qb * FA2_TILE;
        if (threadIdx.x < FA2_TILE) { // buffer buf was last read two pairs ago, before a barrier
            int q = q0 + threadIdx.x;
            sL[buf * FA2_TILE + threadIdx.x] = q < T ? lse[lrow + q] * 1.4426950408889634f : 0.0f;
            sL[(2 + buf) * FA2_TILE + threadIdx.x] = q < T ? delta[lrow + q] : 0.0f;
        }
        if (qb + 1 < nq) { // the next tile into the other buffer (read last in the previous pair)
            fa2_load_tile<D>(sK + (3 - buf) * TE, head, rs, q0 + FA2_TILE, T);
            fa2_load_tile<D>(sK + (5 - buf) * TE, dout_head, C, q0 + FA2_TILE, T);
            ptx_cp_async_commit();
            ptx_cp_async_wait<1>();
        } else {
            ptx_cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (D <= 64) {
            if (qb == kb) {
                fa2_load_a<D>(kf, sK, warp * 16, lane);
                fa2_load_a<D>(vf, sV, warp * 16, lane);
            }
        }
        fa2_key_pair<D>(dk, dv, kf, vf, sK, sV, sK + (2 + buf) * TE, sK + (4 + buf) * TE, sL + buf * FA2_TILE,
                        sL + (2 + buf) * FA2_TILE, k0, q0, row0, T, lane);
        __syncthreads(); // the buffers of this pair are refilled next
    }
    bf16* dbase = dqkv + (size_t)b * T * rs + h * D;
    fa2_store_acc<D>(dbase + C, rs, dk, fa2_sl2<D>() * 0.6931471805599453f, k0 + row0, T, lane);
    fa2_store_acc<D>(dbase + 2 * C, rs, dv, 1.0f, k0 + row0, T, lane);
}

// one launch per pass and head size, spelled out so that each instance has its own name in reports
#define FA2_BWD_LAUNCH(D)                                                                                            \
    do {                                                                                                             \
        attention_backward_fa2_dq_kernel<D><<<grid, FA2_THREADS, FA2_DQ_SMEM(D)>>>(dqkv, delta, dout, qkv, out, lse,  \
                                                                                T, C, NH);                           \
        cudaLaunchCheck();                                                                                           \
        attention_backward_fa2_dkv_kernel<D><<<grid, FA2_THREADS, FA2_DKV_SMEM(D)>>>(dqkv, delta, dout, qkv, lse, T, \
                                                                                  C, NH);                            \
        cudaLaunchCheck();                                                                                           \
    } while (0)

// set a kernel's dynamic shared memory limit to what it launches with, always: the default is 48 KiB
// minus the kernel's static shared memory (the dq kernel's 256 B sD), so even an exact 48 KiB needs it
template <typename K> static void fa2_smem_limit(K kernel, int bytes) {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

static void attention_backward_fa2(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH) {
    int hs = C / NH;
    if (!fa2_head_size_ok(hs)) { fail("attention_backward_fa2: head size %d, these kernels take 32, 64 or 128", hs); }
    static int setup = 0; // once per process
    if (!setup) {
        fa2_smem_limit(attention_backward_fa2_dq_kernel<64>, FA2_DQ_SMEM(64));
        fa2_smem_limit(attention_backward_fa2_dkv_kernel<64>, FA2_DKV_SMEM(64));
        fa2_smem_limit(attention_backward_fa2_dq_kernel<128>, FA2_DQ_SMEM(128));
        fa2_smem_limit(attention_backward_fa2_dkv_kernel<128>, FA2_DKV_SMEM(128));
        setup = 1;
    }
    dim3 grid(ceil_div_u(T, FA2_TILE), NH, B);
    if (hs == 32) { FA2_BWD_LAUNCH(32); }
    else if (hs == 64) { FA2_BWD_LAUNCH(64); }
    else { FA2_BWD_LAUNCH(128); }
}

#endif
#endif
