// Encodes and decodes a file of fp32 values with llmc/wire_format.h, for dev/test_wire_format.py:
//   wire_format_tool FORMAT IN.f32 ENCODED.bin DECODED.f32
// writes the encoding (wire_bytes(FORMAT, n) bytes) and the values decoded from it.
#include <stdio.h>
#include <stdlib.h>
#include "../llmc/utils.h"
#include "../llmc/wire_format.h"

int main(int argc, char** argv) {
    if (argc != 5) { fail("usage: %s fp32|bf16|int8|int4 IN.f32 ENCODED.bin DECODED.f32", argv[0]); }
    int f = wire_format_from_name(argv[1]);
    if (f < 0) { fail("%s: not a wire format (fp32, bf16, int8, int4)", argv[1]); }
    FILE* in = fopen_check(argv[2], "rb");
    fseek(in, 0, SEEK_END);
    size_t n = (size_t)ftell(in) / 4;
    fseek(in, 0, SEEK_SET);
    float* x = (float*)malloc_check(n * 4 + 4);
    fread_check(x, 4, n, in, argv[2], "values");
    fclose(in);
    size_t bytes = wire_bytes(f, n);
    unsigned char* enc = (unsigned char*)malloc_check(bytes + 1);
    wire_encode(f, x, n, enc);
    wire_decode(f, enc, n, x);
    FILE* out = fopen_check(argv[3], "wb");
    fwrite_check(enc, 1, bytes, out, argv[3]);
    fclose(out);
    out = fopen_check(argv[4], "wb");
    fwrite_check(x, 4, n, out, argv[4]);
    fclose(out);
    free(enc);
    free(x);
    return 0;
}
