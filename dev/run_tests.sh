#!/usr/bin/env bash
# Test runner for `make test`: sources every dev/tests/*.sh (or $TEST_DIR/*.sh) in name order.
# Each of those files registers checks with `check NAME COMMAND...` (or check_bg, below); a check
# passes when COMMAND exits 0.
# A failing check prints the tail of its log; the run ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export LOGDIR=${LOGDIR:-build/test_logs}
# When one rank of an mpirun job exits non-zero, Open MPI 4.1 sends the others SIGTERM and waits
# odls_base_sigkill_timeout seconds (default 1) before each further step of killing them: measured
# 1.5 s of 2-rank jobs' 0.4 s that only refuse their flags. Many checks run such jobs on purpose.
export OMPI_MCA_odls_base_sigkill_timeout=${OMPI_MCA_odls_base_sigkill_timeout:-0}
# One OpenMP thread per process unless a check asks for more (40_cpu_speed.sh's thread checks do):
# the PyTorch references' two threads spin at every barrier while anything else holds a core (the
# early builds, the checks side by side): train_gpt2.py's DiLoCo references took 33 s against a
# niced busy loop on each core, 16.4 s with one thread, and 17.2 s with two on an idle machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$LOGDIR"
passed=0
failed=0
failed_names=()

# report NAME RC SECONDS LOG: one PASS/FAIL line (a failure also prints the tail of its log).
report() {
    local name=$1 rc=$2 secs=$3 log=$4
    local cpu=""
    [ -f "$log.cpu" ] && cpu=" cpu $(cpu_of <"$log.cpu")s" && rm -f "$log.cpu"
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        printf 'PASS %-58s %4ds%s\n' "$name" "$secs" "$cpu"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        printf 'FAIL %-58s %4ds  (log: %s)\n' "$name" "$secs" "$log"
        tail -n 15 "$log" | sed 's/^/     | /'
    fi
}

log_of() { echo "$LOGDIR/${1//[^A-Za-z0-9_.-]/_}.log"; }

# TEST_CPU=1 (to find where make test's time goes): each check runs in a subshell and its line
# also gives the CPU seconds (user + system) of what it ran, which shows how many cores it kept busy.
cpu_of() { # the CPU seconds in bash's `times` output (its second line: the children's; written to a
           # file by the shell that ran them, as a `times` in a pipe would count its own)
    sed -n 2p | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%.1f", t }'
}

check() {
    local name=$1; shift
    local log start=$SECONDS rc=0
    log=$(log_of "$name")
    if [ "${TEST_CPU:-0}" = 1 ]; then
        ( "$@"; rc=$?; times >"$log.cpu"; exit $rc ) >"$log" 2>&1 || rc=$?
    else
        "$@" >"$log" 2>&1 || rc=$?
    fi
    report "$name" $rc $((SECONDS - start)) "$log"
}

# check_bg NAME COMMAND...: a check run in the background, beside at most TEST_JOBS - 1 others
# (default: one more than the cores: measured on 2 cores with TEST_CPU=1, two such checks at a time
# kept 1.5 of them busy, as they also wait on sockets, timeouts and the disk). Only for
# single-threaded checks (the emulator runs one thread) that share no files with each other. check_wait, called before anything that needs their
# results (and after every test file), prints them in the order they began.
TEST_JOBS=${TEST_JOBS:-$(($(nproc) + 1))}
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
        [ "${TEST_CPU:-0}" = 1 ] && times >"$log.cpu"
        echo "$rc $(($(date +%s) - start))" >"$log.rc"
    ) &
    bg_pids+=($!)
    bg_names+=("$name")
}

check_wait() {
    local name log rc secs
    [ ${#bg_pids[@]} -gt 0 ] && wait "${bg_pids[@]}" 2>/dev/null # (a bare wait would wait for the early jobs too)
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

# early NAME COMMAND...: starts COMMAND now, in the background at the lowest CPU priority (nice 19:
# it runs on the cycles the checks leave idle, measured at 0.6 of 2 cores through 36_ to 38_), for
# a later check to collect with early_result. Only for work that nothing before that check touches
# (dev/tests/01_early.sh: the nvcc builds, whose outputs only 50_ and 51_ read).
declare -A early_pid early_cmd
early() {
    local name=$1; shift
    local log="$LOGDIR/early_$name.log"
    early_cmd[$name]="$*"
    rm -f "$log.rc"
    ( nice -n 19 "$@" >"$log" 2>&1; echo $? >"$log.rc" ) &
    early_pid[$name]=$!
}

# early_result NAME COMMAND...: waits for the early job NAME, prints its output and returns its exit
# status; where none was started (a filtered run, TESTS=...), runs COMMAND, the same, now.
early_result() {
    local name=$1; shift
    local log="$LOGDIR/early_$name.log" rc=1
    if [ -z "${early_pid[$name]:-}" ]; then "$@"; return; fi
    [ "${early_cmd[$name]}" = "$*" ] || { echo "early_result $name: not the command started early (${early_cmd[$name]})"; return 1; }
    while [ ! -f "$log.rc" ] && kill -0 "${early_pid[$name]}" 2>/dev/null; do sleep 1; done
    cat "$log"
    [ -f "$log.rc" ] && read -r rc <"$log.rc"
    return "$rc"
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
