# Fuzzing the readers (sourced by dev/run_tests.sh; see docs/fuzzing.md): builds the libFuzzer
# harnesses of dev/fuzz, runs each over its seed corpus (written at test time by
# dev/fuzz/make_seeds.c) plus a fixed number of mutated inputs from a fixed random seed (no
# crash, leak, hang or error message that fails to name the file may appear), and proves the
# set-up by a planted out-of-bounds read that must be caught.
FUZZ_TEST_RUNS=${FUZZ_TEST_RUNS:-20000}
check fuzz_build make -s -j2 fuzz-build
for harness in model state shard tokenizer debug_state args manifest eval; do
    check "fuzz_$harness" dev/fuzz/run.sh runs "$FUZZ_TEST_RUNS" "$harness"
done
check fuzz_planted_bug_found dev/fuzz/run.sh planted 20000
