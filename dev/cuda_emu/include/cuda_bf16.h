// cuda_bf16.h (emulator): __nv_bfloat16 and __nv_bfloat162 as CUDA's cuda_bf16.h describes them.
// Conversions from float round to nearest even (NaN stays NaN); arithmetic is done in float and
// rounded back, as the device operators do.
#ifndef EMU_CUDA_BF16_H
#define EMU_CUDA_BF16_H
#include "emu_cuda.h"

namespace emu {
inline unsigned short f32_to_bf16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
inline unsigned short f32_to_bf16_rz(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return (unsigned short)(u >> 16);
}
// double -> bf16 rounded once (to nearest even): through float rounded to odd, which keeps the
// information a second rounding needs (float has 16 more mantissa bits than bf16)
inline unsigned short f64_to_bf16_rn(double d) {
    if (d != d) return 0x7fff;
    float f = (float)d;
    if ((double)f != d && std::isfinite(d)) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if (std::fabs((double)f) > std::fabs(d)) u -= 1;  // toward zero, then make the last bit odd
        u |= 1u;
        memcpy(&f, &u, 4);
    }
    return f32_to_bf16_rn(f);
}
inline float bf16_to_f32(unsigned short h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
}

struct __nv_bfloat16_raw { unsigned short x; };

struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(emu::f32_to_bf16_rn(f)) {}
    __nv_bfloat16(double d) : __x(emu::f64_to_bf16_rn(d)) {}
    __nv_bfloat16(int i) : __x(emu::f32_to_bf16_rn((float)i)) {}
    __nv_bfloat16(unsigned int i) : __x(emu::f32_to_bf16_rn((float)i)) {}
    __nv_bfloat16(long long i) : __x(emu::f32_to_bf16_rn((float)i)) {}
    __nv_bfloat16(unsigned long long i) : __x(emu::f32_to_bf16_rn((float)i)) {}
    operator float() const { return emu::bf16_to_f32(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
    __nv_bfloat16& operator=(float f) { __x = emu::f32_to_bf16_rn(f); return *this; }
    __nv_bfloat16& operator=(double d) { __x = emu::f64_to_bf16_rn(d); return *this; }
    __nv_bfloat16& operator+=(__nv_bfloat16 o) { return *this = (float)*this + (float)o; }
    __nv_bfloat16& operator-=(__nv_bfloat16 o) { return *this = (float)*this - (float)o; }
    __nv_bfloat16& operator*=(__nv_bfloat16 o) { return *this = (float)*this * (float)o; }
    __nv_bfloat16& operator/=(__nv_bfloat16 o) { return *this = (float)*this / (float)o; }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat162 nv_bfloat162;

#define EMU_BF16_BINOP(op) \
    inline __nv_bfloat16 operator op(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a op (float)b); } \
    inline __nv_bfloat162 operator op(__nv_bfloat162 a, __nv_bfloat162 b) { return __nv_bfloat162(a.x op b.x, a.y op b.y); }
EMU_BF16_BINOP(+) EMU_BF16_BINOP(-) EMU_BF16_BINOP(*) EMU_BF16_BINOP(/)
#undef EMU_BF16_BINOP
#define EMU_BF16_CMP(op) inline bool operator op(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)a op (float)b; }
EMU_BF16_CMP(==) EMU_BF16_CMP(!=) EMU_BF16_CMP(<) EMU_BF16_CMP(<=) EMU_BF16_CMP(>) EMU_BF16_CMP(>=)
#undef EMU_BF16_CMP
inline __nv_bfloat16 operator-(__nv_bfloat16 a) { __nv_bfloat16 r = a; r.__x ^= 0x8000; return r; }
inline __nv_bfloat16 operator+(__nv_bfloat16 a) { return a; }

// conversions
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { return __nv_bfloat16_raw{emu::f32_to_bf16_rz(f)}; }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16((float)i); }
inline int __bfloat162int_rn(__nv_bfloat16 h) { return (int)nearbyintf((float)h); }
inline int __bfloat162int_rz(__nv_bfloat16 h) { return (int)(float)h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16_raw{u}; }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16_raw{(unsigned short)s}; }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162(f, f); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __nv_bfloat162(f.x, f.y); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return make_float2((float)h.x, (float)h.y); }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 h) { return __nv_bfloat162(h, h); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162(a, b); }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }

// arithmetic
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return a / b; }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) { return __nv_bfloat16(fmaf(a, b, c)); }
inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return -a; }
inline __nv_bfloat16 __habs(__nv_bfloat16 a) { a.__x &= 0x7fff; return a; }
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(fmaxf(a, b)); }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(fminf(a, b)); }
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return a + b; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return a * b; }
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return __nv_bfloat162(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
inline bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7fff) > 0x7f80; }
inline bool __hisinf(__nv_bfloat16 a) { return (a.__x & 0x7fff) == 0x7f80; }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __nv_bfloat16(expf(a)); }
inline __nv_bfloat16 hlog(__nv_bfloat16 a) { return __nv_bfloat16(logf(a)); }
inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __nv_bfloat16(sqrtf(a)); }
inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __nv_bfloat16(1.0f / sqrtf(a)); }
inline __nv_bfloat16 htanh(__nv_bfloat16 a) { return __nv_bfloat16(tanhf(a)); }

// warp shuffles and atomics of bf16 go through the generic templates; atomicAdd needs overloads
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { EMU_ATOMIC_CHECK(p); __nv_bfloat16 o = *p; *p = o + v; return o; }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) { EMU_ATOMIC_CHECK(p); __nv_bfloat162 o = *p; *p = o + v; return o; }

#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7F80U)
#define CUDART_NAN_BF16 __ushort_as_bfloat16((unsigned short)0x7FFFU)
#define CUDART_MAX_NORMAL_BF16 __ushort_as_bfloat16((unsigned short)0x7F7FU)
#define CUDART_ZERO_BF16 __ushort_as_bfloat16((unsigned short)0x0000U)
#define CUDART_ONE_BF16 __ushort_as_bfloat16((unsigned short)0x3F80U)

#endif
