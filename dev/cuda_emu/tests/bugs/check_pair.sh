#!/usr/bin/env bash
# check_pair.sh NAME: the proof for one class of GPU bug (dev/cuda_emu/tests/bugs/NAME.cu, built by
# `make -f dev/cuda_emu/emu.mk emu-bugs`): the plain emulator build of the broken program passes (the
# friendly emulator does not show the bug); the --check build of it fails to build (static shared
# memory) or exits non-zero; the fixed twin (-DFIXED) built with --check exits 0 without a report
# under the forward, reverse and random:3 schedules.
set -u
name=$1
B=build/cuda_emu/bugs
ok=1
out=$($B/${name}_plain 2>&1); rc=$?
echo "plain build of the broken program: exit $rc"
[ $rc -eq 0 ] || { echo "  FAIL: it should pass without --check (else the check proves nothing)"; echo "$out"; ok=0; }
if [ -x $B/${name}_check ]; then
    out=$($B/${name}_check 2>&1); rc=$?
    echo "--check build of the broken program: exit $rc"
    echo "$out" | sed 's/^/  | /'
    [ $rc -ne 0 ] || { echo "  FAIL: the bug was not caught"; ok=0; }
else
    echo "--check build of the broken program: does not build"
    sed 's/^/  | /' $B/${name}_check.log | grep -m3 "emucc --check" || { echo "  FAIL: no build or the wrong build error"; cat $B/${name}_check.log; ok=0; }
fi
for sched in forward reverse random:3; do
    out=$(EMU_SCHED=$sched $B/${name}_fixed 2>&1); rc=$?
    echo "fixed twin, --check, EMU_SCHED=$sched: exit $rc"
    if [ $rc -ne 0 ] || echo "$out" | grep -q "cuda_emu --check"; then echo "  FAIL: the fixed program must pass silently"; echo "$out"; ok=0; fi
done
[ $ok -eq 1 ]
