"""Distributed checks of train_gpt2cpu (run by dev/tests/35_distributed.sh):

  equivalence  the same global batch as 1 rank x grad_accum 4, 2 x 2, 4 x 1 and a 2 x 2 mesh,
               with ZeRO stages 0, 1, 2: losses and final weights equal the 1-rank stage-0 run's
  accounting   printed memory and communication per rank equal closed forms computed here from
               the model shape, and the bytes the ring collectives actually sent
  resume       a 2-rank stage-1 run stopped at step 5 and resumed gives the uninterrupted losses
  mesh84       the 8 x 4 mesh (32 ranks) trained: ZeRO 1 and 2 against 1 rank, -ls against 8 x 1
  failures     a world that does not fit the mesh, a rank whose data file is missing: the job
               stops within seconds with a message naming the rank
Each subcommand exits non-zero on any mismatch.
"""
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_golden  # noqa: E402

TRAINER = os.environ.get("TRAINER", "./train_gpt2cpu")
DATA = "data/kjv/kjv_val.bin"
# d2 byte-level model: L 2, C 128, NH 2, V 257 (Vp 384), T_max 64
MODEL = ["-e", "d2", "-V", "257", "-sl", "64"]
B, T, GLOBAL_ROWS, STEPS = 2, 32, 4, 10
COMMON = MODEL + ["-i", DATA, "-j", "", "-b", str(B), "-t", str(T), "-d", str(B * T * GLOBAL_ROWS),
                  "-x", str(STEPS), "-l", "1e-3", "-c", "0.1", "-s", "0", "-sf", "1"]
LOSS_TOL = 1e-4    # absolute, per step (the bound)
WEIGHT_TOL = 2e-5  # absolute, every parameter after 10 steps (fp32 summation-order differences)
L, C, V, VP, TMAX = 2, 128, 257, 384, 64


def mpirun(n, args, timeout=120):
    """Runs TRAINER on n ranks; a good run of a real trainer goes into the goldens' ledger
    (dev/test_golden.py)."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n),
           "-x", "OMP_NUM_THREADS=1", TRAINER] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    test_golden.note(TRAINER, n, args, r.returncode)
    return r


def run_ok(n, args, out_dir, timeout=120):
    shutil.rmtree(out_dir, ignore_errors=True)
    r = mpirun(n, args + ["-o", out_dir], timeout)
    if r.returncode != 0:
        sys.exit(f"run failed ({n} ranks, {' '.join(args)}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def train_losses(log_path):
    out = {}
    for line in open(log_path):
        m = re.match(r"s:(\d+) trl:(\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def weights(path):
    return np.fromfile(path, dtype=np.float32, offset=1024)


def equivalence():
    base_dir = "build/dist/base"
    run_ok(1, COMMON + ["-z", "0"], base_dir)
    base_losses = train_losses(base_dir + "/main.log")
    base_w = weights(base_dir + "/model_final.bin")
    assert len(base_losses) == STEPS, base_losses
    failures = 0
    for ranks, shard in [(1, 1), (2, 2), (4, 4), (4, 2)]:
        for stage in (0, 1, 2):
            if ranks == 1 and stage == 0:
                continue
            d = f"build/dist/r{ranks}_s{shard}_z{stage}"
            run_ok(ranks, COMMON + ["-z", str(stage), "-ds", str(shard)], d)
            losses = train_losses(d + "/main.log")
            loss_err = max(abs(losses[s] - base_losses[s]) for s in base_losses)
            w_err = float(np.max(np.abs(weights(d + "/model_final.bin") - base_w)))
            ok = loss_err <= LOSS_TOL and w_err <= WEIGHT_TOL and len(losses) == STEPS
            failures += not ok
            report_case(ok, f"{ranks} ranks", ranks, shard, stage, loss_err, w_err, (LOSS_TOL, WEIGHT_TOL))
    print(f"baseline losses: {[round(base_losses[s], 6) for s in sorted(base_losses)]}")
    sys.exit(1 if failures else 0)


# The 8 x 4 mesh (32 ranks, -ds 4): B 1, T 16, 32 rows per step, 3 steps
MESH84 = MODEL + ["-i", DATA, "-j", "", "-b", "1", "-t", "16", "-d", "512", "-l", "1e-3", "-c", "0.1", "-s", "0",
                  "-sf", "1"]


def errors_against(d, base_losses, base_w):
    """(max loss error, max weight error) of run d against a baseline's losses and weights."""
    losses = train_losses(d + "/main.log")
    if sorted(losses) != sorted(base_losses):
        return float("inf"), float("inf")
    return (max(abs(losses[s] - base_losses[s]) for s in base_losses),
            float(np.max(np.abs(weights(d + "/model_final.bin") - base_w))))


def mesh84():
    """The 8 x 4 mesh trained: ZeRO 1 and 2 on 32 ranks against 1 rank x grad_accum 32 (the same
    global batch), and -ls 2 (8 replicas of 4 shards, ZeRO 1) against 8 x 1 (a replica's data and
    model do not depend on -ds)."""
    run_ok(1, MESH84 + ["-x", "3", "-z", "0"], "build/dist/m84_base")
    base_l, base_w = train_losses("build/dist/m84_base/main.log"), weights("build/dist/m84_base/model_final.bin")
    failures = 0
    for stage in (1, 2):
        d = f"build/dist/m84_z{stage}"
        run_ok(32, MESH84 + ["-x", "3", "-z", str(stage), "-ds", "4"], d)
        le, we = errors_against(d, base_l, base_w)
        ok = le <= LOSS_TOL and we <= WEIGHT_TOL
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  32 ranks, mesh 8x4, ZeRO {stage}: max loss error {le:.2e} (tol "
              f"{LOSS_TOL:.0e}), max weight error {we:.2e} (tol {WEIGHT_TOL:.0e}) against 1 rank x grad_accum 32")
    outer = ["-x", "4", "-z", "1", "-ls", "2", "-ol", "0.7", "-om", "0.9"]
    run_ok(8, MESH84 + outer + ["-ds", "1", "-b", "4"], "build/dist/m84_ls_8x1")
    run_ok(32, MESH84 + outer + ["-ds", "4"], "build/dist/m84_ls_8x4")
    le, we = errors_against("build/dist/m84_ls_8x4", train_losses("build/dist/m84_ls_8x1/main.log"),
                            weights("build/dist/m84_ls_8x1/model_final.bin"))
    ok = le <= 1e-5 and we <= 1e-5
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  -ls 2 -ol 0.7 -om 0.9, ZeRO 1: mesh 8x4 (B 1) against 8x1 (B 4): max loss error "
          f"{le:.2e}, max weight error {we:.2e} (tol 1e-05)")
    sys.exit(1 if failures else 0)


def report_case(ok, who, ranks, shard, stage, loss_err, w_err, tol):
    """One line of an equivalence test: the layout, its errors against the baseline, the tolerances."""
    print(f"{'ok' if ok else 'FAIL'}  {who} x grad_accum {GLOBAL_ROWS // ranks}, mesh {ranks // shard}x{shard}, "
          f"ZeRO {stage}: max loss error {loss_err:.2e} (tol {tol[0]:.0e}), max weight error {w_err:.2e} "
          f"(tol {tol[1]:.0e})")


# ---------------------------------------------------------------------------------------------
# closed forms, written from the model shape independently of llmc/accounting.h

def unit_sizes():
    layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
    return layer * L + [VP * C, TMAX * C, C, C]


def expected(world, shard, stage, ga, gb=4, pb=4, master=False, slots=1):
    """Printed memory and communication per rank. gb, pb: bytes per gradient / parameter element
    on the wire and in memory (2 for bf16); master: fp32 master copies of the owned parameters;
    slots: layers of full gradients stage 2 keeps (the GPU trainer double-buffers: 2)."""
    units = unit_sizes()
    n = sum(units)
    rep = world // shard
    slices = [math.ceil(u / shard) for u in units]
    shard_elems = sum(slices)
    ar = lambda count, g: 2 * (g - 1) * math.ceil(count / g)
    comm = ar(1, world) * 4
    if stage == 0:
        comm += ar(n, world) * gb
    else:
        rs = sum((shard - 1) * s for s in slices)
        comm += rs * gb * (1 if stage == 1 else ga) + ar(shard_elems, rep) * 4 + rs * pb + ar(1, shard) * 4
    owned = n if stage == 0 else shard_elems
    layer_elems = sum(units[:12])
    grads = {0: n * gb, 1: n * gb + shard_elems * 4,
             2: (VP * C + TMAX * C + 2 * C + slots * layer_elems) * gb + shard_elems * 4}[stage]
    return {"params": n * pb + (owned * 4 if master else 0), "grads": grads, "optimizer": 2 * owned * 4, "comm": comm}


def printed(stdout):
    m = re.search(r"memory per rank: params (\d+) grads (\d+) optimizer (\d+) activations (\d+) bytes", stdout)
    c = re.search(r"communication per step: (\d+) bytes sent per rank", stdout)
    meas = re.search(r"communication measured: (\d+) bytes", stdout)
    return {"params": int(m.group(1)), "grads": int(m.group(2)), "optimizer": int(m.group(3)),
            "comm": int(c.group(1)), "measured": int(meas.group(1))}


def accounting():
    failures = 0
    seen = {}
    cases = [(1, 1, 0, 1), (2, 2, 0, 2), (4, 4, 0, 1), (4, 2, 0, 1),
             (2, 2, 1, 1), (2, 2, 1, 8), (2, 2, 2, 1), (2, 2, 2, 8),
             (4, 4, 1, 1), (4, 4, 2, 2), (4, 2, 1, 1), (4, 2, 2, 2), (3, 3, 1, 1), (3, 3, 2, 2)]
    for world, shard, stage, ga in cases:
        args = MODEL + ["-i", DATA, "-j", "", "-b", "1", "-t", "16", "-d", str(16 * world * ga), "-x", "2",
                        "-s", "0", "-z", str(stage), "-ds", str(shard)]
        r = mpirun(world, args)
        if r.returncode != 0:
            sys.exit(f"run failed: {r.stderr[-2000:]}")
        got, want = printed(r.stdout), expected(world, shard, stage, ga)
        seen[(world, shard, stage, ga)] = got
        bad = [k for k in want if got[k] != want[k]] + (["measured"] if got["measured"] != got["comm"] else [])
        failures += bool(bad)
        print(f"{'FAIL' if bad else 'ok'}  world {world} shard {shard} ZeRO {stage} grad_accum {ga}: "
              f"params {got['params']} grads {got['grads']} optimizer {got['optimizer']} "
              f"comm {got['comm']} measured {got['measured']}" + (f"  mismatch: {bad} want {want}" if bad else ""))
    # stage 1 sends the same for grad_accum 1 and 8; stage 2's reduce-scatter part grows with it
    s1a, s1b = seen[(2, 2, 1, 1)]["comm"], seen[(2, 2, 1, 8)]["comm"]
    s2a, s2b = seen[(2, 2, 2, 1)]["comm"], seen[(2, 2, 2, 8)]["comm"]
    rs = sum(math.ceil(u / 2) for u in unit_sizes()) * 4
    checks = [("stage 1 bytes independent of grad_accum", s1a == s1b),
              ("stage 2 grows by 7 reduce-scatters from grad_accum 1 to 8", s2b - s2a == 7 * rs),
              ("stage 1/2 optimizer = stage 0 / 2 up to padding",
               abs(seen[(2, 2, 1, 1)]["optimizer"] * 2 - seen[(2, 2, 0, 2)]["optimizer"]) <= 8 * len(unit_sizes())),
              ("stage 2 optimizer = stage 0 / 4 up to padding (4 shards)",
               abs(seen[(4, 4, 2, 2)]["optimizer"] * 4 - seen[(4, 4, 0, 1)]["optimizer"]) <= 32 * len(unit_sizes())),
              ("stage 2 grads below stage 1", seen[(2, 2, 2, 1)]["grads"] < seen[(2, 2, 1, 1)]["grads"])]
    for name, ok in checks:
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  {name}")
    sys.exit(1 if failures else 0)


def resume():
    args = COMMON + ["-z", "1", "-n", "5"]
    run_ok(2, args, "build/dist/resume_full")
    os.makedirs("build/dist/resume_part", exist_ok=True)
    shutil.rmtree("build/dist/resume_part")
    os.makedirs("build/dist/resume_part")
    for f in os.listdir("build/dist/resume_full"):
        if "_00000005" in f:
            shutil.copy(os.path.join("build/dist/resume_full", f), "build/dist/resume_part")
    r = mpirun(2, args + ["-y", "1", "-o", "build/dist/resume_part"])
    if r.returncode != 0 or "resumed from step 5" not in r.stdout:
        sys.exit(f"resume failed: {r.stdout[-1000:]} {r.stderr[-1000:]}")
    full = train_losses("build/dist/resume_full/main.log")
    part = train_losses("build/dist/resume_part/main.log")
    print("uninterrupted:", [full[s] for s in range(6, 11)])
    print("resumed:      ", [part.get(s) for s in range(6, 11)])
    same = sorted(part) == list(range(6, 11)) and all(part[s] == full[s] for s in range(6, 11))
    w_same = np.array_equal(weights("build/dist/resume_full/model_final.bin"),
                            weights("build/dist/resume_part/model_final.bin"))
    print(f"losses identical: {same}, final weights identical: {w_same}")
    sys.exit(0 if same and w_same else 1)


def failures():
    bad = 0
    start = time.time()
    r = mpirun(3, COMMON + ["-d", "0", "-ds", "2"], timeout=60)
    ok = r.returncode != 0 and re.search(r"error: rank \d: -ds 2: world size 3 is not a multiple", r.stderr)
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}  world 3 with -ds 2 refused in {time.time() - start:.1f} s: "
          f"{r.stderr.strip().splitlines()[0] if r.stderr.strip() else '(no message)'}")
    start = time.time()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1",
           "-np", "1", TRAINER] + COMMON + ["-x", "1000", ":", "-np", "1", TRAINER] + COMMON + \
          ["-x", "1000", "-i", "build/dist/unreadable_*.bin"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    took = time.time() - start
    ok = r.returncode != 0 and "error: rank 1: -i build/dist/unreadable_*.bin: no data files match" in r.stderr \
        and took < 30
    bad += not ok
    print(f"{'ok' if ok else 'FAIL'}  rank 1 without data stops the job in {took:.1f} s (limit 30): "
          f"{[l for l in r.stderr.splitlines() if l.startswith('error')][:1]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"equivalence": equivalence, "accounting": accounting, "resume": resume, "failures": failures,
     "mesh84": mesh84}[sys.argv[1]]()
