// GEMM micro-benchmark: llmc/cpu_matmul.h against OpenBLAS cblas_sgemm on the trainer's shapes
// (GPT-2 124M, 256 tokens), forward and both backward products. Prints GFLOP/s of each.
//   gcc -O3 -march=native -fopenmp -Illmc dev/bench/gemm_bench.c -o build/gemm_bench
//     (one line)  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -l:libopenblas.so.0 -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp
#include <cblas.h>
#include <stdio.h>
#include "cpu_matmul.h"

static double seconds(void) { return omp_get_wtime(); }

static void fill(float* x, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; x[i] = (float)(s >> 8) / 16777216.0f - 0.5f; }
}

int main(void) {
    int shapes[][3] = {{256, 768, 2304}, {256, 768, 768}, {256, 768, 3072}, {256, 3072, 768}, {256, 768, 50304}};
    for (int s = 0; s < 5; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C), *y = malloc(sizeof(float) * N * OC);
        float *dx = malloc(sizeof(float) * N * C), *dw = calloc((size_t)OC * C, sizeof(float));
        fill(x, (size_t)N * C, 1); fill(w, (size_t)OC * C, 2); fill(y, (size_t)N * OC, 3);
        double flops = 2.0 * N * C * OC, best[2][3] = {{1e9, 1e9, 1e9}, {1e9, 1e9, 1e9}};
        for (int rep = 0; rep < 5; rep++) {
            double t0 = seconds(); gemm(N, OC, C, x, C, 1, w, 1, C, y, OC, 0);
            double t1 = seconds(); gemm(N, C, OC, y, OC, 1, w, C, 1, dx, C, 0);
            double t2 = seconds(); gemm(OC, C, N, y, 1, OC, x, C, 1, dw, C, 1);
            double t3 = seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, x, C, w, C, 0.0f, y, OC);
            double t4 = seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, y, OC, w, C, 0.0f, dx, C);
            double t5 = seconds();
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, y, OC, x, C, 1.0f, dw, C);
            double t6 = seconds();
            double t[2][3] = {{t1 - t0, t2 - t1, t3 - t2}, {t4 - t3, t5 - t4, t6 - t5}};
            for (int i = 0; i < 2; i++) for (int j = 0; j < 3; j++) if (t[i][j] < best[i][j]) best[i][j] = t[i][j];
        }
        printf("N %4d C %4d OC %5d | ours fwd %6.1f dinp %6.1f dw %6.1f | openblas fwd %6.1f dinp %6.1f dw %6.1f GFLOP/s\n",
               N, C, OC, flops / best[0][0] / 1e9, flops / best[0][1] / 1e9, flops / best[0][2] / 1e9,
               flops / best[1][0] / 1e9, flops / best[1][1] / 1e9, flops / best[1][2] / 1e9);
        free(x); free(w); free(y); free(dx); free(dw);
    }
    return 0;
}
