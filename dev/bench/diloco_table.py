"""The quality of -ls (DiLoCo) on the quick start's model and data: synchronous training against
2 and 4 replicas synchronized every H steps, at equal tokens, on this machine's 2 cores.

The quick start's model (d6: 6 layers, 384 channels, byte-level KJV) with a shorter run than
`make quickstart` so that the table (12 runs) fits in about 40 minutes of 2 cores: T 64, 256 tokens per step
(4 rows, split over the replicas), 600 steps (154K tokens), lr 1e-3 with 20 warmup steps and a
cosine decay to 0.1, ZeRO 1, one rank per replica (-ds 1), one OpenMP thread per rank. Every
configuration reads the same rows (a replica's share of each global batch) and reports its final
val loss (the same 64 val rows), the bytes each rank sends across the replicas per trained token
(from the trainer's own closed form, printed at start-up) and the measured step time.

  python3 dev/bench/diloco_table.py [--steps N] [--only NAME,...] [--sync-val V]   prints a markdown table
(--sync-val: the synchronous run's final val loss, measured before, instead of running it again)
Results (one log per configuration) go to build/bench/diloco/. docs/distributed.md holds the table
measured with the defaults.
"""
import argparse
import os
import re
import subprocess
import sys
import time

OUT = "build/bench/diloco"
# name, replicas, -ls, -ol, -om, -lss[, further flags: the replica link's format]
CONFIGS = [
    ("sync", 2, 0, 0.7, 0.9, 0),
    ("R2 H5 0.7/0.9", 2, 5, 0.7, 0.9, 0),
    ("R2 H20 0.7/0.9", 2, 20, 0.7, 0.9, 0),
    ("R2 H100 0.7/0.9", 2, 100, 0.7, 0.9, 0),
    ("R2 H5 avg 1.0/0", 2, 5, 1.0, 0.0, 0),
    ("R2 H20 avg 1.0/0", 2, 20, 1.0, 0.0, 0),
    ("R2 H100 avg 1.0/0", 2, 100, 1.0, 0.0, 0),
    ("R2 H20 0.7/0.9 -lss 100", 2, 20, 0.7, 0.9, 100),
    ("R2 H20 0.7/0.5", 2, 20, 0.7, 0.5, 0),
    ("R4 H20 0.7/0.9", 4, 20, 0.7, 0.9, 0),
    ("R4 H20 avg 1.0/0", 4, 20, 1.0, 0.0, 0),
    ("R4 H20 0.7/0.9 -lss 100", 4, 20, 0.7, 0.9, 100),
    ("R2 H20 avg -rq int8", 2, 20, 1.0, 0.0, 0, ["-rq", "int8"]),
    ("R2 H20 avg -rq int4", 2, 20, 1.0, 0.0, 0, ["-rq", "int4"]),
    ("R2 H20 avg -rq int4 -ref 0", 2, 20, 1.0, 0.0, 0, ["-rq", "int4", "-ref", "0"]),
    ("R2 H20 avg -rq int4 -rk 0.02", 2, 20, 1.0, 0.0, 0, ["-rq", "int4", "-rk", "0.02"]),
    ("sync -rq int8", 2, 0, 0.7, 0.9, 0, ["-rq", "int8"]),
]
ROWS, T = 4, 64


def run(name, R, every, lr, mom, start, steps, extra=()):
    tag = re.sub(r"[^A-Za-z0-9.]+", "_", name)
    d = f"{OUT}/{tag}"
    args = ["-i", "data/kjv/kjv_train.bin", "-j", "data/kjv/kjv_val.bin", "-e", "d6", "-V", "257", "-sl", "256",
            "-b", str(ROWS // R), "-t", str(T), "-d", str(ROWS * T), "-x", str(steps), "-l", "1e-3", "-u", "20",
            "-q", "0.1", "-k", "cosine", "-c", "0.1", "-v", "100", "-m", str(64 // ROWS), "-s", "0", "-z", "1",
            "-ds", "1", "-o", d]
    if every:
        args += ["-ls", str(every), "-ol", str(lr), "-om", str(mom), "-lss", str(start)]
    args += list(extra)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(R), "-x",
           "OMP_NUM_THREADS=1", os.environ.get("TRAINER", "./train_gpt2cpu")] + args
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(f"{d}.out", "w").write(r.stdout + r.stderr)
    if r.returncode != 0:
        sys.exit(f"{name}: failed\n{r.stderr[-2000:]}")
    vals = re.findall(r"step (\d+): val loss (\S+)", r.stdout)
    if every:
        replica = float(re.search(r"communication across replicas: (\S+) bytes per rank per step", r.stdout).group(1))
    else:
        replica = float(re.search(r"replicas (\d+), parameters", r.stdout).group(1))
    step_ms = float(re.search(r"average step time: (\S+) ms", r.stdout).group(1))
    return {"val": float(vals[-1][1]), "curve": [float(v) for _, v in vals], "bytes_per_token": replica / (ROWS * T),
            "step_ms": step_ms, "wall": time.time() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--only", default="")
    ap.add_argument("--sync-val", type=float, default=None)
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    only = [s for s in a.only.split(",") if s]
    rows, sync_val = [], a.sync_val
    print(f"| configuration | final val loss | vs sync | val at 100/200/300/400/500 | replica bytes/token | step ms |")
    print("|---|---|---|---|---|---|")
    for cfg in CONFIGS:
        if (only and cfg[0] not in only and cfg[0] != "sync") or (cfg[0] == "sync" and a.sync_val is not None):
            continue
        res = run(*cfg[:6], a.steps, *cfg[6:])
        if cfg[0] == "sync":
            sync_val = res["val"]
        rel = f"{100 * (res['val'] / sync_val - 1):+.1f}%" if sync_val else ""
        curve = "/".join(f"{v:.3f}" for v in res["curve"][1:-1])
        print(f"| {cfg[0]} | {res['val']:.4f} | {rel} | {curve} | {res['bytes_per_token']:.0f} | "
              f"{res['step_ms']:.0f} |", flush=True)
        rows.append((cfg, res))


if __name__ == "__main__":
    main()
