# GPU trainer checks (sourced by dev/run_tests.sh): nvcc builds for sm_80 and sm_90 with the
# per-kernel register/spill report and every launch against the hardware's limits, the no-GPU
# message, and, through the CUDA emulator, the test against the PyTorch reference in FP32 and BF16
# (with recompute, master-weight and GELU-epilogue variants), two tests of that test (a perturbed
# gradient, an off-by-one attention mask), 20 steps against the CPU trainer, checkpoint resume,
# recomputation, and the kernel tests (also under AddressSanitizer, and the BF16 stochastic rounding
# and AdamW); the attention kernels against a double reference (the fa2 and fallback versions, and
# a mask bug both must catch), the trainer's BF16 tensor-core attention against PyTorch, and the
# activation memory against llm.c's.
# The kernel tests and test_gpt2emu are emucc --check builds, also run under the reverse and random
# schedules (dev/cuda_emu/README.md).
GPU_TMP=build/test_tmp/gpu
GREF=$GPU_TMP/ref
GPU_TEST_ARGS="$GREF/model.bin $GREF/state.bin $GREF/losses.txt data/kjv/kjv_val.bin"
mkdir -p $GPU_TMP

gpu_reference() {
    mkdir -p $GREF &&
    /usr/bin/python3 train_gpt2.py --model d2 --channels 64 --heads 4 --vocab 257 --max-seq 64 --seed 1 \
        --write-model $GREF/model.bin --write-model-bf16 $GREF/model_bf16.bin --data data/kjv/kjv_val.bin \
        --B 4 --T 32 --write-state $GREF/state.bin --steps 10 --write-losses $GREF/losses.txt
}

# A model with head size 64 (128 channels, 2 heads), so that BF16 runs the tensor-core attention;
# T 80 is a full and a partial 64-row tile.
GREF64=$GPU_TMP/ref64
GPU_TEST64_ARGS="$GREF64/model.bin $GREF64/state.bin $GREF64/losses.txt data/kjv/kjv_val.bin"
gpu_reference_hs64() {
    mkdir -p $GREF64 &&
    /usr/bin/python3 train_gpt2.py --model d2 --channels 128 --heads 2 --vocab 257 --max-seq 128 --seed 2 \
        --write-model $GREF64/model.bin --data data/kjv/kjv_val.bin --B 2 --T 80 --write-state $GREF64/state.bin \
        --steps 10 --write-losses $GREF64/losses.txt
}

gpu_have_device() { nvidia-smi -L >/dev/null 2>&1; }

# Without a GPU an nvcc-built trainer (BINARY) says so in one line and exits 1 (51_gpu_cudnn.sh too).
gpu_binary_no_gpu_message() {
    if gpu_have_device; then echo "a GPU is present: nothing to check"; return 0; fi
    local out rc
    out=$($1 -x 1 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$out" = "error: no CUDA GPU found; use ./train_gpt2cpu for CPU training" ]
}
gpu_no_gpu_message() { gpu_binary_no_gpu_message build/gpu/train_gpt2_linked; }

# The test of the test: train_gpt2.cu with the causal mask one key too wide (att_visible in
# llmc/attention.cuh, used by every attention kernel) must fail test_gpt2.
attention_mutant_sources() {
    local dir=$1
    rm -rf $dir && mkdir -p $dir/llmc $dir/dev/cuda && cp train_gpt2.cu test_gpt2.cu $dir/ && cp llmc/* $dir/llmc/ &&
        cp dev/cuda/attention.cu dev/cuda/*.cuh $dir/dev/cuda/ || return 1
    sed -i 's/return key <= query;/return key <= query + 1;/' $dir/llmc/attention.cuh
    grep -q "return key <= query + 1;" $dir/llmc/attention.cuh || { echo "the mutation did not apply"; return 1; }
}

gpu_attention_mutant_fails() {
    local dir=$GPU_TMP/mutant
    attention_mutant_sources $dir || return 1
    dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o $dir/test_gpt2emu $dir/test_gpt2.cu -lnccl || return 1
    if $dir/test_gpt2emu $GPU_TEST_ARGS -k 0; then echo "the broken attention passed"; return 1; fi
    return 0
}

# The attention kernel test must catch the same mask bug in the fa2 (tensor-core) and fallback versions.
gpu_attention_kernels_detect_mask_bug() {
    local dir=$GPU_TMP/att_mutant
    attention_mutant_sources $dir || return 1
    dev/cuda_emu/emucc -O1 -o $dir/attention $dir/dev/cuda/attention.cu || return 1
    if $dir/attention --quick > $dir/out.txt; then echo "the broken mask passed"; return 1; fi
    grep "^FAIL" $dir/out.txt | head -5
    grep -q "^FAIL.* fa2 " $dir/out.txt && grep -q "^FAIL.* scalar " $dir/out.txt
}

# Memory (dev/gpu_memory.cu, the trainer's own size table): at GPT-2 124M, B 64, T 1024, -r 1 the
# activation bytes are at most llm.c's with cuDNN attention (its closed form, printed beside ours);
# GPT-2 1558M at B 16 -r 1 and at scripts/run_gpt2_1558M.sh's B 32 -r 2 (T 1024, ZeRO 1, 8 ranks)
# leave at least 8 GB of an 80 GB GPU; the activations grow linearly with T (no T x T buffer).
gpu_memory_budget() {
    make -s -f dev/gpu.mk build/gpu/gpu_memory_bf16 || return 1
    python3 - build/gpu/gpu_memory_bf16 <<'PY'
import re, subprocess, sys
def run(*args):
    out = subprocess.run([sys.argv[1]] + [str(a) for a in args], capture_output=True, text=True, check=True).stdout
    print(out.strip())
    mem = [int(x) for x in re.search(r"params (\d+) grads (\d+) optimizer (\d+) activations (\d+)", out).groups()]
    return sum(mem), mem[3], int(re.search(r"llm.c with cuDNN attention (\d+) bytes", out).group(1))
_, act, llmc = run("d12", 50257, 1024, 64, 1024, 1, 1, 0, 1, 1)
ok = act <= llmc
print("124M B 64 T 1024 -r 1: activations %.3f GB, llm.c %.3f GB: %s" % (act / 1e9, llmc / 1e9, "ok" if ok else "FAIL"))
for B, r in ((16, 1), (32, 2)):
    total, _, _ = run("d48", 50257, 1024, B, 1024, 8, 8, 1, r, 1)
    fits = total <= 72e9
    print("1558M B %d -r %d ZeRO 1 8 ranks: %.1f GB, %.1f GB of 80 spare (at least 8): %s"
          % (B, r, total / 1e9, 80 - total / 1e9, "ok" if fits else "FAIL"))
    ok &= fits
_, a1, _ = run("d12", 50257, 2048, 8, 1024, 1, 1, 0, 1, 1)
_, a2, _ = run("d12", 50257, 2048, 8, 2048, 1, 1, 0, 1, 1)
print("activations at T 2048 / T 1024: %.4f (at most 2: linear in T)" % (a2 / a1))
ok &= a2 <= 2 * a1
sys.exit(0 if ok else 1)
PY
}

# The kernel tests built from a copy of llmc/ whose encoder bound check is one element too loose
# (mutant_kernel_tests DIR EMUCC_FLAGS...): the build the two checks below must catch.
mutant_kernel_tests() {
    local dir=$1
    shift
    rm -rf $dir && mkdir -p $dir/llmc $dir/dev/gpu_kernels $dir/dev/cuda && cp llmc/* $dir/llmc/ &&
        cp dev/gpu_kernels/test_kernels.cu $dir/dev/gpu_kernels/ && cp dev/cuda/copies.cuh $dir/dev/cuda/ || return 1
    sed -i 's/if (idx >= (size_t)BT \* packs) { return; }/if (idx > (size_t)BT * packs) { return; }/' $dir/llmc/encoder.cuh
    grep -q "idx > (size_t)BT \* packs" $dir/llmc/encoder.cuh || { echo "the mutation did not apply"; return 1; }
    dev/cuda_emu/emucc -O1 -DENABLE_FP32 "$@" -o $dir/test_kernels $dir/dev/gpu_kernels/test_kernels.cu || return 1
    if $dir/test_kernels > $dir/out.txt 2>&1; then echo "the overrun passed"; return 1; fi
}

# The test of the ASan run: the encoder overrun must be reported by AddressSanitizer.
gpu_asan_mutant_fails() {
    mutant_kernel_tests $GPU_TMP/asan_mutant -Xcompiler -fsanitize=address,-fno-omit-frame-pointer &&
        grep "AddressSanitizer" $GPU_TMP/asan_mutant/out.txt
}

# The test of the --check build: the same overrun, built with emucc --check (no ASan), must be
# reported as an out-of-bounds access naming the kernel.
gpu_check_mutant_fails() {
    mutant_kernel_tests $GPU_TMP/check_mutant --check &&
        grep "cuda_emu --check: out-of-bounds access in kernel encoder" $GPU_TMP/check_mutant/out.txt
}

# The test of the SASS rules: planted kernels (2-byte loads in a LayerNorm-named kernel, a kernel
# that spills, a residual LayerNorm forward that reads back what it wrote) must be reported by
# dev/gpu_kernels/sass_report.py --check.
gpu_sass_rules_catch_planted() {
    local d=$GPU_TMP/sass_planted
    mkdir -p $d
    nvcc -cubin -arch=sm_90 -maxrregcount 16 -Xptxas -v -o $d/k.cubin dev/gpu_kernels/sass_planted.cu 2> $d/k.log ||
        { cat $d/k.log; return 1; }
    if python3 dev/gpu_kernels/sass_report.py --check P:$d/k.cubin:$d/k.log > $d/out.txt; then
        cat $d/out.txt; echo "the planted kernels passed"; return 1
    fi
    cat $d/out.txt
    grep -q "FAIL: P layernorm_scalar_kernel: 0 LDG.128" $d/out.txt && grep -q "FAIL: P pressure_kernel.* spills" $d/out.txt &&
        grep -q "FAIL: P void residual_layernorm_forward_kernel<3>: 15 LDG.128, want <= 12" $d/out.txt
}

# train_gpt2emu (FP32) and train_gpt2cpu from the same model file on the same data: 20 losses within
# 1e-4, with two micro-steps of gradient accumulation per step.
gpu_vs_cpu_20_steps() {
    local flags="-e $GREF/model.bin -i data/kjv/kjv_train.bin -b 2 -t 16 -d 64 -x 20 -l 1e-3 -u 5 -c 0.1 -v 0 -s 0"
    rm -rf $GPU_TMP/cmp_gpu $GPU_TMP/cmp_cpu
    build/gpu/train_gpt2emu_fp32 $flags -o $GPU_TMP/cmp_gpu || return 1
    ./train_gpt2cpu $flags -o $GPU_TMP/cmp_cpu || return 1
    python3 - $GPU_TMP/cmp_gpu/main.log $GPU_TMP/cmp_cpu/main.log <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) trl:(\S+)", open(path).read(), re.M)}
g, c = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(g) == sorted(c) == list(range(1, 21)), (sorted(g), sorted(c))
worst = max(abs(g[s] - c[s]) for s in g)
for s in sorted(g):
    print("step %2d  gpu %.6f  cpu %.6f  diff %.2e" % (s, g[s], c[s], abs(g[s] - c[s])))
print("max |gpu - cpu| = %.2e (tolerance 1e-4)" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
PY
}

# A BF16 run checkpointed at step 2 and resumed gives the uninterrupted run's losses for steps 3..4
# (model file v5, optimizer state with fp32 master weights, stochastic rounding seeded by step).
gpu_resume_bf16() {
    local flags="-e $GREF/model.bin -i data/kjv/kjv_train.bin -b 4 -t 16 -x 4 -l 1e-3 -v 0 -s 0"
    rm -rf $GPU_TMP/res_a $GPU_TMP/res_b && mkdir -p $GPU_TMP/res_b
    build/gpu/train_gpt2emu_bf16 $flags -n 2 -o $GPU_TMP/res_a >/dev/null || return 1
    cp $GPU_TMP/res_a/*_00000002* $GPU_TMP/res_b/ || return 1
    build/gpu/train_gpt2emu_bf16 $flags -y 1 -o $GPU_TMP/res_b | grep "resumed from step 2" || return 1
    diff <(grep -E "^s:[34] " $GPU_TMP/res_a/main.log) $GPU_TMP/res_b/main.log && cat $GPU_TMP/res_b/main.log
}

# Checkpoints cross between the trainers: a CPU checkpoint at step 2 resumed by train_gpt2emu (FP32),
# and a GPU one resumed by train_gpt2cpu, reproduce the uninterrupted run's steps 3..4 within 1e-4.
gpu_cpu_checkpoints_cross() {
    local flags="-e $GREF/model.bin -i data/kjv/kjv_train.bin -b 4 -t 16 -x 4 -l 1e-3 -c 0.1 -v 0 -s 0"
    local d=$GPU_TMP/cross
    rm -rf $d && mkdir -p $d/cpu_to_gpu $d/gpu_to_cpu
    ./train_gpt2cpu $flags -n 2 -o $d/cpu >/dev/null || return 1
    build/gpu/train_gpt2emu_fp32 $flags -n 2 -o $d/gpu >/dev/null || return 1
    cp $d/cpu/*_00000002* $d/cpu_to_gpu/ && cp $d/gpu/*_00000002* $d/gpu_to_cpu/ || return 1
    build/gpu/train_gpt2emu_fp32 $flags -y 1 -o $d/cpu_to_gpu | grep "resumed from step 2" || return 1
    ./train_gpt2cpu $flags -y 1 -o $d/gpu_to_cpu | grep "resumed from step 2" || return 1
    python3 - $d <<'PY'
import re, sys
d = sys.argv[1]
def losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) trl:(\S+)", open(path).read(), re.M)}
full = losses(d + "/cpu/main.log")
worst = 0.0
for run in ("cpu_to_gpu", "gpu_to_cpu"):
    got = losses(d + "/" + run + "/main.log")
    assert sorted(got) == [3, 4], (run, sorted(got))
    for s in got:
        print("%s step %d: %.6f, uninterrupted %.6f" % (run, s, got[s], full[s]))
        worst = max(worst, abs(got[s] - full[s]))
print("max difference %.2e (tolerance 1e-4)" % worst)
sys.exit(0 if worst <= 1e-4 else 1)
PY
}

# -r 0|1|2: the activation bytes drop by the closed forms (L-1) B T 4C and (L-1) B T 2C elements;
# recomputing LayerNorm is exact (-r 1 and -r 2 give the same log in both precisions: the same
# kernel both times), and so is recomputing GELU with -ge 0 (the default: -r 0 keeps the output of
# the same GELU kernel that -r 1 runs again, so -r 0 and -r 1 give the same log). With -ge 1 the
# forward keeps cuBLASLt's GELU epilogue output, cuBLASLt's own code (the strict emulator rounds it
# differently, as a GPU may), so -r 0 and -r 1 agree within 1e-5 in FP32 and within bf16 rounding
# (1e-3) in BF16; -ge 1 against -ge 0 (both -r 1): the same tolerances.
gpu_recompute() {
    local flags="-e $GREF/model.bin -i data/kjv/kjv_train.bin -b 4 -t 16 -x 3 -v 0 -s 0" prec run
    for prec in fp32 bf16; do
        for run in "0 0" "1 0" "2 0" "0 1" "1 1"; do
            set -- $run
            local name=rc_${prec}_$1_ge$2
            rm -rf $GPU_TMP/$name
            build/gpu/train_gpt2emu_$prec $flags -r $1 -ge $2 -o $GPU_TMP/$name > $GPU_TMP/$name.out || return 1
        done
    done
    python3 - $GPU_TMP <<'PY'
import re, sys
d = sys.argv[1]
L, B, T, C = 2, 4, 16, 64
ok = True
def losses(prec, r, ge):
    return [float(x) for x in re.findall(r"trl:(\S+)", open("%s/rc_%s_%d_ge%d/main.log" % (d, prec, r, ge)).read())]
def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 3 else float("inf")
for prec, size in (("fp32", 4), ("bf16", 2)):
    act = [int(re.search(r"activations (\d+) bytes", open("%s/rc_%s_%d_ge0.out" % (d, prec, r)).read()).group(1))
           for r in range(3)]
    want = ((L - 1) * B * T * 4 * C * size, (L - 1) * B * T * 2 * C * size)
    print(prec, "activation bytes", act, "savings", (act[0] - act[1], act[1] - act[2]), "expected", want)
    ok &= (act[0] - act[1], act[1] - act[2]) == want
    ours = [losses(prec, r, 0) for r in range(3)]
    print(prec, "-ge 0 losses -r 0/1/2:", ours, "(identical)")
    ok &= len(ours[0]) == 3 and ours[0] == ours[1] == ours[2]
    tol = 1e-5 if prec == "fp32" else 1e-3
    fused = [losses(prec, r, 1) for r in range(2)]
    for what, a, b in (("-ge 1: |-r 0 - -r 1|", fused[0], fused[1]), ("-r 1: |-ge 1 - -ge 0|", fused[1], ours[1])):
        print(prec, what, "max %.2e (tolerance %g)" % (worst(a, b), tol))
        ok &= worst(a, b) <= tol
sys.exit(0 if ok else 1)
PY
}

# A descriptor model through the BF16 emulated trainer: validation, sampling with the tokenizer, final model.
gpu_train_smoke() {
    rm -rf $GPU_TMP/smoke
    build/gpu/train_gpt2emu_bf16 -e d1 -sl 32 -b 2 -t 16 -x 3 -v 3 -m 1 -s 3 -g 8 -r 2 -w 0 \
        -tk data/kjv/kjv_tokenizer.bin -o $GPU_TMP/smoke | tee $GPU_TMP/smoke.out || return 1
    grep -q "precision BF16 | recompute 2 | master weights none" $GPU_TMP/smoke.out &&
    grep -q "s:3 tel:" $GPU_TMP/smoke/main.log && [ -s $GPU_TMP/smoke/model_final.bin ]
}

# The model's test (arithmetic, launch geometry, the H200 fit) must catch planted errors, each in a
# copy of gpu_model.py: the dq pass's per-block instructions dropped (its delta and set-up), the
# dk/dv pass's ldmatrix per pair off by 8 (its first tile's K and V fragments not counted), the
# forward's HBM bytes without lse, the classifier's loops counted once per block instead of once per
# pack, AdamW's v read but not written; waves ignored (every launch as if it filled the GPU: the
# fit's layernorm row at B 8 fails); the LayerNorm backward's grid mirrored as 188c81d's one block
# per 256 rows (the wave check fails: 32 blocks at 124M B 8).
# gpu_model_mutant N SED: test_gpu_model.py must fail on a copy of the model changed by SED.
gpu_model_mutant() {
    local d=$GPU_TMP/model_mutant_$1
    rm -rf $d && mkdir -p $d && sed "$2" dev/bench/gpu_model.py > $d/gpu_model.py || return 1
    cmp -s dev/bench/gpu_model.py $d/gpu_model.py && { echo "mutation not applied: $2"; return 1; }
    if GPU_MODEL_DIR=$d python3 dev/bench/test_gpu_model.py > $d/out.txt; then
        echo "planted error NOT caught: $2"; return 1
    fi
    echo "caught: $2 ($(grep -c '^FAIL' $d/out.txt) checks failed, first: $(grep -m1 '^FAIL' $d/out.txt | cut -c1-90))"
}

# the mutants in two halves side by side (one core each)
gpu_model_catches_planted() {
    local muts=('s/"per_kb": None, "block_instr": 705}/"per_kb": None, "block_instr": 0}/'
                's/"loop": {"HMMA": 128, "LDSM": 72,/"loop": {"HMMA": 128, "LDSM": 64,/'
                's/return X \* B \* T \* 3 \* C + X \* B \* T \* C + F \* B \* NH \* T$/return X * B * T * 3 * C + X * B * T * C/'
                's/instr=32 \* it \* sum(L\["loops128"\])/instr=32 * sum(L["loops128"])/'
                's/(X + 2 \* F + 2 \* F + 2 \* F + X)/(X + 2 * F + 2 * F + F + X)/'
                's/k = -(-n \/\/ S)/k = n \/ S/; s/return max((t_mem \*\* 2 + t_issue \*\* 2) \*\* 0.5, ln.trips \* L_MEM + t_issue)/return (t_mem ** 2 + t_issue ** 2) ** 0.5/'
                's/G = max(1, min(wave, -(-BT \/\/ teams), 1024))/G = -(-BT \/\/ 256)/') half pids=() rc=0
    for half in 0 1; do
        (for ((i = half; i < ${#muts[@]}; i += 2)); do gpu_model_mutant $i "${muts[$i]}" || exit 1; done) \
            > $GPU_TMP/model_mutants_$half.log 2>&1 &
        pids+=($!)
    done
    for half in 0 1; do wait ${pids[$half]} || rc=1; cat $GPU_TMP/model_mutants_$half.log; done
    return $rc
}

# Without a GPU, dev/gpu_first_run.sh stops at once with one line and exit 1 (nothing built).
gpu_first_run_no_gpu() {
    if gpu_have_device; then echo "a GPU is present: nothing to check"; return 0; fi
    local out rc
    out=$(timeout 20 bash dev/gpu_first_run.sh 2>&1); rc=$?
    echo "$out (exit $rc)"
    [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s' "$out" | grep -q "^gpu_first_run.sh: error: no NVIDIA GPU"
}

check gpu_model_arithmetic python3 dev/bench/test_gpu_model.py
check gpu_model_catches_planted gpu_model_catches_planted
check gpu_first_run_no_gpu gpu_first_run_no_gpu
check gpu_nvcc_sm80_sm90 early_result gpu_nvcc make -s -f dev/gpu.mk gpu-nvcc-check
check gpu_ptxas_report cat build/gpu/ptxas_report.txt
check gpu_sass_report cat build/gpu/sass_report.txt
check gpu_sass_rules_catch_planted gpu_sass_rules_catch_planted
# The model's SASS counts (FA2_SASS) recounted from the cubin gpu_nvcc_sm80_sm90 built, and a copy of
# the model whose forward leaves out its 4 Q-fragment ldmatrix per tile must fail that recount.
GPU_CUBIN="build/gpu/keep_train_gpt2_BF16/train_gpt2.compute_90.cubin build/gpu/ptxas_train_gpt2_BF16.log"
gpu_model_sass_catches_planted() {
    local d=$GPU_TMP/model_sass_mutant
    rm -rf $d && mkdir -p $d && sed 's/"loop": {"HMMA": 64, "LDSM": 36,/"loop": {"HMMA": 64, "LDSM": 32,/' dev/bench/gpu_model.py > $d/gpu_model.py &&
    ! cmp -s dev/bench/gpu_model.py $d/gpu_model.py || { echo "mutation not applied"; return 1; }
    if python3 $d/gpu_model.py --check-sass $GPU_CUBIN > $d/out.txt; then echo "planted count NOT caught"; return 1; fi
    grep FAIL $d/out.txt
}
check gpu_model_sass_counts python3 dev/bench/gpu_model.py --check-sass $GPU_CUBIN
check gpu_model_sass_catches_planted gpu_model_sass_catches_planted
# The model's launch table (LAUNCH_SASS: registers and shared memory per kernel from the ptxas log,
# loop and path lengths from the cubin) against this build, and a copy whose LayerNorm backward has
# 56 registers (3 blocks per SM: other waves) must fail it.
GPU_LAUNCH="build/gpu/ptxas_train_gpt2_BF16.log build/gpu/keep_train_gpt2_BF16/train_gpt2.compute_90.cubin"
gpu_model_launch_catches_planted() {
    local d=$GPU_TMP/model_launch_mutant
    rm -rf $d && mkdir -p $d &&
        sed 's/"key": "_Z25layernorm_backward_kernelILb1E", "regs": 64,/"key": "_Z25layernorm_backward_kernelILb1E", "regs": 56,/' \
            dev/bench/gpu_model.py > $d/gpu_model.py && ! cmp -s dev/bench/gpu_model.py $d/gpu_model.py ||
        { echo "mutation not applied"; return 1; }
    if python3 $d/gpu_model.py --check-launch $GPU_LAUNCH > $d/out.txt; then echo "planted registers NOT caught"; return 1; fi
    grep FAIL $d/out.txt
}
check gpu_model_launch_table python3 dev/bench/gpu_model.py --check-launch $GPU_LAUNCH
check gpu_model_launch_catches_planted gpu_model_launch_catches_planted
# Launch limits (dev/gpu_kernels/launch_limits.py, docs/gpu.md "Launch limits"): every kernel instance
# of the two trainer builds gpu_nvcc_sm80_sm90 made, at its launch site, against sm_80's and sm_90's
# limits (threads and __launch_bounds__, registers a block, static and dynamic shared memory and the
# raised limit, grids at 124M and 1558M), from their ptxas logs and PTX; docs/gpu.md's table is what
# it prints now.
check gpu_launch_limits python3 dev/gpu_kernels/launch_limits.py
check gpu_launch_limits_doc python3 dev/gpu_kernels/launch_limits.py --check-doc docs/gpu.md
# limits_log_plant LOG OUT MANGLED_PREFIX regs|smem VALUE [ARCH]: a copy of a ptxas log with that
# kernel's registers or static shared bytes set (on ARCH, else on both)
limits_log_plant() {
    python3 - "$@" <<'PY'
import re, sys
src, out, prefix, field, value = sys.argv[1:6]
arch = sys.argv[6] if len(sys.argv) > 6 else None
lines, hit, n = open(src).read().split("\n"), False, 0
for i, l in enumerate(lines):
    m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", l)
    if m:
        hit = m.group(1).startswith(prefix) and arch in (None, m.group(2))
    elif hit and "Used" in l:
        if field == "regs":
            lines[i] = re.sub(r"Used \d+ registers", "Used %s registers" % value, l)
        elif " bytes smem" in l:
            lines[i] = re.sub(r"\d+ bytes smem", "%s bytes smem" % value, l)
        else:
            lines[i] = l.replace(" registers, ", " registers, %s bytes smem, " % value, 1)
        hit, n = False, n + 1
open(out, "w").write("\n".join(lines))
sys.exit(0 if n else "no kernel %s in %s" % (prefix, src))
PY
}
# The test of the launch limits: launch_limits.py on planted copies must name each fault, and pass
# the two configurations exactly at a limit. Run A, copies of the build's outputs and of the model:
# 30 KiB of static shared memory in the head-size-32 forward (beside its 20 KiB dynamic, no raise),
# 24 KiB in the head-size-32 dq pass (beside 24 KiB: exactly 48 KiB); 65 registers in the classifier
# (1024 threads: 73728 allocated), 64 in loss_accumulate (1024 threads: 65536); the classifier's
# __launch_bounds__ (its PTX .maxntid) at 512; the classifier's rows in grid y (gpu_model.py: 65536
# > 65535 at 124M). Run B, a copy of the sources: the dq pass at head size 64 as it was (256 B static
# beside FA2_DQ_SMEM(64) dynamic, its limit raised only where the dynamic bytes pass 48 KiB: its
# raise replaced by such a helper), the forward's shared memory tripled (head size 128 raised to
# 245760 B, above the opt-in), a launch SITES does not know, a kernel in the log without a launch site.
gpu_launch_limits_catch_planted() {
    local d=$GPU_TMP/limits_planted G=build/gpu rc=0 out want
    rm -rf $d && mkdir -p $d/keep $d/model $d/src || return 1
    limits_log_plant $G/ptxas_train_gpt2_BF16.log $d/a1.log _Z28attention_forward_fa2_kernelILi32E smem 30720 &&
        limits_log_plant $d/a1.log $d/a2.log _Z32attention_backward_fa2_dq_kernelILi32E smem 24576 &&
        limits_log_plant $d/a2.log $d/a3.log _Z23fused_classifier_kernel regs 65 sm_90 &&
        limits_log_plant $d/a3.log $d/a.log _Z22loss_accumulate_kernel regs 64 sm_90 || return 1
    cp $G/keep_train_gpt2_BF16/train_gpt2.compute_80.ptx $d/keep/ || return 1
    python3 - $G/keep_train_gpt2_BF16/train_gpt2.compute_90.ptx $d/keep/train_gpt2.compute_90.ptx <<'PY' || return 1
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"\.entry _Z23fused_classifier_kernel\w*\([^{]*?\.maxntid 1024, 1, 1", text)
open(sys.argv[2], "w").write(text[:m.end()].replace(".maxntid 1024, 1, 1", ".maxntid 512, 1, 1") + text[m.end():])
PY
    sed 's/return Launch("fused_classifier_kernel", BT, 1024,/return Launch("fused_classifier_kernel", (1, BT), 1024,/' \
        dev/bench/gpu_model.py > $d/model/gpu_model.py && ! cmp -s dev/bench/gpu_model.py $d/model/gpu_model.py ||
        { echo "the model's mutation did not apply"; return 1; }
    out=$d/a.txt
    if GPU_MODEL_DIR=$d/model python3 dev/gpu_kernels/launch_limits.py --build BF16:$d/a.log:$d/keep \
        --build FP32:$G/ptxas_train_gpt2_FP32.log:$G/keep_train_gpt2_FP32 > $out; then
        echo "run A passed"; return 1
    fi
    for want in 'FAIL: BF16 sm_90 attention_forward_fa2_kernel<32> .*: 30720 B static \+ 20480 B dynamic = 51200 B > 49152 B and its limit is not raised' \
        'FAIL: BF16 sm_90 fused_classifier_kernel .*: 65 registers x 1024 threads: 73728 allocated' \
        'FAIL: BF16 sm_90 fused_classifier_kernel .*: 1024 threads a block, its __launch_bounds__ allow 512' \
        'FAIL: BF16 sm_80 fused_classifier_kernel .*: grid \(1, 65536, 1\) at 124M'; do
        grep -E "$want" $out || { echo "NOT caught: $want"; rc=1; }
    done
    if grep -E "FAIL: .*(attention_backward_fa2_dq_kernel<32>|loss_accumulate_kernel)" $out; then
        echo "a configuration exactly at its limit failed"; rc=1
    fi
    cp -r train_gpt2.cu llmc scripts $d/src/ &&
        grep -v 'attention_backward_fa2_dq_kernel<64>' llmc/attention_fa2_backward.cuh > $d/src/llmc/attention_fa2_backward.cuh &&
        cat >> $d/src/llmc/attention_fa2_backward.cuh <<'EOF' || return 1
template <typename K> static void fa2_smem_limit_planted(K kernel, int bytes) {
    if (bytes > 48 * 1024) { cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)); }
}
static void fa2_planted_setup(void) {
    static int setup = 0;
    if (!setup) {
        fa2_smem_limit_planted(attention_backward_fa2_dq_kernel<64>, FA2_DQ_SMEM(64));
        setup = 1;
    }
}
EOF
    echo 'static void planted_launch(void) { planted_kernel<<<1, 32>>>(); }' >> $d/src/llmc/gelu.cuh
    sed -i 's/^#define FA2_SMEM(D) (5 \* FA2_TILE_ELEMS(D) \* 2)/#define FA2_SMEM(D) (15 * FA2_TILE_ELEMS(D) * 2)/' \
        $d/src/llmc/attention_fa2.cuh
    grep -q '(15 \* FA2_TILE_ELEMS' $d/src/llmc/attention_fa2.cuh || { echo "the FA2_SMEM mutation did not apply"; return 1; }
    limits_log_plant $G/ptxas_train_gpt2_BF16.log $d/b.log _Z32attention_backward_fa2_dq_kernelILi64E smem 256 &&
        printf "%s\n" "ptxas info    : Compiling entry function '_Z13orphan_kernelv' for 'sm_90'" \
            "ptxas info    : Used 8 registers, used 0 barriers, 352 bytes cmem[0]" >> $d/b.log || return 1
    out=$d/b.txt
    if python3 dev/gpu_kernels/launch_limits.py --src $d/src --build BF16:$d/b.log:$G/keep_train_gpt2_BF16 \
        --build FP32:$G/ptxas_train_gpt2_FP32.log:$G/keep_train_gpt2_FP32 > $out; then
        echo "run B passed"; return 1
    fi
    for want in 'FAIL: BF16 sm_90 attention_backward_fa2_dq_kernel<64> .*: 256 B static \+ [0-9]+ B dynamic = [0-9]+ B > 49152 B and its limit is not raised' \
        "FAIL: BF16 sm_90 attention_forward_fa2_kernel<128> .*: raised to 245760 B .* above sm_90's opt-in 232448 B" \
        "error: planted_kernel \(llmc/gelu.cuh:[0-9]+\): a launch site launch_limits.py's SITES does not know" \
        'error: BF16 orphan_kernel: 0 launch sites in the sources'; do
        grep -E "$want" $out || { echo "NOT caught: $want"; rc=1; }
    done
    return $rc
}
check gpu_launch_limits_catch_planted gpu_launch_limits_catch_planted
check gpu_nvcc_link make -s -f dev/gpu.mk gpu-nvcc-link
check gpu_no_gpu_message gpu_no_gpu_message
check gpu_reference gpu_reference
check gpu_reference_hs64 gpu_reference_hs64
if gpu_have_device; then
    check gpu_test_gpt2_on_device build/gpu/test_gpt2_linked $GPU_TEST_ARGS -b $GREF/model_bf16.bin
fi
check gpu_emu_build bash -c "make -s -j2 -f dev/gpu.mk build/gpu/test_gpt2emu_fp32 build/gpu/test_gpt2emu_bf16 \
    build/gpu/train_gpt2emu_fp32 build/gpu/train_gpt2emu_bf16 build/gpu/test_kernels_emu build/gpu/test_kernels_asan \
    build/gpu/test_bf16_emu build/gpu/attention_emu build/gpu/attention_emu_fp32 build/gpu/attention_emu_check \
    build/gpu/gpu_memory_bf16 && make -s train_gpt2cpu"
# Emulated programs run on one thread: the checks below run two at a time (check_bg), longest first.
# The emulated test builds are emucc --check builds: also under two more thread/block/stream orders.
check_bg gpu_test_gpt2emu_fp32 build/gpu/test_gpt2emu_fp32 $GPU_TEST_ARGS -b $GREF/model_bf16.bin
check_bg gpu_test_gpt2emu_bf16 build/gpu/test_gpt2emu_bf16 $GPU_TEST_ARGS -b $GREF/model_bf16.bin
check_bg gpu_test_gpt2emu_bf16_r2_w0 build/gpu/test_gpt2emu_bf16 $GPU_TEST_ARGS -r 2 -w 0
check_bg gpu_test_gpt2emu_fp32_reverse env EMU_SCHED=reverse build/gpu/test_gpt2emu_fp32 $GPU_TEST_ARGS -b $GREF/model_bf16.bin -k 0
check_bg gpu_test_gpt2emu_bf16_random env EMU_SCHED=random:2 build/gpu/test_gpt2emu_bf16 $GPU_TEST_ARGS -b $GREF/model_bf16.bin -k 0
check_bg gpu_test_gpt2emu_bf16_tensor_core_attention bash -c "build/gpu/test_gpt2emu_bf16 $GPU_TEST64_ARGS -k 0 | tee $GPU_TMP/tc.out &&
    grep -q 'attention: tensor-core' $GPU_TMP/tc.out"
# GELU from cuBLASLt's epilogues (-ge 1; the default -ge 0 is above): the one-batch checks
check_bg gpu_test_gpt2emu_fp32_ge1 build/gpu/test_gpt2emu_fp32 $GPU_TEST_ARGS -ge 1 -k 0
check_bg gpu_test_gpt2emu_bf16_ge1 build/gpu/test_gpt2emu_bf16 $GPU_TEST_ARGS -ge 1 -k 0
check_bg gpu_test_gpt2emu_fp32_r0_r2 bash -c "build/gpu/test_gpt2emu_fp32 $GPU_TEST_ARGS -r 0 -k 0 &&
    build/gpu/test_gpt2emu_fp32 $GPU_TEST_ARGS -r 2 -k 0"
check_bg gpu_test_detects_perturbed_grad bash -c "! build/gpu/test_gpt2emu_bf16 $GPU_TEST_ARGS -p 4 -k 0"
check_bg gpu_test_detects_attention_mask_bug gpu_attention_mutant_fails
# the same kernel checks under emucc --check (races, barriers, bounds, alignment, cp.async bytes in
# flight); T 1024 for the fa2 version only
check_bg gpu_attention_kernels_checked build/gpu/attention_emu_check --long-fa2
check_bg gpu_attention_kernels_bf16 build/gpu/attention_emu
# FP32 (a checked build) and the small BF16 cases again under two more schedules
check_bg gpu_attention_kernels_fp32_checked_reverse env EMU_SCHED=reverse build/gpu/attention_emu_fp32 --quick
check_bg gpu_attention_kernels_checked_random env EMU_SCHED=random:7 build/gpu/attention_emu_check --quick
check_bg gpu_attention_kernels_detect_mask_bug gpu_attention_kernels_detect_mask_bug
check_bg gpu_recompute gpu_recompute
check_bg gpu_resume_bf16 gpu_resume_bf16
check_bg gpu_train_smoke gpu_train_smoke
check_bg gpu_kernel_tests_emu build/gpu/test_kernels_emu
for sched in reverse random:5; do
    check_bg "gpu_kernel_tests_emu_$sched" env EMU_SCHED=$sched build/gpu/test_kernels_emu
    check_bg "gpu_bf16_rounding_and_adamw_$sched" env EMU_SCHED=$sched build/gpu/test_bf16_emu
done
check_bg gpu_kernel_tests_asan build/gpu/test_kernels_asan
check_bg gpu_bf16_rounding_and_adamw build/gpu/test_bf16_emu
check_bg gpu_check_detects_kernel_overrun gpu_check_mutant_fails
check_bg gpu_asan_detects_kernel_overrun gpu_asan_mutant_fails
check_bg gpu_memory_budget gpu_memory_budget
check_wait
# these also run the CPU trainer, whose OpenMP threads want both cores
check gpu_emu_vs_cpu_20_steps gpu_vs_cpu_20_steps
check gpu_cpu_checkpoints_cross gpu_cpu_checkpoints_cross
