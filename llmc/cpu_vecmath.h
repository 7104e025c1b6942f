// Vectorised elementwise math for the CPU trainer's layers, on GCC vector extensions (512, 256 or
// 128-bit vectors after the target ISA; plain C where there is no SIMD): exact fused multiply-adds
// on vectors of every width, exp with about 1 ulp error, sums and maxima over arrays in an order
// that no vector width changes, and the tanh-approximation GELU and its derivative written through
// the logistic function (0.5 (1 + tanh u) = 1 / (1 + exp(-2u))). Every element goes through the
// same vector code, tails included, so a value never depends on where it sits in the array.
//
// The same bits on every target: the CPU build compiles with -ffp-contract=off, so `a * b + c` is
// two roundings everywhere and a fused one only where the code says vf_fma; and a reduction runs
// in VF_LANES (16) partial sums whatever VEC_W is (docs/design.md, "The same bits on every host").
#ifndef LLMC_CPU_VECMATH_H
#define LLMC_CPU_VECMATH_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#if defined(__SSE__)
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

// Fused multiply-adds (a * b + c with one rounding) on vectors of 4, 8 and 16 floats: the
// instruction where the target has it, else fmaf lane by lane (exact too, only slower), so a
// vf_fma gives the same bits on every target. (The lane-by-lane forms are macros: a function
// passing a vector wider than the target's registers by value changes the calling convention.)
typedef float vf4 __attribute__((vector_size(16)));
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf16 __attribute__((vector_size(64)));
#define VF_FMA_LANES(T, W, a, b, c)                                                                \
    ({                                                                                             \
        T a_ = (a), b_ = (b), c_ = (c);                                                            \
        for (int i_ = 0; i_ < (W); i_++) { c_[i_] = __builtin_fmaf(a_[i_], b_[i_], c_[i_]); }     \
        c_;                                                                                        \
    })
#if defined(__FMA__)
static inline vf4 vf4_fma(vf4 a, vf4 b, vf4 c) { return (vf4)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c); }
static inline vf8 vf8_fma(vf8 a, vf8 b, vf8 c) { return (vf8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c); }
#else
#define vf4_fma(a, b, c) VF_FMA_LANES(vf4, 4, a, b, c)
#define vf8_fma(a, b, c) VF_FMA_LANES(vf8, 8, a, b, c)
#endif
#if defined(__AVX512F__)
static inline vf16 vf16_fma(vf16 a, vf16 b, vf16 c) { return (vf16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
#else
#define vf16_fma(a, b, c) VF_FMA_LANES(vf16, 16, a, b, c)
#endif
#define VF_CAT_(a, b, c) a##b##c
#define VF_CAT(a, b, c) VF_CAT_(a, b, c)
#define vf_fma VF_CAT(vf, VEC_W, _fma) // on vfloat

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
// degree-7 Taylor polynomial (truncation below 1e-8 relative, Horner in fused steps), times 2^n
// built in the exponent bits.
static inline vfloat vf_exp(vfloat x) {
    x = vf_min(vf_max(x, vf_splat(-87.0f)), vf_splat(88.0f));
    const vfloat shifter = vf_splat(12582912.0f); // 1.5 * 2^23: adding it rounds to an integer
    vfloat t = vf_fma(x, vf_splat(1.44269504088896341f), shifter);
    vfloat n = t - shifter;
    vfloat r = vf_fma(-n, vf_splat(0.693145751953125f), x); // ln2 split in a part exact in float ...
    r = vf_fma(-n, vf_splat(1.428606765330187e-06f), r);    // ... and the rest
    vfloat p = vf_splat(1.0f / 5040.0f);
    p = vf_fma(p, r, vf_splat(1.0f / 720.0f));
    p = vf_fma(p, r, vf_splat(1.0f / 120.0f));
    p = vf_fma(p, r, vf_splat(1.0f / 24.0f));
    p = vf_fma(p, r, vf_splat(1.0f / 6.0f));
    p = vf_fma(p, r, vf_splat(0.5f));
    p = vf_fma(p, r, vf_splat(1.0f));
    p = vf_fma(p, r, vf_splat(1.0f));
    vint e = (__builtin_convertvector(n, vint) + 127) << 23;
    return p * (vfloat)e;
}

// Reductions over arrays, in an order no vector width changes. Lane l of VF_LANES partial results
// takes elements l, l + 16, l + 32, ... of the array in turn (an element past the end counts as the
// reduction's neutral value: +0 for a sum); the 16 partials are then combined as a fixed tree, lane
// l with l + 8, then with l + 4, l + 2 and l + 1. A 512-bit target holds the 16 partials in one
// vector, a 256-bit one in two, a 128-bit one in four: each partial sees the same operations in the
// same order, so the result has the same bits on each.
#define VF_LANES 16
#define VF_PARTS (VF_LANES / VEC_W)
typedef struct { vfloat p[VF_PARTS]; } vf_lanes;

static inline vf_lanes vf_lanes_splat(float x) {
    vf_lanes r;
    for (int j = 0; j < VF_PARTS; j++) { r.p[j] = vf_splat(x); }
    return r;
}

// The 16 (or n < 16, the rest read as fill) floats at x.
static inline vf_lanes vf_lanes_load(const float* x, int n, float fill) {
    vf_lanes r;
    for (int j = 0; j < VF_PARTS; j++) {
        int w = n - j * VEC_W;
        r.p[j] = w >= VEC_W ? vf_load(x + j * VEC_W) : vf_load_n(x + j * VEC_W, w > 0 ? w : 0, fill);
    }
    return r;
}

static inline float vf_lanes_sum(vf_lanes v) {
    float l[VF_LANES];
    memcpy(l, v.p, sizeof(l));
    for (int h = VF_LANES / 2; h >= 1; h /= 2) {
        for (int i = 0; i < h; i++) { l[i] += l[i + h]; }
    }
    return l[0];
}

static inline float vf_lanes_max(vf_lanes v) {
    float l[VF_LANES];
    memcpy(l, v.p, sizeof(l));
    for (int h = VF_LANES / 2; h >= 1; h /= 2) {
        for (int i = 0; i < h; i++) { l[i] = l[i + h] > l[i] ? l[i + h] : l[i]; }
    }
    return l[0];
}

// max of x[0..n)
static inline float vf_array_max(const float* x, int n) {
    vf_lanes m = vf_lanes_splat(-__builtin_inff());
    for (int i = 0; i < n; i += VF_LANES) {
        vf_lanes v = vf_lanes_load(x + i, n - i, -__builtin_inff());
        for (int j = 0; j < VF_PARTS; j++) { m.p[j] = vf_max(m.p[j], v.p[j]); }
    }
    return vf_lanes_max(m);
}

// y[i] = exp(x[i] - shift) for i < n (y may be x or NULL); returns their sum.
static inline float vf_array_exp_sum(float* y, const float* x, int n, float shift) {
    vf_lanes sum = vf_lanes_splat(0.0f);
    for (int i = 0; i < n; i += VF_LANES) {
        vf_lanes v = vf_lanes_load(x + i, n - i, 0.0f);
        for (int j = 0; j < VF_PARTS; j++) {
            int w = n - i - j * VEC_W;
            vfloat e = vf_exp(v.p[j] - shift);
            if (w < VEC_W) { e = vf_select(vi_first_lanes(w > 0 ? w : 0), e, (vfloat){0}); }
            if (y && w > 0) { vf_store_n(y + i + j * VEC_W, e, w < VEC_W ? w : VEC_W); }
            sum.p[j] += e;
        }
    }
    return vf_lanes_sum(sum);
}

// sum of x[0..n)
static inline float vf_array_sum(const float* x, int n) {
    vf_lanes s = vf_lanes_splat(0.0f);
    for (int i = 0; i < n; i += VF_LANES) {
        vf_lanes v = vf_lanes_load(x + i, n - i, 0.0f);
        for (int j = 0; j < VF_PARTS; j++) { s.p[j] += v.p[j]; }
    }
    return vf_lanes_sum(s);
}

// sum of x[i] y[i] over i < n, each product fused into its lane's sum
static inline float vf_array_dot(const float* x, const float* y, int n) {
    vf_lanes s = vf_lanes_splat(0.0f);
    for (int i = 0; i < n; i += VF_LANES) {
        vf_lanes a = vf_lanes_load(x + i, n - i, 0.0f), b = vf_lanes_load(y + i, n - i, 0.0f);
        for (int j = 0; j < VF_PARTS; j++) { s.p[j] = vf_fma(a.p[j], b.p[j], s.p[j]); }
    }
    return vf_lanes_sum(s);
}

// Stops the program when its compiler contracted a * b + c into a fused multiply-add on its own
// (GCC's default for C, -ffp-contract=fast, on a target with FMA): then the bits follow the
// target's ISA and the build's flags, and the goldens and the runs of other builds do not hold.
// (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 when fused and 0 when the product is rounded first.
static void vf_check_no_contraction(const char* program) {
    volatile float va = 1.0f + 0x1p-12f, vc = -(1.0f + 0x1p-11f);
    float a = va, c = vc;
    if (a * a + c != 0.0f) {
        fail("%s was compiled with floating-point contraction: build it with -ffp-contract=off, as make "
             "does (docs/design.md, \"The same bits on every host\")", program);
    }
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
static inline vfloat vf_gelu_exp(vfloat x) {
    return vf_exp(-2.0f * CPU_GELU_SCALE * vf_fma(0.044715f * x * x, x, x));
}

static inline vfloat vf_gelu(vfloat x) { return x / (1.0f + vf_gelu_exp(x)); }

// d gelu / dx = s + x (1 - tanh^2 u) / 2 * du/dx with s = 1 / (1 + e), e = exp(-2u):
// 1 - tanh^2 u = 4 s (1 - s) and 1 - s = e s (no cancellation where s is near 1)
static inline vfloat vf_gelu_grad(vfloat x) {
    vfloat e = vf_gelu_exp(x);
    vfloat s = 1.0f / (1.0f + e);
    return vf_fma(2.0f * x * s * (e * s) * CPU_GELU_SCALE, vf_fma(3.0f * 0.044715f * x, x, vf_splat(1.0f)), s);
}

#endif
