"""Checks the learning rates train_gpt2cpu logs against the schedule formulas written out here:
linear warmup over -u steps to -l, then cosine / linear decay to -l * -q at the last step,
constant, or warmup-stable-decay (flat, then linear decay over the last 20% of steps).
    python3 dev/test_schedules.py TRAINER
"""
import math
import re
import subprocess
import sys

LR, WARMUP, FINAL, STEPS = 1e-3, 3, 0.1, 20


def expected(kind, s):
    lr_min = LR * FINAL
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    p = (s - WARMUP) / (STEPS - WARMUP - 1)
    if kind == "cosine":
        return lr_min + 0.5 * (LR - lr_min) * (1 + math.cos(math.pi * p))
    if kind == "linear":
        return LR + (lr_min - LR) * p
    if kind == "constant":
        return LR
    cooldown = int(0.2 * STEPS)
    start = STEPS - cooldown
    return LR if s < start else LR + (lr_min - LR) * (s - start) / (cooldown - 1)


failures = 0
for kind in ("cosine", "linear", "constant", "wsd"):
    log_dir = f"build/sched_{kind}"
    subprocess.run([sys.argv[1], "-e", "d1", "-V", "257", "-sl", "16", "-b", "1", "-t", "8", "-i", "data/kjv/kjv_val.bin",
                    "-j", "", "-s", "0", "-x", str(STEPS), "-l", str(LR), "-u", str(WARMUP), "-q", str(FINAL),
                    "-k", kind, "-o", log_dir], check=True, stdout=subprocess.DEVNULL)
    got = [float(m.group(1)) for m in re.finditer(r"trl:\S+ lr:(\S+)", open(log_dir + "/main.log").read())]
    want = [expected(kind, s) for s in range(STEPS)]
    err = max(abs(g - w) / w for g, w in zip(got, want))
    ok = len(got) == STEPS and err < 1e-5
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  {kind}: max relative error {err:.1e} (tolerance 1e-5); "
          f"lr {got[0]:.2e} .. {got[-1]:.2e}")
sys.exit(1 if failures else 0)
