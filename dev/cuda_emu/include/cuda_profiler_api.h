// cuda_profiler_api.h (emulator): profiler start/stop, which do nothing on the CPU.
#pragma once
#include "emu_cuda.h"
inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
