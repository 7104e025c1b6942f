"""Multi-GPU checks of train_gpt2.cu through the CUDA emulator (run by dev/tests/55_multi_gpu.sh).
Each emulated GPU is an MPI rank; the emulated NCCL runs on its own sockets (no MPI underneath).
Reuses dev/test_distributed.py's runs, parsers and independent closed forms, with the emulated
trainer as TRAINER.

  equivalence fp32|bf16  1, 2 and 4 GPUs, ZeRO 0, 1, 2, and a 2 x 2 mesh, the same global batch:
                         losses and final weights against the CPU trainer (1 rank), 10 steps
  stage2_slots           ZeRO 2 on 4 layers, where two layers share each gradient slot, vs the CPU
  resume                 val losses on 2 GPUs equal the CPU trainer's; a ZeRO-1 checkpoint (one
                         optimizer shard per rank) resumed repeats the uninterrupted steps
  accounting             printed memory and communication per rank equal the closed forms (bf16
                         sizes in BF16 builds), and the bytes the emulated NCCL sent in a step;
                         dev/gpu_memory.cu reports the trainer's memory line
  startup                -pi mpi, fs and tcp (127.0.0.1) bring up 2 ranks that train 3 steps with
                         the same losses; a rank whose rendezvous never comes stops with its rank
  mesh84                 the 8 x 4 mesh (32 GPUs): ZeRO 1 against the CPU trainer on 1 rank, ZeRO 2 -ls 2
                         -rq int8 against the CPU trainer on the same 32 ranks
  failures               a rank without data stops the whole job within seconds, naming the rank
  mutant                 a copy of the trainer whose stage-2 micro-step gradients are not cleared
                         after their reduce-scatter must fail the equivalence
  diloco                 -ls 4 (outer Nesterov syncs, llmc/outer_sync.h) on a 2 x 2 mesh ZeRO 1 and
                         2 x 1 ZeRO 0: losses and final weights equal the CPU trainer's (same ranks,
                         same flags) within 1e-4, and the emulated NCCL's bytes of a step without
                         and with an outer sync equal the closed forms; BF16 on 2 x 1 ZeRO 1 within
                         the BF16 loss tolerance; a ZeRO-1 checkpoint in the middle of a window
                         resumed repeats the uninterrupted steps and final weights bit for bit
  diloco_wire            -ls with -rq int8 (error feedback), -lf 2, -lf 2 -lo 1 -rq int8, -lo 2 and -lf 2
                         -lo 2 -rq int8 (exchanges in two chunks) on a 2 x 2 mesh: losses over 3
                         windows and final weights equal the CPU trainer's (same ranks, same flags)
                         within 1e-4, the replica bytes the start-up line prints equal to the CPU's
                         and to those the emulated NCCL sent
  diloco_wire_replicas   -rq int8 on 4 x 1 (ZeRO 1) and 3 x 1 (ZeRO 0, uneven slices): losses and final
                         weights equal the CPU trainer's within 1e-4, the replica bytes line equal to
                         the CPU's and to those the emulated NCCL sent
  diloco_wire_resume M   a checkpoint inside a -ls 3 -lf 2 -lo 1 -rq int8 window (2 x 1, ZeRO 1) with
                         an exchange in flight resumed repeats the uninterrupted steps and final
                         weights bit for bit (residuals, held sums, snapshots saved per rank); -rq int4 on 2 x 1 against the CPU trainer, and M (a copy of the
                         trainer that never adds the residual) must miss the CPU's losses
  sync_wire              -ls 0 -rq int8 (ZeRO 1), -ls 0 -rq bf16 -rk 0.05 -rqs 1 (ZeRO 0) and -ls 3 -rq
                         int4 -rk 0.05 (ZeRO 2) on 2 x 1 against the CPU trainer (losses, weights, the
                         replica bytes line); a -ls 0 -rq int8 checkpoint resumed bit for bit
Each subcommand exits non-zero on any mismatch.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_distributed as td  # noqa: E402

FP32 = "build/gpu/train_gpt2emu_fp32"
BF16 = "build/gpu/train_gpt2emu_bf16"
MEMORY = "build/gpu/gpu_memory_bf16"
OUT = "build/multi_gpu"
# FP32: the bound for losses and weights. BF16: bf16 parameters, activations and
# gradients on the wire (ring sums rounded to bf16 at each hop) against the fp32 CPU trainer;
# measured margins in docs/distributed.md ("Tests and what has run where").
TOL = {"fp32": (1e-4, 1e-4), "bf16": (3e-3, 2e-2)}
# FP32: (ranks, dp_shard, ZeRO stage): one GPU; every stage on two GPUs; stage 2 on four in one shard
# group; stages 1 and 2 on the 2 x 2 mesh (ZeRO 0 on more than two is their all-reduce again)
FP32_CASES = [(1, 1, 0), (2, 2, 0), (2, 2, 1), (2, 2, 2), (4, 4, 2), (4, 2, 1), (4, 2, 2)]
# BF16 (slower to no purpose): one GPU, and stages 1 and 2 once each, on two GPUs and on the mesh
BF16_CASES = [(1, 1, 0), (2, 2, 1), (4, 2, 2)]


def cpu_baseline():
    td.TRAINER = "./train_gpt2cpu"
    d = OUT + "/cpu_base"
    td.run_ok(1, td.COMMON + ["-z", "0"], d)
    return td.train_losses(d + "/main.log"), td.weights(d + "/model_final.bin")


def compare(trainer, tag, ranks, shard, stage, base_losses, base_w, tol):
    td.TRAINER = trainer
    d = f"{OUT}/{tag}_r{ranks}_s{shard}_z{stage}"
    td.run_ok(ranks, td.COMMON + ["-z", str(stage), "-ds", str(shard)], d)
    losses = td.train_losses(d + "/main.log")
    w = model_weights(d + "/model_final.bin")
    if len(losses) != td.STEPS:
        return False, float("inf"), float("inf")
    loss_err = max(abs(losses[s] - base_losses[s]) for s in base_losses)
    w_err = float(np.max(np.abs(w - base_w)))
    return loss_err <= tol[0] and w_err <= tol[1], loss_err, w_err


def model_weights(path):
    """The parameters of a model file as fp32: version 3 holds fp32, version 5 bf16."""
    version = int(np.fromfile(path, dtype=np.int32, count=2)[1])
    if version == 3:
        return td.weights(path)
    raw = np.fromfile(path, dtype=np.uint16, offset=1024)
    return (raw.astype(np.uint32) << 16).view(np.float32)


def equivalence(prec):
    base_losses, base_w = cpu_baseline()
    trainer = FP32 if prec == "fp32" else BF16
    tol = TOL[prec]
    failures = 0
    cases = FP32_CASES if prec == "fp32" else BF16_CASES
    # one-GPU runs (an emulated GPU is one thread) run side by side, one per core; the others in turn
    def run(case):
        return compare(trainer, prec, *case, base_losses, base_w, tol)
    one_gpu = [c for c in cases if c[0] == 1]
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        results = dict(zip(one_gpu, pool.map(run, one_gpu)))
    results.update((c, run(c)) for c in cases if c[0] != 1)
    for ranks, shard, stage in cases:
        ok, le, we = results[(ranks, shard, stage)]
        failures += not ok
        td.report_case(ok, f"{prec} {ranks} GPUs", ranks, shard, stage, le, we, tol)
    print(f"CPU losses: {[round(base_losses[s], 6) for s in sorted(base_losses)]}")
    sys.exit(1 if failures else 0)


def stage2_slots():
    """ZeRO 2 on a 4-layer model: the GPU keeps two layer slots of gradients, so layers 3 and 1
    (and 2 and 0) share one; with 2 micro-steps per step against the CPU trainer."""
    args = ["-e", "d4", "-V", "257", "-sl", "64", "-i", td.DATA, "-j", "", "-b", "1", "-t", "16", "-d", "64",
            "-x", "3", "-l", "1e-3", "-c", "0.1", "-s", "0", "-sf", "1"]
    td.TRAINER = "./train_gpt2cpu"
    td.run_ok(1, args, OUT + "/slots_cpu")
    td.TRAINER = FP32
    td.run_ok(2, args + ["-z", "2"], OUT + "/slots_gpu")
    cpu, gpu = td.train_losses(OUT + "/slots_cpu/main.log"), td.train_losses(OUT + "/slots_gpu/main.log")
    le = max(abs(cpu[s] - gpu[s]) for s in cpu) if sorted(gpu) == sorted(cpu) == [1, 2, 3] else float("inf")
    we = float(np.max(np.abs(model_weights(OUT + "/slots_cpu/model_final.bin") -
                             model_weights(OUT + "/slots_gpu/model_final.bin"))))
    ok = le <= TOL["fp32"][0] and we <= TOL["fp32"][1]
    print(f"{'ok' if ok else 'FAIL'}  d4, 2 GPUs, ZeRO 2, grad_accum 2: max loss error {le:.2e}, "
          f"max weight error {we:.2e} (tol {TOL['fp32'][0]:.0e}, {TOL['fp32'][1]:.0e})")
    sys.exit(0 if ok else 1)


def mesh84():
    """The 8 x 4 mesh (32 emulated GPUs, -ds 4): ZeRO 1 against the CPU trainer on 1 rank (the same
    global batch, 3 steps), and ZeRO 2 with -ls 2 -rq int8 against the CPU trainer on the same 32
    ranks and flags (4 steps)."""
    td.TRAINER = "./train_gpt2cpu"
    td.run_ok(1, td.MESH84 + ["-x", "3", "-z", "0"], OUT + "/m84_cpu")
    base_l, base_w = td.train_losses(OUT + "/m84_cpu/main.log"), td.weights(OUT + "/m84_cpu/model_final.bin")
    outer = ["-x", "4", "-z", "2", "-ds", "4", "-ls", "2", "-ol", "0.7", "-om", "0.9", "-rq", "int8"]
    td.run_ok(32, td.MESH84 + outer, OUT + "/m84_ls_cpu")
    td.TRAINER = FP32
    td.run_ok(32, td.MESH84 + ["-x", "3", "-z", "1", "-ds", "4"], OUT + "/m84_z1_gpu", timeout=600)
    td.run_ok(32, td.MESH84 + outer, OUT + "/m84_ls_gpu", timeout=600)
    failures = 0
    for d, (bl, bw), what in [("m84_z1_gpu", (base_l, base_w), "ZeRO 1 against the CPU trainer on 1 rank"),
                              ("m84_ls_gpu", (td.train_losses(OUT + "/m84_ls_cpu/main.log"),
                                              td.weights(OUT + "/m84_ls_cpu/model_final.bin")),
                               "ZeRO 2 -ls 2 -rq int8 against the CPU trainer on the same ranks and flags")]:
        le, we = td.errors_against(f"{OUT}/{d}", bl, bw)
        ok = le <= TOL["fp32"][0] and we <= TOL["fp32"][1]
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  fp32, 32 GPUs, mesh 8x4, {what}: max loss error {le:.2e}, max weight error "
              f"{we:.2e} (tol {TOL['fp32'][0]:.0e})")
    sys.exit(1 if failures else 0)


def val_losses(log_path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^s:(\d+) tel:(\S+)", open(log_path).read(), re.M)}


def resume():
    """2 GPUs, ZeRO 1, with validation: the val losses equal the CPU trainer's (2 ranks) within
    1e-4, and a run checkpointed at step 2 (every rank its optimizer shard) and resumed repeats
    the uninterrupted steps 3-4 exactly."""
    args = td.MODEL + ["-i", td.DATA, "-j", td.DATA, "-v", "2", "-m", "2", "-b", "2", "-t", "16", "-d", "128",
                       "-x", "4", "-l", "1e-3", "-s", "0", "-z", "1", "-n", "2"]
    td.TRAINER = "./train_gpt2cpu"
    td.run_ok(2, args, OUT + "/val_cpu")
    td.TRAINER = FP32
    td.run_ok(2, args, OUT + "/resume_full")
    part = OUT + "/resume_part"
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    for f in os.listdir(OUT + "/resume_full"):
        if "_00000002" in f:
            shutil.copy(os.path.join(OUT + "/resume_full", f), part)
    r = td.mpirun(2, args + ["-y", "1", "-o", part])
    cpu_val, gpu_val = val_losses(OUT + "/val_cpu/main.log"), val_losses(OUT + "/resume_full/main.log")
    full, resumed = td.train_losses(OUT + "/resume_full/main.log"), td.train_losses(part + "/main.log")
    val_err = max(abs(cpu_val[s] - gpu_val[s]) for s in cpu_val) if sorted(cpu_val) == sorted(gpu_val) == [0, 2, 4] \
        else float("inf")
    same = r.returncode == 0 and "resumed from step 2" in r.stdout and sorted(resumed) == [3, 4] and \
        all(resumed[s] == full[s] for s in (3, 4))
    print(f"{'ok' if val_err <= 1e-4 else 'FAIL'}  val losses GPU {gpu_val} CPU {cpu_val}: max error {val_err:.2e} (tol 1e-04)")
    print(f"{'ok' if same else 'FAIL'}  resumed at step 2: {resumed}, uninterrupted {full} {r.stderr[-500:]}")
    sys.exit(0 if val_err <= 1e-4 and same else 1)


def accounting():
    failures = 0
    cases = [("fp32", 2, 2, 0, 1), ("fp32", 2, 2, 1, 2), ("fp32", 2, 2, 2, 2), ("fp32", 4, 2, 1, 1),
             ("fp32", 4, 2, 2, 2), ("fp32", 3, 3, 2, 1), ("bf16", 2, 2, 0, 1), ("bf16", 2, 2, 2, 2),
             ("bf16", 4, 2, 1, 2), ("bf16", 4, 4, 2, 1)]
    for prec, world, shard, stage, ga in cases:
        td.TRAINER = FP32 if prec == "fp32" else BF16
        args = td.MODEL + ["-i", td.DATA, "-j", "", "-b", "1", "-t", "16", "-d", str(16 * world * ga), "-x", "2",
                           "-s", "0", "-z", str(stage), "-ds", str(shard)]
        r = td.mpirun(world, args)
        if r.returncode != 0:
            sys.exit(f"run failed: {r.stderr[-2000:]}")
        got = td.printed(r.stdout)
        size = 4 if prec == "fp32" else 2
        want = td.expected(world, shard, stage, ga, gb=size, pb=size, master=prec == "bf16", slots=2)
        bad = [k for k in want if got[k] != want[k]] + (["measured"] if got["measured"] != got["comm"] else [])
        if prec == "bf16":
            # the memory report for large shapes (dev/gpu_memory.cu) must say what the trainer says
            helper = subprocess.run([MEMORY, "d2", "257", "64", "1", "16", str(world), str(shard), str(stage), "1",
                                     "1"], capture_output=True, text=True).stdout
            line = re.compile(r"memory per rank: .* bytes")
            if line.search(helper) is None or line.search(helper).group(0) != line.search(r.stdout).group(0):
                bad.append("gpu_memory report")
        failures += bool(bad)
        print(f"{'FAIL' if bad else 'ok'}  {prec} world {world} shard {shard} ZeRO {stage} grad_accum {ga}: "
              f"params {got['params']} grads {got['grads']} optimizer {got['optimizer']} "
              f"comm {got['comm']} measured {got['measured']}" + (f"  mismatch: {bad} want {want}" if bad else ""))
    sys.exit(1 if failures else 0)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def startup():
    td.TRAINER = FP32
    args = td.COMMON[:]
    args[args.index("-x") + 1] = "3"
    fs_dir = OUT + "/fs_rendezvous"
    shutil.rmtree(fs_dir, ignore_errors=True)
    os.makedirs(fs_dir)
    port = free_port()
    methods = {"mpi": ["-pi", "mpi"], "fs": ["-pi", "fs", "-pf", fs_dir],
               "tcp": ["-pi", "tcp", "-ps", "127.0.0.1", "-pp", str(port)]}
    failures = 0
    logs = {}
    for name, extra in methods.items():
        out = td.run_ok(2, args + extra, f"{OUT}/startup_{name}")
        logs[name] = td.train_losses(f"{OUT}/startup_{name}/main.log")
        line = re.search(r"start-up: .*", out).group(0)
        ok = f"-pi {name}" in line and sorted(logs[name]) == [1, 2, 3] and logs[name] == logs["mpi"]
        if name == "fs":
            ok = ok and os.listdir(fs_dir) == []
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  {name}: 2 ranks, 3 steps, {line}; losses {[logs[name][s] for s in sorted(logs[name])]}")
    # a rank whose rank 0 never shows up gives up after TRAIN_GPT2_TIMEOUT seconds, naming itself
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", TRAIN_GPT2_TIMEOUT="2")
    for name, extra, msg in [("tcp", ["-pi", "tcp", "-ps", "127.0.0.1", "-pp", str(free_port())],
                              "rank 0 did not answer within 2 s"),
                             ("fs", ["-pi", "fs", "-pf", fs_dir], "no NCCL id from rank 0")]:
        start = time.time()
        r = subprocess.run([FP32] + args + extra, capture_output=True, text=True, timeout=60, env=env)
        took = time.time() - start
        ok = r.returncode != 0 and re.search(r"error: rank 1: -pi " + name + ".*" + msg, r.stderr) and took < 20
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  {name} without rank 0 stops in {took:.1f} s: {r.stderr.strip()[:200]}")
    sys.exit(1 if failures else 0)


def failures():
    start = time.time()
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1",
           "-np", "1", FP32] + td.COMMON + ["-x", "1000", ":", "-np", "1", FP32] + td.COMMON + \
          ["-x", "1000", "-i", OUT + "/unreadable_*.bin"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    took = time.time() - start
    ok = r.returncode != 0 and f"error: rank 1: -i {OUT}/unreadable_*.bin: no data files match" in r.stderr \
        and took < 60
    print(f"{'ok' if ok else 'FAIL'}  rank 1 without data stops the job in {took:.1f} s (limit 60): "
          f"{[l for l in r.stderr.splitlines() if l.startswith('error')][:1]}")
    sys.exit(0 if ok else 1)


def mutant():
    d = OUT + "/mutant"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copytree("llmc", d + "/llmc")
    shutil.copy("train_gpt2.cu", d)
    src = open("llmc/dp_device.cuh").read()
    target = "cudaCheck(cudaMemsetAsync(dp->unit_grads[u], 0, unit->size * sizeof(floatX), cs));"
    if src.count(target) != 1:
        sys.exit("the mutation did not apply")
    open(d + "/llmc/dp_device.cuh", "w").write(src.replace(target, "(void)unit;"))
    subprocess.run(["dev/cuda_emu/emucc", "-O1", "-DENABLE_FP32", "-o", d + "/trainer", d + "/train_gpt2.cu",
                    "-lnccl"], check=True)
    base_losses, base_w = cpu_baseline()
    ok, le, we = compare(d + "/trainer", "mutant", 2, 2, 2, base_losses, base_w, TOL["fp32"])
    print(f"stage 2 without clearing the reduced gradients: max loss error {le:.2e}, max weight error {we:.2e} "
          f"-> {'passed (the test cannot see the bug)' if ok else 'fails as it must'}")
    sys.exit(1 if ok else 0)


DILOCO = td.MODEL + ["-i", td.DATA, "-j", "", "-b", "2", "-t", "32", "-d", "256", "-l", "1e-3", "-c", "0.1",
                     "-s", "0", "-sf", "1", "-ls", "4", "-ol", "0.7", "-om", "0.9"]


def ls_bytes(stdout, head):
    """The -ls closed forms of the trainer's line `head` (a step without a sync, one with: the
    sync's bytes across the replicas and inside the replica added) and the bytes it measured in its
    last step without and with a sync, as (plain, sync, measured plain, measured sync), or None."""
    c = re.search(head + r": (\d+) bytes sent per rank across replicas, (\d+) inside[^;]*; a step without a sync "
                  r"sends (\d+)", stdout)
    m = re.search(r"communication measured \(-ls\): (\d+) bytes sent per rank in a step without an outer sync, "
                  r"(\d+) in one with", stdout)
    if c is None or m is None:
        return None
    replica, inner, plain = (int(x) for x in c.groups())
    return plain, plain + replica + inner, int(m.group(1)), int(m.group(2))


def outer_bytes(stdout):
    """The start-up report's -ls closed forms and the measured bytes (ls_bytes), as a dict."""
    b = ls_bytes(stdout, r"communication per outer sync \(every \d+ steps\)")
    return b and dict(zip(("plain", "sync", "measured_plain", "measured_sync"), b))


def state_master(path):
    """The fp32 master weights of a state file (llmc/ckpt_state_file.h: the 1024-byte header, then m,
    v and the master weights of `owned` elements each)."""
    raw = open(path, "rb").read()
    owned = int(np.frombuffer(raw[72:80], dtype="<u8")[0])
    assert np.frombuffer(raw[64:68], dtype="<i4")[0] == 1, f"{path}: no master weights"
    return np.frombuffer(raw, dtype="<f4", count=owned, offset=1024 + 8 * owned)


def diloco():
    failures = 0
    # the CPU trainer and the emulated GPU trainers on the same ranks and flags, 12 steps: syncs
    # after steps 4, 8 and 12
    args = DILOCO + ["-x", "12"]
    cpu = {}
    for ranks, shard, stage in [(4, 2, 1), (4, 2, 0), (2, 1, 1)]:
        td.TRAINER = "./train_gpt2cpu"
        d = f"{OUT}/diloco_cpu_r{ranks}_s{shard}_z{stage}"
        td.run_ok(ranks, args + ["-z", str(stage), "-ds", str(shard)], d)
        cpu[(ranks, shard, stage)] = td.train_losses(d + "/main.log"), model_weights(d + "/model_final.bin")
    # ZeRO 0 on 2 x 2: the outer state and the exchange sharded over the replica's two ranks, the
    # parameters (BF16: and the fp32 master weights) all-gathered after each sync
    for prec, ranks, shard, stage in [("fp32", 4, 2, 1), ("fp32", 4, 2, 0), ("bf16", 2, 1, 1), ("bf16", 4, 2, 0)]:
        td.TRAINER = FP32 if prec == "fp32" else BF16
        d = f"{OUT}/diloco_{prec}_r{ranks}_s{shard}_z{stage}"
        ckpt = ["-n", "8"] if prec == "bf16" and stage == 0 else []
        out = td.run_ok(ranks, args + ["-z", str(stage), "-ds", str(shard)] + ckpt, d)
        if ckpt: # after the sync of step 8 the replica's two ranks hold the same master weights, bit for bit
            same = [np.array_equal(*(state_master(f"{d}/state_00000008_{r:05d}.bin") for r in (q, q + 1)))
                    for q in (0, 2)]
            failures += not all(same)
            print(f"{'ok' if all(same) else 'FAIL'}  bf16 -ls 4 mesh 2x2 ZeRO 0: the fp32 master weights of each "
                  f"replica's two ranks after the sync of step 8 {'bitwise equal' if all(same) else 'DIFFER'} "
                  f"(replicas 0, 1: {same})")
        base_losses, base_w = cpu[(ranks, shard, stage)]
        losses, w = td.train_losses(d + "/main.log"), model_weights(d + "/model_final.bin")
        le = max(abs(losses[s] - base_losses[s]) for s in base_losses) if sorted(losses) == sorted(base_losses) \
            == list(range(1, 13)) else float("inf")
        we = float(np.max(np.abs(w - base_w)))
        syncs = len(re.findall(r"outer sync, pseudo-grad norm", out))
        where = f"{prec} -ls 4 -ol 0.7 -om 0.9, {ranks} GPUs, mesh {ranks // shard}x{shard}, ZeRO {stage}"
        if prec == "fp32":
            tol = TOL["fp32"]
            ok = le <= tol[0] and we <= tol[1] and syncs == 3
            print(f"{'ok' if ok else 'FAIL'}  {where}: {syncs} outer syncs, max loss error {le:.2e} (tol "
                  f"{tol[0]:.0e}), max weight error {we:.2e} (tol {tol[1]:.0e}) vs the CPU trainer")
            b = outer_bytes(out)
            bytes_ok = b is not None and b["measured_plain"] == b["plain"] and b["measured_sync"] == b["sync"]
            failures += not bytes_ok
            print(f"{'ok' if bytes_ok else 'FAIL'}  {where}: bytes sent per rank, measured (closed form): "
                  + (f"a step without a sync {b['measured_plain']} ({b['plain']}), a step with one "
                     f"{b['measured_sync']} ({b['sync']})" if b else "lines missing"))
        else:
            tol = TOL["bf16"][0]
            ok = le <= tol and syncs == 3
            print(f"{'ok' if ok else 'FAIL'}  {where}: {syncs} outer syncs, max loss error {le:.2e} (tol {tol:.0e}) "
                  f"vs the CPU trainer (fp32), max weight error {we:.2e} (not checked)")
        failures += not ok
    # a checkpoint inside a window (syncs after 4, 8 and the last, 10; checkpoint at 6): every rank
    # saves its local parameters and outer state; the resumed run repeats steps 7-10 exactly
    td.TRAINER = FP32
    args = DILOCO + ["-x", "10", "-z", "1", "-ds", "1", "-n", "6"]
    full, part = OUT + "/diloco_resume_full", OUT + "/diloco_resume_part"
    td.run_ok(2, args, full)
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    for f in os.listdir(full):
        if "_00000006" in f:
            shutil.copy(os.path.join(full, f), part)
    r = td.mpirun(2, args + ["-y", "1", "-o", part])
    a, b = td.train_losses(full + "/main.log"), td.train_losses(part + "/main.log") if r.returncode == 0 else {}
    same_w = r.returncode == 0 and np.array_equal(model_weights(full + "/model_final.bin"),
                                                  model_weights(part + "/model_final.bin"))
    ok = r.returncode == 0 and "resumed from step 6" in r.stdout and sorted(b) == [7, 8, 9, 10] and \
        all(b[s] == a[s] for s in b) and same_w
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  fp32 -ls 4, 2 GPUs, mesh 2x1, ZeRO 1, resumed at step 6 (inside a window): "
          f"steps 7-10 {[b.get(s) for s in (7, 8, 9, 10)]}, uninterrupted {[a.get(s) for s in (7, 8, 9, 10)]}, "
          f"final weights {'bitwise equal' if same_w else 'DIFFER'}" + ("" if r.returncode == 0 else r.stderr[-1000:]))
    sys.exit(1 if failures else 0)


# -rq, -lf, -lo on the GPU (llmc/wire_kernels.cuh): the cases of diloco_wire, 9 steps (3 windows of -ls 3)
WIRE = DILOCO[:-6] + ["-ls", "3", "-ol", "0.7", "-om", "0.9", "-x", "9"]
WIRE_CASES = [("-rq int8 (-ref 1)", ["-rq", "int8"], 1), ("-lf 2", ["-lf", "2"], 0),
              ("-lf 2 -lo 1 -rq int8", ["-lf", "2", "-lo", "1", "-rq", "int8"], 1),
              # -lo 2: each exchange in two chunks over two steps (fp32 ranges; int8 phases)
              ("-lo 2", ["-lo", "2"], 2), ("-lf 2 -lo 2 -rq int8", ["-lf", "2", "-lo", "2", "-rq", "int8"], 1)]


def wire_line(stdout):
    m = re.search(r"replica link format: .*?: (\d+) bytes per (?:outer sync|step)", stdout)
    return int(m.group(1)) if m else None


def wire_compare(trainer, extra, ranks, shard, stage, tag):
    """Runs the CPU trainer and `trainer` on the same flags; returns (loss error, weight error, the
    outputs of both)."""
    args = WIRE + extra + ["-z", str(stage), "-ds", str(shard)]
    td.TRAINER = "./train_gpt2cpu"
    cpu_out = td.run_ok(ranks, args, f"{OUT}/{tag}_cpu")
    td.TRAINER = trainer
    r = td.mpirun(ranks, args + ["-o", f"{OUT}/{tag}_gpu"], timeout=300)
    if r.returncode != 0:
        print(r.stdout[-1500:] + r.stderr[-1500:])
        return float("inf"), float("inf"), cpu_out, r.stdout
    a, b = td.train_losses(f"{OUT}/{tag}_cpu/main.log"), td.train_losses(f"{OUT}/{tag}_gpu/main.log")
    le = max(abs(a[s] - b[s]) for s in a) if sorted(a) == sorted(b) == list(range(1, len(a) + 1)) else float("inf")
    we = float(np.max(np.abs(model_weights(f"{OUT}/{tag}_cpu/model_final.bin")
                             - model_weights(f"{OUT}/{tag}_gpu/model_final.bin"))))
    return le, we, cpu_out, r.stdout


def diloco_wire():
    failures = 0
    tol = TOL["fp32"]
    for i, (name, extra, stage) in enumerate(WIRE_CASES):
        le, we, cpu_out, out = wire_compare(FP32, extra, 4, 2, stage, f"wire{i}")
        syncs = (len(re.findall(r"^s:\d+ outer_sync", open(f"{OUT}/wire{i}_gpu/main.log").read(), re.M))
                 if le < float("inf") else 0)
        ok = le <= tol[0] and we <= tol[1] and syncs >= 3
        print(f"{'ok' if ok else 'FAIL'}  fp32 -ls 3 {name}, 4 GPUs, mesh 2x2, ZeRO {stage}: {syncs} outer sync lines, "
              f"max loss error {le:.2e} (tol {tol[0]:.0e}), max weight error {we:.2e} (tol {tol[1]:.0e}) vs the CPU "
              "trainer")
        failures += not ok
        if "-rq" in extra and "-lf" not in extra:
            b, line_gpu, line_cpu = outer_bytes(out), wire_line(out), wire_line(cpu_out)
            bytes_ok = b is not None and line_gpu is not None and line_gpu == line_cpu and \
                b["measured_plain"] == b["plain"] and b["measured_sync"] == b["sync"]
            failures += not bytes_ok
            print(f"{'ok' if bytes_ok else 'FAIL'}  -rq int8 bytes per outer sync across replicas: GPU line {line_gpu}, "
                  f"CPU line {line_cpu}; emulated NCCL sent " + (f"{b['measured_sync']} in a step with a sync "
                  f"(closed form {b['sync']}), {b['measured_plain']} without ({b['plain']})" if b else "(lines missing)"))
    sys.exit(1 if failures else 0)


def diloco_wire_replicas():
    """-rq on more than 2 replicas (grouped ncclSend/ncclRecv to the slices' owners, then an
    all-gather of the owners' encoded sums): 4 x 1 ZeRO 1 (-ls 3, 6 steps) and 3 x 1 ZeRO 0 with
    uneven slices (-ls 2, 4 steps) against the CPU trainer on the same flags."""
    global WIRE
    failures = 0
    tol = TOL["fp32"]
    base = WIRE
    for ranks, stage, extra, name in [(4, 1, ["-x", "6"], "-ls 3"), (3, 0, ["-d", "192", "-ls", "2", "-x", "4"], "-ls 2")]:
        WIRE = base + extra
        le, we, cpu_out, out = wire_compare(FP32, ["-rq", "int8"], ranks, 1, stage, f"wire_replicas{ranks}")
        b, line_gpu, line_cpu = outer_bytes(out), wire_line(out), wire_line(cpu_out)
        bytes_ok = b is not None and line_gpu is not None and line_gpu == line_cpu and \
            b["measured_plain"] == b["plain"] and b["measured_sync"] == b["sync"]
        ok = le <= tol[0] and we <= tol[1] and bytes_ok
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  fp32 {name} -rq int8, {ranks} GPUs, mesh {ranks}x1, ZeRO {stage}: max loss error "
              f"{le:.2e} (tol {tol[0]:.0e}), max weight error {we:.2e} (tol {tol[1]:.0e}) vs the CPU trainer; bytes per "
              f"outer sync across replicas: GPU line {line_gpu}, CPU line {line_cpu}; emulated NCCL sent "
              + (f"{b['measured_sync']} in a step with a sync (closed form {b['sync']}), {b['measured_plain']} without "
                 f"({b['plain']})" if b else "(lines missing)"))
    WIRE = base
    sys.exit(1 if failures else 0)


def resume_from_copy(ranks, args, full, part, step, after):
    """Copies run `full`'s checkpoint files of `step` into a fresh `part`, resumes there (-y 1) and compares
    with the uninterrupted run: (ok, uninterrupted losses, resumed losses, weights equal, the mpirun
    result). ok: resumed from `step`, exactly the steps `after` trained, their losses and the final
    weights bitwise equal."""
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    for f in os.listdir(full):
        if f"_{step:08d}" in f:
            shutil.copy(os.path.join(full, f), part)
    r = td.mpirun(ranks, args + ["-y", "1", "-o", part])
    a, b = td.train_losses(full + "/main.log"), td.train_losses(part + "/main.log") if r.returncode == 0 else {}
    same_w = r.returncode == 0 and np.array_equal(model_weights(full + "/model_final.bin"),
                                                  model_weights(part + "/model_final.bin"))
    ok = r.returncode == 0 and f"resumed from step {step}" in r.stdout and sorted(b) == list(after) and \
        all(b[s] == a[s] for s in b) and same_w
    return ok, a, b, same_w, r


def diloco_wire_resume():
    global WIRE
    failures = 0
    td.TRAINER = FP32
    # -lf 2 -lo 1: fragment 1 syncs after steps 1 and 4 (its exchange in flight at checkpoint 4, saved
    # with its held sums and local snapshots), fragment 0 after 3 and 6
    args = WIRE[:-2] + ["-x", "6", "-rq", "int8", "-lf", "2", "-lo", "1", "-z", "1", "-ds", "1", "-n", "4"]
    full, part = OUT + "/wire_resume_full", OUT + "/wire_resume_part"
    td.run_ok(2, args, full)
    ok, a, b, same_w, r = resume_from_copy(2, args, full, part, 4, (5, 6))
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  fp32 -ls 3 -lf 2 -lo 1 -rq int8, 2 GPUs, mesh 2x1, ZeRO 1, resumed at step 4 "
          f"(inside a window, an exchange in flight, residuals from the state files): steps 5-6 {[b.get(s) for s in (5, 6)]}, uninterrupted "
          f"{[a.get(s) for s in (5, 6)]}, final weights {'bitwise equal' if same_w else 'DIFFER'}"
          + ("" if r.returncode == 0 else r.stderr[-1000:]))
    # int4 (-ls 2, 6 steps, 2 x 1 ZeRO 1), where the residual is large: the trainer's losses within
    # 1e-4 of the CPU's; its weights: a rounding decision that the two trainers' inner steps (equal
    # to ~1e-7) put on different sides moves an element by a level, and error feedback carries it on
    # (measured: 0.006% of weights beyond 1e-4 after the first sync, 1.2% after the third), so at
    # most 2% beyond 1e-4, each within 2e-3; the planted bug, a copy of the trainer whose
    # messages never get the residual added, must miss the CPU's losses by more than 1e-4
    WIRE = WIRE[:-6] + ["-ls", "2", "-ol", "0.7", "-om", "0.9", "-x", "6"]
    le0, _, _, _ = wire_compare(FP32, ["-rq", "int4"], 2, 1, 1, "wire_int4")
    w = np.abs(model_weights(f"{OUT}/wire_int4_cpu/model_final.bin") - model_weights(f"{OUT}/wire_int4_gpu/model_final.bin"))
    beyond = float(np.mean(w > 1e-4))
    le, we, _, _ = wire_compare(sys.argv[2], ["-rq", "int4"], 2, 1, 1, "wire_mutant")
    caught = le > TOL["fp32"][0]
    ok = caught and le0 <= TOL["fp32"][0] and beyond <= 0.02 and float(w.max()) <= 2e-3
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  fp32 -ls 2 -rq int4, 2 GPUs, mesh 2x1, ZeRO 1 vs the CPU trainer: max loss error "
          f"{le0:.2e} (tol 1e-4), {100 * beyond:.3f}% of weights beyond 1e-4 (at most 2%), max {w.max():.2e} (at most "
          f"2e-3); the copy without the residual added: loss error {le:.2e} ({'caught' if caught else 'NOT caught'})")
    sys.exit(1 if failures else 0)


# -ls 0 -rq and -rk on the GPU: (name, flags, ranks, shard, stage); -ls 0 cases replace WIRE's -ls 3.
# The first also writes checkpoints at step 2 (resumed below).
SYNC_WIRE_CASES = [("-ls 0 -rq int8", ["-ls", "0", "-rq", "int8", "-n", "2"], 2, 1, 1),
                   ("-ls 0 -rq bf16 -rk 0.05 -rqs 1", ["-ls", "0", "-rq", "bf16", "-rk", "0.05", "-rqs", "1"], 2, 1, 0),
                   ("-ls 3 -rq int4 -rk 0.05", ["-rq", "int4", "-rk", "0.05"], 2, 1, 2)]


def weight_errors(tag):
    """|CPU - GPU| over every weight of the runs `tag`_cpu and `tag`_gpu."""
    return np.abs(model_weights(f"{OUT}/{tag}_cpu/model_final.bin") - model_weights(f"{OUT}/{tag}_gpu/model_final.bin"))


def sync_wire():
    """-ls 0 -rq (synchronous compressed gradients) and -rk (top-k) against the CPU trainer, 4 steps:
    losses within 1e-4; weights as the CPU-vs-reference tests of docs/distributed.md bound them (the
    median within 1e-6, at most 0.5% beyond 1e-4, each within 5e-3: a rounding or top-k decision that
    the two trainers' ~1e-7 apart gradients put on different sides moves an element by up to lr per
    step); the replica bytes line equal to the CPU's; the checkpoint at step 2 of -ls 0 -rq int8: each
    rank's state file laid out as the CPU's, its residual the CPU's but for rounding decisions, and
    resumed it repeats steps 3-4 and the final model bit for bit."""
    global WIRE
    failures = 0
    WIRE = WIRE[:-2] + ["-x", "4"]
    for i, (name, extra, ranks, shard, stage) in enumerate(SYNC_WIRE_CASES):
        le, we, cpu_out, out = wire_compare(FP32, extra, ranks, shard, stage, f"sync_wire{i}")
        w = weight_errors(f"sync_wire{i}") if le < float("inf") else np.array([float("inf")])
        beyond, line_gpu, line_cpu = float(np.mean(w > 1e-4)), wire_line(out), wire_line(cpu_out)
        ok = le <= 1e-4 and float(np.median(w)) <= 1e-6 and beyond <= 0.005 and float(w.max()) <= 5e-3 and \
            line_gpu is not None and line_gpu == line_cpu
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  fp32 {name}, {ranks} GPUs, mesh {ranks // shard}x{shard}, ZeRO {stage} vs the "
              f"CPU trainer: max loss error {le:.2e} (tol 1e-4), weights: median {np.median(w):.1e} (tol 1e-6), "
              f"{100 * beyond:.3f}% beyond 1e-4 (at most 0.5%), max {w.max():.2e} (at most 5e-3); replica bytes line "
              f"GPU {line_gpu}, CPU {line_cpu}")
    # the residual in each rank's state file at step 2, in the CPU trainer's layout (same file size,
    # the residual last): non-zero and equal to the CPU's but where an int8 rounding decision differs
    for r in range(2):
        g, c = (open(f"{OUT}/sync_wire0_{t}/state_00000002_{r:05d}.bin", "rb").read() for t in ("gpu", "cpu"))
        owned = int(np.frombuffer(g[72:80], dtype="<u8")[0])
        rg, rc = (np.frombuffer(x[len(x) - 4 * owned:], dtype="<f4") for x in (g, c))
        d = np.abs(rg - rc)
        ok = len(g) == len(c) and float(np.abs(rc).max()) > 0 and float(np.median(d)) <= 1e-6 and \
            float(np.mean(d > 1e-6)) <= 0.005
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}  -ls 0 -rq int8 state file of rank {r} at step 2: {len(g)} bytes (CPU "
              f"{len(c)}), residual max |CPU| {np.abs(rc).max():.2e}, vs the CPU's: median {np.median(d):.1e} (tol "
              f"1e-6), {100 * np.mean(d > 1e-6):.3f}% beyond 1e-6 (at most 0.5%)")
    td.TRAINER = FP32
    name, extra, ranks, shard, stage = SYNC_WIRE_CASES[0]
    args = WIRE + extra + ["-z", str(stage), "-ds", str(shard)]
    full, part = OUT + "/sync_wire0_gpu", OUT + "/sync_wire_resume"
    ok, a, b, same_w, r = resume_from_copy(ranks, args, full, part, 2, (3, 4))
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}  fp32 {name}, {ranks} GPUs, mesh {ranks // shard}x{shard}, ZeRO {stage}, resumed at "
          f"step 2 (residuals from the state files): steps 3-4 {[b.get(s) for s in (3, 4)]}, uninterrupted "
          f"{[a.get(s) for s in (3, 4)]}, final weights {'bitwise equal' if same_w else 'DIFFER'}"
          + ("" if r.returncode == 0 else r.stderr[-1000:]))
    sys.exit(1 if failures else 0)

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "equivalence":
        equivalence(sys.argv[2])
    else:
        {"accounting": accounting, "startup": startup, "failures": failures, "mutant": mutant,
         "stage2_slots": stage2_slots, "resume": resume, "diloco": diloco, "diloco_wire": diloco_wire,
         "diloco_wire_replicas": diloco_wire_replicas, "diloco_wire_resume": diloco_wire_resume,
         "sync_wire": sync_wire, "mesh84": mesh84}[cmd]()
