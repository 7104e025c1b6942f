#!/usr/bin/env python3
"""Test of the measured MFU peak and of -op 1's profile (run by dev/tests/60_ecosystem.sh for the
CPU trainer, by dev/tests/55_multi_gpu.sh with --gpu for the emulated GPU trainer):

    /usr/bin/python3 dev/test_op_profile.py WORK_DIR TRAINER [RANKS ...] [--gpu] [--only-op1]

For each rank count (default 1; 2 and more run under mpirun) trains a 2-layer model for 6 steps
without -pk and with -op 1, and checks: the mfu line says the peak was measured at start-up, and
that peak is positive and below 10 TFLOP/s per rank, equal to metrics.jsonl's peak_flops / ranks;
the profile table is printed with every family; the families without "other" sum to no more
than the step (a family counted twice would not) and "other" is >= 0; all rows sum to the
average step time the trainer prints, within 5%; metrics.jsonl ends with a {"profile"} record
holding the same families; with more than one rank, communication takes time and sends bytes.
Then (unless --only-op1, for a planted bug) the same run with -op 0 writes the same main.log and
model_final.bin, byte for byte.

--gpu (the GPU trainer through the CUDA emulator, B 2 T 16, with -ge 0 so that GELU runs as its own
kernels, and ZeRO 1 on more than one rank, so that the communication stream runs beside stream 0):
instead of the measured peak, the table says % of peak is n/a without -pk and the record's
peak_flops is null; it says how many CUDA events a step records (the record too); every compute
family, AdamW and the grad norm take time; with more than one rank the communication stream's line
is printed, and the bytes of the communication row and of that line (counted from the buffer
sizes) add up to the bytes the emulated NCCL counted in the last step, exactly. In the emulator an
event's time is the host's wall clock when the emulated stream reaches it, so the rows are the host
time of the emulated kernels.
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
from data_common import write_shard  # noqa: E402

FAMILIES = ["matmul forward", "matmul backward", "attention forward", "attention backward", "layernorm (fwd+bwd)",
            "gelu (fwd+bwd)", "softmax/cross-entropy", "adamw", "muon (newton-schulz)", "grad norm", "communication",
            "data loading"]
KEYS = ["matmul_forward", "matmul_backward", "attention_forward", "attention_backward", "layernorm", "gelu",
        "softmax_xent", "adamw", "muon", "grad_norm", "communication", "data_loading", "other"]
failures = []


def expect(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def train(trainer, ranks, work, logdir, extra):
    if GPU:
        extra = extra + ["-ge", "0"] + (["-z", "1"] if ranks > 1 else [])
    batch = ["-b", "2", "-t", "16"] if GPU else ["-b", "4", "-t", "32"]
    cmd = [trainer, "-e", "d2", "-V", "257", "-sl", "64"] + batch + ["-x", "6", "-v", "3", "-m", "2",
           "-s", "0", "-i", os.path.join(work, "train.bin"), "-j", os.path.join(work, "val.bin"), "-o", logdir] + extra
    if ranks > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), "-x", "OMP_NUM_THREADS=1"] + cmd
    shutil.rmtree(logdir, ignore_errors=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
        sys.exit(f"trainer failed on {ranks} ranks")
    return r.stdout


def table(out):
    """The profile's rows: name -> [ms/step, share %]."""
    rows = {}
    for m in re.finditer(r"^\| ([a-z/() +-]+) \| ([0-9.-]+) \| ([0-9.-]+)% \|", out, re.M):
        rows[m.group(1)] = [float(m.group(2)), float(m.group(3))]
    return rows


def check_cpu_peak(out, cfg, ranks):
    m = re.search(r"against a peak of ([0-9.e+-]+) TFLOP/s per rank x (\d+) \(measured at start-up: ", out)
    expect(m is not None and 0.0 < float(m.group(1)) < 10.0 and int(m.group(2)) == ranks,
           f"{ranks} ranks: the mfu line's peak is measured here, 0 < {m and m.group(1)} < 10 TFLOP/s per rank")
    expect(m is not None and abs(cfg["peak_flops"] - float(m.group(1)) * 1e12 * ranks) <= 1e-6 * cfg["peak_flops"],
           f"metrics.jsonl's peak_flops {cfg['peak_flops']} is the printed peak x ranks")


def check_gpu(out, rows, prof, ranks):
    """The GPU trainer's own lines and numbers (--gpu)."""
    expect("% of peak n/a (no -pk" in out and prof["peak_flops"] is None and "| n/a |" in out,
           "without -pk the % of peak is n/a (table and record)")
    m = re.search(r"^device times from CUDA events: (\d+) per step", out, re.M)
    expect(m is not None and int(m.group(1)) > 0 and prof.get("events_per_step") == int(m.group(1)),
           f"the CUDA events per step are printed and recorded: {m and m.group(1)}")
    busy = [f for f in FAMILIES if f not in ("communication", "data loading", "muon (newton-schulz)")]  # (-opt adamw)
    expect(all(rows[f][0] > 0.0 for f in busy), f"every compute family, AdamW and the grad norm take time: {busy}")
    if ranks == 1:
        return
    side = re.search(r"^beside the rows \(overlapping them\): the communication stream .* ([0-9.]+) ms per step", out,
                     re.M)
    expect(side is not None and float(side.group(1)) > 0.0 and prof.get("side", {}).get("ms", 0) > 0,
           "the communication stream's time is printed beside the rows and recorded")
    sent = re.search(r"^communication measured: (\d+) bytes sent per rank in the last step", out, re.M)
    counted = prof["communication"]["bytes"] + prof.get("side", {}).get("bytes", 0)
    expect(sent is not None and abs(counted - int(sent.group(1))) <= 0.5,
           f"the profile's bytes {counted:.0f} per step are the emulated NCCL's {sent and sent.group(1)}")


def check(trainer, ranks, work):
    logdir = os.path.join(work, f"log_op1_{ranks}")
    out = train(trainer, ranks, work, logdir, ["-op", "1"])
    print(out[-2400:])
    recs = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    if not GPU:
        check_cpu_peak(out, recs[0]["config"], ranks)
    rows = table(out)
    expect(set(FAMILIES) | {"other", "step"} == set(rows), f"the table has every family, other and step: {list(rows)}")
    if not set(FAMILIES) | {"other", "step"} <= set(rows):
        return
    step = rows["step"][0]
    fams = sum(rows[f][0] for f in FAMILIES)
    avg = float(re.search(r"^average step time: ([0-9.]+) ms", out, re.M).group(1))
    expect(fams <= step + 0.0005 * (len(FAMILIES) + 1) and rows["other"][0] >= 0.0,
           f"families {fams:.3f} ms <= step {step:.3f} ms, other {rows['other'][0]:.3f} ms >= 0 (nothing counted twice)")
    total = fams + rows["other"][0]
    expect(abs(total - avg) <= 0.05 * avg + 0.05, f"the rows sum to {total:.3f} ms, the average step {avg} ms (5%)")
    expect(abs(sum(rows[f][1] for f in FAMILIES + ["other"]) - 100.0) <= 1.0, "the shares sum to 100%")
    prof = recs[-1].get("profile")
    expect(prof is not None and all(k in prof for k in KEYS) and prof["steps"] == 5
           and abs(sum(prof[k]["ms"] for k in KEYS) - prof["step_ms"]) <= 1e-3 * prof["step_ms"],
           f"metrics.jsonl ends with the profile record: {str(recs[-1])[:160]}")
    if ranks > 1:
        expect(rows["communication"][0] > 0.0 and prof["communication"]["bytes"] > 0,
               f"{ranks} ranks: communication takes time and sends bytes")
    if GPU and prof is not None:
        check_gpu(out, rows, prof, ranks)
    if ONLY_OP1:
        return
    logdir0 = os.path.join(work, f"log_op0_{ranks}")
    train(trainer, ranks, work, logdir0, ["-op", "0"])
    for name in ("main.log", "model_final.bin"):
        same = open(os.path.join(logdir, name), "rb").read() == open(os.path.join(logdir0, name), "rb").read()
        expect(same, f"{ranks} ranks: {name} is the same with -op 0 and -op 1")
    expect(not any("profile" in json.loads(line) for line in open(os.path.join(logdir0, "metrics.jsonl"))),
           "-op 0 writes no profile record")


GPU = "--gpu" in sys.argv
ONLY_OP1 = "--only-op1" in sys.argv


def main():
    argv = [a for a in sys.argv if a not in ("--gpu", "--only-op1")]
    work, trainer = argv[1], argv[2]
    ranks = [int(x) for x in argv[3:]] or [1]
    os.makedirs(work, exist_ok=True)
    rnd = random.Random(1)
    write_shard(os.path.join(work, "train.bin"), [rnd.randrange(257) for _ in range(6000)], 257)
    write_shard(os.path.join(work, "val.bin"), [rnd.randrange(257) for _ in range(2000)], 257)
    for n in ranks:
        check(trainer, n, work)
    print(f"{len(failures)} failures" if failures else "all op profile checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
