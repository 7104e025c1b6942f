// LayerNorm over channels, fused with the residual add that precedes it, and its backward, each
// one kernel and one pass over HBM, 128-bit loads and stores (Packed128) where the rows are whole
// 16-byte packs, statistics in fp32 (two passes over the row held in registers, as the CPU
// trainer). Forward: one warp per row. Backward: teams of warps per row (each thread one pack of
// the row) over a contiguous range of rows per block, as many blocks as fill the GPU (one full
// wave), the weight and bias gradients accumulated in the same kernel (per-thread registers, teams
// combined in a fixed order into one partial per block), the block partials added in a fixed order
// by a second launch: deterministic, no atomics on the values.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define LN_BWD_WARPS 16                     // warps per backward block
#define LN_BWD_MIN_BLOCKS 2                 // backward blocks resident per SM asked of ptxas (<= 64 registers)
#define LN_BWD_MAX_GRID 1024                // backward blocks at most (the partials' scratch)
#define LN_MAX_C 2048                       // the forward keeps C / 32 channels per lane in registers
#define LN_MAX_PACKS (LN_MAX_C / (32 * X128))

// In: a, b (N, C) (b NULL: no residual), weight, bias (C). Out: residual = a + b (N, C, rounded to
// floatX; skipped when b is NULL), out = (x - mean) * rstd * weight + bias (N, C) for x the
// residual (or a); saved for backward: mean, rstd (N) in fp32. One warp per row; each lane keeps
// its PACKS packs of x in registers (the rounded residual it stored: never read back from memory,
// which the read-only path would not guarantee within the kernel that wrote it).
template <int PACKS>
__global__ void residual_layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean,
                                                  float* __restrict__ rstd, floatX* __restrict__ residual,
                                                  const floatX* __restrict__ a, const floatX* __restrict__ b,
                                                  const floatX* __restrict__ weight, const floatX* __restrict__ bias,
                                                  int N, int C, bool vec) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const int step = 32 * X128;
    size_t off = (size_t)row * C;
    Packed128<floatX> x[PACKS];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        int c = lane * X128 + k * step;
        if (c >= C) { break; }
        x[k] = load_pack(a + off + c, vec, C - c);
        if (b != NULL) {
            Packed128<floatX> pb = load_pack(b + off + c, vec, C - c);
            for (int i = 0; i < X128; i++) { x[k].v[i] = to_X(x[k].f(i) + pb.f(i)); }
            store_pack(residual + off + c, x[k], vec, C - c);
        }
        for (int i = 0; i < X128 && c + i < C; i++) { sum += x[k].f(i); }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        int c = lane * X128 + k * step;
        if (c >= C) { break; }
        for (int i = 0; i < X128 && c + i < C; i++) { float d = x[k].f(i) - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LN_EPS);
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
        int c = lane * X128 + k * step;
        if (c >= C) { break; }
        Packed128<floatX> w = load_pack(weight + c, vec, C - c), bb = load_pack(bias + c, vec, C - c), o;
        for (int i = 0; i < X128; i++) { o.v[i] = to_X((x[k].f(i) - m) * s * w.f(i) + bb.f(i)); }
        store_pack(out + off + c, o, vec, C - c);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// The packs of X128 channels each lane of a warp holds for a row of C channels (the forward keeps
// them in registers; the backward gives each a warp of a team): fails over LN_MAX_C.
static int layernorm_lane_packs(int C, const char* who) {
    if (C > LN_MAX_C) { fail("%s: %d channels, at most %d supported", who, C, LN_MAX_C); }
    return (C + 32 * X128 - 1) / (32 * X128);
}

// residual = a + b, out = LayerNorm(residual); with b NULL, a plain LayerNorm of a.
static void residual_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                       const floatX* b, const floatX* weight, const floatX* bias, int N, int C) {
    bool vec = vec_ok(C, sizeof(floatX), out, a, weight, bias) && (!b || vec_ok(C, sizeof(floatX), b, residual));
    int packs = layernorm_lane_packs(C, "residual_layernorm_forward");
    unsigned int blocks = ceil_div_u(N, 4);
#define LN_FWD(P) residual_layernorm_forward_kernel<P><<<blocks, 128>>>(out, mean, rstd, residual, a, b, weight, bias, \
                                                                         N, C, vec)
    switch (packs) {
    case 1: LN_FWD(1); break;
    case 2: LN_FWD(2); break;
    case 3: LN_FWD(3); break;
    case 4: LN_FWD(4); break;
    case 5: LN_FWD(5); break;
    case 6: LN_FWD(6); break;
    case 7: LN_FWD(7); break;
    default: LN_FWD(LN_MAX_PACKS); break;
    }
#undef LN_FWD
    cudaLaunchCheck();
}

// In: dout (N, C), inp (N, C) the LayerNorm's input, weight (C), mean, rstd (N) from the forward.
// Out: dinp (N, C) += d loss / d inp; partial (2 gridDim.x, C): block b's sums of dweight (row b)
// and dbias (row gridDim.x + b) over its rows, a contiguous range of q rows, q + 1 for b < extra
// (N = q gridDim.x + extra).
// Block: LN_BWD_WARPS warps in teams of `team` warps (a power of two, at least the row's packs of
// 32 X128 channels): warp j of a team owns pack j of every lane (channels 32 X128 j + X128 lane
// ...), so each thread holds one pack of a row and one pack of dweight and dbias sums in registers.
// The teams take rows in turn; a row's two sums go warp by warp through shared memory (added in
// warp order), one barrier per turn. VEC: rows are whole 16-byte packs (every GPT-2 shape); the
// element-by-element instance (odd C or misaligned rows) is not held to 64 registers, where it spilled.
template <bool VEC>
__global__ void __launch_bounds__(32 * LN_BWD_WARPS, VEC ? LN_BWD_MIN_BLOCKS : 1)
    layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ partial,
                              const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                              const floatX* __restrict__ weight, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int q, int extra, int C, int team) {
    const bool vec = VEC; // a template parameter: one path per instance keeps it in 64 registers
    __shared__ float sum_w[LN_MAX_C], sum_b[LN_MAX_C];
    __shared__ float row_sums[2][LN_BWD_WARPS][2]; // per warp: its part of a row's two sums, two rows in turn
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, teams = LN_BWD_WARPS / team;
    const int my_team = warp / team, first = my_team * team, c = lane * X128 + (warp % team) * 32 * X128;
    const bool mine = c < C; // this thread owns channels c .. c + X128 - 1 (those below C)
    float acc_w[X128], acc_b[X128];
    for (int i = 0; i < X128; i++) { acc_w[i] = 0.0f; acc_b[i] = 0.0f; }
    // this block's rows: q each, the first `extra` blocks one more (q, extra = N / grid, N % grid from
    // the host: the division here cost the kernel a spill at its 64-register cap)
    const int bx = blockIdx.x;
    int r0 = bx * q + min(bx, extra), r1 = r0 + q + (bx < extra ? 1 : 0), buf = 0;
#pragma unroll 1
    for (int base = r0; base < r1; base += teams, buf ^= 1) { // every thread runs every turn (the barrier)
        int row = base + my_team;
        bool live = mine && row < r1;
        float norm[X128], dnorm[X128], s = 0.0f, part_dnorm = 0.0f, part_dnorm_norm = 0.0f;
        if (live) {
            Packed128<floatX> pd = load_pack(dout + (size_t)row * C + c, vec, C - c),
                              px = load_pack(inp + (size_t)row * C + c, vec, C - c),
                              pw = load_pack(weight + c, vec, C - c);
            float m = mean[row];
            s = rstd[row];
            for (int i = 0; i < X128; i++) {
                norm[i] = (px.f(i) - m) * s;
                dnorm[i] = pd.f(i) * pw.f(i);
                acc_w[i] += pd.f(i) * norm[i];
                acc_b[i] += pd.f(i);
                if (c + i < C) {
                    part_dnorm += dnorm[i];
                    part_dnorm_norm += dnorm[i] * norm[i];
                }
            }
        }
        part_dnorm = warp_sum(part_dnorm);
        part_dnorm_norm = warp_sum(part_dnorm_norm);
        if (lane == 0) { row_sums[buf][warp][0] = part_dnorm; row_sums[buf][warp][1] = part_dnorm_norm; }
        __syncthreads(); // (the next write to this buffer is two turns on, behind the next barrier)
        if (!live) { continue; }
        float mean_dnorm = 0.0f, mean_dnorm_norm = 0.0f;
        for (int w = first; w < first + team; w++) {
            mean_dnorm += row_sums[buf][w][0];
            mean_dnorm_norm += row_sums[buf][w][1];
        }
        mean_dnorm /= C;
        mean_dnorm_norm /= C;
        floatX* dx = dinp + (size_t)row * C + c;
        Packed128<floatX> pg = load_pack(dx, vec, C - c), o;
        for (int i = 0; i < X128; i++) {
            o.v[i] = to_X(pg.f(i) + s * (dnorm[i] - mean_dnorm - norm[i] * mean_dnorm_norm));
        }
        store_pack(dx, o, vec, C - c);
    }
    // the teams' sums combined in team order, then this block's partial written
    for (int t = 0; t < teams; t++) {
        if (my_team == t && mine) {
            for (int i = 0; i < X128 && c + i < C; i++) {
                sum_w[c + i] = (t == 0 ? 0.0f : sum_w[c + i]) + acc_w[i];
                sum_b[c + i] = (t == 0 ? 0.0f : sum_b[c + i]) + acc_b[i];
            }
        }
        __syncthreads();
    }
    for (int k = threadIdx.x; k < C; k += blockDim.x) {
        partial[(size_t)blockIdx.x * C + k] = sum_w[k];
        partial[(size_t)(gridDim.x + blockIdx.x) * C + k] = sum_b[k];
    }
}

// The warps of a backward team for C channels: the smallest power of two covering the row's packs.
static int layernorm_backward_team(int C) {
    int packs = layernorm_lane_packs(C, "layernorm_backward"), team = 1;
    while (team < packs) { team *= 2; }
    return team;
}

// The backward's blocks for N rows of C channels: one full wave (LN_BWD_MIN_BLOCKS or more per SM),
// fewer when the rows do not give every team a row, at most LN_BWD_MAX_GRID. B 8, T 1024 on 132
// SMs: 264 blocks of 31 rows, where 256-row blocks were 32.
static int layernorm_backward_grid(int N, int C) {
    static unsigned int wave = 0;
    if (!wave) { wave = wave_blocks(layernorm_backward_kernel<true>, 32 * LN_BWD_WARPS, 0); }
    unsigned int teams = LN_BWD_WARPS / layernorm_backward_team(C), most = ceil_div_u(N, teams);
    unsigned int g = wave < most ? wave : most;
    if (g > LN_BWD_MAX_GRID) { g = LN_BWD_MAX_GRID; }
    return g < 1 ? 1 : (int)g;
}

// Scratch floats layernorm_backward needs for N rows of C channels (the bound, whatever the device).
static size_t layernorm_backward_partial_floats(size_t N, size_t C) {
    return 2 * (N < LN_BWD_MAX_GRID ? (N < 1 ? 1 : N) : LN_BWD_MAX_GRID) * C;
}

// dinp += d LayerNorm / d inp; dweight, dbias += their gradients: the rows in one launch, the
// blocks' partial sums of dweight and dbias added in a fixed order by a second (colsum_finish).
// partial: layernorm_backward_partial_floats(N, C) floats.
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                               int N, int C) {
    int team = layernorm_backward_team(C);
    bool vec = vec_ok(C, sizeof(floatX), dinp, dout, inp, weight);
    int blocks = layernorm_backward_grid(N, C), threads = 32 * LN_BWD_WARPS, q = N / blocks, extra = N % blocks;
    if (vec) {
        layernorm_backward_kernel<true><<<blocks, threads>>>(dinp, partial, dout, inp, weight, mean, rstd, q, extra, C,
                                                             team);
    } else {
        layernorm_backward_kernel<false><<<blocks, threads>>>(dinp, partial, dout, inp, weight, mean, rstd, q, extra,
                                                              C, team);
    }
    cudaLaunchCheck();
    colsum_finish(dweight, dbias, partial, blocks, C);
}

#endif
