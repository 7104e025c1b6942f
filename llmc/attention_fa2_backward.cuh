// attention_fa2_backward.cuh: the backward of llmc/attention_fa2.cuh's forward on mma.sync, ldmatrix
// and cp.async (BF16, head size 64). Same interface as attention_backward_flash: dqkv (B, T, 3C)
// written from dout (B, T, C), qkv, out and lse (B, NH, T); delta (B, NH, T) fp32 scratch.
// One kernel, one block per (batch, head), 5 tile matmuls per (key tile, query tile) pair: S^T = K Q^T,
// dP^T = V dout^T, dv += P^T dout, dk += dS^T Q, dq += dS K. dq is deterministic without atomics:
// the block visits key tiles in ascending order and adds each one's dS K to the query rows' fp32
// running sums in that order (docs/gpu.md, "FlashAttention-2-style kernels").
#ifndef LLMC_ATTENTION_FA2_BACKWARD_CUH
#define LLMC_ATTENTION_FA2_BACKWARD_CUH
#ifndef ENABLE_FP32

#include "attention_fa2.cuh"

// shared: K, V (resident per key tile), Q and dout (double-buffered), dS^T (64 keys x 64 queries),
// seven 64 x 64 bf16 tiles, then lse and delta of the streamed query tile, double-buffered:
// 57344 + 1024 bytes
#define FA2_BWD_SMEM (7 * FA2_TILE_ELEMS * 2 + 4 * FA2_TILE * 4)

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

// delta = rowsum(dout * out) for every row of one head (T rows, 2 threads per row, 32 dims each)
// into delta_head; the caller syncs before reading it.
__device__ __forceinline__ void fa2_delta_head(float* delta_head, const bf16* dout_head, const bf16* out_head, int C,
                                               int T) {
    for (int r0 = 0; r0 < T; r0 += FA2_THREADS / 2) {
        int q = r0 + threadIdx.x / 2, half = threadIdx.x % 2;
        float d = 0.0f;
        if (q < T) {
            for (int i = 0; i < 32; i++) {
                int c = half * 32 + i;
                d += __bfloat162float(dout_head[(size_t)q * C + c]) * __bfloat162float(out_head[(size_t)q * C + c]);
            }
        }
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        if (half == 0 && q < T) { delta_head[q] = d; }
    }
}

// The warp's dS^T (keys row0, row0 + 8 of the tile; queries 8j + 2t + 0/1, accumulator layout) as
// bf16 pairs into sdS (64 keys x 64 queries, swizzled): 32-bit stores, rows g distinct per chunk.
__device__ __forceinline__ void fa2_store_dst(bf16* sdS, const float ds[8][4], int row0, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            ptx_sts32(sdS + fa2_off(row0 + 8 * hf, 8 * j + 2 * (lane % 4)), fa2_pack(ds[j][2 * hf], ds[j][2 * hf + 1]));
        }
    }
}

// dq (16 x 64: the warp's queries qr0..qr0+15 of the tile, against head dims) = dS K over the
// tile's 64 keys. dS's A fragments from sdS (rows = keys) by ldmatrix.x4.trans: matrices (keys
// 16kc + 0/8, queries qr0 + 0/8) give (queries, keys) pairs in the A order; K's B fragments as
// fa2_pv takes V's.
__device__ __forceinline__ void fa2_dsk(float dq[8][4], const bf16* sdS, const bf16* sK, int qr0, int lane) {
    fa2_zero(dq);
    int mat = lane / 8, r = lane % 8;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4];
        ptx_ldmatrix_x4_trans(a, sdS + fa2_off(16 * kc + (mat / 2) * 8 + r, qr0 + (mat % 2) * 8));
        fa2_mma_bt(dq, a, sK, kc, lane);
    }
}

// Adds the warp's dS K (rows row, row + 8 of the head; dims 8n + 2t + 0/1) to those rows' fp32
// running sums of dq, which live in the same rows' dk and dv slots of dqkv (dims 0-31 in dk's 128
// bytes, 32-63 in dv's: a query row's dk and dv are written only after its last dq term, see the
// kernel). first (key tile 0): the sum starts; last (key tile = query tile): dq / 8 is written as
// bf16. The sum is old + new, key tiles in ascending order. rows >= T skipped.
__device__ __forceinline__ void fa2_dq_add(bf16* base, size_t rs, int C, const float dq[8][4], bool first, bool last,
                                           int row, int T, int lane) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row + 8 * hf;
        if (r >= T) { continue; }
        bf16* rowp = base + (size_t)r * rs;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            int d = 8 * n + 2 * (lane % 4);
            float2* p = reinterpret_cast<float2*>(d < 32 ? reinterpret_cast<float*>(rowp + C) + d
                                                         : reinterpret_cast<float*>(rowp + 2 * C) + d - 32);
            float2 v = make_float2(dq[n][2 * hf], dq[n][2 * hf + 1]);
            if (!first) { float2 old = *p; v.x = old.x + v.x; v.y = old.y + v.y; }
            if (last) { reinterpret_cast<uint32_t*>(rowp)[4 * n + lane % 4] = fa2_pack(v.x * 0.125f, v.y * 0.125f); }
            else { *p = v; }
        }
    }
}

#ifdef FA2_PLANT_ATOMIC_DQ
// The planted racy dq (dev/tests/53_attention_fa2.sh): one block per key tile, FlashAttention-2's
// split, dq summed by atomicAdd into an fp32 buffer (B, T, C) in whatever order the blocks run.
__device__ __forceinline__ void fa2_dq_atomic(float* acc_head, int C, const float dq[8][4], int row, int T, int lane) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row + 8 * hf;
        if (r >= T) { continue; }
#pragma unroll
        for (int n = 0; n < 8; n++) {
            atomicAdd(acc_head + (size_t)r * C + 8 * n + 2 * (lane % 4), dq[n][2 * hf]);
            atomicAdd(acc_head + (size_t)r * C + 8 * n + 2 * (lane % 4) + 1, dq[n][2 * hf + 1]);
        }
    }
}
#endif

// One (key tile, query tile) pair for the warp's 16 keys (row0 = its row g in the key tile):
// S^T, dP^T, P^T (masked: queries >= T and above the diagonal), dS^T = P^T (dP^T - delta) into sdS,
// dv += P^T dout, dk += dS^T Q. L, D: the query tile's lse (log2 units) and delta.
__device__ __forceinline__ void fa2_key_pair(float dk[8][4], float dv[8][4], const uint32_t kf[4][4],
                                             const uint32_t vf[4][4], const bf16* sQ, const bf16* sDO, bf16* sdS,
                                             const float* L, const float* D, int k0, int q0, int row0, int T,
                                             int lane) {
    const float sl2 = 0.125f * 1.4426950408889634f;
    float s[8][4], dp[8][4];
    fa2_scores(s, kf, sQ, lane);   // S^T: rows = the warp's keys, columns = queries 8j + 2t + 0/1
    fa2_scores(dp, vf, sDO, lane); // dP^T
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int c = 8 * j + 2 * (lane % 4) + i % 2, q = q0 + c;
            bool vis = q < T && fa2_visible(k0 + row0 + (i / 2) * 8, q);
            float p = vis ? exp2f(s[j][i] * sl2 - L[c]) : 0.0f;
            s[j][i] = p;                      // P^T
            dp[j][i] = p * (dp[j][i] - D[c]); // dS^T
        }
    }
    fa2_store_dst(sdS, dp, row0, lane);
    fa2_pv(dv, s, sDO, lane);
    fa2_pv(dk, dp, sQ, lane);
}

// Grid (NH, B): one block of 4 warps per head. Per key tile kb (ascending): K and V resident (warp w
// owns keys 16w..16w+15, A fragments once); per query tile qb = kb .. last (ascending), Q and dout
// double-buffered by cp.async with lse and delta beside them: fa2_key_pair, a barrier (sdS whole),
// then warp w's query rows 16w.. get dS K added to their running dq (fa2_dq_add); dk / 8 and dv are
// written after the last query tile. delta is computed first for the whole head. A query row's
// running dq sits in its dk/dv slots from key tile 0 to key tile qb, and its dk/dv are written at
// the end of key tile qb, after its last dq term: the slots are never needed twice at once.
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_fa2_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
    const bf16* __restrict__ out, const float* __restrict__ lse, float* __restrict__ dq_atomic, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    bf16* sK = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sV = sK + FA2_TILE_ELEMS; // then Q (2 buffers), dout (2 buffers), dS^T
    bf16* sdS = sK + 6 * FA2_TILE_ELEMS;
    float* sL = reinterpret_cast<float*>(sK + 7 * FA2_TILE_ELEMS); // [2][64] lse log2e, then [2][64] delta
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nq = (T + FA2_TILE - 1) / FA2_TILE;
#ifdef FA2_PLANT_ATOMIC_DQ
    int h = blockIdx.y, b = blockIdx.z, kb_begin = blockIdx.x, kb_end = blockIdx.x + 1;
    float* acc_head = dq_atomic + (size_t)b * T * C + h * FA2_HS;
#else
    int h = blockIdx.x, b = blockIdx.y, kb_begin = 0, kb_end = nq;
    (void)dq_atomic;
#endif
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * FA2_HS;
    const bf16* dout_head = dout + (size_t)b * T * C + h * FA2_HS;
    bf16* dbase = dqkv + (size_t)b * T * rs + h * FA2_HS;
    fa2_delta_head(delta + lrow, dout_head, out + (size_t)b * T * C + h * FA2_HS, C, T);
    __syncthreads();
    int row0 = warp * 16 + lane / 4;
    for (int kb = kb_begin; kb < kb_end; kb++) {
        int k0 = kb * FA2_TILE;
        fa2_load_tile(sK, head + C, rs, k0, T);
        fa2_load_tile(sV, head + 2 * C, rs, k0, T);
        fa2_load_tile(sK + 2 * FA2_TILE_ELEMS, head, rs, k0, T); // the first query tile (qb = kb), buffer 0
        fa2_load_tile(sK + 4 * FA2_TILE_ELEMS, dout_head, C, k0, T);
        ptx_cp_async_commit();
        uint32_t kf[4][4], vf[4][4];
        float dk[8][4], dv[8][4], dq[8][4];
        fa2_zero(dk);
        fa2_zero(dv);
        for (int qb = kb; qb < nq; qb++) {
            int buf = (qb - kb) % 2, q0 = qb * FA2_TILE;
            if (threadIdx.x < FA2_TILE) { // buffer buf was last read two pairs ago, before a barrier
                int q = q0 + threadIdx.x;
                sL[buf * FA2_TILE + threadIdx.x] = q < T ? lse[lrow + q] * 1.4426950408889634f : 0.0f;
                sL[(2 + buf) * FA2_TILE + threadIdx.x] = q < T ? delta[lrow + q] : 0.0f;
            }
            if (qb + 1 < nq) { // the next tile into the other buffer (read last in the previous pair)
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
            fa2_key_pair(dk, dv, kf, vf, sK + (2 + buf) * FA2_TILE_ELEMS, sK + (4 + buf) * FA2_TILE_ELEMS, sdS,
                         sL + buf * FA2_TILE, sL + (2 + buf) * FA2_TILE, k0, q0, row0, T, lane);
            __syncthreads(); // sdS holds the whole tile's dS^T
            fa2_dsk(dq, sdS, sK, warp * 16, lane);
#ifdef FA2_PLANT_ATOMIC_DQ
            fa2_dq_atomic(acc_head, C, dq, q0 + row0, T, lane);
#else
            fa2_dq_add(dbase, rs, C, dq, kb == 0, kb == qb, q0 + row0, T, lane);
#endif
            __syncthreads(); // the buffers of this pair are refilled next
        }
        fa2_store_acc(dbase + C, rs, dk, 0.125f, k0 + row0, T, lane);
        fa2_store_acc(dbase + 2 * C, rs, dv, 1.0f, k0 + row0, T, lane);
    }
}

#ifdef FA2_PLANT_ATOMIC_DQ
// the plant's second kernel: dq = acc / 8 as bf16 into dqkv's q columns, one thread per element
__global__ void attention_fa2_plant_dq_finish(bf16* dqkv, const float* acc, int B, int T, int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)B * T * C) { dqkv[(i / C) * 3 * C + i % C] = __float2bfloat16(acc[i] * 0.125f); }
}
#endif

static void attention_backward_fa2(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH) {
    if (C / NH != FA2_HS) { fail("attention_backward_fa2: head size %d, these kernels need 64", C / NH); }
    static int setup = 0; // above 48 KiB of dynamic shared memory: raise the limit once per process
    if (!setup) {
        cudaCheck(cudaFuncSetAttribute(attention_backward_fa2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_BWD_SMEM));
        setup = 1;
    }
#ifdef FA2_PLANT_ATOMIC_DQ
    float* acc;
    cudaCheck(cudaMalloc((void**)&acc, (size_t)B * T * C * sizeof(float)));
    cudaCheck(cudaMemset(acc, 0, (size_t)B * T * C * sizeof(float)));
    attention_backward_fa2_kernel<<<dim3(ceil_div_u(T, FA2_TILE), NH, B), FA2_THREADS, FA2_BWD_SMEM>>>(
        dqkv, delta, dout, qkv, out, lse, acc, T, C, NH);
    cudaLaunchCheck();
    attention_fa2_plant_dq_finish<<<ceil_div_u(B * T * C, 256), 256>>>(dqkv, acc, B, T, C);
    cudaLaunchCheck();
    cudaCheck(cudaFree(acc));
#else
    attention_backward_fa2_kernel<<<dim3(NH, B), FA2_THREADS, FA2_BWD_SMEM>>>(dqkv, delta, dout, qkv, out, lse,
                                                                              nullptr, T, C, NH);
    cudaLaunchCheck();
#endif
}

#endif
#endif
