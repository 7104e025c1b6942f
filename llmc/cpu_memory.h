// The CPU trainer's large zeroed buffers (gradients, optimizer state, activations): huge-page
// memory (huge_alloc_check, llmc/utils.h) zeroed by all OpenMP threads at allocation. So their page
// faults are taken at start-up, not in the first training step, and steady steps stream them with
// one TLB entry per 2 MiB instead of 4 KiB.
#ifndef LLMC_CPU_MEMORY_H
#define LLMC_CPU_MEMORY_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

// count x size zeroed bytes, touched now; free() releases them. what names the buffer in the
// out-of-memory error.
static void* cpu_zeroed_touched(size_t count, size_t size, const char* what) {
    size_t bytes = count * size;
    char* p = (char*)huge_alloc_check(bytes, what);
    size_t rounded = round_up(bytes == 0 ? 1 : bytes, bytes >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 64);
    size_t chunks = (rounded + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES;
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * HUGE_PAGE_BYTES, n = rounded - at < HUGE_PAGE_BYTES ? rounded - at : HUGE_PAGE_BYTES;
        memset(p + at, 0, n);
    }
    return p;
}

#endif
