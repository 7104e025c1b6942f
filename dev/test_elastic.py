"""Elastic replicas (-le 1, issue 36) on the emulated GPU trainer, ranks started without mpirun
(-pi tcp, RANK / WORLD_SIZE, as a launcher without Open MPI would): a replica is lost at a stated
step and the others train on. Each process is bounded in time; a hang fails the check.

  python3 dev/test_elastic.py drop [TRAINER]   the cases below (TRAINER: a mutant, see mutant); drop_a,
                                                drop_b: the first three, the last three
  python3 dev/test_elastic.py rejoin [TRAINER] a killed replica started again with -y 1 rejoins (strays on the
                                                port meanwhile: another job's hello, rank 0's)
  python3 dev/test_elastic.py resume [TRAINER] checkpoints written without a lost replica, resumed by all
  python3 dev/test_elastic.py sync [TRAINER]   a replica lost inside an outer sync
  python3 dev/test_elastic.py fs [TRAINER]     -pi fs: a drop (a stale report file planted) and a start
                                                without a replica that joins later (-lw)
  python3 dev/test_elastic.py checked [TRAINER] two fragments' exchanges in flight when a replica is lost,
                                                the trainer built with emucc --check, EMU_SCHED random:3
  python3 dev/test_elastic.py matrix [TRAINER] the slower suite: 4x1 and 2x2, ZeRO 1 and 2, fp32 and int8,
                                                -lo 0 and 1, -lf 1 and 2; a killed replica's rejoin
                                                through -pi fs files; a replica lost inside a blocking
                                                exchange under emucc --check, EMU_SCHED reverse
  python3 dev/test_elastic.py overlap [TRAINER] -lo 1: a replica lost while an exchange is in flight, a rejoin
  python3 dev/test_elastic.py muon [TRAINER]   -opt muon with ZeRO 1, 2 (matrices owned whole): a drop, a
                                                rejoin, against train_gpt2.py --optimizer muon; a rejoin
                                                keeping the owners' momentum must fail
  python3 dev/test_elastic.py refusals          -le where it cannot run: one line each, exit 1
  python3 dev/test_elastic.py mutant_a|mutant_b  (mutant_a: the first two, mutant_b: the last two) a survivor that averages over R, not R', must fail drop; a
                                                rebuilt replica keeping replica 0's moments must fail resume;
                                                the residual restored on the communication stream must fail
                                                checked (a race emucc --check reports); a trainer that never
                                                polls a nonblocking communicator's ncclInProgress must fail
                                                (the emulator reports the next call on it)

drop, each with -ls 4 -ol 0.7 -om 0.9, 12 steps, -wt 3:
  2x1 ZeRO 1, rank 1 killed (SIGKILL) as step 6 begins: rank 0 logs "replica 1 lost at step 6", trains
      on alone, ends normally; its losses and final weights equal train_gpt2.py --replicas 2
      --drop 1@6 within 1e-4 (the issue's fp32 tolerance); main.log says s:6 replicas:1
  4x1 ZeRO 1 -rq int8, rank 1 killed at step 6: three survivors cut the int8 exchange into 3 slices
      (--replicas 4 --drop 1@6 --wire-format int8 --wire-shards 1)
  3x1 ZeRO 1, rank 1 stops answering (hang) at step 5: ranks 0 and 2 average over 2 replicas from
      there (against --replicas 3 --drop 1@5); a stray connection to rank 0's port before the loss is
      dropped with a line
  2x2 ZeRO 2, rank 3 killed at step 6: rank 2 (its replica's other rank) exits 1 naming the lost
      rank, ranks 0 and 1 train on (against --replicas 2 --drop 1@6)
  2x2 ZeRO 2, rank 0 killed at step 6: rank 1 stops naming it; ranks 2 and 3 write checkpoint 6
      without replica 0 (its manifest says so, ckpt_tool verifies it) and stop (exit 1) saying why
  2x1 -lm 2, rank 1 killed: rank 0 stops (exit 1) after a checkpoint, saying fewer than -lm 2
      replicas are left
  and, for each kill, rank 0's 'lost' line at most -wt + one outer step (H step times) after it, or
  -wt + the emulated transport's 0.5 s to see the closed connection where an outer step is shorter
  (plus 0.2 s for the report's round trip);
  for each drop, the closed forms rank 0 prints for the survivors' mesh equal the bytes the
  emulated NCCL sent in the last step without and with a sync.
rejoin: 2x1 -n 4, rank 1 killed at step 6 and started again with -y 1 (strays meanwhile: another
  job's hello, a hello claiming rank 0, both dropped with a line): it rejoins after the sync of step
  8; losses and final weights equal train_gpt2.py --replicas 2 --drop 1@6 --rejoin 1@9 within 1e-4,
  main.log says s:6 replicas:1 and s:9 replicas:2, the checkpoint of step 12 is complete. And 2x2
  ZeRO 2, rank 3 killed at step 6 (rank 2 stops): ranks 2 and 3 started again rejoin as one replica,
  against the same reference.
sync: 3x1 -rq int8, rank 1 killed as the exchange after step 8 is issued: ranks 0 and 2 restore
  their residuals and redo the sync over 2 replicas; 2x1, rank 1 killed before the finiteness flag
  of the sync after step 4: against --drop 1@8 (1@4), step 8's (4's) loss against --drop 1@9 (1@5)
  (the lost replica took part in that step). 3x1, rank 1 killed inside step 6's loss all-reduce
  before its last ring send (-fi die_ring): it ends on rank 0, not on rank 2; rank 0 drops replica 2
  too (reported from step 6), rank 2 exits 1 told so, against --drop 1@7 --drop 2@7 (also -pi fs).
resume: 2x1 -n 4, rank 1 killed at step 6: checkpoints 8 and 12 are written by rank 0 alone (the
  manifest names replica 1 as missing, ckpt_tool verifies them); 12 removed, both ranks started with
  -y 1: rank 1 rebuilds its replica from the outer state, against --drop 1@6 --rejoin 1@9. And 2x1
  -lm 2, rank 1 killed at step 6: rank 0 stops (exit 1) after checkpoint 6; both resume it, replica 1
  rebuilt inside a window, against --drop 1@6 --rejoin 1@7. And 2x1, rank 0 killed at step 6: rank 1
  writes checkpoint 6 and stops; both resume it, replica 0 rebuilt from replica 1's outer state,
  against --drop 0@6 --rejoin 0@7 (main.log lacks step 6: rank 0 died before writing it).
"""
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_distributed as td  # noqa: E402
from test_diloco import model_file, report  # noqa: E402  (the same d2 model; checks counted there)
import test_diloco  # noqa: E402
from test_multi_gpu import free_port, ls_bytes  # noqa: E402

PY = "/usr/bin/python3"
FP32 = "build/gpu/train_gpt2emu_fp32"
OUT = "build/elastic"
DATA = td.DATA
B, T, STEPS, H = 2, 32, 12, 4
ROWS = 8
BASE = ["-i", DATA, "-j", "", "-b", str(B), "-t", str(T), "-d", str(T * ROWS), "-l", "1e-3", "-c", "0.1",
        "-s", "0", "-sf", "0", "-k", "constant", "-u", "0", "-x", str(STEPS), "-ls", str(H), "-ol", "0.7",
        "-om", "0.9", "-wt", "3"]
WT = 3.0  # -wt above
# the emulated NCCL's delay before a closed connection is an error (EMU_NCCL_DETECT_S, its default),
# and what a report's round trip to rank 0 may add on a loaded host
DETECT_S, REPORT_S = 0.5, 0.2
TOL = 1e-4
LIMIT_S = 150  # any process of a case still running then is a hang
def rows_for(R):
    """Rows of T+1 tokens per step, all replicas together: ROWS, or 6 for 3 replicas (B 2 each)."""
    return 6 if R == 3 else ROWS


def launch(trainer, world, args, name, stray=False, restart=None, before_restart=None, hung=(), keep=False, fs=False,
           absent=(), late=None):
    """Starts `world` ranks without mpirun; returns the log dir and per rank (exit code, stdout,
    stderr, seconds it ran). A stray connection to rank 0's port, if asked, once training runs;
    restart (a rank, or a list: a replica's ranks): once that rank's process has been killed (every
    listed rank's has ended, one killed), each is started again with -y 1 (results under the keys
    world, world + 1, ...; the start time in res["restarted_at"]), after before_restart(port).
    hung: ranks that stop answering for good (-fi hang), killed once every other process has ended.
    keep: the log dir of an earlier launch is kept (a resume, -y 1 in args). fs: -pi fs through
    the directory d.rdv (the elastic agreement and rejoins through files) instead of -pi tcp. absent:
    ranks not started; late (seconds, extra args): those started then (keys world, world + 1, ...)."""
    d = f"{OUT}/{name}"
    if not keep:
        subprocess.run(["rm", "-rf", d, d + ".rdv"])
    port = free_port()
    os.makedirs(d + ".rdv", exist_ok=True)
    pi = ["-pi", "fs", "-pf", d + ".rdv"] if fs else ["-pi", "tcp", "-ps", "127.0.0.1", "-pp", str(port)]
    cmd = [trainer, "-e", model_file()] + BASE + args + pi + ["-le", "1", "-o", d]
    t0 = time.time()

    lines = {}  # key -> [(seconds since t0, stdout line)]

    def read(key, f, into):
        for line in f:
            into.append((time.time() - t0, line))

    def start(r, extra=(), key=None):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
            env.pop(k, None)
        p = subprocess.Popen(cmd + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        key = r if key is None else key
        lines[key], lines[(key, "err")] = [], []
        for f, into in ((p.stdout, lines[key]), (p.stderr, lines[(key, "err")])):
            threading.Thread(target=read, args=(key, f, into), daemon=True).start()
        return p
    procs = {r: start(r) for r in range(world) if r not in absent}
    if stray:
        while not os.path.exists(d + "/main.log") and time.time() - t0 < 60:
            time.sleep(0.2)
        time.sleep(1.0)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        except OSError as e:
            print(f"      the stray connection to port {port} failed: {e}")
    res = {}
    again = [restart] if isinstance(restart, int) else list(restart or [])
    while (len([r for r in res if r in procs]) < len(procs) or (late and "late_at" not in res)) and \
            time.time() - t0 < LIMIT_S:
        for r, p in list(procs.items()):
            if r not in res and p.poll() is not None:
                res[r] = (p.returncode, time.time() - t0)
        if again and "restarted_at" not in res and all(r in res for r in again) and \
                any(res[r][0] == -signal.SIGKILL for r in again):
            if before_restart:
                before_restart(port)
            res["restarted_at"] = time.time() - t0
            for i, r in enumerate(again):
                procs[world + i] = start(r, ["-y", "1"], key=world + i)
        if late and "late_at" not in res and time.time() - t0 >= late[0]:
            res["late_at"] = time.time() - t0
            for i, r in enumerate(absent):
                procs[world + i] = start(r, late[1], key=world + i)
        if all(r in res for r in procs if r not in hung) and (not late or "late_at" in res):
            for r in hung:
                if r not in res:
                    procs[r].kill()
                    res[r] = ("stopped answering", time.time() - t0)
        time.sleep(0.05)
    for r, p in procs.items():
        if r not in res:
            p.kill()
            res[r] = ("hang", LIMIT_S)
    for r, p in procs.items():
        p.wait()
        time.sleep(0.2)  # the readers take the last lines
        code, took = res[r]
        res[r] = (code, "".join(x for _, x in lines[r]), "".join(x for _, x in lines[(r, "err")]), took)
    res["lines"] = lines
    return d, res


def reference(R, drop, extra=(), steps=STEPS):
    """train_gpt2.py's losses and final weights for R replicas of ROWS // R rows each, `drop`."""
    rows = rows_for(R)
    tag = f"ref_R{R}_rows{rows}_drop{drop.replace('@', '_')}" + "_".join(extra).replace("-", "").replace("@", "_")
    tag += f"_x{steps}" if steps != STEPS else ""
    losses, final = f"{OUT}/{tag}.txt", f"{OUT}/{tag}.bin"
    if not os.path.exists(final):  # written under this process's names, then renamed (checks run side by side)
        mine = f".{os.getpid()}"
        subprocess.run([PY, "train_gpt2.py", "--load", model_file(), "--data", DATA, "--B", str(rows // R),
                        "--T", str(T), "--steps", str(steps), "--lr", "1e-3", "--weight-decay", "0.1",
                        "--replicas", str(R), "--sync-every", str(H), "--outer-lr", "0.7", "--outer-momentum",
                        "0.9", "--drop", drop, *extra, "--write-losses", losses + mine, "--write-final", final + mine],
                       check=True, capture_output=True)
        os.replace(losses + mine, losses)
        os.replace(final + mine, final)
    return {i + 1: float(x) for i, x in enumerate(open(losses))}, td.weights(final)


def against_reference(d, R, drop, extra=(), absent=(), steps=STEPS):
    """Max loss and final weight errors against the reference (absent: steps main.log lacks, its
    writer lost)."""
    ref_l, ref_w = reference(R, drop, extra, steps)
    try:
        got = td.train_losses(d + "/main.log")
        w = td.weights(d + "/model_final.bin")
    except (OSError, ValueError):
        return float("inf"), float("inf")
    if sorted(got) != sorted(s for s in ref_l if s not in absent):
        return float("inf"), float("inf")
    ref_l = {s: v for s, v in ref_l.items() if s not in absent}
    return max(abs(got[s] - ref_l[s]) for s in ref_l), float(np.max(np.abs(w - ref_w)))


def main_log(d):
    """The text of d's main.log ('' where there is none)."""
    return open(d + "/main.log").read() if os.path.exists(d + "/main.log") else ""


def verifies(d, step):
    """Whether ckpt_tool verifies checkpoint `step` in d."""
    return subprocess.run(["./ckpt_tool", "verify", d, str(step)], capture_output=True, text=True).returncode == 0


def after_drop_bytes(out):
    """The closed forms rank 0 printed with the drop (a step without a sync, one with) and the bytes
    the emulated NCCL sent in the last of each, or None."""
    b = ls_bytes(out, "communication per outer sync from here")
    return b and (b[:2], b[2:])


def detection_s(res, killed, k, s):
    """Seconds from the killed rank's exit to rank 0's 'replica k lost at step s' line (None: no kill)."""
    if killed is None or killed not in res:
        return None
    said = [t for t, line in res["lines"][0] if f"replica {k} lost at step {s}" in line]
    return said[0] - res[killed][3] if said else float("inf")


def median_step_s(out):
    """The median of rank 0's step times (ms in its step lines), in seconds."""
    ms = sorted(float(m) for m in re.findall(r"\| ([0-9.]+) ms \|", out))
    return ms[len(ms) // 2] / 1000.0 if ms else 0.0


def tail(res, r):
    code, out, err, _ = res[r]
    return f"rank {r} exit {code}: {(err.strip().splitlines() or [''])[-1][:300]}"


def survivors_case(trainer, world, shard, stage, fault, R, drop, lost_ranks, name, stray=False, wire=None, lo=0,
                   more=(), steps=STEPS, lf=1, ref=()):
    """R replicas of `shard` ranks, ZeRO `stage`, -fi fault; the reference drops `drop`; wire: -rq's
    format (the reference's slices and blocks cut as ZeRO `stage` over `shard` ranks); lo: -lo (the
    exchange in flight when the replica is lost redone by the survivors; no closed-form check); lf:
    -lf (no closed-form check: the fragments' syncs differ in size)."""
    args = ["-ds", str(shard), "-z", str(stage), "-fi", fault, "-d", str(T * rows_for(R))] + (["-rq", wire] if wire else [])
    extra = ("--wire-format", wire, "--wire-shards", str(shard if stage else 0)) if wire else ()
    if lo:
        args += ["-lo", str(lo)]
        extra += ("--overlap", str(lo))
    if lf > 1:
        args += ["-lf", str(lf)]
        extra += ("--fragments", str(lf))
    args += list(more)
    extra += tuple(ref)
    d, res = launch(trainer, world, args, name, stray, hung=lost_ranks if fault.startswith("hang") else ())
    kept = [r for r in range(world) if r not in lost_ranks]
    k, s = drop.split("@")
    out0 = res[0][1]
    ok_exit = all(res[r][0] == 0 for r in kept)
    le, we = against_reference(d, R, drop, extra, steps=steps)
    log = main_log(d)
    said = f"replica {k} lost at step {s}" in out0 and f"s:{s} replicas:{R - 1}" in log
    where = f"{R} x {shard} ZeRO {stage}{' -rq ' + wire if wire else ''}{' -lo %d' % lo if lo else ''}" \
            f"{' -lf %d' % lf if lf > 1 else ''}, -fi {fault}"
    b = after_drop_bytes(out0)
    if not lo and lf == 1:  # (-lo: the measured step may hold a chunk of an exchange the closed form counts in another)
        report(b is not None and b[0] == b[1], f"{where}: after the drop, rank 0's closed forms (a step without and "
                                               f"with a sync) {b and b[0]} = the bytes the emulated NCCL sent {b and b[1]}")
    detect = detection_s(res, lost_ranks[-1] if fault.startswith("die") else None, k, s)
    if detect is not None and not more: # (more: another -wt, a checked build's slow steps)
        step_s = median_step_s(out0)
        # the survivors see the loss at their next loss all-reduce (within a step; an outer step where
        # the step syncs) or when the transport sees the closed connection, whichever is later; rank 0
        # then waits -wt for the dead rank's report: 3.5 s measured whatever the step. (The bound was -wt
        # + one outer step, which the emulator's faster steps, 4 x 0.23 s on the Zen 4 host, brought
        # within 0.4 s of that: a host twice as fast would have failed it.)
        bound = WT + max(H * step_s, DETECT_S) + REPORT_S
        report(detect <= bound, f"{where}: rank 0's line 'replica {k} lost' {detect:.2f} s after the killed rank's "
                                f"exit (bound -wt {WT} s + the longer of one outer step, {H} x {step_s:.2f} s, and "
                                f"the emulated transport's {DETECT_S} s, + {REPORT_S} s)")
    report(ok_exit and said and le <= TOL and we <= TOL,
           f"{where}: survivors {kept} exit {[res[r][0] for r in kept]}, 'replica {k} lost at step {s}' "
           f"{'said' if said else 'NOT said'}; against train_gpt2.py --replicas {R} --drop {drop} {' '.join(extra)}: max loss error "
           f"{le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not (ok_exit and said):
        for r in range(world):
            print("      " + tail(res, r))
    return d, res


def cmd_drop(trainer, part):
    if part in ("", "a"):
        drop_part_a(trainer)
    if part in ("", "b"):
        drop_part_b(trainer)


def drop_part_a(trainer):
    survivors_case(trainer, 2, 1, 1, "die@6:1", 2, "1@6", [1], "die_2x1")
    survivors_case(trainer, 4, 1, 1, "die@6:1", 4, "1@6", [1], "die_4x1_int8", wire="int8")
    d, res = survivors_case(trainer, 3, 1, 1, "hang@5:1", 3, "1@5", [1], "hang_3x1", stray=True)
    out0 = res[0][1]
    report("dropped a connection from 127.0.0.1" in out0,
           "3 x 1: the stray connection to rank 0's port was dropped with a line"
           + ("" if "dropped a connection" in out0 else f"; rank 0 said: {out0[-400:]}"))


def drop_part_b(trainer):
    d, res = survivors_case(trainer, 4, 2, 2, "die@6:3", 2, "1@6", [2, 3], "die_2x2")
    code, _, err, took = res[2]
    ok = code == 1 and "rank 3" in err and took < LIMIT_S
    report(ok, f"2 x 2: rank 2, in the lost replica, exits {code} {took:.0f} s into the run naming rank 3: "
               f"{(err.strip().splitlines() or [''])[-1][:240]}")
    # the replica holding world rank 0 lost (2 x 2 ZeRO 2, rank 0 killed): its other rank stops naming
    # it; the other replica writes the checkpoint of step 6 without replica 0 and stops, saying why
    d, res = launch(trainer, 4, ["-ds", "2", "-z", "2", "-fi", "die@6:0", "-d", str(T * ROWS)], "die_rank0")
    codes = [res[r][0] for r in (1, 2, 3)]
    said = [tail(res, r) for r in (1, 2, 3)]
    ok = codes == [1, 1, 1] and "rank 0" in said[0] and all("the run stops after checkpoint 6" in s for s in said[1:])
    missing = manifest_missing(d, 6)
    verify = subprocess.run(["./ckpt_tool", "verify", d, "6"], capture_output=True, text=True)
    report(ok and missing == "missing dp_shard 2 replicas 0" and verify.returncode == 0,
           f"2 x 2 ZeRO 2, rank 0 killed at step 6: ranks 1-3 exit {codes}; checkpoint 6's manifest '{missing}', "
           f"ckpt_tool verify: {verify.stdout.strip()[:80]}; " + " | ".join(s[:200] for s in said))
    # lost while a checkpoint is written (after its state file, before the manifest): that
    # checkpoint fails and is removed, the survivor trains on without replica 1 from step 5
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die_ckpt@4:1"], "die_ckpt")
    code, out, err, took = res[0]
    le, we = against_reference(d, 2, "1@5")
    gone = not os.path.exists(d + "/DONE_00000004") and not os.path.exists(d + "/state_00000004_00000.bin")
    warned = "checkpoint 4 failed: a replica was lost while it was written" in err
    report(code == 0 and gone and warned and le <= TOL and we <= TOL,
           f"2 x 1 -n 4, rank 1 killed inside checkpoint 4: rank 0 exit {code}, the checkpoint "
           f"{'removed' if gone else 'LEFT'} and {'warned' if warned else 'NOT warned'} of; against --drop 1@5: max "
           f"loss error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-fi", "die@6:1", "-lm", "2"], "die_lm2")
    code, _, err, took = res[0]
    report(code == 1 and "fewer than -lm 2" in err,
           f"2 x 1 -lm 2, rank 1 killed at step 6: rank 0 exits {code} {took:.0f} s into the run: "
           f"{(err.strip().splitlines() or [''])[-1][:240]}")
    lss_cases(trainer)


def ring_case(trainer, fs=False):
    """3 x 1 (fs: -pi fs), rank 1 killed inside step 6's loss all-reduce, before its last ring send (-fi die_ring):
    the all-reduce ends on rank 0 (its last chunk comes round from rank 2) and not on rank 2, so the
    survivors are a step apart when they agree. Rank 0, collecting at step 7, drops replica 2 as well
    (its rank reported from step 6): rank 2 exits 1, told its replica is dropped; rank 0 trains on
    alone: its losses and weights against --drop 1@7 --drop 2@7 (step 6's all-reduce had them all)."""
    d, res = launch(trainer, 3, ["-ds", "1", "-z", "1", "-fi", "die_ring@6:1", "-d", str(T * rows_for(3))],
                    "ring_3x1" + ("_fs" if fs else ""), fs=fs)
    le, we = against_reference(d, 3, "1@7", ("--drop", "2@7"))
    out0, err2 = res[0][1], res[2][2]
    said = re.search(r"rank 2 reported from step 6 .*replica 2 is dropped", out0) is not None
    told = res[2][0] == 1 and "replica 2 is lost" in err2
    report(res[0][0] == 0 and said and told and le <= TOL and we <= TOL,
           f"3 x 1{' -pi fs' if fs else ''}, rank 1 killed inside step 6's loss all-reduce (ended on rank 0, not on rank 2): rank 0 exit "
           f"{res[0][0]}, its line on rank 2 {'said' if said else 'NOT said'}; rank 2 exit {res[2][0]} "
           f"{'told its replica is lost' if told else 'NOT told'}; against train_gpt2.py --replicas 3 --drop 1@7 "
           f"--drop 2@7: max loss error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not (said and told):
        for r in range(3):
            print("      " + tail(res, r))


def lss_cases(trainer):
    """-lss 2 (steps 1-2 synchronous, windows of 4 from step 3): 2 x 1, rank 1 killed at step 7, rank 0
    trains on (against --sync-start 2 --drop 1@7); 2 x 1, rank 1 killed at step 2, a synchronous
    step: rank 0 stops (exit 1) within -wt and a step, saying so."""
    survivors_case(trainer, 2, 1, 1, "die@7:1", 2, "1@7", [1], "lss_2x1", more=["-lss", "2"],
                   ref=("--sync-start", "2"))
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-fi", "die@2:1", "-lss", "2"], "lss_sync_step")
    code, _, err, took = res[0]
    last = (err.strip().splitlines() or [''])[-1]
    report(code == 1 and "step 2" in last and took < 60,
           f"2 x 1 -lss 2, rank 1 killed at step 2 (synchronous): rank 0 exits {code} {took:.0f} s into the run: "
           f"{last[:240]}")


def sync_case(trainer, world, fault, R, k, s, name, wire=None, more=(), steps=STEPS):
    """R x 1 ZeRO 1, rank k killed (fault) in the outer sync after step s: the survivors redo the
    sync over R - 1 replicas. Replica k took part in step s (its loss is in step s's mean), so
    step s's loss is checked against train_gpt2.py --drop k@s+1, everything else (the sync after
    step s and on, the final weights) against --drop k@s."""
    extra = ("--wire-format", wire, "--wire-shards", "1") if wire else ()
    args = ["-ds", "1", "-z", "1", "-fi", fault, "-d", str(T * rows_for(R))] + (["-rq", wire] if wire else [])
    d, res = launch(trainer, world, args + list(more) + ["-x", str(steps)], name)
    kept = [r for r in range(world) if r != k]
    ref_l, ref_w = reference(R, f"{k}@{s}", extra, steps)
    at_s = reference(R, f"{k}@{s + 1}", extra, steps)[0][s]
    le = we = float("inf")
    try:
        got, w = td.train_losses(d + "/main.log"), td.weights(d + "/model_final.bin")
        if sorted(got) == sorted(ref_l):
            le = max(abs(got[t] - (at_s if t == s else ref_l[t])) for t in ref_l)
            we = float(np.max(np.abs(w - ref_w)))
    except (OSError, ValueError):
        pass
    out0 = res[0][1]
    log = main_log(d)
    said = f"replica {k} lost at step {s}" in out0 and f"s:{s} replicas:{R - 1}" in log
    ok = all(res[r][0] == 0 for r in kept) and said and le <= TOL and we <= TOL
    where = f"{R} x 1{' -rq ' + wire if wire else ''}, -fi {fault}"
    report(ok, f"{where}: survivors {kept} exit {[res[r][0] for r in kept]}, 'replica {k} lost at step {s}' "
               f"{'said' if said else 'NOT said'} ({(re.findall(r'replica %d lost at step %d: ([^;]*)' % (k, s), out0) or ['-'])[0][:90]}); "
               f"against train_gpt2.py --replicas {R} --drop {k}@{s} {' '.join(extra)} (step {s}'s loss: --drop {k}@{s + 1}): "
               f"max loss error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not ok:
        for r in range(world):
            print("      " + tail(res, r))
    return res


def cmd_overlap(trainer):
    """-lo 1 (the exchange of the sync after step 4 runs during step 5, applied after it): 3 x 1,
    rank 1 killed as step 5 begins, the survivors redo the exchange over 2 replicas from its start;
    2 x 2 ZeRO 2 -rq int8, rank 3 killed at step 5 (their residuals as they were before it); 2 x 1
    -n 4, rank 1 killed at step 6 and started again: it rejoins after the exchange of the sync after
    step 8 is applied (after step 9), and checkpoint 8 (an exchange in flight, a replica missing) is
    not written. And -lf 2 -lo 3 -rq int8, 3 x 1: fragment 0's exchange of step 4 and fragment 1's
    of step 6 are both in flight when rank 1 is killed as step 7 begins: the survivors redo both."""
    survivors_case(trainer, 3, 1, 1, "die@5:1", 3, "1@5", [1], "lo_3x1", lo=1)
    survivors_case(trainer, 3, 1, 1, "die@7:1", 3, "1@7", [1], "lo3_lf2_3x1_int8", wire="int8", lo=3, lf=2)
    survivors_case(trainer, 4, 2, 2, "die@5:3", 2, "1@5", [2, 3], "lo_2x2_int8", wire="int8", lo=1)
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-n", "4", "-lo", "1", "-fi", "die@6:1"], "lo_rejoin", restart=1)
    skipped = not os.path.exists(d + "/DONE_00000008")
    rejoin_check(d, res, [0], [2], "-lo 1, 2 x 1, rank 1 killed at step 6", skipped,
                 f"checkpoint 8 {'not written' if skipped else 'WRITTEN'}; ", after=9, ref=("--overlap", "1"))


def cmd_sync(trainer):
    """A replica lost in an outer sync: 3 x 1 -rq int8, rank 1 killed as the exchange after step 8
    is issued (the survivors restore their residuals and redo it over 2 replicas); 2 x 1, rank 1
    killed before the sync's finiteness flag after step 4. And a loss all-reduce that ends on some
    survivors only (ring_case)."""
    sync_case(trainer, 3, "die_xchg@8:1", 3, 1, 8, "xchg_3x1_int8", wire="int8")
    sync_case(trainer, 2, "die_sync@4:1", 2, 1, 4, "sync_2x1")
    ring_case(trainer)


CHECKED = "build/gpu/train_gpt2emu_fp32_check"
RESTORE = "dev_dp_residual_runs(dp, f, dp->sync->st.residual, dp->sync->res_keep, 0); // (the restore: the messages read it)"


def checked_case(trainer, sched, tag="checked"):
    """2 x 1 -rq int8, 6 steps, rank 1 killed as the exchange after step 4 is issued, on the trainer
    built with emucc --check (races, stream order, memory) under EMU_SCHED=sched (log dir named by
    tag and sched). -wt 20: a checked build's collective call runs its stream's pending kernels
    first, seconds on a loaded machine."""
    os.environ["EMU_SCHED"] = sched
    try:
        return sync_case(trainer, 2, "die_xchg@4:1", 2, 1, 4, f"{tag}_{sched.replace(':', '')}",
                         wire="int8", more=("-wt", "20"), steps=6)
    finally:
        os.environ.pop("EMU_SCHED")


def cmd_checked(trainer):
    """The elastic path under emucc --check: 2 x 1 -rq int8 -lf 2 -lo 3, 7 steps, rank 1 killed at
    step 7 (the last) with fragment 0's exchange of step 4 and fragment 1's of step 6 in flight, both
    redone (EMU_SCHED=random:3; the checker found the restore unordered with the communication
    stream once). The slower suite adds a replica lost inside a blocking exchange under reverse.
    A --check build runs a collective inside the call, so one whose peer stopped ends at once with
    the communicator in error (docs/emulator.md)."""
    global LIMIT_S
    LIMIT_S = 400
    os.environ["EMU_SCHED"] = "random:3"
    try:
        survivors_case(trainer, 2, 1, 1, "die@7:1", 2, "1@7", [1], "checked_lf2_lo3_random3", wire="int8", lo=3, lf=2,
                       more=("-wt", "20", "-x", "7"), steps=7)
    finally:
        os.environ.pop("EMU_SCHED")


def cmd_matrix(trainer):
    """The slower suite (not in make test): 4 x 1 and 2 x 2, ZeRO 1 and 2, fp32 and -rq int8, -lo 0
    and 1, each with -lf 1 and 2, replica 1 killed as step 5 begins (with -lo 1: while the exchange
    of the (fragment 0's) sync after step 4 is in flight); fs_rejoin; and on the --check build under
    EMU_SCHED=reverse, a replica lost inside a blocking exchange (the survivor restores its residual
    and redoes it)."""
    for (R, S) in ((4, 1), (2, 2)):
        for stage in (1, 2):
            for wire in (None, "int8"):
                for lo, lf in ((0, 1), (1, 1), (0, 2), (1, 2)):
                    lost = list(range(S, 2 * S))
                    survivors_case(trainer, R * S, S, stage, f"die@5:{2 * S - 1}", R, "1@5", lost,
                                   f"matrix_{R}x{S}_z{stage}_{wire or 'fp32'}_lo{lo}_lf{lf}", wire=wire, lo=lo, lf=lf)
    fs_rejoin(trainer)
    global LIMIT_S
    LIMIT_S = 400
    checked_case(CHECKED, "reverse")


def fake_hellos(port):
    """Before the lost rank starts again: a rank of another job and rank 0 (a replica training) say
    hello on rank 0's port as a rank starting would (llmc/rendezvous.h's RdvHello), and stay."""
    conns = []
    for job, rank in ((0x1234, 1), (None, 0)):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        job = job if job is not None else rdv_job("elastic-test")
        c.sendall(struct.pack("<IIQii", 0x32524754, 1, job, rank, 2))
        conns.append(c)
    fake_hellos.conns = conns  # kept open until the process ends


def rdv_job(token):
    """The job identity a -pj TOKEN gives (llmc/rendezvous.h: FNV-1a 64 of "-pj TOKEN")."""
    h = 0xcbf29ce484222325
    for ch in ("-pj " + token).encode():
        h = ((h ^ ch) * 0x100000001b3) & 0xffffffffffffffff
    return h


def rejoin_check(d, res, survivors, joiners, what, extra_ok=True, extra_text="", after=8, ref=()):
    """The checks of a rejoin in launch's result res: replica 1 lost at step 6 and back after the
    outer sync applied after step `after`; the survivors' and the new ranks' (keys joiners) exits,
    rank 0's lines, main.log, checkpoint 12, the losses and final weights against --drop 1@6
    --rejoin 1@after+1 (ref: more reference flags)."""
    codes = [res[r][0] for r in survivors]
    new = [res.get(k, ("none", "", "", 0))[0] for k in joiners]
    out0 = res[0][1]
    said = "replica 1 lost at step 6" in out0 and f"replica 1 rejoined after the outer sync of step {after}" in out0
    log = main_log(d)
    logged = "s:6 replicas:1" in log and f"s:{after + 1} replicas:2" in log
    le, we = against_reference(d, 2, "1@6", ("--rejoin", f"1@{after + 1}") + tuple(ref))
    ckpt = verifies(d, 12)
    ok = codes == [0] * len(codes) and new == [0] * len(new) and said and logged and ckpt and extra_ok
    ok = ok and le <= TOL and we <= TOL
    report(ok, f"{what}, started again with -y 1 after {res.get('restarted_at', -1):.0f} s: survivors {survivors} exit "
               f"{codes}, the new ranks exit {new}; {extra_text}lost and rejoined lines {'said' if said else 'NOT said'}, "
               f"main.log {'s:6 replicas:1, s:%d replicas:2' % (after + 1) if logged else 'WITHOUT them'}; checkpoint 12 "
               f"{'verifies' if ckpt else 'does NOT verify'}; against train_gpt2.py --replicas 2 --drop 1@6 --rejoin "
               f"1@{after + 1} {' '.join(ref)}: max loss error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not ok:
        for r in sorted(k for k in res if isinstance(k, int)):
            print("      " + tail(res, r))


def cmd_rejoin(trainer):
    """2 x 1 ZeRO 1, -n 4: rank 1 killed at step 6, started again with -y 1 (its checkpoint of step 4)
    while rank 0 trains on; it rejoins after the sync of step 8 and both train to step 12. Then the
    same for 2 x 2 ZeRO 2, rank 3 killed (rank 2 stops naming it), ranks 2 and 3 started again."""
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die@6:1", "-pj", "elastic-test"],
                    "rejoin_2x1", restart=1, before_restart=fake_hellos)
    strays = res[0][1].count("dropped a connection from 127.0.0.1")
    rejoin_check(d, res, [0], [2], "2 x 1, rank 1 killed at step 6", strays == 2,
                 f"hellos of another job and of rank 0 dropped with a line each ({strays} of 2); ")
    d, res = launch(trainer, 4, ["-ds", "2", "-z", "2", "-n", "4", "-fi", "die@6:3", "-d", str(T * ROWS)],
                    "rejoin_2x2", restart=[2, 3])
    rejoin_check(d, res, [0, 1], [4, 5], "2 x 2 ZeRO 2, rank 3 killed at step 6, ranks 2 and 3")
    if len(sys.argv) < 4 or sys.argv[3] != "quick":
        rejoin_dies(trainer)
        rejoin_fragments(trainer)


def rejoin_fragments(trainer):
    """2 x 1 -lf 2 -lo 1 (fragment 0's exchanges start after steps 4 and 8, fragment 1's after 2, 6
    and 10, each applied a step later; both sync after 12): rank 1 killed at step 6, started again
    with -y 1; it rejoins after whichever apply first finds it waiting with no exchange in flight,
    with both fragments' outer values (against --fragments 2 --overlap 1 --drop 1@6 --rejoin 1@s+1,
    s read from rank 0's line)."""
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-n", "4", "-lf", "2", "-lo", "1", "-fi", "die@6:1"],
                    "rejoin_lf2", restart=1)
    m = re.search(r"replica 1 rejoined after the outer sync of step (\d+)", res[0][1])
    rejoin_check(d, res, [0], [2], "2 x 1 -lf 2 -lo 1, rank 1 killed at step 6", after=int(m.group(1)) if m else 8,
                 ref=("--fragments", "2", "--overlap", "1"))


def lw_fresh(trainer, fs):
    """-lw 2, 3 x 1 started without rank 1, which comes 3 s in and rejoins at an outer sync (-pi tcp,
    or -pi fs: the start answered by the _join file)."""
    d, res = launch(trainer, 3, ["-ds", "1", "-z", "1", "-lw", "2", "-d", str(T * rows_for(3))],
                    "lw_fresh_fs" if fs else "lw_fresh", absent=(1,), late=(3.0, []), fs=fs)
    out0 = res[0][1]
    m = re.search(r"replica 1 rejoined after the outer sync of step (\d+)", out0)
    after = int(m.group(1)) if m else -1
    said = "-lw: 2 of 3 replicas train from step 1 (missing: 1)" in out0
    log = main_log(d)
    logged = "s:1 replicas:2" in log and f"s:{after + 1} replicas:3" in log
    codes = [res[r][0] for r in (0, 2, 3)]
    le, we = against_reference(d, 3, "1@1", ("--rejoin", f"1@{after + 1}")) if m else (float("inf"),) * 2
    report(codes == [0, 0, 0] and said and logged and le <= TOL and we <= TOL,
           f"-lw 2{' -pi fs' if fs else ''}, 3 x 1 without rank 1: ranks 0, 2 and rank 1 (started {res.get('late_at', -1):.0f} s in) exit {codes}; "
           f"rank 0 {'says 2 of 3 start' if said else 'does NOT say 2 of 3 start'}, rank 1 rejoined after step {after}, "
           f"main.log {'s:1 replicas:2, s:%d replicas:3' % (after + 1) if logged else 'WITHOUT the replicas lines'}; "
           f"against train_gpt2.py --replicas 3 --drop 1@1 --rejoin 1@{after + 1}: max loss error {le:.2e}, max weight "
           f"error {we:.2e} (tol {TOL:.0e})")
    if not (codes == [0, 0, 0] and said):
        for r in (0, 2, 3):
            print("      " + tail(res, r))


def start_without(trainer):
    """-lw 2 (issue 36 item 4: a run starts under another membership): 3 x 1 started without rank 1;
    after 2 s rank 0 starts replicas 0 and 2, and rank 1, started 3 s in, rejoins at an outer sync
    (against --replicas 3 --drop 1@1 --rejoin 1@s+1). Then a checkpoint of all three replicas
    (step 4, the last of a 4-step run) resumed by ranks 0 and 2 alone with -lw 2 for 12 steps
    (against --drop 1@5): a checkpoint written under one membership resumes under another."""
    lw_fresh(trainer, False)  # (-pi fs: cmd_fs)
    args = ["-ds", "1", "-z", "1", "-n", "4", "-d", str(T * rows_for(3))]
    d, res = launch(trainer, 3, args + ["-x", "4"], "lw_resume")  # checkpoint 4 of all three, then the run ends
    if os.path.exists(d + "/model_final.bin"):
        os.remove(d + "/model_final.bin")
    d, res2 = launch(trainer, 3, args + ["-y", "1", "-lw", "2"], "lw_resume", keep=True, absent=(1,))
    out0 = res2[0][1]
    said = "-lw: 2 of 3 replicas train from step 5 (missing: 1)" in out0 and "resumed from step 4" in out0
    log = main_log(d)
    codes = [res2[r][0] for r in (0, 2)]
    le, we = against_reference(d, 3, "1@5")
    ckpt = verifies(d, 12)
    report(codes == [0, 0] and said and "s:5 replicas:2" in log and ckpt and le <= TOL and we <= TOL,
           f"-lw 2, checkpoint 4 of 3 replicas resumed by ranks 0 and 2 alone: exits {codes}; rank 0 "
           f"{'says 2 of 3 train from step 5' if said else 'does NOT say so'}; checkpoint 12 "
           f"{'verifies' if ckpt else 'does NOT verify'}; against train_gpt2.py --replicas 3 --drop 1@5: max loss error "
           f"{le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not (codes == [0, 0] and said):
        for r in (0, 2):
            print("      " + tail(res2, r))
    # 2 x 2 ZeRO 2 without rank 3: replica 1 is not whole, so its rank 2 is told so (exit 1) and
    # replica 0 trains alone (against --replicas 2 --drop 1@1)
    d, res = launch(trainer, 4, ["-ds", "2", "-z", "2", "-lw", "2", "-d", str(T * ROWS)], "lw_2x2", absent=(3,))
    codes, last2 = [res[r][0] for r in (0, 1, 2)], tail(res, 2)
    le, we = against_reference(d, 2, "1@1")
    report(codes == [0, 0, 1] and "replica 1 was not whole" in last2 and le <= TOL and we <= TOL,
           f"-lw 2, 2 x 2 ZeRO 2 without rank 3: ranks 0-2 exit {codes} ({last2[:200]}); against train_gpt2.py "
           f"--replicas 2 --drop 1@1: max loss error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")


def rejoin_dies(trainer):
    """3 x 1, rank 1 killed at step 6 and started again, dies once admitted (-fi die_join), before the
    grown communicators exist: ranks 0 and 2 give up on them after -wt, agree on it over their own
    world, drop the rejoin and train on as two replicas (against --replicas 3 --drop 1@6)."""
    d, res = launch(trainer, 3, ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die@6:1,die_join@8:1", "-d", str(T * rows_for(3))], "rejoin_dies",
                    restart=1)
    codes, new, out0 = [res[r][0] for r in (0, 2)], res.get(3, ("none", "", "", 0))[0], res[0][1]
    m = re.search(r"replica 1 did not rejoin after the outer sync of step (\d+) \(([^)]*)\)", out0)
    log = main_log(d)
    logged = "s:6 replicas:2" in log and "replicas:3" not in log.split("s:6 replicas:2", 1)[-1]
    ckpt = verifies(d, 12)
    le, we = against_reference(d, 3, "1@6")
    ok = codes == [0, 0] and new == -signal.SIGKILL and m and logged and ckpt and le <= TOL and we <= TOL
    report(ok, f"3 x 1, rank 1 killed at step 6, started again, dies once admitted: survivors [0, 2] exit {codes}, "
               f"the new rank exit {new}; rank 0 says {repr(m.group(0)[:160]) if m else 'NO failed-rejoin line'}; "
               f"main.log {'s:6 replicas:2, never 3 after' if logged else 'WRONG'}; checkpoint 12 "
               f"{'verifies' if ckpt else 'does NOT verify'}; against train_gpt2.py --replicas 3 --drop 1@6: max loss "
               f"error {le:.2e}, max weight error {we:.2e} (tol {TOL:.0e})")
    if not ok:
        for r in sorted(k for k in res if isinstance(k, int)):
            print("      " + tail(res, r))


def manifest_missing(d, step):
    """The 'missing ...' line of checkpoint step's manifest in d ('' when none or no manifest)."""
    try:
        return ([x for x in open(f"{d}/DONE_{step:08d}").read().splitlines() if x.startswith("missing")] or [""])[0]
    except OSError:
        return ""


def resume_case(trainer, name, args, world, ckpt, cut, drop, rejoin, want0, k=1, absent=()):
    """A 2 x 1 run with -fi killing rank k (args), which writes checkpoint ckpt without replica k
    (want0: the survivor's exit code, the line its stderr must hold where 1); the checkpoints after
    ckpt and model_final.bin removed (cut), both ranks started again with -y 1: rank k rebuilds its
    replica from the outer state; the losses (but the steps absent from main.log) and final weights
    against train_gpt2.py --drop drop --rejoin rejoin."""
    d, res = launch(trainer, world, args, name)
    missing, gone = manifest_missing(d, ckpt), not os.path.exists(f"{d}/state_{ckpt:08d}_{k:05d}.bin")
    verify = subprocess.run(["./ckpt_tool", "info", d, str(ckpt)], capture_output=True, text=True)
    verified = verify.returncode == 0 and "complete, verifies" in verify.stdout
    first_ok = res[1 - k][0] == want0[0] and (want0[1] in res[1 - k][2])
    for s in cut:
        for f in os.listdir(d):
            if re.match(rf"(DONE|model|state)_{s:08d}", f):
                os.remove(f"{d}/{f}")
    if os.path.exists(d + "/model_final.bin"):
        os.remove(d + "/model_final.bin")
    d, res2 = launch(trainer, world, [a for a in args if not a.startswith(("die", "-fi"))] + ["-y", "1"], name, keep=True)
    rebuilt = f"checkpoint {ckpt} lost replica {k}" in res2[k][1]
    said = f"checkpoint {ckpt} was written by 1 of 2 replicas" in res2[0][1]
    log = main_log(d)
    logged = f"s:{ckpt + 1} replicas:2" in log
    le, we = against_reference(d, 2, drop, ("--rejoin", rejoin), absent)
    ok = first_ok and missing == f"missing dp_shard 1 replicas {k}" and gone and verified and rebuilt and said and logged
    ok = ok and res2[0][0] == 0 and res2[1][0] == 0 and le <= TOL and we <= TOL
    report(ok, f"2 x 1 {' '.join(args)}: rank {1 - k} exit {res[1 - k][0]}; checkpoint {ckpt}'s manifest '{missing}', rank {k}'s "
               f"state file {'absent' if gone else 'PRESENT'}, ckpt_tool {'verifies it' if verified else 'does NOT verify it'}; "
               f"-y 1 on both ranks: exits {res2[0][0]} {res2[1][0]}, rank {k} {'rebuilt' if rebuilt else 'did NOT rebuild'} "
               f"replica {k} from the outer state, main.log {'s:%d replicas:2' % (ckpt + 1) if logged else 'WITHOUT the replicas line'}; "
               f"against train_gpt2.py --replicas 2 --drop {drop} --rejoin {rejoin}: max loss error {le:.2e}, max "
               f"weight error {we:.2e} (tol {TOL:.0e}){' over the steps main.log has (not %s: its writer was lost)' % list(absent) if absent else ''}")
    if not ok:
        for r in (0, 1):
            print("      first run " + tail(res, r))
            print("      resumed " + tail(res2, r))


def cmd_resume(trainer):
    """Checkpoints written while a replica is lost, resumed by every replica (issue 36 item 4): at a
    sync step (-n 4: checkpoint 8, rank 1 killed at step 6), and inside a window (-lm 2: the run stops
    with a checkpoint of step 6, the step rank 1 was lost at; rank 0 killed at step 6: rank 1 writes
    the checkpoint of step 6 and stops)."""
    resume_case(trainer, "resume_sync", ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die@6:1"], 2, 8, (12,),
                "1@6", "1@9", (0, ""))
    resume_case(trainer, "resume_lm", ["-ds", "1", "-z", "1", "-lm", "2", "-fi", "die@6:1"], 2, 6, (),
                "1@6", "1@7", (1, "fewer than -lm 2: the run stops after checkpoint 6"))
    resume_case(trainer, "resume_rank0", ["-ds", "1", "-z", "1", "-fi", "die@6:0"], 2, 6, (),
                "0@6", "0@7", (1, "is lost, and moving those roles is not built yet: the run stops after checkpoint 6"), k=0, absent=(6,))
    start_without(trainer)


def stale_report(d, job, rank):
    """Before the run: a report file of rank `rank` for agreement 0 left by an earlier run (right
    job, world and magic, another run's nonce), which rank 0 must not count."""
    os.makedirs(d + ".rdv", exist_ok=True)
    with open(f"{d}.rdv/train_gpt2_rdv_{job:016x}_mb_0_{rank}", "wb") as f:
        f.write(struct.pack("<IIQiiiiQ", 0x314d4754, 0, job, rank, 3, 6, 0, 0x1234567))


def cmd_fs(trainer):
    """-pi fs: the agreement and the rejoin through files. 3 x 1, rank 1 killed at step 6 (a stale
    report file of rank 1 planted first: ignored with a line); 3 x 1 -lw 2 started without rank 1,
    which comes 3 s in and rejoins through rank 0's _join file (lw_fresh; the killed-and-restarted
    rejoin through files, fs_rejoin, runs in the slower suite)."""
    job = rdv_job("elastic-fs")
    d = f"{OUT}/fs_3x1"
    subprocess.run(["rm", "-rf", d, d + ".rdv"])
    stale_report(d, job, 1)
    args = ["-ds", "1", "-z", "1", "-fi", "die@6:1", "-d", str(T * rows_for(3)), "-pj", "elastic-fs"]
    d, res = launch(trainer, 3, args, "fs_3x1", keep=True, fs=True)
    le, we = against_reference(d, 3, "1@6")
    out0 = res[0][1]
    said = "replica 1 lost at step 6" in out0
    ignored = "not this run's rank 1's report for agreement 0" in out0
    ok = [res[0][0], res[2][0]] == [0, 0] and said and ignored and le <= TOL and we <= TOL
    report(ok, f"-pi fs, 3 x 1, rank 1 killed at step 6: ranks 0, 2 exit {res[0][0]} {res[2][0]}, 'replica 1 lost' "
               f"{'said' if said else 'NOT said'}, the stale report file {'ignored with a line' if ignored else 'NOT named'}; "
               f"against train_gpt2.py --replicas 3 --drop 1@6: max loss error {le:.2e}, max weight error {we:.2e} "
               f"(tol {TOL:.0e})")
    if not ok:
        for r in range(3):
            print("      " + tail(res, r))
    lw_fresh(trainer, True)
    ring_case(trainer, fs=True)


def fs_rejoin(trainer):
    """-pi fs, 2 x 1 -n 4, rank 1 killed at step 6 and started again with -y 1: it rejoins after the
    sync of step 8 through rank 0's _join file."""
    d, res = launch(trainer, 2, ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die@6:1", "-pj", "elastic-fs"], "fs_rejoin",
                    restart=1, fs=True)
    rejoin_check(d, res, [0], [2], "-pi fs, 2 x 1, rank 1 killed at step 6")


def refused(cmd, want, what, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    last = ([x for x in r.stderr.splitlines() if x.startswith("error:")] or [""])[-1]
    report(r.returncode == 1 and want in last, f"{what}: exit {r.returncode}: {last[:200]}")


def cmd_refusals():
    common = ["-e", model_file()] + BASE + ["-le", "1"]
    tcp = ["-pi", "tcp", "-ps", "127.0.0.1", "-pp", str(free_port())]
    env = dict(os.environ, RANK="0", WORLD_SIZE="1")
    refused(["./train_gpt2cpu"] + common, "no fault-tolerant communicators", "the CPU trainer refuses -le 1")
    refused([FP32] + common + ["-pi", "mpi"], "Open MPI ends the whole job", "-le 1 -pi mpi")
    refused([FP32] + [a for a in common if a not in ("-ls", str(H))] + ["-ls", "0"] + tcp, "needs -ls H > 0",
            "-le 1 without -ls")
    refused([FP32] + common + tcp + ["-wt", "0"], "needs -wt > 0", "-le 1 -wt 0")
    refused([FP32] + common + tcp, "needs at least 2 replicas", "-le 1 on one rank", env)
    refused([FP32] + [a for a in common if a != "-le"][:-1] + tcp + ["-lw", "2"], "needs -le 1", "-lw 2 without -le")


def mutant_trainer(name, path, target, replacement, check=False):
    """The emulated fp32 trainer built from a copy of the sources with `target` in `path` replaced
    (check: built with emucc --check)."""
    d = f"{OUT}/{name}"
    subprocess.run(["rm", "-rf", d])
    os.makedirs(d)
    subprocess.run(["cp", "-r", "llmc", "train_gpt2.cu", d], check=True)
    src = open(path).read()
    if src.count(target) != 1:
        sys.exit(f"the mutation {name} did not apply")
    open(f"{d}/{path}", "w").write(src.replace(target, replacement))
    subprocess.run(["dev/cuda_emu/emucc", "-O1"] + (["--check"] if check else []) +
                   ["-DENABLE_FP32", "-o", d + "/trainer", d + "/train_gpt2.cu", "-lnccl"], check=True)
    return d + "/trainer"


NO_POLL = """    if (r == ncclInProgress) {
        char src[96];
        r = nccl_settle(comm, wait_limit_s(src, sizeof(src)));
    }
"""


def cmd_mutant(part):
    """part a: a survivor whose outer step still divides by R (not the R' replicas left) must fail drop; a
    replica rebuilt from a checkpoint that keeps the AdamW moments of the replica it read must fail
    resume; part b: the residual restored on the communication stream must fail checked (a race); a
    trainer that never polls a nonblocking communicator's ncclInProgress must fail (the emulator's
    report)."""
    caught = []
    mutants = (
            ("mutant_mean", "llmc/replica_device.cuh", "float inv_R = 1.0f / (float)dp->el.live_R;",
             "float inv_R = 1.0f / (float)p->mesh.dp_replicate;",
             lambda t: survivors_case(t, 2, 1, 1, "die@6:1", 2, "1@6", [1], "mutant_2x1")),
            ("mutant_rebuild", "llmc/ckpt_layout.h", "    memset(arrays->a[STATE_M], 0, t->owned * sizeof(float));\n",
             "", lambda t: resume_case(t, "mutant_resume", ["-ds", "1", "-z", "1", "-n", "4", "-fi", "die@6:1"], 2, 8,
                                       (12,), "1@6", "1@9", (0, ""))),
            # the residual restored on the communication stream: nothing orders it before stream 0's
            # messages of the redone exchange read it (emucc --check must see the race)
            ("mutant_restore_stream", "llmc/replica_device.cuh", RESTORE, RESTORE.replace("res_keep, 0)",
             "res_keep, dp->link.comm_stream)"), lambda t: checked_case(t, "reverse", "mutant_checked")),
            # a call on a nonblocking communicator that returned ncclInProgress never polled out of it:
            # the emulator reports the next call on that communicator (exit 66)
            ("mutant_no_poll", "llmc/device_wait.cuh", NO_POLL, "    if (r == ncclInProgress) { return; }\n",
             lambda t: launch(t, 2, ["-ds", "1", "-z", "1", "-x", "2"], "mutant_no_poll_2x1")[1]))
    for name, path, target, replacement, run in mutants[:2] if part == "a" else mutants[2:]:
        before = test_diloco.failures
        res = run(mutant_trainer(name, path, target, replacement, check=name == "mutant_restore_stream"))
        caught.append(test_diloco.failures > before)
        if name == "mutant_restore_stream": # caught by the checker, not by chance
            caught[-1] = caught[-1] and "cuda_emu --check" in res[0][2] and "nothing orders them" in res[0][2]
        if name == "mutant_no_poll": # (a short run, no check of its own: the report is the catch)
            caught[-1] = res[0][0] == 66 and "not yet polled out of it" in res[0][2]
        print(f"the mutant {name} " + ("fails as it must" if caught[-1] else "PASSED: the test cannot see it"))
    test_diloco.failures = 0 if all(caught) else 1


def cmd_muon(trainer):
    """-opt muon under ZeRO 1, 2 (each matrix owned whole by one rank of the shard group) with -le 1:
    a 2 x 2 ZeRO 1 replica lost at step 6, and a 2 x 2 ZeRO 2 replica killed and rejoined, against
    train_gpt2.py --optimizer muon; a rejoining replica that keeps its owners' Muon momentum (not
    zeroed, as --rejoin's new optimizer is) must fail the rejoin."""
    mu, ref = ("-opt", "muon"), ("--optimizer", "muon")
    survivors_case(trainer, 4, 2, 1, "die@6:3", 2, "1@6", [2, 3], "muon_die_2x2", more=mu, ref=ref)

    def rejoin(t, name):
        d, res = launch(t, 4, ["-ds", "2", "-z", "2", "-n", "4", "-fi", "die@6:3", "-d", str(T * ROWS), *mu], name,
                        restart=[2, 3])
        what = f"-opt muon 2 x 2 ZeRO 2 ({name}{', meant to fail' if 'mutant' in name else ''}), rank 3 killed at step 6"
        rejoin_check(d, res, [0, 1], [4, 5], what + ", ranks 2 and 3", ref=ref)
    rejoin(trainer, "muon_rejoin_2x2")
    before = test_diloco.failures
    rejoin(mutant_trainer("mutant_muon_join", "llmc/replica_device.cuh",
                          "    if (dp->muon_sharded) { cudaCheck(cudaMemset(dp->owned.mom, 0,", "    if (0) { cudaCheck(cudaMemset(dp->owned.mom, 0,"),
           "mutant_muon_rejoin")
    caught = test_diloco.failures > before
    test_diloco.failures = before
    report(caught, "a rejoining replica that keeps its owners' Muon momentum fails the rejoin check above")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    trainer = sys.argv[2] if len(sys.argv) > 2 else CHECKED if what == "checked" else FP32
    commands = {"matrix": cmd_matrix, "rejoin": cmd_rejoin, "resume": cmd_resume, "sync": cmd_sync, "fs": cmd_fs,
                "checked": cmd_checked, "overlap": cmd_overlap, "muon": cmd_muon}
    if what in ("drop", "drop_a", "drop_b"):
        cmd_drop(trainer, what[5:])
    elif what in commands:
        commands[what](trainer)
    elif what == "refusals":
        cmd_refusals()
    elif what in ("mutant_a", "mutant_b"):
        cmd_mutant(what[-1])  # (its checks fail as they must: their failures are not this test's)
    else:
        sys.exit(__doc__)
    sys.exit(1 if test_diloco.failures else 0)
