#!/usr/bin/env bash
# The first GPU hour: on a machine with one or more NVIDIA GPUs, builds the trainer (BF16, FP32, and
# with cuDNN attention when `make USE_CUDNN=1` builds), runs test_gpt2 (FP32, BF16), the kernel
# tests, compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on a small run, times our
# attention kernels and a GPT-2 124M step at B 8, 16, 32, 64 with -at ours and -at cudnn against
# dev/bench/gpu_model.py, and with two GPUs checks ZeRO 1 and ZeRO 2 against ZeRO 0. Writes one
# report, REPORT.md and report.json, with every figure and the model's error per kernel and step.
# Needs no internet: the timing data is a shard of pseudo-random tokens written here.
#
#   bash dev/gpu_first_run.sh [--out DIR] [--model-only]
#
# --model-only writes the same report with the model's figures and the measured column empty (no
# GPU needed; docs/gpu.md shows it). Without a GPU the script stops at once, exit 1. Aims at 20
# minutes on one H100: each phase has a time limit, the optional ones (sanitizers after memcheck,
# nsys) are skipped after 18 minutes; a phase that fails is reported and the rest runs. The report
# goes to build/gpu_first_run/HOST_TIME/ unless --out.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT="" MODEL_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="${2:-}"; shift 2 ;;
        --model-only) MODEL_ONLY=1; shift ;;
        *) echo "gpu_first_run.sh: error: unknown argument '$1' (usage: bash dev/gpu_first_run.sh [--out DIR] [--model-only])" >&2
           exit 1 ;;
    esac
done
if [ $MODEL_ONLY = 0 ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }; then
    echo "gpu_first_run.sh: error: no NVIDIA GPU found (nvidia-smi absent or lists no device); --model-only writes the report with the model's figures only" >&2
    exit 1
fi
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
[ -n "$OUT" ] || OUT=build/gpu_first_run/$(hostname -s 2>/dev/null || echo host)_$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT" || { echo "gpu_first_run.sh: error: cannot create $OUT" >&2; exit 1; }
RES=$OUT/results.tsv   # section <TAB> name <TAB> status <TAB> measured value (ms or text)
LOGS=$OUT/logs
mkdir -p "$LOGS"
: > "$RES"
T0=$(date +%s)
# the 20-minute aim: optional phases are skipped once this many seconds have gone
BUDGET_S=${GPU_FIRST_RUN_BUDGET_S:-1080}
in_budget() { [ $(( $(date +%s) - T0 )) -lt "$BUDGET_S" ]; }
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >> "$RES"; echo "[$(( $(date +%s) - T0 ))s] $1 | $2 | $3 | ${4:-}"; }

# run NAME SECONDS CMD...: the command's output in logs/NAME.log, "pass" or "FAIL (exit N)" recorded
run() {
    local name=$1 secs=$2; shift 2
    timeout "$secs" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then record check "$name" pass; else record check "$name" "FAIL (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))" "logs/$name.log"; fi
    return $rc
}

if [ $MODEL_ONLY = 0 ]; then
    NGPU=$(nvidia-smi -L | grep -c '^GPU ')
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    record env gpu "$NGPU x $GPU_NAME" "$(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader | head -1)"
    record env nvcc "$(nvcc --version 2>/dev/null | tail -1)"
    JOBS=$(nproc)
    ARCH="NVCC_ARCH=-arch=native"  # this GPU only: half the compile time of sm_80 + sm_90

    # ---- builds: each variant in its own copy of the sources, in parallel (the root binaries of
    # one tree share a precision stamp)
    BUILD=$OUT/build
    variant() {  # variant NAME MAKE-ARGS...
        local name=$1; shift
        mkdir -p "$BUILD/$name"
        if git rev-parse --git-dir >/dev/null 2>&1; then
            git ls-files -z | xargs -0 -I{} cp --parents {} "$BUILD/$name/" 2>/dev/null
        else  # a tree without git: everything but build outputs and data
            tar --exclude=./build --exclude=./data --exclude="./$OUT" -cf - . | tar -C "$BUILD/$name" -xf -
        fi
        (cd "$BUILD/$name" && timeout 900 make -j2 train_gpt2 test_gpt2 "$ARCH" "$@") > "$LOGS/build_$name.log" 2>&1
    }
    variant bf16 & p1=$!
    variant fp32 PRECISION=FP32 & p2=$!
    variant cudnn USE_CUDNN=1 & p3=$!
    NVFLAGS="-O3 -std=c++17 -arch=native $(mpicc --showme:incdirs 2>/dev/null | tr ' ' '\n' | sed 's/^/-I/' | tr '\n' ' ')"
    NVLIBS="-lcublasLt -lnccl $(mpicc --showme:libdirs 2>/dev/null | tr ' ' '\n' | sed 's/^/-L/' | tr '\n' ' ') -lmpi"
    KBIN=$BUILD/kernels
    mkdir -p "$KBIN"
    (
        for spec in test_kernels:dev/gpu_kernels/test_kernels.cu:-DENABLE_FP32 test_bf16:dev/gpu_kernels/test_bf16.cu: \
                    attention_bf16:dev/cuda/attention.cu: attention_fp32:dev/cuda/attention.cu:-DENABLE_FP32 \
                    layernorm:dev/cuda/layernorm.cu:-DENABLE_FP32 classifier:dev/cuda/classifier.cu:-DENABLE_FP32 \
                    encoder:dev/cuda/encoder.cu:-DENABLE_FP32 matmul:dev/cuda/matmul.cu:-DENABLE_FP32 adamw:dev/cuda/adamw.cu:; do
            IFS=: read -r n src def <<< "$spec"
            echo "nvcc $def $src"; timeout 600 nvcc $NVFLAGS $def -o "$KBIN/$n" "$src" $NVLIBS &
            [ "$(jobs -r | wc -l)" -ge $((JOBS > 4 ? JOBS / 2 : 2)) ] && wait -n
        done
        wait
    ) > "$LOGS/build_kernels.log" 2>&1 & p4=$!
    B16=$BUILD/bf16 B32=$BUILD/fp32 BCU=$BUILD/cudnn
    for v in bf16:$p1 fp32:$p2 cudnn:$p3 kernels:$p4; do
        wait "${v#*:}"
        if [ "${v%%:*}" = kernels ]; then
            missing=$(for n in test_kernels test_bf16 attention_bf16 attention_fp32 layernorm classifier encoder matmul adamw; do
                [ -x "$KBIN/$n" ] || printf '%s ' $n; done)
            if [ -z "$missing" ]; then record build kernels pass; else record build kernels "FAIL" "not built: $missing(logs/build_kernels.log)"; fi
        elif [ -x "$BUILD/${v%%:*}/train_gpt2" ] && [ -x "$BUILD/${v%%:*}/test_gpt2" ]; then record build "${v%%:*}" pass
        else record build "${v%%:*}" "FAIL" "logs/build_${v%%:*}.log"; fi
    done
    # -at (issue 24 item 1): passed only to a trainer whose flag table has it; without it the
    # trainer runs its own attention and the cuDNN path counts as not built
    AT_OK=0
    "$B16/train_gpt2" -h 2>&1 | grep -q -- '-at ' && AT_OK=1
    HAVE_CUDNN=0
    [ -x "$BCU/train_gpt2" ] && [ $AT_OK = 1 ] && HAVE_CUDNN=1
    [ $AT_OK = 1 ] || record env "-at" "this trainer has no -at flag: our attention only"

    # ---- data, offline: pseudo-random tokens for timing (any ids below the vocabulary do)
    DATA=$OUT/data
    mkdir -p "$DATA"
    $PY dev/data/tiny_shard.py "$DATA/train.bin" --ntok 4000000 --vocab 50257 --seed 1 > /dev/null &&
        $PY dev/data/tiny_shard.py "$DATA/val.bin" --ntok 200000 --vocab 50257 --seed 2 > /dev/null ||
        record data shards FAIL

    # ---- test_gpt2 against PyTorch (the reference files need torch, offline)
    REF=$OUT/ref
    if $PY -c "import torch" 2>/dev/null; then
        mkdir -p "$REF"
        VAL=data/kjv/kjv_val.bin
        [ -f "$VAL" ] || $PY dev/data/tiny_shard.py "$DATA/kjv_like.bin" --ntok 100000 --vocab 257 --seed 3 > /dev/null
        [ -f "$VAL" ] || VAL=$DATA/kjv_like.bin
        $PY train_gpt2.py --model d2 --channels 128 --heads 2 --vocab 257 --max-seq 128 --seed 2 --write-model "$REF/model.bin" \
            --write-model-bf16 "$REF/model_bf16.bin" --data "$VAL" --B 2 --T 80 --write-state "$REF/state.bin" --steps 10 \
            --write-losses "$REF/losses.txt" > "$LOGS/reference.log" 2>&1 || record check reference "FAIL" logs/reference.log
        TARGS="$REF/model.bin $REF/state.bin $REF/losses.txt $VAL"
        [ -x "$B32/test_gpt2" ] && run test_gpt2_fp32 300 "$B32/test_gpt2" $TARGS
        [ -x "$B16/test_gpt2" ] && run test_gpt2_bf16 300 "$B16/test_gpt2" $TARGS -b "$REF/model_bf16.bin"
        [ $HAVE_CUDNN = 1 ] && run test_gpt2_bf16_cudnn 300 "$BCU/test_gpt2" $TARGS -at cudnn
    else
        record check test_gpt2 "skipped: the PyTorch reference needs torch (pip install torch)"
    fi

    # ---- kernel tests (correctness; the dev/cuda ones also print timings)
    for n in test_kernels test_bf16 attention_bf16 attention_fp32 layernorm classifier encoder matmul adamw; do
        if [ -x "$KBIN/$n" ]; then run "kernels_$n" 300 "$KBIN/$n"; else record check "kernels_$n" "FAIL (not built)" logs/build_kernels.log; fi
    done

    # ---- compute-sanitizer on a small run (d2: C 128, 2 heads of 64: the tensor-core attention;
    # T 80: a full and a partial 64-row tile)
    SMALL="-e d2 -sl 128 -b 2 -t 80 -x 2 -v 0 -s 0 -i $DATA/train.bin"
    if command -v compute-sanitizer >/dev/null 2>&1; then
        for tool in memcheck racecheck synccheck initcheck; do
            in_budget || { record check "sanitizer_${tool}_ours" "skipped: past the time budget"; continue; }
            run "sanitizer_${tool}_ours" 180 compute-sanitizer --tool $tool --error-exitcode 1 "$B16/train_gpt2" $SMALL
        done
        [ $HAVE_CUDNN = 1 ] && run sanitizer_memcheck_cudnn 180 compute-sanitizer --tool memcheck --error-exitcode 1 \
            "$BCU/train_gpt2" $SMALL -at cudnn
    else
        record check compute-sanitizer "skipped: not on PATH (it ships with the CUDA toolkit)"
    fi

    # ---- timing: our attention kernels (dev/cuda/attention.cu prints forward and backward ms)
    # (fa2: the mma.sync kernels -at ours runs at head size 64; flash: the wmma ones)
    if [ -f "$LOGS/kernels_attention_bf16.log" ]; then
        for v in fa2 flash; do
            line=$(grep -E "^$v +forward" "$LOGS/kernels_attention_bf16.log" | head -1)
            if [ -n "$line" ]; then
                record time "attention $v forward" measured "$(echo "$line" | awk '{print $3}')"
                record time "attention $v backward" measured "$(echo "$line" | awk '{print $8}')"
            fi
        done
    fi
    # ---- timing: a 124M step (median of steps 4..12), both attention paths
    for at in ours cudnn; do
        bin=$B16/train_gpt2
        [ $at = cudnn ] && { bin=$BCU/train_gpt2; [ $HAVE_CUDNN = 1 ] || bin=/nonexistent; }
        at_args=()
        [ $AT_OK = 1 ] && at_args=(-at "$at")
        for B in 8 16 32 64; do
            name="step -at $at B $B"
            if [ ! -x "$bin" ]; then record time "$name" "not built"; continue; fi
            rm -rf "$OUT/run_${at}_$B"
            if timeout 300 "$bin" -e d12 -i "$DATA/train.bin" -b $B -t 1024 -x 12 -v 0 -s 0 "${at_args[@]}" -o "$OUT/run_${at}_$B" \
                > "$LOGS/step_${at}_$B.log" 2>&1; then
                ms=$($PY -c "
import json, statistics, sys
ms = [r['ms'] for r in map(json.loads, open(sys.argv[1])) if 'ms' in r and r.get('step', 0) >= 4]
print('%.2f' % statistics.median(ms) if ms else '')" "$OUT/run_${at}_$B/metrics.jsonl" 2>/dev/null)
                record time "$name" measured "$ms"
            else
                record time "$name" "FAIL" "logs/step_${at}_$B.log"
            fi
        done
    done

    # ---- per kernel: Nsight Systems over 6 steps of 124M B 64, each attention path (kernel sums)
    for at in ours cudnn; do
        bin=$B16/train_gpt2
        [ $at = cudnn ] && { bin=$BCU/train_gpt2; [ $HAVE_CUDNN = 1 ] || bin=/nonexistent; }
        at_args=()
        [ $AT_OK = 1 ] && at_args=(-at "$at")
        if command -v nsys >/dev/null 2>&1 && [ -x "$bin" ] && in_budget; then
            rm -rf "$OUT/run_nsys_$at"
            if timeout 300 nsys profile -o "$OUT/prof_$at" --force-overwrite true "$bin" -e d12 -i "$DATA/train.bin" \
                -b 64 -t 1024 -x 6 -v 0 -s 0 "${at_args[@]}" -o "$OUT/run_nsys_$at" > "$LOGS/nsys_$at.log" 2>&1 &&
                nsys stats --report cuda_gpu_kern_sum --format csv --output "$OUT/kern_$at" "$OUT/prof_$at.nsys-rep" \
                    >> "$LOGS/nsys_$at.log" 2>&1; then
                record check "nsys kernel profile -at $at" pass "$(cd "$OUT" && ls kern_"$at"*.csv 2>/dev/null | head -1)"
            else
                record check "nsys kernel profile -at $at" FAIL "logs/nsys_$at.log"
            fi
        else
            record check "nsys kernel profile -at $at" "skipped: nsys not on PATH, not built, or past the time budget"
        fi
    done

    # ---- two GPUs: ZeRO 1 and ZeRO 2 against ZeRO 0 (same losses within BF16 rounding, 1e-3)
    if [ "$NGPU" -ge 2 ] && command -v mpirun >/dev/null 2>&1; then
        for z in 0 1 2; do
            rm -rf "$OUT/zero$z"
            timeout 300 mpirun --allow-run-as-root -np 2 "$B16/train_gpt2" -e d2 -sl 128 -b 4 -t 128 -x 8 -v 0 -s 0 \
                -i "$DATA/train.bin" -z $z -o "$OUT/zero$z" > "$LOGS/zero$z.log" 2>&1 || record check "2-GPU ZeRO $z" FAIL "logs/zero$z.log"
        done
        for z in 1 2; do
            $PY - "$OUT/zero0/metrics.jsonl" "$OUT/zero$z/metrics.jsonl" > "$LOGS/zero${z}_vs_0.log" 2>&1 <<'PY'
import json, sys
def losses(p):
    return [r["train_loss"] for r in map(json.loads, open(p)) if "train_loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
d = max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print("steps %d, max |loss difference| %.2e (tolerance 1e-3)" % (len(a), d))
sys.exit(0 if d <= 1e-3 else 1)
PY
            if [ $? -eq 0 ]; then record check "2-GPU ZeRO $z vs ZeRO 0" pass "$(cat "$LOGS/zero${z}_vs_0.log")"
            else record check "2-GPU ZeRO $z vs ZeRO 0" FAIL "$(cat "$LOGS/zero${z}_vs_0.log")"; fi
        done
    else
        record check "2-GPU ZeRO 1 / ZeRO 2" "skipped: $NGPU GPU(s) (or no mpirun)"
    fi
    record env "wall time" "$(( $(date +%s) - T0 )) s"
else
    GPU_NAME="H100 (model only, nothing measured)"
    for c in "build bf16" "build fp32" "build cudnn" "build kernels" "check test_gpt2_fp32" "check test_gpt2_bf16" \
             "check test_gpt2_bf16_cudnn" "check kernels_test_kernels" "check kernels_test_bf16" "check kernels_attention_bf16" \
             "check kernels_attention_fp32" "check kernels_layernorm" "check kernels_classifier" "check kernels_encoder" \
             "check kernels_matmul" "check kernels_adamw" "check sanitizer_memcheck_ours" "check sanitizer_racecheck_ours" \
             "check sanitizer_synccheck_ours" "check sanitizer_initcheck_ours" "check sanitizer_memcheck_cudnn" \
             "check nsys kernel profile -at ours" "check nsys kernel profile -at cudnn" "check 2-GPU ZeRO 1 vs ZeRO 0" "check 2-GPU ZeRO 2 vs ZeRO 0"; do
        record "${c%% *}" "${c#* }" "not run (--model-only)" > /dev/null
    done
fi

# ---- the report: every figure, modelled next to measured, and the model's error
$PY - "$RES" "$OUT" "$GPU_NAME" <<'PY'
import json, os, sys
sys.path.insert(0, "dev/bench")
import gpu_model as gm
res, out, gpu_name = sys.argv[1], sys.argv[2], sys.argv[3]
gpu = "A100" if "A100" in gpu_name else "H100"
note = "" if gpu in gpu_name or "model only" in gpu_name else " (the model has no constants for this GPU: H100's are used)"
rows = [l.rstrip("\n").split("\t") for l in open(res) if l.strip()]
meas = {r[1]: r[3] for r in rows if r[0] == "time" and r[2] == "measured" and r[3]}
m = gm.model_json()["gpus"][gpu]
timed = [("attention %s %s" % (v, d), m["attention_ms"]["%s %s" % (v, d)]) for v in ("fa2", "flash")
         for d in ("forward", "backward")]
timed += [(k.replace("-at", "step -at"), v) for k, v in sorted(m["step_ms"].items(), key=lambda kv: (kv[0].split()[1], int(kv[0].split()[-1])))]
figs = []
for name, model_ms in timed:
    got = meas.get(name)
    err = None if got is None else (model_ms - float(got)) / float(got)
    figs.append({"figure": name, "modelled_ms": round(model_ms, 3), "measured_ms": None if got is None else float(got),
                 "model_error": None if err is None else round(err, 4)})
# per kernel kind, from the Nsight Systems sums (6 steps): measured ms per step vs modelled. The
# model's names are matched by substring; cuDNN's SDPA kernels by fprop / bprop in their names.
KINDS = [("attention_forward_fa2", "attention forward (ours"), ("attention_backward_fa2", "attention backward (ours"),
         (r"(sdpa|fmha|flash).*(fprop|fwd|forward)", "attention forward (cuDNN"),
         (r"(sdpa|fmha|flash).*(bprop|bwd|backward|dq|dkdv)", "attention backward (cuDNN"),
         ("residual_layernorm_forward", "layernorm forward"),
         ("layernorm_backward", "layernorm backward"), ("fused_classifier", "fused classifier"), ("adamw", "AdamW"),
         ("sum_of_squares", "global grad norm"), ("gelu_forward", "gelu forward (recompute"),
         ("bias_backward", "bias backward"), ("encoder", "encoder"), ("gemm|xmma|cutlass|cublas", "matmul")]
import csv, glob, re
for at in ("ours", "cudnn"):
    _, ks = gm.summarize_step("124M", 64, 1024, gpu, at)
    csvs = sorted(glob.glob(os.path.join(out, "kern_%s*.csv" % at)))
    per_kind = {}
    if csvs:
        for r in csv.DictReader(l for l in open(csvs[0]) if "," in l):
            name = r.get("Name", "")
            for rx, _ in KINDS:
                if re.search(rx, name, re.I):
                    per_kind[rx] = per_kind.get(rx, 0.0) + float(r.get("Total Time (ns)", 0)) / 6 / 1e6
                    break
    for rx, prefix in KINDS:
        model_ms = sum(k.time(gpu) for k in ks if prefix in k.name) * 1e3
        if not model_ms:
            continue  # the other attention path's kernels
        got = per_kind.get(rx)
        figs.append({"figure": "per step, B 64, -at %s: %s" % (at, prefix.split(" (")[0]),
                     "modelled_ms": round(model_ms, 3), "measured_ms": None if got is None else round(got, 3),
                     "model_error": None if not got else round((model_ms - got) / got, 4)})
checks = [{"section": r[0], "name": r[1], "status": r[2], "detail": r[3] if len(r) > 3 else ""} for r in rows
          if r[0] != "time"]
report = {"gpu": gpu_name, "model_gpu": gpu, "model": "dev/bench/gpu_model.py (MODELLED)", "figures": figs, "checks": checks,
          "timing_setup": "attention: dev/cuda/attention.cu, B 8, NH 12, T 1024, hs 64, mean of 20; step: train_gpt2 -e d12 "
                          "-t 1024 -x 12, median of steps 4-12 (metrics.jsonl ms), BF16, -r 1, -w 1, one GPU"}
json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)
with open(os.path.join(out, "REPORT.md"), "w") as f:
    f.write("# First GPU run: %s\n\n" % gpu_name)
    f.write("Model: `dev/bench/gpu_model.py`, %s constants%s (modelled). Model error = (modelled - measured) / "
            "measured.\n%s.\n\n" % (gpu, note, report["timing_setup"]))
    f.write("| figure | modelled ms | measured ms | model error |\n|---|---|---|---|\n")
    for r in figs:
        f.write("| %s | %.2f | %s | %s |\n" % (r["figure"], r["modelled_ms"],
                                             "" if r["measured_ms"] is None else "%.2f" % r["measured_ms"],
                                             "" if r["model_error"] is None else "%+.0f%%" % (100 * r["model_error"])))
    if checks:
        f.write("\n| section | check | status | detail |\n|---|---|---|---|\n")
        for c in checks:
            f.write("| %s | %s | %s | %s |\n" % (c["section"], c["name"], c["status"], c["detail"]))
print(open(os.path.join(out, "REPORT.md")).read())
PY
echo "report: $OUT/REPORT.md and $OUT/report.json"
if grep -qP '\tFAIL' "$RES"; then exit 1; fi
exit 0
