#!/usr/bin/env python3
"""Test of in-loop HellaSwag (`-h 1`, llmc/eval_loader.h), run by dev/tests/60_ecosystem.sh:

    /usr/bin/python3 dev/test_hellaswag.py WORK_DIR TRAINER RANKS [RANKS ...] [--equivalence-only]

Builds a random model (every tensor random; V 300) and a synthetic eval file of 13 examples
(2 to 5 completions, contexts of 1 to 14 tokens, completions of 1 to 9; bytes packed here by
hand and compared with dev/data/data_common.py's writer), then runs TRAINER with -h 1 on each
rank count (mpirun) with learning rate 0. The step-0 choices and per-completion mean losses
(TRAIN_GPT2_EVAL_DUMP) must equal a PyTorch reference's (train_gpt2.py's forward and
cross-entropy; losses within 1e-4), every example scored by exactly one rank, and the printed and
logged accuracy equal to the reference's. Also (unless --equivalence-only): -hn limits the
examples, and bad eval files stop the run with one error line naming the file.
"""
import glob
import os
import random
import re
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
import train_gpt2 as ref  # noqa: E402
from data_common import write_eval_file, write_shard  # noqa: E402

LOSS_TOL = 1e-4
T = 24
failures = []


def expect(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def synthetic_examples(V, seed):
    rnd = random.Random(seed)
    out = []
    for _ in range(13):
        k = rnd.choice([2, 4, 4, 4, 5])
        ctx = [rnd.randrange(V) for _ in range(rnd.randint(1, 14))]
        comps = [[rnd.randrange(V) for _ in range(rnd.randint(1, 9))] for _ in range(k)]
        out.append((rnd.randrange(k), ctx, comps))
    return out


def pack_by_hand(examples):
    """The eval file's bytes, written out from the format's description."""
    body, longest = b"", 0
    for i, (label, ctx, comps) in enumerate(examples):
        words = [i, label, len(comps), len(ctx)] + ctx
        for c in comps:
            words += [len(c)] + c
        ex = struct.pack("<%dH" % (len(words) + 2), 65535, 2 * (len(words) + 2), *words)
        longest = max(longest, len(ex))
        body += ex
    return struct.pack("<256i", *([20240522, 1, len(examples), longest] + [0] * 252)) + body


def reference(P, cfg, examples):
    """choice and the completions' mean token losses per example, from train_gpt2.py's forward."""
    out = []
    with torch.no_grad():
        for label, ctx, comps in examples:
            means = []
            for c in comps:
                row = torch.tensor(ctx + c)
                logits = ref.forward(P, cfg, row[:-1][None])[0]
                losses = F.cross_entropy(logits, row[1:], reduction="none")
                means.append(losses[len(ctx) - 1:].mean().item())
            out.append((min(range(len(means)), key=lambda j: means[j]), means))
    return out


def run_trainer(trainer, ranks, args, env_extra, log):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), trainer] + args
    env = dict(os.environ, OMP_NUM_THREADS="1", **env_extra)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    open(log, "w").write(r.stdout + r.stderr)
    return r


def main():
    argv = [a for a in sys.argv[1:] if a != "--equivalence-only"]
    equivalence_only = len(argv) < len(sys.argv) - 1
    work, trainer, rank_counts = argv[0], argv[1], [int(x) for x in argv[2:]]
    os.makedirs(work, exist_ok=True)
    cfg = dict(T_max=32, V=300, L=2, NH=4, C=64, Vp=ref.padded_vocab(300))
    g = torch.Generator().manual_seed(7)
    P = {n: torch.randn(s, generator=g) * (0.3 if n == "wte" else 0.1) + (1.0 if n in ("ln1w", "ln2w", "lnfw") else 0.0)
         for n, s in ref.param_shapes(cfg).items()}
    P["wte"][cfg["V"]:] = 0.0
    model = os.path.join(work, "m.bin")
    ref.write_model(model, P, cfg)
    examples = synthetic_examples(cfg["V"], 11)
    evalf = os.path.join(work, "eval.bin")
    write_eval_file(evalf, examples)
    expect(open(evalf, "rb").read() == pack_by_hand(examples), "data_common.write_eval_file == the bytes packed by hand")
    train = os.path.join(work, "train.bin")
    write_shard(train, [random.Random(3).randrange(cfg["V"]) for _ in range(4000)], cfg["V"])

    want = reference(P, cfg, examples)
    right = sum(int(c == ex[0]) for (c, _), ex in zip(want, examples))
    acc = right / len(examples)
    print(f"reference: choices {[c for c, _ in want]}, labels {[ex[0] for ex in examples]}, accuracy {right}/13")
    expect(0 < right < len(examples), "the labels make the accuracy neither 0 nor 1")

    base = ["-e", model, "-i", train, "-j", "", "-b", "3", "-t", str(T), "-x", "1", "-v", "1", "-s", "0", "-l", "0",
            "-h", "1", "-hf", evalf]
    for ranks in rank_counts:
        tag = f"np{ranks}"
        dump = os.path.join(work, f"dump_{tag}")
        for f in glob.glob(dump + ".*"):
            os.unlink(f)
        logdir = os.path.join(work, f"log_{tag}")
        r = run_trainer(trainer, ranks, base + ["-o", logdir], {"TRAIN_GPT2_EVAL_DUMP": dump},
                        os.path.join(work, f"run_{tag}.txt"))
        if r.returncode != 0:
            expect(False, f"{ranks} ranks: trainer exit {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
            continue
        got, owners = {}, {}
        for f in sorted(glob.glob(dump + ".*")):
            for line in open(f):
                v = line.split()
                if v[0] != "0":
                    continue
                k = int(v[1])
                owners[k] = owners.get(k, 0) + 1
                got[k] = (int(v[2]), int(v[3]), [float(x) for x in v[4:]])
        expect(sorted(owners) == list(range(13)) and set(owners.values()) == {1},
               f"{ranks} ranks: every example scored by exactly one rank")
        if len(got) != 13:
            continue
        err = max(abs(a - b) for k in range(13) for a, b in zip(got[k][2], want[k][1]))
        expect(all(len(got[k][2]) == len(want[k][1]) for k in range(13)), f"{ranks} ranks: completions per example")
        expect(err <= LOSS_TOL, f"{ranks} ranks: completion mean losses vs PyTorch, max error {err:.2g} (tol {LOSS_TOL})")
        expect([got[k][1] for k in range(13)] == [c for c, _ in want], f"{ranks} ranks: per-example choices equal PyTorch's")
        expect([got[k][0] for k in range(13)] == [ex[0] for ex in examples], f"{ranks} ranks: labels read back")
        m = re.search(r"step 0: hellaswag accuracy (\S+) \((\d+)/(\d+)\)", r.stdout)
        expect(m is not None and int(m.group(2)) == right and int(m.group(3)) == 13,
               f"{ranks} ranks: printed {m.group(0) if m else 'nothing'}, want {right}/13")
        logged = [float(x) for x in re.findall(r"^s:0 eval:(\S+)$", open(os.path.join(logdir, "main.log")).read(), re.M)]
        expect(len(logged) == 1 and abs(logged[0] - acc) < 1e-6, f"{ranks} ranks: main.log s:0 eval:{logged} == {acc:.6f}")

    if not equivalence_only:
        other_checks(trainer, work, base, want, examples, evalf)
    print(f"{len(failures)} failures" if failures else "all hellaswag checks passed")
    sys.exit(1 if failures else 0)


def other_checks(trainer, work, base, want, examples, evalf):
    # -hn: only the first 5 examples
    r = run_trainer(trainer, 1, base + ["-hn", "5"], {}, os.path.join(work, "run_hn.txt"))
    right5 = sum(int(c == ex[0]) for (c, _), ex in zip(want[:5], examples[:5]))
    expect(f"step 0: hellaswag accuracy {right5 / 5:.4f} ({right5}/5)" in r.stdout, f"-hn 5 scores {right5}/5")

    # bad eval files: one error line naming the file, non-zero exit
    good = open(evalf, "rb").read()
    bad = {
        "magic": b"\x00" + good[1:],
        "truncated": good[:-3],
        "short": good[:-4],
        "version": good[:4] + struct.pack("<i", 2) + good[8:],
    }
    too_long = [(0, list(range(20)), [list(range(10)), [1]])]
    big_token = [(0, [1, 2], [[299], [300]])]
    for name, data in bad.items():
        open(os.path.join(work, f"bad_{name}.bin"), "wb").write(data)
    write_eval_file(os.path.join(work, "bad_long.bin"), too_long)
    write_eval_file(os.path.join(work, "bad_token.bin"), big_token)
    for name in list(bad) + ["long", "token"]:
        path = os.path.join(work, f"bad_{name}.bin")
        r = subprocess.run([trainer] + base[:-1] + [path], capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        lines = r.stderr.strip().splitlines()
        expect(r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and path in lines[0],
               f"bad eval file ({name}): {lines[-1] if lines else 'no error'}")


if __name__ == "__main__":
    main()
