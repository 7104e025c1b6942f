# Planted results for dev/tests/05_runner.sh (not part of make test itself): a background check that
# fails while a slower one passes, and plain checks around them; an early job that fails, collected
# later: its check must fail.
early planted_early bash -c "sleep 3; exit 4"
check planted_plain_pass true
check_bg planted_bg_slow_pass sleep 2
check_bg planted_bg_fail bash -c "echo planted failure; exit 3"
check_bg planted_bg_pass true
check_wait
check planted_plain_fail false
check_bg planted_bg_unwaited_fail false
check planted_early_fail early_result planted_early bash -c "sleep 3; exit 4"
