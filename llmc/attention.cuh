// Causal multi-head self-attention without a (T, T) matrix: flash attention, our own kernels.
//   qkv (B, T, 3C): row (b, t) holds q | k | v, head h in columns h*hs .. h*hs+hs-1 of each part.
//   forward:  out (B, T, C) and lse (B, NH, T) fp32, the natural log-sum-exp of each query row's
//             scaled scores (log sum over t2 <= t of exp(q_t . k_t2 / sqrt(hs))). That one float
//             per row is all backward needs to rebuild any probability exactly as the forward
//             normalised it: p = exp(score - lse). Nothing of size T x T is stored or allocated.
//   backward: dqkv (B, T, 3C), written (not accumulated), from dout (B, T, C), qkv, out and lse,
//             plus a scratch delta (B, NH, T) fp32: delta = rowsum(dout * out), the softmax
//             Jacobian's correction term (dS = P * (dP - delta)). Two passes, no atomics, so reruns
//             are bitwise identical: per query block dq (and delta), then per key block dk and dv
//             summed over the query blocks in ascending order. Both passes recompute P (and dP)
//             from lse: 7 tile matmuls instead of 5, the price of determinism without a T x T buffer.
// Two implementations behind one interface:
//   - BF16 build, head size 64 (every GPT-2 size): tensor cores through nvcuda::wmma (bf16 16x16x16,
//     fp32 accumulation). A block of 4 warps owns 64 query rows (forward, dq) or 64 keys (dk, dv);
//     the other side streams through shared memory in tiles of 64; each warp owns 16 rows.
//     Tiles above the causal diagonal are skipped, and so are 16-wide sub-tiles on it.
//   - FP32 build, or any other head size up to 256 (the fallback): the same online-softmax scheme
//     on CUDA cores, one warp per query row (forward, dq) or key row (dk, dv), keys in chunks of 32.
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "cuda_common.cuh"
#ifndef ENABLE_FP32
#include <mma.h>
#endif

#define ATT_SCALAR_MAX_HS 256 // the fallback keeps hs / 32 accumulators per lane
#define ATT_SCALAR_WARPS 4

// The causal mask, in one place: key position `key` is visible to query position `query`.
__device__ __forceinline__ bool att_visible(int key, int query) { return key <= query; }

// Head sizes we serve: 64 on tensor cores in BF16; 1..256 by the fallback.
static const char* attention_path(int C, int NH) {
    int hs = C / NH;
#ifndef ENABLE_FP32
    if (hs == 64) { return "tensor-core flash attention (wmma bf16, head size 64)"; }
#endif
    if (hs > ATT_SCALAR_MAX_HS) { fail("attention: head size %d (C %d / NH %d) is larger than %d", hs, C, NH, ATT_SCALAR_MAX_HS); }
    return "CUDA-core flash attention (fallback)";
}

// ----------------------------------------------------------------------------
// the CUDA-core path: one warp per row, online softmax over chunks of 32 keys

__device__ __forceinline__ float att_dot(const floatX* a, const floatX* b, int hs) {
    float s = 0.0f;
    for (int i = 0; i < hs; i++) { s += to_f(a[i]) * to_f(b[i]); }
    return s;
}

// One warp per (b, h, t): lane j scores key c0 + j of each chunk; the running max m, sum l and
// the output (lane owns dims lane, lane + 32, ...) are rescaled whenever the max grows.
// out (B, T, C), lse (B, NH, T) indexed by the row number (b * NH + h) * T + t.
__global__ void attention_forward_scalar_kernel(floatX* __restrict__ out, float* __restrict__ lse,
                                                const floatX* __restrict__ qkv, int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_SCALAR_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t = row % T, h = (row / T) % NH, b = row / (T * NH), hs = C / NH;
    size_t rs = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * rs + h * hs;
    const floatX* q = base + t * rs;
    float m = -INFINITY, l = 0.0f, acc[ATT_SCALAR_MAX_HS / 32];
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) { acc[k] = 0.0f; }
    for (int c0 = 0; c0 <= t; c0 += 32) {
        int t2 = c0 + lane;
        bool vis = t2 < T && att_visible(t2, t);
        float s = vis ? att_dot(q, base + t2 * rs + C, hs) * scale : -INFINITY;
        float mnew = fmaxf(m, warp_max(s));
        float alpha = expf(m - mnew), p = vis ? expf(s - mnew) : 0.0f;
        l = l * alpha + warp_sum(p);
        m = mnew;
        int nk = min(32, T - c0);
#pragma unroll
        for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) { acc[k] *= alpha; }
        for (int j = 0; j < nk; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const floatX* v = base + (c0 + j) * rs + 2 * C;
#pragma unroll
            for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
                if (lane + 32 * k < hs) { acc[k] += pj * to_f(v[lane + 32 * k]); }
            }
        }
    }
    floatX* o = out + ((size_t)b * T + t) * C + h * hs;
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
        if (lane + 32 * k < hs) { o[lane + 32 * k] = to_X(acc[k] / l); }
    }
    if (lane == 0) { lse[row] = m + logf(l); }
}

// One warp per query row: delta = dout . out, then over the visible keys p = exp(s - lse),
// dp = dout . v, ds = p (dp - delta), dq = scale * sum of ds k. Writes dq and delta[row].
__global__ void attention_backward_query_scalar_kernel(floatX* __restrict__ dqkv, float* __restrict__ delta,
                                                       const floatX* __restrict__ dout, const floatX* __restrict__ qkv,
                                                       const floatX* __restrict__ out, const float* __restrict__ lse,
                                                       int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_SCALAR_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t = row % T, h = (row / T) % NH, b = row / (T * NH), hs = C / NH;
    size_t rs = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * rs + h * hs;
    const floatX* q = base + t * rs;
    const floatX* dy = dout + ((size_t)b * T + t) * C + h * hs;
    const floatX* o = out + ((size_t)b * T + t) * C + h * hs;
    float d = 0.0f;
    for (int i = lane; i < hs; i += 32) { d += to_f(dy[i]) * to_f(o[i]); }
    d = warp_sum(d);
    if (lane == 0) { delta[row] = d; }
    float L = lse[row], acc[ATT_SCALAR_MAX_HS / 32];
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) { acc[k] = 0.0f; }
    for (int c0 = 0; c0 <= t; c0 += 32) {
        int t2 = c0 + lane;
        float ds = 0.0f;
        if (t2 < T && att_visible(t2, t)) {
            float p = expf(att_dot(q, base + t2 * rs + C, hs) * scale - L);
            ds = p * (att_dot(dy, base + t2 * rs + 2 * C, hs) - d);
        }
        int nk = min(32, T - c0);
        for (int j = 0; j < nk; j++) {
            float dsj = __shfl_sync(0xffffffffu, ds, j);
            const floatX* k = base + (c0 + j) * rs + C;
#pragma unroll
            for (int kk = 0; kk < ATT_SCALAR_MAX_HS / 32; kk++) {
                if (lane + 32 * kk < hs) { acc[kk] += dsj * to_f(k[lane + 32 * kk]); }
            }
        }
    }
    floatX* dq = dqkv + ((size_t)b * T + t) * rs + h * hs;
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
        if (lane + 32 * k < hs) { dq[lane + 32 * k] = to_X(acc[k] * scale); }
    }
}

// One warp per key row t2: over the queries t >= t2 (ascending), dv = sum of p dout_t and
// dk = scale * sum of ds q_t, with p and ds rebuilt from lse and delta as above.
__global__ void attention_backward_key_scalar_kernel(floatX* __restrict__ dqkv, const float* __restrict__ delta,
                                                     const floatX* __restrict__ dout, const floatX* __restrict__ qkv,
                                                     const float* __restrict__ lse, int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_SCALAR_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t2 = row % T, h = (row / T) % NH, b = row / (T * NH), hs = C / NH;
    size_t rs = 3 * (size_t)C, head_row0 = (size_t)row - t2; // (b, h, 0) in lse and delta
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * rs + h * hs;
    const floatX* key = base + t2 * rs + C;
    const floatX* dy0 = dout + (size_t)b * T * C + h * hs;
    float dk[ATT_SCALAR_MAX_HS / 32], dv[ATT_SCALAR_MAX_HS / 32];
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) { dk[k] = 0.0f; dv[k] = 0.0f; }
    for (int c0 = t2; c0 < T; c0 += 32) {
        int t = c0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (t < T && att_visible(t2, t)) {
            p = expf(att_dot(base + t * rs, key, hs) * scale - lse[head_row0 + t]);
            ds = p * (att_dot(dy0 + (size_t)t * C, key + C, hs) - delta[head_row0 + t]);
        }
        int nq = min(32, T - c0);
        for (int j = 0; j < nq; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j), dsj = __shfl_sync(0xffffffffu, ds, j);
            const floatX* q = base + (c0 + j) * rs;
            const floatX* dy = dy0 + (size_t)(c0 + j) * C;
#pragma unroll
            for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
                int i = lane + 32 * k;
                if (i < hs) {
                    dk[k] += dsj * to_f(q[i]);
                    dv[k] += pj * to_f(dy[i]);
                }
            }
        }
    }
    floatX* dkp = dqkv + ((size_t)b * T + t2) * rs + C + h * hs;
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
        if (lane + 32 * k < hs) {
            dkp[lane + 32 * k] = to_X(dk[k] * scale);
            dkp[C + lane + 32 * k] = to_X(dv[k]);
        }
    }
}

static void attention_forward_scalar(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    attention_path(C, NH);
    unsigned int blocks = ceil_div_u((size_t)B * NH * T, ATT_SCALAR_WARPS);
    attention_forward_scalar_kernel<<<blocks, 32 * ATT_SCALAR_WARPS>>>(out, lse, qkv, B, T, C, NH);
    cudaLaunchCheck();
}

static void attention_backward_scalar(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv,
                                      const floatX* out, const float* lse, int B, int T, int C, int NH) {
    attention_path(C, NH);
    unsigned int blocks = ceil_div_u((size_t)B * NH * T, ATT_SCALAR_WARPS);
    attention_backward_query_scalar_kernel<<<blocks, 32 * ATT_SCALAR_WARPS>>>(dqkv, delta, dout, qkv, out, lse, B, T,
                                                                              C, NH);
    cudaLaunchCheck();
    attention_backward_key_scalar_kernel<<<blocks, 32 * ATT_SCALAR_WARPS>>>(dqkv, delta, dout, qkv, lse, B, T, C, NH);
    cudaLaunchCheck();
}

#ifndef ENABLE_FP32
// ----------------------------------------------------------------------------
// the tensor-core path (BF16, head size 64)
//
// Tiles of 64 rows x 64 head dims live in shared memory as bf16 with a row stride of 72 (the 8
// extra columns move each row by 4 banks, so the 16-row fragment loads do not collide); each warp
// has an fp32 scratch of 16 x 64 (stride 68) where wmma stores its accumulators, so that lanes
// can read them: lane = 2 r + half owns row r and the columns 2 i + half (i < 32) of its warp's
// 16 rows for the scalar softmax work. wmma pointers are 32-byte aligned by construction.

#define ATT_HS 64
#define ATT_TILE 64
#define ATT_WARPS 4
#define ATT_THREADS (32 * ATT_WARPS)
#define ATT_LDB 72
#define ATT_LDF 68
#define ATT_TILE_BYTES (ATT_TILE * ATT_LDB * 2) // one bf16 tile
#define ATT_SCORE_BYTES (16 * ATT_LDF * 4)      // one warp's fp32 scratch
#define ATT_WARP_BF16_BYTES (16 * ATT_LDB * 2)  // one warp's 16 x 64 bf16 operand
#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

typedef __nv_bfloat16 bf16;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, bf16, nvcuda::wmma::row_major> att_frag_a;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, bf16, nvcuda::wmma::row_major> att_frag_b_row;
typedef nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, bf16, nvcuda::wmma::col_major> att_frag_b_col;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> att_frag_acc;

// 8 bf16: one 128-bit global or shared access (CUDA's uint4, which the compiler keeps as one
// vector access where a struct of four words may be split into four 32-bit stores).
typedef uint4 att_pack8;

// Word i (0..3: bf16 elements 2i, 2i + 1) of a pack.
__device__ __forceinline__ uint32_t att_word(const att_pack8& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The unit of the dynamic shared memory: 128-byte aligned, so every wmma pointer (32-byte
// alignment) can be computed from byte offsets that are multiples of 32.
struct __align__(128) att_smem_line {
    unsigned char b[128];
};

__device__ __forceinline__ uint32_t att_pack2(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}

// Rows t0 .. t0+63 of one head's 64 columns (src points at row 0 of them, rows row_stride apart)
// into a (64, ATT_LDB) shared tile, by the whole block; rows at or past T become zeros.
__device__ __forceinline__ void att_load_tile(bf16* tile, const bf16* __restrict__ src, size_t row_stride, int t0,
                                              int T) {
    for (int i = threadIdx.x; i < ATT_TILE * 8; i += ATT_THREADS) {
        int r = i / 8, c = (i % 8) * 8;
        att_pack8 v = make_uint4(0u, 0u, 0u, 0u);
        if (t0 + r < T) { v = *reinterpret_cast<const att_pack8*>(src + (size_t)(t0 + r) * row_stride + c); }
        *reinterpret_cast<att_pack8*>(tile + r * ATT_LDB + c) = v;
    }
}

// One warp's 16 x 64 fp32 scratch, times scale, as bf16 rows t0 .. t0+15 of dst (rows
// row_stride apart; rows at or past T are skipped). 128-bit stores.
__device__ __forceinline__ void att_store_rows(bf16* __restrict__ dst, size_t row_stride, const float* sS, int t0, int T,
                                               float scale) {
    int lane = threadIdx.x % 32;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        int idx = lane + 32 * k, r = idx / 8, c = (idx % 8) * 8;
        if (t0 + r >= T) { continue; }
        const float* s = sS + r * ATT_LDF + c;
        att_pack8 v = make_uint4(att_pack2(s[0] * scale, s[1] * scale), att_pack2(s[2] * scale, s[3] * scale),
                                 att_pack2(s[4] * scale, s[5] * scale), att_pack2(s[6] * scale, s[7] * scale));
        // __stwb: a plain (write-back) store that nvcc keeps as one 128-bit STG, where an assignment
        // after the wmma stores was split into four 32-bit ones
        __stwb(reinterpret_cast<att_pack8*>(dst + (size_t)(t0 + r) * row_stride + c), v);
    }
}

// A warp's four 16 x 16 row-major A fragments of rows r0 .. r0+15 of a shared tile (k = head dims).
__device__ __forceinline__ void att_load_a(att_frag_a* f, const bf16* tile, int r0) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { nvcuda::wmma::load_matrix_sync(f[kk], tile + r0 * ATT_LDB + kk * 16, ATT_LDB); }
}

// sS[:, 16 j .. 16 j + 15] = A (16 x 64, four fragments) times rows 16 j .. 16 j + 15 of tile,
// transposed (B = tile^T: a col-major view of the row-major tile), for j < nsub.
__device__ __forceinline__ void att_scores(float* sS, const att_frag_a* a, const bf16* tile, int jlo, int jhi) {
    for (int j = jlo; j < jhi; j++) {
        att_frag_acc acc;
        nvcuda::wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            att_frag_b_col bt;
            nvcuda::wmma::load_matrix_sync(bt, tile + j * 16 * ATT_LDB + kk * 16, ATT_LDB);
            nvcuda::wmma::mma_sync(acc, a[kk], bt, acc);
        }
        nvcuda::wmma::store_matrix_sync(sS + j * 16, acc, ATT_LDF, nvcuda::wmma::mem_row_major);
    }
}

// acc[dn] (+)= P (16 x 64 bf16, a warp's operand, columns 16 j..) times tile rows 16 j .. (the
// 64-wide k dimension restricted to sub-tiles jlo .. jhi-1), for the four 16-column output blocks.
__device__ __forceinline__ void att_pv(att_frag_acc* acc, const bf16* p, const bf16* tile, int jlo, int jhi) {
    for (int j = jlo; j < jhi; j++) {
        att_frag_a a;
        nvcuda::wmma::load_matrix_sync(a, p + j * 16, ATT_LDB);
#pragma unroll
        for (int dn = 0; dn < 4; dn++) {
            att_frag_b_row bv;
            nvcuda::wmma::load_matrix_sync(bv, tile + j * 16 * ATT_LDB + dn * 16, ATT_LDB);
            nvcuda::wmma::mma_sync(acc[dn], a, bv, acc[dn]);
        }
    }
}

// Forward. Grid (T/64 query blocks, last first, NH, B), 4 warps; warp w owns query rows
// q0 + 16 w .. +15 and keeps their Q as fragments. Per key block kb <= qb: S = Q K^T (tensor
// cores, fp32), online softmax in fp32 on the lanes (running max m, sum l, in log2 units), P to
// bf16, P V (tensor cores) added to the lane's 32 output values after rescaling them.
// Writes out (B, T, C) and lse (B, NH, T). Shared: K, V tiles + per warp scores and P = 45056 bytes.
__global__ void __launch_bounds__(ATT_THREADS, 4) attention_forward_flash_kernel(bf16* __restrict__ out,
                                                                              float* __restrict__ lse,
                                                                              const bf16* __restrict__ qkv, int T,
                                                                              int C, int NH) {
    extern __shared__ att_smem_line att_smem_lines[];
    unsigned char* att_smem = reinterpret_cast<unsigned char*>(att_smem_lines);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    bf16* sK = reinterpret_cast<bf16*>(att_smem);
    bf16* sV = reinterpret_cast<bf16*>(att_smem + ATT_TILE_BYTES);
    float* sS = reinterpret_cast<float*>(att_smem + 2 * ATT_TILE_BYTES + warp * ATT_SCORE_BYTES);
    bf16* sP = reinterpret_cast<bf16*>(att_smem + 2 * ATT_TILE_BYTES + ATT_WARPS * ATT_SCORE_BYTES +
                                       warp * ATT_WARP_BF16_BYTES);
    int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int q0 = qb * ATT_TILE, qrow = q0 + warp * 16 + r;
    size_t rs = 3 * (size_t)C;
    const bf16* head = qkv + (size_t)b * T * rs + h * ATT_HS;
    att_load_tile(sK, head, rs, q0, T); // Q, through the K tile's space
    __syncthreads();
    att_frag_a qf[4];
    att_load_a(qf, sK, warp * 16);
    const float sl2 = 0.125f * ATT_LOG2E; // 1/sqrt(64), in log2 units
    float m = -INFINITY, l = 0.0f, o[32];
#pragma unroll
    for (int i = 0; i < 32; i++) { o[i] = 0.0f; }
    bool active = q0 + warp * 16 < T; // a warp whose rows are all padding skips the math
    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * ATT_TILE;
        __syncthreads(); // the previous tiles (and Q) are no longer read
        att_load_tile(sK, head + C, rs, k0, T);
        att_load_tile(sV, head + 2 * C, rs, k0, T);
        __syncthreads();
        int nsub = !active ? 0 : kb == qb ? warp + 1 : 4; // key sub-tiles at or below the diagonal
        att_scores(sS, qf, sK, 0, nsub);
        __syncwarp();
        // two passes over the lane's 32 scores in shared memory (max, then exponentials): keeping
        // them in registers would cost 32 more per thread
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            if (c < nsub * 16 && att_visible(k0 + c, qrow)) { mx = fmaxf(mx, sS[r * ATT_LDF + c] * sl2); }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mnew = fmaxf(m, mx);
        float alpha = mnew == -INFINITY ? 1.0f : exp2f(m - mnew), sum = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            bool vis = c < nsub * 16 && att_visible(k0 + c, qrow);
            float p = vis ? exp2f(sS[r * ATT_LDF + c] * sl2 - mnew) : 0.0f;
            sum += p;
            sP[r * ATT_LDB + c] = __float2bfloat16(p);
            o[i] *= alpha;
        }
        l = l * alpha + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
        m = mnew;
        __syncwarp();
        // P V, one 16-column block of the output at a time (one accumulator live: fewer registers)
#pragma unroll
        for (int dn = 0; dn < 4; dn++) {
            att_frag_acc acc;
            nvcuda::wmma::fill_fragment(acc, 0.0f);
            for (int j = 0; j < nsub; j++) {
                att_frag_a a;
                att_frag_b_row bv;
                nvcuda::wmma::load_matrix_sync(a, sP + j * 16, ATT_LDB);
                nvcuda::wmma::load_matrix_sync(bv, sV + j * 16 * ATT_LDB + dn * 16, ATT_LDB);
                nvcuda::wmma::mma_sync(acc, a, bv, acc);
            }
            nvcuda::wmma::store_matrix_sync(sS + dn * 16, acc, ATT_LDF, nvcuda::wmma::mem_row_major);
        }
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 32; i++) { o[i] += sS[r * ATT_LDF + 2 * i + half]; }
        __syncwarp();
    }
    if (!active) { return; }
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < 32; i++) { sS[r * ATT_LDF + 2 * i + half] = o[i] * inv; }
    __syncwarp();
    att_store_rows(out + (size_t)b * T * C + h * ATT_HS, C, sS, q0 + warp * 16, T, 1.0f);
    if (half == 0 && qrow < T) { lse[((size_t)b * NH + h) * T + qrow] = (m + log2f(l)) * ATT_LN2; }
}

// Backward, query side. Grid (T/64 query blocks, last first, NH, B), 4 warps; warp w owns query
// rows q0 + 16 w .. +15 with their Q and dout as fragments, lse and delta per lane row. First
// delta = rowsum(dout * out) (written for the key pass). Per key block kb <= qb: S = Q K^T,
// P = exp(S / 8 - lse), dP = dout V^T, dS = P (dP - delta) to bf16, dq += dS K. Writes dq = dq / 8
// into dqkv and delta (B, NH, T). Shared: K, V tiles + per warp scratch and dS = 45056 bytes.
__global__ void __launch_bounds__(ATT_THREADS) attention_backward_query_flash_kernel(
    bf16* __restrict__ dqkv, float* __restrict__ delta, const bf16* __restrict__ dout, const bf16* __restrict__ qkv,
    const bf16* __restrict__ out, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ att_smem_line att_smem_lines[];
    unsigned char* att_smem = reinterpret_cast<unsigned char*>(att_smem_lines);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    bf16* sK = reinterpret_cast<bf16*>(att_smem);
    bf16* sV = reinterpret_cast<bf16*>(att_smem + ATT_TILE_BYTES);
    float* sS = reinterpret_cast<float*>(att_smem + 2 * ATT_TILE_BYTES + warp * ATT_SCORE_BYTES);
    bf16* sdS = reinterpret_cast<bf16*>(att_smem + 2 * ATT_TILE_BYTES + ATT_WARPS * ATT_SCORE_BYTES +
                                        warp * ATT_WARP_BF16_BYTES);
    int qb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int q0 = qb * ATT_TILE, qrow = q0 + warp * 16 + r;
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T + qrow;
    const bf16* head = qkv + (size_t)b * T * rs + h * ATT_HS;
    const bf16* dhead = dout + (size_t)b * T * C + h * ATT_HS;
    att_load_tile(sK, head, rs, q0, T);
    att_load_tile(sV, dhead, C, q0, T);
    __syncthreads();
    att_frag_a qf[4], dof[4];
    att_load_a(qf, sK, warp * 16);
    att_load_a(dof, sV, warp * 16);
    bool active = q0 + warp * 16 < T;
    // delta of row r: this lane's 32 dims of dout . out, the pair's halves summed
    float d = 0.0f, L = 0.0f;
    if (qrow < T) {
        const bf16* dy = sV + (warp * 16 + r) * ATT_LDB + half * 32;
        const bf16* o = out + ((size_t)b * T + qrow) * C + h * ATT_HS + half * 32;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            att_pack8 ov = *reinterpret_cast<const att_pack8*>(o + 8 * k);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                bf16 oe = __ushort_as_bfloat16((unsigned short)(att_word(ov, e / 2) >> (16 * (e % 2))));
                d += __bfloat162float(dy[8 * k + e]) * __bfloat162float(oe);
            }
        }
        L = lse[lrow] * ATT_LOG2E;
    }
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    if (half == 0 && qrow < T) { delta[lrow] = d; }
    const float sl2 = 0.125f * ATT_LOG2E;
    att_frag_acc dq[4];
#pragma unroll
    for (int dn = 0; dn < 4; dn++) { nvcuda::wmma::fill_fragment(dq[dn], 0.0f); }
    for (int kb = 0; kb <= qb; kb++) {
        int k0 = kb * ATT_TILE;
        __syncthreads();
        att_load_tile(sK, head + C, rs, k0, T);
        att_load_tile(sV, head + 2 * C, rs, k0, T);
        __syncthreads();
        int nsub = !active ? 0 : kb == qb ? warp + 1 : 4;
        att_scores(sS, qf, sK, 0, nsub);
        __syncwarp();
        float p[32];
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            bool vis = c < nsub * 16 && qrow < T && att_visible(k0 + c, qrow);
            p[i] = vis ? exp2f(sS[r * ATT_LDF + c] * sl2 - L) : 0.0f;
        }
        __syncwarp();
        att_scores(sS, dof, sV, 0, nsub); // dP = dout V^T
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            float ds = p[i] == 0.0f ? 0.0f : p[i] * (sS[r * ATT_LDF + c] - d);
            sdS[r * ATT_LDB + c] = __float2bfloat16(ds);
        }
        __syncwarp();
        att_pv(dq, sdS, sK, 0, nsub); // dq += dS K
    }
    if (!active) { return; }
#pragma unroll
    for (int dn = 0; dn < 4; dn++) {
        nvcuda::wmma::store_matrix_sync(sS + dn * 16, dq[dn], ATT_LDF, nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
    att_store_rows(dqkv + (size_t)b * T * rs + h * ATT_HS, rs, sS, q0 + warp * 16, T, 0.125f);
}

// Backward, key side. Grid (T/64 key blocks, first first: they see the most queries, NH, B), 4
// warps; warp w owns keys k0 + 16 w .. +15 with their K and V as fragments and accumulates their
// dk, dv in fragments. Per query block qb >= kb, ascending: S^T = K Q^T, P^T = exp(S^T / 8 - lse),
// dP^T = V dout^T, dS^T = P^T (dP^T - delta), then dv += P^T dout and dk += dS^T Q (bf16 operands).
// Writes dk / 8 and dv into dqkv. Shared: Q, dout tiles, lse, delta + per warp scratch, P^T and
// dS^T = 54784 bytes (over the 48 KiB default: the launcher raises the limit).
__global__ void __launch_bounds__(ATT_THREADS) attention_backward_key_flash_kernel(
    bf16* __restrict__ dqkv, const float* __restrict__ delta, const bf16* __restrict__ dout,
    const bf16* __restrict__ qkv, const float* __restrict__ lse, int T, int C, int NH) {
    extern __shared__ att_smem_line att_smem_lines[];
    unsigned char* att_smem = reinterpret_cast<unsigned char*>(att_smem_lines);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
    bf16* sQ = reinterpret_cast<bf16*>(att_smem);
    bf16* sdO = reinterpret_cast<bf16*>(att_smem + ATT_TILE_BYTES);
    float* sL = reinterpret_cast<float*>(att_smem + 2 * ATT_TILE_BYTES);
    float* sD = sL + ATT_TILE;
    unsigned char* wbase = att_smem + 2 * ATT_TILE_BYTES + 2 * ATT_TILE * 4 +
                           warp * (ATT_SCORE_BYTES + 2 * ATT_WARP_BF16_BYTES);
    float* sS = reinterpret_cast<float*>(wbase);
    bf16* sPt = reinterpret_cast<bf16*>(wbase + ATT_SCORE_BYTES);
    bf16* sdSt = reinterpret_cast<bf16*>(wbase + ATT_SCORE_BYTES + ATT_WARP_BF16_BYTES);
    int kb = blockIdx.x, h = blockIdx.y, b = blockIdx.z, nqb = gridDim.x;
    int k0 = kb * ATT_TILE, krow = k0 + warp * 16 + r;
    size_t rs = 3 * (size_t)C, lrow0 = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * ATT_HS;
    const bf16* dhead = dout + (size_t)b * T * C + h * ATT_HS;
    att_load_tile(sQ, head + C, rs, k0, T); // K and V, through the Q and dout tiles' space
    att_load_tile(sdO, head + 2 * C, rs, k0, T);
    __syncthreads();
    att_frag_a kf[4], vf[4];
    att_load_a(kf, sQ, warp * 16);
    att_load_a(vf, sdO, warp * 16);
    att_frag_acc dk[4], dv[4];
#pragma unroll
    for (int dn = 0; dn < 4; dn++) {
        nvcuda::wmma::fill_fragment(dk[dn], 0.0f);
        nvcuda::wmma::fill_fragment(dv[dn], 0.0f);
    }
    const float sl2 = 0.125f * ATT_LOG2E;
    for (int qb = kb; qb < nqb; qb++) {
        int q0 = qb * ATT_TILE;
        __syncthreads();
        att_load_tile(sQ, head, rs, q0, T);
        att_load_tile(sdO, dhead, C, q0, T);
        for (int i = threadIdx.x; i < ATT_TILE; i += ATT_THREADS) {
            bool in = q0 + i < T;
            sL[i] = in ? lse[lrow0 + q0 + i] * ATT_LOG2E : 0.0f;
            sD[i] = in ? delta[lrow0 + q0 + i] : 0.0f;
        }
        __syncthreads();
        // query sub-tiles that see some of this warp's keys and lie before T
        int jlo = qb == kb ? warp : 0, jhi = min(4, (T - q0 + 15) / 16);
        att_scores(sS, kf, sQ, jlo, jhi); // S^T = K Q^T
        __syncwarp();
        float p[32];
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            bool vis = c >= jlo * 16 && c < jhi * 16 && q0 + c < T && att_visible(krow, q0 + c);
            p[i] = vis ? exp2f(sS[r * ATT_LDF + c] * sl2 - sL[c]) : 0.0f;
            sPt[r * ATT_LDB + c] = __float2bfloat16(p[i]);
        }
        __syncwarp();
        att_scores(sS, vf, sdO, jlo, jhi); // dP^T = V dout^T
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = 2 * i + half;
            float ds = p[i] == 0.0f ? 0.0f : p[i] * (sS[r * ATT_LDF + c] - sD[c]);
            sdSt[r * ATT_LDB + c] = __float2bfloat16(ds);
        }
        __syncwarp();
        att_pv(dv, sPt, sdO, jlo, jhi); // dv += P^T dout
        att_pv(dk, sdSt, sQ, jlo, jhi); // dk += dS^T Q
    }
    if (k0 + warp * 16 >= T) { return; }
    bf16* dst = dqkv + (size_t)b * T * rs + C + h * ATT_HS;
#pragma unroll
    for (int dn = 0; dn < 4; dn++) {
        nvcuda::wmma::store_matrix_sync(sS + dn * 16, dk[dn], ATT_LDF, nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
    att_store_rows(dst, rs, sS, k0 + warp * 16, T, 0.125f);
    __syncwarp();
#pragma unroll
    for (int dn = 0; dn < 4; dn++) {
        nvcuda::wmma::store_matrix_sync(sS + dn * 16, dv[dn], ATT_LDF, nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
    att_store_rows(dst + C, rs, sS, k0 + warp * 16, T, 1.0f);
}

#define ATT_FWD_SMEM (2 * ATT_TILE_BYTES + ATT_WARPS * (ATT_SCORE_BYTES + ATT_WARP_BF16_BYTES))
#define ATT_BWD_Q_SMEM ATT_FWD_SMEM
#define ATT_BWD_K_SMEM (2 * ATT_TILE_BYTES + 2 * ATT_TILE * 4 + ATT_WARPS * (ATT_SCORE_BYTES + 2 * ATT_WARP_BF16_BYTES))

// Raises the dynamic shared-memory limit of the three kernels once per process (one GPU each).
static void attention_flash_setup(void) {
    static int done = 0;
    if (done) { return; }
    cudaCheck(cudaFuncSetAttribute(attention_forward_flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   ATT_FWD_SMEM));
    cudaCheck(cudaFuncSetAttribute(attention_backward_query_flash_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, ATT_BWD_Q_SMEM));
    cudaCheck(cudaFuncSetAttribute(attention_backward_key_flash_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   ATT_BWD_K_SMEM));
    done = 1;
}

static void attention_forward_flash(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    if (C / NH != ATT_HS) { fail("attention_forward_flash: head size %d, the tensor-core kernels need 64", C / NH); }
    attention_flash_setup();
    dim3 grid(ceil_div_u(T, ATT_TILE), NH, B);
    attention_forward_flash_kernel<<<grid, ATT_THREADS, ATT_FWD_SMEM>>>(out, lse, qkv, T, C, NH);
    cudaLaunchCheck();
}

static void attention_backward_flash(bf16* dqkv, float* delta, const bf16* dout, const bf16* qkv, const bf16* out,
                                     const float* lse, int B, int T, int C, int NH) {
    if (C / NH != ATT_HS) { fail("attention_backward_flash: head size %d, the tensor-core kernels need 64", C / NH); }
    attention_flash_setup();
    dim3 grid(ceil_div_u(T, ATT_TILE), NH, B);
    attention_backward_query_flash_kernel<<<grid, ATT_THREADS, ATT_BWD_Q_SMEM>>>(dqkv, delta, dout, qkv, out, lse, T,
                                                                                 C, NH);
    cudaLaunchCheck();
    attention_backward_key_flash_kernel<<<grid, ATT_THREADS, ATT_BWD_K_SMEM>>>(dqkv, delta, dout, qkv, lse, T, C, NH);
    cudaLaunchCheck();
}
#endif

// ----------------------------------------------------------------------------
// the interface: the tensor-core kernels where they apply, else the fallback

// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C).
static void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
#ifndef ENABLE_FP32
    if (C / NH == ATT_HS) {
        attention_forward_flash(out, lse, qkv, B, T, C, NH);
        return;
    }
#endif
    attention_forward_scalar(out, lse, qkv, B, T, C, NH);
}

// dqkv (B, T, 3C), written, from dout (B, T, C) and the forward's qkv, out and lse;
// delta: B * NH * T floats of scratch.
static void attention_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, int B, int T, int C, int NH) {
#ifndef ENABLE_FP32
    if (C / NH == ATT_HS) {
        attention_backward_flash(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
        return;
    }
#endif
    attention_backward_scalar(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
}

#endif
