// Shared by the standalone kernel files of dev/cuda/: random inputs, host/device copies in floatX,
// the error report against a CPU reference, and a timing loop that runs only on a real GPU.
#ifndef DEV_CUDA_COMMON_CUH
#define DEV_CUDA_COMMON_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/utils.h"
#include "../../llmc/rng.h"
#include "../../llmc/gpt2_model.h" // float_to_bf16, bf16_to_float
#include "../../llmc/cuda_common.cuh"
#include "copies.cuh"

static Rng dev_rng;
static int dev_failures = 0;

static float* host_random(size_t n, float scale) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = (rng_uniform(&dev_rng) * 2.0f - 1.0f) * scale; }
    return x;
}

// Tolerance of max |GPU - CPU| / max(1, max |CPU|): fp32 rounding in FP32, a few bf16 ulps in BF16.
#ifdef ENABLE_FP32
#define DEV_TOL 1e-5f
#else
#define DEV_TOL 2e-2f
#endif

static void report(const char* what, const float* got, const float* want, size_t n) {
    float err = rel_max_error(got, want, n);
    int ok = err <= DEV_TOL;
    printf("%-4s %-44s n %-8zu error %.2e (tolerance %.0e)\n", ok ? "ok" : "FAIL", what, n, err, DEV_TOL);
    if (!ok) { dev_failures++; }
}

// report() under the name "vVERSION WHAT".
static void report_v(int version, const char* what, const float* got, const float* want, size_t n) {
    char name[160];
    snprintf(name, sizeof(name), "v%d %s", version, what);
    report(name, got, want, n);
}

// 1 on a real GPU; under the emulator or without a device, says so once and returns 0.
static int gpu_present(void) {
#ifdef EMU_CUDA
    static int told = 0;
    if (!told) { printf("no GPU: correctness only (the CUDA emulator)\n"); told = 1; }
    return 0;
#else
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no GPU: correctness only\n");
        return 0;
    }
    return 1;
#endif
}

// Mean time of launch() over reps runs after a warm-up, and the bandwidth of `bytes` per run.
template <class F>
static void time_it(const char* what, F launch, double bytes, double flops = 0.0, int reps = 20) {
    if (!gpu_present()) { return; }
    launch();
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) { launch(); }
    cudaCheck(cudaEventRecord(b));
    cudaCheck(cudaEventSynchronize(b));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    double s = ms / 1e3 / reps;
    printf("time %-44s %9.3f us  %8.1f GB/s  %8.2f TFLOP/s (measured)\n", what, s * 1e6, bytes / s / 1e9,
           flops / s / 1e12);
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
}

// One line with a hash (FNV-1a) of the bits of n floatX values on the device: dev/tests/52_dev_cuda.sh
// requires the same line under every block schedule (a reduction in a fixed order).
static void print_bits(const char* what, const floatX* d, size_t n) {
    unsigned char* h = (unsigned char*)malloc_check(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    unsigned long long x = 1469598103934665603ull;
    for (size_t i = 0; i < n * sizeof(floatX); i++) { x = (x ^ h[i]) * 1099511628211ull; }
    printf("bits %-44s n %-8zu %016llx\n", what, n, x);
    free(h);
}

static int finish(const char* name) {
    printf("%s: %s, %d failures\n", name, dev_failures ? "FAILED" : "passed", dev_failures);
    return dev_failures ? 1 : 0;
}

#endif
