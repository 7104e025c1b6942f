#!/usr/bin/env python3
"""A peer that stops answering stops the job (docs/distributed.md, "When a rank fails"):

    /usr/bin/python3 dev/test_peer_stops.py WORK_DIR TRAINER

2 ranks of TRAINER (the emulated GPU trainer, FP32, ZeRO 1): rank 1 stops answering (-fi hang_fwd /
hang_ckpt / hang_eval, llmc/faults.h, which under the emulator also stop its NCCL: the `peer stops`
fault) inside a step's forward, inside the checkpoint write, and inside a HellaSwag evaluation. Each
time rank 0 must exit non-zero on its own with one error line naming the step, its phase (forward /
checkpoint / HellaSwag) and rank 1, from NCCL's ncclRemoteError after the emulator's detection delay
(EMU_NCCL_DETECT_S, 0.5 s), within that delay plus a few seconds. Then with detection off (a live but
hung peer, which NCCL cannot tell) in the forward and the checkpoint: the wait's deadline ends rank 0,
the line naming the step, the phase, the wait and the limit that expired (-wt, or 10 x -wt for a wait
with a grace: a checkpoint's), within that limit plus a few seconds. mpirun then ends the hung rank.
"""
import os
import random
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
sys.path.insert(0, os.path.join(ROOT, "dev"))
from data_common import write_eval_file  # noqa: E402
from test_hellaswag import synthetic_examples  # noqa: E402


def main():
    work, trainer = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    evalf = os.path.join(work, "eval.bin")
    write_eval_file(evalf, synthetic_examples(257, 11))
    base = ["-e", "d2", "-V", "257", "-sl", "64", "-i", "data/kjv/kjv_train.bin", "-j", "", "-b", "2", "-t", "32",
            "-d", "128", "-l", "1e-3", "-s", "0", "-z", "1"]
    detect, slack = 0.5, 6.0
    fwd, ckpt, ev = ["-x", "4"], ["-x", "4", "-n", "1"], ["-x", "4", "-v", "2", "-h", "1", "-hf", evalf]
    cases = [  # (name, flags, fault, -wt, detection on, phase named, the limit: the detection delay or the wait's)
        # with detection on, -wt only has to outlast a slow peer before the fault (a loaded 2-core host
        # once took more than 3 s to bring rank 1 to the HellaSwag evaluation): 10 s
        ("forward of step 2", fwd, "hang_fwd@2:1", 10, True, "the forward, backward and update", detect),
        ("checkpoint write of step 1", ckpt, "hang_ckpt@1:1", 10, True, "the checkpoint write", detect),
        ("HellaSwag evaluation after step 2", ev, "hang_eval@2:1", 10, True, "the HellaSwag evaluation", detect),
        ("forward of step 2, detection off", fwd, "hang_fwd@2:1", 2, False, "the forward, backward and update", 2),
        ("checkpoint write of step 1, detection off", ckpt, "hang_ckpt@1:1", 2, False, "the checkpoint write", 20),
    ]
    ok = True
    for name, flags, fault, wt, detected, phase, limit in cases:
        out = os.path.join(work, fault.split("@")[0] + ("" if detected else "_off"))
        env = dict(os.environ, EMU_NCCL_DETECT_S="0.5" if detected else "off")
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "EMU_NCCL_DETECT_S", trainer] + \
            base + flags + ["-wt", str(wt), "-fi", fault, "-o", out]
        # stderr read as it comes: the time from rank 1's fault line to the end of the job
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        lines, hang_at = [], None
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            if hang_at is None and "stops answering" in line:
                hang_at = time.time()
        p.wait(timeout=120)
        took = time.time() - hang_at if hang_at else float("inf")
        stderr = "\n".join(lines)
        hung = re.search(r"fault injection: rank 1 stops answering in .* of step (\d+)", stderr)
        err = [l for l in lines if l.startswith("error: rank 0")]
        # the step rank 0 names: the step it is running (an evaluation after step s runs in step s + 1)
        step = (int(hung.group(1)) + (1 if "eval" in fault else 0)) if hung else -1
        if detected:
            why = r"rank 1 stopped answering \(NCCL: remote process exited or there was a network error\) while " \
                r"waiting for \w"
        else:
            lim = rf"10 x -wt {wt} s, the grace of a wait that may be long" if limit > wt else rf"-wt {wt} s"
            why = rf"waited {limit} s \({lim}\) for .+: a peer has died or hangs"
        named = len(err) > 0 and re.match(rf"error: rank 0: step {step}, {phase}: {why}", err[0])
        good = p.returncode != 0 and hung is not None and named is not None and took < limit + slack
        print(f"{'ok  ' if good else 'FAIL'} rank 1 stops in the {name}: exit {p.returncode}, {took:.1f} s after the "
              f"stop (limit {limit:g} s + {slack:.0f} s): {err[:1]}")
        ok &= good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
