// The CPU trainer's large zeroed buffers (gradients, optimizer state, activations): aligned to
// 2 MiB and marked for transparent huge pages where the kernel offers them (madvise), then zeroed
// by all OpenMP threads at allocation. So their page faults are taken at start-up, not in the
// first training step, and steady steps stream them with one TLB entry per 2 MiB instead of 4 KiB.
#ifndef LLMC_CPU_MEMORY_H
#define LLMC_CPU_MEMORY_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define CPU_HUGE_PAGE ((size_t)2 << 20)

// count x size zeroed bytes, touched now; free() releases them. what names the buffer in the
// out-of-memory error.
static void* cpu_zeroed_touched(size_t count, size_t size, const char* what) {
    size_t bytes = count * size;
    size_t rounded = round_up(bytes == 0 ? 1 : bytes, bytes >= CPU_HUGE_PAGE ? CPU_HUGE_PAGE : 64);
    char* p = (char*)aligned_alloc(bytes >= CPU_HUGE_PAGE ? CPU_HUGE_PAGE : 64, rounded);
    if (p == NULL) { fail("out of memory allocating %zu bytes for %s", bytes, what); }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= CPU_HUGE_PAGE) { madvise(p, rounded, MADV_HUGEPAGE); } // advice only: 4 KiB pages if refused
#endif
    size_t chunks = (rounded + CPU_HUGE_PAGE - 1) / CPU_HUGE_PAGE;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * CPU_HUGE_PAGE, n = rounded - at < CPU_HUGE_PAGE ? rounded - at : CPU_HUGE_PAGE;
        memset(p + at, 0, n);
    }
    return p;
}

#endif
