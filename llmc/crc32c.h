// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum every checkpoint file
// carries, and the replicas' agreement check after each outer step. With SSE4.2 it is the CPU's
// crc32 instruction (the same polynomial), 8 bytes at a time; otherwise slice-by-8 in portable C.
// crc32c_update(0, buf, n) is the CRC of buf; feeding a buffer in pieces, crc = crc32c_update(crc,
// piece, len), gives the same value as one call over the whole. Check value: the CRC of the 9
// bytes "123456789" is 0xE3069283.
#ifndef LLMC_CRC32C_H
#define LLMC_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE4_2__) && defined(__x86_64__)
#include <nmmintrin.h>
#endif

static uint32_t crc32c_table[8][256];
static int crc32c_ready = 0;

// table[0] is the byte-at-a-time table; table[k][b] advances table[k-1][b] by one more zero byte.
static void crc32c_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) { c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u))); }
        crc32c_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++) {
        for (int k = 1; k < 8; k++) {
            uint32_t prev = crc32c_table[k - 1][b];
            crc32c_table[k][b] = (prev >> 8) ^ crc32c_table[0][prev & 0xFF];
        }
    }
    crc32c_ready = 1;
}

static uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    uint32_t c = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
    uint64_t c64 = c;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8); // x86 is little-endian: the bytes in stream order
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--) { c = _mm_crc32_u8(c, *p++); }
    return ~c;
#endif
    if (!crc32c_ready) { crc32c_init(); }
    while (n > 0 && ((uintptr_t)p & 7) != 0) { c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xFF]; n--; }
    while (n >= 8) {
        // little-endian load of 8 bytes, independent of the host's byte order
        uint32_t lo = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        lo ^= c;
        c = crc32c_table[7][lo & 0xFF] ^ crc32c_table[6][(lo >> 8) & 0xFF] ^ crc32c_table[5][(lo >> 16) & 0xFF] ^
            crc32c_table[4][lo >> 24] ^ crc32c_table[3][hi & 0xFF] ^ crc32c_table[2][(hi >> 8) & 0xFF] ^
            crc32c_table[1][(hi >> 16) & 0xFF] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n > 0) { c = (c >> 8) ^ crc32c_table[0][(c ^ *p++) & 0xFF]; n--; }
    return ~c;
}

// The CRC of an open file's bytes from offset on (reads to the end); *bytes receives how many.
static uint32_t crc32c_file_from(FILE* f, long offset, long* bytes) {
    static unsigned char buf[1 << 16];
    uint32_t crc = 0;
    long total = 0;
    fseek(f, offset, SEEK_SET);
    size_t got;
    while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
        crc = crc32c_update(crc, buf, got);
        total += (long)got;
    }
    if (bytes) { *bytes = total; }
    return crc;
}

#endif
