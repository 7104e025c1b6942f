// check.h: helpers shared by the emulator's test programs (real CUDA: they also build with nvcc).
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

static int g_failures = 0;

#define CUDA_CHECK(call)                                                                        \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

// Record a failure (and print it) when cond is false.
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            g_failures++;                                                   \
        }                                                                   \
    } while (0)

// |got - want| <= tol * max(1, |want|)
static inline bool close_to(double got, double want, double tol) {
    return std::fabs(got - want) <= tol * std::fmax(1.0, std::fabs(want));
}

static inline int finish(const char* name) {
    if (g_failures) {
        printf("%s: %d check(s) failed\n", name, g_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}
