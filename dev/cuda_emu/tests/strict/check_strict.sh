#!/usr/bin/env bash
# check_strict.sh NAME: the proof of one strict rule of the emulator (dev/cuda_emu/tests/strict/NAME.cu,
# built by `make -f dev/cuda_emu/emu.mk emu-strict`: NAME (the planted bug) and NAME_fixed (-DFIXED),
# both with --check where the first line says build=check). The first line of NAME.cu says how to
# run it: np=N (MPI ranks), visible=per-rank (each rank sees one GPU, CUDA_VISIBLE_DEVICES = its
# local rank), env="VAR=VALUE ..." (more environment), expect="REGEX" (what the report must say).
# Proven: with EMU_STRICT=0 (the emulator as lenient as before) the planted bug passes, so the
# rule is what catches it; under the strict rules (the default) it fails with the expected
# report; the fixed twin passes under the strict rules.
set -u
name=$1
dir=$(dirname "$0")
B=build/cuda_emu/strict
head=$(head -1 "$dir/$name.cu")
np=$(echo "$head" | sed -n 's/.*np=\([0-9]*\).*/\1/p')
expect=$(echo "$head" | sed -n 's/.*expect="\([^"]*\)".*/\1/p')
extra=$(echo "$head" | sed -n 's/.*env="\([^"]*\)".*/\1/p')
wrap=""
if echo "$head" | grep -q "visible=per-rank"; then wrap='CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK'; fi
# run_it STRICT PROGRAM: runs PROGRAM on np ranks (or alone) with EMU_STRICT=STRICT; output on stdout
run_it() {
    local strict=$1 prog=$2
    if [ -n "$np" ]; then
        timeout 120 mpirun --allow-run-as-root --oversubscribe -np $np bash -c \
            "EMU_STRICT=$strict $extra $wrap exec $prog" 2>&1
    else
        timeout 120 env EMU_STRICT=$strict $extra $prog 2>&1
    fi
}
ok=1
out=$(run_it 0 $B/$name); rc=$?
echo "planted bug, EMU_STRICT=0 (the lenient emulator): exit $rc"
[ $rc -eq 0 ] || { echo "  FAIL: it should pass without the strict rules (else the rule proves nothing)"; echo "$out"; ok=0; }
out=$(run_it 1 $B/$name); rc=$?
echo "planted bug, strict rules: exit $rc"
echo "$out" | sed 's/^/  | /'
[ $rc -ne 0 ] || { echo "  FAIL: the bug was not caught"; ok=0; }
echo "$out" | grep -Eq "$expect" || { echo "  FAIL: no report matching /$expect/"; ok=0; }
out=$(run_it 1 $B/${name}_fixed); rc=$?
echo "fixed twin, strict rules: exit $rc"
if [ $rc -ne 0 ] || echo "$out" | grep -q "cuda_emu"; then echo "  FAIL: the fixed program must pass silently"; echo "$out"; ok=0; fi
[ $ok -eq 1 ]
