#!/usr/bin/env bash
# Builds llm.c's GPU trainer, train_gpt2cu, from a checkout of its public source, for the side-by-side
# timing of dev/gpu_first_run.sh (--llmc). Nothing of llm.c is kept in this repository: the caller
# brings the source (on a lent GPU machine without internet: fetched on another machine and carried
# over), this script copies what the build needs into OUT/src and builds there; the checkout is
# never written to.
#
#   bash dev/build_llmc.sh SRC [--arch CC] [--out DIR]
#
# SRC   llm.c's source: its Makefile, train_gpt2.cu and llmc/ are copied.
# --arch the compute capability as digits (90: H100, H200); default the first GPU's (nvidia-smi),
#        else 90.
# --out  default build/llmc (in this repository); the binary is DIR/train_gpt2cu, the build's output DIR/build.log.
#
# The build, as llm.c's own Makefile does it: BF16, cuDNN attention through the frontend headers in
# build/cudnn_frontend/include (make deps), one GPU (NO_MULTI_GPU=1: no NCCL), no MPI. In the copy,
# three changes let it build with CUDA 13 on a machine as lent (docs/gpu.md, "The first GPU hour"):
#   - cudaMemAdvise takes a cudaMemLocation from CUDA 13 on, where llm.c passes a device number for
#     the host (cudaCpuDeviceId, in its managed-memory fallback): {cudaMemLocationTypeHost, 0};
#   - NVML off (llm.c uses it when nvml.h is found, for its power and clock printout, and links
#     -lnvidia-ml always): a machine with only the driver's libnvidia-ml.so.1 has nothing to link;
#   - NVRTC linked: the cuDNN frontend that make deps installs calls it.
# Libraries outside the CUDA toolkit (a Python's site-packages) are linked through dev/gpu_libs.sh.
# Exit 1 with one line on bad arguments or a source that is not llm.c's; the build's own exit status
# (its log's last lines printed) when it fails.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "build_llmc.sh: error: $*" >&2; exit 1; }

SRC="" ARCH="" OUT=$ROOT/build/llmc
while [ $# -gt 0 ]; do
    case "$1" in
        --arch | --out)
            [ $# -ge 2 ] || die "$1 needs a value"
            if [ "$1" = --arch ]; then ARCH=$2; else OUT=$2; fi
            shift 2 ;;
        -*) die "unknown argument '$1' (usage: bash dev/build_llmc.sh SRC [--arch CC] [--out DIR])" ;;
        *) [ -z "$SRC" ] || die "one source folder only ('$SRC', then '$1')"; SRC=$1; shift ;;
    esac
done
[ -n "$SRC" ] || die "no source folder (usage: bash dev/build_llmc.sh SRC [--arch CC] [--out DIR])"
for f in Makefile train_gpt2.cu llmc/cuda_utils.cuh llmc/mfu.h; do
    [ -f "$SRC/$f" ] || die "$SRC: no $f there (want a checkout of llm.c's source)"
done
grep -q '^train_gpt2cu:' "$SRC/Makefile" || die "$SRC/Makefile: no train_gpt2cu target (want llm.c's Makefile)"
SRC=$(cd "$SRC" && pwd)
if [ -z "$ARCH" ]; then
    ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d '. ')
    [ -n "$ARCH" ] || ARCH=90
fi
case "$ARCH" in [1-9][0-9] | [1-9][0-9][0-9]) ;; *) die "--arch $ARCH: want the compute capability as digits (90)" ;; esac
FE=$ROOT/build/cudnn_frontend/include
[ -f "$FE/cudnn_frontend.h" ] || die "$FE/cudnn_frontend.h missing: run make deps (the cuDNN frontend headers)"
command -v nvcc > /dev/null 2>&1 || die "no nvcc on PATH"

mkdir -p "$OUT" || die "--out $OUT: cannot create it"
OUT=$(cd "$OUT" && pwd)
rm -rf "$OUT/src" "$OUT/train_gpt2cu"
mkdir -p "$OUT/src/cudnn-frontend" || die "cannot write $OUT"
cp -r "$SRC/Makefile" "$SRC/train_gpt2.cu" "$SRC/llmc" "$OUT/src/" || die "cannot copy $SRC"
ln -s "$FE" "$OUT/src/cudnn-frontend/include"  # where llm.c's Makefile looks for the frontend
cd "$OUT/src" || exit 1

nvcc_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)
if [ "${nvcc_major:-0}" -ge 13 ]; then
    sed -i 's/cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)/cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})/' \
        llmc/cuda_utils.cuh
fi
sed -i 's/^#if __has_include(<nvml.h>)/#if 0  \/\/ NVML off (dev\/build_llmc.sh)/' llmc/mfu.h
sed -i 's/[[:space:]]*-lnvidia-ml//' Makefile

# headers and libraries that only a Python's site-packages holds (none where the toolkit has them)
incs=$(bash "$ROOT/dev/gpu_libs.sh" cflags cudnn nvrtc 2> /dev/null)
export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:-} $incs"
libs="$(bash "$ROOT/dev/gpu_libs.sh" ldflags "$OUT/links" cublasLt cudnn nvrtc 2> /dev/null) -lnvrtc"
echo "build_llmc.sh: llm.c from $SRC, sm_$ARCH, nvcc $nvcc_major, in $OUT/src"
make train_gpt2cu USE_CUDNN=1 NO_MULTI_GPU=1 NO_USE_MPI=1 GPU_COMPUTE_CAPABILITY="$ARCH" NVCC_LDLIBS="$libs" \
    > "$OUT/build.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -x train_gpt2cu ]; then
    tail -n 8 "$OUT/build.log" >&2
    echo "build_llmc.sh: error: the build failed (exit $rc; $OUT/build.log)" >&2
    exit $(( rc ? rc : 1 ))
fi
mv train_gpt2cu "$OUT/train_gpt2cu"
echo "build_llmc.sh: $OUT/train_gpt2cu"
