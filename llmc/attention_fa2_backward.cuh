// attention_fa2_backward.cuh: the backward of llmc/attention_fa2.cuh's forward on mma.sync, ldmatrix
// and cp.async (BF16, head sizes D = 32, 64, 128). Same interface as attention_backward_flash: dqkv
// (B, T, 3C) written from dout (B, T, C), qkv, out and lse (B, NH, T); delta (B, NH, T) fp32 scratch.
// One kernel, one block per (batch, head), 5 tile matmuls per (key tile, query tile) pair: S^T = K Q^T,
// dP^T = V dout^T, dv += P^T dout, dk += dS^T Q, dq += dS K. dq is deterministic without atomics:
// the block visits key tiles in ascending order and adds each one's dS K to the query rows' fp32
// running sums in that order (docs/gpu.md, "FlashAttention-2-style kernels").
#ifndef LLMC_ATTENTION_FA2_BACKWARD_CUH
#define LLMC_ATTENTION_FA2_BACKWARD_CUH
#ifndef ENABLE_FP32

#include "attention_fa2.cuh"

// shared: K, V (resident per key tile), Q and dout (double-buffered): six 64 x D bf16 tiles; dS^T
// (64 keys x 64 queries, bf16); then lse and delta of the streamed query tile, double-buffered
// (57344 + 1024 bytes at D 64)
#define FA2_BWD_SMEM(D) ((6 * FA2_TILE_ELEMS(D) + FA2_TILE * FA2_TILE) * 2 + 4 * FA2_TILE * 4)

// A fragments of the warp's 16 rows (row0..) of a swizzled tile, head dims 16kk.. (ldmatrix.x4)
template <int D> __device__ __forceinline__ void fa2_load_a(uint32_t f[D / 16][4], const bf16* tile, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        ptx_ldmatrix_x4(f[kk], tile + fa2_off<D>(row0 + lane % 16, 16 * kk + (lane / 16) * 8));
    }
}

// fa2_scores with the A fragments (the warp's 16 rows arow0.. of the swizzled tile sA) loaded from
// shared memory per 16 dims instead of held in registers (head size 128: the backward's register budget)
template <int D>
__device__ __forceinline__ void fa2_scores_smem(float s[8][4], const bf16* sA, int arow0, const bf16* sB, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++) { s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f; }
    int mat = lane / 8, r = lane % 8;
#pragma unroll
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

// delta = rowsum(dout * out) for every row of one head (T rows, 2 threads per row, D / 2 dims each)
// into delta_head; the caller syncs before reading it.
template <int D>
__device__ __forceinline__ void fa2_delta_head(float* delta_head, const bf16* dout_head, const bf16* out_head, int C,
                                               int T) {
    for (int r0 = 0; r0 < T; r0 += FA2_THREADS / 2) {
        int q = r0 + threadIdx.x / 2, half = threadIdx.x % 2;
        float d = 0.0f;
        if (q < T) {
            for (int i = 0; i < D / 2; i++) {
                int c = half * (D / 2) + i;
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
            ptx_sts32(sdS + fa2_off<64>(row0 + 8 * hf, 8 * j + 2 * (lane % 4)), fa2_pack(ds[j][2 * hf], ds[j][2 * hf + 1]));
        }
    }
}

// dq (16 x D: the warp's queries qr0..qr0+15 of the tile, against head dims) = dS K over the
// tile's 64 keys. dS's A fragments from sdS (rows = keys) by ldmatrix.x4.trans: matrices (keys
// 16kc + 0/8, queries qr0 + 0/8) give (queries, keys) pairs in the A order; K's B fragments as
// fa2_pv takes V's.
// N < D / 8: only dims 8 n0 .. 8 (n0 + N) - 1 (the head size 128 backward computes dq in halves).
template <int D, int N = D / 8>
__device__ __forceinline__ void fa2_dsk(float dq[N][4], const bf16* sdS, const bf16* sK, int qr0, int lane, int n0 = 0) {
    fa2_zero<N>(dq);
    int mat = lane / 8, r = lane % 8;
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4];
        ptx_ldmatrix_x4_trans(a, sdS + fa2_off<64>(16 * kc + (mat / 2) * 8 + r, qr0 + (mat % 2) * 8));
        fa2_mma_bt<D, N>(dq, a, sK, kc, lane, n0);
    }
}

// Adds the warp's dS K (rows row, row + 8 of the head; dims 8n + 2t + 0/1) to those rows' fp32
// running sums of dq, which live in the same rows' dk and dv slots of dqkv (dims 0..D/2-1 in dk's 2D
// bytes, the rest in dv's: a query row's dk and dv are written only after its last dq term, see the
// kernel). first (key tile 0): the sum starts; last (key tile = query tile): dq / sqrt(D) is written
// as bf16. The sum is old + new, key tiles in ascending order. rows >= T skipped. dq[n]: dims
// 8 (n0 + n)..+7 (fa2_dsk's part).
template <int D, int N = D / 8>
__device__ __forceinline__ void fa2_dq_add(bf16* base, size_t rs, int C, const float dq[N][4], bool first, bool last,
                                           int row, int T, int lane, int n0 = 0) {
    const float scale = fa2_sl2<D>() * 0.6931471805599453f;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row + 8 * hf;
        if (r >= T) { continue; }
        bf16* rowp = base + (size_t)r * rs;
#pragma unroll
        for (int n = 0; n < N; n++) {
            int d = 8 * (n0 + n) + 2 * (lane % 4);
            float2* p = reinterpret_cast<float2*>(d < D / 2 ? reinterpret_cast<float*>(rowp + C) + d
                                                            : reinterpret_cast<float*>(rowp + 2 * C) + d - D / 2);
            float2 v = make_float2(dq[n][2 * hf], dq[n][2 * hf + 1]);
            if (!first) { float2 old = *p; v.x = old.x + v.x; v.y = old.y + v.y; }
            if (last) { reinterpret_cast<uint32_t*>(rowp)[4 * (n0 + n) + lane % 4] = fa2_pack(v.x * scale, v.y * scale); }
            else { *p = v; }
        }
    }
}

#ifdef FA2_PLANT_ATOMIC_DQ
// The planted racy dq (dev/tests/53_attention_fa2.sh): one block per key tile, FlashAttention-2's
// split, dq summed by atomicAdd into an fp32 buffer (B, T, C) in whatever order the blocks run.
template <int D, int N = D / 8>
__device__ __forceinline__ void fa2_dq_atomic(float* acc_head, int C, const float dq[N][4], int row, int T, int lane,
                                              int n0 = 0) {
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int r = row + 8 * hf;
        if (r >= T) { continue; }
#pragma unroll
        for (int n = 0; n < N; n++) {
            atomicAdd(acc_head + (size_t)r * C + 8 * (n0 + n) + 2 * (lane % 4), dq[n][2 * hf]);
            atomicAdd(acc_head + (size_t)r * C + 8 * (n0 + n) + 2 * (lane % 4) + 1, dq[n][2 * hf + 1]);
        }
    }
}
#endif

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

// fa2_key_pair at head size 128, in an order that fits 255 registers beside dk and dv (128 fp32):
// K's and V's A fragments come from shared memory per pair; P^T is kept only as its bf16 A fragments
// (16 registers) once dv += P^T dout is done, and dS^T = P^T (dP^T - delta) uses that bf16 P^T.
template <int D>
__device__ __forceinline__ void fa2_key_pair_big(float dk[D / 8][4], float dv[D / 8][4], const bf16* sK,
                                                 const bf16* sV, const bf16* sQ, const bf16* sDO, bf16* sdS,
                                                 const float* L, const float* Dl, int k0, int q0, int row0, int T,
                                                 int lane) {
    float s[8][4];
    uint32_t pa[4][4];
    fa2_scores_smem<D>(s, sK, (threadIdx.x / 32) * 16, sQ, lane); // S^T
    fa2_key_probs<D>(s, L, k0, q0, row0, T, lane);
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        pa[kc][0] = fa2_pack(s[2 * kc][0], s[2 * kc][1]);
        pa[kc][1] = fa2_pack(s[2 * kc][2], s[2 * kc][3]);
        pa[kc][2] = fa2_pack(s[2 * kc + 1][0], s[2 * kc + 1][1]);
        pa[kc][3] = fa2_pack(s[2 * kc + 1][2], s[2 * kc + 1][3]);
        fa2_mma_bt<D, D / 8>(dv, pa[kc], sDO, kc, lane);
    }
    fa2_scores_smem<D>(s, sV, (threadIdx.x / 32) * 16, sDO, lane); // dP^T, in s
#pragma unroll
    for (int j = 0; j < 8; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 pp = *reinterpret_cast<const __nv_bfloat162*>(&pa[j / 2][(j % 2) * 2 + i / 2]);
            float p = i % 2 ? __high2float(pp) : __low2float(pp);
            s[j][i] = p * (s[j][i] - Dl[8 * j + 2 * (lane % 4) + i % 2]); // dS^T
        }
    }
    fa2_store_dst(sdS, s, row0, lane);
    fa2_pv<D>(dk, s, sQ, lane);
}

// One (key tile, query tile) pair for the warp's 16 keys (row0 = its row g in the key tile):
// S^T, dP^T, P^T (masked: queries >= T and above the diagonal), dS^T = P^T (dP^T - delta) into sdS,
// dv += P^T dout, dk += dS^T Q. L, Dl: the query tile's lse (log2 units) and delta. kf, vf: K's and
// V's A fragments (D <= 64), or, at D 128, loaded from sK, sV per pair (fa2_scores_smem).
template <int D>
__device__ __forceinline__ void fa2_key_pair(float dk[D / 8][4], float dv[D / 8][4], const uint32_t kf[][4],
                                             const uint32_t vf[][4], const bf16* sK, const bf16* sV, const bf16* sQ,
                                             const bf16* sDO, bf16* sdS, const float* L, const float* Dl, int k0,
                                             int q0, int row0, int T, int lane) {
    if constexpr (D > 64) {
        fa2_key_pair_big<D>(dk, dv, sK, sV, sQ, sDO, sdS, L, Dl, k0, q0, row0, T, lane);
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
        fa2_store_dst(sdS, dp, row0, lane);
        fa2_pv<D>(dv, s, sDO, lane);
        fa2_pv<D>(dk, dp, sQ, lane);
    }
}

// sm_80 (nvcc's device pass for an A100): at head size 128 ptxas spills 20 bytes with the sm_90 code
// below; with dq's 4 parts as a loop (not unrolled) and lane not hidden per pair it spills none
// (docs/gpu.md, "Resources"). The same arithmetic either way: the emulator runs the sm_90 form.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define FA2_BWD_SM80 1
#else
#define FA2_BWD_SM80 0
#endif

// Grid (NH, B): one block of 4 warps per head. Per key tile kb (ascending): K and V resident (warp w
// owns keys 16w..16w+15, A fragments once; at D 128 loaded per pair); per query tile qb = kb ..
// last (ascending), Q and dout double-buffered by cp.async with lse and delta beside them:
// fa2_key_pair, a barrier (sdS whole), then warp w's query rows 16w.. get dS K added to their
// running dq (fa2_dq_add); dk / sqrt(D) and dv are written after the last query tile. delta is
// computed first for the whole head. A query row's running dq sits in its dk/dv slots from key tile
// 0 to key tile qb, and its dk/dv are written at the end of key tile qb, after its last dq term: the
// slots are never needed twice at once.
template <int D>
__global__ void __launch_bounds__(FA2_THREADS) attention_backward_fa2_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
    const bf16* __restrict__ out, const float* __restrict__ lse, float* __restrict__ dq_atomic, int T, int C, int NH) {
    extern __shared__ uint4 fa2_smem[];
    constexpr int TE = FA2_TILE_ELEMS(D);
    bf16* sK = reinterpret_cast<bf16*>(fa2_smem);
    bf16* sV = sK + TE; // then Q (2 buffers), dout (2 buffers), dS^T
    bf16* sdS = sK + 6 * TE;
    float* sL = reinterpret_cast<float*>(sdS + FA2_TILE * FA2_TILE); // [2][64] lse log2e, then [2][64] delta
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nq = (T + FA2_TILE - 1) / FA2_TILE;
#ifdef FA2_PLANT_ATOMIC_DQ
    int h = blockIdx.y, b = blockIdx.z, kb_begin = blockIdx.x, kb_end = blockIdx.x + 1;
    float* acc_head = dq_atomic + (size_t)b * T * C + h * D;
#else
    int h = blockIdx.x, b = blockIdx.y, kb_begin = 0, kb_end = nq;
    (void)dq_atomic;
#endif
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * D;
    const bf16* dout_head = dout + (size_t)b * T * C + h * D;
    bf16* dbase = dqkv + (size_t)b * T * rs + h * D;
    fa2_delta_head<D>(delta + lrow, dout_head, out + (size_t)b * T * C + h * D, C, T);
    __syncthreads();
    int row0 = warp * 16 + lane / 4;
    for (int kb = kb_begin; kb < kb_end; kb++) {
        int k0 = kb * FA2_TILE;
        fa2_load_tile<D>(sK, head + C, rs, k0, T);
        fa2_load_tile<D>(sV, head + 2 * C, rs, k0, T);
        fa2_load_tile<D>(sK + 2 * TE, head, rs, k0, T); // the first query tile (qb = kb), buffer 0
        fa2_load_tile<D>(sK + 4 * TE, dout_head, C, k0, T);
        ptx_cp_async_commit();
        constexpr int NP = D <= 64 ? 1 : 4; // dq in NP parts of D / NP dims (the register budget at D 128)
        uint32_t kf[D <= 64 ? D / 16 : 1][4], vf[D <= 64 ? D / 16 : 1][4];
        float dk[D / 8][4], dv[D / 8][4], dq[D / 8 / NP][4];
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
#if !defined(EMU_CUDA) && !FA2_BWD_SM80
            // head size 128: lane's value hidden from the optimiser per pair, so that the dozens of
            // shared addresses derived from it are recomputed here instead of held across the loop
            if constexpr (D > 64) { asm volatile("" : "+r"(lane)); }
#endif
            if constexpr (D <= 64) {
                if (qb == kb) {
                    fa2_load_a<D>(kf, sK, warp * 16, lane);
                    fa2_load_a<D>(vf, sV, warp * 16, lane);
                }
            }
            fa2_key_pair<D>(dk, dv, kf, vf, sK, sV, sK + (2 + buf) * TE, sK + (4 + buf) * TE, sdS, sL + buf * FA2_TILE,
                            sL + (2 + buf) * FA2_TILE, k0, q0, row0, T, lane);
            __syncthreads(); // sdS holds the whole tile's dS^T
#if FA2_BWD_SM80
#pragma unroll 1
#else
#pragma unroll
#endif
            for (int part = 0; part < NP; part++) {
                fa2_dsk<D, D / 8 / NP>(dq, sdS, sK, warp * 16, lane, part * D / 8 / NP);
#ifdef FA2_PLANT_ATOMIC_DQ
                fa2_dq_atomic<D, D / 8 / NP>(acc_head, C, dq, q0 + row0, T, lane, part * D / 8 / NP);
#else
                fa2_dq_add<D, D / 8 / NP>(dbase, rs, C, dq, kb == 0, kb == qb, q0 + row0, T, lane, part * D / 8 / NP);
#endif
            }
            __syncthreads(); // the buffers of this pair are refilled next
        }
#ifdef FA2_PLANT_SPILL
        if constexpr (D > 64) { // the SASS check's plant: a lane-indexed local array (a 320-byte stack frame)
            volatile float spill[80];
            spill[lane] = dk[0][0];
            dk[0][0] = spill[lane + 1];
        }
#endif
        fa2_store_acc<D>(dbase + C, rs, dk, fa2_sl2<D>() * 0.6931471805599453f, k0 + row0, T, lane);
        fa2_store_acc<D>(dbase + 2 * C, rs, dv, 1.0f, k0 + row0, T, lane);
    }
}

#ifdef FA2_PLANT_ATOMIC_DQ
// the plant's second kernel: dq = acc / sqrt(hs) as bf16 into dqkv's q columns, one thread per element
__global__ void attention_fa2_plant_dq_finish(bf16* dqkv, const float* acc, int B, int T, int C, float scale) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)B * T * C) { dqkv[(i / C) * 3 * C + i % C] = __float2bfloat16(acc[i] * scale); }
}
#define FA2_BWD_LAUNCH(D)                                                                                            \
    attention_backward_fa2_kernel<D><<<dim3(ceil_div_u(T, FA2_TILE), NH, B), FA2_THREADS, FA2_BWD_SMEM(D)>>>(      \
        dqkv, delta, dout, qkv, out, lse, acc, T, C, NH)
#else
// one launch per head size, spelled out so that each instance has its own name in reports
#define FA2_BWD_LAUNCH(D)                                                                                            \
    attention_backward_fa2_kernel<D><<<dim3(NH, B), FA2_THREADS, FA2_BWD_SMEM(D)>>>(dqkv, delta, dout, qkv, out, lse, \
                                                                                   nullptr, T, C, NH)
#endif

static void attention_backward_fa2(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH) {
    int hs = C / NH;
    if (!fa2_head_size_ok(hs)) { fail("attention_backward_fa2: head size %d, these kernels take 32, 64 or 128", hs); }
    static int setup = 0; // above 48 KiB of dynamic shared memory: raise the limit once per process
    if (!setup) {
        cudaCheck(cudaFuncSetAttribute(attention_backward_fa2_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_BWD_SMEM(64)));
        cudaCheck(cudaFuncSetAttribute(attention_backward_fa2_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_BWD_SMEM(128)));
        setup = 1;
    }
#ifdef FA2_PLANT_ATOMIC_DQ
    float* acc;
    cudaCheck(cudaMalloc((void**)&acc, (size_t)B * T * C * sizeof(float)));
    cudaCheck(cudaMemset(acc, 0, (size_t)B * T * C * sizeof(float)));
#endif
    if (hs == 32) { FA2_BWD_LAUNCH(32); }
    else if (hs == 64) { FA2_BWD_LAUNCH(64); }
    else { FA2_BWD_LAUNCH(128); }
    cudaLaunchCheck();
#ifdef FA2_PLANT_ATOMIC_DQ
    attention_fa2_plant_dq_finish<<<ceil_div_u((size_t)B * T * C, 256), 256>>>(dqkv, acc, B, T, C, 1.0f / sqrtf((float)hs));
    cudaLaunchCheck();
    cudaCheck(cudaFree(acc));
#endif
}

#endif
#endif
