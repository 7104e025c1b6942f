// cuda_fp16.h (emulator): __half and __half2 as CUDA's cuda_fp16.h describes them (IEEE binary16).
// Conversions from float round to nearest even (NaN stays NaN, overflow gives infinity); arithmetic is
// done in float and rounded back, as the device operators do.
#ifndef EMU_CUDA_FP16_H
#define EMU_CUDA_FP16_H
#include "emu_cuda.h"

namespace emu {
inline unsigned short f32_to_f16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (unsigned short)(sign | 0x7fffu);  // NaN
    if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero, round to nearest even
        if (a < 0x33000000u) return (unsigned short)sign;  // below half the smallest subnormal
        int e = (int)(a >> 23);
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - e;  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (unsigned short)(sign | q);
    }
    uint32_t h = ((a - 0x38000000u) >> 13);  // rebias exponent 127 -> 15, keep 10 mantissa bits
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (unsigned short)(sign | h);
}
inline float f16_to_f32(unsigned short h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else {  // subnormal: normalise
        int s = 0;
        while (!(m & 0x400u)) { m <<= 1; s++; }
        u = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}
}

struct __half_raw { unsigned short x; };

struct __align__(2) __half {
    unsigned short __x;
    __half() = default;
    __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(emu::f32_to_f16_rn(f)) {}
    __half(double d) : __x(emu::f32_to_f16_rn((float)d)) {}
    __half(int i) : __x(emu::f32_to_f16_rn((float)i)) {}
    __half(unsigned int i) : __x(emu::f32_to_f16_rn((float)i)) {}
    operator float() const { return emu::f16_to_f32(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
    __half& operator=(float f) { __x = emu::f32_to_f16_rn(f); return *this; }
    __half& operator=(double d) { __x = emu::f32_to_f16_rn((float)d); return *this; }
    __half& operator+=(__half o) { return *this = (float)*this + (float)o; }
    __half& operator-=(__half o) { return *this = (float)*this - (float)o; }
    __half& operator*=(__half o) { return *this = (float)*this * (float)o; }
    __half& operator/=(__half o) { return *this = (float)*this / (float)o; }
};
typedef __half half;

struct __align__(4) __half2 {
    __half x, y;
    __half2() = default;
    __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half2 half2;

#define EMU_F16_BINOP(op) \
    inline __half operator op(__half a, __half b) { return __half((float)a op (float)b); } \
    inline __half2 operator op(__half2 a, __half2 b) { return __half2(a.x op b.x, a.y op b.y); }
EMU_F16_BINOP(+) EMU_F16_BINOP(-) EMU_F16_BINOP(*) EMU_F16_BINOP(/)
#undef EMU_F16_BINOP
#define EMU_F16_CMP(op) inline bool operator op(__half a, __half b) { return (float)a op (float)b; }
EMU_F16_CMP(==) EMU_F16_CMP(!=) EMU_F16_CMP(<) EMU_F16_CMP(<=) EMU_F16_CMP(>) EMU_F16_CMP(>=)
#undef EMU_F16_CMP
inline __half operator-(__half a) { __half r = a; r.__x ^= 0x8000; return r; }

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float __half2float(__half h) { return (float)h; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(a, b); }
inline __half2 __float2half2_rn(float f) { return __half2(f, f); }
inline float2 __half22float2(__half2 h) { return make_float2((float)h.x, (float)h.y); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half_raw{u}; }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hfma(__half a, __half b, __half c) { return __half(fmaf(a, b, c)); }
inline bool __hisnan(__half a) { return (a.__x & 0x7fff) > 0x7c00; }

#endif
