// Peak fp32 FLOP/s of this machine: every OpenMP thread runs 12 independent chains of fused
// multiply-adds on the widest vectors the compiler targets (GCC vector extensions; 512-bit with
// AVX-512, 256-bit with AVX2). Prints the best GFLOP/s of several repetitions.
//   gcc -O2 -march=native -fopenmp dev/bench/peak_flops.c -o build/peak_flops; OMP_NUM_THREADS=2 build/peak_flops
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#define W 16
#elif defined(__AVX__)
#define W 8
#else
#define W 4
#endif
typedef float vec __attribute__((vector_size(W * 4)));

volatile float sink[256]; // read by nobody, but the stores keep the work alive

int main(int argc, char** argv) {
    long iters = argc > 1 ? atol(argv[1]) : 50000000;
    double best = 0.0;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel
        {
            float x = 1.0f + omp_get_thread_num() * 1e-3f;
            vec m = (vec){0} + 0.999999f, b = (vec){0} + 1e-6f;
            vec a0 = m * x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3, a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6,
                a7 = a0 + 7, a8 = a0 + 8, a9 = a0 + 9, a10 = a0 + 10, a11 = a0 + 11;
            for (long k = 0; k < iters; k++) {
                __asm__ volatile("" : "+v"(m)); // keeps the loop from being folded
                a0 = a0 * m + b; a1 = a1 * m + b; a2 = a2 * m + b; a3 = a3 * m + b;
                a4 = a4 * m + b; a5 = a5 * m + b; a6 = a6 * m + b; a7 = a7 * m + b;
                a8 = a8 * m + b; a9 = a9 * m + b; a10 = a10 * m + b; a11 = a11 * m + b;
            }
            vec s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
            sink[omp_get_thread_num() % 256] = s[0];
        }
        double dt = omp_get_wtime() - t0;
        double gflops = 2.0 * W * 12 * (double)iters * omp_get_max_threads() / dt / 1e9;
        if (gflops > best) { best = gflops; }
    }
    printf("%.1f GFLOP/s on %d threads with %d-bit vectors\n", best, omp_get_max_threads(), W * 32);
    return 0;
}
