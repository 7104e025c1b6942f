// Token + position embedding, forward and backward, 128 bits at a time. The backward is
// deterministic without atomics: dwpe sums each position over the batch in order, and dwte sums
// each token's positions in order, from buckets (positions grouped by token, larger buckets
// first) that the host builds from the tokens it already holds when the training forward starts,
// and copies to the device asynchronously from pinned memory (two slots in turn): no blocking
// copy in the step.
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <string.h>
#include "cuda_common.cuh"

// In: tokens (B*T), wte (V, C), wpe (maxT, C). Out: out (B*T, C) = wte[token] + wpe[t]. Nothing
// saved (the tokens are). One thread per pack of X128 channels.
__global__ void encoder_forward_kernel(floatX* __restrict__ out, const int* __restrict__ tokens,
                                       const floatX* __restrict__ wte, const floatX* __restrict__ wpe, int BT, int T,
                                       int C, bool vec) {
    int packs = (C + X128 - 1) / X128;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * packs) { return; }
    int bt = (int)(idx / packs), c = (int)(idx % packs) * X128;
    Packed128<floatX> e = load_pack(wte + (size_t)tokens[bt] * C + c, vec, C - c),
                      p = load_pack(wpe + (size_t)(bt % T) * C + c, vec, C - c), o;
    for (int i = 0; i < X128; i++) { o.v[i] = to_X(e.f(i) + p.f(i)); }
    store_pack(out + (size_t)bt * C + c, o, vec, C - c);
}

static void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * ((C + X128 - 1) / X128);
    encoder_forward_kernel<<<ceil_div_u(n, 256), 256>>>(out, tokens, wte, wpe, B * T, T, C,
                                                       vec_ok(C, sizeof(floatX), out, wte, wpe));
    cudaLaunchCheck();
}

// In: dout (B, T, C). Out: dwpe (T, C) += sum over b of dout[b]. One thread per pack.
__global__ void encoder_backward_wpe_kernel(floatX* __restrict__ dwpe, const floatX* __restrict__ dout, int B, int T,
                                            int C, bool vec) {
    int packs = (C + X128 - 1) / X128;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)T * packs) { return; }
    int t = (int)(idx / packs), c = (int)(idx % packs) * X128;
    size_t o = (size_t)t * C + c;
    float s[X128];
    for (int i = 0; i < X128; i++) { s[i] = 0.0f; }
    for (int b = 0; b < B; b++) {
        Packed128<floatX> d = load_pack(dout + (size_t)b * T * C + o, vec, C - c);
        for (int i = 0; i < X128; i++) { s[i] += d.f(i); }
    }
    Packed128<floatX> w = load_pack(dwpe + o, vec, C - c);
    for (int i = 0; i < X128; i++) { w.v[i] = to_X(w.f(i) + s[i]); }
    store_pack(dwpe + o, w, vec, C - c);
}

// Bucket k holds positions order[start[k] .. start[k+1]) of token bucket_token[k], ascending.
// Out: dwte[token] += sum of dout[pos] over the bucket. Grid (buckets, packs / blockDim), buckets
// with more positions first; one thread per pack, summing its bucket's positions in order.
__global__ void encoder_backward_wte_kernel(floatX* __restrict__ dwte, const floatX* __restrict__ dout,
                                            const int* __restrict__ order, const int* __restrict__ start,
                                            const int* __restrict__ bucket_token, int C, bool vec) {
    int k = blockIdx.x, c = (blockIdx.y * blockDim.x + threadIdx.x) * X128;
    if (c >= C) { return; }
    float s[X128];
    for (int i = 0; i < X128; i++) { s[i] = 0.0f; }
    for (int j = start[k]; j < start[k + 1]; j++) {
        Packed128<floatX> d = load_pack(dout + (size_t)order[j] * C + c, vec, C - c);
        for (int i = 0; i < X128; i++) { s[i] += d.f(i); }
    }
    floatX* w = dwte + (size_t)bucket_token[k] * C + c;
    Packed128<floatX> p = load_pack(w, vec, C - c);
    for (int i = 0; i < X128; i++) { p.v[i] = to_X(p.f(i) + s[i]); }
    store_pack(w, p, vec, C - c);
}

// The buckets for encoder_backward: built on the host, copied asynchronously on stream 0.
typedef struct {
    int* host[2];          // pinned: order (BT), start (BT + 1), bucket_token (BT); two slots in turn
    cudaEvent_t copied[2]; // a slot's copy finished (the host may refill it)
    int* device;           // the same three arrays
    int* count;            // per token id, scratch (V + 1)
    int* sizes;            // per bucket {positions, token}, scratch (2 BT)
    int BT, V, slot, buckets, prepared_BT;
} EncoderBuckets;

static void encoder_buckets_init(EncoderBuckets* e, int BT, int V) {
    e->BT = BT;
    e->V = V;
    e->slot = 0;
    e->buckets = 0;
    e->prepared_BT = -1;
    for (int s = 0; s < 2; s++) {
        cudaCheck(cudaMallocHost((void**)&e->host[s], (size_t)(3 * BT + 1) * sizeof(int)));
        cudaCheck(cudaEventCreateWithFlags(&e->copied[s], cudaEventDisableTiming));
    }
    e->count = (int*)malloc_check((size_t)(V + 1) * sizeof(int));
    e->sizes = (int*)malloc_check((size_t)2 * BT * sizeof(int));
    cudaCheck(cudaMalloc((void**)&e->device, (size_t)(3 * BT + 1) * sizeof(int)));
}

static void encoder_buckets_free(EncoderBuckets* e) {
    for (int s = 0; s < 2; s++) {
        cudaCheck(cudaFreeHost(e->host[s]));
        cudaCheck(cudaEventDestroy(e->copied[s]));
    }
    free(e->count);
    free(e->sizes);
    cudaCheck(cudaFree(e->device));
}

// Bucket order: more positions first (the longest serial sums start first; a GPU runs blocks
// roughly in grid order), ties by token id, so that the order is a function of the tokens alone.
static int encoder_bucket_cmp(const void* pa, const void* pb) {
    const int *a = (const int*)pa, *b = (const int*)pb; // {positions, token}
    if (a[0] != b[0]) { return a[0] > b[0] ? -1 : 1; }
    return (a[1] > b[1]) - (a[1] < b[1]);
}

// Groups the positions of tokens (BT of them, host) by token, buckets with more positions first,
// and queues their copy to the device on stream 0, ahead of the backward that reads them.
static void encoder_buckets_prepare(EncoderBuckets* e, const int* tokens, int BT) {
    if (BT > e->BT) { fail("encoder buckets for %d tokens, built for %d", BT, e->BT); }
    int s = e->slot;
    e->slot ^= 1;
    host_wait_event(e->copied[s], "the token buckets' copy of two steps ago"); // with the program's deadline
    int *order = e->host[s], *start = order + BT, *bucket_token = start + BT + 1;
    memset(e->count, 0, (size_t)(e->V + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) { e->count[tokens[i] + 1]++; }
    int buckets = 0;
    for (int v = 0; v < e->V; v++) {
        if (e->count[v + 1] > 0) { e->sizes[2 * buckets] = e->count[v + 1]; e->sizes[2 * buckets + 1] = v; buckets++; }
    }
    qsort(e->sizes, (size_t)buckets, 2 * sizeof(int), encoder_bucket_cmp);
    memset(e->count, 0, (size_t)(e->V + 1) * sizeof(int)); // count[v]: the next slot of token v
    for (int k = 0, at = 0; k < buckets; at += e->sizes[2 * k], k++) {
        start[k] = at;
        bucket_token[k] = e->sizes[2 * k + 1];
        e->count[bucket_token[k]] = at;
    }
    start[buckets] = BT;
    for (int i = 0; i < BT; i++) { order[e->count[tokens[i]]++] = i; } // ascending within a token
    cudaCheck(cudaMemcpyAsync(e->device, order, (size_t)(3 * BT + 1) * sizeof(int), cudaMemcpyHostToDevice, 0));
    cudaCheck(cudaEventRecord(e->copied[s], 0));
    e->buckets = buckets;
    e->prepared_BT = BT;
}

// dwte, dwpe += encoder backward of dout (B*T, C), for the tokens of the last
// encoder_buckets_prepare (or, when tokens is not NULL, for these host tokens, prepared here).
static void encoder_backward(floatX* dwte, floatX* dwpe, EncoderBuckets* e, const floatX* dout, const int* tokens,
                             int B, int T, int C) {
    int BT = B * T;
    if (tokens) { encoder_buckets_prepare(e, tokens, BT); }
    if (e->prepared_BT != BT) { fail("encoder_backward of %d tokens, buckets prepared for %d", BT, e->prepared_BT); }
    int* d_order = e->device;
    int* d_start = d_order + BT;
    int* d_token = d_start + BT + 1;
    bool vec = vec_ok(C, sizeof(floatX), dwte, dwpe, dout);
    int packs = (C + X128 - 1) / X128;
    // whole warps, each lane a pack (C 768 in BF16: 96 threads, no idle lane), up to 256 per block
    unsigned int threads = packs > 256 ? 256 : 32 * ceil_div_u(packs, 32);
    dim3 grid(e->buckets, ceil_div_u(packs, threads));
    encoder_backward_wte_kernel<<<grid, threads>>>(dwte, dout, d_order, d_start, d_token, C, vec);
    cudaLaunchCheck();
    encoder_backward_wpe_kernel<<<ceil_div_u((size_t)T * packs, 256), 256>>>(dwpe, dout, B, T, C, vec);
    cudaLaunchCheck();
}

#endif
