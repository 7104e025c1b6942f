#!/usr/bin/env bash
# Test runner for `make test`: sources every dev/tests/*.sh (or $TEST_DIR/*.sh) in name order.
# Each of those files registers checks with `check NAME COMMAND...` (or check_bg, below); a check
# passes when COMMAND exits 0.
# A failing check prints the tail of its log; the run ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export LOGDIR=${LOGDIR:-build/test_logs}
mkdir -p "$LOGDIR"
passed=0
failed=0
failed_names=()

# report NAME RC SECONDS LOG: one PASS/FAIL line (a failure also prints the tail of its log).
report() {
    local name=$1 rc=$2 secs=$3 log=$4
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS %-58s %4ds\n' "$name" "$secs"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        printf 'FAIL %-58s %4ds  (log: %s)\n' "$name" "$secs" "$log"
        tail -n 15 "$log" | sed 's/^/     | /'
    fi
}

log_of() { echo "$LOGDIR/${1//[^A-Za-z0-9_.-]/_}.log"; }

check() {
    local name=$1; shift
    local log start=$SECONDS rc=0
    log=$(log_of "$name")
    "$@" >"$log" 2>&1 || rc=$?
    report "$name" $rc $((SECONDS - start)) "$log"
}

# check_bg NAME COMMAND...: a check run in the background, beside at most TEST_JOBS - 1 others
# (default: the number of cores). Only for single-threaded checks (the emulator runs one thread)
# that share no files with each other. check_wait, called before anything that needs their
# results (and after every test file), prints them in the order they began.
TEST_JOBS=${TEST_JOBS:-$(nproc)}
bg_names=()
bg_pids=()

check_bg() {
    local name=$1; shift
    local log running pid
    log=$(log_of "$name")
    while :; do
        running=0
        for pid in "${bg_pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=$((running + 1)); done
        [ $running -lt "$TEST_JOBS" ] && break
        wait -n 2>/dev/null || sleep 1
    done
    rm -f "$log.rc"
    (
        start=$(date +%s)
        rc=0
        "$@" >"$log" 2>&1 || rc=$?
        echo "$rc $(($(date +%s) - start))" >"$log.rc"
    ) &
    bg_pids+=($!)
    bg_names+=("$name")
}

check_wait() {
    local name log rc secs
    wait "${bg_pids[@]}" 2>/dev/null
    for name in "${bg_names[@]}"; do
        log=$(log_of "$name")
        rc=1 secs=0
        [ -f "$log.rc" ] && read -r rc secs <"$log.rc"
        report "$name" "$rc" "$secs" "$log"
        rm -f "$log.rc"
    done
    bg_names=()
    bg_pids=()
}

only=${TESTS:-}
for file in "${TEST_DIR:-dev/tests}"/*.sh; do
    if [ -n "$only" ] && [[ "$file" != *"$only"* ]]; then continue; fi
    echo "== $file"
    file_start=$SECONDS
    source "$file"
    check_wait
    echo "== $file: $((SECONDS - file_start)) s"
done

if [ $failed -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
