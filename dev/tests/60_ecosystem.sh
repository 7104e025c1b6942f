# Ecosystem checks (sourced by dev/run_tests.sh): the matplotlib plot script, Hugging Face
# export/import (dev/hf.py), in-loop HellaSwag, the metrics (MFU, metrics.jsonl) and -op 1.
ECO_PY=/usr/bin/python3
ECO=build/test_tmp/ecosystem
mkdir -p "$ECO"

# A synthetic log dir with train, val and eval lines; the PNG must have the asked size (read
# from its IHDR chunk) and two runs must overlay.
eco_plot() {
    local d=$ECO/plot
    rm -rf "$d" && mkdir -p "$d/run_a" "$d/run_b"
    $ECO_PY - "$d" <<'PY' || return 1
import math, sys
d = sys.argv[1]
for name, k in (("run_a", 1.0), ("run_b", 1.4)):
    with open(f"{d}/{name}/main.log", "w") as f:
        for s in range(0, 101):
            if s % 25 == 0:
                f.write(f"s:{s} tel:{4 * math.exp(-s * k / 50) + 1.5:.6f}\n")
                f.write(f"s:{s} eval:{0.25 + 0.001 * s * k:.4f}\n")
            if s > 0:
                f.write(f"s:{s} trl:{4 * math.exp(-s * k / 50) + 1.6:.6f} lr:{1e-3:e} norm:{1 + 0.1 * math.sin(s):f}\n")
PY
    $ECO_PY scripts/plot_loss.py "$d/run_a" "$d/run_b" -o "$d/two.png" --size 640x480 --log || return 1
    $ECO_PY scripts/plot_loss.py "$d/run_a/main.log" -o "$d/one.png" || return 1
    $ECO_PY - "$d/two.png" 640 480 "$d/one.png" 1200 1000 <<'PY'
import struct, sys
a = sys.argv[1:]
for path, w, h in zip(a[0::3], a[1::3], a[2::3]):
    raw = open(path, "rb").read()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR", path
    got = struct.unpack(">II", raw[16:24])
    print(path, got, len(raw), "bytes")
    assert got == (int(w), int(h)), (path, got)
    assert len(raw) > 10000, "suspiciously small PNG"
PY
    # a directory without a log is refused with one error line
    mkdir -p "$d/empty"
    if $ECO_PY scripts/plot_loss.py "$d/empty" -o "$d/x.png" 2>"$d/err"; then return 1; fi
    grep -q "^error: .*empty" "$d/err" && [ ! -e "$d/x.png" ]
}

check eco_plot_png eco_plot

# Hugging Face export/import (dev/test_hf.py says what it checks); the C forward comes from a
# helper that includes the CPU trainer.
eco_hf() {
    mkdir -p build
    mpicc $(make -s --no-print-directory cpu-cflags) \
        -o build/c_forward dev/tests/c_forward.c -lm || return 1
    rm -rf "$ECO/hf"
    OMP_NUM_THREADS=1 $ECO_PY dev/test_hf.py "$ECO/hf" build/c_forward
}

check eco_hf_export_import eco_hf

# In-loop HellaSwag (-h 1): choices and accuracy against a PyTorch reference on 1 and 2 ranks
# (dev/test_hellaswag.py), for the CPU trainer and the emulated GPU trainer (fp32).
eco_hellaswag_cpu() {
    make -s train_gpt2cpu || return 1
    $ECO_PY dev/test_hellaswag.py "$ECO/hs_cpu" ./train_gpt2cpu 1 2
}
eco_hellaswag_gpu_emu() {
    make -s -f dev/gpu.mk build/gpu/train_gpt2emu_fp32 || return 1
    $ECO_PY dev/test_hellaswag.py "$ECO/hs_emu" build/gpu/train_gpt2emu_fp32 1 2 --equivalence-only
}
# -h alone and --help print the help, whose -h line names HellaSwag; -h 1 needs validation on
eco_hellaswag_flags() {
    ./train_gpt2cpu -h | grep -- '-h ' | grep -q HellaSwag || return 1
    ./train_gpt2cpu --help | grep -q -- '-hf' || return 1
    ./train_gpt2cpu -b 2 -h | grep -q HellaSwag || return 1
    local err
    err=$(./train_gpt2cpu -h 1 -v 0 2>&1 >/dev/null) && return 1
    echo "$err"; [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "^error: -h 1"
    err=$(./train_gpt2cpu -h 2 2>&1 >/dev/null) && return 1
    echo "$err"; echo "$err" | grep -q "^error: -h 2"
}

check eco_hellaswag_cpu_1_2_ranks eco_hellaswag_cpu
check eco_hellaswag_gpu_emu_1_2_ranks eco_hellaswag_gpu_emu
check eco_hellaswag_flags eco_hellaswag_flags

# MFU on the step line and metrics.jsonl against main.log and closed forms (dev/test_metrics.py)
check eco_metrics_jsonl_mfu bash -c "make -s train_gpt2cpu && $ECO_PY dev/test_metrics.py $ECO/metrics ./train_gpt2cpu"

# The MFU's peak measured at start-up (no -pk) and -op 1's profile on 1 and 2 ranks: the table,
# the families against the step time, the metrics.jsonl record, and -op 0 writing the same
# main.log and model file (dev/test_op_profile.py)
check eco_op_profile bash -c "make -s train_gpt2cpu && $ECO_PY dev/test_op_profile.py $ECO/op_profile ./train_gpt2cpu 1 2"
