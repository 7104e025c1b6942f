// attention.cuh: causal multi-head self-attention on CUDA cores, the fallback of our kernels (the
// FP32 build, and BF16 head sizes other than llmc/attention_fa2*.cuh's 32, 64, 128; attention_select.cuh
// chooses), and the causal mask every kernel of ours shares (att_visible). Flash attention: no (T, T)
// matrix anywhere.
//   qkv (B, T, 3C): row (b, t) holds q | k | v, head h in columns h*hs .. h*hs+hs-1 of each part.
//   forward:  out (B, T, C) and lse (B, NH, T) fp32, the natural log-sum-exp of each query row's
//             scaled scores (log sum over t2 <= t of exp(q_t . k_t2 / sqrt(hs))). That one float
//             per row is all backward needs to rebuild any probability exactly as the forward
//             normalised it: p = exp(score - lse). Nothing of size T x T is stored or allocated.
//   backward: dqkv (B, T, 3C), written (not accumulated), from dout (B, T, C), qkv, out and lse,
//             plus a scratch delta (B, NH, T) fp32: delta = rowsum(dout * out), the softmax
//             Jacobian's correction term (dS = P * (dP - delta)). Two passes, no atomics, so reruns
//             are bitwise identical: per query row dq (and delta), then per key row dk and dv
//             summed over the queries in ascending order. Both rebuild P from lse.
// The kernels: the online-softmax scheme, one warp per query row (forward, dq) or key row (dk, dv),
// keys (or queries) in chunks of 32, any head size up to 256.
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "cuda_common.cuh"

#define ATT_SCALAR_MAX_HS 256 // the fallback keeps hs / 32 accumulators per lane
#define ATT_SCALAR_WARPS 4

// The causal mask, in one place: key position `key` is visible to query position `query`.
__device__ __forceinline__ bool att_visible(int key, int query) { return key <= query; }

// What runs here, and the head-size check of our kernels (train_gpt2.cu calls it at start-up): any
// head size up to ATT_SCALAR_MAX_HS (the fa2 kernels' 32, 64 and 128 among them), else a one-line
// error. Where the fa2 kernels apply, attention_name (attention_select.cuh) names them instead.
static const char* attention_path(int C, int NH) {
    int hs = C / NH;
    if (hs > ATT_SCALAR_MAX_HS) { fail("attention: head size %d (C %d / NH %d) is larger than %d", hs, C, NH, ATT_SCALAR_MAX_HS); }
    return "CUDA-core flash attention (fallback)";
}

// ----------------------------------------------------------------------------
// one warp per row, online softmax over chunks of 32 keys

__device__ __forceinline__ float att_dot(const floatX* a, const floatX* b, int hs) {
    float s = 0.0f;
    for (int i = 0; i < hs; i++) { s += to_f(a[i]) * to_f(b[i]); }
    return s;
}

// acc[k] += c x[lane + 32 k] over the dims a lane owns (lane, lane + 32, ... below hs).
__device__ __forceinline__ void att_lane_axpy(float* acc, float c, const floatX* x, int lane, int hs) {
#pragma unroll
    for (int k = 0; k < ATT_SCALAR_MAX_HS / 32; k++) {
        if (lane + 32 * k < hs) { acc[k] += c * to_f(x[lane + 32 * k]); }
    }
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
            att_lane_axpy(acc, pj, base + (c0 + j) * rs + 2 * C, lane, hs);
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
            att_lane_axpy(acc, dsj, base + (c0 + j) * rs + C, lane, hs);
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

// The two entry points (attention_select.cuh, dev/cuda/attention.cu's scalar version):
// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C); dqkv (B, T, 3C), written, from dout (B, T, C)
// and the forward's qkv, out and lse, with delta: B * NH * T floats of scratch.
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

#endif
