// Device memory for the GPU trainer and its data-parallel layer: zeroed allocations, and arrays of
// floatX (fp32 or bf16 on the device, llmc/cuda_common.cuh) copied from and to fp32 host arrays
// (bf16 rounded to nearest even on the way up).
#ifndef LLMC_DEVICE_COPY_CUH
#define LLMC_DEVICE_COPY_CUH

#include "cuda_common.cuh"
#include "gpt2_model.h"

static void* device_alloc(size_t bytes) {
    void* p;
    cudaCheck(cudaMalloc(&p, bytes));
    cudaCheck(cudaMemset(p, 0, bytes));
    return p;
}

static void upload_floatX(floatX* dst, const float* src, size_t n) {
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyHostToDevice));
        return;
    }
    uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { tmp[i] = float_to_bf16(src[i]); }
    cudaCheck(cudaMemcpy(dst, tmp, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(tmp);
}

static void download_floatX(float* dst, const floatX* src, size_t n) {
    if (sizeof(floatX) == sizeof(float)) {
        cudaCheck(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost));
        return;
    }
    uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(tmp, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) { dst[i] = bf16_to_float(tmp[i]); }
    free(tmp);
}

#endif
