// Matmuls of the CPU trainer, y = x W^T + b with W stored (out, in), and their backward.
// Every output element is produced by exactly one thread in a fixed order, so results are
// deterministic for a given build whatever the thread count.
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include <stddef.h>

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), bias may be NULL
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * OC;
        for (int o = 0; o < OC; o++) {
            const float* w = weight + (size_t)o * C;
            float sum = 0.0f;
            #pragma omp simd reduction(+ : sum)
            for (int c = 0; c < C; c++) { sum += x[c] * w[c]; }
            y[o] = (bias ? bias[o] : 0.0f) + sum;
        }
    }
}

// dinp (N, C) = dout @ weight (written); dweight (OC, C) += dout^T @ inp; dbias (OC) += column
// sums of dout (dbias may be NULL).
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int C, int OC) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* dx = dinp + (size_t)n * C;
        const float* dy = dout + (size_t)n * OC;
        for (int c = 0; c < C; c++) { dx[c] = 0.0f; }
        for (int o = 0; o < OC; o++) {
            const float* w = weight + (size_t)o * C;
            float g = dy[o];
            #pragma omp simd
            for (int c = 0; c < C; c++) { dx[c] += g * w[c]; }
        }
    }
    #pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        float* dw = dweight + (size_t)o * C;
        float db = 0.0f;
        for (int n = 0; n < N; n++) {
            float g = dout[(size_t)n * OC + o];
            const float* x = inp + (size_t)n * C;
            db += g;
            #pragma omp simd
            for (int c = 0; c < C; c++) { dw[c] += g * x[c]; }
        }
        if (dbias) { dbias[o] += db; }
    }
}

#endif
