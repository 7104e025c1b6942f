// LayerNorm over channels, fused with the residual add that precedes it, and its backward.
// One warp per row; statistics in fp32 (two passes, as the CPU trainer); the parameter
// gradients go through the deterministic column sums of cuda_common.cuh.
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"

#define LN_EPS 1e-5f

// x = a + b (written to residual, rounded to floatX) or x = a when b is NULL; then
// out = LayerNorm(x) * weight + bias, with the row's mean and 1/std saved.
__global__ void residual_layernorm_forward_kernel(floatX* out, float* mean, float* rstd, floatX* residual,
                                                  const floatX* a, const floatX* b, const floatX* weight,
                                                  const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* xa = a + (size_t)row * C;
    const floatX* x = xa;
    if (b != NULL) {
        const floatX* xb = b + (size_t)row * C;
        floatX* r = residual + (size_t)row * C;
        for (int c = lane; c < C; c += 32) { r[c] = to_X(to_f(xa[c]) + to_f(xb[c])); }
        x = r; // each lane reads back only the elements it wrote
    }
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) { sum += to_f(x[c]); }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) { float d = to_f(x[c]) - m; var += d * d; }
    float s = 1.0f / sqrtf(warp_sum(var) / C + LN_EPS);
    floatX* y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) { y[c] = to_X((to_f(x[c]) - m) * s * to_f(weight[c]) + to_f(bias[c])); }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// residual = a + b, out = LayerNorm(residual); with b NULL, a plain LayerNorm of a.
static void residual_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                       const floatX* b, const floatX* weight, const floatX* bias, int N, int C) {
    residual_layernorm_forward_kernel<<<ceil_div_u(N, 4), 128>>>(out, mean, rstd, residual, a, b, weight, bias, N, C);
    cudaLaunchCheck();
}

// dinp += LayerNorm backward of dout, row by row.
__global__ void layernorm_backward_input_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                const floatX* weight, const float* mean, const float* rstd,
                                                int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) { return; }
    const floatX* dy = dout + (size_t)row * C;
    const floatX* x = inp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float mean_dnorm = 0.0f, mean_dnorm_norm = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_f(x[c]) - m) * s;
        float dnorm = to_f(dy[c]) * to_f(weight[c]);
        mean_dnorm += dnorm;
        mean_dnorm_norm += dnorm * norm;
    }
    mean_dnorm = warp_sum(mean_dnorm) / C;
    mean_dnorm_norm = warp_sum(mean_dnorm_norm) / C;
    floatX* dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (to_f(x[c]) - m) * s;
        float dnorm = to_f(dy[c]) * to_f(weight[c]);
        dx[c] = to_X(to_f(dx[c]) + s * (dnorm - mean_dnorm - norm * mean_dnorm_norm));
    }
}

// partial[chunk][c] = sum of dout * norm (dweight), partial[chunks + chunk][c] = sum of dout (dbias).
__global__ void layernorm_param_partial_kernel(float* partial, const floatX* dout, const floatX* inp,
                                               const float* mean, const float* rstd, int N, int C) {
    __shared__ float tile[COLSUM_THREADS_Y][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n0 = blockIdx.y * COLSUM_ROWS, n1 = min(n0 + COLSUM_ROWS, N);
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += COLSUM_THREADS_Y) {
            float dy = to_f(dout[(size_t)n * C + c]);
            sw += dy * (to_f(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
            sb += dy;
        }
    }
    sw = colsum_combine(sw, tile);
    __syncthreads();
    sb = colsum_combine(sb, tile);
    if (threadIdx.y == 0 && c < C) {
        partial[(size_t)blockIdx.y * C + c] = sw;
        partial[(size_t)(gridDim.y + blockIdx.y) * C + c] = sb;
    }
}

// dinp += d LayerNorm / d inp; dweight, dbias += their gradients. partial: 2 * colsum_chunks(N) * C floats.
static void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* partial, const floatX* dout,
                               const floatX* inp, const floatX* weight, const float* mean, const float* rstd,
                               int N, int C) {
    layernorm_backward_input_kernel<<<ceil_div_u(N, 4), 128>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    cudaLaunchCheck();
    int chunks = colsum_chunks(N);
    dim3 grid(ceil_div_u(C, 32), chunks);
    layernorm_param_partial_kernel<<<grid, dim3(32, COLSUM_THREADS_Y)>>>(partial, dout, inp, mean, rstd, N, C);
    cudaLaunchCheck();
    column_sum_finish(dweight, partial, chunks, C);
    column_sum_finish(dbias, partial + (size_t)chunks * C, chunks, C);
}

#endif
