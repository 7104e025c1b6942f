#!/usr/bin/env bash
# check_ptx_plants.sh: tests/test_ptx.cu detects a wrong lane mapping. Built with -DEMU_PTX_PLANT=1
# (the emulator's mma reads lanes 1 and 4's A fragments swapped) and -DEMU_PTX_PLANT=2 (its ldmatrix
# hands lanes 1 and 4 each other's registers), build/cuda_emu/test_ptx_plant{1,2} must fail with a
# mismatch against the documented layout / the naive loop; the unplanted build must pass.
set -u
ok=1
build/cuda_emu/test_ptx > /dev/null 2>&1 || { echo "FAIL: build/cuda_emu/test_ptx itself fails"; ok=0; }
for p in 1 2; do
    out=$(build/cuda_emu/test_ptx_plant$p 2>&1); rc=$?
    echo "EMU_PTX_PLANT=$p: exit $rc"
    echo "$out" | grep -E "MISMATCH|FAILED" | sed 's/^/  | /'
    if [ $rc -eq 0 ] || ! echo "$out" | grep -qE "MISMATCH|differ from the documented layout"; then
        echo "  FAIL: the swapped lanes went unnoticed"; ok=0
    fi
done
[ $ok -eq 1 ]
