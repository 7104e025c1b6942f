#!/usr/bin/env bash
# check_ptx_sass.sh: llmc/ptx.cuh's inline PTX is what nvcc turns into tensor-core and async-copy
# instructions: tests/test_ptx.cu compiled by nvcc for sm_80 (object) and sm_90 (cubin, disassembled
# by nvdisasm); the sm_90 SASS of kernel matmul64 (cp.async + ldmatrix + mma) must hold
# HMMA.16816.F32.BF16, LDSM (plain and transposed, .MT88) and LDGSTS, and mma_by_hand<false> the f16
# HMMA.16816.F32. Exit 1 naming what is missing. Needs nvcc and nvdisasm (dev/install_deps.sh).
set -u
nvcc=${EMU_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
nd=$(python3 dev/gpu_kernels/sass_report.py --find-nvdisasm) || { echo "check_ptx_sass.sh: no nvdisasm"; exit 1; }
out=build/cuda_emu/nvcc
mkdir -p $out
src=dev/cuda_emu/tests/test_ptx.cu
flags="-std=c++17 -Werror all-warnings"
$nvcc -c $flags -arch=sm_80 -o $out/test_ptx_sm80.o $src || exit 1
$nvcc -cubin $flags -arch=sm_90 -o $out/test_ptx_sm90.cubin $src || exit 1
$nd -c $out/test_ptx_sm90.cubin > $out/test_ptx_sm90.sass || exit 1
# the instructions of one kernel: from its .text section header to the next
kernel_sass() { awk -v k="$1" '/\.section[ \t]+\.text\./ { on = index($0, k) > 0 } on' $out/test_ptx_sm90.sass; }
ok=1
need() {  # need KERNEL REGEX: at least one instruction matching REGEX in KERNEL
    local n
    n=$(kernel_sass "$1" | grep -cE "$2")
    echo "$1: $n instructions match $2"
    [ "$n" -gt 0 ] || { echo "  FAIL: none"; ok=0; }
}
need matmul64 'HMMA\.16816\.F32\.BF16'
need matmul64 'LDSM\.16\.M88\.4'
need matmul64 'LDSM\.16\.MT88\.4'
need matmul64 'LDGSTS\.E\.BYPASS\.128'
need matmul64 'DEPBAR'
need mma_by_handILb0E 'HMMA\.16816\.F32 '
[ $ok -eq 1 ]
