// Host <-> device copies for the kernel checks (dev/cuda/*.cu, dev/gpu_kernels/test_kernels.cu):
// floats as they are, or as floatX (bf16 in the BF16 build).
#ifndef DEV_CUDA_COPIES_CUH
#define DEV_CUDA_COPIES_CUH

#include <math.h>
#include <stdint.h>
#include "../../llmc/utils.h"
#include "../../llmc/gpt2_model.h" // float_to_bf16, bf16_to_float
#include "../../llmc/cuda_common.cuh"

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

// a device copy of n host values of any type, as they are
template <class T>
static T* to_device_copy(const T* x, size_t n) {
    T* d;
    cudaCheck(cudaMalloc((void**)&d, n * sizeof(T)));
    cudaCheck(cudaMemcpy(d, x, n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static float* to_device_f(const float* x, size_t n) { return to_device_copy(x, n); }

static float* to_host_f(const float* d, size_t n) {
    float* x = (float*)malloc_check(n * sizeof(float));
    cudaCheck(cudaMemcpy(x, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return x;
}

// max |got - want| / max(1, max |want|): the error a kernel check compares with its tolerance
static float rel_max_error(const float* got, const float* want, size_t n) {
    float err = 0.0f, scale = 1.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(got[i] - want[i]);
        if (!(d <= err)) { err = d; }
        if (fabsf(want[i]) > scale) { scale = fabsf(want[i]); }
    }
    return err / scale;
}

#endif
