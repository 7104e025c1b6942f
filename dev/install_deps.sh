#!/usr/bin/env bash
# Installs what the build, the tests and the quick start need on a fresh Debian machine:
# Open MPI, OpenBLAS (the OpenMP build, so Debian's PyTorch does not fall back to the
# reference BLAS), Debian's CPU PyTorch and matplotlib for /usr/bin/python3, the KJV text
# (bible-kjv), and clang with its libFuzzer and sanitizer runtimes (make fuzz,
# dev/tests/45_fuzz.sh); then, from PyPI for /usr/bin/python3, transformers and safetensors
# (dev/hf.py), in the versions tested with Debian's torch 1.13; where nvcc is installed,
# nvdisasm from PyPI (nvidia-cuda-nvdisasm, into build/tools unless a site-packages has it) for
# the SASS report of make gpu-nvcc-check, and the header-only cuDNN frontend (PyPI
# nvidia-cudnn-frontend, into build/cudnn_frontend) for make USE_CUDNN=1 (-at cudnn).
# Packages already present are left alone; it does nothing when everything is there.
set -e
cd "$(dirname "$0")/.."

install_nvdisasm() {
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
    python3 dev/gpu_kernels/sass_report.py --find-nvdisasm >/dev/null 2>&1 && return 0
    echo "installing: nvidia-cuda-nvdisasm (PyPI) into build/tools"
    python3 -m pip install -q --target build/tools nvidia-cuda-nvdisasm
}
# headers only (the wheel's Python module is not used); pinned: the version llmc/cudnn_att.cpp is built with
CUDNN_FRONTEND_VERSION=1.32.0
install_cudnn_frontend() {
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || return 0
    local dir=build/cudnn_frontend
    grep -qx "Version: $CUDNN_FRONTEND_VERSION" $dir/nvidia_cudnn_frontend-*.dist-info/METADATA 2>/dev/null &&
        [ -f $dir/include/cudnn_frontend.h ] && return 0
    echo "installing: nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION (PyPI, headers) into $dir"
    rm -rf $dir
    python3 -m pip install -q --no-deps --target $dir nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION
}
packages="openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-openmp python3-torch python3-numpy python3-matplotlib python3-pip bible-kjv clang libclang-rt-14-dev"
missing=""
for p in $packages; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
pip_packages="transformers==4.40.2 safetensors==0.8.0 tokenizers==0.19.1 huggingface-hub==0.36.2"
pip_ok() {
    /usr/bin/python3 -c 'import safetensors, transformers; assert transformers.__version__ == "4.40.2"' 2>/dev/null
}
if [ -z "$missing" ] && pip_ok; then
    install_nvdisasm
    install_cudnn_frontend
    exit 0
fi
if [ "$(id -u)" != 0 ] && ! command -v sudo >/dev/null; then
    echo "error: missing packages:$missing $pip_packages (run as root or install them)" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if [ -n "$missing" ]; then
    echo "installing:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if ! pip_ok; then
    # Debian marks its Python externally managed; these PyPI packages go to /usr/local beside it
    pip_flags="-q --no-warn-script-location --root-user-action=ignore"
    ls /usr/lib/python3*/EXTERNALLY-MANAGED >/dev/null 2>&1 && pip_flags="$pip_flags --break-system-packages"
    echo "installing (pip, /usr/bin/python3): $pip_packages"
    $SUDO /usr/bin/python3 -m pip install $pip_flags $pip_packages
fi
install_nvdisasm
install_cudnn_frontend
