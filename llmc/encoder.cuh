// Token + position embedding, forward and backward. The backward is deterministic without
// atomics: dwpe sums each position over the batch in order, and dwte sums each token's
// positions in order, from buckets (positions grouped by token) that the host builds from the
// tokens it already holds.
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "cuda_common.cuh"

// out (B*T, C) = wte[token] + wpe[t]
__global__ void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                       int BT, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C) { return; }
    int bt = (int)(i / C), c = (int)(i % C);
    out[i] = to_X(to_f(wte[(size_t)tokens[bt] * C + c]) + to_f(wpe[(size_t)(bt % T) * C + c]));
}

static void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<ceil_div_u(n, 256), 256>>>(out, tokens, wte, wpe, B * T, T, C);
    cudaLaunchCheck();
}

// dwpe[t][c] += sum over b of dout[b][t][c]
__global__ void encoder_backward_wpe_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) { return; }
    float s = 0.0f;
    for (int b = 0; b < B; b++) { s += to_f(dout[(size_t)b * T * C + i]); }
    dwpe[i] = to_X(to_f(dwpe[i]) + s);
}

// Bucket k holds positions order[start[k] .. start[k+1]) of token bucket_token[k], ascending.
// dwte[token][c] += sum of dout[pos][c] over the bucket. Grid (buckets, C / blockDim).
__global__ void encoder_backward_wte_kernel(floatX* dwte, const floatX* dout, const int* order, const int* start,
                                            const int* bucket_token, int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float s = 0.0f;
    for (int j = start[k]; j < start[k + 1]; j++) { s += to_f(dout[(size_t)order[j] * C + c]); }
    size_t o = (size_t)bucket_token[k] * C + c;
    dwte[o] = to_X(to_f(dwte[o]) + s);
}

// Host-side bucket building and device buffers for encoder_backward.
typedef struct {
    int* host;   // order (BT), start (BT + 1), bucket_token (BT)
    int* device; // the same three arrays
    int* count;  // per token id, scratch (V)
    int BT, V;
} EncoderBuckets;

static void encoder_buckets_init(EncoderBuckets* e, int BT, int V) {
    e->BT = BT;
    e->V = V;
    e->host = (int*)malloc_check((size_t)(3 * BT + 1) * sizeof(int));
    e->count = (int*)malloc_check((size_t)(V + 1) * sizeof(int));
    cudaCheck(cudaMalloc((void**)&e->device, (size_t)(3 * BT + 1) * sizeof(int)));
}

static void encoder_buckets_free(EncoderBuckets* e) {
    free(e->host);
    free(e->count);
    cudaCheck(cudaFree(e->device));
}

// dwte, dwpe += encoder backward of dout (B*T, C) for the host tokens (B*T).
static void encoder_backward(floatX* dwte, floatX* dwpe, EncoderBuckets* e, const floatX* dout, const int* tokens,
                             int B, int T, int C) {
    int BT = B * T;
    int *order = e->host, *start = order + BT, *bucket_token = start + BT + 1;
    memset(e->count, 0, (size_t)(e->V + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) { e->count[tokens[i] + 1]++; }
    for (int v = 0; v < e->V; v++) { e->count[v + 1] += e->count[v]; } // count[v]: first slot of token v
    int buckets = 0;
    for (int v = 0; v < e->V; v++) {
        if (e->count[v + 1] > e->count[v]) { start[buckets] = e->count[v]; bucket_token[buckets] = v; buckets++; }
    }
    start[buckets] = BT;
    for (int i = 0; i < BT; i++) { order[e->count[tokens[i]]++] = i; } // ascending within a token
    cudaCheck(cudaMemcpy(e->device, e->host, (size_t)(3 * BT + 1) * sizeof(int), cudaMemcpyHostToDevice));
    int* d_order = e->device;
    int* d_start = d_order + BT;
    int* d_token = d_start + BT + 1;
    dim3 grid(buckets, ceil_div_u(C, 128));
    encoder_backward_wte_kernel<<<grid, 128>>>(dwte, dout, d_order, d_start, d_token, C);
    cudaLaunchCheck();
    encoder_backward_wpe_kernel<<<ceil_div_u((size_t)T * C, 256), 256>>>(dwpe, dout, B, T, C);
    cudaLaunchCheck();
}

#endif
