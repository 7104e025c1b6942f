#!/usr/bin/env bash
# check_banks.sh: the --check build of tests/bank_conflicts.cu (build/cuda_emu/check/bank_conflicts)
# must pass and report, for every source line marked `// BANKS n`, a worst case of exactly n-way
# (`cuda_emu banks: ... at FILE:LINE ...: OP, R warp requests, N-way worst, ...` on stderr at exit).
set -u
src=dev/cuda_emu/tests/bank_conflicts.cu
out=$(build/cuda_emu/check/bank_conflicts 2>&1) || { echo "$out"; echo "FAIL: the program failed"; exit 1; }
echo "$out" | grep "cuda_emu banks:"
ok=1
while IFS=: read -r line rest; do
    want=$(echo "$rest" | sed -n 's/.*BANKS \([0-9]*\).*/\1/p')
    got=$(echo "$out" | grep "cuda_emu banks:.*bank_conflicts.cu:$line " | sed -n 's/.* \([0-9]*\)-way worst.*/\1/p')
    if [ "$got" = "$want" ]; then echo "line $line: $got-way, as expected"
    else echo "FAIL: line $line: reported '${got:-nothing}', want $want-way"; ok=0; fi
done < <(grep -n "// BANKS [0-9]" $src)
[ $ok -eq 1 ]
