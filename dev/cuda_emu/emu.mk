# dev/cuda_emu/emu.mk: builds the CUDA emulator's tests. Included by the top-level Makefile, or
# standalone: make -f dev/cuda_emu/emu.mk emu-tests. Paths are relative to the repository root.
#   emu-tests  every test program, plain and AddressSanitizer builds, in build/cuda_emu/
#   emu-nvcc   the same test sources compiled by nvcc for sm_80 and sm_90 (proves they are real CUDA)
EMUCC := dev/cuda_emu/emucc
EMU_DIR := dev/cuda_emu
EMU_BUILD := build/cuda_emu
EMU_DEPS := $(EMUCC) $(EMU_DIR)/emu_rewrite.py $(wildcard $(EMU_DIR)/include/*.h $(EMU_DIR)/include/*/*.h) $(EMU_DIR)/tests/check.h
EMU_CFLAGS := -O1 -g -Wall -Werror
EMU_ASAN := -fsanitize=address -fno-omit-frame-pointer
EMU_UNIT_TESTS := test_primitives test_bf16_errors test_cublaslt test_nccl plain_reduction test_wmma
EMU_NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
EMU_NVCC_FLAGS := -c -std=c++17 -Werror all-warnings -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
EMU_MPI_INC := $(addprefix -I,$(shell mpicxx --showme:incdirs 2>/dev/null))

emu-tests: $(addprefix $(EMU_BUILD)/,$(EMU_UNIT_TESTS) $(addsuffix _asan,$(EMU_UNIT_TESTS)) oob_write_asan \
    test_primitives_ucontext two_units)
emu-nvcc: $(addprefix $(EMU_BUILD)/nvcc/,$(addsuffix .o,$(EMU_UNIT_TESTS) oob_write two_units_main two_units_kernels))
.PHONY: emu-tests emu-nvcc

# test_nccl runs over MPI: -lnccl makes emucc build it with mpicxx
emu_libs = $(if $(filter test_nccl%,$(notdir $@)),-lnccl)

# several translation units: a .cu compiled separately with -c, a .cu and a .c on the link line
$(EMU_BUILD)/two_units: $(EMU_DIR)/tests/two_units_main.cu $(EMU_DIR)/tests/two_units_kernels.cu $(EMU_DIR)/tests/c_helper.c $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -c -o $(EMU_BUILD)/two_units_kernels.o $(EMU_DIR)/tests/two_units_kernels.cu
	$(EMUCC) $(EMU_CFLAGS) -o $@ $(EMU_DIR)/tests/two_units_main.cu $(EMU_DIR)/tests/c_helper.c $(EMU_BUILD)/two_units_kernels.o

# the portable ucontext fiber switch (the default on x86-64 is a hand-written one)
$(EMU_BUILD)/%_ucontext: $(EMU_DIR)/tests/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -DEMU_UCONTEXT -o $@ $<

$(EMU_BUILD)/%_asan: $(EMU_DIR)/tests/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) $(EMU_ASAN) -o $@ $< $(emu_libs)

$(EMU_BUILD)/%: $(EMU_DIR)/tests/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -o $@ $< $(emu_libs)

$(EMU_BUILD)/nvcc/%.o: $(EMU_DIR)/tests/%.cu $(EMU_DIR)/tests/check.h
	@mkdir -p $(@D)
	$(EMU_NVCC) $(EMU_NVCC_FLAGS) $(EMU_MPI_INC) -o $@ $<
