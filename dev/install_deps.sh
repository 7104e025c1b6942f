#!/usr/bin/env bash
# Installs what the build, the tests and the quick start need on a fresh Debian machine:
# Open MPI, OpenBLAS (the OpenMP build, so Debian's PyTorch does not fall back to the
# reference BLAS), Debian's CPU PyTorch and matplotlib for /usr/bin/python3, the KJV text
# (bible-kjv), and clang with its libFuzzer and sanitizer runtimes (make fuzz,
# dev/tests/45_fuzz.sh).
# Packages already present are left alone; it does nothing when everything is there.
set -e
packages="openmpi-bin libopenmpi-dev libopenblas-dev libopenblas0-openmp python3-torch python3-numpy python3-matplotlib bible-kjv clang libclang-rt-14-dev"
missing=""
for p in $packages; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
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
