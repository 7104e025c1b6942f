// library_types.h (emulator): cuBLAS and cuBLASLt live in emu_cublas.h.
#include "emu_cublas.h"
