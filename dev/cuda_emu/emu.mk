# dev/cuda_emu/emu.mk: builds the CUDA emulator's tests. Included by the top-level Makefile, or
# standalone: make -f dev/cuda_emu/emu.mk emu-tests. Paths are relative to the repository root.
#   emu-tests  every test program, plain and AddressSanitizer builds, in build/cuda_emu/ (and
#              test_nccl_peer_stops, test_nccl_p2p_plants, test_nccl_shrink, test_nccl_elastic,
#              test_nccl_nonblocking,
#              emulator-only, for tests/check_*.sh)
#   emu-nvcc   the same test sources compiled by nvcc for sm_80 and sm_90 (proves they are real CUDA)
#   emu-bugs   tests/bugs/NAME.cu, one GPU bug each: NAME_plain (emucc), NAME_check (emucc --check; a
#              build failure is kept in NAME_check.log), NAME_fixed (emucc --check -DFIXED)
#   emu-check  the unit tests built with --check (and test_nccl_p2p_plants, -DFIXED too)
#   emu-strict tests/strict/NAME.cu, one planted bug of a rule the strict emulator adds: NAME and
#              NAME_fixed (-DFIXED), built with --check where the file's first line says build=check
EMUCC := dev/cuda_emu/emucc
EMU_DIR := dev/cuda_emu
EMU_BUILD := build/cuda_emu
EMU_DEPS := $(EMUCC) $(EMU_DIR)/emu_rewrite.py $(wildcard $(EMU_DIR)/include/*.h $(EMU_DIR)/include/*/*.h) $(EMU_DIR)/tests/check.h $(EMU_DIR)/tests/nccl_poll.h \
    llmc/ptx.cuh
EMU_CFLAGS := -O1 -g -Wall -Werror
EMU_ASAN := -fsanitize=address -fno-omit-frame-pointer
EMU_UNIT_TESTS := test_primitives test_bf16_errors test_cublaslt test_nccl plain_reduction test_wmma test_ptx
EMU_NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc)
EMU_NVCC_FLAGS := -c -std=c++17 -Werror all-warnings -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
EMU_MPI_INC := $(addprefix -I,$(shell mpicxx --showme:incdirs 2>/dev/null))

emu-tests: $(addprefix $(EMU_BUILD)/,$(EMU_UNIT_TESTS) $(addsuffix _asan,$(EMU_UNIT_TESTS)) oob_write_asan \
    test_primitives_ucontext two_units test_nccl_peer_stops test_nccl_p2p_plants test_ptx_plant1 test_ptx_plant2 \
    test_nccl_shrink test_nccl_shrink_plant1 test_nccl_elastic test_nccl_elastic_plant2 test_nccl_nonblocking)
emu-nvcc: $(addprefix $(EMU_BUILD)/nvcc/,$(addsuffix .o,$(EMU_UNIT_TESTS) oob_write two_units_main two_units_kernels bank_conflicts))
EMU_BUGS := $(basename $(notdir $(wildcard $(EMU_DIR)/tests/bugs/*.cu)))
EMU_CHECK_TESTS := test_primitives test_bf16_errors test_cublaslt test_nccl plain_reduction test_wmma test_ptx bank_conflicts
emu-bugs: $(foreach b,$(EMU_BUGS),$(EMU_BUILD)/bugs/$(b)_plain $(EMU_BUILD)/bugs/$(b)_fixed $(EMU_BUILD)/bugs/$(b)_check.log)
emu-check: $(addprefix $(EMU_BUILD)/check/,$(EMU_CHECK_TESTS) test_nccl_p2p_plants test_nccl_p2p_plants_fixed)
EMU_STRICT_TESTS := $(basename $(notdir $(wildcard $(EMU_DIR)/tests/strict/*.cu)))
emu-strict: $(foreach b,$(EMU_STRICT_TESTS),$(EMU_BUILD)/strict/$(b) $(EMU_BUILD)/strict/$(b)_fixed)
.PHONY: emu-tests emu-nvcc emu-bugs emu-check emu-strict

# the NCCL tests: -lnccl (the emulated NCCL needs no MPI; the tests that take the id over MPI include mpi.h)
emu_libs = $(if $(filter test_nccl%,$(notdir $@)),-lnccl)

# several translation units: a .cu compiled separately with -c, a .cu and a .c on the link line
$(EMU_BUILD)/two_units: $(EMU_DIR)/tests/two_units_main.cu $(EMU_DIR)/tests/two_units_kernels.cu $(EMU_DIR)/tests/c_helper.c $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -c -o $(EMU_BUILD)/two_units_kernels.o $(EMU_DIR)/tests/two_units_kernels.cu
	$(EMUCC) $(EMU_CFLAGS) -o $@ $(EMU_DIR)/tests/two_units_main.cu $(EMU_DIR)/tests/c_helper.c $(EMU_BUILD)/two_units_kernels.o

# the emulated cuDNN frontend (a .cpp: the frontend's standard headers must come before emu_cuda.h's
# keyword macros, so it is not a .cu); run by dev/tests/51_gpu_cudnn.sh
$(EMU_BUILD)/test_cudnn_frontend: $(EMU_DIR)/tests/test_cudnn_frontend.cpp $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -o $@ $<

# llmc/ptx.cuh's tests: test_ptx with a planted wrong lane mapping in the emulator (tests/check_ptx_plants.sh)
$(EMU_BUILD)/test_ptx_plant%: $(EMU_DIR)/tests/test_ptx.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -DEMU_PTX_PLANT=$* -o $@ $<

# ncclCommShrink's test with a planted emulator whose revoke abandons nothing (tests/check_nccl_shrink.sh)
$(EMU_BUILD)/test_nccl_shrink_plant%: $(EMU_DIR)/tests/test_nccl_shrink.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -DEMU_NCCL_PLANT=$* -o $@ $< -lnccl

# the elastic test with a planted emulator whose ended connections are never reported (tests/check_nccl_elastic.sh)
$(EMU_BUILD)/test_nccl_elastic_plant%: $(EMU_DIR)/tests/test_nccl_elastic.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(EMU_CFLAGS) -DEMU_NCCL_PLANT=$* -o $@ $< -lnccl

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

$(EMU_BUILD)/check/%_fixed: $(EMU_DIR)/tests/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) --check $(EMU_CFLAGS) -DFIXED -o $@ $< $(emu_libs)

$(EMU_BUILD)/check/%: $(EMU_DIR)/tests/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) --check $(EMU_CFLAGS) -o $@ $< $(emu_libs)

EMU_BUG_DEPS := $(EMU_DEPS) $(EMU_DIR)/tests/bugs/common.h
$(EMU_BUILD)/bugs/%_plain: $(EMU_DIR)/tests/bugs/%.cu $(EMU_BUG_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) -O1 -o $@ $<
$(EMU_BUILD)/bugs/%_fixed: $(EMU_DIR)/tests/bugs/%.cu $(EMU_BUG_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) --check -O1 -DFIXED -o $@ $<
# the broken program under --check may fail to build (that is the static shared-memory check)
$(EMU_BUILD)/bugs/%_check.log: $(EMU_DIR)/tests/bugs/%.cu $(EMU_BUG_DEPS)
	@mkdir -p $(@D)
	@$(EMUCC) --check -O1 -o $(EMU_BUILD)/bugs/$*_check $< > $@ 2>&1 || echo "emucc --check $< did not build (see $@)"

$(EMU_BUILD)/nvcc/%.o: $(EMU_DIR)/tests/%.cu $(EMU_DIR)/tests/check.h llmc/ptx.cuh
	@mkdir -p $(@D)
	$(EMU_NVCC) $(EMU_NVCC_FLAGS) $(EMU_MPI_INC) -o $@ $<

# the strict rules' planted bugs: MPI programs (mpicxx), --check where the first line says build=check
strict_check = $(if $(shell head -1 $< | grep -q build=check && echo y),--check)
$(EMU_BUILD)/strict/%_fixed: $(EMU_DIR)/tests/strict/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(strict_check) -O1 -DFIXED -o $@ $< -lnccl
$(EMU_BUILD)/strict/%: $(EMU_DIR)/tests/strict/%.cu $(EMU_DEPS)
	@mkdir -p $(@D)
	$(EMUCC) $(strict_check) -O1 -o $@ $< -lnccl
