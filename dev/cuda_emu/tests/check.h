// check.h: helpers shared by the emulator's test programs (real CUDA: they also build with nvcc).
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

static int g_failures = 0;

// A call whose result is not `success` ends the program naming it and the library's text for it.
#define CALL_CHECK(type, call, success, text)                                                    \
    do {                                                                                        \
        type e_ = (call);                                                                       \
        if (e_ != (success)) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, text(e_));             \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
#define CUDA_CHECK(call) CALL_CHECK(cudaError_t, call, cudaSuccess, cudaGetErrorString)
#ifdef NCCL_MAJOR // the NCCL programs (nccl.h included first)
#define NCCL_CHECK(call) CALL_CHECK(ncclResult_t, call, ncclSuccess, ncclGetErrorString)
#endif

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
