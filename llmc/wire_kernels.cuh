// -rq on the GPU: the kernels of the replica link's wire formats bf16, int8 and int4 (defined in
// llmc/wire_format.h: blocks of WIRE_BLOCK values, an fp32 scale absmax / levels, codes rounded to
// nearest even, the scales before the codes). A message is R slices of n values each (the packed
// pseudo-gradients of a fragment, padded to R slices), every slice encoded on its own as the CPU
// trainer encodes it. Every product, quotient and difference is rounded on its own (__fmul_rn,
// __fdiv_rn, __fsub_rn, __fadd_rn: nvcc contracts nothing), so the bytes, the residuals and the
// decoded sums equal the CPU trainer's loops bit for bit.
//   wire_encode_slices   x (R, n) -> out (R, bytes(n)); x becomes the residual x - decoded, or stays
//   wire_decode_sum      (below) the sums over replicas, in fp32 in replica order, never in the
//                        compressed type
// Top-k (-rk, any format; WireSpec): encoded by wire_spec_encode_slices and summed or decoded by
// wire_spec_decode_sum, one CUDA block per chunk of WIRE_TOPK_CHUNK values of a slice
// (wire_topk_kernel, wire_topk_sum_kernel), selecting exactly the CPU's indices. -ls 0:
// wire_gradient_message packs a gradient plus the residual.
#ifndef LLMC_WIRE_KERNELS_CUH
#define LLMC_WIRE_KERNELS_CUH

#include <stdint.h>
#include "cuda_common.cuh"
#include "wire_format.h"

// What the encoding kernels leave in x: x itself, the residual (x - decoded), or the decoded value.
enum { WIRE_KEEP, WIRE_RESIDUAL, WIRE_DECODED };

// fp32 and bf16 values at any byte address, little-endian (the CPU trainer's memcpy).
__device__ inline void wire_put_u32(uint8_t* p, uint32_t b) {
    p[0] = (uint8_t)b;
    p[1] = (uint8_t)(b >> 8);
    p[2] = (uint8_t)(b >> 16);
    p[3] = (uint8_t)(b >> 24);
}
__device__ inline float wire_get_f32(const uint8_t* p) {
    return __uint_as_float((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

// bf16 bits of x, rounded to nearest even (NaN stays NaN), and back.
__device__ inline uint32_t wire_dev_bf16_bits(float x) {
    uint32_t b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return ((b >> 16) | 0x0040u) & 0xffffu; }
    return ((b + 0x7fffu + ((b >> 16) & 1u)) >> 16) & 0xffffu;
}
__device__ inline float wire_dev_bf16_value(uint32_t h) { return __uint_as_float(h << 16); }

__device__ inline size_t wire_dev_blocks(size_t n) { return (n + WIRE_BLOCK - 1) / WIRE_BLOCK; }

// Value i of an encoded run of n values in format f (bf16, int8 or int4).
__device__ inline float wire_dev_value(int f, const uint8_t* in, size_t n, size_t i) {
    if (f == WIRE_BF16) { return wire_dev_bf16_value((uint32_t)in[2 * i] | ((uint32_t)in[2 * i + 1] << 8)); }
    float scale = wire_get_f32(in + 4 * (i / WIRE_BLOCK));
    const uint8_t* codes = in + 4 * wire_dev_blocks(n);
    int q;
    if (f == WIRE_INT8) {
        q = (int8_t)codes[i];
    } else {
        q = (codes[i / 2] >> (4 * (i & 1))) & 0xf;
        if (q > 7) { q -= 16; }
    }
    return __fmul_rn((float)q, scale);
}

// int8 / int4: one wire block (blockIdx.x) of slice blockIdx.y per CUDA block of WIRE_BLOCK threads.
// x: the slices (n values each); out (NULL: not written): slice j's encoding at j * bytes; leave:
// WIRE_KEEP, WIRE_RESIDUAL or WIRE_DECODED.
__global__ void wire_int_kernel(float* x, size_t n, uint8_t* out, size_t bytes, int f, int leave) {
    __shared__ float amax[WIRE_BLOCK];
    __shared__ int codes[WIRE_BLOCK];
    int t = threadIdx.x;
    size_t b = blockIdx.x, i = b * WIRE_BLOCK + t;
    float* xs = x + (size_t)blockIdx.y * n;
    float v = i < n ? xs[i] : 0.0f;
    amax[t] = v == v ? fabsf(v) : 0.0f; // NaNs left out (a block of them: scale 0), as the CPU does
    __syncthreads();
    for (int s = WIRE_BLOCK / 2; s > 0; s >>= 1) { // a maximum: the same whatever the order
        if (t < s) { amax[t] = fmaxf(amax[t], amax[t + s]); }
        __syncthreads();
    }
    float levels = f == WIRE_INT8 ? 127.0f : 7.0f;
    float scale = __fdiv_rn(amax[0], levels);
    int q = 0;
    if (scale != 0.0f) {
        float r = rintf(__fdiv_rn(v, scale));
        q = r != r ? 0 : (int)fminf(fmaxf(r, -levels), levels); // a NaN quotient: 0 (llmc/wire_format.h)
    }
    codes[t] = q;
    __syncthreads();
    if (out) {
        uint8_t* o = out + (size_t)blockIdx.y * bytes;
        uint8_t* c = o + 4 * wire_dev_blocks(n);
        if (t == 0) { wire_put_u32(o + 4 * b, __float_as_uint(scale)); }
        if (f == WIRE_INT8 && i < n) { c[i] = (uint8_t)(int8_t)q; }
        if (f == WIRE_INT4 && (t & 1) == 0 && i < n) {
            uint32_t hi = i + 1 < n ? (uint32_t)(codes[t + 1] & 0xf) << 4 : 0u;
            c[i / 2] = (uint8_t)((uint32_t)(q & 0xf) | hi);
        }
    }
    if (i < n && leave != WIRE_KEEP) {
        float dec = __fmul_rn((float)q, scale);
        xs[i] = leave == WIRE_RESIDUAL ? __fsub_rn(v, dec) : dec;
    }
}

// bf16: element k of R * n (slice k / n).
__global__ void wire_bf16_kernel(float* x, size_t n, int R, uint8_t* out, size_t bytes, int leave) {
    size_t total = n * (size_t)R;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        size_t j = k / n, i = k - j * n;
        float v = x[k];
        uint32_t h = wire_dev_bf16_bits(v);
        if (out) {
            out[j * bytes + 2 * i] = (uint8_t)h;
            out[j * bytes + 2 * i + 1] = (uint8_t)(h >> 8);
        }
        float dec = wire_dev_bf16_value(h);
        if (leave != WIRE_KEEP) { x[k] = leave == WIRE_RESIDUAL ? __fsub_rn(v, dec) : dec; }
    }
}

// Value i of an encoded run of n values in format f, fp32 included.
__device__ inline float wire_dev_any_value(int f, const uint8_t* in, size_t n, size_t i) {
    return f == WIRE_FP32 ? wire_get_f32(in + 4 * i) : wire_dev_value(f, in, n, i);
}

static unsigned int wire_grid(size_t total) {
    unsigned int blocks = ceil_div_u(total == 0 ? 1 : total, 256);
    return blocks > 4096 ? 4096 : blocks;
}

// The launches. x: R slices of n values (a format other than fp32); out: R * wire_bytes(f, n) bytes.
static void wire_slices(int f, float* x, size_t n, int R, uint8_t* out, int leave, cudaStream_t stream) {
    if (n == 0) { return; }
    size_t bytes = wire_bytes(f, n);
    if (f == WIRE_BF16) {
        wire_bf16_kernel<<<wire_grid(n * R), 256, 0, stream>>>(x, n, R, out, bytes, leave);
    } else {
        dim3 grid((unsigned int)wire_blocks(n), (unsigned int)R);
        wire_int_kernel<<<grid, WIRE_BLOCK, 0, stream>>>(x, n, out, bytes, f, leave);
    }
    cudaLaunchCheck();
}

static void wire_encode_slices(int f, float* x, size_t n, int R, uint8_t* out, int feedback, cudaStream_t stream) {
    wire_slices(f, x, n, R, out, feedback ? WIRE_RESIDUAL : WIRE_KEEP, stream);
}

// The exchange by owners (train_gpt2.cu dp_wire_exchange), any R:
//   wire_decode_sum   in (T terms, S slices, bytes(n) each, term-major) -> dst (S, n): slice j = the
//                     sum over terms t = 0..T-1, in that order, of value i of in[t][j] in fp32
//                     (S 1, T R: an owner's sum of the replicas' slices; S R, T 1: the decoding)
__global__ void wire_decode_sum_kernel(float* dst, const uint8_t* in, size_t n, int S, int T, size_t bytes, int f) {
    size_t total = n * (size_t)S;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        size_t j = k / n, i = k - j * n;
        float acc = wire_dev_value(f, in + j * bytes, n, i);
        for (int t = 1; t < T; t++) { acc = __fadd_rn(acc, wire_dev_value(f, in + ((size_t)t * S + j) * bytes, n, i)); }
        dst[k] = acc;
    }
}

static void wire_decode_sum(int f, float* dst, const uint8_t* in, size_t n, int S, int T, cudaStream_t stream) {
    if (n == 0) { return; }
    wire_decode_sum_kernel<<<wire_grid(n * S), 256, 0, stream>>>(dst, in, n, S, T, wire_bytes(f, n), f);
    cudaLaunchCheck();
}

// ---------------------------------------------------------------------------------------------
// Top-k (-rk D). A slice of n values is cut into chunks of WIRE_TOPK_CHUNK from its start; every
// chunk but the last keeps k_full values, the last (len = n - its start) k_last (wire_topk_keep).
// One CUDA block of WIRE_TOPK_THREADS per chunk (blockIdx.x) of slice blockIdx.y; thread t owns the
// chunk's values [t * WIRE_TOPK_PER, (t + 1) * WIRE_TOPK_PER).
#define WIRE_TOPK_THREADS 256
#define WIRE_TOPK_PER (WIRE_TOPK_CHUNK / WIRE_TOPK_THREADS)

__device__ inline uint32_t wire_dev_mag(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// cnt[0..WIRE_TOPK_THREADS) = its exclusive prefix sums (thread 0; the block syncs around it).
__device__ inline void wire_topk_scan(unsigned int* cnt) {
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int sum = 0;
        for (int i = 0; i < WIRE_TOPK_THREADS; i++) {
            unsigned int c = cnt[i];
            cnt[i] = sum;
            sum += c;
        }
    }
    __syncthreads();
}

// The magnitude bits T of the chunk's k-th largest |x| (radix select, 8 bits a pass from the top)
// and how many values equal to T are kept (*need): every value above T and the first *need
// (lowest indices) equal to it, so that larger magnitudes win and ties go to the lower index.
__device__ inline uint32_t wire_topk_threshold(const float* xs, size_t len, size_t k, unsigned int* hist,
                                               unsigned int* shared_sel, unsigned int* need) {
    int t = threadIdx.x;
    size_t i0 = (size_t)t * WIRE_TOPK_PER, i1 = i0 + WIRE_TOPK_PER < len ? i0 + WIRE_TOPK_PER : len;
    if (t == 0) {
        shared_sel[0] = 0;
        shared_sel[1] = (unsigned int)k;
    }
    for (int shift = 24; shift >= 0; shift -= 8) {
        hist[t] = 0;
        __syncthreads();
        uint32_t hi = shift == 24 ? 0u : 0xffffffffu << (shift + 8), prefix = shared_sel[0];
        for (size_t i = i0; i < i1; i++) {
            uint32_t m = wire_dev_mag(xs[i]);
            if ((m & hi) == (prefix & hi)) { atomicAdd(&hist[(m >> shift) & 255u], 1u); }
        }
        __syncthreads();
        if (t == 0) { // the digit holding the k-th largest, from 255 down
            unsigned int left = shared_sel[1];
            int d = 255;
            for (; d > 0 && hist[d] < left; d--) { left -= hist[d]; }
            shared_sel[0] = prefix | ((uint32_t)d << shift);
            shared_sel[1] = left;
        }
        __syncthreads();
    }
    *need = shared_sel[1];
    return shared_sel[0];
}

// One chunk (blockIdx.x) of slice blockIdx.y of x (slices of n values): its k values of largest
// magnitude (the CPU's wire_topk_select) encoded as the CPU's wire_spec_encode does (k uint16
// indices ascending, then the kept values as a run in format f) at out + blockIdx.y * bytes +
// blockIdx.x * chunk_bytes (out NULL: not written); x left as `leave` says (WIRE_RESIDUAL: kept
// values minus their decoded value, the others unchanged; WIRE_DECODED: decoded, the others 0).
__global__ void wire_topk_kernel(float* x, size_t n, uint8_t* out, size_t bytes, size_t chunk_bytes, int f,
                                 size_t k_full, size_t k_last, int leave) {
    __shared__ float vals[WIRE_TOPK_CHUNK];
    __shared__ uint16_t idx[WIRE_TOPK_CHUNK];
    __shared__ unsigned int hist[WIRE_TOPK_THREADS];
    __shared__ unsigned int cnt[WIRE_TOPK_THREADS];
    __shared__ unsigned int sel[2];
    __shared__ float scales[WIRE_TOPK_CHUNK / WIRE_BLOCK];
    int t = threadIdx.x;
    size_t c0 = (size_t)blockIdx.x * WIRE_TOPK_CHUNK;
    size_t len = n - c0 < WIRE_TOPK_CHUNK ? n - c0 : WIRE_TOPK_CHUNK;
    size_t k = c0 + WIRE_TOPK_CHUNK >= n ? k_last : k_full;
    float* xs = x + (size_t)blockIdx.y * n + c0;
    unsigned int need;
    uint32_t T = wire_topk_threshold(xs, len, k, hist, sel, &need);
    size_t i0 = (size_t)t * WIRE_TOPK_PER, i1 = i0 + WIRE_TOPK_PER < len ? i0 + WIRE_TOPK_PER : len;
    unsigned int ties = 0, kept = 0;
    for (size_t i = i0; i < i1; i++) { ties += wire_dev_mag(xs[i]) == T; }
    cnt[t] = ties;
    wire_topk_scan(cnt);
    unsigned int tie = cnt[t], tie0 = tie; // ties before this thread's values
    for (size_t i = i0; i < i1; i++) {
        uint32_t m = wire_dev_mag(xs[i]);
        kept += m > T || (m == T && tie++ < need);
    }
    __syncthreads(); // every thread read its tie count
    cnt[t] = kept;
    wire_topk_scan(cnt);
    unsigned int at = cnt[t];
    tie = tie0;
    for (size_t i = i0; i < i1; i++) { // ascending indices, the values beside them
        float v = xs[i];
        uint32_t m = wire_dev_mag(v);
        if (m > T || (m == T && tie++ < need)) {
            idx[at] = (uint16_t)i;
            vals[at++] = v;
        } else if (leave == WIRE_DECODED) {
            xs[i] = 0.0f;
        }
    }
    __syncthreads();
    uint8_t* o = out ? out + (size_t)blockIdx.y * bytes + (size_t)blockIdx.x * chunk_bytes : NULL;
    uint8_t* ov = o ? o + 2 * k : NULL;
    size_t nb = (k + WIRE_BLOCK - 1) / WIRE_BLOCK;
    float levels = f == WIRE_INT8 ? 127.0f : 7.0f;
    if (f == WIRE_INT8 || f == WIRE_INT4) {
        for (size_t b = t; b < nb; b += WIRE_TOPK_THREADS) {
            size_t e = (b + 1) * WIRE_BLOCK < k ? (b + 1) * WIRE_BLOCK : k;
            float amax = 0.0f;
            for (size_t p = b * WIRE_BLOCK; p < e; p++) { amax = fmaxf(amax, fabsf(vals[p])); }
            scales[b] = __fdiv_rn(amax, levels);
            if (ov) { wire_put_u32(ov + 4 * b, __float_as_uint(scales[b])); }
        }
        __syncthreads();
    }
    for (size_t p = t; p < k; p += WIRE_TOPK_THREADS) {
        float v = vals[p], dec = v;
        if (o) {
            o[2 * p] = (uint8_t)idx[p];
            o[2 * p + 1] = (uint8_t)(idx[p] >> 8);
        }
        if (f == WIRE_FP32) {
            if (ov) { wire_put_u32(ov + 4 * p, __float_as_uint(v)); }
        } else if (f == WIRE_BF16) {
            uint32_t h = wire_dev_bf16_bits(v);
            if (ov) {
                ov[2 * p] = (uint8_t)h;
                ov[2 * p + 1] = (uint8_t)(h >> 8);
            }
            dec = wire_dev_bf16_value(h);
        } else {
            float scale = scales[p / WIRE_BLOCK];
            int q = 0;
            float r = scale != 0.0f ? rintf(__fdiv_rn(v, scale)) : 0.0f;
            if (r == r) { q = (int)fminf(fmaxf(r, -levels), levels); } // a NaN quotient: 0
            dec = __fmul_rn((float)q, scale);
            if (ov && f == WIRE_INT8) { ov[4 * nb + p] = (uint8_t)(int8_t)q; }
            vals[p] = (float)q; // int4: the pair's byte below
        }
        if (leave != WIRE_KEEP) { xs[idx[p]] = leave == WIRE_RESIDUAL ? __fsub_rn(v, dec) : dec; }
    }
    if (f == WIRE_INT4 && ov) {
        __syncthreads();
        for (size_t p = 2 * (size_t)t; p < k; p += 2 * WIRE_TOPK_THREADS) {
            uint32_t lo = (uint32_t)((int)vals[p] & 0xf), hi = p + 1 < k ? (uint32_t)((int)vals[p + 1] & 0xf) << 4 : 0u;
            ov[4 * nb + p / 2] = (uint8_t)(lo | hi);
        }
    }
}

// wire_decode_sum for top-k: dst (S slices of n) = slice blockIdx.y's chunk blockIdx.x summed over
// the terms t = 0..T-1 in order (in[t][j] at (t * S + j) * bytes) as the CPU sums them: term 0's
// decoded chunk (0 where not kept), then each next term's decoded chunk added element by element.
__global__ void wire_topk_sum_kernel(float* dst, const uint8_t* in, size_t n, int S, int T, size_t bytes,
                                     size_t chunk_bytes, int f, size_t k_full, size_t k_last) {
    __shared__ float dense[WIRE_TOPK_CHUNK];
    size_t j = blockIdx.y, c0 = (size_t)blockIdx.x * WIRE_TOPK_CHUNK;
    size_t len = n - c0 < WIRE_TOPK_CHUNK ? n - c0 : WIRE_TOPK_CHUNK;
    size_t k = c0 + WIRE_TOPK_CHUNK >= n ? k_last : k_full;
    float* d = dst + j * n + c0;
    for (int t = 0; t < T; t++) {
        for (size_t i = threadIdx.x; i < len; i += blockDim.x) { dense[i] = 0.0f; }
        __syncthreads();
        const uint8_t* e = in + ((size_t)t * S + j) * bytes + (size_t)blockIdx.x * chunk_bytes;
        for (size_t p = threadIdx.x; p < k; p += blockDim.x) {
            dense[(uint32_t)e[2 * p] | ((uint32_t)e[2 * p + 1] << 8)] = wire_dev_any_value(f, e + 2 * k, k, p);
        }
        __syncthreads();
        for (size_t i = threadIdx.x; i < len; i += blockDim.x) { d[i] = t == 0 ? dense[i] : __fadd_rn(d[i], dense[i]); }
        __syncthreads();
    }
}

// The chunk geometry of a slice of n values under w (density > 0).
static void wire_topk_geometry(const WireSpec* w, size_t n, size_t* chunks, size_t* k_full, size_t* k_last,
                               size_t* chunk_bytes) {
    *chunks = (n + WIRE_TOPK_CHUNK - 1) / WIRE_TOPK_CHUNK;
    *k_full = wire_topk_keep(w, WIRE_TOPK_CHUNK);
    *k_last = wire_topk_keep(w, n - (*chunks - 1) * WIRE_TOPK_CHUNK);
    *chunk_bytes = 2 * *k_full + wire_bytes(w->format, *k_full);
}

// The top-k launches' grid (chunks of a slice x S slices) and sizes of slices of n values under w.
typedef struct {
    dim3 grid;
    size_t bytes, chunk_bytes, k_full, k_last;
} WireTopkLaunch;

static WireTopkLaunch wire_topk_launch(const WireSpec* w, size_t n, int S) {
    WireTopkLaunch l;
    size_t chunks;
    wire_topk_geometry(w, n, &chunks, &l.k_full, &l.k_last, &l.chunk_bytes);
    l.grid = dim3((unsigned int)chunks, (unsigned int)S);
    l.bytes = wire_spec_bytes(w, n);
    return l;
}

// The launches for any WireSpec (a dense fp32 spec excepted: that is an all-reduce): x, R slices of
// n values; out, R * wire_spec_bytes(w, n) bytes.
static void wire_spec_slices(const WireSpec* w, float* x, size_t n, int R, uint8_t* out, int leave,
                             cudaStream_t stream) {
    if (w->density == 0.0f) { wire_slices(w->format, x, n, R, out, leave, stream); return; }
    if (n == 0) { return; }
    WireTopkLaunch l = wire_topk_launch(w, n, R);
    wire_topk_kernel<<<l.grid, WIRE_TOPK_THREADS, 0, stream>>>(x, n, out, l.bytes, l.chunk_bytes, w->format, l.k_full,
                                                               l.k_last, leave);
    cudaLaunchCheck();
}

static void wire_spec_encode_slices(const WireSpec* w, float* x, size_t n, int R, uint8_t* out, int feedback,
                                    cudaStream_t stream) {
    wire_spec_slices(w, x, n, R, out, feedback ? WIRE_RESIDUAL : WIRE_KEEP, stream);
}

// wire_decode_sum for any WireSpec (a dense fp32 spec excepted): in (T terms, S slices of n values
// encoded in w, term-major) -> dst (S, n), each slice summed over the terms in order in fp32.
static void wire_spec_decode_sum(const WireSpec* w, float* dst, const uint8_t* in, size_t n, int S, int T,
                                 cudaStream_t stream) {
    if (w->density == 0.0f) { wire_decode_sum(w->format, dst, in, n, S, T, stream); return; }
    if (n == 0) { return; }
    WireTopkLaunch l = wire_topk_launch(w, n, S);
    wire_topk_sum_kernel<<<l.grid, WIRE_TOPK_THREADS, 0, stream>>>(dst, in, n, S, T, l.bytes, l.chunk_bytes, w->format,
                                                                   l.k_full, l.k_last);
    cudaLaunchCheck();
}

// -ls 0: msg[i] = g[i] (gx: floatX, ZeRO 0's gradient; NULL: msg already holds it) + res[i] (NULL:
// nothing) for i < owned, 0 up to padded.
__global__ void wire_gradient_message_kernel(float* msg, const floatX* gx, const float* res, size_t owned,
                                             size_t padded) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < padded; i += (size_t)gridDim.x * blockDim.x) {
        float g = i >= owned ? 0.0f : gx ? (float)gx[i] : msg[i];
        msg[i] = i < owned && res ? __fadd_rn(g, res[i]) : g;
    }
}

static void wire_gradient_message(float* msg, const floatX* gx, const float* res, size_t owned, size_t padded,
                                  cudaStream_t stream) {
    wire_gradient_message_kernel<<<wire_grid(padded), 256, 0, stream>>>(msg, gx, res, owned, padded);
    cudaLaunchCheck();
}

// -ls 0, ZeRO 0: g[i] = sum[i] * inv (fp32 product, then floatX).
__global__ void wire_gradient_back_kernel(floatX* g, const float* sum, size_t n, float inv) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        g[i] = (floatX)__fmul_rn(sum[i], inv);
    }
}

static void wire_gradient_back(floatX* g, const float* sum, size_t n, float inv, cudaStream_t stream) {
    wire_gradient_back_kernel<<<wire_grid(n), 256, 0, stream>>>(g, sum, n, inv);
    cudaLaunchCheck();
}

#endif
