// LayerNorm over channels, fused with the residual add that precedes it, and its backward, each
// one kernel and one pass over HBM, 128-bit loads and stores (Packed128) where the rows are whole
// 16-byte packs, statistics in fp32 (two passes over the row held in registers, as the CPU
// trainer). Forward: one warp per row. Backward: teams of warps per row (each thread one pack of
// the row), the weight and bias gradients accumulated in the same kernel (per-thread registers,
// teams combined in a fixed order, block partials added in block order by the last block):
// deterministic, no atomics on the values.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define LN_BWD_WARPS 16                     // warps per backward block
#define LN_BWD_MIN_BLOCKS 2                 // backward blocks resident per SM asked of ptxas (<= 64 registers)
#define LN_BWD_ROWS 256                     // rows per backward block (one partial per block)
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
// Out: dinp (N, C) += d loss / d inp; dweight, dbias (C) += their gradients. Scratch: partial
// (2 * blocks, C) floats. Block: LN_BWD_WARPS warps over LN_BWD_ROWS rows, in teams of `team`
// warps (a power of two, at least the row's packs of 32 X128 channels): warp j of a team owns
// pack j of every lane (channels 32 X128 j + X128 lane ...), so each thread holds one pack of a
// row and one pack of dweight and dbias sums in registers. The teams take rows in turn; a row's
// two sums go warp by warp through shared memory (added in warp order), one barrier per turn.
// VEC: rows are whole 16-byte packs.
template <bool VEC>
__global__ void __launch_bounds__(32 * LN_BWD_WARPS, LN_BWD_MIN_BLOCKS)
    layernorm_backward_kernel(floatX* __restrict__ dinp, floatX* __restrict__ dweight, floatX* __restrict__ dbias,
                              float* __restrict__ partial, unsigned int* __restrict__ counter,
                              const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                              const floatX* __restrict__ weight, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int N, int C, int team) {
    const bool vec = VEC; // a template parameter: one path per instance keeps it in 64 registers
    __shared__ float sum_w[LN_MAX_C], sum_b[LN_MAX_C];
    __shared__ float row_sums[2][LN_BWD_WARPS][2]; // per warp: its part of a row's two sums, two rows in turn
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, teams = LN_BWD_WARPS / team;
    const int my_team = warp / team, first = my_team * team, c = lane * X128 + (warp % team) * 32 * X128;
    const bool mine = c < C; // this thread owns channels c .. c + X128 - 1 (those below C)
    float acc_w[X128], acc_b[X128];
    for (int i = 0; i < X128; i++) { acc_w[i] = 0.0f; acc_b[i] = 0.0f; }
    int r0 = blockIdx.x * LN_BWD_ROWS, r1 = min(r0 + LN_BWD_ROWS, N), buf = 0;
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
    int blocks = gridDim.x;
    for (int k = threadIdx.x; k < C; k += blockDim.x) {
        partial[(size_t)blockIdx.x * C + k] = sum_w[k];
        partial[(size_t)(blocks + blockIdx.x) * C + k] = sum_b[k];
    }
    if (!last_block_done(counter, blocks)) { return; }
    for (int k = threadIdx.x; k < C; k += blockDim.x) {
        float tw = 0.0f, tb = 0.0f;
        for (int j = 0; j < blocks; j++) {
            tw += partial[(size_t)j * C + k];
            tb += partial[(size_t)(blocks + j) * C + k];
        }
        dweight[k] = to_X(to_f(dweight[k]) + tw);
        dbias[k] = to_X(to_f(dbias[k]) + tb);
    }
}

static int layernorm_backward_blocks(int N) { return (N + LN_BWD_ROWS - 1) / LN_BWD_ROWS; }

// The warps of a backward team for C channels: the smallest power of two covering the row's packs.
static int layernorm_backward_team(int C) {
    int packs = layernorm_lane_packs(C, "layernorm_backward"), team = 1;
    while (team < packs) { team *= 2; }
    return team;
}

// dinp += d LayerNorm / d inp; dweight, dbias += their gradients, one launch.
// partial: 2 * layernorm_backward_blocks(N) * C floats (= 2 * colsum_chunks(N) * C).
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                               int N, int C) {
    int team = layernorm_backward_team(C);
    bool vec = vec_ok(C, sizeof(floatX), dinp, dout, inp, weight);
    unsigned int* counter = reduction_counters() + MAX_COUNTERS - 1;
    unsigned int blocks = layernorm_backward_blocks(N), threads = 32 * LN_BWD_WARPS;
    if (vec) {
        layernorm_backward_kernel<true><<<blocks, threads>>>(dinp, dweight, dbias, partial, counter, dout, inp, weight,
                                                             mean, rstd, N, C, team);
    } else {
        layernorm_backward_kernel<false><<<blocks, threads>>>(dinp, dweight, dbias, partial, counter, dout, inp, weight,
                                                              mean, rstd, N, C, team);
    }
    cudaLaunchCheck();
}

#endif
