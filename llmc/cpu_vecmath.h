// Vectorised elementwise math for the CPU trainer's layers, on GCC vector extensions (512, 256 or
// 128-bit vectors after the target ISA; plain C where there is no SIMD): exp with about 1 ulp
// error, and the tanh-approximation GELU and its derivative written through the logistic
// function (0.5 (1 + tanh u) = 1 / (1 + exp(-2u))). Every element goes through the same
// vector code, tails included, so a value never depends on where it sits in the array.
#ifndef LLMC_CPU_VECMATH_H
#define LLMC_CPU_VECMATH_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#if defined(__AVX__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VEC_W 16
#elif defined(__AVX__)
#define VEC_W 8
#else
#define VEC_W 4
#endif

typedef float vfloat __attribute__((vector_size(VEC_W * 4)));
typedef int vint __attribute__((vector_size(VEC_W * 4)));

typedef float vfloat_u __attribute__((vector_size(VEC_W * 4), aligned(4))); // unaligned access

static inline vfloat vf_splat(float x) { return x - (vfloat){0}; } // a broadcast: x - 0 is exactly x
static inline vfloat vf_load(const float* p) { return *(const vfloat_u*)p; }
static inline void vf_store(float* p, vfloat v) { *(vfloat_u*)p = v; }

// The lanes i < n set (all ones), the others clear.
static inline vint vi_first_lanes(int n) {
    vint lane;
    for (int i = 0; i < VEC_W; i++) { lane[i] = i; }
    return lane < n; // a vector comparison: -1 where true
}

// lane-wise selects through the all-ones / all-zeros masks that vector comparisons give
static inline vfloat vf_select(vint mask, vfloat a, vfloat b) { return (vfloat)(((vint)a & mask) | ((vint)b & ~mask)); }
static inline vfloat vf_min(vfloat a, vfloat b) { return vf_select(a < b, a, b); }
static inline vfloat vf_max(vfloat a, vfloat b) { return vf_select(a > b, a, b); }

// Loads / stores the first n (<= VEC_W) floats; missing lanes read as `fill`. With AVX-512 or AVX
// a masked load or store (lanes past n are not touched, nor can they fault): a memcpy of a
// variable length into a vector on the stack costs a string copy and a failed store forwarding,
// and each softmax row of attention ends in such a partial vector.
static inline vfloat vf_load_n(const float* p, int n, float fill) {
    if (n == VEC_W) { return vf_load(p); }
#if defined(__AVX512F__) && VEC_W == 16
    return (vfloat)_mm512_mask_loadu_ps((__m512)vf_splat(fill), (__mmask16)((1u << n) - 1), p);
#elif defined(__AVX__) && VEC_W == 8
    vint mask = vi_first_lanes(n);
    return vf_select(mask, (vfloat)_mm256_maskload_ps(p, (__m256i)mask), vf_splat(fill));
#else
    vfloat v = vf_splat(fill);
    memcpy(&v, p, (size_t)n * sizeof(float));
    return v;
#endif
}
static inline void vf_store_n(float* p, vfloat v, int n) {
    if (n == VEC_W) { vf_store(p, v); return; }
#if defined(__AVX512F__) && VEC_W == 16
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#elif defined(__AVX__) && VEC_W == 8
    _mm256_maskstore_ps(p, (__m256i)vi_first_lanes(n), (__m256)v);
#else
    memcpy(p, &v, (size_t)n * sizeof(float));
#endif
}

// exp(x) for x in [-87, 88] (clamped outside): x = n ln2 + r, |r| <= ln2 / 2, exp(r) by its
// degree-7 Taylor polynomial (truncation below 1e-8 relative), times 2^n built in the exponent bits.
static inline vfloat vf_exp(vfloat x) {
    x = vf_min(vf_max(x, vf_splat(-87.0f)), vf_splat(88.0f));
    const vfloat shifter = vf_splat(12582912.0f); // 1.5 * 2^23: adding it rounds to an integer
    vfloat t = x * 1.44269504088896341f + shifter;
    vfloat n = t - shifter;
    vfloat r = x - n * 0.693145751953125f;        // ln2 split in a part exact in float ...
    r = r - n * 1.428606765330187e-06f;           // ... and the rest
    vfloat p = vf_splat(1.0f / 5040.0f);
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vint e = (__builtin_convertvector(n, vint) + 127) << 23;
    return p * (vfloat)e;
}

static inline float vf_hsum(vfloat v) {
    float s = 0.0f;
    for (int i = 0; i < VEC_W; i++) { s += v[i]; }
    return s;
}

static inline float vf_hmax(vfloat v) {
    float m = v[0];
    for (int i = 1; i < VEC_W; i++) { m = v[i] > m ? v[i] : m; }
    return m;
}

// max of x[0..n): whole vectors, then one partial vector
static inline float vf_array_max(const float* x, int n) {
    vfloat m = vf_splat(-__builtin_inff());
    int full = n / VEC_W * VEC_W;
    for (int i = 0; i < full; i += VEC_W) { m = vf_max(m, vf_load(x + i)); }
    if (full < n) { m = vf_max(m, vf_load_n(x + full, n - full, -__builtin_inff())); }
    return vf_hmax(m);
}

// y[i] = exp(x[i] - shift) for i < n (y may be x or NULL); returns their sum. Whole vectors, then
// one partial vector whose missing lanes add 0.
static inline float vf_array_exp_sum(float* y, const float* x, int n, float shift) {
    vfloat sum = (vfloat){0};
    int full = n / VEC_W * VEC_W;
    for (int i = 0; i < full; i += VEC_W) {
        vfloat e = vf_exp(vf_load(x + i) - shift);
        if (y) { vf_store(y + i, e); }
        sum += e;
    }
    if (full < n) {
        int w = n - full;
        vfloat e = vf_select(vi_first_lanes(w), vf_exp(vf_load_n(x + full, w, 0.0f) - shift), (vfloat){0});
        if (y) { vf_store_n(y + full, e, w); }
        sum += e;
    }
    return vf_hsum(sum);
}

// A buffer of at least `floats` floats owned by the calling thread, kept between calls (grown by
// the first calls only).
static _Thread_local float* vf_scratch_buffer;
static _Thread_local size_t vf_scratch_floats;
static inline float* vf_thread_scratch(size_t floats) {
    if (floats > vf_scratch_floats) {
        free(vf_scratch_buffer);
        vf_scratch_buffer = (float*)aligned_alloc_check(floats * sizeof(float), "a thread's scratch");
        vf_scratch_floats = floats;
    }
    return vf_scratch_buffer;
}

#define CPU_GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)

// exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3): 0.5 (1 + tanh u) = 1 / (1 + exp(-2u))
static inline vfloat vf_gelu_exp(vfloat x) { return vf_exp(-2.0f * CPU_GELU_SCALE * (x + 0.044715f * x * x * x)); }

static inline vfloat vf_gelu(vfloat x) { return x / (1.0f + vf_gelu_exp(x)); }

// d gelu / dx = s + x (1 - tanh^2 u) / 2 * du/dx with s = 1 / (1 + e), e = exp(-2u):
// 1 - tanh^2 u = 4 s (1 - s) and 1 - s = e s (no cancellation where s is near 1)
static inline vfloat vf_gelu_grad(vfloat x) {
    vfloat e = vf_gelu_exp(x);
    vfloat s = 1.0f / (1.0f + e);
    return s + 2.0f * x * s * (e * s) * CPU_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

#endif
