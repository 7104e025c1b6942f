#!/usr/bin/env bash
# expect_asan_report.sh PROG: passes when PROG (an ASan build of a buggy kernel) fails with an
# AddressSanitizer heap-buffer-overflow report that points into the kernel.
out=$("$1" 2>&1)
rc=$?
echo "$out"
[ $rc -ne 0 ] && grep -q "AddressSanitizer: heap-buffer-overflow" <<<"$out" && grep -q "fill_one_too_many" <<<"$out"
