// emu_16bit.h (emulator): the two 16-bit float formats, bfloat16 (8 exponent bits, 7 mantissa bits) and
// IEEE binary16 (5 and 10): their conversions from float and double and back, and what __nv_bfloat16 and
// __half share, written once: the type, the pair type, the compound assignments, arithmetic done in float
// and rounded back by the type's own conversion, comparisons in float, and negation by the sign bit.
// cuda_bf16.h and cuda_fp16.h expand EMU_16BIT.
#ifndef EMU_16BIT_H
#define EMU_16BIT_H
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
inline unsigned short f64_to_f16_rn(double d) { return f32_to_f16_rn((float)d); }
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
}  // namespace emu


// The type T (its bits in __x; also named A), its raw struct RAW and its pair T2 (also named A2): from
// float by TO(f), from double by TO64(d), from integers through float, to float by FROM(bits).
#define EMU_16BIT(T, A, RAW, T2, A2, TO, TO64, FROM)                                                         \
    EMU_16BIT_TYPE(T, RAW, TO, TO64, FROM)                                                                   \
    typedef T A;                                                                                             \
    EMU_16BIT_OPS(T, T2)                                                                                     \
    typedef T2 A2;
#define EMU_16BIT_TYPE(T, RAW, TO, TO64, FROM)                                                               \
    struct RAW { unsigned short x; };                                                                        \
    struct __align__(2) T {                                                                                  \
        unsigned short __x;                                                                                  \
        T() = default;                                                                                       \
        T(RAW r) : __x(r.x) {}                                                                               \
        T(float f) : __x(TO(f)) {}                                                                           \
        T(double d) : __x(TO64(d)) {}                                                                        \
        T(int i) : __x(TO((float)i)) {}                                                                      \
        T(unsigned int i) : __x(TO((float)i)) {}                                                             \
        T(long long i) : __x(TO((float)i)) {}                                                                \
        T(unsigned long long i) : __x(TO((float)i)) {}                                                       \
        operator float() const { return FROM(__x); }                                                         \
        operator RAW() const { return RAW{__x}; }                                                            \
        T& operator=(float f) { __x = TO(f); return *this; }                                                 \
        T& operator=(double d) { __x = TO64(d); return *this; }                                              \
    };
#define EMU_16BIT_OPS(T, T2)                                                                                 \
    inline T& operator+=(T& a, T b) { return a = (float)a + (float)b; }                                      \
    inline T& operator-=(T& a, T b) { return a = (float)a - (float)b; }                                      \
    inline T& operator*=(T& a, T b) { return a = (float)a * (float)b; }                                      \
    inline T& operator/=(T& a, T b) { return a = (float)a / (float)b; }                                      \
    struct __align__(4) T2 {                                                                                 \
        T x, y;                                                                                              \
        T2() = default;                                                                                      \
        T2(T a, T b) : x(a), y(b) {}                                                                         \
    };                                                                                                       \
    EMU_16BIT_BINOP(T, T2, +) EMU_16BIT_BINOP(T, T2, -) EMU_16BIT_BINOP(T, T2, *) EMU_16BIT_BINOP(T, T2, /)  \
    EMU_16BIT_CMP(T, ==) EMU_16BIT_CMP(T, !=) EMU_16BIT_CMP(T, <) EMU_16BIT_CMP(T, <=) EMU_16BIT_CMP(T, >)   \
    EMU_16BIT_CMP(T, >=)                                                                                     \
    inline T operator-(T a) { T r = a; r.__x ^= 0x8000; return r; }                                          \
    inline T operator+(T a) { return a; }
#define EMU_16BIT_BINOP(T, T2, op)                                               \
    inline T operator op(T a, T b) { return T((float)a op (float)b); }           \
    inline T2 operator op(T2 a, T2 b) { return T2(a.x op b.x, a.y op b.y); }
#define EMU_16BIT_CMP(T, op) inline bool operator op(T a, T b) { return (float)a op (float)b; }

#endif
