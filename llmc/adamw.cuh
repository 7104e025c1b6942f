// AdamW, one tensor at a time (adamw_update) or every tensor (or ZeRO shard slice) of a step in
// one launch (AdamWMulti), and the global gradient norm in one launch. AdamW follows the CPU
// trainer's formula step for step; it updates the fp32 master copy when there is one (else the
// floatX parameter read as float) and writes the floatX parameter with stochastic rounding,
// seeded per step and tensor so that runs repeat bit for bit. 128-bit loads and stores where a
// block's data is 16-byte aligned. The norm is a sum of squares over a fixed grid, the block sums
// added in order by the last block: deterministic.
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "cuda_common.cuh"

// K values of T as floats from p: K * sizeof(T) / 16 128-bit loads when vec, else one by one
// (count of them, the rest 0).
template <int K, class T>
__device__ __forceinline__ void load_floats(float* out, const T* __restrict__ p, bool vec, int count) {
    constexpr int P = Packed128<T>::N;
    static_assert(K % P == 0, "whole packs");
    for (int j = 0; j < K; j += P) {
        Packed128<T> x = load_pack(p + j, vec, count - j);
        for (int i = 0; i < P; i++) { out[j + i] = x.f(i); }
    }
}

template <int K>
__device__ __forceinline__ void store_floats(float* __restrict__ p, const float* v, bool vec, int count) {
    for (int j = 0; j < K; j += 4) {
        Packed128<float> x;
        for (int i = 0; i < 4; i++) { x.v[i] = v[j + i]; }
        store_pack(p + j, x, vec, count - j);
    }
}

// In: grads (n; G = floatX, or float for a rank's reduced fp32 shard) scaled by grad_scale.
// In/out: m, v (n) fp32 moments; master (n) fp32 weights or NULL; params (n) floatX, rewritten
// with stochastic rounding (bits from element index + index_offset and seed). X128 elements
// per call, vec: all six pointers 16-byte aligned and count == X128.
template <class G>
__device__ __forceinline__ void adamw_pack(floatX* __restrict__ params, float* __restrict__ master,
                                           const G* __restrict__ grads, float* __restrict__ m, float* __restrict__ v,
                                           int count, bool vec, float lr, float beta1, float beta2, float eps,
                                           float weight_decay, float grad_scale, float bias1, float bias2,
                                           uint32_t seed, size_t index) {
    float g[X128], mm[X128], vv[X128], p[X128];
    load_floats<X128>(g, grads, vec, count);
    load_floats<X128>(mm, m, vec, count);
    load_floats<X128>(vv, v, vec, count);
    if (master) { load_floats<X128>(p, master, vec, count); } else { load_floats<X128>(p, params, vec, count); }
    Packed128<floatX> out;
    for (int i = 0; i < X128; i++) {
        float gi = g[i] * grad_scale;
        mm[i] = beta1 * mm[i] + (1.0f - beta1) * gi;
        vv[i] = beta2 * vv[i] + (1.0f - beta2) * gi * gi;
        float mhat = mm[i] / bias1, vhat = vv[i] / bias2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p[i]);
        out.v[i] = round_stochastic(p[i], hash_u32((uint32_t)(index + i), seed));
    }
    store_floats<X128>(m, mm, vec, count);
    store_floats<X128>(v, vv, vec, count);
    if (master) { store_floats<X128>(master, p, vec, count); }
    store_pack(params, out, vec, count);
}

template <class G>
__device__ __forceinline__ bool adamw_aligned(const floatX* params, const float* master, const G* grads,
                                              const float* m, const float* v) {
    uintptr_t bits = (uintptr_t)params | (uintptr_t)grads | (uintptr_t)m | (uintptr_t)v | (uintptr_t)master;
    return (bits & 15) == 0;
}

// One tensor (or slice): index_offset is where element 0 sits in its tensor, so a slice draws
// the rounding bits the whole tensor would (a sharded update rounds exactly as the unsharded one).
template <class G>
__global__ void adamw_kernel(floatX* __restrict__ params, float* __restrict__ master, const G* __restrict__ grads,
                             float* __restrict__ m, float* __restrict__ v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float grad_scale, float bias1, float bias2,
                             uint32_t seed, size_t index_offset) {
    bool aligned = adamw_aligned(params, master, grads, m, v);
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128; i < n;
         i += (size_t)gridDim.x * blockDim.x * X128) {
        int count = n - i < (size_t)X128 ? (int)(n - i) : X128;
        adamw_pack(params + i, master ? master + i : NULL, grads + i, m + i, v + i, count,
                   aligned && count == X128, lr, beta1, beta2, eps, weight_decay, grad_scale, bias1, bias2, seed,
                   i + index_offset);
    }
}

template <class G>
static void adamw_update(floatX* params, float* master, const G* grads, float* m, float* v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, float bias1,
                         float bias2, uint32_t seed, size_t index_offset = 0) {
    if (n == 0) { return; }
    unsigned int blocks = ceil_div_u(n, 256 * X128);
    if (blocks > 4096) { blocks = 4096; }
    adamw_kernel<G><<<blocks, 256>>>(params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                                     bias1, bias2, seed, index_offset);
    cudaLaunchCheck();
}

// ----------------------------------------------------------------------------
// Multi-tensor AdamW: a table of segments (a tensor, or this rank's slice of one), each cut into
// chunks of ADAMW_CHUNK elements; block b finds its segment by binary search over the segments'
// first chunks and updates that chunk. The table is built once; a step is one launch.

#define ADAMW_CHUNK (256 * X128 * 4)

typedef struct {
    size_t param_offset; // into the parameters
    size_t state_offset; // into the gradients, m, v and master weights
    size_t count;
    size_t index_offset; // of element 0 in its tensor (the rounding bits)
    uint32_t tensor;     // seeds the rounding: seed + tensor
    float weight_decay;  // 1: decayed (matrices), 0: not
    unsigned int first_chunk;
} AdamWSegment;

typedef struct {
    AdamWSegment* host;
    AdamWSegment* device;
    int segments;
    unsigned int chunks;
} AdamWMulti;

static void adamw_multi_init(AdamWMulti* a, int max_segments) {
    a->host = (AdamWSegment*)calloc_check((size_t)max_segments, sizeof(AdamWSegment));
    cudaCheck(cudaMalloc((void**)&a->device, (size_t)max_segments * sizeof(AdamWSegment)));
    a->segments = 0;
    a->chunks = 0;
}

static void adamw_multi_add(AdamWMulti* a, size_t param_offset, size_t state_offset, size_t count,
                            size_t index_offset, int tensor, int decayed) {
    if (count == 0) { return; }
    AdamWSegment* s = &a->host[a->segments++];
    s->param_offset = param_offset;
    s->state_offset = state_offset;
    s->count = count;
    s->index_offset = index_offset;
    s->tensor = (uint32_t)tensor;
    s->weight_decay = decayed ? 1.0f : 0.0f;
    s->first_chunk = a->chunks;
    a->chunks += (unsigned int)((count + ADAMW_CHUNK - 1) / ADAMW_CHUNK);
}

static void adamw_multi_upload(AdamWMulti* a) {
    cudaCheck(cudaMemcpy(a->device, a->host, (size_t)a->segments * sizeof(AdamWSegment), cudaMemcpyHostToDevice));
}

static void adamw_multi_free(AdamWMulti* a) {
    free(a->host);
    cudaCheck(cudaFree(a->device));
}

// In/out as adamw_kernel for every segment; seed_base + segment.tensor seeds each segment and
// weight_decay * segment.weight_decay is its decay. Grid: the table's chunks.
template <class G>
__global__ void adamw_multi_kernel(floatX* __restrict__ params, float* __restrict__ master,
                                   const G* __restrict__ grads, float* __restrict__ m, float* __restrict__ v,
                                   const AdamWSegment* __restrict__ segs, int segments, float lr, float beta1,
                                   float beta2, float eps, float weight_decay, float grad_scale, float bias1,
                                   float bias2, uint32_t seed_base) {
    int lo = 0, hi = segments - 1; // the last segment whose first chunk <= blockIdx.x
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (segs[mid].first_chunk <= blockIdx.x) { lo = mid; } else { hi = mid - 1; }
    }
    AdamWSegment s = segs[lo];
    size_t begin = (size_t)(blockIdx.x - s.first_chunk) * ADAMW_CHUNK;
    size_t end = begin + ADAMW_CHUNK < s.count ? begin + ADAMW_CHUNK : s.count;
    floatX* p = params + s.param_offset;
    float* ms = master ? master + s.state_offset : NULL;
    const G* g = grads + s.state_offset;
    float *mm = m + s.state_offset, *vv = v + s.state_offset;
    bool aligned = adamw_aligned(p, ms, g, mm, vv);
    for (size_t i = begin + threadIdx.x * X128; i < end; i += blockDim.x * X128) {
        int count = end - i < (size_t)X128 ? (int)(end - i) : X128;
        adamw_pack(p + i, ms ? ms + i : NULL, g + i, mm + i, vv + i, count, aligned && count == X128, lr, beta1,
                   beta2, eps, weight_decay * s.weight_decay, grad_scale, bias1, bias2, seed_base + s.tensor,
                   i + s.index_offset);
    }
}

template <class G>
static void adamw_multi_update(const AdamWMulti* a, floatX* params, float* master, const G* grads, float* m, float* v,
                               float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                               float bias1, float bias2, uint32_t seed_base) {
    if (a->chunks == 0) { return; }
    adamw_multi_kernel<G><<<a->chunks, 256>>>(params, master, grads, m, v, a->device, a->segments, lr, beta1, beta2,
                                              eps, weight_decay, grad_scale, bias1, bias2, seed_base);
    cudaLaunchCheck();
}

// ----------------------------------------------------------------------------
// The sum of squares, one launch.

#define NORM_BLOCKS 2048 // the most blocks (the scratch of block sums); the grid fills the GPU once
#define NORM_THREADS 256

// In: x (n). Out: out[0] = sum of x^2. Scratch: partial (gridDim.x <= NORM_BLOCKS floats), a counter.
template <class T>
__global__ void sum_of_squares_kernel(float* __restrict__ out, float* __restrict__ partial,
                                      unsigned int* __restrict__ counter, const T* __restrict__ x, size_t n) {
    constexpr int P = Packed128<T>::N;
    bool aligned = aligned16(x);
    float s = 0.0f;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * P; i < n; i += (size_t)gridDim.x * blockDim.x * P) {
        int count = n - i < (size_t)P ? (int)(n - i) : P;
        Packed128<T> p = load_pack(x + i, aligned && count == P, count);
        for (int k = 0; k < P; k++) { float v = p.f(k); s += v * v; }
    }
    s = block_sum(s);
    if (threadIdx.x == 0) { partial[blockIdx.x] = s; }
    if (!last_block_done(counter, gridDim.x)) { return; }
    float t = 0.0f;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) { t += partial[i]; }
    t = block_sum(t);
    if (threadIdx.x == 0) { out[0] = t; }
}

// The sum of squares of x (n elements) into out[0] on the device, no host round trip.
// scratch: NORM_BLOCKS floats.
template <class T>
static void sum_of_squares(float* out, const T* x, size_t n, float* scratch) {
    unsigned int* counter = reduction_counters() + MAX_COUNTERS - 2;
    // one full wave (256 blocks were 0.24 of one on 132 SMs: a latency-bound grid-stride loop of 2975
    // trips per thread at 1558M), no more blocks than packs of NORM_THREADS, at most NORM_BLOCKS
    static unsigned int wave = 0;
    if (!wave) { wave = wave_blocks(sum_of_squares_kernel<T>, NORM_THREADS, 0); }
    size_t useful = (n + (size_t)NORM_THREADS * Packed128<T>::N - 1) / ((size_t)NORM_THREADS * Packed128<T>::N);
    unsigned int blocks = wave < NORM_BLOCKS ? wave : NORM_BLOCKS;
    if (useful < blocks) { blocks = useful < 1 ? 1 : (unsigned int)useful; }
    sum_of_squares_kernel<T><<<blocks, NORM_THREADS>>>(out, scratch, counter, x, n);
    cudaLaunchCheck();
}

// The L2 norm of x (n elements). scratch: NORM_BLOCKS + 1 floats.
static float global_norm(const floatX* x, size_t n, float* scratch) {
    sum_of_squares(scratch + NORM_BLOCKS, x, n, scratch);
    float sq;
    cudaCheck(cudaMemcpy(&sq, scratch + NORM_BLOCKS, sizeof(float), cudaMemcpyDeviceToHost));
    return sqrtf(sq);
}

#endif
