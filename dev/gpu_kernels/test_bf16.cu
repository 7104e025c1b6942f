// BF16 kernel tests: stochastic rounding and the BF16 AdamW. round_stochastic must return one of
// the two bf16 neighbours of x, be unbiased (the mean of many roundings is x), keep exact values
// exact and pass inf through; AdamW with master weights must update the fp32 master as the fp32
// formula does (to an ulp) and write a neighbour of it, and without master weights update from the
// bf16 parameter itself. Built in BF16 (the default precision); exits non-zero on any mismatch.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/utils.h"
#include "../../llmc/gpt2_model.h"
#include "../../llmc/cuda_common.cuh"
#include "../../llmc/adamw.cuh"

#ifdef ENABLE_FP32
#error "the bf16 tests need the BF16 build (no -DENABLE_FP32)"
#endif

#define SAMPLES 4096

static int failures = 0;

static void report(const char* what, int ok, const char* detail) {
    printf("%-4s %-40s %s\n", ok ? "ok" : "FAIL", what, detail);
    if (!ok) { failures++; }
}

// out[j * SAMPLES + s] = round_stochastic(x[j]) with the bits of sample s.
__global__ void round_kernel(floatX* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * SAMPLES) { return; }
    out[i] = round_stochastic(x[i / SAMPLES], hash_u32((uint32_t)(i % SAMPLES), 12345u));
}

static float bf16_down(float x) { // largest bf16 <= x (x finite and positive here)
    uint32_t u;
    memcpy(&u, &x, 4);
    return bf16_to_float((uint16_t)(u >> 16));
}

static void test_rounding(void) {
    const float xs[] = {1.0f + 1.0f / 512.0f, 3.14159265f, -2.71828183f, 1e-3f * 1.3f, 1.5f, 65504.75f, INFINITY};
    const int n = (int)(sizeof(xs) / sizeof(xs[0]));
    float* d_x;
    floatX* d_out;
    cudaCheck(cudaMalloc((void**)&d_x, sizeof(xs)));
    cudaCheck(cudaMalloc((void**)&d_out, (size_t)n * SAMPLES * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d_x, xs, sizeof(xs), cudaMemcpyHostToDevice));
    round_kernel<<<ceil_div_u((size_t)n * SAMPLES, 256), 256>>>(d_out, d_x, n);
    cudaLaunchCheck();
    uint16_t* out = (uint16_t*)malloc_check((size_t)n * SAMPLES * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(out, d_out, (size_t)n * SAMPLES * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++) {
        float x = xs[j], ax = fabsf(x);
        char what[64], detail[160];
        snprintf(what, sizeof(what), "round_stochastic(%g)", x);
        if (isinf(x)) {
            int all_inf = 1;
            for (int s = 0; s < SAMPLES; s++) { all_inf &= isinf(bf16_to_float(out[j * SAMPLES + s])); }
            report(what, all_inf, "inf stays inf");
            continue;
        }
        float lo = bf16_down(ax), hi = lo == ax ? lo : bf16_to_float(float_to_bf16(lo) + 1);
        double mean = 0.0;
        int neighbours = 1;
        for (int s = 0; s < SAMPLES; s++) {
            float r = fabsf(bf16_to_float(out[j * SAMPLES + s]));
            neighbours &= (r == lo || r == hi);
            mean += r;
        }
        mean /= SAMPLES;
        // the mean of SAMPLES Bernoulli choices between lo and hi: 5 standard deviations
        double sd = (hi - lo) * 0.5 / sqrt((double)SAMPLES);
        int unbiased = fabs(mean - ax) <= 5.0 * sd + 1e-12 * ax;
        snprintf(detail, sizeof(detail), "neighbours %s %s | mean %.9g vs %.9g (5 sd %.2g)", neighbours ? "yes" : "NO",
                 lo == hi ? "(exact)" : "", mean, ax, 5.0 * sd);
        report(what, neighbours && unbiased, detail);
    }
    free(out);
    cudaFree(d_x);
    cudaFree(d_out);
}

static void test_adamw(int with_master) {
    const size_t n = 10007;
    float *p = (float*)malloc_check(n * sizeof(float)), *g = (float*)malloc_check(n * sizeof(float));
    uint16_t *p16 = (uint16_t*)malloc_check(n * sizeof(uint16_t)), *g16 = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        p[i] = sinf((float)i) * 0.5f;
        g[i] = bf16_to_float(float_to_bf16(cosf((float)i * 0.7f) * 0.1f));
        p16[i] = float_to_bf16(p[i]);
        g16[i] = float_to_bf16(g[i]);
    }
    float *d_master = NULL, *d_m, *d_v;
    floatX *d_p, *d_g;
    cudaCheck(cudaMalloc((void**)&d_p, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_g, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_m, n * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&d_v, n * sizeof(float)));
    cudaCheck(cudaMemcpy(d_p, p16, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_g, g16, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(d_m, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(d_v, 0, n * sizeof(float)));
    if (with_master) {
        cudaCheck(cudaMalloc((void**)&d_master, n * sizeof(float)));
        cudaCheck(cudaMemcpy(d_master, p, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    float bias1 = 1.0f - b1, bias2 = 1.0f - b2; // step 1
    adamw_update(d_p, d_master, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, scale, bias1, bias2, 99u);
    float* master = (float*)malloc_check(n * sizeof(float));
    if (with_master) { cudaCheck(cudaMemcpy(master, d_master, n * sizeof(float), cudaMemcpyDeviceToHost)); }
    cudaCheck(cudaMemcpy(p16, d_p, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    size_t bad_master = 0, bad_param = 0;
    for (size_t i = 0; i < n; i++) {
        float start = with_master ? p[i] : bf16_to_float(float_to_bf16(p[i]));
        float gi = g[i] * scale;
        float mi = (1.0f - b1) * gi, vi = (1.0f - b2) * gi * gi;
        float want = start - lr * ((mi / bias1) / (sqrtf(vi / bias2) + eps) + wd * start);
        if (with_master && fabsf(master[i] - want) > 1e-7f * (1.0f + fabsf(want))) { bad_master++; } // fused multiply-adds may differ
        float got = bf16_to_float(p16[i]);
        float lo = bf16_down(fabsf(want)), hi = bf16_to_float(float_to_bf16(lo) + 1);
        if (!(fabsf(got) == lo || fabsf(got) == hi) || (got < 0) != (want < 0)) { bad_param++; }
    }
    char what[64], detail[128];
    snprintf(what, sizeof(what), "adamw bf16, master weights %d", with_master);
    snprintf(detail, sizeof(detail), "master mismatches %zu, params not a bf16 neighbour %zu (of %zu)", bad_master,
             bad_param, n);
    report(what, bad_master == 0 && bad_param == 0, detail);
    free(p); free(g); free(p16); free(g16); free(master);
    cudaFree(d_p); cudaFree(d_g); cudaFree(d_m); cudaFree(d_v);
    if (d_master) { cudaFree(d_master); }
}

int main(void) {
    test_rounding();
    test_adamw(1);
    test_adamw(0);
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
