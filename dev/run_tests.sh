#!/usr/bin/env bash
# Test runner for `make test`: sources every dev/tests/*.sh in name order. Each of those files
# registers checks with `check NAME COMMAND...`; a check passes when COMMAND exits 0.
# A failing check prints the tail of its log; the run ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
export LOGDIR=${LOGDIR:-build/test_logs}
mkdir -p "$LOGDIR"
passed=0
failed=0
failed_names=()

check() {
    local name=$1; shift
    local log="$LOGDIR/${name//[^A-Za-z0-9_.-]/_}.log"
    local start=$SECONDS
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        printf 'PASS %-58s %4ds\n' "$name" $((SECONDS - start))
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        printf 'FAIL %-58s %4ds  (log: %s)\n' "$name" $((SECONDS - start)) "$log"
        tail -n 15 "$log" | sed 's/^/     | /'
    fi
}

only=${TESTS:-}
for file in dev/tests/*.sh; do
    if [ -n "$only" ] && [[ "$file" != *"$only"* ]]; then continue; fi
    echo "== $file"
    source "$file"
done

if [ $failed -gt 0 ]; then
    echo "failed: ${failed_names[*]}"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
