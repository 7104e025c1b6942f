// -rq on the GPU: the kernels of the replica link's wire formats bf16, int8 and int4 (defined in
// llmc/wire_format.h: blocks of WIRE_BLOCK values, an fp32 scale absmax / levels, codes rounded to
// nearest even, the scales before the codes). A message is R slices of n values each (the packed
// pseudo-gradients of a fragment, padded to R slices), every slice encoded on its own as the CPU
// trainer encodes it. Every product, quotient and difference is rounded on its own (__fmul_rn,
// __fdiv_rn, __fsub_rn, __fadd_rn: nvcc contracts nothing), so the bytes, the residuals and the
// decoded sums equal the CPU trainer's loops bit for bit.
//   wire_encode_slices   x (R, n) -> out (R, bytes(n)); x becomes the residual x - decoded, or stays
//   wire_sum_slices      in (R replicas, R slices, bytes(n)) -> dst (R, n): slice j summed over the
//                        replicas in order 0..R-1 in fp32, never in the compressed type
//   wire_round_slices    dst (R, n) in place: decode(encode(dst)), the owner's rounding of its sum
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
    amax[t] = fabsf(v);
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
        q = (int)fminf(fmaxf(r, -levels), levels);
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

// dst[j * n + i] = the sum over replicas r = 0..R-1, in that order, of value i of slice j of in
// (replica r's encoding: R slices of `bytes`, at r * R * bytes).
__global__ void wire_sum_kernel(float* dst, const uint8_t* in, size_t n, int R, size_t bytes, int f) {
    size_t total = n * (size_t)R;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        size_t j = k / n, i = k - j * n;
        float acc = wire_dev_value(f, in + j * bytes, n, i);
        for (int r = 1; r < R; r++) { acc = __fadd_rn(acc, wire_dev_value(f, in + ((size_t)r * R + j) * bytes, n, i)); }
        dst[k] = acc;
    }
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

static void wire_round_slices(int f, float* x, size_t n, int R, cudaStream_t stream) {
    wire_slices(f, x, n, R, NULL, WIRE_DECODED, stream);
}

static void wire_sum_slices(int f, float* dst, const uint8_t* in, size_t n, int R, cudaStream_t stream) {
    if (n == 0) { return; }
    wire_sum_kernel<<<wire_grid(n * R), 256, 0, stream>>>(dst, in, n, R, wire_bytes(f, n), f);
    cudaLaunchCheck();
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

#endif
