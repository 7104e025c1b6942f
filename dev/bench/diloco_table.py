"""The quality of -ls (DiLoCo) and its replica-link options on the quick start's model and data:
synchronous training against 2 and 4 replicas synchronized every H steps, at equal tokens, on this
machine's 2 cores.

The quick start's model (d6: 6 layers, 384 channels, byte-level KJV) with a shorter run than
`make quickstart`: T 64, 256 tokens per step (4 rows, split over the replicas), 600 steps (154K
tokens), lr 1e-3 with 20 warmup steps and a cosine decay to 0.1, ZeRO 1, one rank per replica (-ds 1),
one OpenMP thread per rank, 2-11 minutes a configuration on the shared host. Every configuration reads the same rows
and reports its final val loss (the same 64 val rows), the bytes each rank sends across the replicas
per trained token and the most any one step sends (both from the trainer's closed forms printed at
start-up, which its tests hold equal to the bytes sent), and how many times fewer bytes per token
that is than synchronous fp32 training on the same replicas.
--link adds the step time on a link throttled to 100 MB/s (-rb): 61-step runs of each configuration
without and with -rb, one after the other, each mean step (steps 2..60) divided by that of the
never-syncing runs (-ls longer than the run) measured just before and after it, since the machine is
shared and absolute times move between runs, and the share of the throttled run's training time that
rank 0 was held by replica exchanges (the trainer's line: a blocking exchange whole, an -lo one while
the trainer waited for it to land). Synchronous
training runs there as -ls 1 -ol 1 -om 0 (-rb needs -ls; it sends the same bytes every step, blocking).

  python3 dev/bench/diloco_table.py [--steps N] [--only NAME,...] [--link] [--rerun] [--cached-only]
Logs go to build/bench/diloco/ (the throttled runs' to link/); a finished log of the same command is
reused unless --rerun. docs/distributed.md holds the table measured with the defaults.
"""
import argparse
import os
import re
import subprocess
import sys

OUT = "build/bench/diloco"
# name, replicas, -ls, -ol, -om, -lss[, further flags: the replica link's format]


def avg(flags, H=20):
    """2 replicas averaged every H steps (-ol 1 -om 0) with further flags, named by them."""
    return (f"R2 H{H} avg {flags}", 2, H, 1.0, 0.0, 0, flags.split())


CONFIGS = ([("sync", 2, 0, 0.7, 0.9, 0)] +
           [(f"R2 H{h} 0.7/0.9", 2, h, 0.7, 0.9, 0) for h in (5, 20, 100)] +
           [(f"R2 H{h} avg 1.0/0", 2, h, 1.0, 0.0, 0) for h in (5, 20, 100)] +
           [("R2 H20 0.7/0.9 -lss 100", 2, 20, 0.7, 0.9, 100), ("R2 H20 0.7/0.5", 2, 20, 0.7, 0.5, 0),
            ("R4 H20 0.7/0.9", 4, 20, 0.7, 0.9, 0), ("R4 H20 avg 1.0/0", 4, 20, 1.0, 0.0, 0),
            ("R4 H20 0.7/0.9 -lss 100", 4, 20, 0.7, 0.9, 100)] +
           [avg(f) for f in ("-rq int8", "-rq int4", "-rq int4 -ref 0", "-rq int4 -rk 0.02")] +
           [("sync -rq int8", 2, 0, 0.7, 0.9, 0, ["-rq", "int8"])] +
           [avg(f) for f in ("-rq bf16", "-rq int8 -ref 0", "-rq int8 -rk 0.01", "-rq int8 -rqs 200", "-lf 1", "-lf 4",
                             "-lf 4 -lo 1", "-lf 4 -lo 1 -rq int8")] +
           [avg(f, 100) for f in ("-rq int8", "-rq int4 -rk 0.02")])
ROWS, T = 4, 64
# The throttled-link runs: the configurations whose step time -rb changes (-ref 0 sends int8's bytes,
# -rqs 200 fp32's in these short runs, -lf 1 is -ls itself; -ls 100 would need 100-step windows).
# "sync" runs as -ls 1 -ol 1 -om 0: -rb needs -ls, and -ls 1 sends synchronous training's replica
# bytes every step, blocking. 61 steps: steps 2..60 hold 3 windows of -ls 20 (step 61 syncs everything).
LINK_CONFIGS = ["sync", "sync -rq int8", "R2 H20 avg 1.0/0", "R2 H20 avg -rq bf16", "R2 H20 avg -rq int8",
                "R2 H20 avg -rq int4 -rk 0.02", "R2 H20 avg -rq int8 -rk 0.01", "R2 H20 avg -lf 4",
                "R2 H20 avg -lf 4 -lo 1", "R2 H20 avg -lf 4 -lo 1 -rq int8"]
LINK_STEPS, LINK_MBPS = 61, 100


def trainer_args(d, R, every, lr, mom, start, steps, extra, val=True):
    # with -lf F > 1 the replicas agree only after the last step (every fragment syncs there): val at the end
    v = ("100" if "-lf" not in extra or extra[extra.index("-lf") + 1] == "1" else str(steps)) if val else "0"
    args = ["-i", "data/kjv/kjv_train.bin", "-j", "data/kjv/kjv_val.bin", "-e", "d6", "-V", "257", "-sl", "256",
            "-b", str(ROWS // R), "-t", str(T), "-d", str(ROWS * T), "-x", str(steps), "-l", "1e-3", "-u", "20",
            "-q", "0.1", "-k", "cosine", "-c", "0.1", "-v", v, "-m", str(64 // ROWS), "-s", "0",
            "-z", "1", "-ds", "1", "-o", d]
    if every:
        args += ["-ls", str(every), "-ol", str(lr), "-om", str(mom), "-lss", str(start)]
    return args + list(extra)


def launch(d, R, args, rerun, cached_only=False):
    """Runs the trainer on R ranks unless d.out already holds a finished run of the same command (d.cmd);
    a log without d.cmd was written by the script before it recorded commands and is taken as is."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(R), "-x",
           "OMP_NUM_THREADS=1", os.environ.get("TRAINER", "./train_gpt2cpu")] + args
    line = " ".join(cmd)
    if not rerun and os.path.exists(f"{d}.out"):
        old = open(f"{d}.cmd").read().strip() if os.path.exists(f"{d}.cmd") else line
        text = open(f"{d}.out").read()
        if old == line and "average step time" in text:
            return text, True
    if cached_only:
        return None, False
    r = subprocess.run(cmd, capture_output=True, text=True)
    open(f"{d}.out", "w").write(r.stdout + r.stderr)
    open(f"{d}.cmd", "w").write(line + "\n")
    if r.returncode != 0:
        sys.exit(f"{d}: failed\n{r.stderr[-2000:]}")
    return r.stdout, False


def num(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def replica_bytes(text, every, start, extra, steps):
    """(bytes each rank sends across the replicas per trained token over the run, the most any one step
    sends, synchronous fp32 training's bytes per token on the same mesh), from the trainer's closed forms
    in its start-up report."""
    tok = ROWS * T
    if not every:
        per_step = num(r"replicas (\d+), parameters", text)
        return per_step / tok, per_step, (num(r"bytes per step across replicas, (\d+) in fp32", text) or per_step) / tok
    sync = num(r"(\d+) with synchronous training", text) / tok
    per_sync = num(r"(\d+) bytes sent per rank across replicas, \d+ inside", text)
    peak = num(r"the largest sends (\d+) bytes per rank across replicas", text) or per_sync
    if start:  # -lss: synchronous fp32 steps first
        return (start * sync * tok + (steps - start) // every * per_sync) / (steps * tok), max(peak, sync * tok), sync
    if "-rqs" in extra:  # fp32 for the syncs after steps <= S, the -rq format after them
        S = int(extra[extra.index("-rqs") + 1])
        fp32 = num(r"bytes per outer sync across replicas, (\d+) in fp32", text)
        n_fp32 = min(S, steps) // every
        return (n_fp32 * fp32 + (steps // every - n_fp32) * per_sync) / (steps * tok), fp32, sync
    return per_sync / every / tok, peak, sync


def run(name, R, every, lr, mom, start, steps, extra=(), rerun=False, cached_only=False):
    d = f"{OUT}/{re.sub(r'[^A-Za-z0-9.]+', '_', name)}"
    text, cached = launch(d, R, trainer_args(d, R, every, lr, mom, start, steps, extra), rerun, cached_only)
    if text is None:
        return None
    vals = re.findall(r"step (\d+): val loss (\S+)", text)
    per_token, peak, sync = replica_bytes(text, every, start, list(extra), steps)
    return {"val": float(vals[-1][1]), "curve": [float(v) for _, v in vals], "bytes_per_token": per_token,
            "peak": peak, "sync_bytes_per_token": sync, "step_ms": num(r"average step time: (\S+) ms", text), "cached": cached,
            "losses": re.findall(r"\| loss (\S+) \|", text)}


def step_mean_ms(text):
    """Mean step time over steps 2..N-1 (the first pays for start-up, the last syncs every fragment)."""
    ms = [float(x) for x in re.findall(r"step +\d+/\d+ \|.*?\| ([\d.]+) ms \|", text)]
    return sum(ms[1:-1]) / len(ms[1:-1])


def link_batch(rerun):
    """Short runs of each LINK_CONFIGS entry without and with the throttled link (-rb), one after the other,
    and a never-syncing run (-ls longer than the run) first, after every fourth configuration and last;
    returns {name: (ms, throttled ms, never-syncing ms around them, % of the throttled run's training time
    rank 0 was held by replica exchanges: blocking ones whole, -lo ones while it waited for them)}."""
    os.makedirs(f"{OUT}/link", exist_ok=True)
    cfgs = {c[0]: c for c in CONFIGS}
    nosync, res = [], {}

    def one(tag, R, every, lr, mom, extra):
        d = f"{OUT}/link/{tag}"
        text = launch(d, R, trainer_args(d, R, every, lr, mom, 0, LINK_STEPS, extra, False), rerun)[0]
        return step_mean_ms(text), num(r"rank 0 waited \S+ ms for it in \S+ ms of training \((\S+)%\)", text)

    def never(i):
        nosync.append(one(f"nosync_{i}", 2, 10 * LINK_STEPS, 1.0, 0.0, [])[0])

    never(0)
    for i, name in enumerate(LINK_CONFIGS):
        _, R, every, lr, mom, _, *rest = cfgs[name]
        extra = list(rest[0]) if rest else []
        if not every:
            every, lr, mom = 1, 1.0, 0.0
        tag = re.sub(r"[^A-Za-z0-9.]+", "_", name)
        plain = one(tag, R, every, lr, mom, extra)[0]
        slow, waited = one(tag + "_rb", R, every, lr, mom, extra + ["-rb", str(LINK_MBPS)])
        res[name] = (plain, slow, len(nosync) - 1, waited)
        if i % 4 == 3:
            never(len(nosync))
    never(len(nosync))
    # each configuration against the mean of the never-syncing runs just before and just after it
    return {k: (p, s, (nosync[j] + nosync[j + 1]) / 2, w) for k, (p, s, j, w) in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--only", default="", help="comma-separated configuration names (sync is always in)")
    ap.add_argument("--rerun", action="store_true", help="run again even where a finished log of the same command exists")
    ap.add_argument("--link", action="store_true", help="add the throttled-link columns (short runs, -rb)")
    ap.add_argument("--cached-only", action="store_true", help="print only the rows with finished logs, run nothing")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    only = [s for s in a.only.split(",") if s]
    link = link_batch(a.rerun) if a.link else {}
    sync_val = None
    done, missing = {}, []
    head = ("| configuration | final val loss | vs sync | val at 100/200/300/400/500 | replica bytes/token | "
            "x fewer bytes than sync | peak bytes/step |")
    if link:
        head += f" step ms / never-syncing | with -rb {LINK_MBPS:g} MB/s | waited on the link |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for cfg in CONFIGS:
        if only and cfg[0] not in only and cfg[0] != "sync":
            continue
        res = run(*cfg[:6], a.steps, *cfg[6:], rerun=a.rerun, cached_only=a.cached_only)
        if res is None:
            missing.append(cfg[0])
            if cfg[0] in link:
                p, sl, ns, w = link[cfg[0]]
                print(f"| {cfg[0]} |" + " no log |" * 6 + f" {p / ns:.2f}x | {sl / ns:.2f}x | {w:.1f}% |")
            continue
        if cfg[0] == "sync":
            sync_val = res["val"]
        rel = f"{100 * (res['val'] / sync_val - 1):+.1f}%"
        curve = "/".join(f"{v:.3f}" for v in res["curve"][1:-1]) or "(replicas differ there)"
        row = (f"| {cfg[0]} | {res['val']:.4f} | {rel} | {curve} | {res['bytes_per_token']:.0f} | "
               f"{res['sync_bytes_per_token'] / res['bytes_per_token']:.1f}x | {res['peak']:.0f} |")
        if link:
            p, s, ns, w = link.get(cfg[0], (None, None, None, None))
            row += f" {p / ns:.2f}x | {s / ns:.2f}x | {w:.1f}% |" if p else " not measured |" * 3
        print(row, flush=True)
        done[cfg[0]] = res
    if missing:
        print(f"\nnot measured (no log): {', '.join(missing)}")
    base, lf1 = done.get("R2 H20 avg 1.0/0"), done.get("R2 H20 avg -lf 1")
    if base and lf1:  # -lf 1 is plain -ls, bit for bit
        if base["losses"] != lf1["losses"] or base["curve"] != lf1["curve"]:
            sys.exit("-lf 1 differs from R2 H20 avg 1.0/0")
        print(f"\n-lf 1: its {len(lf1['losses'])} step losses and {len(lf1['curve'])} val losses equal "
              "R2 H20 avg 1.0/0's, digit for digit")


if __name__ == "__main__":
    main()
