// common.h: helpers of the broken/fixed program pairs (plain CUDA: they build with nvcc too).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cuda_runtime.h>
#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    printf("%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)
// exit status: 0 when got == want for all n, 1 (with the first mismatch printed) otherwise
static inline int expect_equal(const float* got, const float* want, int n, const char* what) {
    for (int i = 0; i < n; i++)
        if (!(std::fabs(got[i] - want[i]) <= 1e-4f * (1.0f + std::fabs(want[i])))) {
            printf("%s: element %d is %g, want %g\n", what, i, got[i], want[i]);
            return 1;
        }
    printf("%s: ok\n", what);
    return 0;
}
// a device copy of n host floats
static inline float* device_copy(const float* h, int n) {
    float* d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
// n floats of device memory filled with NaN (an element the kernel does not write fails the check)
static inline float* device_nan(int n) {
    float* d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemset(d, 0xff, n * sizeof(float)));
    return d;
}
// after a launch: its error, then the n floats at d against want (expect_equal's exit status)
static inline int expect_device(const float* d, const float* want, int n, const char* what) {
    CK(cudaGetLastError());
    float* got = (float*)malloc(n * sizeof(float));
    CK(cudaMemcpy(got, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    int rc = expect_equal(got, want, n, what);
    free(got);
    return rc;
}
