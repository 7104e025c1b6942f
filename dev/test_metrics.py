#!/usr/bin/env python3
"""Test of the step metrics (run by dev/tests/60_ecosystem.sh):

    /usr/bin/python3 dev/test_metrics.py WORK_DIR TRAINER

Trains a 2-layer model for 6 steps with validation and HellaSwag every 3 steps, then checks
metrics.jsonl against main.log and closed forms: a config record first (the run's flags and
sizes), then exactly one JSON object per step 0..6 in order; its train/val/eval numbers equal
main.log's; tokens_per_s = tokens per step / (ms / 1000); flops_per_token = 6 N + 6 L C (T + 1)
with N counted here from the shapes; mfu = flops_per_token * tokens_per_s / peak, the peak being
-pk's; the printed step lines show the same MFU. A run resumed from its step-3 checkpoint logs
every number once, equal to the uninterrupted run's. Then plot_loss.py draws the run from
metrics.jsonl.
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
from data_common import write_eval_file, write_shard  # noqa: E402

failures = []


def expect(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def main():
    work, trainer = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rnd = random.Random(1)
    V, L, C, T, B = 257, 2, 128, 32, 4
    write_shard(os.path.join(work, "train.bin"), [rnd.randrange(V) for _ in range(6000)], V)
    write_shard(os.path.join(work, "val.bin"), [rnd.randrange(V) for _ in range(2000)], V)
    write_eval_file(os.path.join(work, "eval.bin"),
                    [(rnd.randrange(4), [rnd.randrange(V) for _ in range(5)], [[rnd.randrange(V)] * 3 for _ in range(4)])
                     for _ in range(6)])
    logdir = os.path.join(work, "log")
    peak = 0.25
    cmd = [trainer, "-e", "d2", "-V", str(V), "-sl", "64", "-b", str(B), "-t", str(T), "-x", "6", "-v", "3", "-m", "2",
           "-s", "0", "-i", os.path.join(work, "train.bin"), "-j", os.path.join(work, "val.bin"), "-h", "1",
           "-hf", os.path.join(work, "eval.bin"), "-pk", str(peak), "-o", logdir]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    print(r.stdout[-1500:], r.stderr[-800:])
    if r.returncode != 0:
        sys.exit("trainer failed")
    recs = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl"))]
    cfg = recs[0].get("config", {})
    expect(cfg.get("L") == L and cfg.get("C") == C and cfg.get("T") == T and cfg.get("B") == B
           and cfg.get("tokens_per_step") == B * T and cfg.get("steps") == 6, f"config record first: {cfg}")
    steps = [rc.get("step") for rc in recs[1:]]
    expect(steps == list(range(7)), f"one record per step, in order: {steps}")
    Vp = (V + 127) // 128 * 128
    N = Vp * C + 64 * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
    fpt = 6 * N + 6 * L * C * (T + 1)
    expect(cfg.get("parameters") == N and cfg.get("flops_per_token") == fpt,
           f"parameters {cfg.get('parameters')} == {N}, flops_per_token {cfg.get('flops_per_token')} == {fpt}")
    expect(close(cfg.get("peak_flops", 0), peak * 1e12), f"peak_flops {cfg.get('peak_flops')} from -pk {peak}")

    log = {}
    for line in open(os.path.join(logdir, "main.log")):
        m = re.match(r"s:(\d+) (.*)", line)
        for field in m.group(2).split():
            k, v = field.split(":")
            log.setdefault(int(m.group(1)), {})[k] = float(v)
    names = {"trl": "train_loss", "tel": "val_loss", "eval": "hellaswag", "lr": "lr", "norm": "grad_norm"}
    same = all(abs(rec[names[k]] - v) <= 1e-6 * max(1.0, abs(v)) for rec in recs[1:] for k, v in log[rec["step"]].items())
    same = same and all(set(names[k] for k in log[rec["step"]]) <= set(rec) for rec in recs[1:])
    expect(same, "every main.log number is in the step's record, equal to 1e-6")
    expect(all("val_loss" in rec and "hellaswag" in rec for rec in recs[1:] if rec["step"] % 3 == 0),
           "val loss and HellaSwag joined to steps 0, 3, 6")
    ok_tps = all(close(rec["tokens_per_s"], B * T / (rec["ms"] / 1000)) for rec in recs[2:])
    ok_mfu = all(close(rec["mfu"], fpt * rec["tokens_per_s"] / (peak * 1e12), 1e-5) for rec in recs[2:])
    expect(ok_tps, "tokens_per_s = tokens per step / step time")
    expect(ok_mfu, "mfu = flops_per_token * tokens_per_s / peak")
    printed = [float(x) for x in re.findall(r"\| mfu ([0-9.]+)% \|", r.stdout)]
    expect(len(printed) == 6 and all(abs(p - 100 * rec["mfu"]) <= 0.051 for p, rec in zip(printed, recs[2:])),
           f"printed MFU {printed} matches the records")
    expect(f"against a peak of {peak:g} TFLOP/s per rank x 1 (-pk)" in r.stdout,
           "the start line states the peak and its source")

    # A run killed after its step-3 checkpoint (its DONE_6 removed), resumed with -y 1: the merged
    # records of each step hold every number once, equal to the uninterrupted run's.
    logdir2 = os.path.join(work, "log_resumed")
    shutil.rmtree(logdir2, ignore_errors=True)  # a rerun's checkpoints (and their .stale markers) go first
    cmd2 = [x if x != logdir else logdir2 for x in cmd] + ["-n", "3"]
    env1 = dict(os.environ, OMP_NUM_THREADS="1")
    ok = subprocess.run(cmd2, capture_output=True, env=env1).returncode == 0
    for f in os.listdir(logdir2):
        if f.startswith("DONE_") and f[5:].isdigit() and int(f[5:]) == 6:
            os.remove(os.path.join(logdir2, f))
    ok = ok and subprocess.run(cmd2 + ["-y", "1"], capture_output=True, env=env1).returncode == 0
    merged, dup = {}, []
    for line in open(os.path.join(logdir2, "metrics.jsonl")):
        rec = json.loads(line)
        if "config" in rec:
            continue
        got = merged.setdefault(rec["step"], {})
        dup += [(rec["step"], k) for k in rec if k != "step" and k in got]
        got.update(rec)
    exact = ("train_loss", "val_loss", "hellaswag", "lr", "grad_norm")
    want = {rec["step"]: {k: rec[k] for k in exact if k in rec} for rec in recs[1:]}
    have = {st: {k: r2[k] for k in exact if k in r2} for st, r2 in merged.items()}
    expect(ok and not dup and have == want, f"resumed from step 3: each number once, equal to the fresh run's "
           f"(duplicates {dup}, differences {[st for st in want if have.get(st) != want[st]]})")

    png = os.path.join(work, "metrics.png")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_loss.py"), logdir, "-o", png],
                       capture_output=True, text=True)
    expect(p.returncode == 0 and os.path.getsize(png) > 10000, f"plot_loss.py reads metrics.jsonl {p.stderr[-300:]}")
    print(f"{len(failures)} failures" if failures else "all metrics checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
