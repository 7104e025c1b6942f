#!/usr/bin/env bash
# Runs the fuzz harnesses of dev/fuzz (built by `make fuzz-build`) from a freshly written seed
# corpus, and prints one line per harness: inputs run, executions per second, result.
#   dev/fuzz/run.sh seconds S [HARNESS...]  fuzz each for S seconds; the corpus grows in
#                                           build/fuzz/corpus/HARNESS and is kept
#   dev/fuzz/run.sh runs N [HARNESS...]     each runs its seeds, then N mutated inputs from a
#                                           fixed random seed (make test), in a scratch corpus
#   dev/fuzz/run.sh planted N               the planted-bug harnesses (an out-of-bounds read, a
#                                           leak) must be caught within N inputs
# Crash, leak and hang reproducers go to build/fuzz/crashes/HARNESS-*; rerun one with
# build/fuzz/fuzz_HARNESS FILE (FUZZ_VERBOSE=1 prints why each input was refused).
set -u
cd "$(dirname "$0")/../.."
mode=$1
amount=$2
shift 2
harnesses=${*:-model state shard tokenizer debug_state args manifest eval}
out=build/fuzz
rm -rf "$out/seeds" "$out/scratch"
"$out/make_seeds" "$out/seeds" || exit 1
mkdir -p "$out/crashes" "$out/logs"
# -rss_limit_mb/-malloc_limit_mb: a reader that asks for more than 512 MiB at once for a file
# of a few KB is a bug; -timeout: a single input running 10 s is a hang.
common="-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1"

run_one() { # name binary corpus-dir extra-options...
    local name=$1 bin=$2 corpus=$3
    shift 3
    local log=$out/logs/$name.log opts=""
    [ "$name" = args ] && opts="-dict=$out/seeds/args.dict"
    "$bin" $common $opts -artifact_prefix="$out/crashes/$name-" "$@" "$corpus" "$out/seeds/${name%_planted}" >"$log" 2>&1
    local rc=$?
    local runs rate
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    printf '%-12s %8s inputs %6s exec/s  rc %d\n' "$name" "${runs:-?}" "${rate:-?}" $rc
    if [ $rc -ne 0 ]; then grep -m3 -E 'ERROR|SUMMARY|fuzz:' "$log"; fi
    return $rc
}

status=0
# planted NAME PATTERN: build/fuzz/planted_NAME must fail within $amount inputs with PATTERN
planted() {
    local name=$1 pattern=$2
    mkdir -p "$out/scratch/${name}_planted"
    run_one "${name}_planted" "$out/planted_$name" "$out/scratch/${name}_planted" -seed=1 -runs="$amount"
    local rc=$?
    rm -f "$out"/crashes/"${name}"_planted-*
    if [ $rc -ne 0 ] && grep -q "$pattern" "$out/logs/${name}_planted.log"; then
        echo "planted bug in $name found"
        return 0
    fi
    echo "planted bug in $name NOT found within $amount inputs"
    return 1
}

if [ "$mode" = planted ]; then
    planted shard 'ERROR: AddressSanitizer: \(heap-buffer-overflow\|SEGV\)' || status=1
    planted tokenizer 'fuzz: tokenizer_init left 1 blocks' || status=1
    exit $status
fi
for h in $harnesses; do
    if [ "$mode" = seconds ]; then
        mkdir -p "$out/corpus/$h"
        run_one "$h" "$out/fuzz_$h" "$out/corpus/$h" -max_total_time="$amount" || status=1
    else
        mkdir -p "$out/scratch/$h"
        run_one "$h" "$out/fuzz_$h" "$out/scratch/$h" -seed=1 -runs="$amount" || status=1
    fi
done
exit $status
