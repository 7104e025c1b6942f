"""Resilience checks of train_gpt2cpu (run by dev/tests/37_resilience.sh); each subcommand exits
non-zero on any mismatch:

  corrupt    a flipped byte and a truncation in each file of a 2-rank checkpoint (model, both
             state files, the DONE manifest): -y 1 names the file, skips that checkpoint and
             resumes from the previous one with the uninterrupted run's losses; the model file's
             CRC-32C in the manifest equals one computed here; -nk keeps the newest K
  lifecycle  -y 1 into a missing or empty -o starts fresh; the last step is checkpointed when it
             is a multiple of -n; a resume with a larger -x continues at S+1 with the same
             losses; a main.log moved away is started anew
  kill9      10 kill -9s of the whole job at varied moments (also inside a checkpoint write,
             injected with -fi): every following -y 1 starts, and the run that finishes has the
             uninterrupted run's losses bit for bit
  preempt    SIGUSR1 to mpirun, and SIGTERM to one rank, of a 2-rank ZeRO-1 run with -n 0: it
             writes the checkpoint of the step in progress, exits 0 within 60 s, and -y 1
             continues with the uninterrupted run's losses (1e-6, bit-identical expected); two
             signals in a row exit at once (128 + 15) without a checkpoint. PREEMPT_TRAINER
             selects another trainer binary (the emulated GPU one)
  nonfinite  a NaN injected (-fi) into rank 1's loss and gradients at step 4 of a 2-rank ZeRO-1
             run: the update is skipped on both ranks (weights and optimizer shards byte-equal
             before and after), logged as skip, training goes on; -sk 1 stops with an error; the
             spike guard (-sz) skips a loss 100x too large
  layout     a 2-rank ZeRO-1 checkpoint resumed on 1 rank ZeRO 0 (-b 8) and on 4 ranks ZeRO 2 -ds 2:
             losses within 1e-5 of the uninterrupted run on that layout (and of the run that wrote
             it), final weights within 2e-5; the same layout bit-identical; another -d refused;
             dev/ckpt_tool info, verify (a flipped byte named) and export. TRAINER=the emulated GPU
             trainer: a checkpoint of step 3 of 6 resumed on 1 rank ZeRO 0 and on 2 ranks ZeRO 2 (-b 4)
  failed_rank  rank 1 of 2 killed (-fi die) or hung (-fi hang, -wt 3) at step 4: the job ends
             within 60 s, non-zero, with a line naming step 4 (FAILED_TRAINER: another binary)
  diskfull   a checkpoint that cannot be written (-fi enospc: a full disk half way through a state
             file) on 1 rank and on each of 2 ranks: the run finishes with the uninterrupted run's
             losses, warns naming the step, the file and the error, logs s:S ckpt:failed (and
             "checkpoint_failed" in metrics.jsonl), leaves no file of the failed step, and the
             checkpoints before and after it verify and resume bit for bit; the model file and the
             manifest failing (two in a row go on, -nf 3), -ls state files (local and outer
             parameters) inside a window; -nf 2 stops after two in a row; SIGUSR1
             with a failing checkpoint exits non-zero without DONE; model_final.bin retried once,
             then an error; main.log and metrics.jsonl on /dev/full warn once and training goes on; a
             resume whose metrics.jsonl cannot be rewritten cuts it back and appends the rest.
             As root where mount -t tmpfs works (else skipped with a message), real small tmpfs: a
             full disk during checkpoints (and -y 1 in place on it), logs on a full disk (no torn line, the held-back lines
             written once there is room), model_final.bin that does not fit. TRAINER=the emulated
             GPU trainer: 2 ranks, rank 1's checkpoint fails, its neighbours resume bit for bit
"""
import array
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

TRAINER = os.environ.get("TRAINER", "./train_gpt2cpu")
DATA = "data/kjv/kjv_val.bin"
MODEL = ["-e", "d2", "-V", "257", "-sl", "64"]
COMMON = MODEL + ["-i", DATA, "-j", "", "-b", "2", "-t", "32", "-d", "256", "-l", "1e-3", "-c", "0.1", "-s", "0",
                  "-k", "cosine", "-q", "0.1"]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")
failures = 0


def report(ok, what):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'}  {what}", flush=True)


def run(n, args, timeout=120):
    cmd = (MPIRUN + ["-np", str(n), TRAINER] if n > 1 else [TRAINER]) + args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)


def run_ok(n, args):
    r = run(n, args)
    if r.returncode != 0:
        sys.exit(f"run failed ({n} ranks, {' '.join(args)}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def losses(log_dir):
    out = {}
    for line in open(os.path.join(log_dir, "main.log")):
        m = re.match(r"s:(\d+) trl:(\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def copy_checkpoints(src, dst, steps):
    fresh(dst)
    for f in os.listdir(src):
        if any(f"_{s:08d}" in f for s in steps):
            shutil.copy(os.path.join(src, f), dst)


# CRC-32C written here from its definition (reflected polynomial 0x82F63B78), byte at a time
def crc32c(data):
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    c = 0xFFFFFFFF
    for byte in data:
        c = (c >> 8) ^ table[(c ^ byte) & 0xFF]
    return c ^ 0xFFFFFFFF


def corrupt():
    steps, base = 8, "build/res/corrupt_full"
    fresh(base)
    run_ok(2, COMMON + ["-x", str(steps), "-n", "2", "-z", "1", "-o", base])
    full = losses(base)
    report(crc32c(b"123456789") == 0xE3069283, "CRC-32C check value of '123456789' is e3069283")
    manifest = open(f"{base}/DONE_00000006").read()
    m = re.search(r"file model_00000006.bin (\d+) ([0-9a-f]{8})", manifest)
    model = open(f"{base}/model_00000006.bin", "rb").read()
    report(m and int(m.group(1)) == len(model) and int(m.group(2), 16) == crc32c(model),
           f"manifest's model CRC {m.group(2) if m else None} = CRC-32C computed here {crc32c(model):08x}")
    names = ["model_00000006.bin", "state_00000006_00000.bin", "state_00000006_00001.bin", "DONE_00000006"]
    for name in names:
        for how in ("flip", "truncate"):
            d = f"build/res/corrupt_{how}_{name}"
            copy_checkpoints(base, d, [4, 6])
            path = os.path.join(d, name)
            data = bytearray(open(path, "rb").read())
            if how == "flip":
                pos = len(data) * 3 // 5  # inside the payload (the manifest: inside a file line)
                data[pos] ^= 0x10
            else:
                data = data[:len(data) - 7]
            open(path, "wb").write(bytes(data))
            r = run(2, COMMON + ["-x", str(steps), "-n", "2", "-z", "1", "-y", "1", "-o", d])
            named = re.search(r"checkpoint 6 skipped: .*" + re.escape(name), r.stdout)
            resumed = "resumed from step 4" in r.stdout
            got = losses(d) if r.returncode == 0 else {}
            same = all(got.get(s) == full[s] for s in range(5, steps + 1))
            report(r.returncode == 0 and named and resumed and same,
                   f"{how} in {name}: {'named' if named else 'NOT named'}, "
                   f"{'resumed from step 4' if resumed else 'not resumed from 4'}, "
                   f"losses 5..{steps} {'identical' if same else 'DIFFER'}"
                   + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-300:]})"))
    # nothing verifies: a clear error, non-zero exit
    d = "build/res/corrupt_all"
    copy_checkpoints(base, d, [6])
    open(f"{d}/model_00000006.bin", "r+b").truncate(5000)
    r = run(1, COMMON + ["-x", str(steps), "-y", "1", "-o", d])
    err = r.stderr.strip()
    report(r.returncode != 0 and "none of the 1 checkpoints" in err and "model_00000006.bin" in err
           and len(err.splitlines()) == 1, f"only checkpoint corrupt: exit {r.returncode}, '{err[:160]}'")
    # -nk 2 keeps the two newest complete checkpoints
    d = fresh("build/res/keep")
    run_ok(1, COMMON + ["-x", "7", "-n", "2", "-nk", "2", "-o", d])
    dones = sorted(f for f in os.listdir(d) if f.startswith("DONE_"))
    others = sorted(f for f in os.listdir(d) if re.match(r"(model|state)_\d+", f))
    report(dones == ["DONE_00000004", "DONE_00000006"] and len(others) == 4,
           f"-nk 2 after checkpoints 2, 4, 6: kept {dones} and {len(others)} data files")


def newest_done(d):
    steps = [int(f[5:]) for f in os.listdir(d) if re.fullmatch(r"DONE_\d+", f)]
    return max(steps) if steps else 0


def kill9():
    steps, base = 40, "build/res/kill_full"
    fresh(base)
    args = COMMON + ["-x", str(steps), "-n", "2"]
    run_ok(1, args + ["-o", base])
    full = losses(base)
    d = fresh("build/res/kill")
    # kill -9 of the whole process group: during start-up (a fixed delay), or once the run has
    # printed the step `ahead` steps past its resume point plus a few ms (landing in training or
    # in the checkpoint write); or a kill -9 injected inside the checkpoint write (-fi die_ckpt:
    # after the state file, before the manifest)
    plan = [("startup", 0.05), ("step", 1, 0.0), ("ckpt", 2), ("step", 2, 0.004), ("step", 3, 0.011),
            ("ckpt", 4), ("startup", 0.3), ("step", 1, 0.007), ("step", 4, 0.002), ("ckpt", 2)]
    for i, what in enumerate(plan):
        start_step = newest_done(d)
        fault = f"die_ckpt@{start_step + 2 * what[1]}" if what[0] == "ckpt" else None
        cmd = [TRAINER] + args + ["-y", "1", "-o", d] + (["-fi", fault] if fault else [])
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                             start_new_session=True)
        out = ""
        if what[0] == "startup":
            time.sleep(what[1])
            os.killpg(p.pid, signal.SIGKILL)
            how = f"kill -9 {what[1]:.2f} s after the start"
        elif what[0] == "step":
            target = start_step + what[1]
            for line in p.stdout:
                out += line
                m = re.match(r"step +(\d+)/", line)
                if m and int(m.group(1)) >= target:
                    break
            time.sleep(what[2])
            os.killpg(p.pid, signal.SIGKILL)
            how = f"kill -9 {what[2] * 1000:.0f} ms after step {target} printed"
        else:
            how = f"-fi {fault}"
        out += p.communicate(timeout=120)[0]
        start = re.search(r"resumed from step (\d+)|starting fresh", out)
        ok = "error" not in out and p.returncode == -signal.SIGKILL
        report(ok, f"kill {i + 1:2d} ({how}, at {time.time() - t0:.2f} s): "
                   f"{start.group(0) if start else 'killed before the start-up line'}; newest complete "
                   f"checkpoint now {newest_done(d)}")
    r = run(1, args + ["-y", "1", "-o", d])
    m = re.search(r"resumed from step (\d+)", r.stdout)
    got = losses(d) if r.returncode == 0 else {}
    same = r.returncode == 0 and sorted(got) == list(range(1, steps + 1)) and \
        all(got[s] == full[s] for s in range(1, steps + 1))
    report(same, f"final -y 1 ({m.group(0) if m else 'fresh'}) finishes: main.log steps 1..{steps} "
           f"{'identical to' if same else 'DIFFER from'} the uninterrupted run")


def start(n, args, trainer=None):
    trainer = trainer or TRAINER
    cmd = (MPIRUN + ["-np", str(n), trainer] if n > 1 else [trainer]) + args
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)


def read_until_step(p, step):
    out = ""
    for line in p.stdout:
        out += line
        m = re.match(r"step +(\d+)/", line)
        if m and int(m.group(1)) >= step:
            break
    return out


def rank_pids(p):
    return [int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                           text=True).stdout.split()]


def preempt():
    trainer = os.environ.get("PREEMPT_TRAINER", TRAINER)
    tag = os.path.basename(trainer)
    steps = 40  # (the signal, sent once step 4 is read, must land before the last step on a loaded host)
    args = COMMON + ["-x", str(steps), "-z", "1"]
    base = fresh(f"build/res/preempt_full_{tag}")
    r = run(2, args + ["-o", base]) if trainer == TRAINER else subprocess.run(
        MPIRUN + ["-np", "2", trainer] + args + ["-o", base], capture_output=True, text=True, env=ENV)
    if r.returncode != 0:
        sys.exit(r.stderr[-2000:])
    full = losses(base)
    cases = [("SIGUSR1 to mpirun", lambda p: os.kill(p.pid, signal.SIGUSR1)),
             ("SIGTERM to rank 1 only", lambda p: os.kill(sorted(rank_pids(p))[-1], signal.SIGTERM))]
    for name, send in cases:
        d = fresh(f"build/res/preempt_{tag}_{name.split()[0]}_{name.split()[-1]}")
        p = start(2, args + ["-n", "0", "-o", d], trainer)
        out = read_until_step(p, 4)
        t0 = time.time()
        send(p)
        o, e = p.communicate(timeout=120)
        took = time.time() - t0
        out += o
        m = re.search(r"preempted after step (\d+): checkpoint \S+ written", out)
        s = int(m.group(1)) if m else -1
        ok = p.returncode == 0 and m and os.path.exists(f"{d}/DONE_{s:08d}") and \
            not os.path.exists(f"{d}/model_final.bin") and took < 60
        report(ok, f"{tag}: {name} at step ~4: exit {p.returncode} after {took:.1f} s (limit 60), "
                   f"{m.group(0) if m else 'no preemption line'}" + ("" if ok else f" {e[-500:]}"))
        r = subprocess.run((MPIRUN + ["-np", "2", trainer]) + args + ["-y", "1", "-o", d], capture_output=True,
                           text=True, env=ENV, timeout=120)
        got = losses(d) if r.returncode == 0 else {}
        diff = max((abs(got[k] - full[k]) for k in range(s + 1, steps + 1) if k in got), default=float("inf"))
        ok = r.returncode == 0 and f"resumed from step {s}" in r.stdout and \
            all(k in got for k in range(1, steps + 1)) and diff <= 1e-6
        report(ok, f"{tag}: -y 1 after it resumes at step {s}: steps {s + 1}..{steps} max |loss - uninterrupted| "
                   f"= {diff:.1e} (tol 1e-6; {'bit-identical' if diff == 0 else 'not bit-identical'})")
    # a second signal exits at once: no checkpoint of the step in progress appears (SIGUSR1 then
    # SIGTERM: two of the same kind sent back to back may merge into one)
    d = fresh(f"build/res/preempt_{tag}_twice")
    p = start(1, args + ["-n", "0", "-o", d], trainer)
    read_until_step(p, 2)
    os.kill(p.pid, signal.SIGUSR1)
    os.kill(p.pid, signal.SIGTERM)
    o, e = p.communicate(timeout=60)
    dones = [f for f in os.listdir(d) if f.startswith("DONE_")]
    report(p.returncode in (128 + signal.SIGTERM, 128 + signal.SIGUSR1) and not dones and "second signal" in e,
           f"{tag}: SIGUSR1 then SIGTERM: exit {p.returncode} (want 128 + the signal), DONE files {dones}, "
           f"'{e.strip().splitlines()[-1] if e.strip() else ''}'")


def payload(path):
    return open(path, "rb").read()[1024:]


def nonfinite():
    d = fresh("build/res/nan")
    r = run(2, COMMON + ["-x", "6", "-n", "1", "-z", "1", "-fi", "nan@4:1", "-o", d])
    log = open(f"{d}/main.log").read() if os.path.exists(f"{d}/main.log") else ""
    skip_lines = re.findall(r"^s:(\d+) .* skip:(\w+)$", log, re.M)
    report(r.returncode == 0 and skip_lines == [("4", "nonfinite")] and "step 4: update skipped on every rank" in r.stdout,
           f"NaN injected on rank 1 at step 4 (2 ranks, ZeRO 1): exit {r.returncode}, skipped lines {skip_lines}")
    same_w = payload(f"{d}/model_00000003.bin") == payload(f"{d}/model_00000004.bin")
    same_opt = all(payload(f"{d}/state_00000003_{k:05d}.bin") == payload(f"{d}/state_00000004_{k:05d}.bin")
                   for k in (0, 1))
    moved = payload(f"{d}/model_00000004.bin") != payload(f"{d}/model_00000005.bin")
    after = losses(d)
    finite = all(after[k] == after[k] and abs(after[k]) < 100 for k in (5, 6))
    report(same_w and same_opt and moved and finite,
           f"step 4 left the weights {'unchanged' if same_w else 'CHANGED'} and both ranks' optimizer shards "
           f"{'unchanged' if same_opt else 'CHANGED'}; step 5 {'moved' if moved else 'did NOT move'} them; "
           f"losses 5, 6 = {after.get(5)}, {after.get(6)}")
    d = fresh("build/res/nan_stop")
    r = run(1, COMMON + ["-x", "6", "-sk", "1", "-fi", "nan@3:0", "-o", d])
    err = r.stderr.strip()
    report(r.returncode != 0 and len(err.splitlines()) == 1 and "step 3: 1 consecutive steps skipped (-sk 1)" in err,
           f"-sk 1 and a NaN at step 3 stop the run: exit {r.returncode}, '{err[:150]}'")
    d = fresh("build/res/spike")
    r = run(1, COMMON + ["-x", "9", "-sz", "4", "-sw", "4", "-n", "1", "-fi", "spike@7:0", "-o", d])
    log = open(f"{d}/main.log").read()
    skip_lines = re.findall(r"^s:(\d+) .* skip:(\w+)$", log, re.M)
    same_w = payload(f"{d}/model_00000006.bin") == payload(f"{d}/model_00000007.bin")
    report(r.returncode == 0 and skip_lines == [("7", "spike")] and same_w,
           f"-sz 4 -sw 4 and a loss 100x too large at step 7: skipped lines {skip_lines}, "
           f"weights {'unchanged' if same_w else 'CHANGED'} by step 7")


def max_abs_diff(path_a, path_b):
    a, b = array.array("f"), array.array("f")
    a.frombytes(open(path_a, "rb").read()[1024:])
    b.frombytes(open(path_b, "rb").read()[1024:])
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def layout():
    gpu = TRAINER != "./train_gpt2cpu"
    steps, at = (6, 3) if gpu else (8, 4)
    args = COMMON + ["-x", str(steps)]
    src = fresh("build/res/layout_src")
    run_ok(2, args + ["-z", "1", "-n", str(at), "-o", src])
    written = losses(src)
    # (ranks, flags) of the resumed run; each is compared with the same layout run uninterrupted
    targets = [(1, ["-z", "0", "-b", "8"]), (4, ["-z", "2", "-ds", "2"]), (2, ["-z", "1"])]
    if gpu:  # the emulated GPU trainer (slower): 1 and 2 ranks; its same-layout resume is in 55_multi_gpu
        targets = [(1, ["-z", "0", "-b", "8"]), (2, ["-z", "2", "-b", "4"])]
    for n, flags in targets:
        tag = f"{n}r_" + "_".join(f.strip("-") for f in flags)
        full = fresh(f"build/res/layout_full_{tag}")
        run_ok(n, args + flags + ["-o", full])
        same_layout = n == 2 and flags == ["-z", "1"]
        ref = losses(full)
        d = f"build/res/layout_{tag}"
        copy_checkpoints(src, d, [at])
        r = run(n, args + flags + ["-y", "1", "-o", d])
        got = losses(d) if r.returncode == 0 else {}
        ok_run = r.returncode == 0 and f"resumed from step {at}" in r.stdout and \
            sorted(got) == list(range(at + 1, steps + 1))
        err_new = max((abs(got[k] - ref[k]) for k in got), default=float("inf"))
        err_old = max((abs(got[k] - written[k]) for k in got), default=float("inf"))
        tol, wtol = (0.0, 0.0) if same_layout else (1e-5, 2e-5)
        w_err = max_abs_diff(f"{d}/model_final.bin", f"{full}/model_final.bin") if ok_run else float("inf")
        report(ok_run and err_new <= tol and err_old <= max(tol, 1e-5) and w_err <= wtol,
               f"2-rank ZeRO-1 checkpoint at step {at} resumed on {n} rank{'s' if n > 1 else ''} "
               f"{' '.join(flags)}: steps {at + 1}..{steps} max |loss - uninterrupted run on that layout| = "
               f"{err_new:.1e}, vs the 2-rank run that wrote it {err_old:.1e} (tol {tol:.0e}); final weights "
               f"max |diff| {w_err:.1e} (tol {wtol:.0e})"
               + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-300:]})"))
    if gpu:
        return
    # dev/ckpt_tool: info, verify (a flipped byte named, exit 1), export
    tool = "./ckpt_tool"
    info = subprocess.run([tool, "info", src, str(at)], capture_output=True, text=True)
    d = "build/res/layout_tool"
    copy_checkpoints(src, d, [at])
    data = bytearray(open(f"{d}/state_{at:08d}_00001.bin", "rb").read())
    data[5000] ^= 1
    open(f"{d}/state_{at:08d}_00001.bin", "wb").write(bytes(data))
    good = subprocess.run([tool, "verify", src], capture_output=True, text=True)
    bad = subprocess.run([tool, "verify", d], capture_output=True, text=True)
    exp = subprocess.run([tool, "export", src, str(steps), "build/res/layout_export.bin"], capture_output=True, text=True)
    same = exp.returncode == 0 and payload("build/res/layout_export.bin") == payload(f"{src}/model_{steps:08d}.bin")
    report(info.returncode == 0 and "written by: 2 ranks, dp_shard 2, ZeRO 1, -b 2 -t 32 -d 256" in info.stdout
           and good.returncode == 0 and bad.returncode == 1 and f"state_{at:08d}_00001.bin: checksum mismatch"
           in bad.stdout and same,
           f"ckpt_tool: info names the layout, verify exits {good.returncode} on the good dir and {bad.returncode} "
           f"naming the flipped state file, export {'equals' if same else 'DIFFERS from'} the model file")
    d = "build/res/layout_bad_d"
    copy_checkpoints(src, d, [at])
    r = run(1, args + ["-d", "512", "-y", "1", "-o", d])
    err = r.stderr.strip()
    report(r.returncode != 0 and "a resume needs the same sequence length and tokens per step" in err
           and len(err.splitlines()) == 1, f"a different -d is refused: exit {r.returncode}, '{err[:170]}'")


def failed_rank():
    trainer = os.environ.get("FAILED_TRAINER", TRAINER)
    tag = os.path.basename(trainer)
    for fault, extra, want in (("die@4:1", [], r"step 4"),
                               ("hang@4:1", ["-wt", "3"], r"error: rank 0: step 4, the forward, backward and "
                                                          r"update: no answer from the other ranks within 3 s")):
        t0 = time.time()
        r = subprocess.run(MPIRUN + ["-np", "2", trainer] + COMMON + ["-x", "200", "-fi", fault] + extra,
                           capture_output=True, text=True, env=ENV, timeout=120)
        took = time.time() - t0
        text = r.stdout + r.stderr
        named = re.search(want, text)
        lines = [l for l in text.splitlines() if "step 4" in l and ("rank 0" in l or "error" in l)]
        report(r.returncode != 0 and named and took < 60,
               f"{tag}: rank 1 {'killed' if fault.startswith('die') else 'hung'} at step 4: the job ended in "
               f"{took:.1f} s (limit 60), exit {r.returncode}: {lines[:1]}")


def lifecycle():
    args = COMMON + ["-k", "constant", "-n", "2"]
    for what, d in (("missing", "build/res/life_missing"), ("empty", "build/res/life_empty")):
        shutil.rmtree(d, ignore_errors=True)
        if what == "empty":
            os.makedirs(d)
        r = run(1, args + ["-x", "4", "-y", "1", "-o", d])
        got = losses(d) if r.returncode == 0 else {}
        report(r.returncode == 0 and "starting fresh" in r.stdout and sorted(got) == [1, 2, 3, 4],
               f"-y 1 into a {what} -o starts fresh: exit {r.returncode}, steps {sorted(got)}")
    d = "build/res/life_empty"
    report(os.path.exists(f"{d}/DONE_00000004"), "-x 4 -n 2 writes a checkpoint at the last step (DONE_00000004)")
    full_dir = fresh("build/res/life_full")
    run_ok(1, args + ["-x", "7", "-o", full_dir])
    full = losses(full_dir)
    r = run(1, args + ["-x", "7", "-y", "1", "-o", d])
    got = losses(d)
    lines = [l.split()[0] for l in open(f"{d}/main.log") if "trl:" in l]
    report(r.returncode == 0 and "resumed from step 4" in r.stdout and lines == [f"s:{i}" for i in range(1, 8)]
           and all(got[s] == full[s] for s in range(1, 8)),
           f"a resume with a larger -x (4 -> 7) continues at step 5: main.log steps {lines}")
    os.rename(f"{d}/main.log", f"{d}/main.log.moved")
    r = run(1, args + ["-x", "9", "-y", "1", "-o", d])
    lines = [l.split()[0] for l in open(f"{d}/main.log") if "trl:" in l]
    report(r.returncode == 0 and "resumed from step 6" in r.stdout and lines == ["s:7", "s:8", "s:9"],
           f"main.log moved away: the resumed run starts a new one with steps {lines}")


def step_files(d, step):
    return sorted(f for f in os.listdir(d) if f"_{step:08d}" in f)


def verified(d):
    """The checkpoints of d that ckpt_tool verifies."""
    r = subprocess.run(["./ckpt_tool", "verify", d], capture_output=True, text=True)
    return sorted(int(m) for m in re.findall(r"^checkpoint (\d+): ok$", r.stdout, re.M))


def ckpt_failed_records(d):
    recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if l.startswith("{\"step\"")]
    return sorted(r["step"] for r in recs if r.get("checkpoint_failed") == 1)


def resumes_exactly(n, args, src, step, full, steps, tag):
    """Checkpoint `step` of src copied alone into a new dir, resumed with -y 1: whether steps
    step+1..steps equal full's losses bit for bit."""
    d = f"build/res/diskfull_resume_{tag}_{step}"
    copy_checkpoints(src, d, [step])
    r = run(n, args + ["-y", "1", "-o", d], timeout=300)
    got = losses(d) if r.returncode == 0 else {}
    return r.returncode == 0 and f"resumed from step {step}" in r.stdout and \
        sorted(got) == list(range(step + 1, steps + 1)) and all(got[k] == full[k] for k in got)


def check_failed_run(r, d, n, args, full, steps, failed, ok_steps, names, tag):
    """A run whose checkpoints `failed` could not be written: it finished (exit 0) with full's
    losses, warned for each (naming the step and the file of `names`, and the system's error),
    logged each, left no file of them, and its checkpoints ok_steps verify and resume exactly."""
    err = r.stderr
    warned = all(re.search(rf"warning: checkpoint {s} failed: \S*{re.escape(name)}: \w+: No space left on device",
                           err) for s, name in zip(failed, names))
    got = losses(d) if r.returncode == 0 else {}
    logged = re.findall(r"^s:(\d+) ckpt:failed$", open(f"{d}/main.log").read(), re.M) if r.returncode == 0 else []
    left = [f for s in failed for f in step_files(d, s)]
    ok = verified(d)
    same = sorted(got) == list(range(1, steps + 1)) and all(got[k] == full[k] for k in got)
    resumed = all(resumes_exactly(n, args, d, s, full, steps, tag) for s in ok_steps if s < steps)
    report(r.returncode == 0 and warned and logged == [str(s) for s in failed] and
           ckpt_failed_records(d) == failed and not left and ok == ok_steps and same and resumed,
           f"{tag}: checkpoint{'s' if len(failed) > 1 else ''} {failed} failed: exit {r.returncode}, "
           f"{'warned' if warned else 'NO warning'} ({[l[:150] for l in err.splitlines() if 'warning' in l][:1]}), "
           f"main.log ckpt:failed at {logged}, metrics.jsonl at {ckpt_failed_records(d) if r.returncode == 0 else '-'}, "
           f"files of the failed step left: {left}, verified {ok}, losses 1..{steps} "
           f"{'identical to' if same else 'DIFFER from'} the run without a fault, resumes from "
           f"{[s for s in ok_steps if s < steps]} {'bit for bit' if resumed else 'NOT exact'}"
           + ("" if r.returncode == 0 else f" ({err.strip()[-400:]})"))


class Tmpfs:
    """A tmpfs of `size` mounted at path (root only); None when mount does not work here."""

    def __init__(self, path, size):
        self.path = path
        os.makedirs(path, exist_ok=True)
        subprocess.run(["umount", path], capture_output=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True,
                           text=True)
        self.ok = r.returncode == 0
        self.why = r.stderr.strip()

    def close(self):
        if self.ok:
            subprocess.run(["umount", self.path], capture_output=True)


def fill(path):
    """Writes a file at path until the disk is full; returns its size."""
    size = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 4096, 1):
            try:
                while True:
                    size += f.write(b"\0" * chunk)
            except OSError:
                pass
    return size


def diskfull_tmpfs():
    if os.geteuid() != 0:
        print("skip  real tmpfs cases: not root (mount -t tmpfs needs it)", flush=True)
        return
    # a full disk during checkpoints 4 and 6: 8.5 MiB hold checkpoint 2 (5.45 MB) and a model file
    # (1.82 MB), not a state file (3.63 MB) more, nor (the resume in place) a second model file
    steps = 6
    args = COMMON + ["-x", str(steps), "-n", "2"]
    base = fresh("build/res/diskfull_tmpfs_full")
    run_ok(1, args + ["-o", base])
    full = losses(base)
    t = Tmpfs("build/res/diskfull_tmpfs", "8704k")
    if not t.ok:
        print(f"skip  real tmpfs cases: mount -t tmpfs does not work here ({t.why})", flush=True)
        return
    try:
        d = t.path + "/run"
        r = run(1, args + ["-o", d])
        names = os.listdir(d)
        tmp = [f for f in names if f.endswith(".tmp")]
        left = step_files(d, 4) + step_files(d, 6)
        warned = re.findall(r"warning: checkpoint (\d+) failed: (\S+): \w+: No space left on device", r.stderr)
        ok2 = verified(d) == [2]
        keep = "build/res/diskfull_tmpfs_ckpt2"
        copy_checkpoints(d, keep, [2])
        # -y 1 in place, on the nearly full disk: checkpoints 4 and 6 fail again, model_final.bin
        # fits only once the earlier one is removed
        r2 = run(1, args + ["-y", "1", "-o", d])
        got = losses(d) if r2.returncode == 0 else {}
        in_place = r2.returncode == 0 and "resumed from step 2" in r2.stdout and \
            sorted(got) == list(range(1, steps + 1)) and all(got[k] == full[k] for k in got) and \
            "and the earlier run's model_final.bin are removed, trying once more" in r2.stderr and \
            not [f for f in os.listdir(d) if f.endswith(".tmp")] and verified(d) == [2]
    finally:
        t.close()
    resumed = resumes_exactly(1, args, keep, 2, full, steps, "tmpfs")
    report(r.returncode == 0 and [w[0] for w in warned] == ["4", "6"] and not tmp and not left and ok2 and resumed,
           f"real 8.5 MiB tmpfs: exit {r.returncode}, warned for {[w[0] for w in warned]} "
           f"({warned[0][1] if warned else '-'}), .tmp files {tmp}, files of steps 4, 6 {left}, checkpoint 2 "
           f"{'verifies' if ok2 else 'does NOT verify'} and {'resumes' if resumed else 'does NOT resume'} "
           f"bit for bit like the uninterrupted run" + ("" if r.returncode == 0 else f" ({r.stderr[-400:]})"))
    report(in_place, f"real 8.5 MiB tmpfs, -y 1 in place: exit {r2.returncode}, "
                     f"{'resumed from step 2 with the uninterrupted losses' if in_place else 'FAILED'}; "
                     f"model_final.bin written after the earlier one made room"
           + ("" if in_place else f" ({r2.stderr[-600:]})"))

    # main.log and metrics.jsonl on a disk filled up after step 1 (lines held back, a line across
    # a page boundary cut back to nothing) and emptied again after step 100
    steps = 200
    t = Tmpfs("build/res/diskfull_tmpfs", "4m")
    try:
        d = t.path + "/run"
        p = start(1, COMMON + ["-x", str(steps), "-k", "constant", "-o", d])
        read_until_step(p, 1)
        ballast = fill(t.path + "/ballast")
        read_until_step(p, 100)
        os.remove(t.path + "/ballast")
        out, err = p.communicate(timeout=300)
        log = open(f"{d}/main.log").read()
        records = open(f"{d}/metrics.jsonl").read()
    finally:
        t.close()
    lines = log.splitlines()
    whole = all(re.fullmatch(r"s:\d+ trl:\S+ lr:\S+ norm:\S+", l) for l in lines) and \
        [int(l.split()[0][2:]) for l in lines] == list(range(1, steps + 1))
    try:
        recs = [json.loads(l) for l in records.splitlines()]
        jsonl = [x["step"] for x in recs[1:]] == list(range(1, steps + 1)) and log.endswith("\n")
    except ValueError:
        jsonl = False
    warned = [f for f in ("main.log", "metrics.jsonl") if len(re.findall(rf"warning: \S+/{f}: cannot be written "
                                                                      r"\(No space left on device\)", err)) == 1]
    noted = len(re.findall(r"note: \S+: written again", err))
    report(p.returncode == 0 and whole and jsonl and warned == ["main.log", "metrics.jsonl"] and noted == 2,
           f"real 4 MB tmpfs filled after step 1 ({ballast} bytes), emptied after step 100: exit {p.returncode}, "
           f"one warning for {warned}, {noted} notes 'written again', main.log {len(lines)} lines "
           f"{'all whole, steps 1..200 in order' if whole else 'NOT whole or out of order'}, metrics.jsonl "
           f"{'all records whole' if jsonl else 'BROKEN'}" + ("" if p.returncode == 0 else f" ({err[-400:]})"))

    # model_final.bin (1.8 MB) on a 1 MB disk: an error, exit non-zero, no partial file left
    t = Tmpfs("build/res/diskfull_tmpfs", "1m")
    try:
        d = t.path + "/run"
        r = run(1, COMMON + ["-x", "2", "-o", d])
        names = sorted(os.listdir(d))
    finally:
        t.close()
    err = r.stderr.strip().splitlines()
    report(r.returncode != 0 and any("model_final.bin cannot be written" in l and "also on a second try" in l and
                                     "No space left on device" in l for l in err) and
           not [f for f in names if f.startswith("model_final")],
           f"real 1 MB tmpfs, model_final.bin does not fit: exit {r.returncode}, '{err[-1][:200] if err else ''}', "
           f"files {names}")


def diskfull_gpu():
    # the emulated GPU trainer (slow): 2 ranks ZeRO 1, rank 1's checkpoint 2 fails
    steps = 4
    args = COMMON + ["-x", str(steps), "-n", "1", "-z", "1"]
    base = fresh("build/res/diskfull_gpu_full")
    if run(2, args + ["-o", base], timeout=300).returncode != 0:
        sys.exit(f"{TRAINER} failed without a fault")
    full = losses(base)
    d = fresh("build/res/diskfull_gpu")
    r = run(2, args + ["-fi", "enospc@2:1", "-o", d], timeout=300)
    check_failed_run(r, d, 2, args, full, steps, [2], [1, 3, 4], ["state_00000002_00001.bin.tmp"],
                     f"{os.path.basename(TRAINER)}, 2 ranks, rank 1")


def diskfull():
    if TRAINER != "./train_gpt2cpu":
        diskfull_gpu()
        return
    steps = 8
    for n, extra in ((1, []), (2, ["-z", "1"])):
        args = COMMON + ["-x", str(steps), "-n", "2"] + extra
        base = fresh(f"build/res/diskfull_full_{n}")
        run_ok(n, args + ["-o", base])
        full = losses(base)
        for rank in range(n):
            d = fresh(f"build/res/diskfull_{n}r_{rank}")
            r = run(n, args + ["-fi", f"enospc@4:{rank}", "-o", d])
            check_failed_run(r, d, n, args, full, steps, [4], [2, 6, 8], [f"state_00000004_{rank:05d}.bin.tmp"],
                             f"{n} rank{'s' if n > 1 else ''}, rank {rank}'s state file")
    # -ls 4 (2 replicas): the state files hold the local and outer parameters too; checkpoint 6,
    # inside a window, fails on rank 1
    args = COMMON + ["-x", str(steps), "-n", "2", "-ls", "4", "-ds", "1", "-z", "1"]
    base = fresh("build/res/diskfull_full_ls")
    run_ok(2, args + ["-o", base])
    d = fresh("build/res/diskfull_ls")
    r = run(2, args + ["-fi", "enospc@6:1", "-o", d])
    check_failed_run(r, d, 2, args, losses(base), steps, [6], [2, 4, 8], ["state_00000006_00001.bin.tmp"],
                     "2 replicas -ls 4, rank 1's state file inside a window")
    # the model file fails (checkpoint 4), then the manifest (6): two in a row go on (-nf 3); the
    # first try at model_final.bin fails, the second writes it
    args = COMMON + ["-x", str(steps), "-n", "2"]
    full = losses("build/res/diskfull_full_1")
    d = fresh("build/res/diskfull_model_done")
    r = run(1, args + ["-fi", "enospc_model@4,enospc_done@6,enospc_final@8", "-o", d])
    check_failed_run(r, d, 1, args, full, steps, [4, 6], [2, 8], ["model_00000004.bin.tmp", "DONE_00000006.tmp"],
                     "1 rank, the model file, then the manifest")
    retried = re.search(r"warning: \S+/model_final.bin cannot be written: \S+/model_final.bin.tmp: write: No space "
                        r"left on device; the partial file is removed, trying once more", r.stderr)
    same = r.returncode == 0 and payload(f"{d}/model_final.bin") == payload("build/res/diskfull_full_1/model_final.bin")
    report(retried and same, f"model_final.bin: the first try fails ({'warned' if retried else 'NO warning'}), "
                             f"the second {'writes the uninterrupted run' + chr(39) + 's weights' if same else 'FAILS'}")
    # -nf 2: checkpoints 4 (rank 1) and 6 (rank 0) fail: the run stops with an error after 6
    args = COMMON + ["-x", str(steps), "-n", "2", "-z", "1"]
    d = fresh("build/res/diskfull_nf2")
    r = run(2, args + ["-nf", "2", "-fi", "enospc@4:1,enospc@6:0", "-o", d])
    err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    said = err and all("checkpoint 6 failed" in l and "2 checkpoints in a row failed (-nf 2): stopping" in l and
                       "No space left on device" in l for l in err)
    left = step_files(d, 4) + step_files(d, 6)
    logged = re.findall(r"^s:(\d+) ckpt:failed$", open(f"{d}/main.log").read(), re.M)
    report(r.returncode != 0 and said and not left and verified(d) == [2] and logged == ["4", "6"] and
           not os.path.exists(f"{d}/model_final.bin") and max(losses(d)) == 6,
           f"-nf 2, checkpoints 4 and 6 fail: exit {r.returncode}, '{err[0][:220] if err else ''}', files of 4, 6 left "
           f"{left}, verified {verified(d)}, logged {logged}")
    # SIGUSR1 at step 3 with a failing checkpoint: exit non-zero, no DONE_3; -y 1 resumes from 2
    d = fresh("build/res/diskfull_preempt")
    r = run(2, args + ["-fi", "preempt@3:0,enospc@3:1", "-o", d])
    err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
    said = err and all("checkpoint 3 failed" in l and "stopping on the signal without a checkpoint of step 3" in l
                       for l in err)
    left = step_files(d, 3)
    r2 = run(2, args + ["-y", "1", "-o", d])
    full = losses("build/res/diskfull_full_2")
    got = losses(d) if r2.returncode == 0 else {}
    same = "resumed from step 2" in r2.stdout and sorted(got) == list(range(1, steps + 1)) and \
        all(got[k] == full[k] for k in got)
    report(r.returncode != 0 and said and not left and verified(d)[:1] == [2] and "preempted after" not in r.stdout
           and same,
           f"SIGUSR1 at step 3 and checkpoint 3 fails: exit {r.returncode}, '{err[0][:200] if err else ''}', files "
           f"of step 3 left {left}; -y 1 {'resumes from 2 with the uninterrupted losses' if same else 'DIFFERS'}")
    # model_final.bin cannot be written twice (its .tmp is a directory that is not empty)
    d = fresh("build/res/diskfull_final")
    os.makedirs(f"{d}/model_final.bin.tmp/x")
    r = run(1, COMMON + ["-x", "2", "-o", d])
    err = r.stderr.strip().splitlines()
    report(r.returncode != 0 and len([l for l in err if l.startswith("warning:")]) == 1 and err and
           err[-1].startswith("error:") and "also on a second try" in err[-1] and
           not os.path.exists(f"{d}/model_final.bin"),
           f"model_final.bin fails twice: exit {r.returncode}, '{err[-1][:200] if err else ''}'")
    # a resume whose metrics.jsonl cannot be rewritten (its .tmp is a directory): cut back and the
    # rest appended; main.log (only cut back) as in the uninterrupted run, metrics.jsonl as in a
    # resume that could rewrite it
    val = ["-x", "6", "-n", "2", "-j", DATA, "-v", "2", "-m", "2"]
    base = fresh("build/res/diskfull_trim_full")
    run_ok(1, COMMON + val + ["-o", base])
    dirs = ("build/res/diskfull_trim", "build/res/diskfull_trim_ref")
    for d in dirs:
        copy_checkpoints(base, d, [2])
        shutil.copy(f"{base}/main.log", d)
        shutil.copy(f"{base}/metrics.jsonl", d)
    os.makedirs(f"{dirs[0]}/metrics.jsonl.tmp/x")
    r, ref = (run(1, COMMON + val + ["-y", "1", "-o", d]) for d in dirs)

    def numbers(path):
        recs = [json.loads(l) for l in open(path)]
        return [(x.get("step"), x.get("train_loss"), x.get("val_loss")) for x in recs if "step" in x]
    ok = r.returncode == 0 and ref.returncode == 0
    same_log = ok and open(f"{dirs[0]}/main.log").read() == open(f"{base}/main.log").read()
    same_rec = ok and numbers(f"{dirs[0]}/metrics.jsonl") == numbers(f"{dirs[1]}/metrics.jsonl")
    report(same_log and same_rec and "metrics.jsonl: cannot be rewritten for the resume" in r.stderr,
           f"resume with metrics.jsonl not rewritable: exit {r.returncode}, warned, main.log "
           f"{'identical to' if same_log else 'DIFFERS from'} the uninterrupted run's, metrics.jsonl steps, losses "
           f"and val losses {'identical to' if same_rec else 'DIFFER from'} a resume that rewrote it")
    # main.log and metrics.jsonl on /dev/full: one warning each, the run goes on
    d = fresh("build/res/diskfull_devfull")
    os.symlink("/dev/full", f"{d}/main.log")
    os.symlink("/dev/full", f"{d}/metrics.jsonl")
    r = run(1, COMMON + ["-x", "4", "-n", "2", "-o", d])
    warns = re.findall(r"warning: \S+/(main.log|metrics.jsonl): cannot be written \(No space left on device\)",
                       r.stderr)
    report(r.returncode == 0 and sorted(warns) == ["main.log", "metrics.jsonl"] and verified(d) == [2, 4] and
           os.path.exists(f"{d}/model_final.bin"),
           f"main.log and metrics.jsonl on /dev/full: exit {r.returncode}, warnings {warns}, checkpoints "
           f"{verified(d)} and model_final.bin written")
    diskfull_tmpfs()


if __name__ == "__main__":
    os.makedirs("build/res", exist_ok=True)
    {"corrupt": corrupt, "kill9": kill9, "lifecycle": lifecycle, "preempt": preempt, "nonfinite": nonfinite, "layout": layout, "failed_rank": failed_rank,
     "diskfull": diskfull}[sys.argv[1]]()
    sys.exit(1 if failures else 0)
