// Encodes and decodes a file of fp32 values with llmc/wire_format.h, for dev/test_wire_format.py:
//   wire_format_tool FORMAT DENSITY MULT IN.f32 ENCODED.bin DECODED.f32
// writes the encoding (wire_spec_bytes bytes; DENSITY 0: every value, else -rk's top-k with MULT)
// and the values decoded from it.
#include <stdio.h>
#include <stdlib.h>
#include "../llmc/utils.h"
#include "../llmc/wire_format.h"

int main(int argc, char** argv) {
    if (argc != 7) { fail("usage: %s fp32|bf16|int8|int4 DENSITY MULT IN.f32 ENCODED.bin DECODED.f32", argv[0]); }
    WireSpec w = {wire_format_from_name(argv[1]), strtof(argv[2], NULL), atoi(argv[3])};
    if (w.format < 0) { fail("%s: not a wire format (fp32, bf16, int8, int4)", argv[1]); }
    FILE* in = fopen_check(argv[4], "rb");
    fseek(in, 0, SEEK_END);
    size_t n = (size_t)ftell(in) / 4;
    fseek(in, 0, SEEK_SET);
    float* x = (float*)malloc_check(n * 4 + 4);
    fread_check(x, 4, n, in, argv[4], "values");
    fclose(in);
    size_t bytes = wire_spec_bytes(&w, n);
    unsigned char* enc = (unsigned char*)malloc_check(bytes + 1);
    wire_spec_encode(&w, x, n, enc);
    wire_spec_decode(&w, enc, n, x);
    FILE* out = fopen_check(argv[5], "wb");
    fwrite_check(enc, 1, bytes, out, argv[5]);
    fclose(out);
    out = fopen_check(argv[6], "wb");
    fwrite_check(x, 4, n, out, argv[6]);
    fclose(out);
    free(enc);
    free(x);
    return 0;
}
