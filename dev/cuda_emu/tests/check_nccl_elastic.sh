#!/usr/bin/env bash
# check_nccl_elastic.sh: the emulated NCCL without mpirun, past a killed process, with a newcomer
# (build/cuda_emu/test_nccl_elastic; what each process does: the program's first comment). Proven:
# 3 processes started here with RANK / WORLD_SIZE (the id through a file) all-reduce; rank 2 dies by
# SIGKILL; ranks 0 and 1 see ncclRemoteError naming rank 2 within 5 s, shrink with NCCL_SHRINK_ABORT,
# all-reduce on the 2 ranks left and, with a 4th process started afterwards, on a new 3-rank
# communicator; the three exit 0, each run bounded by timeout. The planted emulator whose ended
# connections are never reported (EMU_NCCL_PLANT=2) must not pass: the survivors never see an error
# (and they exit 1 by themselves, a collective still stuck: exit does not wait for it).
set -u
# run PROGRAM: the scenario with PROGRAM; its processes' lines go to stdout; 0 when all passed.
run() {
    local p=$1 d pids=() r rc=0
    d=$(mktemp -d)
    for r in 0 1 2; do
        (RANK=$r WORLD_SIZE=3 TRAIN_GPT2_TIMEOUT=20 timeout 40 $p $d start) > $d/start$r.txt 2>&1 &  # ( ): no "Killed" line
        pids+=($!)
    done
    wait ${pids[2]}
    r=$?
    [ $r = 137 ] || { echo "rank 2 ended with $r (want 137: SIGKILL)"; rc=1; }
    RANK=2 WORLD_SIZE=3 TRAIN_GPT2_TIMEOUT=20 timeout 40 $p $d join > $d/join.txt 2>&1 &
    pids[2]=$!
    for r in 0 1; do
        wait ${pids[$r]} || { echo "rank $r exited with $?"; rc=1; }
    done
    [ $rc = 0 ] || kill ${pids[2]} 2>/dev/null  # the survivors failed: nobody will share the newcomer's id
    wait ${pids[2]} || { echo "the newcomer exited with $?"; rc=1; }
    cat $d/start0.txt $d/start1.txt $d/start2.txt $d/join.txt
    [ "$(cat $d/*.txt | grep -c '^elastic: rank [0-2]: ok ')" = 10 ] || rc=1
    rm -rf $d
    return $rc
}
start=$SECONDS
run build/cuda_emu/test_nccl_elastic || { echo "FAIL the elastic scenario"; exit 1; }
echo "the elastic scenario passed in $((SECONDS - start)) s"
if out=$(run build/cuda_emu/test_nccl_elastic_plant2 2>&1); then
    echo "$out"; echo "FAIL the planted emulator (ended connections never reported) passed"; exit 1
fi
echo "the planted emulator (ended connections never reported): caught: $(echo "$out" | grep -m1 FAIL)"
# its survivors exit(1) with the all-reduce still stuck on their progress threads: exit must not wait for it
echo "$out" | grep -q "^rank 0 exited with 1$" || { echo "$out"; echo "FAIL exit waited for a stuck collective"; exit 1; }
echo "its survivors exited by themselves (exit 1) with a collective stuck"
