# CPU trainer checks (sourced by dev/run_tests.sh): build, agreement with the PyTorch
# reference, the test of that test, determinism, resume, and every bad-input error.
REF=build/ref
CPU="./train_gpt2cpu"
TINY="-e d2 -V 257 -sl 64 -b 4 -t 32"

make_reference() {
    mkdir -p $REF &&
    /usr/bin/python3 train_gpt2.py --model d2 --channels 64 --heads 4 --vocab 257 --max-seq 64 --seed 1 \
        --write-model $REF/model.bin --write-model-bf16 $REF/model_bf16.bin --data data/kjv/kjv_val.bin \
        --B 4 --T 32 --write-state $REF/state.bin --steps 10 --write-losses $REF/losses.txt
}

# Passes when the command fails with exactly one stderr line "error: ..." containing $2.
expect_error() {
    local name=$1 expected=$2; shift 2
    check "bad_input_$name" bash -c '
        expected=$1; shift
        "$@" >/dev/null 2>build/bad_input.err; rc=$?
        cat build/bad_input.err
        [ $rc -ne 0 ] || { echo "exit code 0"; exit 1; }
        [ "$(wc -l < build/bad_input.err)" -eq 1 ] || { echo "not exactly one line"; exit 1; }
        grep -q "^error: .*$expected" build/bad_input.err || { echo "message lacks: $expected"; exit 1; }' \
        _ "$expected" "$@"
}

# Two runs with the same flags print the same losses.
deterministic_runs() {
    for run in a b; do
        rm -rf build/det_$run
        $CPU $TINY -x 8 -v 4 -m 2 -s 0 -l 1e-3 -o build/det_$run >/dev/null || return 1
    done
    cmp build/det_a/main.log build/det_b/main.log && cat build/det_a/main.log
}

# A run stopped at step 4 and resumed gives the uninterrupted run's losses for steps 5..8.
resume_single() {
    rm -rf build/resume_a build/resume_b && mkdir -p build/resume_b
    $CPU $TINY -x 8 -v 0 -s 0 -l 1e-3 -c 0.1 -n 4 -o build/resume_a >/dev/null || return 1
    cp build/resume_a/*_00000004* build/resume_b/ || return 1
    $CPU $TINY -x 8 -v 0 -s 0 -l 1e-3 -c 0.1 -y 1 -o build/resume_b | grep "resumed from step 4" || return 1
    diff <(grep -E "^s:[5-8] " build/resume_a/main.log) build/resume_b/main.log && cat build/resume_b/main.log
}

# An unfinished checkpoint (no DONE marker) is never resumed from.
resume_ignores_incomplete() {
    rm -rf build/resume_c && mkdir -p build/resume_c
    cp build/resume_a/*_00000004* build/resume_c/ && rm build/resume_c/DONE_00000004
    $CPU $TINY -x 2 -v 0 -s 0 -y 1 -o build/resume_c | grep -q "resumed" && return 1
    grep -c trl build/resume_c/main.log | grep -qx 2
}

make_bad_files() {
    local d=build/bad && mkdir -p $d
    local shard=dev/data/tiny_shard.py
    /usr/bin/python3 $shard $d/ok.bin --ntok 4000 --vocab 257 --seed 1 &&
    /usr/bin/python3 $shard $d/magic.bin --ntok 4000 --vocab 257 --bad-magic &&
    /usr/bin/python3 $shard $d/version.bin --ntok 4000 --vocab 257 --bad-version &&
    /usr/bin/python3 $shard $d/trunc.bin --ntok 4000 --vocab 257 --truncate &&
    /usr/bin/python3 $shard $d/bigtok.bin --ntok 4000 --vocab 257 --token-too-big 1234 &&
    /usr/bin/python3 $shard $d/short.bin --ntok 100 --vocab 257 --seed 1 &&
    /usr/bin/python3 - $d <<'PY'
import struct, sys
d = sys.argv[1]
model = open("build/ref/model.bin", "rb").read()
def patched(index, value):
    head = list(struct.unpack("256i", model[:1024]))
    head[index] = value
    return struct.pack("256i", *head) + model[1024:]
open(d + "/model_magic.bin", "wb").write(patched(0, 1234))
open(d + "/model_version.bin", "wb").write(patched(1, 4))
open(d + "/model_trunc.bin", "wb").write(model[:-100])
tok = open("data/kjv/kjv_tokenizer.bin", "rb").read()
open(d + "/tok_magic.bin", "wb").write(struct.pack("i", 99) + tok[4:])
PY
}

check build_cpu make -s train_gpt2cpu test_gpt2cpu
check kjv_data make -s data/kjv/kjv_train.bin
check reference_files make_reference
check test_gpt2cpu ./test_gpt2cpu $REF/model.bin $REF/state.bin $REF/losses.txt data/kjv/kjv_val.bin -b $REF/model_bf16.bin
# the test of the test: a perturbed gradient (tensor 4, qkvw) must make test_gpt2cpu fail
check test_gpt2cpu_detects_perturbed_grad bash -c "! ./test_gpt2cpu $REF/model.bin $REF/state.bin $REF/losses.txt data/kjv/kjv_val.bin -p 4"
check deterministic_runs deterministic_runs
check resume_single_process resume_single
check resume_ignores_incomplete_checkpoint resume_ignores_incomplete
check help_lists_flags bash -c "$CPU --help | grep -q -- '-ds' && $CPU -h | grep -q -- '-sf'"

check make_bad_files make_bad_files
B=build/bad
expect_error missing_model "no such model file" $CPU -e build/bad/none.bin
expect_error model_magic "model_magic.bin: bad magic" $CPU -e $B/model_magic.bin
expect_error model_version "model_version.bin: unsupported model version" $CPU -e $B/model_version.bin
expect_error model_truncated "model_trunc.bin: file size" $CPU -e $B/model_trunc.bin
expect_error missing_data "-i build/bad/none.bin: no data files match" $CPU $TINY -i $B/none.bin
expect_error shard_magic "magic.bin: bad magic" $CPU $TINY -i $B/magic.bin
expect_error shard_version "version.bin: unsupported data shard version" $CPU $TINY -i $B/version.bin
expect_error shard_truncated "trunc.bin: file size" $CPU $TINY -i $B/trunc.bin
expect_error token_too_big "bigtok.bin: token 257 at byte offset 3492 is >= vocab size 257" $CPU $TINY -i $B/bigtok.bin -j ""
expect_error shard_too_small "short.bin: no shard holds one global batch" $CPU $TINY -i $B/short.bin
expect_error tokenizer_magic "tok_magic.bin: bad magic" $CPU $TINY -i $B/ok.bin -tk $B/tok_magic.bin
expect_error T_above_max_seq_len "-t 128: larger than the model's max_seq_len 64" $CPU -e $REF/model.bin -t 128
expect_error batch_not_dividing "-d 1000: not a multiple of B\*T\*ranks" $CPU $TINY -i $B/ok.bin -d 1000
expect_error zero_B "-b 0: must be in" $CPU -b 0
expect_error negative_T "-t -5: must be in" $CPU -t -5
expect_error zero_steps "-x 0: must be -1" $CPU -x 0
expect_error zero_val_batches "-m 0: must be in" $CPU -m 0
expect_error zero_stage_range "-z 3: must be in 0..2" $CPU -z 3
expect_error unknown_flag "unknown flag -Q" $CPU -Q 1
expect_error malformed_int "-b abc: not an integer" $CPU -b abc
expect_error malformed_float "-l fast: not a number" $CPU -l fast
expect_error missing_value "-x needs a value" $CPU -x
expect_error bad_schedule "-k steep: unknown schedule" $CPU $TINY -i $B/ok.bin -j "" -k steep
expect_error bad_descriptor "-e x12: no such model file" $CPU -e x12
expect_error gpu_flag_on_cpu "-r is a flag of the GPU trainer" $CPU -r 1
expect_error vocab_with_file "-V 300: applies to descriptor models only" $CPU -e $REF/model.bin -V 300

# -a 1 trains on one batch over and over: its loss must fall from ln(257) = 5.55 to near zero
overfit_one_batch() {
    $CPU -e d2 -V 257 -sl 64 -b 2 -t 32 -i data/kjv/kjv_val.bin -j "" -s 0 -x 40 -l 3e-3 -a 1 -k constant \
        -o build/overfit >/dev/null || return 1
    tail -n 1 build/overfit/main.log
    awk -F'trl:' '/trl:/ { split($2, f, " "); loss = f[1] } END { exit !(loss < 0.05) }' build/overfit/main.log
}
check overfit_one_batch overfit_one_batch
check lr_schedules /usr/bin/python3 dev/test_schedules.py $CPU
