#!/usr/bin/env bash
# check_nccl_nonblocking.sh: nonblocking communicators of the emulated NCCL, with
# build/cuda_emu/test_nccl_nonblocking on 3 ranks (what it checks: the program's first comment).
# Proven: the program's `owed` mode, which issues a call on a communicator whose earlier
# ncclInProgress it never polled out of, must end with the emulator's report (exit 66).
set -u
M="mpirun --allow-run-as-root --oversubscribe -np 3"
out=$(timeout 60 $M build/cuda_emu/test_nccl_nonblocking 2>&1)
echo "$out" | grep "^nonblocking:"
echo "$out" | grep -q "^nonblocking: all checks passed" || { echo "FAIL the nonblocking test"; echo "$out" | tail -5; exit 1; }
out=$(timeout 60 $M build/cuda_emu/test_nccl_nonblocking owed 2>&1)
if ! echo "$out" | grep -q "not yet polled out of it" || echo "$out" | grep -q "FAIL the unpolled"; then
    echo "FAIL a call on a communicator that owes its poll was not reported"
    echo "$out" | tail -5
    exit 1
fi
echo "the unpolled call (mode owed): caught: $(echo "$out" | grep -m1 'not yet polled' | cut -c1-120)..."
