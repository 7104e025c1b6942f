// attention_fa2.cuh: the FlashAttention-2-style causal attention forward on mma.sync, ldmatrix and
// cp.async (llmc/ptx.cuh): BF16 build, head sizes D = 32, 64, 128 (a template parameter). Same
// interface and outputs as attention_forward_scalar (llmc/attention.cuh): qkv (B, T, 3C) in, out
// (B, T, C) bf16 and lse (B, NH, T) fp32 (natural log). Other head sizes and the FP32 build keep
// llmc/attention.cuh's kernels (fa2_head_size_ok says which).
#ifndef LLMC_ATTENTION_FA2_CUH
#define LLMC_ATTENTION_FA2_CUH
#ifndef ENABLE_FP32

#include "attention.cuh"
#include "ptx.cuh"

typedef __nv_bfloat16 bf16;

#define FA2_TILE 64                        // query rows per block, keys per K/V tile
#define FA2_WARPS 4                        // 16 query rows each
#define FA2_THREADS (32 * FA2_WARPS)
#define FA2_MIN_BLOCKS 1 // __launch_bounds__'s blocks per SM (the SASS check plants 8, which must spill)
#define FA2_TILE_ELEMS(D) (FA2_TILE * (D)) // one 64 x D bf16 tile, unpadded
// shared: Q, then K and V twice (double buffer): 5 tiles (40960 bytes at D 64)
#define FA2_SMEM(D) (5 * FA2_TILE_ELEMS(D) * 2)

static bool fa2_head_size_ok(int hs) { return hs == 32 || hs == 64 || hs == 128; }

// Swizzled offset of element (row, col) of a 64 x D bf16 tile: each row holds D/8 chunks of 16 bytes;
// chunk c of row r sits at chunk c ^ (r % 8) (D >= 64), or c ^ ((r / 2) % 4) (D 32: 4 chunks, two
// rows per 128 bytes). The 8 row addresses of one ldmatrix 8x8 matrix (same c, 8 consecutive rows)
// then fall in 8 distinct 16-byte bank groups, i.e. all 32 banks once.
template <int D> __device__ __forceinline__ int fa2_off(int row, int col) {
    int sw = D >= 64 ? (row & 7) : ((row >> 1) & 3);
    return row * D + (((col >> 3) ^ sw) << 3) + (col & 7);
}

// One 64 x D tile (rows row0.. of a head's q, k or v columns; row stride rs elements) into the
// swizzled tile `dst`: 8 D chunks of 16 bytes, D / 16 per thread, by cp.async; rows at or past T are
// zero-filled with plain 16-byte stores (no global read). The caller commits the group.
template <int D> __device__ __forceinline__ void fa2_load_tile(bf16* dst, const bf16* src, size_t rs, int row0, int T) {
#pragma unroll
    for (int i = 0; i < FA2_TILE_ELEMS(D) / 8 / FA2_THREADS; i++) {
        int chunk = threadIdx.x + i * FA2_THREADS, row = chunk / (D / 8), col = (chunk % (D / 8)) * 8;
        bf16* d = dst + fa2_off<D>(row, col);
        if (row0 + row < T) { ptx_cp_async_cg16(d, src + (size_t)(row0 + row) * rs + col); }
        else { *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u); }
    }
}

// two floats to one register of two bf16, the first in the low half (the mma fragment order)
__device__ __forceinline__ uint32_t fa2_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// S (16 x 64, the warp's rows against the tile's keys, fp32 accumulators: s[j] = keys 8j..8j+7) =
// Q K^T. qf[kk]: the warp's Q A-fragments for head dims 16kk..16kk+15. K B-fragments by
// ldmatrix.x4 (non-transposed: K row-major is K^T column-major): matrices (keys 16jj + 0/8, dims
// 16kk + 0/8), giving b for key groups 2jj and 2jj+1.
template <int D>
__device__ __forceinline__ void fa2_scores(float s[8][4], const uint32_t qf[D / 16][4], const bf16* sK, int lane) {
#pragma unroll
    for (int j = 0; j < 8; j++) { s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f; }
    int mat = lane / 8, r = lane % 8;
#pragma unroll
    for (int jj = 0; jj < 4; jj++) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t kb[4];
            ptx_ldmatrix_x4(kb, sK + fa2_off<D>(16 * jj + (mat / 2) * 8 + r, 16 * kk + (mat % 2) * 8));
            ptx_mma_bf16_16816(s[2 * jj], qf[kk], kb, s[2 * jj]);
            ptx_mma_bf16_16816(s[2 * jj + 1], qf[kk], kb + 2, s[2 * jj + 1]);
        }
    }
}

// o (16 x 8N: o[n] = dims 8(n0 + n)..+7) += A B for one 16-key chunk kc: a, the A fragment (16 rows
// x keys 16kc..16kc+15); B (keys x D dims) row-major in the swizzled tile sV, its B fragments by
// ldmatrix.x4.trans: matrices (keys 16kc + 0/8, dims 8(n0 + n) + 0/8 for n even), b for n and n+1.
template <int D, int N = D / 8>
__device__ __forceinline__ void fa2_mma_bt(float o[N][4], const uint32_t a[4], const bf16* sV, int kc, int lane,
                                           int n0 = 0) {
    int mat = lane / 8, r = lane % 8;
#pragma unroll
    for (int n = 0; n < N; n += 2) {
        uint32_t vb[4];
        ptx_ldmatrix_x4_trans(vb, sV + fa2_off<D>(16 * kc + (mat % 2) * 8 + r, 8 * (n0 + n + mat / 2)));
        ptx_mma_bf16_16816(o[n], a, vb, o[n]);
        ptx_mma_bf16_16816(o[n + 1], a, vb + 2, o[n + 1]);
    }
}

// O (16 x D) += P V. P's A-fragments come straight from the score accumulators (key chunk kc =
// accumulator groups 2kc, 2kc+1, packed to bf16).
template <int D>
__device__ __forceinline__ void fa2_pv(float o[D / 8][4], const float p[8][4], const bf16* sV, int lane) {
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        uint32_t a[4] = {fa2_pack(p[2 * kc][0], p[2 * kc][1]), fa2_pack(p[2 * kc][2], p[2 * kc][3]),
                         fa2_pack(p[2 * kc + 1][0], p[2 * kc + 1][1]), fa2_pack(p[2 * kc + 1][2], p[2 * kc + 1][3])};
        fa2_mma_bt<D, D / 8>(o, a, sV, kc, lane);
    }
}

// The mask as the kernels apply it (att_visible, llmc/attention.cuh)
__device__ __forceinline__ bool fa2_visible(int key, int query) { return att_visible(key, query); }

// 1/sqrt(D) in log2 units (scores times this are exp2 exponents)
template <int D> __device__ __forceinline__ float fa2_sl2() {
    return (D == 32 ? 0.17677669529663688f : D == 64 ? 0.125f : 0.08838834764831845f) * 1.4426950408889634f;
}

// Online softmax on the accumulator layout, one key tile: the lane holds rows g (s[j][0..1]) and
// g + 8 (s[j][2..3]) at keys k0 + 8j + 2t + 0/1. Masks, takes the row max over the quad (xor 1, 2),
// turns s into P = exp2(s * sl2 - m_new) in place, rescales o and the lane's partial sums l.
// m, l: log2-unit running max and this lane's partial row sum, per row half (0: g, 1: g + 8).
template <int D>
__device__ __forceinline__ void fa2_softmax(float s[8][4], float o[D / 8][4], float m[2], float l[2], int k0,
                                            int qrow0, int lane) {
    const float sl2 = fa2_sl2<D>();
    int t = lane % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        int q = qrow0 + hf * 8;
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float& v = s[j][2 * hf + e];
                v = fa2_visible(k0 + 8 * j + 2 * t + e, q) ? v * sl2 : -INFINITY;
                mx = fmaxf(mx, v);
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        float mnew = fmaxf(m[hf], mx); // finite: key 0 is visible to every row from tile 0 on
        float alpha = exp2f(m[hf] - mnew), sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float& v = s[j][2 * hf + e];
                v = exp2f(v - mnew);
                sum += v;
            }
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) { o[n][2 * hf] *= alpha; o[n][2 * hf + 1] *= alpha; }
        l[hf] = l[hf] * alpha + sum;
        m[hf] = mnew;
    }
}

// out = O / l for the lane's two rows (packed bf16 pairs), lse = (m + log2 l) ln 2; rows >= T skipped.
template <int D>
__device__ __forceinline__ void fa2_store(bf16* out_head, float* lse_head, const float o[D / 8][4], const float m[2],
                                          float l[2], int qrow0, int T, int C, int lane) {
    int t = lane % 4;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
        l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
        int q = qrow0 + hf * 8;
        if (q >= T) { continue; }
        float inv = 1.0f / l[hf];
        uint32_t* row = reinterpret_cast<uint32_t*>(out_head + (size_t)q * C);
#pragma unroll
        for (int n = 0; n < D / 8; n++) { row[4 * n + t] = fa2_pack(o[n][2 * hf] * inv, o[n][2 * hf + 1] * inv); }
        if (t == 0) { lse_head[q] = (m[hf] + log2f(l[hf])) * 0.6931471805599453f; }
    }
}

// Grid (ceil(T/64) query blocks, heaviest (last) first; NH; B), 4 warps; warp w owns query rows
// q0 + 16w .. +15. Q (64 x D) and K/V tiles (64 x D each, double-buffered) in swizzled shared
// memory by cp.async: tile kb + 1 is in flight while tile kb is used. Q's A-fragments are loaded once
// (ldmatrix.x4); per key tile kb <= qb: S = Q K^T (fa2_scores), online softmax (fa2_softmax),
// O += P V (fa2_pv).
template <int D>
__global__ void __launch_bounds__(FA2_THREADS, FA2_MIN_BLOCKS) attention_forward_fa2_kernel(bf16* __restrict__ out,
                                                                            float* __restrict__ lse,
                                                                            const bf16* __restrict__ qkv, int T, int C,
                                                                            int NH) {
    extern __shared__ uint4 fa2_smem[];
    constexpr int TE = FA2_TILE_ELEMS(D);
    bf16* sQ = reinterpret_cast<bf16*>(fa2_smem);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z, q0 = qb * FA2_TILE;
    size_t rs = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * rs + h * D;
    fa2_load_tile<D>(sQ, head, rs, q0, T);
    fa2_load_tile<D>(sQ + TE, head + C, rs, 0, T);
    fa2_load_tile<D>(sQ + 3 * TE, head + 2 * C, rs, 0, T);
    ptx_cp_async_commit();
    uint32_t qf[D / 16][4];
    float o[D / 8][4], s[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++) { o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f; }
    for (int kb = 0; kb <= qb; kb++) {
        const bf16* sK = sQ + (1 + kb % 2) * TE;
        const bf16* sV = sQ + (3 + kb % 2) * TE;
        if (kb < qb) { // the next tile into the other buffer (read last in iteration kb - 1)
            fa2_load_tile<D>(sQ + (1 + (kb + 1) % 2) * TE, head + C, rs, (kb + 1) * FA2_TILE, T);
            fa2_load_tile<D>(sQ + (3 + (kb + 1) % 2) * TE, head + 2 * C, rs, (kb + 1) * FA2_TILE, T);
            ptx_cp_async_commit();
            ptx_cp_async_wait<1>();
        } else {
            ptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (kb == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                ptx_ldmatrix_x4(qf[kk], sQ + fa2_off<D>(warp * 16 + lane % 16, 16 * kk + (lane / 16) * 8));
            }
        }
        fa2_scores<D>(s, qf, sK, lane);
        fa2_softmax<D>(s, o, m, l, kb * FA2_TILE, q0 + warp * 16 + lane / 4, lane);
        fa2_pv<D>(o, s, sV, lane);
        __syncthreads(); // this tile's buffers are refilled in the next iteration
    }
    fa2_store<D>(out + (size_t)b * T * C + h * D, lse + ((size_t)b * NH + h) * T, o, m, l,
                 q0 + warp * 16 + lane / 4, T, C, lane);
}

// one launch per head size, spelled out so that each instance has its own name in reports
#define FA2_FWD_LAUNCH(D)                                                                                            \
    attention_forward_fa2_kernel<D><<<grid, FA2_THREADS, FA2_SMEM(D)>>>(out, lse, qkv, T, C, NH)

static void attention_forward_fa2(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    if (!fa2_head_size_ok(hs)) { fail("attention_forward_fa2: head size %d, these kernels take 32, 64 or 128", hs); }
    static int setup = 0; // head size 128: 80 KiB of dynamic shared memory, above the default 48
    if (!setup) {
        cudaCheck(cudaFuncSetAttribute(attention_forward_fa2_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FA2_SMEM(128)));
        setup = 1;
    }
    dim3 grid(ceil_div_u(T, FA2_TILE), NH, B);
    if (hs == 32) { FA2_FWD_LAUNCH(32); }
    else if (hs == 64) { FA2_FWD_LAUNCH(64); }
    else { FA2_FWD_LAUNCH(128); }
    cudaLaunchCheck();
}

#endif
#endif
