// nccl.h (emulator): the emulated NCCL (its own socket transport, no MPI) lives in emu_nccl.h.
#include "emu_nccl.h"
