// Peak fp32 FLOP/s of this machine (llmc/cpu_peak.h, the method the CPU trainer measures its
// MFU's peak with at start-up): every OpenMP thread runs 12 independent chains of fused
// multiply-adds on the widest vectors the compiler targets. Prints the best GFLOP/s of several
// repetitions.
//   gcc -O2 -march=native -fopenmp dev/bench/peak_flops.c -o build/peak_flops; OMP_NUM_THREADS=2 build/peak_flops
#include <stdio.h>
#include <stdlib.h>
#include "../../llmc/cpu_peak.h"

int main(int argc, char** argv) {
    long iters = argc > 1 ? atol(argv[1]) : 50000000;
    double best = cpu_peak_measure(iters, 7);
    printf("%.1f GFLOP/s on %d threads with %d-bit vectors\n", best / 1e9, omp_get_max_threads(), CPU_PEAK_BITS);
    return 0;
}
