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

static Rng dev_rng;
static int dev_failures = 0;

static float* host_random(size_t n, float scale) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = (rng_uniform(&dev_rng) * 2.0f - 1.0f) * scale; }
    return x;
}

// floatX device copy of n host floats (rounded to nearest in BF16); the host copy is rounded too,
// so the CPU reference sees exactly the device's inputs.
static floatX* to_device_x(float* x, size_t n) {
    floatX* d;
    cudaCheck(cudaMalloc((void**)&d, n * sizeof(floatX)));
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
        return d;
    }
    uint16_t* t = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { t[i] = float_to_bf16(x[i]); x[i] = bf16_to_float(t[i]); }
    cudaCheck(cudaMemcpy(d, t, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(t);
    return d;
}

static float* to_host_x(const floatX* d, size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(x, d, n * sizeof(float), cudaMemcpyDeviceToHost));
        return x;
    }
    uint16_t* t = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(t, d, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) { x[i] = bf16_to_float(t[i]); }
    free(t);
    return x;
}

static float* to_device_f(const float* x, size_t n) {
    float* d;
    cudaCheck(cudaMalloc((void**)&d, n * sizeof(float)));
    cudaCheck(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static float* to_host_f(const float* d, size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    cudaCheck(cudaMemcpy(x, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return x;
}

// Tolerance of max |GPU - CPU| / max(1, max |CPU|): fp32 rounding in FP32, a few bf16 ulps in BF16.
#ifdef ENABLE_FP32
#define DEV_TOL 1e-5f
#else
#define DEV_TOL 2e-2f
#endif

static void report(const char* what, const float* got, const float* want, size_t n) {
    float err = 0.0f, scale = 1.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(got[i] - want[i]);
        if (!(d <= err)) { err = d; }
        if (fabsf(want[i]) > scale) { scale = fabsf(want[i]); }
    }
    err /= scale;
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

static int finish(const char* name) {
    printf("%s: %s, %d failures\n", name, dev_failures ? "FAILED" : "passed", dev_failures);
    return dev_failures ? 1 : 0;
}

#endif
