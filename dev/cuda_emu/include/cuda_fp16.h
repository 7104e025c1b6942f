// cuda_fp16.h (emulator): __half and __half2 as CUDA's cuda_fp16.h describes them (IEEE binary16).
// Conversions from float round to nearest even (NaN stays NaN, overflow gives infinity); arithmetic is
// done in float and rounded back, as the device operators do.
#ifndef EMU_CUDA_FP16_H
#define EMU_CUDA_FP16_H
#include "emu_16bit.h"

EMU_16BIT(__half, half, __half_raw, __half2, half2, emu::f32_to_f16_rn, emu::f64_to_f16_rn, emu::f16_to_f32)

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
