// vector_types.h (emulator): the CUDA runtime lives in emu_cuda.h.
#include "emu_cuda.h"
