// The fp32 peak FLOP/s of the CPU it runs on, measured: every OpenMP thread runs CPU_PEAK_CHAINS
// independent chains of fused multiply-adds on the widest vectors the compiler targets (GCC
// vector extensions; 512-bit with AVX-512, 256-bit with AVX), best of a few repetitions. Used by
// the CPU trainer at start-up (the MFU's peak unless -pk) and by dev/bench/peak_flops.c.
#ifndef LLMC_CPU_PEAK_H
#define LLMC_CPU_PEAK_H

#include <omp.h>

#if defined(__AVX512F__)
#define CPU_PEAK_W 16
#elif defined(__AVX__)
#define CPU_PEAK_W 8
#else
#define CPU_PEAK_W 4
#endif
#define CPU_PEAK_BITS (CPU_PEAK_W * 32)
#define CPU_PEAK_CHAINS 12
typedef float cpu_peak_vec __attribute__((vector_size(CPU_PEAK_W * 4)));

static volatile float cpu_peak_sink[256]; // read by nobody, but the stores keep the work alive

// One thread's iters rounds of CPU_PEAK_CHAINS FMAs.
static void cpu_peak_chains(long iters, float seed) {
    cpu_peak_vec m = (cpu_peak_vec){0} + 0.999999f, b = (cpu_peak_vec){0} + 1e-6f;
    cpu_peak_vec a[CPU_PEAK_CHAINS];
    for (int i = 0; i < CPU_PEAK_CHAINS; i++) { a[i] = m * seed + (float)i; }
    for (long k = 0; k < iters; k++) {
#if defined(__x86_64__) || defined(__i386__)
        __asm__ volatile("" : "+v"(m)); // keeps the loop from being folded
#endif
        #pragma GCC unroll 16
        for (int i = 0; i < CPU_PEAK_CHAINS; i++) { a[i] = a[i] * m + b; }
    }
    cpu_peak_vec s = a[0];
    for (int i = 1; i < CPU_PEAK_CHAINS; i++) { s += a[i]; }
    cpu_peak_sink[omp_get_thread_num() % 256] = s[0];
}

// The best FLOP/s of reps runs of iters rounds on every OpenMP thread of this process.
static double cpu_peak_measure(long iters, int reps) {
    double best = 0.0;
    for (int rep = 0; rep < reps; rep++) {
        double t0 = omp_get_wtime();
        #pragma omp parallel
        cpu_peak_chains(iters, 1.0f + omp_get_thread_num() * 1e-3f);
        double dt = omp_get_wtime() - t0;
        double flops = 2.0 * CPU_PEAK_W * CPU_PEAK_CHAINS * (double)iters * omp_get_max_threads() / dt;
        if (flops > best) { best = flops; }
    }
    return best;
}

#endif
