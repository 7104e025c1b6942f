#!/usr/bin/env bash
# check_peer_stops.sh: the asynchronous emulated NCCL and its `peer stops` fault, proven with
# build/cuda_emu/test_nccl_peer_stops on 2 ranks (what each mode does: the program's first comment).
# Proven: an all-reduce returns at once while its peer is 1 s late (the synchronous emulator waited);
# after rank 1 stops answering, rank 0's cudaStreamSynchronize behind a collective never returns
# (ended by a 5 s timeout: exit 124; under the strict host-wait rule the call is reported at once,
# exit 66), while polling sees ncclRemoteError naming rank 1 after the detection delay (0.5 s, within
# 0.5 to 3 s) with the event still pending, and nothing at all within 5 s when detection is off (a
# live but hung peer, which NCCL cannot tell).
set -u
P=build/cuda_emu/test_nccl_peer_stops
M="mpirun --allow-run-as-root --oversubscribe -np 2"
ok=1
expect() { # NAME OUTPUT EXIT WANT_EXIT REGEX
    if [ "$3" != "$4" ] || ! echo "$2" | grep -Eq "$5"; then
        echo "FAIL $1: exit $3 (want $4), no line matching /$5/:"; echo "$2" | sed 's/^/  | /'; ok=0
    else
        echo "ok   $1: $(echo "$2" | grep -E "$5" | head -1)"
    fi
}
first='first all-reduce returned after 0\.[0-9]+ s with the peer 1 s late; polled sum 3'
out=$(timeout 60 $M $P poll 2>&1); rc=$?
expect "async call" "$out" $rc 0 "$first"
expect "poll, peer stops" "$out" $rc 0 \
    'poll: remote process exited or there was a network error after (0\.[5-9]|[12]\.)[0-9]* s, the peer named: rank 1, the event not ready'
out=$(EMU_NCCL_DETECT_S=off timeout 60 $M -x EMU_NCCL_DETECT_S $P poll 2>&1); rc=$?
expect "poll, detection off" "$out" $rc 0 'poll: NCCL operation in progress after 5\.[0-9]+ s, the peer named: rank -1, the event not ready'
out=$(EMU_STRICT=0 timeout 5 $M -x EMU_STRICT $P block 2>&1); rc=$?
expect "blocking call hangs" "$out" $rc 124 'block: cudaStreamSynchronize behind'
echo "$out" | grep -q "FAIL" && { echo "FAIL the blocking call returned"; ok=0; }
out=$(timeout 60 $M $P block 2>&1); rc=$?
expect "strict rule" "$out" $rc 66 'cuda_emu: cudaStreamSynchronize blocks behind a collective \(ncclAllReduce\)'
[ $ok -eq 1 ]
