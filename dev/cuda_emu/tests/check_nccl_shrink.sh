#!/usr/bin/env bash
# check_nccl_shrink.sh: ncclCommShrink / ncclCommRevoke of the emulated NCCL, with
# build/cuda_emu/test_nccl_shrink on 3 ranks (what it checks: the program's first comment). Proven:
# after rank 2 stops answering, ranks 0 and 1 see ncclRemoteError naming it, shrink the world with
# NCCL_SHRINK_ABORT into a 2-rank communicator whose all-reduce sums 3, the stuck all-reduce
# abandoned; the planted emulator whose revoke abandons nothing (EMU_NCCL_PLANT=1) must not pass:
# the shrunk communicator's all-reduce queues behind the stuck one and never completes.
set -u
M="mpirun --allow-run-as-root --oversubscribe -np 3"
out=$(timeout 60 $M build/cuda_emu/test_nccl_shrink 2>&1)
echo "$out" | grep "^shrink:"
echo "$out" | grep -q "^shrink: all checks passed" || { echo "FAIL the shrink test"; exit 1; }
out=$(timeout 15 $M build/cuda_emu/test_nccl_shrink_plant1 2>&1)
if echo "$out" | grep -q "^shrink: all checks passed"; then echo "FAIL the planted emulator passed"; exit 1; fi
echo "the planted emulator (a revoke abandons nothing): caught, its last line: $(echo "$out" | grep '^shrink:' | tail -1)"
