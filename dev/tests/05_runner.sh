# The runner itself (sourced by dev/run_tests.sh): dev/run_tests.sh on the planted checks of
# dev/tests/runner/ must count every result, background ones included (check_bg, and one that no
# check_wait in its file collects), print them in the order they began, and exit non-zero.
runner_counts_planted_results() {
    local out rc=0
    out=$(TEST_DIR=dev/tests/runner TESTS= LOGDIR=build/test_tmp/runner bash dev/run_tests.sh 2>&1) || rc=$?
    echo "$out (exit $rc)"
    [ $rc -ne 0 ] && [ "$(echo "$out" | tail -1)" = "3 passed, 4 failed" ] || return 1
    [ "$(echo "$out" | grep -oE '^(PASS|FAIL) planted_[a-z_]+' | tr '\n' ' ')" = "PASS planted_plain_pass PASS planted_bg_slow_pass \
FAIL planted_bg_fail PASS planted_bg_pass FAIL planted_plain_fail FAIL planted_early_fail FAIL planted_bg_unwaited_fail " ] &&
        echo "$out" | grep -q "| planted failure"
}
check runner_counts_planted_results runner_counts_planted_results
