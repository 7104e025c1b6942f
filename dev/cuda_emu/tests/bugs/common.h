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
