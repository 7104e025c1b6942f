# train_gpt2: build, test and quick-start targets.
#   make quickstart   installs what is missing, prepares data/kjv, trains a small model on the CPU,
#                     prints samples and the val loss, plots the loss curve
#   make docs-img     redraws docs/img/quickstart_loss.png from log_quickstart (runs the quick
#                     start first when it has not run)
#   make test         installs what is missing, builds everything and runs every test
#   make fuzz         fuzzes every file reader and the flag parser (FUZZ_SECONDS each, default 60)
#   make CC=... NVCC=...   other compilers (CC defaults to mpicc; without Open MPI, to cc with
#                     -DNO_MPI: single-process CPU trainers, see llmc/mpi_single.h)
#   make CPU_ARCH=x86-64-v3   the CPU binaries for another -march (default native; x86-64-v3 is
#                     the AVX2 code path, docs/benchmarks.md)
ifeq ($(origin CC),default)
CC := $(if $(shell command -v mpicc 2>/dev/null),mpicc,cc)
endif
# A compiler that is not an MPI wrapper builds the single-process CPU trainers.
CPU_MPI := $(if $(findstring mpi,$(notdir $(firstword $(CC)))),mpi,single)
CPU_MPI_FLAGS := $(if $(filter single,$(CPU_MPI)),-DNO_MPI)
CPU_MPI_WHY := $(if $(filter cc,$(CC)),no Open MPI (mpicc; make deps installs it),CC=$(CC) is not an MPI wrapper)
CPU_MPI_NOTE := $(if $(filter single,$(CPU_MPI)),@echo "note: $(CPU_MPI_WHY): building single-process CPU trainers")
CPU_ARCH ?= native
CFLAGS := -O3 -march=$(CPU_ARCH) -ffp-contract=off -fopenmp -fno-math-errno -Wall -Wextra -Werror -Wno-unused-function -Wno-format-truncation
LDLIBS := -lm
PYTHON := /usr/bin/python3
LLMC_HEADERS := $(wildcard llmc/*.h)

.PHONY: all deps data-kjv quickstart quickstart-run docs-img test clean cpu-cflags

# The CPU code's compiler flags, for the scripts that build copies or helpers of it (one place:
# -ffp-contract=off keeps the bits the same on every target, docs/design.md).
cpu-cflags:
	@echo $(CFLAGS)

all: train_gpt2cpu test_gpt2cpu ckpt_tool

# A stamp per MPI flavour: installing Open MPI later rebuilds the CPU binaries.
build/cpu/mpi_$(CPU_MPI):
	@mkdir -p build/cpu
	@rm -f build/cpu/mpi_*
	@touch $@

# A stamp per CPU_ARCH: another -march rebuilds them too.
build/cpu/arch_$(CPU_ARCH):
	@mkdir -p build/cpu
	@rm -f build/cpu/arch_*
	@touch $@

train_gpt2cpu: train_gpt2.c $(LLMC_HEADERS) build/cpu/mpi_$(CPU_MPI) build/cpu/arch_$(CPU_ARCH)
	$(CPU_MPI_NOTE)
	$(CC) $(CFLAGS) $(CPU_MPI_FLAGS) -o $@ train_gpt2.c $(LDLIBS)

test_gpt2cpu: test_gpt2.c train_gpt2.c $(LLMC_HEADERS) build/cpu/mpi_$(CPU_MPI) build/cpu/arch_$(CPU_ARCH)
	$(CC) $(CFLAGS) $(CPU_MPI_FLAGS) -o $@ test_gpt2.c $(LDLIBS)

# The single-process CPU trainer (cc, -DNO_MPI), whatever is installed: what `make` builds where
# Open MPI is missing, kept apart for dev/tests/31_single_process.sh.
build/cpu/train_gpt2cpu_single: train_gpt2.c $(LLMC_HEADERS)
	@mkdir -p build/cpu
	cc $(CFLAGS) -DNO_MPI -o $@ train_gpt2.c $(LDLIBS)

# prints, verifies and exports checkpoints (docs/checkpoints.md)
ckpt_tool: dev/ckpt_tool.c $(LLMC_HEADERS)
	$(CC) $(CFLAGS) -I. -o $@ dev/ckpt_tool.c $(LDLIBS)

# one rank of the -pi fs / tcp rendezvous alone (llmc/rendezvous.h), for dev/test_rendezvous.py
build/rendezvous_tool: dev/rendezvous_tool.c llmc/rendezvous.h llmc/utils.h
	@mkdir -p build
	cc -O1 -Wall -Wno-unused-function -o $@ dev/rendezvous_tool.c

deps:
	@bash dev/install_deps.sh

data/kjv/kjv_train.bin: dev/data/kjv.sh
	bash dev/data/kjv.sh

data-kjv: deps data/kjv/kjv_train.bin

# The quick start: a 4-layer, 256-channel byte-level model on the King James Bible (docs/training.md).
QUICKSTART_FLAGS := -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin -tk data/kjv/kjv_tokenizer.bin \
	-e d4 -sl 256 -b 8 -t 256 -x 400 -opt muon -ml 0.02 -l 2e-3 -u 30 -q 0.1 -k cosine -c 0.1 -v 100 -m 16 \
	-s 200 -g 200 \
	-o log_quickstart
# deps first, then a fresh make that sees what deps installed (mpicc)
quickstart: deps
	@$(MAKE) --no-print-directory quickstart-run
quickstart-run: data/kjv/kjv_train.bin train_gpt2cpu
	./train_gpt2cpu $(QUICKSTART_FLAGS)
	$(PYTHON) scripts/plot_loss.py log_quickstart -o log_quickstart/loss.png

# The README's picture of the quick start curve (kept small: 800x640 pixels).
docs-img: deps
	@[ -f log_quickstart/main.log ] || $(MAKE) quickstart
	$(PYTHON) scripts/plot_loss.py log_quickstart -o docs/img/quickstart_loss.png --size 800x640

test: deps
	@bash dev/run_tests.sh

-include dev/cuda_emu/emu.mk
-include dev/gpu.mk
-include dev/fuzz/fuzz.mk

clean:
	rm -rf build train_gpt2cpu test_gpt2cpu ckpt_tool train_gpt2 test_gpt2 train_gpt2emu test_gpt2emu

# `make` also builds the GPU trainer where nvcc is installed: with Open MPI where mpicc is, for one
# node without it (dev/gpu.mk), with cuDNN attention where cuDNN and its frontend are found.
ifneq ($(shell command -v $(NVCC) 2>/dev/null),)
all: train_gpt2
endif
