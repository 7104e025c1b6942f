// Shared pieces of the CUDA trainer: the precision switch (floatX is __nv_bfloat16 by default,
// float with -DENABLE_FP32), error checks, float <-> floatX conversion, stochastic rounding,
// warp and block reductions, and the deterministic column sums behind every bias and LayerNorm
// parameter gradient (chunks of rows, then the chunks summed in a fixed order: no atomics).
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "utils.h"

// A host wait for an event: cudaEventSynchronize, unless the program installs a wait with a deadline
// (the trainer: wait_event of llmc/device_wait.cuh), since on a GPU this blocks forever behind a
// collective whose peer died or hangs.
typedef void (*EventWaitFn)(cudaEvent_t ev, const char* what);
static EventWaitFn event_wait_fn = NULL;
static void host_wait_event(cudaEvent_t ev, const char* what);

#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "FP32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "BF16"
#endif

#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
static void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) { fail("CUDA error %s at %s:%d (%s)", cudaGetErrorString(err), file, line, what); }
}
// After a kernel launch: reports a bad launch configuration at once.
#define cudaLaunchCheck() cudaCheck(cudaGetLastError())

static unsigned int ceil_div_u(size_t n, size_t d) { return (unsigned int)((n + d - 1) / d); }

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
#ifdef ENABLE_FP32
__device__ __forceinline__ floatX to_X(float x) { return x; }
#else
__device__ __forceinline__ floatX to_X(float x) { return __float2bfloat16(x); }
#endif

// Random bits for element i under a seed (a murmur3-style finaliser of i and the seed).
__device__ __forceinline__ uint32_t hash_u32(uint32_t i, uint32_t seed) {
    uint32_t x = i * 0x9e3779b1u ^ (seed + 0x7f4a7c15u);
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

// floatX from float with stochastic rounding in bf16: adding 16 random low bits before
// truncating rounds up with probability equal to the discarded fraction. Exact in FP32.
__device__ __forceinline__ floatX round_stochastic(float x, uint32_t bits) {
#ifdef ENABLE_FP32
    (void)bits;
    return x;
#else
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) { return __float2bfloat16(x); } // inf and NaN stay
    u += bits & 0xffffu;
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, o); }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o)); }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the total.
__device__ inline float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); // part may still be read by a previous call
    if (lane == 0) { part[warp] = v; }
    __syncthreads();
    return warp_sum(lane < warps ? part[lane] : 0.0f);
}

__device__ inline float block_max(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) { part[warp] = v; }
    __syncthreads();
    return warp_max(lane < warps ? part[lane] : -INFINITY);
}

// ----------------------------------------------------------------------------
// Packed128<T>: 16 bytes of T (8 bf16 or 4 floats) moved by one 128-bit load or store (LDG.E.128 /
// STG.E.128 in SASS). load128/store128 need a 16-byte-aligned address; load_part/store_part move
// the first `count` elements one by one (row tails, unaligned data), the rest reading as 0.

template <class T>
struct alignas(16) Packed128 {
    static constexpr int N = 16 / sizeof(T);
    T v[N];
    __device__ __forceinline__ float f(int i) const { return to_f(v[i]); }
};

template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* __restrict__ p) {
    Packed128<T> r;
    *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
    return r;
}

template <class T>
__device__ __forceinline__ void store128(T* __restrict__ p, const Packed128<T>& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

template <class T>
__device__ __forceinline__ Packed128<T> load_part(const T* __restrict__ p, int count) {
    Packed128<T> r;
    for (int i = 0; i < Packed128<T>::N; i++) { r.v[i] = i < count ? p[i] : (T)0.0f; }
    return r;
}

template <class T>
__device__ __forceinline__ void store_part(T* __restrict__ p, const Packed128<T>& x, int count) {
    for (int i = 0; i < Packed128<T>::N && i < count; i++) { p[i] = x.v[i]; }
}

// A pack at element offset c of data whose rows are whole packs (vec) or not: 128-bit when vec,
// else element by element, at most `count` elements.
template <class T>
__device__ __forceinline__ Packed128<T> load_pack(const T* __restrict__ p, bool vec, int count) {
    return vec ? load128(p) : load_part(p, count);
}

template <class T>
__device__ __forceinline__ void store_pack(T* __restrict__ p, const Packed128<T>& x, bool vec, int count) {
    if (vec) { store128(p, x); } else { store_part(p, x, count); }
}

__host__ __device__ inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// 128-bit access is possible for rows of `width` elements of T starting at these pointers.
static inline bool vec_ok(size_t width, size_t elem, const void* a, const void* b = NULL, const void* c = NULL,
                          const void* d = NULL) {
    return (width * elem) % 16 == 0 && aligned16(a) && (!b || aligned16(b)) && (!c || aligned16(c)) &&
           (!d || aligned16(d));
}

#define X128 Packed128<floatX>::N

// ----------------------------------------------------------------------------
// Deterministic "last block finishes" reductions: each block writes its partial sums, then takes
// a ticket from a counter; the block with the last ticket adds every partial in block order (a
// fixed order, whatever order the blocks ran in) and resets the counter for the next launch.
// The counters live in one zeroed device array, allocated at first use.

#define MAX_COUNTERS 4096

static unsigned int* reduction_counters(void) {
    static unsigned int* counters = NULL;
    if (!counters) {
        cudaCheck(cudaMalloc((void**)&counters, MAX_COUNTERS * sizeof(unsigned int)));
        cudaCheck(cudaMemset(counters, 0, MAX_COUNTERS * sizeof(unsigned int)));
    }
    return counters;
}

// True in every thread of the block whose ticket is the last of `blocks`; call after the block's
// partial results are written (it fences them, then syncs the block).
__device__ inline bool last_block_done(unsigned int* counter, unsigned int blocks) {
    __shared__ unsigned int ticket;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) { ticket = atomicAdd(counter, 1u); }
    __syncthreads();
    bool last = ticket == blocks - 1;
    if (last) {
        __threadfence();
        if (threadIdx.x == 0 && threadIdx.y == 0) { *counter = 0; }
    }
    return last;
}

// ----------------------------------------------------------------------------
// Launches that fill the GPU: a grid of at least one full wave (the blocks of the kernel that fit
// on an SM at once, from cudaOccupancyMaxActiveBlocksPerMultiprocessor, times the SMs), asked once
// per kernel and device. The grid depends on the device, so the bits of a reduction over it do too;
// on one device every run sums in the same order.
static int device_sms(void) {
    static int sms = 0;
    if (!sms) {
        int dev;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms < 1) { sms = 1; }
    }
    return sms;
}

template <class K>
static unsigned int wave_blocks(K kernel, int threads, size_t smem) {
    int per_sm = 0;
    cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
    return (unsigned int)((per_sm < 1 ? 1 : per_sm) * device_sms());
}

// ----------------------------------------------------------------------------
// Column sums of (N, C) row-major data, two launches (the bias gradients): each thread of the first
// owns one pack of columns of a strip of 32 packs and sums its rows of a chunk of rows; the 8 row
// lanes of a block are added in lane order into the chunk's partial (chunks, C). The chunks are
// as many as make the grid (strips x chunks) one full wave of blocks, so that the GPU is full at
// any N (B 8: 32 chunks of 256 rows were 96 blocks for C 768). The second launch adds each
// column's chunk partials in a fixed order into the output (colsum_finish_kernel).

#define COLSUM_THREADS_Y 8
#define COLSUM_MIN_ROWS 8          // rows per chunk at least (one per row lane)
#define COLSUM_MAX_CHUNKS 1024     // partial (chunks, C) fits colsum_partial_floats
#define COLSUM_FINISH_Y 16         // row lanes of the finishing launch

// In: x (N, C). Out: partial (gridDim.y, C): the column sums of x over each chunk of rows, chunk k
// = rows [k N / chunks, (k + 1) N / chunks). Block (32, 8), grid (ceil(C / (32 X128)), chunks).
// vec: rows are whole packs.
__global__ void bias_backward_kernel(float* __restrict__ partial, const floatX* __restrict__ x, int N, int C,
                                     bool vec) {
    __shared__ float tile[COLSUM_THREADS_Y][32 * X128];
    int c0 = (blockIdx.x * 32 + threadIdx.x) * X128;
    int chunks = gridDim.y;
    int n0 = (int)((long long)blockIdx.y * N / chunks), n1 = (int)((long long)(blockIdx.y + 1) * N / chunks);
    float s[X128];
    for (int i = 0; i < X128; i++) { s[i] = 0.0f; }
    if (c0 < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += COLSUM_THREADS_Y) {
            Packed128<floatX> p = load_pack(x + (size_t)n * C + c0, vec, C - c0);
            for (int i = 0; i < X128; i++) { s[i] += p.f(i); }
        }
    }
    for (int i = 0; i < X128; i++) { tile[threadIdx.y][threadIdx.x * X128 + i] = s[i]; }
    __syncthreads();
    if (threadIdx.y == 0) { // the 8 row lanes combined in a fixed order
        for (int i = 0; i < X128 && c0 + i < C; i++) {
            float t = 0.0f;
            for (int y = 0; y < COLSUM_THREADS_Y; y++) { t += tile[y][threadIdx.x * X128 + i]; }
            partial[(size_t)blockIdx.y * C + c0 + i] = t;
        }
    }
}

// out_y[c] += sum over k < chunks of partial[(y chunks + k) C + c], for y = blockIdx.y (one output per
// grid row: the LayerNorm backward finishes dweight and dbias in one launch). Row lane ty sums the
// chunks k = ty, ty + 16, ... in ascending order, then lane 0 adds the 16 lanes' sums in lane order:
// a fixed order whatever order the blocks run in. Block (32, 16), grid (ceil(C / 32), outputs).
__global__ void colsum_finish_kernel(floatX* __restrict__ out0, floatX* __restrict__ out1,
                                     const float* __restrict__ partial, int chunks, int C) {
    __shared__ float lanes[COLSUM_FINISH_Y][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    const float* p = partial + (size_t)blockIdx.y * chunks * C;
    float t = 0.0f;
    if (c < C) {
        for (int k = threadIdx.y; k < chunks; k += COLSUM_FINISH_Y) { t += p[(size_t)k * C + c]; }
    }
    lanes[threadIdx.y][threadIdx.x] = t;
    __syncthreads();
#ifdef COLSUM_PLANT_UNORDERED
    // the plant of dev/tests/52_dev_cuda.sh: the lanes' sums added by atomicAdd in whatever order the
    // threads run (the check that the output bits do not depend on the schedule must fail)
    __shared__ float unordered[32];
    if (threadIdx.y == 0) { unordered[threadIdx.x] = 0.0f; }
    __syncthreads();
    atomicAdd(&unordered[threadIdx.x], lanes[threadIdx.y][threadIdx.x]);
    __syncthreads();
#endif
    if (threadIdx.y == 0 && c < C) {
        float sum = 0.0f;
        for (int y = 0; y < COLSUM_FINISH_Y; y++) { sum += lanes[y][threadIdx.x]; }
#ifdef COLSUM_PLANT_UNORDERED
        sum = unordered[threadIdx.x];
#endif
        floatX* out = blockIdx.y == 0 ? out0 : out1;
        out[c] = to_X(to_f(out[c]) + sum);
    }
}

// outputs (1 or 2) arrays of C, each += the column sums of its (chunks, C) block of partial.
static void colsum_finish(floatX* out0, floatX* out1, const float* partial, int chunks, int C) {
    colsum_finish_kernel<<<dim3(ceil_div_u(C, 32), out1 ? 2 : 1), dim3(32, COLSUM_FINISH_Y)>>>(out0, out1, partial,
                                                                                           chunks, C);
    cudaLaunchCheck();
}

// The chunks of bias_backward for N rows of C columns: a full wave of blocks, each chunk at least
// COLSUM_MIN_ROWS rows, at most COLSUM_MAX_CHUNKS.
static int colsum_chunks(int N, int C) {
    static unsigned int wave = 0;
    if (!wave) { wave = wave_blocks(bias_backward_kernel, 32 * COLSUM_THREADS_Y, 0); }
    unsigned int strips = ceil_div_u(C, 32 * X128), chunks = ceil_div_u(wave, strips);
    unsigned int most = ceil_div_u(N, COLSUM_MIN_ROWS);
    if (chunks > most) { chunks = most; }
    if (chunks > COLSUM_MAX_CHUNKS) { chunks = COLSUM_MAX_CHUNKS; }
    return chunks < 1 ? 1 : (int)chunks;
}

// Scratch floats bias_backward needs for N rows of at most C columns (the bound, whatever the device).
static size_t colsum_partial_floats(size_t N, size_t C) {
    size_t chunks = (N + COLSUM_MIN_ROWS - 1) / COLSUM_MIN_ROWS;
    return (chunks < COLSUM_MAX_CHUNKS ? chunks : COLSUM_MAX_CHUNKS) * C;
}

// dbias (C) += column sums of dout (N, C): two launches. partial: colsum_partial_floats(N, C) floats.
static void bias_backward(floatX* dbias, float* partial, const floatX* dout, int N, int C) {
    int chunks = colsum_chunks(N, C);
    bias_backward_kernel<<<dim3(ceil_div_u(C, 32 * X128), chunks), dim3(32, COLSUM_THREADS_Y)>>>(
        partial, dout, N, C, vec_ok(C, sizeof(floatX), dout));
    cudaLaunchCheck();
    colsum_finish(dbias, NULL, partial, chunks, C);
}

static void host_wait_event(cudaEvent_t ev, const char* what) {
    if (event_wait_fn) {
        event_wait_fn(ev, what);
        return;
    }
    cudaError_t e = cudaEventSynchronize(ev);
    if (e != cudaSuccess) { fail("CUDA error %s while waiting for %s", cudaGetErrorString(e), what); }
}

#endif
