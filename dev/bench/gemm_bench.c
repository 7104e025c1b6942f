// GEMM micro-benchmark: llmc/cpu_matmul.h against OpenBLAS cblas_sgemm on the CPU trainer's shapes
// (GPT-2 124M at 256 tokens, 6x384 at 1024, the quick start (4 x 256, V 257) at 2048), forward and both backward
// products. Prints GFLOP/s of each and, for ours, the share of this machine's peak
// (llmc/cpu_peak.h on the same threads). With OMP_NUM_THREADS=1 the times are the thread's CPU
// time, so other jobs on the machine change them little: the efficiency of the kernels in
// isolation. With more threads they are wall-clock times.
//   gcc -O3 -march=native -fopenmp -Illmc dev/bench/gemm_bench.c -o build/gemm_bench
//     (one line)  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -l:libopenblas.so.0 -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp
//   OMP_NUM_THREADS=1 build/gemm_bench [first last]   (shape indices, default all 15)
#include <cblas.h>
#include <stdio.h>
#include <time.h>
#include "cpu_matmul.h"
#include "cpu_peak.h"

static double seconds(void) {
    if (omp_get_max_threads() > 1) { return omp_get_wtime(); }
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(float* x, size_t n, unsigned s) {
    for (size_t i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; x[i] = (float)(s >> 8) / 16777216.0f - 0.5f; }
}

// FLOP/s of cpu_peak_chains on every thread, timed like the GEMMs (best of 3)
static double peak_flops(void) {
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = seconds();
        #pragma omp parallel
        cpu_peak_chains(2000000L, 1.0f + omp_get_thread_num() * 1e-3f);
        double t = seconds() - t0;
        if (t < best) { best = t; }
    }
    return 2.0 * CPU_PEAK_W * CPU_PEAK_CHAINS * 2000000.0 * omp_get_max_threads() / best;
}

int main(int argc, char** argv) {
    int shapes[][3] = {{256, 768, 2304}, {256, 768, 768}, {256, 768, 3072}, {256, 3072, 768}, {256, 768, 50304},
                       {1024, 384, 1152}, {1024, 384, 384}, {1024, 384, 1536}, {1024, 1536, 384}, {1024, 384, 50304},
                       {2048, 256, 768}, {2048, 256, 256}, {2048, 256, 1024}, {2048, 1024, 256}, {2048, 256, 384}};
    int first = argc > 1 ? atoi(argv[1]) : 0, last = argc > 2 ? atoi(argv[2]) : 14;
    double peak = peak_flops();
    printf("peak %.1f GFLOP/s on %d thread(s); %s\n", peak / 1e9, omp_get_max_threads(),
           omp_get_max_threads() > 1 ? "wall-clock times" : "thread CPU times");
    for (int s = first; s <= last && s < 15; s++) {
        int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float *x = malloc(sizeof(float) * N * C), *w = malloc(sizeof(float) * OC * C), *y = malloc(sizeof(float) * N * OC);
        float *dx = malloc(sizeof(float) * N * C), *dw = calloc((size_t)OC * C, sizeof(float));
        fill(x, (size_t)N * C, 1); fill(w, (size_t)OC * C, 2); fill(y, (size_t)N * OC, 3);
        double flops = 2.0 * N * C * OC, best[2][3] = {{1e9, 1e9, 1e9}, {1e9, 1e9, 1e9}};
        for (int rep = 0; rep < 4; rep++) {
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
        printf("N %4d C %4d OC %5d | ours fwd %6.1f (%3.0f%%) dinp %6.1f (%3.0f%%) dw %6.1f (%3.0f%%) | openblas fwd %6.1f "
               "dinp %6.1f dw %6.1f GFLOP/s\n", N, C, OC, flops / best[0][0] / 1e9, 100 * flops / best[0][0] / peak,
               flops / best[0][1] / 1e9, 100 * flops / best[0][1] / peak, flops / best[0][2] / 1e9,
               100 * flops / best[0][2] / peak, flops / best[1][0] / 1e9, flops / best[1][1] / 1e9,
               flops / best[1][2] / 1e9);
        free(x); free(w); free(y); free(dx); free(dw);
    }
    return 0;
}
