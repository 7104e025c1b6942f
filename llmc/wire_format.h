// The wire formats of the replica link (-rq fp32|bf16|int8|int4) for both trainers: encoding and
// decoding a run of fp32 values, error feedback, and the bytes a run of n values takes.
//
//   fp32  4 bytes a value, exact.
//   bf16  2 bytes a value: the fp32 bits rounded to nearest even on bit 16 (NaN stays NaN).
//   int8  blocks of WIRE_BLOCK values from the run's start (the last one may be shorter): one fp32
//         scale per block, s = absmax / 127 (fp32 division; NaNs left out of the absmax, a block of
//         NaNs has s = 0), then a signed byte per value, q = rint(x / s) clamped to [-127, 127]
//         (nearest, ties to even; an infinite quotient clamps), q = 0 where s = 0 and where x / s is
//         NaN (x a NaN, or x and s infinite). Both trainers encode every value so, bit for bit.
//         Decoded: q * s.
//   int4  the same with 7 for 127: levels -7..7, two values a byte (even index in the low nibble,
//         two's complement nibbles).
// Layout of an encoded run: the block scales first (int8, int4), then the codes. Rounding is
// nearest only (no stochastic rounding yet).
// Top-k (-rk D, on any format): a run is cut into chunks of WIRE_TOPK_CHUNK values from its start;
// of a chunk of len values only the k = mult * ceil(D * len) (fp32 product; at most len) of largest
// magnitude (the bits of |x|: a NaN above inf) are sent (ties: the lower index), as k uint16 indices
// within the chunk, ascending, then those k values as a run in the format. The others decode as 0.
// Error feedback: the rank adds its residual to the message, sends encode(message), and keeps
// residual = message - decode(encode(message)) in fp32. docs/distributed.md.
#ifndef LLMC_WIRE_FORMAT_H
#define LLMC_WIRE_FORMAT_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "utils.h"

#define WIRE_BLOCK 128
#define WIRE_TOPK_CHUNK 4096

enum { WIRE_FP32, WIRE_BF16, WIRE_INT8, WIRE_INT4, WIRE_FORMATS };
static const char* wire_format_names[WIRE_FORMATS] = {"fp32", "bf16", "int8", "int4"};

// The format named by -rq's value, or -1.
static int wire_format_from_name(const char* name) {
    for (int f = 0; f < WIRE_FORMATS; f++) {
        if (strcmp(name, wire_format_names[f]) == 0) { return f; }
    }
    return -1;
}

static size_t wire_blocks(size_t n) { return (n + WIRE_BLOCK - 1) / WIRE_BLOCK; }

// Bytes of a run of n values in format f (scales included).
static size_t wire_bytes(int f, size_t n) {
    switch (f) {
    case WIRE_BF16: return 2 * n;
    case WIRE_INT8: return 4 * wire_blocks(n) + n;
    case WIRE_INT4: return 4 * wire_blocks(n) + (n + 1) / 2;
    default: return 4 * n;
    }
}

// The largest code of an integer format (127 or 7).
static int wire_levels(int f) { return f == WIRE_INT8 ? 127 : 7; }

static uint16_t wire_bf16_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((b >> 16) | 0x0040u); }
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static float wire_bf16_value(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

// One block's scale: absmax / levels, NaNs left out (as fmaxf would), taken over the bits of |x|
// (their unsigned order is the order of the values) so that the loop vectorises.
static float wire_block_scale(const float* x, size_t n, int levels) {
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        b &= 0x7fffffffu;
        b = b > 0x7f800000u ? 0u : b;
        top = b > top ? b : top;
    }
    float amax;
    memcpy(&amax, &top, 4);
    return amax / (float)levels;
}

// q[0..n) = rint(x / scale) clamped to [-levels, levels]; 0 where x / scale is NaN; all 0 where
// scale is 0.
static void wire_block_codes(const float* __restrict x, size_t n, float scale, int levels, int8_t* __restrict q) {
    if (scale == 0.0f) { memset(q, 0, n); return; }
    float top = (float)levels;
    for (size_t i = 0; i < n; i++) {
        float v = rintf(x[i] / scale);
        v = v != v ? 0.0f : v;
        v = v > top ? top : v;
        v = v < -top ? -top : v;
        q[i] = (int8_t)(int)v;
    }
}

// out (wire_bytes(f, n) bytes) = x[0..n) in format f.
static void wire_encode(int f, const float* __restrict x, size_t n, uint8_t* __restrict out) {
    if (f == WIRE_FP32) { memcpy(out, x, 4 * n); return; }
    if (f == WIRE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h = wire_bf16_bits(x[i]);
            memcpy(out + 2 * i, &h, 2);
        }
        return;
    }
    int levels = wire_levels(f);
    size_t nb = wire_blocks(n);
    uint8_t* codes = out + 4 * nb;
    int8_t q[WIRE_BLOCK];
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * WIRE_BLOCK, len = n - i0 < WIRE_BLOCK ? n - i0 : WIRE_BLOCK;
        float scale = wire_block_scale(x + i0, len, levels);
        memcpy(out + 4 * b, &scale, 4);
        if (f == WIRE_INT8) { wire_block_codes(x + i0, len, scale, levels, (int8_t*)codes + i0); continue; }
        wire_block_codes(x + i0, len, scale, levels, q); // int4: blocks start at even indices
        uint8_t* c = codes + i0 / 2;
        for (size_t j = 0; j + 1 < len; j += 2) { c[j / 2] = (uint8_t)((q[j] & 0xf) | ((q[j + 1] & 0xf) << 4)); }
        if (len & 1) { c[len / 2] = (uint8_t)(q[len - 1] & 0xf); }
    }
}

// x[0..n) = the values of `in` (format f).
static void wire_decode(int f, const uint8_t* __restrict in, size_t n, float* __restrict x) {
    if (f == WIRE_FP32) { memcpy(x, in, 4 * n); return; }
    if (f == WIRE_BF16) {
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            x[i] = wire_bf16_value(h);
        }
        return;
    }
    size_t nb = wire_blocks(n);
    const uint8_t* codes = in + 4 * nb;
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * WIRE_BLOCK, len = n - i0 < WIRE_BLOCK ? n - i0 : WIRE_BLOCK;
        float scale;
        memcpy(&scale, in + 4 * b, 4);
        if (f == WIRE_INT8) {
            for (size_t j = 0; j < len; j++) { x[i0 + j] = (float)(int8_t)codes[i0 + j] * scale; }
            continue;
        }
        const uint8_t* c = codes + i0 / 2;
        for (size_t j = 0; j + 1 < len; j += 2) { // a nibble at the top of a byte, shifted back with its sign
            x[i0 + j] = (float)((int8_t)(uint8_t)(c[j / 2] << 4) >> 4) * scale;
            x[i0 + j + 1] = (float)((int8_t)c[j / 2] >> 4) * scale;
        }
        if (len & 1) { x[i0 + len - 1] = (float)((int8_t)(uint8_t)(c[len / 2] << 4) >> 4) * scale; }
    }
}

// What crosses the link: a format, and the top-k density (0: every value) times mult (the owner's
// sum of R sparse messages keeps R times as many).
typedef struct {
    int format;
    float density;
    int mult;
} WireSpec;

// Values kept of a chunk of len.
static size_t wire_topk_keep(const WireSpec* w, size_t len) {
    size_t k = (size_t)w->mult * (size_t)ceilf(w->density * (float)len);
    return k < len ? k : len;
}

// Bytes of a run of n values.
static size_t wire_spec_bytes(const WireSpec* w, size_t n) {
    if (w->density == 0.0f) { return wire_bytes(w->format, n); }
    size_t bytes = 0;
    for (size_t c = 0; c < n; c += WIRE_TOPK_CHUNK) {
        size_t k = wire_topk_keep(w, n - c < WIRE_TOPK_CHUNK ? n - c : WIRE_TOPK_CHUNK);
        bytes += 2 * k + wire_bytes(w->format, k);
    }
    return bytes;
}

// One chunk of len <= WIRE_TOPK_CHUNK values: the indices (ascending) of the k of largest magnitude,
// ties to the lower index. Magnitudes compare as the bits of |x| (the values' order; a NaN above
// infinity), as the GPU's kernels do. The k-th largest magnitude t is found a byte at a time from
// the top (a histogram of the candidates' next byte, then the byte where the count from the top
// reaches k); then one pass in index order keeps every value above t and the first ones equal to it.
static void wire_topk_select(const float* x, size_t len, size_t k, uint16_t* idx) {
    uint32_t mag[WIRE_TOPK_CHUNK];
    for (size_t i = 0; i < len; i++) {
        memcpy(&mag[i], x + i, 4);
        mag[i] &= 0x7fffffffu;
    }
    uint32_t prefix = 0, mask = 0;
    size_t need = k; // of the values whose top bytes equal prefix, how many are still to keep
    for (int shift = 24; shift >= 0; shift -= 8) {
        size_t hist[256] = {0};
        for (size_t i = 0; i < len; i++) {
            if ((mag[i] & mask) == prefix) { hist[(mag[i] >> shift) & 255u]++; }
        }
        int d = 255;
        while (hist[d] < need) { need -= hist[d]; d--; }
        prefix |= (uint32_t)d << shift;
        mask |= 255u << shift;
    }
    size_t n = 0;
    for (size_t i = 0; i < len && n < k; i++) {
        if (mag[i] > prefix || (mag[i] == prefix && need > 0)) {
            if (mag[i] == prefix) { need--; }
            idx[n++] = (uint16_t)i;
        }
    }
}

// out (wire_spec_bytes(w, n) bytes) = x[0..n).
static void wire_spec_encode(const WireSpec* w, const float* x, size_t n, uint8_t* out) {
    if (w->density == 0.0f) { wire_encode(w->format, x, n, out); return; }
    uint16_t* idx = (uint16_t*)malloc_check(WIRE_TOPK_CHUNK * sizeof(uint16_t));
    float* vals = (float*)malloc_check(WIRE_TOPK_CHUNK * sizeof(float));
    for (size_t c = 0; c < n; c += WIRE_TOPK_CHUNK) {
        size_t len = n - c < WIRE_TOPK_CHUNK ? n - c : WIRE_TOPK_CHUNK, k = wire_topk_keep(w, len);
        wire_topk_select(x + c, len, k, idx);
        for (size_t i = 0; i < k; i++) { vals[i] = x[c + idx[i]]; }
        memcpy(out, idx, 2 * k);
        wire_encode(w->format, vals, k, out + 2 * k);
        out += 2 * k + wire_bytes(w->format, k);
    }
    free(idx);
    free(vals);
}

// x[0..n) = the values of `in`.
static void wire_spec_decode(const WireSpec* w, const uint8_t* in, size_t n, float* x) {
    if (w->density == 0.0f) { wire_decode(w->format, in, n, x); return; }
    float* vals = (float*)malloc_check(WIRE_TOPK_CHUNK * sizeof(float));
    memset(x, 0, n * sizeof(float));
    for (size_t c = 0; c < n; c += WIRE_TOPK_CHUNK) {
        size_t len = n - c < WIRE_TOPK_CHUNK ? n - c : WIRE_TOPK_CHUNK, k = wire_topk_keep(w, len);
        wire_decode(w->format, in + 2 * k, k, vals);
        for (size_t i = 0; i < k; i++) {
            uint16_t at;
            memcpy(&at, in + 2 * i, 2);
            x[c + at] = vals[i];
        }
        in += 2 * k + wire_bytes(w->format, k);
    }
    free(vals);
}

// Error feedback on a message of n values: encodes msg into out, then (residual non-NULL)
// residual = msg - decoded. tmp: n floats of scratch.
static void wire_encode_feedback(const WireSpec* w, const float* msg, size_t n, uint8_t* out, float* residual,
                                 float* tmp) {
    wire_spec_encode(w, msg, n, out);
    if (residual == NULL) { return; }
    wire_spec_decode(w, out, n, tmp);
    for (size_t i = 0; i < n; i++) { residual[i] = msg[i] - tmp[i]; }
}

#endif
