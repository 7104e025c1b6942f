#!/usr/bin/env bash
# check_nccl_p2p.sh: the emulated ncclSend/ncclRecv report their misuse (tests/test_nccl_p2p_plants.cu
# on 2 ranks, built by `make -f dev/cuda_emu/emu.mk emu-tests emu-check`): a receive whose count
# differs from its send ends the run naming both counts; under --check a kernel that reads a
# receive buffer with no event wait after the receive is reported as a race, and with the wait
# (-DFIXED) the run passes silently under three schedules.
set -u
B=build/cuda_emu
run() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x EMU_SCHED "$@" 2>&1; }
ok=1
out=$(EMU_SCHED=forward run $B/test_nccl_p2p_plants mismatch); rc=$?
echo "count mismatch (plain build): exit $rc"
echo "$out" | grep "cuda_emu:" | sed 's/^/  | /'
[ $rc -ne 0 ] && echo "$out" | grep -q "ncclRecv on rank 1 expects 16 bytes from rank 0, whose matching ncclSend sends 20" ||
    { echo "  FAIL: no error naming both counts"; echo "$out"; ok=0; }
out=$(EMU_SCHED=forward run $B/check/test_nccl_p2p_plants no_wait); rc=$?
echo "receive buffer read with no wait (--check): exit $rc"
echo "$out" | grep -A3 "cuda_emu --check" | sed 's/^/  | /'
[ $rc -ne 0 ] && echo "$out" | grep -q "ncclRecv" || { echo "  FAIL: the missing wait was not reported"; echo "$out"; ok=0; }
for sched in forward reverse random:3; do
    out=$(EMU_SCHED=$sched run $B/check/test_nccl_p2p_plants_fixed no_wait); rc=$?
    echo "with the wait (--check, EMU_SCHED=$sched): exit $rc"
    if [ $rc -ne 0 ] || echo "$out" | grep -q "cuda_emu"; then echo "  FAIL: it must pass silently"; echo "$out"; ok=0; fi
done
[ $ok -eq 1 ]
