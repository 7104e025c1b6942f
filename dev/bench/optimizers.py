"""-opt muon against -opt adamw, side by side in one run, on the CPU trainer: steps and training time
to a target val loss, on two corpora (the quick start's byte-level KJV, and Python sources:
dev/data/pysrc.py), with a small learning-rate sweep of each.

Every configuration trains the quick start's model and batch (d4, -sl 256, B 8 x T 256, warmup 30
then cosine to 0.1, -c 0.1, clip 1, ZeRO 0, one rank) for --steps steps on the same rows, and is
validated every --val-every steps on the same 16 val rows. AdamW runs at each -l of --adamw-lrs;
Muon at each -ml of --muon-lrs with AdamW at --muon-adamw-lr on the rest. The target of a corpus is
the final val loss of its best AdamW run; for every run the table gives the first validation at or
below it (steps), and the training time to it: those steps times the ms per step of its optimizer,
measured quietly side by side after the runs (20-step -op 1 runs, alternated twice: the long runs'
own times move with whatever else the host does), validation excluded; each as a fraction of the
best AdamW's. Those short runs also give the optimizer's share of a step; the GPU trainer's share at
124M B 64 T 1024 is modelled (dev/bench/gpu_model.py's rates and launch costs).

  python3 dev/bench/optimizers.py [--steps N] [--val-every V] [--corpora kjv,pysrc] [--rerun]
Logs in build/bench/optimizers/; a finished run with the same flags is reused unless --rerun. The
machine is named at the top (lscpu) with its measured peak (the trainer's start-up line).
docs/benchmarks.md holds the table measured with the defaults.
"""
import argparse
import json
import os
import re
import subprocess
import sys

OUT = "build/bench/optimizers"
TRAINER = "./train_gpt2cpu"
CORPORA = {"kjv": ("data/kjv/kjv_train.bin", "data/kjv/kjv_val.bin"),
           "pysrc": ("data/pysrc/pysrc_train.bin", "data/pysrc/pysrc_val.bin")}
MODEL = ["-e", "d4", "-V", "257", "-sl", "256", "-b", "8", "-t", "256", "-u", "30", "-q", "0.1", "-k", "cosine",
         "-c", "0.1", "-m", "16", "-s", "0", "-sf", "1"]


def host():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = re.search(r"Model name:\s*(.*)", out)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)", out, re.M)
    return f"{name.group(1).strip() if name else '?'}, {cpus.group(1) if cpus else '?'} CPUs"


def run(name, flags, rerun):
    d = f"{OUT}/{name}"
    stamp = f"{d}/flags.txt"
    if not rerun and os.path.exists(stamp) and open(stamp).read() == " ".join(flags) and \
            os.path.exists(f"{d}/model_final.bin"):
        return d, open(f"{d}/stdout.txt").read()
    subprocess.run(["rm", "-rf", d], check=True)
    os.makedirs(d)
    r = subprocess.run([TRAINER] + flags + ["-o", d], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"optimizers.py: run {name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    open(f"{d}/stdout.txt", "w").write(r.stdout)
    open(stamp, "w").write(" ".join(flags))
    return d, r.stdout


def records(d):
    """(val {step: loss}, cumulative training ms {step: ms})."""
    val, ms, total = {}, {}, 0.0
    for line in open(f"{d}/metrics.jsonl"):
        rec = json.loads(line)
        if "val_loss" in rec:  # (a step's record holds its validation too)
            val[rec["step"]] = rec["val_loss"]
        if "ms" in rec and "train_loss" in rec:
            total += rec["ms"]
            ms[rec["step"]] = total
    return val, ms


def first_at_or_below(val, target):
    return next((s for s in sorted(val) if val[s] <= target), None)


def quiet_step_ms(corpus, muon_flags, options):
    """ms per step and the optimizer's share for -opt adamw, -opt muon and Muon with each of options,
    from 20-step -op 1 runs alternated twice (adamw, muon, ..., adamw, muon, ...) with nothing else
    running: the long runs' own ms move with whatever else the host does, so times to target are
    steps x these."""
    train, val = CORPORA[corpus]
    out = {}
    kinds = [("adamw", ["-opt", "adamw", "-l", "2e-3"]), ("muon", ["-opt", "muon"] + muon_flags)] + \
        [(f"muon {o}", ["-opt", "muon"] + muon_flags + o.split()) for o in options]
    for rep in range(2):
        for opt, flags in kinds:
            tag = re.sub(r"[^A-Za-z0-9]+", "_", opt)
            d, _ = run(f"{corpus}_profile_{tag}_{rep}", MODEL + ["-i", train, "-j", val, "-x", "20", "-v", "0", "-op",
                                                                "1"] + flags, True)  # always afresh
            prof = next(json.loads(x)["profile"] for x in open(f"{d}/metrics.jsonl") if '"profile"' in x)
            out.setdefault(opt, []).append((prof["step_ms"], prof["adamw"]["ms"] + prof["muon"]["ms"]))
    return {opt: (min(v[0] for v in vals), min(v[1] for v in vals)) for opt, vals in out.items()}


def muon_gpu_model(size, gpu, matrices_share=1.0, batched=False):
    """The GPU trainer's Muon step (llmc/muon.cuh) in dev/bench/gpu_model.py's terms: per matrix the
    blend, the norm, the scale, five Newton-Schulz steps (X X^T, S S, the polynomial, a copy, P X:
    cuBLASLt at GEMM_EFF, the LLM shapes' efficiency, an assumption for these smaller GEMMs) and
    the step; matrices_share: the part of the model's matrices this rank takes (ZeRO 0: all);
    batched: the same-shape matrices of every layer in one launch each (strided batched GEMMs: not
    built). Returns seconds."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_model as gm
    L, C, _ = gm.MODELS[size]
    X, F = gm.X, gm.F
    ks = []
    for rows, cols in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C)):
        n, m, big = rows * cols, min(rows, cols), max(rows, cols)
        count = L * matrices_share
        per = 1 if batched else count   # launches of each kernel
        many = count                     # the work
        ks += [gm.Kernel("blend", per, bytes_=many * n * (X + 3 * F)),
               gm.Kernel("norm", per, bytes_=many * n * F), gm.Kernel("scale", per, bytes_=many * n * (F + X)),
               gm.Kernel("step", per, bytes_=many * n * (3 * X + 2 * F))]
        for _ in range(5):
            ks += [gm.Kernel("XX^T", per, flops=many * 2.0 * m * m * big, bytes_=many * X * (2 * n + m * m), how="gemm"),
                   gm.Kernel("SS", per, flops=many * 2.0 * m ** 3, bytes_=many * X * 3 * m * m, how="gemm"),
                   gm.Kernel("poly", per, bytes_=many * X * 3 * m * m), gm.Kernel("copy", per, bytes_=many * X * 2 * n),
                   gm.Kernel("PX", per, flops=many * 2.0 * m * m * big, bytes_=many * X * (3 * n + m * m), how="gemm")]
    return sum(k.time(gpu) for k in ks)


def print_gpu_model(gpu="H200"):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_model as gm
    step = gm.summarize_step("124M", 64, 1024, gpu)[0]["step_s"]
    print(f"\nmodelled ({gpu}, dev/bench/gpu_model.py's rates): 124M B 64 T 1024, the step (its AdamW on every parameter) "
          f"{step * 1e3:.1f} ms per GPU")
    rows = [("1 GPU, ZeRO 0 (as built: one matrix at a time)", 1.0, False),
            ("8 GPUs, ZeRO 0 (as built: every rank all)", 1.0, False),
            ("1 GPU, the same-shape matrices batched (not built)", 1.0, True),
            ("8 GPUs, one owner a matrix (not built on the GPU)", 1.0 / 8, False),
            ("8 GPUs, owners and batched (not built)", 1.0 / 8, True)]
    for what, share, batched in rows:
        t = muon_gpu_model("124M", gpu, share, batched)
        print(f"  Muon's Newton-Schulz and steps, {what}: {t * 1e3:.2f} ms, {100 * t / (step + t):.1f}% of the step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--val-every", type=int, default=50)
    ap.add_argument("--corpora", default="kjv,pysrc")
    ap.add_argument("--adamw-lrs", default="1e-3,2e-3,4e-3")
    ap.add_argument("--muon-lrs", default="0.01,0.02,0.04")
    ap.add_argument("--muon-adamw-lr", default="2e-3")
    ap.add_argument("--muon-options", default="-mq 1",
                    help="further Muon runs at -ml 0.02, one for each of these flag sets (comma-separated; '' none)")
    ap.add_argument("--rerun", action="store_true")
    ap.add_argument("--gpu-model", action="store_true", help="only the modelled GPU share (no runs)")
    a = ap.parse_args()
    if a.gpu_model:
        print_gpu_model()
        return
    os.makedirs(OUT, exist_ok=True)
    if not os.path.exists(CORPORA["pysrc"][0]):
        subprocess.run([sys.executable, "dev/data/pysrc.py"], check=True)
    print(f"host: {host()}; {a.steps} steps of 2048 tokens, val every {a.val_every} (16 rows)")
    tables = []
    for corpus in a.corpora.split(","):
        train, val = CORPORA[corpus]
        base = MODEL + ["-i", train, "-j", val, "-x", str(a.steps), "-v", str(a.val_every)]
        runs = []
        for lr in a.adamw_lrs.split(","):
            d, out = run(f"{corpus}_adamw_{lr}", base + ["-opt", "adamw", "-l", lr], a.rerun)
            runs.append((f"adamw -l {lr}", d, out))
        for ml in a.muon_lrs.split(","):
            d, out = run(f"{corpus}_muon_{ml}", base + ["-opt", "muon", "-ml", ml, "-l", a.muon_adamw_lr], a.rerun)
            runs.append((f"muon -ml {ml} -l {a.muon_adamw_lr}", d, out))
        for o in filter(None, a.muon_options.split(",")):
            tag = re.sub(r"[^A-Za-z0-9]+", "_", o.strip())
            d, out = run(f"{corpus}_muon_0.02_{tag}", base + ["-opt", "muon", "-ml", "0.02", "-l", a.muon_adamw_lr] +
                         o.split(), a.rerun)
            runs.append((f"muon -ml 0.02 {o.strip()}", d, out))
        if corpus == a.corpora.split(",")[0]:
            peak = re.search(r"against a peak of (\S+ TFLOP/s)", runs[0][2])
            print(f"measured peak (the trainer's start-up): {peak.group(1) if peak else '?'} per rank")
        data = [(name, *records(d)) for name, d, _ in runs]
        tables.append((corpus, data))
    options = [o.strip() for o in a.muon_options.split(",") if o.strip()]
    quiet = quiet_step_ms(a.corpora.split(",")[0], ["-l", a.muon_adamw_lr, "-ml", "0.02"], options)
    print("ms per step measured quietly (20-step -op 1 runs, alternated twice, the faster of each): " +
          ", ".join(f"-opt {o} {v[0]:.1f} ms (the optimizer {v[1]:.1f} ms, {100 * v[1] / v[0]:.1f}%)"
                    for o, v in quiet.items()))
    for corpus, data in tables:
        adamw = [x for x in data if x[0].startswith("adamw")]
        best = min(adamw, key=lambda x: x[1][max(x[1])])
        target = best[1][max(best[1])]
        b_step = first_at_or_below(best[1], target)
        b_time = b_step * quiet["adamw"][0]
        print(f"\n{corpus}: target val {target:.4f} (the final val loss of the best AdamW, {best[0]})")
        print(f"  {'run':<28} {'final val':>9} {'steps to target':>16} {'x AdamW':>8} {'time to target':>15} "
              f"{'x AdamW':>8}")
        for name, v, ms in data:
            s_ = first_at_or_below(v, target)
            final = v[max(v)]
            if s_ is None:
                print(f"  {name:<28} {final:9.4f} {'not reached':>16}")
                continue
            opt = "adamw" if name.startswith("adamw") else next((f"muon {o}" for o in options if name.endswith(o)), "muon")
            t = s_ * quiet[opt][0]
            print(f"  {name:<28} {final:9.4f} {s_:16d} {s_ / b_step:8.2f} {t / 1000:14.1f}s {t / b_time:8.2f}")
    print_gpu_model()


if __name__ == "__main__":
    main()
