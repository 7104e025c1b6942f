# The CUDA trainer's build (included by the top Makefile).
#   make train_gpt2 [PRECISION=BF16|FP32] [USE_CUDNN=0|1]
#                                              nvcc, sm_80 + sm_90, links cuBLASLt, NCCL (and cuDNN:
#                                              -at cudnn; the default where cuDNN and its frontend are
#                                              found) and Open MPI where mpicc is (else one node only)
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

NVCC ?= nvcc
# cuBLASLt, NCCL, cuDNN and NVRTC: from the CUDA toolkit, else ldconfig's cache, else a Python's
# site-packages (nvidia/*/lib, as PyTorch's wheels install them; never CUDA's compat or stubs
# folders): dev/gpu_libs.sh, asked once and only when a recipe needs it. What it finds outside the
# toolkit is linked through unversioned links in build/gpu/libs with an rpath to its folder.
GPU_LIBS_DIR := build/gpu/libs
GPU_SITE_CFLAGS = $(eval GPU_SITE_CFLAGS := $(shell bash dev/gpu_libs.sh cflags cublasLt nccl))$(GPU_SITE_CFLAGS)
GPU_SITE_LDFLAGS = $(eval GPU_SITE_LDFLAGS := $(shell bash dev/gpu_libs.sh ldflags $(GPU_LIBS_DIR) cublasLt nccl))$(GPU_SITE_LDFLAGS)
CUDNN_SITE_CFLAGS = $(eval CUDNN_SITE_CFLAGS := $(shell bash dev/gpu_libs.sh cflags cudnn nvrtc))$(CUDNN_SITE_CFLAGS)
CUDNN_SITE_LDFLAGS = $(eval CUDNN_SITE_LDFLAGS := $(shell bash dev/gpu_libs.sh ldflags $(GPU_LIBS_DIR) cudnn nvrtc))$(CUDNN_SITE_LDFLAGS)

# USE_CUDNN=1: cuDNN's SDPA beside our attention (-at cudnn, BF16, then the default), through the
# header-only cuDNN frontend that make deps installs into build/cudnn_frontend (PyPI
# nvidia-cudnn-frontend). The glue is one translation unit, llmc/cudnn_att.cpp (host code only, so
# one object serves sm_80 and sm_90). Unset, it is 1 where nvcc, the frontend's headers and a
# libcudnn (dev/gpu_libs.sh) are found, else 0 with a one-line note when train_gpt2 builds.
CUDNN_FRONTEND_INC := build/cudnn_frontend/include
ifeq ($(origin USE_CUDNN),undefined)
ifeq ($(wildcard $(CUDNN_FRONTEND_INC)/cudnn_frontend.h),)
USE_CUDNN := 0
CUDNN_DEFAULT_WHY := no cuDNN frontend headers ($(CUDNN_FRONTEND_INC)/cudnn_frontend.h; make deps installs them)
else ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
USE_CUDNN := 0
else ifeq ($(shell bash dev/gpu_libs.sh has cudnn >/dev/null 2>&1 && echo 1),1)
USE_CUDNN := 1
else
USE_CUDNN := 0
CUDNN_DEFAULT_WHY := no libcudnn in the CUDA toolkit, ldconfig's cache or a Python's nvidia/cudnn/lib
endif
endif
CUDNN_NOTE := $(if $(CUDNN_DEFAULT_WHY),@echo "note: USE_CUDNN=0: $(CUDNN_DEFAULT_WHY): train_gpt2 has our attention only")
CUDNN_ATT_SOURCES := llmc/cudnn_att.cpp llmc/cudnn_att.h
CUDNN_LIBS = -lcudnn -lnvrtc $(CUDNN_SITE_LDFLAGS) # the frontend links NVRTC (for its runtime-compiled engines)
ifeq ($(USE_CUDNN),1)
GPU_CUDNN_FLAGS := -DENABLE_CUDNN
GPU_CUDNN_OBJ := build/gpu/cudnn_att.o
GPU_CUDNN_LIBS = $(CUDNN_LIBS)
else ifneq ($(USE_CUDNN),0)
$(error USE_CUDNN=$(USE_CUDNN): must be 0 or 1)
endif

NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
# Open MPI's include and library directories: asked of mpicc only when an nvcc recipe runs (=, not
# :=), so parsing this file prints nothing before make deps has installed it. Without mpicc (or
# with make GPU_MPICC=) the trainer is built for one node: -DNO_MPI (llmc/mpi_single.h), started
# with -pi fs or tcp (the default there: -pi fs, one process without a launcher); -pi mpi is refused.
GPU_MPICC := $(shell command -v mpicc 2>/dev/null)
GPU_MPI := $(if $(GPU_MPICC),mpi,single)
GPU_MPI_INC = $(if $(GPU_MPICC),$(addprefix -I,$(shell $(GPU_MPICC) --showme:incdirs)),-DNO_MPI)
GPU_MPI_LIB = $(if $(GPU_MPICC),$(addprefix -L,$(shell $(GPU_MPICC) --showme:libdirs)) -lmpi)
GPU_MPI_NOTE := $(if $(GPU_MPICC),,@echo "note: no Open MPI (mpicc): train_gpt2 is built for one node (-pi fs or tcp; -pi mpi refused; make deps installs Open MPI)")
NVCC_FLAGS = -O3 -std=c++17 $(NVCC_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wno-unused-function,-Wno-format-truncation \
	$(GPU_MPI_INC) $(GPU_SITE_CFLAGS)
# the multi-GPU trainer links NCCL and Open MPI (-pi mpi start-up) where it is there
GPU_LIBS = -lcublasLt -lnccl $(GPU_SITE_LDFLAGS) $(GPU_MPI_LIB)
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

# A stamp per precision, cuDNN and MPI choice: switching one rebuilds the root binaries.
GPU_STAMP := build/gpu/precision_$(PRECISION)_cudnn$(USE_CUDNN)_$(GPU_MPI)
$(GPU_STAMP):
	@mkdir -p build/gpu
	@rm -f build/gpu/precision_*
	@touch $@

# the cuDNN glue with the real frontend (about 70 s of one core, measured; built once, kept in build/gpu)
build/gpu/cudnn_att.o: $(CUDNN_ATT_SOURCES)
	@[ -f $(CUDNN_FRONTEND_INC)/cudnn_frontend.h ] || \
	  { echo "error: $(CUDNN_FRONTEND_INC)/cudnn_frontend.h missing: run make deps (the cuDNN frontend headers)"; exit 1; }
	@mkdir -p build/gpu
	$(NVCC) -O3 -std=c++17 -Werror all-warnings -Xcompiler -Wall -isystem $(CUDNN_FRONTEND_INC) $(CUDNN_SITE_CFLAGS) \
	  -c -o $@ llmc/cudnn_att.cpp

# train_gpt2 and test_gpt2: each compiled to an object per precision, cuDNN and MPI choice, then
# linked, so that make -j compiles them beside the cuDNN glue
GPU_TAG := $(PRECISION)_cudnn$(USE_CUDNN)_$(GPU_MPI)
build/gpu/obj/train_gpt2_$(GPU_TAG).o: $(GPU_SOURCES)
	$(GPU_MPI_NOTE)
	$(CUDNN_NOTE)
	@mkdir -p build/gpu/obj
	$(NVCC) $(NVCC_FLAGS) $(GPU_PRECISION_FLAGS) $(GPU_CUDNN_FLAGS) -c -o $@ train_gpt2.cu
build/gpu/obj/test_gpt2_$(GPU_TAG).o: test_gpt2.cu $(GPU_SOURCES)
	@mkdir -p build/gpu/obj
	$(NVCC) $(NVCC_FLAGS) $(GPU_PRECISION_FLAGS) $(GPU_CUDNN_FLAGS) -c -o $@ test_gpt2.cu

train_gpt2: build/gpu/obj/train_gpt2_$(GPU_TAG).o $(GPU_STAMP) $(GPU_CUDNN_OBJ)
	$(NVCC) $(NVCC_ARCH) -o $@ $< $(GPU_CUDNN_OBJ) $(GPU_LIBS) $(GPU_CUDNN_LIBS)

test_gpt2: build/gpu/obj/test_gpt2_$(GPU_TAG).o $(GPU_STAMP) $(GPU_CUDNN_OBJ)
	$(NVCC) $(NVCC_ARCH) -o $@ $< $(GPU_CUDNN_OBJ) $(GPU_LIBS) $(GPU_CUDNN_LIBS)

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
# the attention kernels (dev/cuda/attention.cu): BF16 (the fa2 and fallback versions), FP32
build/gpu/attention_emu: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_fp32: dev/cuda/attention.cu dev/cuda/common.cuh dev/cuda/copies.cuh $(GPU_SOURCES) $(GPU_EMU_DEPS)
	@mkdir -p build/gpu
	$(GPU_EMUCC) $(GPU_EMUCC_FLAGS) $(GPU_EMU_CHECK) -DENABLE_FP32 -o $@ dev/cuda/attention.cu
build/gpu/attention_emu_check: dev/cuda/attention.cu $(GPU_SOURCES)
	@mkdir -p build/gpu
	$(GPU_EMUCC) --check $(GPU_EMUCC_FLAGS) -o $@ dev/cuda/attention.cu
# what make USE_CUDNN=1 train_gpt2 builds (BF16), into build/gpu so that the tests leave the root binary alone;
# its ptxas -v output in build/gpu/train_gpt2_cudnn.ptxas.log (51_gpu_cudnn.sh: the kernels of the BF16 build;
# not a ptxas_*.log, which gpu-nvcc-check clears)
build/gpu/train_gpt2_cudnn: $(GPU_SOURCES) build/gpu/cudnn_att.o
	$(NVCC) $(NVCC_FLAGS) -DENABLE_CUDNN -Xptxas -v -o $@ train_gpt2.cu build/gpu/cudnn_att.o $(GPU_LIBS) $(CUDNN_LIBS) \
	  2> build/gpu/train_gpt2_cudnn.ptxas.log || { cat build/gpu/train_gpt2_cudnn.ptxas.log; exit 1; }
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
