# The cuDNN attention path (-at cudnn, make USE_CUDNN=1; sourced by dev/run_tests.sh after
# 50_gpu_trainer.sh, whose head-size-64 reference model $GREF64 and emulated builds it reuses; alone:
# TESTS=51_gpu_cudnn dev/run_tests.sh): the glue with the real frontend headers through nvcc, linked
# as make USE_CUDNN=1 train_gpt2 links it (its kernels the BF16 build's, by their ptxas resources);
# through the emulator's frontend, cuDNN against our tensor-core kernels and a double reference at
# GPT-2 124M's layer width (T 512) and an odd T, test_gpt2
# -at cudnn against PyTorch (a checked build), training steps at T 77 with -at cudnn, -at ours and
# the CPU trainer (the test model, and one layer of 124M's width); a planted wrong stride in the
# glue caught; -at cudnn refused where the build has no cuDNN; the emulated frontend's own numbers
# and refusals (dev/cuda_emu/tests/test_cudnn_frontend.cpp). Cost, measured on the shared 2-core
# machine (load average about 6): 2 min 34 s of wall time, 1 min 51 s of CPU, with the glue's nvcc
# object already in build/gpu; on a fresh clone its compile adds about 70 s of one core, run beside
# the emulated checks.
CUDNN_TMP=build/test_tmp/gpu_cudnn
mkdir -p $CUDNN_TMP
# Run alone (TESTS=51_gpu_cudnn), 50_gpu_trainer.sh's definitions are missing: take them from that
# file (everything before its first check) and make its head-size-64 reference.
if ! declare -f gpu_reference_hs64 > /dev/null; then
    source <(sed -n '1,/^check /{/^check /d;p}' dev/tests/50_gpu_trainer.sh)
    check gpu_reference_hs64 gpu_reference_hs64
fi

# The glue with the planted bug: q, k and v read with a token stride of C instead of 3C (as if each
# were its own (B, T, C) tensor). The attention test must report wrong numbers for cuDNN.
gpu_cudnn_detects_wrong_stride() {
    local dir=$CUDNN_TMP/stride_mutant
    rm -rf $dir && mkdir -p $dir/llmc $dir/dev/cuda && cp llmc/* $dir/llmc/ && cp dev/cuda/attention.cu dev/cuda/*.cuh $dir/dev/cuda/ ||
        return 1
    sed -i 's/return {s.T \* 3 \* C, s.HS, 3 \* C, 1};/return {s.T * 3 * C, s.HS, C, 1};/' $dir/llmc/cudnn_att.cpp
    grep -q "return {s.T \* 3 \* C, s.HS, C, 1};" $dir/llmc/cudnn_att.cpp || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc -O1 -DENABLE_CUDNN -o $dir/attention $dir/dev/cuda/attention.cu $dir/llmc/cudnn_att.cpp || return 1
    if $dir/attention --cudnn-small > $dir/out.txt; then echo "the wrong stride passed"; return 1; fi
    grep "^FAIL" $dir/out.txt | head -5
    grep -q "^FAIL.* cudnn " $dir/out.txt
}

# cudnn_three_way TAG MODEL B STEPS: STEPS steps at T 77 from one model file with -at cudnn and
# -at ours (the emulated BF16 trainer) and train_gpt2cpu (fp32). Each loss within test_gpt2's BF16
# step tolerance (2e-3) of the others, each gradient norm (the backward's witness) within 2e-2
# relative.
cudnn_three_way() {
    local tag=$1 model=$2 B=$3 steps=$4 at
    local flags="-e $model -i data/kjv/kjv_train.bin -b $B -t 77 -x $steps -l 1e-3 -v 0 -s 0"
    for at in cudnn ours; do
        rm -rf $CUDNN_TMP/${tag}_$at
        build/gpu/train_gpt2emu_bf16_cudnn $flags -at $at -o $CUDNN_TMP/${tag}_$at | grep "^attention:" || return 1
    done
    rm -rf $CUDNN_TMP/${tag}_cpu
    ./train_gpt2cpu $flags -o $CUDNN_TMP/${tag}_cpu > /dev/null || return 1
    python3 - $CUDNN_TMP/$tag $steps <<'PY'
import re, sys
d, n = sys.argv[1], int(sys.argv[2])
def steps(run):
    text = open("%s_%s/main.log" % (d, run)).read()
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in re.finditer(r"^s:(\d+) trl:(\S+) .*norm:(\S+)", text, re.M)}
runs = {r: steps(r) for r in ("cudnn", "ours", "cpu")}
ok = all(sorted(v) == list(range(1, n + 1)) for v in runs.values())
worst_loss = worst_norm = 0.0
for a, b in (("cudnn", "ours"), ("cudnn", "cpu"), ("ours", "cpu")):
    for s in range(1, n + 1):
        (la, na), (lb, nb) = runs[a][s], runs[b][s]
        print("step %d %-5s vs %-4s: loss %.6f %.6f (diff %.1e), grad norm %.6f %.6f (rel %.1e)" %
              (s, a, b, la, lb, abs(la - lb), na, nb, abs(na - nb) / nb))
        worst_loss, worst_norm = max(worst_loss, abs(la - lb)), max(worst_norm, abs(na - nb) / nb)
print("max loss difference %.2e (tolerance 2e-3), max grad norm difference %.2e relative (tolerance 2e-2)" %
      (worst_loss, worst_norm))
sys.exit(0 if ok and worst_loss <= 2e-3 and worst_norm <= 2e-2 else 1)
PY
}

# the head-size-64 test model (C 128, NH 2), B 2, three steps
gpu_cudnn_vs_ours_vs_cpu() { cudnn_three_way hs64 $GREF64/model.bin 2 3; }

# GPT-2 124M's layer (C 768, NH 12; one layer, vocabulary 257), B 1, one step
gpu_cudnn_vs_ours_vs_cpu_124M_layer() {
    /usr/bin/python3 train_gpt2.py --model d1 --channels 768 --heads 12 --vocab 257 --max-seq 128 --seed 3 \
        --write-model $CUDNN_TMP/layer124M.bin > /dev/null || return 1
    cudnn_three_way layer124M $CUDNN_TMP/layer124M.bin 1 1
}

# Where the build has no cuDNN, -at cudnn stops at start-up with one line; the CPU trainer has no -at.
gpu_cudnn_refused_without() {
    local out rc
    out=$(build/gpu/train_gpt2emu_bf16 -e $GREF64/model.bin -x 1 -at cudnn 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: -at cudnn: this train_gpt2 was built without cuDNN (build it with make USE_CUDNN=1)" ] ||
        return 1
    out=$(./train_gpt2cpu -at cudnn 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: -at is a flag of the GPU trainer train_gpt2 only" ]
}

# The nvcc-built trainer with cuDNN linked runs up to the GPU check (its libraries load).
gpu_cudnn_no_gpu_message() { gpu_binary_no_gpu_message build/gpu/train_gpt2_cudnn; }

# Its kernels are the BF16 build's (-DENABLE_CUDNN changes host code only; cuDNN launches its own),
# with the same registers and static shared memory on sm_80 and sm_90 (its ptxas log against
# gpu_nvcc_sm80_sm90's), so 50's launch-limits table covers them; a copy of its log with one
# register more in a kernel must fail the comparison.
gpu_cudnn_launch_limits() {
    local log=build/gpu/train_gpt2_cudnn.ptxas.log planted=$CUDNN_TMP/ptxas_planted.log
    [ -f $log ] || { echo "$log missing: build/gpu/train_gpt2_cudnn is older than its recipe (remove it, rebuild)"; return 1; }
    python3 dev/gpu_kernels/launch_limits.py --same-kernels build/gpu/ptxas_train_gpt2_BF16.log $log || return 1
    sed '0,/Used 32 registers/s//Used 33 registers/' $log > $planted && ! cmp -s $log $planted ||
        { echo "the mutation did not apply"; return 1; }
    if python3 dev/gpu_kernels/launch_limits.py --same-kernels build/gpu/ptxas_train_gpt2_BF16.log $planted; then
        echo "the planted register count passed"; return 1
    fi
}

# nvcc beside the emulated build and checks (the glue first, about 70 s of one core on a fresh
# clone, then the two programs at once): started first, since it is the longest path of this file
check_bg gpu_cudnn_nvcc_build early_result gpu_cudnn_nvcc make -s -j2 -f dev/gpu.mk build/gpu/train_gpt2_cudnn build/gpu/attention_cudnn
check gpu_cudnn_emu_build bash -c "make -s -j2 -f dev/gpu.mk build/gpu/attention_emu_cudnn build/gpu/test_gpt2emu_bf16_cudnn \
    build/gpu/train_gpt2emu_bf16_cudnn build/gpu/train_gpt2emu_bf16 && make -s -f dev/cuda_emu/emu.mk build/cuda_emu/test_cudnn_frontend"
check_bg gpu_cudnn_emulated_frontend build/cuda_emu/test_cudnn_frontend
check_bg gpu_cudnn_test_gpt2emu_bf16 build/gpu/test_gpt2emu_bf16_cudnn $GPU_TEST64_ARGS -at cudnn -k 0
check_bg gpu_cudnn_attention_124M_odd_T build/gpu/attention_emu_cudnn --cudnn
check_bg gpu_cudnn_vs_ours_vs_cpu gpu_cudnn_vs_ours_vs_cpu
check_bg gpu_cudnn_vs_ours_vs_cpu_124M_layer gpu_cudnn_vs_ours_vs_cpu_124M_layer
check_bg gpu_cudnn_detects_wrong_stride gpu_cudnn_detects_wrong_stride
check_bg gpu_cudnn_refused_without gpu_cudnn_refused_without
check_wait
check gpu_cudnn_no_gpu_message gpu_cudnn_no_gpu_message
check gpu_cudnn_launch_limits gpu_cudnn_launch_limits
