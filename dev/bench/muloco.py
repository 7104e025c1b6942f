"""Muon inside the replica sync (MuLoCo: -opt muon with -ls H, a compressed link with error feedback)
against synchronous AdamW and synchronous Muon, side by side in one run, on the CPU trainer: the
final val loss at equal tokens and the bytes each rank sends across the replicas per token.

Every configuration trains dev/bench/optimizers.py's model and batch (the quick start's d4 on the
byte-level KJV, -sl 256, 2,048 tokens a step as 2 replicas of B 4 x T 256, one rank each, one OpenMP
thread a rank; warmup 30 then cosine to 0.1, -c 0.1, clip 1) for --steps steps on the same rows,
validated every 60 steps (a multiple of -ls) on the same 16 val rows: AdamW at its best -l of that
benchmark (2e-3), Muon at its best -ml (0.02, AdamW at 2e-3 on the rest), each synchronous (-ls 0:
the gradients averaged over both replicas every step) and with -ls 30 -rq int4 -ref 1, Muon's outer
step swept over (-ol, -om). Bytes per token are the trainer's closed forms of its start-up report
(its tests hold them equal to the bytes it sends). The goal (the Muon issue): the best MuLoCo row at
or below synchronous AdamW's final loss and within 5% of synchronous Muon's.

  python3 dev/bench/muloco.py [--steps N] [--rerun]
Logs in build/bench/muloco/; a finished run of the same command is reused unless --rerun. The machine
is named at the top (lscpu). docs/benchmarks.md holds the table measured with the defaults.
"""
import argparse
import os
import re
import subprocess
import sys

OUT = "build/bench/muloco"
ROWS, T, R = 8, 256, 2
ADAMW = ["-l", "2e-3"]
MUON = ["-l", "2e-3", "-opt", "muon", "-ml", "0.02"]
LINK = ["-rq", "int4", "-ref", "1"]
# name, optimizer flags, -ls H (0: synchronous), -ol, -om
CONFIGS = [("adamw sync", ADAMW, 0, 0, 0), ("muon sync", MUON, 0, 0, 0)] + \
          [(f"muon H30 int4 {ol}/{om}", MUON, 30, ol, om) for ol, om in ((0.7, 0.9), (1.0, 0.0), (0.9, 0.5))]


def host():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = re.search(r"Model name:\s*(.*)", out)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)", out, re.M)
    return f"{name.group(1).strip() if name else '?'}, {cpus.group(1) if cpus else '?'} CPUs"


def num(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def run(name, opt, every, ol, om, steps, rerun):
    d = f"{OUT}/{re.sub(r'[^A-Za-z0-9.]+', '_', name)}"
    args = ["-i", "data/kjv/kjv_train.bin", "-j", "data/kjv/kjv_val.bin", "-e", "d4", "-V", "257", "-sl", "256",
            "-b", str(ROWS // R), "-t", str(T), "-d", str(ROWS * T), "-x", str(steps), "-u", "30", "-q", "0.1",
            "-k", "cosine", "-c", "0.1", "-v", "60", "-m", "16", "-s", "0", "-sf", "1", "-z", "1", "-ds", "1",
            "-o", d] + opt
    if every:
        args += ["-ls", str(every), "-ol", str(ol), "-om", str(om)] + LINK
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(R), "-x",
           "OMP_NUM_THREADS=1", "./train_gpt2cpu"] + args
    line = " ".join(cmd)
    if not rerun and os.path.exists(f"{d}.out") and os.path.exists(f"{d}.cmd") and \
            open(f"{d}.cmd").read().strip() == line and "average step time" in open(f"{d}.out").read():
        text = open(f"{d}.out").read()
    else:
        os.makedirs(OUT, exist_ok=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        text = r.stdout + r.stderr
        open(f"{d}.out", "w").write(text)
        open(f"{d}.cmd", "w").write(line + "\n")
        if r.returncode != 0:
            sys.exit(f"muloco.py: {name} failed:\n{text[-3000:]}")
    vals = re.findall(r"step (\d+): val loss (\S+)", text)
    tok = ROWS * T
    if every:
        per_sync = num(r"(\d+) bytes sent per rank across replicas, \d+ inside", text)
        per_token = per_sync / every / tok
    else:
        per_token = num(r"replicas (\d+), parameters", text) / tok
    return {"val": float(vals[-1][1]), "curve": [(int(s), float(v)) for s, v in vals], "bytes": per_token,
            "step_ms": num(r"average step time: (\S+) ms", text)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rerun", action="store_true")
    a = ap.parse_args()
    if a.steps % 60:
        sys.exit("--steps: a multiple of 60 (the validation, itself a multiple of -ls 30)")
    print(f"host: {host()}; {a.steps} steps of {ROWS * T} tokens, {R} replicas")
    res = {c[0]: run(*c, a.steps, a.rerun) for c in CONFIGS}
    sync_adamw, sync_muon = res["adamw sync"]["val"], res["muon sync"]["val"]
    print("| run | final val | vs sync AdamW | vs sync Muon | val at 60/120/180/240 | bytes/token across replicas |")
    print("|---|---|---|---|---|---|")
    for name, r in res.items():
        curve = "/".join(f"{v:.3f}" for s, v in r["curve"] if s in (60, 120, 180, 240))
        print(f"| {name} | {r['val']:.4f} | {r['val'] / sync_adamw:.3f} | {r['val'] / sync_muon:.3f} | {curve} | "
              f"{r['bytes']:.1f} |")
    best = min((n for n in res if n.startswith("muon H")), key=lambda n: res[n]["val"])
    b = res[best]
    print(f"best MuLoCo: {best}, {b['val']:.4f}: {b['val'] / sync_adamw:.3f} x synchronous AdamW's (goal <= 1), "
          f"{b['val'] / sync_muon:.3f} x synchronous Muon's (goal <= 1.05), at {res['muon sync']['bytes'] / b['bytes']:.0f}x "
          "fewer bytes per token than synchronous training")


if __name__ == "__main__":
    main()
