// LayerNorm over channels, fused with the residual add that precedes it, and its backward, each
// one kernel and one pass over HBM: one warp per row, 128-bit loads and stores (Packed128) where
// the rows are whole 16-byte packs, statistics in fp32 (two passes over the row in registers/L1,
// as the CPU trainer); the backward accumulates the weight and bias gradients in the same kernel
// (per-lane registers, warps combined in a fixed order, block partials added in block order by
// the last block): deterministic, no atomics on the values.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LN_EPS 1e-5f
#define LN_WARPS 8
#define LN_BWD_ROWS 256                     // rows per backward block (one partial per block)
#define LN_MAX_C 2048                       // the backward keeps C / 32 channels per lane in registers
#define LN_MAX_PACKS (LN_MAX_C / (32 * X128))

// In: a, b (N, C) (b NULL: no residual), weight, bias (C). Out: residual = a + b (N, C, rounded to
// floatX; skipped when b is NULL), out = (x - mean) * rstd * weight + bias (N, C) for x the
// residual (or a); saved for backward: mean, rstd (N) in fp32. One warp per row.
__global__ void residual_layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean,
                                                  float* __restrict__ rstd, floatX* __restrict__ residual,
                                                  const floatX* __restrict__ a, const floatX* __restrict__ b,
                                                  const floatX* __restrict__ weight, const floatX* __restrict__ bias,
                                                  int N, int C, bool vec) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const int step = 32 * X128;
    const floatX* x = a + (size_t)row * C;
    if (b != NULL) {
        const floatX* xb = b + (size_t)row * C;
        floatX* r = residual + (size_t)row * C;
        for (int c = lane * X128; c < C; c += step) {
            Packed128<floatX> pa = load_pack(x + c, vec, C - c), pb = load_pack(xb + c, vec, C - c), pr;
            for (int i = 0; i < X128; i++) { pr.v[i] = to_X(pa.f(i) + pb.f(i)); }
            store_pack(r + c, pr, vec, C - c);
        }
        x = r; // each lane reads back only the packs it wrote
    }
    float sum = 0.0f;
    for (int c = lane * X128; c < C; c += step) {
        Packed128<floatX> p = load_pack(x + c, vec, C - c);
        for (int i = 0; i < X128 && c + i < C; i++) { sum += p.f(i); }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * X128; c < C; c += step) {
        Packed128<floatX> p = load_pack(x + c, vec, C - c);
        for (int i = 0; i < X128 && c + i < C; i++) { float d = p.f(i) - m; var += d * d; }
    }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LN_EPS);
    floatX* y = out + (size_t)row * C;
    for (int c = lane * X128; c < C; c += step) {
        Packed128<floatX> p = load_pack(x + c, vec, C - c), w = load_pack(weight + c, vec, C - c),
                          bb = load_pack(bias + c, vec, C - c), o;
        for (int i = 0; i < X128; i++) { o.v[i] = to_X((p.f(i) - m) * s * w.f(i) + bb.f(i)); }
        store_pack(y + c, o, vec, C - c);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// residual = a + b, out = LayerNorm(residual); with b NULL, a plain LayerNorm of a.
static void residual_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                       const floatX* b, const floatX* weight, const floatX* bias, int N, int C) {
    bool vec = vec_ok(C, sizeof(floatX), out, a, weight, bias) && (!b || vec_ok(C, sizeof(floatX), b, residual));
    residual_layernorm_forward_kernel<<<ceil_div_u(N, 4), 128>>>(out, mean, rstd, residual, a, b, weight, bias, N, C,
                                                                vec);
    cudaLaunchCheck();
}

// In: dout (N, C), inp (N, C) the LayerNorm's input, weight (C), mean, rstd (N) from the forward.
// Out: dinp (N, C) += d loss / d inp; dweight, dbias (C) += their gradients. Scratch: partial
// (2 * blocks, C) floats. Block: LN_WARPS warps over LN_BWD_ROWS rows, one warp per row at a time;
// each lane keeps its channels' dweight and dbias sums in registers: PACKS = ceil(C / (32 X128))
// packs of them (a template parameter, so that the registers are only as many as C needs).
template <int PACKS>
__global__ void __launch_bounds__(32 * LN_WARPS)
    layernorm_backward_kernel(floatX* __restrict__ dinp, floatX* __restrict__ dweight, floatX* __restrict__ dbias,
                              float* __restrict__ partial, unsigned int* __restrict__ counter,
                              const floatX* __restrict__ dout, const floatX* __restrict__ inp,
                              const floatX* __restrict__ weight, const float* __restrict__ mean,
                              const float* __restrict__ rstd, int N, int C, bool vec) {
    __shared__ float sum_w[LN_MAX_C], sum_b[LN_MAX_C];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, step = 32 * X128;
    float acc_w[PACKS][X128], acc_b[PACKS][X128];
#pragma unroll
    for (int k = 0; k < PACKS; k++) {
#pragma unroll
        for (int i = 0; i < X128; i++) { acc_w[k][i] = 0.0f; acc_b[k][i] = 0.0f; }
    }
    int r0 = blockIdx.x * LN_BWD_ROWS, r1 = min(r0 + LN_BWD_ROWS, N);
    for (int row = r0 + warp; row < r1; row += LN_WARPS) {
        const floatX* dy = dout + (size_t)row * C;
        const floatX* x = inp + (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float mean_dnorm = 0.0f, mean_dnorm_norm = 0.0f;
#pragma unroll
        for (int k = 0; k < PACKS; k++) {
            int c = lane * X128 + k * step;
            if (c >= C) { break; }
            Packed128<floatX> pd = load_pack(dy + c, vec, C - c), px = load_pack(x + c, vec, C - c),
                              pw = load_pack(weight + c, vec, C - c);
            for (int i = 0; i < X128 && c + i < C; i++) {
                float norm = (px.f(i) - m) * s, dnorm = pd.f(i) * pw.f(i);
                mean_dnorm += dnorm;
                mean_dnorm_norm += dnorm * norm;
            }
        }
        mean_dnorm = warp_sum(mean_dnorm) / C;
        mean_dnorm_norm = warp_sum(mean_dnorm_norm) / C;
        floatX* dx = dinp + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < PACKS; k++) {
            int c = lane * X128 + k * step;
            if (c >= C) { break; }
            Packed128<floatX> pd = load_pack(dy + c, vec, C - c), px = load_pack(x + c, vec, C - c),
                              pw = load_pack(weight + c, vec, C - c), pg = load_pack(dx + c, vec, C - c), o;
#pragma unroll
            for (int i = 0; i < X128; i++) {
                float norm = (px.f(i) - m) * s, dnorm = pd.f(i) * pw.f(i);
                o.v[i] = to_X(pg.f(i) + s * (dnorm - mean_dnorm - norm * mean_dnorm_norm));
                acc_w[k][i] += pd.f(i) * norm;
                acc_b[k][i] += pd.f(i);
            }
            store_pack(dx + c, o, vec, C - c);
        }
    }
    // the warps' sums combined in warp order, then this block's partial written
    for (int w = 0; w < LN_WARPS; w++) {
        if (warp == w) {
#pragma unroll
            for (int k = 0; k < PACKS; k++) {
                int c = lane * X128 + k * step;
                for (int i = 0; i < X128 && c + i < C; i++) {
                    sum_w[c + i] = (w == 0 ? 0.0f : sum_w[c + i]) + acc_w[k][i];
                    sum_b[c + i] = (w == 0 ? 0.0f : sum_b[c + i]) + acc_b[k][i];
                }
            }
        }
        __syncthreads();
    }
    int blocks = gridDim.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        partial[(size_t)blockIdx.x * C + c] = sum_w[c];
        partial[(size_t)(blocks + blockIdx.x) * C + c] = sum_b[c];
    }
    if (!last_block_done(counter, blocks)) { return; }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < blocks; k++) {
            tw += partial[(size_t)k * C + c];
            tb += partial[(size_t)(blocks + k) * C + c];
        }
        dweight[c] = to_X(to_f(dweight[c]) + tw);
        dbias[c] = to_X(to_f(dbias[c]) + tb);
    }
}

static int layernorm_backward_blocks(int N) { return (N + LN_BWD_ROWS - 1) / LN_BWD_ROWS; }

// dinp += d LayerNorm / d inp; dweight, dbias += their gradients, one launch.
// partial: 2 * layernorm_backward_blocks(N) * C floats (= 2 * colsum_chunks(N) * C).
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                               int N, int C) {
    if (C > LN_MAX_C) { fail("layernorm_backward: %d channels, at most %d supported", C, LN_MAX_C); }
    bool vec = vec_ok(C, sizeof(floatX), dinp, dout, inp, weight);
    unsigned int* counter = reduction_counters() + MAX_COUNTERS - 1;
    int packs = (C + 32 * X128 - 1) / (32 * X128);
    unsigned int blocks = layernorm_backward_blocks(N), threads = 32 * LN_WARPS;
#define LN_BWD(P) layernorm_backward_kernel<P><<<blocks, threads>>>(dinp, dweight, dbias, partial, counter, dout, inp, \
                                                                      weight, mean, rstd, N, C, vec)
    switch (packs) {
    case 1: LN_BWD(1); break;
    case 2: LN_BWD(2); break;
    case 3: LN_BWD(3); break;
    case 4: LN_BWD(4); break;
    case 5: LN_BWD(5); break;
    case 6: LN_BWD(6); break;
    case 7: LN_BWD(7); break;
    default: LN_BWD(LN_MAX_PACKS); break;
    }
#undef LN_BWD
    cudaLaunchCheck();
}

#endif
