#!/usr/bin/env bash
# The first GPU hour in 8 minutes, on a machine with an NVIDIA GPU as it comes: no Open MPI, no
# package registry, no internet, cuBLASLt, NCCL, cuDNN and NVRTC perhaps only in PyTorch's
# site-packages (nvidia/*/lib). In order of priority, each phase in its own time box:
#   1. builds train_gpt2 and test_gpt2 for this GPU only (-arch=native): BF16, and with cuDNN where
#      the frontend's headers are in build/cudnn_frontend/include (else a line says why not);
#      meanwhile, on the GPU, dev/bench/torch_gpt2.py (our PyTorch GPT-2 124M: bf16 autocast, SDPA,
#      fused AdamW, torch.compile) times B 64, 32, 16, 8 and eager B 64 and 8, and the PyTorch
#      reference files for test_gpt2 are written on the CPU (train_gpt2.py);
#   2. test_gpt2 BF16 against that reference, -at ours and -at cudnn, and at GPT-2 124M's geometry
#      (d12, B 4, T 64, one batch: the logits bound that grows with the model);
#   3. GPT-2 124M steps at T 1024, B 8, 16, 32, 64, -at ours and -at cudnn (median of steps 4..N of
#      metrics.jsonl), then -ge 1 against -ge 0 at B 64, then the -op 1 profiles at B 8 and B 64;
#   4. llm.c's train_gpt2cu at the same shapes, with --llmc PATH: a binary built from llm.c's source,
#      or that source's folder, built beside ours in phase 1 (dev/build_llmc.sh);
#   5. Nsight Compute (ncu) on the attention kernels of one step at B 8, each path;
#   6. compute-sanitizer memcheck and racecheck on a small run (reports inside NCCL, cuBLASLt or cuDNN
#      counted apart from ours: dev/sanitizer_split.py).
# Then REPORT.md and report.json (dev/gpu_first_run_report.py): one table side by side (ms per step
# per B: ours -at ours, -at cudnn, PyTorch compiled and eager, llm.c; the model's figures beside,
# marked modelled), -ge, the profiles, ncu and the sanitizer counts; measured figures carry the
# card's name (nvidia-smi) and the date.
#
#   bash dev/gpu_first_run.sh [--out DIR] [--llmc PATH] [--llmc-args 'ARGS'] [--steps N]
#                             [--budget SECONDS] [--model-only]
#
# --budget (default 480) bounds the whole run: a phase gets what is left of it (minus 20 s for the
# report) when that is less than its own box, and does not start with under 15 s left, so the
# script ends within the budget even where a phase hangs. --steps (default 10) steps per timed run.
# Libraries are taken from the toolkit, ldconfig's cache or the site-packages of the Python that
# imports torch (dev/gpu_libs.sh; never CUDA's compat or stubs folders, which are also dropped
# from the inherited LD_LIBRARY_PATH); that Python is the first of python3 on PATH and
# /usr/bin/python3 that imports torch. --model-only writes the report with the model's figures only
# (no GPU needed). Without a GPU it stops at once, exit 1. Exit 1 when a build, test or check failed.
# The report goes to build/gpu_first_run/HOST_TIME/ unless --out (a few hundred kB: logs, profiles,
# ncu's CSV); the source copies, binaries, data and runs to build/gpu_first_run/work (emptied first;
# FIRST_RUN_WORK elsewhere).
set -u

FR_T0=${FR_T0:-$(date +%s)}
say() { echo "[$(( $(date +%s) - FR_T0 ))s] $*"; }
# record SECTION NAME STATUS [VALUE]: one row of results.tsv (tabs and newlines in VALUE made
# spaces and " / "), echoed
record() {
    local v=${4:-}
    v=${v//$'\t'/ }
    v=${v//$'\n'/ \/ }
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$v" >> "$RES"
    say "$1 | $2 | $3 | $v"
}

# The first Python of FIRST_RUN_PYTHONS (default: python3 on PATH, then /usr/bin/python3) that
# imports torch; where none does, the first that runs (the PyTorch phases are then skipped), exit 1.
pick_python() {
    local py first=""
    for py in ${FIRST_RUN_PYTHONS:-python3 /usr/bin/python3}; do
        command -v "$py" > /dev/null 2>&1 || continue
        [ -n "$first" ] || first=$py
        if timeout 120 "$py" -c 'import torch' > /dev/null 2>&1; then
            echo "$py"
            return 0
        fi
    done
    [ -n "$first" ] && echo "$first"
    return 1
}

# LD_LIBRARY_PATH for the phases: the site-packages folders that hold the libraries, then the
# inherited path without CUDA's compat and stubs folders (dev/gpu_libs.sh ldpath; its notes on
# stderr). Exported; its notes are printed.
libs_env() {
    local p notes
    notes=$(mktemp)
    p=$(bash dev/gpu_libs.sh ldpath cublasLt nccl cudnn nvrtc 2> "$notes") || { rm -f "$notes"; return 1; }
    cat "$notes"
    rm -f "$notes"
    export LD_LIBRARY_PATH=$p
}

# A copy of the sources of the current folder (the repository's root) in DEST: the tracked files
# and the untracked ones git does not ignore; where this folder is no git checkout's top, all but
# build outputs, data and the report folder (OUT).
copy_tree() {
    local dest=$1
    mkdir -p "$dest" || return 1
    if [ "$(git rev-parse --show-toplevel 2> /dev/null)" = "$(pwd -P)" ]; then
        git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest" 2> /dev/null
    else
        tar --exclude=./build --exclude=./data --exclude="./${OUT#"$(pwd)"/}" -cf - . | tar -C "$dest" -xf -
    fi
    [ -f "$dest/Makefile" ] && [ -f "$dest/dev/gpu.mk" ]
}

# build_variant NAME MAKE-ARGS...: train_gpt2 and test_gpt2 for this GPU only, in WORK/build/NAME
build_variant() {
    local name=$1
    shift
    copy_tree "$WORK/build/$name" || return 1
    cd "$WORK/build/$name" && make -j3 train_gpt2 test_gpt2 NVCC_ARCH=-arch=native "$@"
}

# phase NAME MAX_S CMD...: CMD within min(MAX_S, what is left of the budget) seconds, its output
# in logs/NAME.log; returns CMD's status (124: timed out) or 125 when under 15 s were left.
phase() {
    local name=$1 max=$2 left
    shift 2
    left=$(( DEADLINE - $(date +%s) ))
    if [ "$left" -lt 15 ]; then return 125; fi
    [ "$left" -lt "$max" ] && max=$left
    if declare -F "$1" > /dev/null; then  # a function of this script (exported): through bash
        timeout -k 5 "$max" bash -c '"$@"' _ "$@" > "$LOGS/$name.log" 2>&1
    else
        timeout -k 5 "$max" "$@" > "$LOGS/$name.log" 2>&1
    fi
}

# why RC: the words for a phase's status
why() {
    case "$1" in
        0) echo pass ;;
        124 | 137) echo "FAIL (timed out)" ;;
        125) echo "skipped: the budget was spent" ;;
        *) echo "FAIL (exit $1)" ;;
    esac
}

# median_ms METRICS.JSONL: the median "ms" of steps 4 and later (our trainer's records)
median_ms() {
    "$PY" - "$1" <<'PY'
import json, statistics, sys
ms = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "ms" in r and r.get("step", 0) >= 4:
        ms.append(r["ms"])
print("%.2f" % statistics.median(ms) if ms else "")
PY
}

# time_run NAME BIN B ARGS...: one timed 124M run; records "time NAME measured MS" (or why not)
time_run() {
    local name=$1 bin=$2 B=$3 dir ms rc
    shift 3
    if [ ! -x "$bin" ]; then record time "$name" "skipped: not built"; return 1; fi
    dir=$WORK/runs/${name// /_}
    rm -rf "$dir"
    phase "run_${name// /_}" 60 "$bin" -e d12 -i "$DATA/train.bin" -b "$B" -t 1024 -x "$STEPS" -v 0 -s 0 -o "$dir" "$@"
    rc=$?
    if [ $rc -ne 0 ]; then record time "$name" "$(why $rc)" "logs/run_${name// /_}.log"; return 1; fi
    ms=$(median_ms "$dir/metrics.jsonl")
    rm -f "$dir/model_final.bin"  # 124M: a quarter of a gigabyte per run, not needed
    if [ -n "$ms" ]; then record time "$name" measured "$ms"; else record time "$name" FAIL "no step times in $dir/metrics.jsonl"; fi
}

# The -op 1 table of a run's output (from its header to the step row).
op_table() { sed -n '/^op profile (-op 1/,/^| step |/p' "$1"; }

# sanitize NAME TOOL BIN ARGS...: compute-sanitizer TOOL on the small run (SMALL); judged by the
# reports in our code only (dev/sanitizer_split.py), the libraries' counted beside
sanitize() {
    local name=$1 tool=$2 bin=$3 rc split srx
    shift 3
    if [ ! -x "$bin" ]; then record check "$name" "skipped: not built"; return; fi
    phase "$name" 120 compute-sanitizer --tool "$tool" "$bin" "${SMALL[@]}" "$@"
    rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ] || [ $rc -eq 125 ]; then record check "$name" "$(why $rc)" "logs/$name.log"; return; fi
    split=$("$PY" dev/sanitizer_split.py "$LOGS/$name.log" 2>&1)
    srx=$?
    if [ $srx -eq 0 ] && [ $rc -eq 0 ]; then record check "$name" pass "$split"
    elif [ $srx -eq 0 ]; then record check "$name" "FAIL (exit $rc)" "$split; logs/$name.log"
    else record check "$name" FAIL "$(echo "$split" | head -3 | tr '\n' ' ')(logs/$name.log)"; fi
}

[ "${FIRST_RUN_SOURCE_ONLY:-0}" = 1 ] && return 0

cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
# nvcc and the tools beside it where the toolkit is installed but not on PATH
if ! command -v nvcc > /dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH=$PATH:/usr/local/cuda/bin; fi
OUT="" MODEL_ONLY=0 LLMC="" LLMC_ARGS="" STEPS=10 BUDGET=480
usage="usage: bash dev/gpu_first_run.sh [--out DIR] [--llmc PATH] [--llmc-args 'ARGS'] [--steps N] [--budget SECONDS] [--model-only]"
while [ $# -gt 0 ]; do
    case "$1" in
        --out | --llmc | --llmc-args | --steps | --budget)
            [ $# -ge 2 ] || { echo "gpu_first_run.sh: error: $1 needs a value ($usage)" >&2; exit 1; }
            case "$1" in
                --out) OUT=$2 ;;
                --llmc) LLMC=$2 ;;
                --llmc-args) LLMC_ARGS=$2 ;;
                --steps) STEPS=$2 ;;
                --budget) BUDGET=$2 ;;
            esac
            shift 2 ;;
        --model-only) MODEL_ONLY=1; shift ;;
        *) echo "gpu_first_run.sh: error: unknown argument '$1' ($usage)" >&2; exit 1 ;;
    esac
done
case "$STEPS" in '' | *[!0-9]*) STEPS=x ;; esac
if [ "$STEPS" = x ] || [ "$STEPS" -lt 5 ] || [ "$STEPS" -gt 1000 ]; then
    echo "gpu_first_run.sh: error: --steps: want a whole number from 5 to 1000 (the median is of steps 4..N)" >&2; exit 1
fi
case "$BUDGET" in '' | *[!0-9]*) BUDGET=x ;; esac
if [ "$BUDGET" = x ] || [ "$BUDGET" -lt 60 ]; then
    echo "gpu_first_run.sh: error: --budget: want whole seconds, at least 60" >&2; exit 1
fi
LLMC_SRC=""  # --llmc FOLDER: llm.c's source, built in phase 1 (dev/build_llmc.sh)
if [ -n "$LLMC" ]; then
    if [ -d "$LLMC" ] && [ -f "$LLMC/train_gpt2.cu" ] && [ -f "$LLMC/Makefile" ] && [ -d "$LLMC/llmc" ]; then
        LLMC_SRC=$(cd "$LLMC" && pwd)
        LLMC=""
    elif [ ! -f "$LLMC" ] || [ ! -x "$LLMC" ]; then
        echo "gpu_first_run.sh: error: --llmc $LLMC: not an executable file (llm.c's train_gpt2cu, built from its source) nor a folder of that source (train_gpt2.cu, Makefile, llmc/)" >&2
        exit 1
    else
        LLMC=$(cd "$(dirname "$LLMC")" && pwd)/$(basename "$LLMC")
    fi
fi
if [ $MODEL_ONLY = 0 ] && ! { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; }; then
    echo "gpu_first_run.sh: error: no NVIDIA GPU found (nvidia-smi absent or lists no device); --model-only writes the report with the model's figures only" >&2
    exit 1
fi
[ -n "$OUT" ] || OUT=build/gpu_first_run/$(hostname -s 2> /dev/null || echo host)_$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT" || { echo "gpu_first_run.sh: error: --out $OUT: cannot create it" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
RES=$OUT/results.tsv   # section <TAB> name <TAB> status <TAB> value or detail
LOGS=$OUT/logs
# the bulky part (source copies, binaries, data, run folders, ncu's reports) apart from the report,
# so that DIR stays small enough to carry back from a lent machine
WORK=${FIRST_RUN_WORK:-$ROOT/build/gpu_first_run/work}
if [ -d "$WORK" ] && [ ! -f "$WORK/.gpu_first_run_work" ] && [ -n "$(ls -A "$WORK")" ]; then
    echo "gpu_first_run.sh: error: FIRST_RUN_WORK $WORK: a folder this script did not make, not empty" >&2; exit 1
fi
rm -rf "$WORK"
DATA=$WORK/data
if ! mkdir -p "$LOGS" "$DATA" "$OUT/profiles" "$WORK/runs" || ! touch "$WORK/.gpu_first_run_work"; then
    echo "gpu_first_run.sh: error: cannot create $WORK" >&2; exit 1
fi
: > "$RES"
DEADLINE=$(( FR_T0 + BUDGET - 20 ))   # 20 s kept for the report
PIDS=()  # the background phases: ended with the script (their timeouts end what they started)
trap 'for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2> /dev/null; done' EXIT
record env date "$(date -u '+%Y-%m-%d %H:%M UTC')"

PY=$(pick_python)
HAVE_TORCH=$?
[ -n "$PY" ] || { echo "gpu_first_run.sh: error: no python3 found (on PATH or /usr/bin/python3)" >&2; exit 1; }
export GPU_LIBS_PYTHONS="$PY ${FIRST_RUN_PYTHONS:-python3 /usr/bin/python3}"
if [ $HAVE_TORCH = 0 ]; then
    record env python "$(command -v "$PY")" "imports torch (its version: the torch_gpt2 line below)"
else
    record env python "$(command -v "$PY")" "no Python here imports torch: the PyTorch phases are skipped"
fi

if [ $MODEL_ONLY = 1 ]; then
    GPU_NAME="(model only, nothing measured)"
else
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    record env gpu "$GPU_NAME" "$(nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm,power.limit --format=csv,noheader | head -1) (driver, memory, max SM clock, power limit); $(nvidia-smi -L | grep -c '^GPU ') GPU(s)"
    record env nvcc "$(nvcc --version 2> /dev/null | grep -o 'release [0-9.]*' | head -1)" "$(command -v nvcc)"
    record env cores "$(nproc)"
    while IFS=$'\t' read -r lib where file inc; do
        record env "lib $lib" "$where" "$file (headers: $inc)"
    done < <(bash dev/gpu_libs.sh find cublasLt nccl cudnn nvrtc)
    libs_env > "$LOGS/libs_env.log" 2>&1
    [ -s "$LOGS/libs_env.log" ] && record env "LD_LIBRARY_PATH notes" "$(tr '\n' ' ' < "$LOGS/libs_env.log")"
    record env LD_LIBRARY_PATH "${LD_LIBRARY_PATH:-}"
    # the driver library the loader will take (a compat one there fails every CUDA program, error 803)
    record env "libcuda.so.1" "$({ ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null; } | grep -m1 'libcuda.so.1 ' | sed 's/.*=> //')"
    for tool in compute-sanitizer ncu nsys; do
        command -v $tool > /dev/null 2>&1 || record env "$tool" "not on PATH"
    done

    # ---- data, offline: pseudo-random tokens below GPT-2's vocabulary (any ids do for timing)
    phase data 30 bash -c "'$PY' dev/data/tiny_shard.py '$DATA/train.bin' --ntok 4000000 --vocab 50257 --seed 1 &&
        '$PY' dev/data/tiny_shard.py '$DATA/val.bin' --ntok 200000 --vocab 50257 --seed 2" || record check data FAIL logs/data.log

    # ---- 1. builds (CPU), each variant in its own copy of the sources, in parallel
    B16=$WORK/build/bf16 BCU=$WORK/build/cudnn
    FE=$ROOT/build/cudnn_frontend/include
    export -f build_variant copy_tree
    export OUT ROOT WORK
    BUILD_T0=$(date +%s)
    phase build_bf16 300 build_variant bf16 USE_CUDNN=0 &
    pid_b16=$!
    PIDS+=("$pid_b16")
    pid_bcu=""
    if [ -f "$FE/cudnn_frontend.h" ]; then
        phase build_cudnn 300 build_variant cudnn USE_CUDNN=1 "CUDNN_FRONTEND_INC=$FE" &
        pid_bcu=$!
        PIDS+=("$pid_bcu")
    else
        record build cudnn "skipped: no cuDNN frontend headers in build/cudnn_frontend/include (make deps puts them there; carry that folder, 3.2 MB, from a machine where it ran)"
    fi
    pid_llmc=""
    if [ -n "$LLMC_SRC" ]; then  # llm.c from its source, for this GPU, in WORK
        phase build_llmc 300 bash dev/build_llmc.sh "$LLMC_SRC" --out "$WORK/build/llmc" &
        pid_llmc=$!
        PIDS+=("$pid_llmc")
    fi

    # ---- meanwhile on the GPU: our PyTorch GPT-2 (the builds use only the CPU); on the CPU: the reference
    pid_torch=""
    if [ $HAVE_TORCH = 0 ]; then  # (it says so itself where this torch sees no GPU)
        phase torch_gpt2 240 "$PY" dev/bench/torch_gpt2.py --B 64,32,16,8 --T 1024 --steps "$STEPS" --from 4 \
            --data "$DATA/train.bin" --eager-B 64,8 --device cuda --json "$OUT/torch.json" &
        pid_torch=$!
        PIDS+=("$pid_torch")
    else
        record time "PyTorch" "skipped: no Python here imports torch"
    fi
    REF=$WORK/ref
    pid_ref=""
    if [ $HAVE_TORCH = 0 ]; then
        mkdir -p "$REF"
        VAL=data/kjv/kjv_val.bin
        if [ ! -f "$VAL" ]; then
            VAL=$DATA/kjv_like.bin
            "$PY" dev/data/tiny_shard.py "$VAL" --ntok 100000 --vocab 257 --seed 3 > /dev/null
        fi
        phase reference 150 "$PY" train_gpt2.py --model d2 --channels 128 --heads 2 --vocab 257 --max-seq 128 --seed 2 \
            --write-model "$REF/model.bin" --write-model-bf16 "$REF/model_bf16.bin" --data "$VAL" --B 2 --T 80 \
            --write-state "$REF/state.bin" --steps 10 --write-losses "$REF/losses.txt" &&
            phase reference_124m 120 "$PY" train_gpt2.py --model d12 --seed 2 --write-model "$REF/d12.bin" \
                --data "$DATA/train.bin" --B 4 --T 64 --write-state "$REF/d12_state.bin" --steps 1 \
                --write-losses "$REF/d12_losses.txt" &
        pid_ref=$!
        PIDS+=("$pid_ref")
    else
        record check test_gpt2 "skipped: the PyTorch reference needs a Python that imports torch"
    fi

    wait "$pid_b16"; rc=$?
    if [ -x "$B16/train_gpt2" ] && [ -x "$B16/test_gpt2" ]; then record build bf16 pass "$(( $(date +%s) - BUILD_T0 )) s"
    else record build bf16 "$(why $rc)" logs/build_bf16.log; fi
    if [ -n "$pid_bcu" ]; then
        wait "$pid_bcu"; rc=$?
        if [ -x "$BCU/train_gpt2" ] && [ -x "$BCU/test_gpt2" ]; then record build cudnn pass "$(( $(date +%s) - BUILD_T0 )) s"
        else record build cudnn "$(why $rc)" logs/build_cudnn.log; fi
    fi
    if [ -n "$pid_llmc" ]; then
        wait "$pid_llmc"; rc=$?
        if [ $rc -eq 0 ] && [ -x "$WORK/build/llmc/train_gpt2cu" ]; then
            LLMC=$WORK/build/llmc/train_gpt2cu
            record build "llm.c" pass "$(( $(date +%s) - BUILD_T0 )) s, from $LLMC_SRC"
        else record build "llm.c" "$(why $rc)" logs/build_llmc.log; fi
    fi
    if [ -n "$pid_ref" ]; then
        wait "$pid_ref"; rc=$?
        [ $rc -eq 0 ] || record check reference "$(why $rc)" logs/reference.log
    fi
    if [ -n "$pid_torch" ]; then
        wait "$pid_torch"; rc=$?
        [ $rc -eq 0 ] || record time PyTorch "$(why $rc)" "logs/torch_gpt2.log (the B that finished are in torch.json)"
        record env torch "$(grep -m1 '^torch_gpt2: PyTorch' "$LOGS/torch_gpt2.log" | cut -c13-)"
        grep '^torch_gpt2: [a-z]* B' "$LOGS/torch_gpt2.log" | while read -r line; do say "$line"; done
    fi
    CU=$BCU/train_gpt2
    [ -x "$CU" ] || CU=/nonexistent

    # ---- 2. test_gpt2 BF16 against PyTorch (correctness before any timing)
    if [ $HAVE_TORCH = 0 ] && [ -f "$REF/losses.txt" ]; then
        TARGS=("$REF/model.bin" "$REF/state.bin" "$REF/losses.txt" "$VAL")
        if [ -x "$B16/test_gpt2" ]; then
            phase test_gpt2_bf16 90 "$B16/test_gpt2" "${TARGS[@]}" -b "$REF/model_bf16.bin"; rc=$?
            record check test_gpt2_bf16 "$(why $rc)" "$(grep -c '^FAIL' "$LOGS/test_gpt2_bf16.log") FAIL lines (logs/test_gpt2_bf16.log)"
        fi
        if [ -x "$BCU/test_gpt2" ]; then
            phase test_gpt2_bf16_cudnn 90 "$BCU/test_gpt2" "${TARGS[@]}" -at cudnn; rc=$?
            record check test_gpt2_bf16_cudnn "$(why $rc)" "$(grep -c '^FAIL' "$LOGS/test_gpt2_bf16_cudnn.log") FAIL lines (logs/test_gpt2_bf16_cudnn.log)"
        fi
        # GPT-2 124M's geometry, one batch (-k 0): the BF16 logits bound that grows with the model
        # (docs/gpu.md, "The logits bound in BF16"), every gradient, our fa2 kernels at head size 64
        if [ -x "$B16/test_gpt2" ] && [ -f "$REF/d12_losses.txt" ]; then
            phase test_gpt2_bf16_124m 60 "$B16/test_gpt2" "$REF/d12.bin" "$REF/d12_state.bin" "$REF/d12_losses.txt" \
                "$DATA/train.bin" -k 0 -at ours; rc=$?
            record check test_gpt2_bf16_124m "$(why $rc)" "$(grep -E '^(ok|FAIL) +logits' "$LOGS/test_gpt2_bf16_124m.log")"
        fi
    fi

    # ---- 3. 124M steps: both paths at each B, -ge 1 at B 64, the -op 1 profiles at B 8 and B 64
    for B in 8 16 32 64; do
        time_run "ours -at ours B $B" "$B16/train_gpt2" "$B" -at ours
        time_run "ours -at cudnn B $B" "$CU" "$B" -at cudnn
    done
    time_run "ours -at ours -ge 1 B 64" "$B16/train_gpt2" 64 -at ours -ge 1
    time_run "ours -at cudnn -ge 1 B 64" "$CU" 64 -at cudnn -ge 1
    for B in 8 64; do
        for at in ours cudnn; do
            bin=$B16/train_gpt2
            [ $at = cudnn ] && bin=$CU
            [ -x "$bin" ] || { record check "op profile -at $at B $B" "skipped: not built"; continue; }
            name="op_${at}_B$B"
            rm -rf "$WORK/runs/$name"
            phase "$name" 60 "$bin" -e d12 -i "$DATA/train.bin" -b $B -t 1024 -x "$STEPS" -v 0 -s 0 -at $at -op 1 -o "$WORK/runs/$name"
            rm -f "$WORK/runs/$name/model_final.bin"
            rc=$?
            op_table "$LOGS/$name.log" > "$OUT/profiles/$name.txt"
            if [ $rc -eq 0 ] && [ -s "$OUT/profiles/$name.txt" ]; then record check "op profile -at $at B $B" pass "profiles/$name.txt"
            else record check "op profile -at $at B $B" "$(why $rc)" "logs/$name.log"; fi
        done
    done

    # ---- 4. llm.c's train_gpt2cu at the same shapes (its own step lines: "step N/M | ... | X ms |")
    if [ -n "$LLMC" ]; then
        for B in 8 16 32 64; do
            name="llmc_B$B"
            # shellcheck disable=SC2086  # --llmc-args: several words
            (cd "$WORK" && phase "$name" 60 "$LLMC" -e d12 -i "$DATA/train.bin" -j "$DATA/val.bin" -b $B -t 1024 \
                -x "$STEPS" -v 100000 -m 1 -s 0 $LLMC_ARGS)
            rc=$?
            ms=$("$PY" - "$LOGS/$name.log" <<'PY'
import re, statistics, sys
ms = [float(m.group(2)) for m in re.finditer(r"^step\s+(\d+)/\d+ \|.*?\|\s*([0-9.]+) ms \|", open(sys.argv[1], errors="replace").read(), re.M)
      if int(m.group(1)) >= 4]
print("%.2f" % statistics.median(ms) if ms else "")
PY
)
            if [ $rc -eq 0 ] && [ -n "$ms" ]; then record time "llm.c B $B" measured "$ms"
            else record time "llm.c B $B" "$(why $rc)" "logs/$name.log"; fi
        done
    fi

    # ---- 5. Nsight Compute: the attention kernels of one step at B 8 (launch, occupancy, speed of light)
    if command -v ncu > /dev/null 2>&1; then
        for at in ours cudnn; do
            bin=$B16/train_gpt2 rx="regex:.*attention_(forward|backward).*"
            [ $at = cudnn ] && bin=$CU rx="regex:.*(sdpa|fmha|flash|fprop|bprop|cudnn).*"
            [ -x "$bin" ] || { record check "ncu -at $at" "skipped: not built"; continue; }
            rm -f "$WORK/ncu_$at.ncu-rep"
            phase "ncu_$at" 120 ncu --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
                -k "$rx" -c 40 -o "$WORK/ncu_$at" "$bin" -e d12 -i "$DATA/train.bin" -b 8 -t 1024 -x 1 -v 0 -s 0 -at $at
            rc=$?
            if [ -f "$WORK/ncu_$at.ncu-rep" ]; then
                ncu --import "$WORK/ncu_$at.ncu-rep" --csv --page details > "$OUT/ncu_$at.csv" 2>> "$LOGS/ncu_$at.log"
                record check "ncu -at $at" "$(why $rc)" "ncu_$at.csv"
            else
                record check "ncu -at $at" "$(why $rc)" "$(grep -m1 -i 'error' "$LOGS/ncu_$at.log" | cut -c1-160) (logs/ncu_$at.log)"
            fi
        done
    else
        record check ncu "skipped: ncu not on PATH"
    fi

    # ---- 6. compute-sanitizer on a small run (d2: C 128, two heads of 64, the tensor-core attention;
    # T 80: a full and a partial 64-row tile); library reports are counted, ours decide
    SMALL=(-e d2 -sl 128 -b 2 -t 80 -x 2 -v 0 -s 0 -i "$DATA/train.bin")
    if command -v compute-sanitizer > /dev/null 2>&1; then
        SAN=$B16/train_gpt2
        sanitize sanitizer_memcheck_ours memcheck "$SAN" -at ours
        sanitize sanitizer_racecheck_ours racecheck "$SAN" -at ours
        sanitize sanitizer_memcheck_cudnn memcheck "$CU" -at cudnn
    else
        record check compute-sanitizer "skipped: not on PATH"
    fi
    record env "wall time" "$(( $(date +%s) - FR_T0 )) s" "budget $BUDGET s"
fi

# ---- the report (the model through its command line: python3 dev/bench/gpu_model.py --json)
"$PY" dev/bench/gpu_model.py --json > "$OUT/model.json" 2> "$LOGS/model.log" || rm -f "$OUT/model.json"
"$PY" dev/gpu_first_run_report.py --out "$OUT" --card "$GPU_NAME" --steps "$STEPS" ${LLMC:+--llmc "$LLMC"}
echo "report: $OUT/REPORT.md and $OUT/report.json"
awk -F'\t' '$3 ~ /^FAIL/ { bad = 1 } END { exit bad }' "$RES"
