#!/usr/bin/python3
"""CPU training benchmark: train_gpt2cpu against an eager PyTorch GPT-2 doing the same work.

For each config both sides train the same model size on the same (B, T) from scratch: one step is
forward, backward, global grad-norm clip and AdamW, fp32, on OMP_NUM_THREADS / torch threads each.
Runs alternate (C, PyTorch, C, PyTorch, ...) so that a change in machine load hits both. The first
step of every run is a warm-up and is not timed. Prints per config ms/step (median, min, max over
all timed steps), tokens/s, achieved GFLOP/s and its share of the peak FLOP/s measured here by
dev/bench/peak_flops.c, peak RSS of each process (from wait4) and the speed ratio.

PyTorch's BLAS is probed first, in the worker's environment: the OpenBLAS core it runs
(openblas_get_corename) and the sgemm GFLOP/s it reaches (2048^3). When OpenBLAS has fallen back
to generic kernels (an OpenBLAS older than the CPU: Prescott, Nehalem, Sandybridge, ... on a CPU
with AVX2 or AVX-512), the PyTorch side runs with the matching OPENBLAS_CORETYPE (SkylakeX for
AVX-512, Haswell for AVX2, Zen for AMD's AVX2) in its environment only, and the output says so.

FLOPs per step (matmuls only, causal attention counted over the unmasked half):
    6 B T (12 L C^2 + V C)  +  6 L B T (T + 1) C

    /usr/bin/python3 dev/bench/cpu.py [--rounds 4] [--steps 5] [--threads 2] [--configs 124M,6x384,quickstart]
        [--arch x86-64-v3]   (the C trainer and the peak built for that -march, e.g. the AVX2 code path;
                              default native; the trainer is left built for it until the next make)
        [--against REV]      (a third side: the C trainer of git revision REV, built the way REV's Makefile
                              builds it for the same -march, alternating with the other two; the table adds
                              this tree's speed against it, the before-and-after of a change in one run)
    /usr/bin/python3 dev/bench/cpu.py --blas-only   (the machine, its peak and PyTorch's BLAS; no training)
    /usr/bin/python3 dev/bench/cpu.py --worker L C NH V B T STEPS   (the PyTorch side, used by the above)
    /usr/bin/python3 dev/bench/cpu.py --blas-probe   (PyTorch's OpenBLAS core and sgemm, used by the above)
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build", "bench")
SYNTH = os.path.join(BUILD, "synth50257.bin")
KJV = os.path.join(ROOT, "data", "kjv", "kjv_train.bin")

# name: (L, C, NH, V, B, T, trainer model flags, data)
CONFIGS = {
    "124M": (12, 768, 12, 50257, 4, 64, ["-e", "d12", "-V", "50257", "-sl", "1024"], SYNTH),
    "6x384": (6, 384, 6, 50257, 8, 128, ["-e", "d6", "-V", "50257", "-sl", "1024"], SYNTH),
    "quickstart": (4, 256, 4, 257, 8, 256, ["-e", "d4", "-V", "257", "-sl", "256"], KJV),
    "d6kjv": (6, 384, 6, 257, 8, 256, ["-e", "d6", "-V", "257", "-sl", "256"], KJV),  # the quick start until 2026-11-25
}


def step_flops(L, C, V, B, T):
    return 6 * B * T * (12 * L * C * C + V * C) + 6 * L * B * T * (T + 1) * C


# ----------------------------------------------------------------------------------------------
# the PyTorch side: a standard eager GPT-2 (nn.Module, torch.optim.AdamW)

def worker(L, C, NH, V, B, T, steps):
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))

        def forward(self, x):
            Bx, Tx, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
            q, k, v = [t.view(Bx, Tx, NH, C // NH).transpose(1, 2) for t in (q, k, v)]
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // NH))
            att = torch.softmax(att.masked_fill(self.mask, float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(Bx, Tx, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.lnf = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    model = GPT()
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    blas = [line.split()[-1] for line in open("/proc/self/maps") if "blas" in line]
    print("blas:", sorted(set(blas)), flush=True)
    for step in range(steps):
        idx = torch.randint(0, V, (B, T + 1), generator=gen)
        x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
        t0 = time.perf_counter()
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        print(f"step {step + 1}/{steps} | loss {loss.item():.6f} | {dt * 1000:.1f} ms", flush=True)


def blas_probe():
    """Prints PyTorch's OpenBLAS (found in /proc/self/maps), its core and sgemm GFLOP/s as JSON."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line})
    core = "unknown (no libopenblas loaded)"
    if libs:
        lib = ctypes.CDLL(libs[0])
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    c = torch.mm(a, b)
    ref = torch.mm(a.double(), b.double())
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item() # a core that computes wrongly shows here
    print(json.dumps({"lib": libs[0] if libs else None, "core": core, "sgemm_gflops": 2 * n**3 / best / 1e9,
                      "err": err}))


SGEMM_TOL = 1e-4 # fp32 sums of 2048 products, relative to the largest entry: about 1e-6 when right


# ----------------------------------------------------------------------------------------------
# the driver

# Debian's torch calls the BLAS through libblas.so.3; the OpenMP build of OpenBLAS shares torch's
# OpenMP threads (the pthread build, which the alternatives system may prefer, runs its own pool
# beside them). The worker is started with this directory first on the library path.
OPENBLAS_OPENMP = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def run(cmd, env):
    """Runs cmd; returns (stdout, peak RSS in bytes)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    return out, usage.ru_maxrss * 1024


def step_times(out, steps):
    """Per-step ms from 'step i/n | ... | X ms' lines, the warm-up (first) step dropped."""
    ms = [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \|.*?\| ([0-9.]+) ms", out, re.M)]
    if len(ms) != steps:
        sys.exit(f"expected {steps} step lines, found {len(ms)}:\n{out[-3000:]}")
    return ms[1:]


def measure_peak(threads, extra_flags=(), arch="native"):
    """Best of 3 runs of dev/bench/peak_flops.c built for -march=arch (plus extra_flags)."""
    exe = os.path.join(BUILD, "peak_flops")
    subprocess.run(["gcc", "-O2", f"-march={arch}", *extra_flags, "-fopenmp",
                    os.path.join(ROOT, "dev/bench/peak_flops.c"), "-o", exe], check=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    best, line = 0.0, ""
    for _ in range(3):
        out = subprocess.run([exe], env=env, capture_output=True, text=True, check=True).stdout.strip()
        g = float(out.split()[0])
        if g > best:
            best, line = g, out
    return best, line


# OpenBLAS's cores for this CPU's widest vectors: the ones PyTorch is also timed with.
def cores_for_cpu():
    flags = cpu_info("flags").split()
    if "avx512f" in flags:
        return ["SkylakeX", "Cooperlake"]
    if "avx2" in flags:
        return ["Zen", "Haswell"] if cpu_info("vendor_id") == "AuthenticAMD" else ["Haswell"]
    return []


def cpu_info(key):
    return next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.split(":")[0].strip() == key), "")


def probe(env):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--blas-probe"], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0: # e.g. a core this OpenBLAS cannot run here
        return {"core": "?", "sgemm_gflops": 0.0, "err": float("inf"), "lib": None,
                "failed": (out.stdout + out.stderr).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_blas(t_env):
    """Probes PyTorch's OpenBLAS in the worker's environment t_env as it is (OpenBLAS's own choice, or
    the caller's OPENBLAS_CORETYPE), then with each core that matches this CPU's widest vectors, and
    keeps in t_env (the PyTorch side only) the fastest whose sgemm is right. An OpenBLAS older than
    the CPU falls back to generic kernels several times slower, and a caller may have set a core for
    narrower vectors: either way PyTorch runs at its best here. Returns the lines to print."""
    given = t_env.get("OPENBLAS_CORETYPE")
    base = dict(t_env)
    base.pop("OPENBLAS_CORETYPE", None)
    tries = [(given, dict(base, OPENBLAS_CORETYPE=given) if given else base)]
    tries += [(c, dict(base, OPENBLAS_CORETYPE=c)) for c in cores_for_cpu() if c != given]
    results = [(name, env, probe(env)) for name, env in tries]
    lines = []
    for name, _, p in results:
        how = f"OPENBLAS_CORETYPE={name} ({'the caller' if name == given else 'the bench'})" if name else \
            "OPENBLAS_CORETYPE unset (OpenBLAS's own choice)"
        if "failed" in p:
            lines.append(f"PyTorch's BLAS, {how}: the probe failed ({p['failed'][0]}): not used")
            continue
        lines.append(f"PyTorch's BLAS, {how}: core {p['core']}, sgemm 2048^3 {p['sgemm_gflops']:.1f} GFLOP/s"
                     + ("" if p["err"] < SGEMM_TOL else f", WRONG (max error {p['err']:.2g}): not used"))
    good = [r for r in results if r[2]["err"] < SGEMM_TOL] # a failed probe's err is inf
    if not good:
        sys.exit("\n".join(lines) + "\nno OpenBLAS core computes sgemm right here")
    name, env, p = max(good, key=lambda r: r[2]["sgemm_gflops"])
    t_env.clear()
    t_env.update(env)
    chosen = "OPENBLAS_CORETYPE=" + name if name else "OpenBLAS's own choice"
    lines.append(f"the PyTorch side runs with {chosen}: "
                 f"core {p['core']}, sgemm {p['sgemm_gflops']:.1f} GFLOP/s ({p['lib']})")
    return lines


def prepare(blas_only, arch):
    os.makedirs(BUILD, exist_ok=True)
    if not os.path.exists(os.path.join(OPENBLAS_OPENMP, "libblas.so.3")):
        sys.exit(f"no {OPENBLAS_OPENMP}/libblas.so.3 (apt-get install libopenblas0-openmp): without OpenBLAS "
                 "Debian's torch uses the reference BLAS and the comparison is meaningless")
    if blas_only:
        return
    subprocess.run(["make", "-s", "train_gpt2cpu", f"CPU_ARCH={arch}"], cwd=ROOT, check=True)
    if not os.path.exists(SYNTH):
        subprocess.run([sys.executable, os.path.join(ROOT, "dev/data/tiny_shard.py"), SYNTH, "--ntok", "300000",
                        "--vocab", "50257", "--seed", "1"], check=True)
    if not os.path.exists(KJV):
        subprocess.run(["bash", os.path.join(ROOT, "dev/data/kjv.sh")], cwd=ROOT, check=True)


def build_revision(rev, arch):
    """REV's train_gpt2cpu, built from `git archive REV` in build/bench/rev_REV for -march=arch."""
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout.strip()
    d = os.path.join(BUILD, f"rev_{sha}")
    if not os.path.exists(os.path.join(d, "Makefile")):
        os.makedirs(d, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
    subprocess.run(["make", "-s", "train_gpt2cpu", f"CPU_ARCH={arch}"], cwd=d, check=True)
    return sha, os.path.join(d, "train_gpt2cpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="alternating runs per side and config")
    ap.add_argument("--steps", type=int, default=5, help="steps per run, the first one untimed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="124M,6x384,quickstart")
    ap.add_argument("--arch", default="native", help="-march of the C trainer and the peak (x86-64-v3: AVX2)")
    ap.add_argument("--blas-only", action="store_true", help="the machine, its peak and PyTorch's BLAS only")
    ap.add_argument("--against", metavar="REV", help="also time the C trainer of git revision REV")
    ap.add_argument("--worker", nargs=7, type=int, metavar=("L", "C", "NH", "V", "B", "T", "STEPS"))
    ap.add_argument("--blas-probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.blas_probe:
        blas_probe()
        return
    prepare(args.blas_only, args.arch)
    rev, rev_trainer = build_revision(args.against, args.arch) if args.against and not args.blas_only else (None, None)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    cpu = cpu_info("model name") or "?"
    print(f"{time.strftime('%Y-%m-%d %H:%M %Z')} | {cpu} | {os.cpu_count()} CPUs | {args.threads} threads | "
          f"{args.rounds} alternating runs x {args.steps - 1} timed steps per side | C built with -march={args.arch}")
    peak, peak_line = measure_peak(args.threads, arch=args.arch)
    print(f"peak: {peak_line}")
    if "512-bit" in peak_line:
        print(f"for reference, 256-bit (AVX2) peak: {measure_peak(args.threads, ['-mno-avx512f'])[1]}")
    t_env = dict(env, LD_LIBRARY_PATH=OPENBLAS_OPENMP + ":" + env.get("LD_LIBRARY_PATH", ""))
    blas_lines = check_blas(t_env)
    print("\n".join(blas_lines))
    if args.blas_only:
        return
    print("FLOPs per step = 6 B T (12 L C^2 + V C) + 6 L B T (T + 1) C")
    rows = []
    tile_line = "" # the trainer's threads line: its matmul tile and vector width
    B_T = {n: CONFIGS[n][4] * CONFIGS[n][5] for n in CONFIGS}
    for name in args.configs.split(","):
        L, C, NH, V, B, T, flags, data = CONFIGS[name]
        c_cmd = ["./train_gpt2cpu", "-i", data, "-j", "", "-b", str(B), "-t", str(T), "-x", str(args.steps),
                 "-v", "0", "-s", "0", "-c", "0.1"] + flags
        t_cmd = [sys.executable, os.path.abspath(__file__), "--worker", *map(str, (L, C, NH, V, B, T, args.steps))]
        sides = [("C", c_cmd, env)] + ([(f"C@{rev}", [rev_trainer] + c_cmd[1:], env)] if rev else []) + \
                [("PyTorch", t_cmd, t_env)]
        res = {side: ([], []) for side, _, _ in sides}
        for r in range(args.rounds):
            for side, cmd, side_env in sides:
                out, rss = run(cmd, side_env)
                if side == "PyTorch" and "openblas-openmp/libopenblas" not in out:
                    sys.exit("the PyTorch worker did not load the OpenMP OpenBLAS:\n" + out[:2000])
                res[side][0].extend(step_times(out, args.steps))
                tile = re.search(r"^threads: .*$", out, re.M) if side == "C" and not tile_line else None
                if tile:
                    tile_line = "C trainer: " + tile.group(0)
                    print(tile_line)
                res[side][1].append(rss)
                print(f"  {name} round {r + 1} {side}: median {statistics.median(res[side][0][-(args.steps - 1):]):.1f} ms",
                      flush=True)
        again, again_line = measure_peak(args.threads, arch=args.arch) # the machine may be shared: keep the best
        if again > peak:
            peak, peak_line = again, again_line
        flops = step_flops(L, C, V, B, T)
        for side, _, _ in sides:
            ms, rss = res[side]
            med = statistics.median(ms)
            rows.append((name, side, med, min(ms), max(ms), B * T / med * 1000, flops / med / 1e6,
                         flops / min(ms) / 1e6, max(rss) / 2**20, statistics.median(res["PyTorch"][0]) / med,
                         min(res["PyTorch"][0]) / min(ms)))
    print(f"\npeak: {peak_line}, -march={args.arch} (the best of all measurements; % of peak uses it)")
    print("\n".join(blas_lines))
    print(tile_line)
    print("tokens/s, GFLOP/s and speed vs PyTorch from the median step; in brackets from the fastest step")
    print(f"\n| config | side | ms/step median (min-max) | tokens/s | GFLOP/s | % of peak | peak RSS MiB | speed vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for name, side, med, lo, hi, tps, gf, gf_best, rss, ratio, ratio_best in rows:
        print(f"| {name} | {side} | {med:.0f} ({lo:.0f}-{hi:.0f}) | {tps:.0f} ({B_T[name] / lo * 1000:.0f}) | "
              f"{gf:.1f} ({gf_best:.1f}) | {100 * gf / peak:.0f}% ({100 * gf_best / peak:.0f}%) | {rss:.0f} | "
              f"{ratio:.2f}x ({ratio_best:.2f}x) |")
    if rev:
        print(f"\nthis tree's C trainer against C@{rev}'s, same -march, same run (median step; fastest step):")
        for name in args.configs.split(","):
            now = {side: (med, lo) for n, side, med, lo, *_ in rows if n == name}
            (m0, l0), (m1, l1) = now["C"], now[f"C@{rev}"]
            print(f"  {name}: {m1 / m0:.3f}x ({l1 / l0:.3f}x) speed, {100 * (m0 / m1 - 1):+.1f}% step time")
    print(f"\nFLOPs per step: " +
          ", ".join(f"{n} {step_flops(*CONFIGS[n][0:2], *CONFIGS[n][3:6]) / 1e9:.1f} G" for n in args.configs.split(",")))


if __name__ == "__main__":
    main()
