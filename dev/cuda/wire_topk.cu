// -rk on the GPU, standalone: llmc/wire_kernels.cuh's top-k kernels against the CPU trainer's
// llmc/wire_format.h, bit for bit. Slices of several lengths (one value, under a chunk, whole chunks,
// a short last chunk), every format, densities down to one value a chunk, mult 1 and R; values drawn
// from a few levels so that many magnitudes tie (the lower index must win), zeros and signs mixed.
// Checked: each slice's encoding (bytes), the residual left in place, the decoding (decoded values,
// 0 where not kept) and an owner's fp32 sum over R replicas in replica order (wire_spec_decode_sum).
// And the shared vector of the formats' edge cases (special_values: NaN, infinities, -0, denormals,
// exact rounding ties, a block of NaNs, a block of denormals) in every format, dense and top-k: the
// encodings bit for bit, the residuals, decodings and sums equal or both NaN (a NaN's bits are the
// hardware's: x86 and a GPU make different ones).
//   dev/cuda_emu/emucc -O1 -o wire_topk dev/cuda/wire_topk.cu && ./wire_topk
#include "common.cuh"
#include "../../llmc/wire_kernels.cuh"

#define R 2

static int bits_equal(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// R slices of n values with planted ties: multiples of 1/8 in [-2, 2], a tenth of them 0.
static float* tied_values(size_t count) {
    float* x = (float*)malloc_check(count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        float u = rng_uniform(&dev_rng);
        x[i] = u < 0.1f ? 0.0f : floorf((rng_uniform(&dev_rng) * 4.0f - 2.0f) * 8.0f) / 8.0f;
    }
    return x;
}

// The edge cases of the formats, blocks of WIRE_BLOCK values (a slice of n = 6 blocks and 37):
// block 0 exact ties of int8's and int4's levels (k + 1/2 steps of a power-of-two scale) with +0 and
// -0; block 1 one NaN among normal values; block 2 +inf among them; block 3 only NaNs; block 4 only
// denormals and -0; block 5 -inf, a NaN, a denormal and ties; then normal values. Slice s of the
// count / n is the vector times (-1)^s.
#define SPECIAL_N (6 * WIRE_BLOCK + 37)
static float* special_values(size_t count) {
    float* x = (float*)malloc_check(count * sizeof(float));
    const float s = ldexpf(1.0f, -10), tiny = ldexpf(1.0f, -140);
    for (size_t i = 0; i < count; i++) {
        size_t j = i % SPECIAL_N, b = j / WIRE_BLOCK, k = j % WIRE_BLOCK;
        float sign = (i / SPECIAL_N) % 2 ? -1.0f : 1.0f, v;
        float tie = ((float)(k % 14) - 6.5f) * s * (k % 3 == 0 ? 1.0f : 18.0f); // int4's and int8's half steps
        switch (b) {
        case 0: v = k == 0 ? 127.0f * s * 18.0f : k == 1 ? 0.0f : k == 2 ? -0.0f : tie; break;
        case 1: v = k == 5 ? NAN : tie; break;
        case 2: v = k == 9 ? INFINITY : tie; break;
        case 3: v = NAN; break;
        case 4: v = k % 5 == 0 ? -0.0f : tiny * (float)(k % 23) * (k % 2 ? -1.0f : 1.0f); break;
        case 5: v = k == 0 ? -INFINITY : k == 1 ? NAN : k == 2 ? tiny : tie; break;
        default: v = (rng_uniform(&dev_rng) * 2.0f - 1.0f) * 0.25f;
        }
        x[i] = sign * v;
    }
    return x;
}

// Equal bits, or both NaN (x86 and a GPU make NaNs of different bits).
static int values_equal(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(a + i, b + i, 4) != 0 && !(a[i] != a[i] && b[i] != b[i])) { return 0; }
    }
    return 1;
}

// One case: returns 1 when the encodings, residuals, decodings and sums equal the CPU's (special:
// the edge-case vector instead of tied values, n = SPECIAL_N).
static int check_case(size_t n, int f, float density, int mult, int special) {
    WireSpec w = {f, density, mult};
    size_t sb = wire_spec_bytes(&w, n);
    float* x = special ? special_values((size_t)R * R * n) : tied_values((size_t)R * R * n); // replica r's R slices at r * R * n
    uint8_t* want = (uint8_t*)malloc_check((size_t)R * R * sb);
    float* want_res = (float*)malloc_check((size_t)R * R * n * sizeof(float));
    float* want_dec = (float*)malloc_check((size_t)R * R * n * sizeof(float));
    float* want_sum = (float*)calloc_check((size_t)R * n, sizeof(float));
    float* tmp = (float*)malloc_check(n * sizeof(float));
    for (size_t s = 0; s < (size_t)R * R; s++) {
        memcpy(want_res + s * n, x + s * n, n * sizeof(float));
        wire_encode_feedback(&w, x + s * n, n, want + s * sb, want_res + s * n, tmp);
        wire_spec_decode(&w, want + s * sb, n, want_dec + s * n);
    }
    for (int j = 0; j < R; j++) { // the owner of slice j: decoded replicas summed in order
        memcpy(want_sum + j * n, want_dec + (size_t)j * n, n * sizeof(float));
        for (int r = 1; r < R; r++) {
            for (size_t i = 0; i < n; i++) { want_sum[j * n + i] += want_dec[((size_t)r * R + j) * n + i]; }
        }
    }
    float* d_x;
    float* d_sum;
    uint8_t* d_enc;
    size_t all = (size_t)R * R * n * sizeof(float);
    cudaCheck(cudaMalloc(&d_x, all));
    cudaCheck(cudaMalloc(&d_sum, (size_t)R * n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_enc, (size_t)R * R * sb + 1));
    cudaCheck(cudaMemcpy(d_x, x, all, cudaMemcpyHostToDevice));
    for (int r = 0; r < R; r++) { // each replica encodes its R slices (leaving the residual)
        wire_spec_encode_slices(&w, d_x + (size_t)r * R * n, n, R, d_enc + (size_t)r * R * sb, 1, 0);
    }
    wire_spec_decode_sum(&w, d_sum, d_enc, n, R, R, 0); // R slices, summed over R replicas
    uint8_t* got = (uint8_t*)malloc_check((size_t)R * R * sb + 1);
    float* got_x = (float*)malloc_check(all);
    float* got_sum = (float*)malloc_check((size_t)R * n * sizeof(float));
    cudaCheck(cudaMemcpy(got, d_enc, (size_t)R * R * sb, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(got_x, d_x, all, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(got_sum, d_sum, (size_t)R * n * sizeof(float), cudaMemcpyDeviceToHost));
    int enc_ok = bits_equal(got, want, (size_t)R * R * sb), res_ok = values_equal(got_x, want_res, (size_t)R * R * n);
    int sum_ok = values_equal(got_sum, want_sum, (size_t)R * n);
    wire_spec_decode_sum(&w, d_x, d_enc, n, R * R, 1, 0); // each encoding decoded: 0 where not kept
    cudaCheck(cudaMemcpy(got_x, d_x, all, cudaMemcpyDeviceToHost));
    int dec_ok = values_equal(got_x, want_dec, (size_t)R * R * n);
    int ok = enc_ok && res_ok && sum_ok && dec_ok;
    printf("%-4s %s%s n %-6zu -rk %-6g mult %d: %zu bytes a slice; encoding %s, residual %s, decoding %s, sum %s\n",
           ok ? "ok" : "FAIL", wire_format_names[f], special ? " (NaN, inf, -0, denormals, ties)" : "", n, density,
           mult, sb, enc_ok ? "equal" : "DIFFERS",
           res_ok ? "equal" : "DIFFERS", dec_ok ? "equal" : "DIFFERS", sum_ok ? "equal" : "DIFFERS");
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_sum));
    cudaCheck(cudaFree(d_enc));
    void* bufs[] = {x, want, want_res, want_dec, want_sum, tmp, got, got_x, got_sum};
    for (int i = 0; i < 9; i++) { free(bufs[i]); }
    return ok;
}

int main(void) {
    rng_seed(&dev_rng, 26);
    const size_t lengths[] = {1, 300, 4096, 2 * 4096 + 1000};
    const float densities[] = {0.0002f, 0.05f, 0.3f, 1.0f};
    int failures = 0;
    for (int f = 0; f < WIRE_FORMATS; f++) {
        for (int li = 0; li < 4; li++) {
            for (int di = 0; di < 4; di++) {
                if ((li + di + f) % 2 != 0 && lengths[li] > 4096) { continue; } // half the long cases: time
                failures += !check_case(lengths[li], f, densities[di], 1 + (di + f) % R, 0);
            }
        }
    }
    for (int f = WIRE_BF16; f < WIRE_FORMATS; f++) { // the edge-case vector, dense and top-k
        failures += !check_case(SPECIAL_N, f, 0.0f, 1, 1);
        failures += !check_case(SPECIAL_N, f, 0.25f, 1, 1); // keeps every NaN and infinity and more
        failures += !check_case(SPECIAL_N, f, 0.25f, R, 1);
    }
    if (failures) { printf("FAIL %d cases\n", failures); }
    return failures ? 1 : 0;
}
