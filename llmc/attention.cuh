// Causal multi-head self-attention, our own kernels: one warp per (batch, head, query row).
// qkv (B, T, 3C) holds q, k, v; att (B, NH, T, T) keeps the softmax probabilities of the
// causal half (key t2 <= query t) for backward; out (B, T, C). The backward is two kernels
// without atomics: per query row, dpre = d(pre-softmax scores) and dq; per key row, dk and dv
// summed over the query rows that see it, in ascending order.
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "cuda_common.cuh"

#define ATT_WARPS 4

__device__ __forceinline__ float dot_hs(const floatX* a, const floatX* b, int hs) {
    float s = 0.0f;
    for (int i = 0; i < hs; i++) { s += to_f(a[i]) * to_f(b[i]); }
    return s;
}

__global__ void attention_forward_kernel(floatX* out, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t = row % T, h = (row / T) % NH, b = row / (T * NH);
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * 3 * C;
    const floatX* q = base + (size_t)t * 3 * C + h * hs;
    floatX* a = att + (size_t)row * T;
    // online softmax statistics over this lane's keys, then merged over the warp
    float m = -INFINITY, sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float s = dot_hs(q, base + (size_t)t2 * 3 * C + C + h * hs, hs) * scale;
        if (s > m) { sum = sum * expf(m - s) + 1.0f; m = s; }
        else { sum += expf(s - m); }
    }
    float maxv = warp_max(m);
    float total = warp_sum(m == -INFINITY ? 0.0f : sum * expf(m - maxv));
    float inv = 1.0f / total;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float s = dot_hs(q, base + (size_t)t2 * 3 * C + C + h * hs, hs) * scale;
        a[t2] = to_X(expf(s - maxv) * inv);
    }
    __syncwarp();
    floatX* o = out + ((size_t)b * T + t) * C + h * hs;
    for (int i = lane; i < hs; i += 32) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { acc += to_f(a[t2]) * to_f(base[(size_t)t2 * 3 * C + 2 * C + h * hs + i]); }
        o[i] = to_X(acc);
    }
}

static void attention_forward(floatX* out, floatX* att, const floatX* qkv, int B, int T, int C, int NH) {
    attention_forward_kernel<<<ceil_div_u((size_t)B * NH * T, ATT_WARPS), 32 * ATT_WARPS>>>(out, att, qkv, B, T, C, NH);
    cudaLaunchCheck();
}

// Per query row t: dpre[t2] = att[t2] * (dy . v[t2] - sum_j att[j] dy . v[j]) * scale (t2 <= t),
// then dq = sum over t2 of dpre[t2] k[t2].
__global__ void attention_backward_query_kernel(floatX* dqkv, float* dpre, const floatX* dout, const floatX* qkv,
                                                const floatX* att, int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t = row % T, h = (row / T) % NH, b = row / (T * NH);
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * 3 * C;
    const floatX* dy = dout + ((size_t)b * T + t) * C + h * hs;
    const floatX* a = att + (size_t)row * T;
    float* dp = dpre + (size_t)row * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float d = dot_hs(dy, base + (size_t)t2 * 3 * C + 2 * C + h * hs, hs);
        dp[t2] = d;
        dot += to_f(a[t2]) * d;
    }
    dot = warp_sum(dot);
    for (int t2 = lane; t2 <= t; t2 += 32) { dp[t2] = to_f(a[t2]) * (dp[t2] - dot) * scale; }
    __syncwarp();
    floatX* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
    for (int i = lane; i < hs; i += 32) {
        float acc = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { acc += dp[t2] * to_f(base[(size_t)t2 * 3 * C + C + h * hs + i]); }
        dq[i] = to_X(acc);
    }
}

// Per key row t2: dk = sum over t >= t2 of dpre[t][t2] q[t], dv = sum of att[t][t2] dy[t].
__global__ void attention_backward_key_kernel(floatX* dqkv, const float* dpre, const floatX* dout,
                                              const floatX* qkv, const floatX* att, int B, int T, int C, int NH) {
    int row = blockIdx.x * ATT_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) { return; }
    int t2 = row % T, h = (row / T) % NH, b = row / (T * NH);
    int hs = C / NH;
    const floatX* base = qkv + (size_t)b * T * 3 * C;
    size_t head_rows = (size_t)(row - t2) * T; // (b, h, 0, 0) in att and dpre
    floatX* dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
    for (int i = lane; i < hs; i += 32) {
        float ak = 0.0f, av = 0.0f;
        for (int t = t2; t < T; t++) {
            size_t at = head_rows + (size_t)t * T + t2;
            ak += dpre[at] * to_f(base[(size_t)t * 3 * C + h * hs + i]);
            av += to_f(att[at]) * to_f(dout[((size_t)b * T + t) * C + h * hs + i]);
        }
        dk[i] = to_X(ak);
        dk[C + i] = to_X(av);
    }
}

// dqkv (B, T, 3C) = attention backward (written). dpre: B * NH * T * T floats of scratch.
static void attention_backward(floatX* dqkv, float* dpre, const floatX* dout, const floatX* qkv, const floatX* att,
                               int B, int T, int C, int NH) {
    unsigned int blocks = ceil_div_u((size_t)B * NH * T, ATT_WARPS);
    attention_backward_query_kernel<<<blocks, 32 * ATT_WARPS>>>(dqkv, dpre, dout, qkv, att, B, T, C, NH);
    cudaLaunchCheck();
    attention_backward_key_kernel<<<blocks, 32 * ATT_WARPS>>>(dqkv, dpre, dout, qkv, att, B, T, C, NH);
    cudaLaunchCheck();
}

#endif
