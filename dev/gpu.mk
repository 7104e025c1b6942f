# The CUDA trainer's build (included by the top Makefile).
#   make train_gpt2 [PRECISION=BF16|FP32] [USE_CUDNN=1]
#                                              nvcc, sm_80 + sm_90, links cuBLASLt (and cuDNN: -at cudnn)
#   make test_gpt2 [PRECISION=...]             the GPU test
#   make train_gpt2emu / test_gpt2emu          the same sources through the CUDA emulator (CPU)
#   make gpu-nvcc-check                        every .cu for sm_80 and sm_90, both precisions, warnings
#                                              as errors; registers and spills per kernel in a report;
#                                              the SASS report of the sm_90 trainer (build/gpu/sass_report.txt)
ifeq ($(.DEFAULT_GOAL),)
.DEFAULT_GOAL := all
endif

PRECISION ?= BF16
ifeq ($(PRECISION),FP32)
GPU_PRECISION_FLAGS := -DENABLE_FP32
else ifeq ($(PRECISION),BF16)
GPU_PRECISION_FLAGS :=
else
$(error PRECISION=$(PRECISION): must be BF16 or FP32)
endif

# USE_CUDNN=1: cuDNN's SDPA beside our attention (-at cudnn, BF16), through the header-only cuDNN
# frontend that make deps installs into build/cudnn_frontend (PyPI nvidia-cudnn-frontend). The glue is
# one translation unit, llmc/cudnn_att.cpp (host code only, so one object serves sm_80 and sm_90).
USE_CUDNN ?= 0
CUDNN_FRONTEND_INC := build/cudnn_frontend/include
CUDNN_ATT_SOURCES := llmc/cudnn_att.cpp llmc/cudnn_att.h
CUDNN_LIBS := -lcudnn -lnvrtc # the frontend links NVRTC (for its runtime-compiled engines)
ifeq ($(USE_CUDNN),1)
GPU_CUDNN_FLAGS := -DENABLE_CUDNN
GPU_CUDNN_OBJ := build/gpu/cudnn_att.o
GPU_CUDNN_LIBS := $(CUDNN_LIBS)
else ifneq ($(USE_CUDNN),0)
$(error USE_CUDNN=$(USE_CUDNN): must be 0 or 1)
endif

NVCC ?= nvcc
NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# Open MPI's include and library directories: asked of mpicc only when an nvcc recipe runs (=, not
# :=), so parsing this file prints nothing before make deps has installed it.
GPU_MPICC := $(shell command -v mpicc 2>/dev/null)
GPU_NEED_MPI = $(if $(GPU_MPICC),,$(error $@ needs Open MPI (mpicc) for its -pi mpi start-up: run make deps))
GPU_MPI_INC = $(addprefix -I,$(shell $(GPU_MPICC) --showme:incdirs))
GPU_MPI_LIB = $(addprefix -L,$(shell $(GPU_MPICC) --showme:libdirs))
NVCC_FLAGS = -O3 -std=c++17 $(NVCC_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wno-unused-function,-Wno-format-truncation \
	$(GPU_NEED_MPI) $(GPU_MPI_INC)
# the multi-GPU trainer links NCCL (the CUDA toolkit's) and Open MPI (-pi mpi start-up)
GPU_LIBS = -lcublasLt -lnccl $(GPU_MPI_LIB) -lmpi
GPU_EMUCC := dev/cuda_emu/emucc
GPU_EMUCC_FLAGS := -O1 -Xcompiler -Wall,-Wno-unused-function,-Wno-format-truncation
# the kernel tests and test_gpt2 are checked builds: races, stream order, memory (dev/cuda_emu/README.md)
GPU_EMU_CHECK := --check
GPU_EMU_DEPS := $(wildcard dev/cuda_emu/include/*.h) dev/cuda_emu/emucc dev/cuda_emu/emu_rewrite.py
GPU_SOURCES := train_gpt2.cu $(wildcard llmc/*.cuh) $(wildcard llmc/*.h)
GPU_KERNEL_TESTS := $(wildcard dev/gpu_kernels/*.cu)
# dev/cuda/: one standalone file per kernel family (versions, CPU check, timing on a GPU)
DEV_CUDA_FAMILIES := layernorm classifier encoder matmul adamw
DEV_CUDA_EMU := $(patsubst %,build/gpu/dev_cuda_%,$(DEV_CUDA_FAMILIES))

# A stamp per precision and cuDNN choice: switching either rebuilds the root binaries.
GPU_STAMP := build/gpu/precision_$(PRECISION)_cudnn$(USE_CUDNN)
$(GPU_STAMP):
	@mkdir -p build/gpu
	@rm -f build/gpu/precision_*
	@touch $@

# the cuDNN glue with the real frontend (about 70 s of one core, measured; built once, kept in build/gpu)
build/gpu/cudnn_att.o: $(CUDNN_ATT_SOURCES)
	@[ -f $(CUDNN_FRONTEND_INC)/cudnn_frontend.h ] || \
	  { echo "error: $(CUDNN_FRONTEND_INC)/cudnn_frontend.h missing: run make deps (the cuDNN frontend headers)"; exit 1; }
	@mkdir -p build/gpu
	$(NVCC) -O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall -isystem $(CUDNN_FRONTEND_INC) -c -o $@ llmc/cudnn_att.cpp

train_gpt2: $(GPU_SOURCES) $(GPU_STAMP) $(GPU_CUDNN_OBJ)
	$(NVCC) $(NVCC_FLAGS) $(GPU_PRECISION_FLAGS) $(GPU_CUDNN_FLAGS) -o $@ train_gpt2.cu $(GPU_CUDNN_OBJ) $(GPU_LIBS) \
	  $(GPU_CUDNN_LIBS)

test_gpt2: test_gpt2.cu $(GPU_SOURCES) $(GPU_STAMP) $(GPU_CUDNN_OBJ)
	$(NVCC) $(NVCC_FLAGS) $(GPU_PRECISION_FLAGS) $(GPU_CUDNN_FLAGS) -o $@ test_gpt2.cu $(GPU_CUDNN_OBJ) $(GPU_LIBS) \
	  $(GPU_CUDNN_LIBS)

train_gpt2emu: $(GPU_SOURCES) $(GPU_STAMP)
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_PRECISION_FLAGS) -o $@ train_gpt2.cu -lnccl

test_gpt2emu: test_gpt2.cu $(GPU_SOURCES) $(GPU_STAMP)
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_PRECISION_FLAGS) -o $@ test_gpt2.cu -lnccl

# Fixed-precision emulated builds for the tests (they do not touch the root binaries).
build/gpu/train_gpt2emu_fp32: $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -DENABLE_FP32 -o $@ train_gpt2.cu -lnccl
build/gpu/test_gpt2emu_fp32: test_gpt2.cu $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ test_gpt2.cu -lnccl
build/gpu/test_gpt2emu_bf16: test_gpt2.cu $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -o $@ test_gpt2.cu -lnccl
build/gpu/train_gpt2emu_bf16: $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -o $@ train_gpt2.cu -lnccl
# the trainer built checked (5x slower: the long multi-GPU runs use the plain builds above)
build/gpu/train_gpt2emu_fp32_check: $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ train_gpt2.cu -lnccl
build/gpu/train_gpt2emu_bf16_check: $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -o $@ train_gpt2.cu -lnccl
# the per-rank memory report for large shapes (dev/gpu_memory.cu), BF16 as the trainer's default
build/gpu/gpu_memory_bf16: dev/gpu_memory.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -o $@ dev/gpu_memory.cu -lnccl
# the attention kernels (dev/cuda/attention.cu): BF16 (tensor-core and fallback versions), FP32
build/gpu/attention_emu: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_fp32: dev/cuda/attention.cu dev/cuda/common.cuh dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_check: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) --check $(GPU_EMUCC_FLAGS) -o $@ dev/cuda/attention.cu
# llmc/attention_fa2.cuh's planted bugs (dev/tests/53_attention_fa2.sh): an off-by-one mask and dq
# summed by unordered atomicAdd over one block per key tile, in one plain build (the first fails out,
# the second the backward's bitwise rerun: neither can cause the other's failure); a missing cp.async
# wait and unswizzled tiles (--check builds)
build/gpu/attention_emu_fa2_mask_atomic: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -DFA2_PLANT_MASK -DFA2_PLANT_ATOMIC_DQ -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_fa2_nowait: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) --check $(GPU_EMUCC_FLAGS) -DFA2_PLANT_NO_WAIT -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_fa2_noswizzle: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) --check $(GPU_EMUCC_FLAGS) -DFA2_PLANT_NO_SWIZZLE -o $@ dev/cuda/attention.cu
# what make USE_CUDNN=1 train_gpt2 builds (BF16), into build/gpu so that the tests leave the root binary alone
build/gpu/train_gpt2_cudnn: $(GPU_SOURCES) build/gpu/cudnn_att.o
	$(NVCC) $(NVCC_FLAGS) -DENABLE_CUDNN -o $@ train_gpt2.cu build/gpu/cudnn_att.o $(GPU_LIBS) $(CUDNN_LIBS)
# dev/cuda/attention.cu with the cuDNN version, for a GPU: both paths checked and timed
build/gpu/attention_cudnn: dev/cuda/attention.cu dev/cuda/common.cuh $(GPU_SOURCES) build/gpu/cudnn_att.o
	$(NVCC) $(NVCC_FLAGS) -DENABLE_CUDNN -o $@ dev/cuda/attention.cu build/gpu/cudnn_att.o $(CUDNN_LIBS)
# -at cudnn through the emulator's cuDNN frontend (dev/cuda_emu/include/cudnn_frontend.h), BF16: the
# attention kernels' test with the cuDNN version, test_gpt2 (checked) and the trainer
build/gpu/attention_emu_cudnn: dev/cuda/attention.cu dev/cuda/common.cuh $(CUDNN_ATT_SOURCES) $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -DENABLE_CUDNN -o $@ dev/cuda/attention.cu llmc/cudnn_att.cpp
build/gpu/test_gpt2emu_bf16_cudnn: test_gpt2.cu $(CUDNN_ATT_SOURCES) $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_CUDNN -o $@ test_gpt2.cu llmc/cudnn_att.cpp -lnccl
build/gpu/train_gpt2emu_bf16_cudnn: $(CUDNN_ATT_SOURCES) $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -DENABLE_CUDNN -o $@ train_gpt2.cu llmc/cudnn_att.cpp -lnccl
# the kernel tests through the emulator, plain and under AddressSanitizer
build/gpu/test_kernels_emu: $(GPU_KERNEL_TESTS) dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ dev/gpu_kernels/test_kernels.cu
build/gpu/test_bf16_emu: $(GPU_KERNEL_TESTS) $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -o $@ dev/gpu_kernels/test_bf16.cu
build/gpu/test_kernels_asan: $(GPU_KERNEL_TESTS) dev/cuda/copies.cuh $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -DENABLE_FP32 -Xcompiler -fsanitize=address,-fno-omit-frame-pointer -o $@ dev/gpu_kernels/test_kernels.cu

# dev/cuda/ through the emulator, checked builds: FP32 (tight against the CPU), AdamW in BF16
# (stochastic rounding)
build/gpu/dev_cuda_adamw: dev/cuda/adamw.cu dev/cuda/common.cuh dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -o $@ $<
build/gpu/dev_cuda_%: dev/cuda/%.cu dev/cuda/common.cuh dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ $<
# the column sums' plant: colsum_finish adding its lanes by atomicAdd (dev/tests/52_dev_cuda.sh)
build/gpu/dev_cuda_layernorm_unordered: dev/cuda/layernorm.cu dev/cuda/common.cuh dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -DCOLSUM_PLANT_UNORDERED -o $@ $<
dev-cuda-emu: $(DEV_CUDA_EMU)
	@for f in $(DEV_CUDA_EMU); do echo "== $$f"; $$f || exit 1; done
.PHONY: gpu-nvcc-link dev-cuda-emu

# nvcc for sm_80 and sm_90: the trainer and its test in both precisions, the kernel tests (each in
# its precision); ptxas -v output goes to build/gpu/ptxas_*.log and dev/gpu_kernels/ptxas_report.sh turns
# the trainer's into build/gpu/ptxas_report.txt (and fails on any spill).
GPU_NVCC_UNITS := train_gpt2.cu:BF16 train_gpt2.cu:FP32 test_gpt2.cu:BF16 test_gpt2.cu:FP32 \
	dev/gpu_kernels/test_kernels.cu:FP32 dev/gpu_kernels/test_bf16.cu:BF16 dev/cuda/attention.cu:BF16 \
	dev/cuda/attention.cu:FP32 $(patsubst %,dev/cuda/%.cu:BF16,$(DEV_CUDA_FAMILIES))
gpu-nvcc-check: test_gpt2.cu $(GPU_SOURCES) $(GPU_KERNEL_TESTS) $(wildcard dev/cuda/*.cu dev/cuda/*.cuh)
	@mkdir -p build/gpu
	@rm -f build/gpu/ptxas_*.log
	@for unit in $(GPU_NVCC_UNITS); do echo $$unit; done | xargs -P 2 -n 1 bash -c ' \
	  unit=$$0; src=$${unit%:*}; prec=$${unit#*:}; flags=; [ $$prec = FP32 ] && flags=-DENABLE_FP32; \
	  name=$$(basename $$src .cu)_$$prec; keep=build/gpu/keep_$$name; rm -rf $$keep; mkdir -p $$keep; \
	  echo "$(NVCC) -c $$src ($$prec, sm_80 + sm_90, -Werror all-warnings)"; \
	  $(NVCC) $(NVCC_FLAGS) $$flags -Xptxas -v -keep -keep-dir $$keep -c -o build/gpu/$$name.o $$src \
	    2> build/gpu/ptxas_$$name.log || { cat build/gpu/ptxas_$$name.log; exit 255; }'
	@bash dev/gpu_kernels/ptxas_report.sh build/gpu/ptxas_train_gpt2_BF16.log build/gpu/ptxas_train_gpt2_FP32.log \
	  > build/gpu/ptxas_report.txt || { cat build/gpu/ptxas_report.txt; exit 1; }
	@echo "registers and spills per kernel: build/gpu/ptxas_report.txt"
	@python3 dev/gpu_kernels/sass_report.py --check \
	  BF16:build/gpu/keep_train_gpt2_BF16/train_gpt2.compute_90.cubin:build/gpu/ptxas_train_gpt2_BF16.log \
	  FP32:build/gpu/keep_train_gpt2_FP32/train_gpt2.compute_90.cubin:build/gpu/ptxas_train_gpt2_FP32.log \
	  > build/gpu/sass_report.txt || { cat build/gpu/sass_report.txt; exit 1; }
	@echo "SASS per kernel (tensor-core and 128-bit instructions): build/gpu/sass_report.txt"

# The trainer and its test linked (CUDA runtime, cuBLASLt, NCCL, Open MPI) from gpu-nvcc-check's
# BF16 objects: what `make train_gpt2 test_gpt2` would link, without compiling them again (run
# gpu-nvcc-check first).
gpu-nvcc-link:
	@[ -f build/gpu/train_gpt2_BF16.o ] && [ -f build/gpu/test_gpt2_BF16.o ] || \
	  { echo "error: build/gpu/train_gpt2_BF16.o missing: run make -f dev/gpu.mk gpu-nvcc-check first"; exit 1; }
	$(NVCC) $(NVCC_ARCH) -o build/gpu/train_gpt2_linked build/gpu/train_gpt2_BF16.o $(GPU_LIBS)
	$(NVCC) $(NVCC_ARCH) -o build/gpu/test_gpt2_linked build/gpu/test_gpt2_BF16.o $(GPU_LIBS)

.PHONY: gpu-nvcc-check
