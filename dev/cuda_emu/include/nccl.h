// nccl.h (emulator): NCCL over MPI lives in emu_nccl.h.
#include "emu_nccl.h"
