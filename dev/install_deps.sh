#!/usr/bin/env bash
# Installs what the build, the tests and the quick start need on a fresh Debian machine:
# Open MPI, OpenBLAS (the OpenMP build, so Debian's PyTorch does not fall back to the
# reference BLAS), Debian's CPU PyTorch for /usr/bin/python3, the KJV text (bible-kjv), and
# clang with its libFuzzer and sanitizer runtimes (make fuzz, dev/tests/45_fuzz.sh); where nvcc is
# installed, nvdisasm from PyPI (nvidia-cuda-nvdisasm, into build/tools unless a site-packages has
# it) for the SASS report of make gpu-nvcc-check.
# Packages already present are left alone; it does nothing when everything is there.
set -e
cd "$(dirname "$0")/.."

install_nvdisasm() {
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
    python3 dev/gpu_kernels/sass_report.py --find-nvdisasm >/dev/null 2>&1 && return 0
    echo "installing: nvidia-cuda-nvdisasm (PyPI) into build/tools"
    python3 -m pip install -q --target build/tools nvidia-cuda-nvdisasm
}
packages="openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-openmp python3-torch python3-numpy bible-kjv clang libclang-rt-14-dev"
missing=""
for p in $packages; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
    install_nvdisasm
    exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    echo "error: missing Debian packages:$missing (run as root or install them)" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
install_nvdisasm
