"""Checks of train_gpt2.py --drop k@s / --rejoin k@s (elastic DiLoCo replicas), run by
dev/tests/10_python_ref.sh (about 5 s on one core). A 2-layer, 16-channel model, vocab 64, B 2,
T 8, on shards written here; train_gpt2.py's main() runs in this process.

  alone      --replicas 2 --drop k@1 (k = 0, 1) is replica 1-k trained alone: bitwise the
             --replicas 1 run with the same H and outer settings (fp32, and int8 with error
             feedback) on a shard whose consecutive batches are replica 1-k's rows; with H 1, outer
             lr 1, momentum 0, plain AdamW (--sync-every 0) within 1e-6
  naive      R 3, H 2, 8 steps with drops and rejoins (fp32 Nesterov; int8, and int4 top-k 0.25
             with --wire-shards 2, whose syncs run over 3, 2, 3, 2 replicas): losses and the final
             model against a loop written here within 1e-6. The loop has its own AdamW (step count
             the global step), outer Nesterov step, mean over the survivors, rejoin (outer model,
             zero moments and residual), slicing over R' and per-parameter residuals; it takes only
             the forward/backward, the codec and the shard layout from train_gpt2.py (checked by
             --selftest and against the C trainers); with no drop it must equal the plain run
  mutants    the planted bugs of --drop-bug (1: outer mean / R instead of / R'; 2: a rejoined
             replica keeps its stale AdamW moments; 3: its AdamW step count restarts at 1; 4: the
             survivors' residuals zeroed when the number of replicas changes; 5: a rejoined replica
             keeps its old residual) must each fail the naive check, and bug 1 the alone check
  refusals   every malformed or impossible --drop/--rejoin stops with an error naming the flag
Exits non-zero on any failure.
"""
import contextlib
import io
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_diloco as dl  # noqa: E402  (report: one ok/FAIL line, counted)
import train_gpt2 as tg  # noqa: E402

B, T, V = 2, 8, 64
MODEL = ["--model", "d2", "--channels", "16", "--heads", "2", "--vocab", str(V), "--max-seq", str(T)]
TRAIN = ["--B", str(B), "--T", str(T), "--lr", "1e-3", "--weight-decay", "0.1"]
NESTEROV = ["--outer-lr", "0.7", "--outer-momentum", "0.9"]
TMP = os.path.join(ROOT, "build", "test_tmp", "ref_drop")
report = dl.report


def write_shard(path, toks):
    """A data shard written here (docs/formats.md): 256 int32 header, then uint16 tokens."""
    hdr = struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253))
    with open(path, "wb") as f:
        f.write(hdr + np.asarray(toks, "<u2").tobytes())
    return path


def read_model(path):
    """The float32 values of a v3 model file, in file order (the 1024-byte header skipped)."""
    raw = open(path, "rb").read()
    assert struct.unpack("<2i", raw[:8]) == (20240326, 3), path
    return np.frombuffer(raw, "<f4", offset=1024).copy()


def reference(args, tag):
    """train_gpt2.py's main() in this process with args; returns (losses, final model values)."""
    losses, final = f"{TMP}/{tag}.txt", f"{TMP}/{tag}.bin"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = tg.main(["--load", MODEL_FILE] + TRAIN + args + ["--write-losses", losses, "--write-final", final])
    assert rc == 0, (args, out.getvalue()[-500:])
    return [float(v) for v in open(losses)], read_model(final)


def refusal(args):
    """main() with args must stop through argparse (exit 2); returns its last stderr line."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            tg.main(["--load", MODEL_FILE] + TRAIN + args)
    except SystemExit as e:
        return e.code, err.getvalue().strip().splitlines()[-1]
    return 0, ""


def diffs(a, b):
    (la, wa), (lb, wb) = a, b
    if len(la) != len(lb):
        return math.inf, math.inf
    return max(abs(u - v) for u, v in zip(la, lb)), float(np.max(np.abs(wa - wb)))


# ----------------------------------------------------------------------------------------------
# alone: replica 1-k of a 2-replica run that loses replica k before step 1 is a 1-replica run

def survivor_shards(u, steps):
    """(X, Y): a 2-replica shard X of exactly steps global batches, and a 1-replica shard Y whose
    batch t is replica u's rows of X's batch t. Replica u's last target of step t is X[2nt + (u+1)n]
    (n = B*T) while Y's is the first token of its next batch, X[2n(t+1) + un]; X is drawn so that
    the two are the same token."""
    n = B * T
    x = np.random.default_rng(10 + u).integers(0, V, 2 * n * steps + 1)
    for t in range(steps - 1):
        x[2 * n * (t + 1) + u * n] = x[2 * n * t + (u + 1) * n]
    y = np.concatenate([x[2 * n * t + u * n:2 * n * t + (u + 1) * n] for t in range(steps)]
                       + [x[2 * n * (steps - 1) + (u + 1) * n:][:1]])
    for t in range(steps):  # the construction checked by slicing both streams here
        gx = x[2 * n * t:2 * n * (t + 1) + 1]
        gy = y[n * t:n * (t + 1) + 1]
        assert (gx[u * n:(u + 1) * n] == gy[:n]).all() and (gx[u * n + 1:(u + 1) * n + 1] == gy[1:]).all()
    return write_shard(f"{TMP}/pair{u}.bin", x), write_shard(f"{TMP}/alone{u}.bin", y)


def cmd_alone(bug=0):
    steps, ok_all = 7, True
    extra = ["--drop-bug", str(bug)] if bug else []
    for k in (0, 1):
        u = 1 - k
        X, Y = survivor_shards(u, steps)
        base = ["--steps", str(steps)]
        for fmt in ("fp32", "int8"):
            got = reference(base + ["--data", X, "--replicas", "2", "--sync-every", "3", "--drop", f"{k}@1",
                                    "--wire-format", fmt] + NESTEROV + extra, f"drop{k}_{fmt}")
            want = reference(base + ["--data", Y, "--sync-every", "3", "--wire-format", fmt] + NESTEROV,
                             f"alone{u}_{fmt}")
            le, we = diffs(got, want)
            ok = le == 0 and we == 0
            ok_all &= ok
            if not bug:
                report(ok, f"R 2 --drop {k}@1 -H 3 Nesterov {fmt}: bitwise replica {u} alone (R 1) on its rows: "
                           f"loss diff {le:.1e}, weight diff {we:.1e}")
        got = reference(base + ["--data", X, "--replicas", "2", "--sync-every", "1", "--drop", f"{k}@1"] + extra,
                        f"drop{k}_h1")
        want = reference(base + ["--data", Y], f"plain{u}")
        le, we = diffs(got, want)
        ok = le <= 1e-6 and we <= 1e-6 and len(got[0]) == steps
        ok_all &= ok
        if not bug:
            report(ok, f"R 2 --drop {k}@1 -H 1, outer lr 1, momentum 0 == plain AdamW on replica {u}'s rows: "
                       f"loss diff {le:.1e}, weight diff {we:.1e} (tol 1e-6)")
    return ok_all


# ----------------------------------------------------------------------------------------------
# naive: the elastic run written out here

def flat(P):
    return np.concatenate([P[n].detach().numpy().reshape(-1) for n in tg.PARAM_NAMES]).astype(np.float32)


def unflat(v, like):
    out, off = {}, 0
    for n in tg.PARAM_NAMES:
        k = like[n].numel()
        out[n] = torch.from_numpy(v[off:off + k].copy()).reshape(like[n].shape)
        off += k
    return out


def adamw(P, g, m, v, step, lr=1e-3, wd=0.1, clip=1.0, b1=0.9, b2=0.95, eps=1e-8):
    """One AdamW step at 1-based step number `step` (bias correction), after clipping the global norm."""
    norm = torch.sqrt(sum((g[n] * g[n]).sum() for n in tg.PARAM_NAMES))
    s = clip / norm if norm > clip else 1.0
    for n in tg.PARAM_NAMES:
        gn = g[n] * s
        m[n] = b1 * m[n] + (1.0 - b1) * gn
        v[n] = b2 * v[n] + (1.0 - b2) * gn * gn
        w = wd if n in tg.DECAYED else 0.0
        mh, vh = m[n] / (1.0 - b1 ** step), v[n] / (1.0 - b2 ** step)
        P[n] = P[n] - lr * (mh / (torch.sqrt(vh) + eps) + w * P[n])


def fragment_masks(P0, L, F):
    """Flat boolean masks of the F streaming fragments, by the documented rule: layer l's tensors
    (their first index) in fragment l * F // L, wte and wpe in fragment 0, lnfw and lnfb in F - 1."""
    masks = []
    for f in range(F):
        parts = []
        for n in tg.PARAM_NAMES:
            w = P0[n]
            if n in ("wte", "wpe", "lnfw", "lnfb"):
                parts.append(np.full(w.numel(), (0 if n in ("wte", "wpe") else F - 1) == f))
            else:
                per = w.numel() // L
                parts.append(np.concatenate([np.full(per, l * F // L == f) for l in range(L)]))
        masks.append(np.concatenate(parts))
    return masks


def naive(tokens, R, H, steps, alive, fmt="fp32", density=0.0, shards=0, olr=0.7, mom=0.9, overlap=0, fragments=1):
    """alive(r, t): replica r takes part in step t. Returns (losses, the outer model after the last sync).
    fmt not fp32: every shard rank's owned vector (train_gpt2.owned_layout's indices, -1 padding)
    is cut into R' slices, survivor i owning slice i; each survivor sends message + its residual
    (one per parameter), keeps what the codec lost, and the sum of each slice is sent back encoded
    (top-k with density > 0, the sum keeping R' times as many). overlap > 0: a sync (but the last)
    keeps every live replica's parameters and residual, and `overlap` steps later (or at the last
    step) the exchange is computed from those over the replicas of it still alive and applied, each
    live replica keeping what its own steps added since. fragments > 1 (fp32): fragment f syncs after
    the steps t with t - f * H // F a non-negative multiple of H and after the last, each over the
    replicas alive at t, on its own elements (fragment_masks); with overlap, each fragment's exchange
    is held as above, its own, applied (after the ones of earlier steps, in fragment order) on its
    elements only."""
    P0, cfg = tg.load_model(MODEL_FILE)
    reps = [{n: t.clone() for n, t in P0.items()} for _ in range(R)]
    mo = [{n: torch.zeros_like(t) for n, t in P0.items()} for _ in range(R)]
    vo = [{n: torch.zeros_like(t) for n, t in P0.items()} for _ in range(R)]
    outer, buf = flat(P0), np.zeros(flat(P0).size, np.float32)
    N = outer.size
    res = [np.zeros(N, np.float32) for _ in range(R)]
    losses, n, pending, held = [], B * T, None, {}

    def mean_delta(msgs, over):
        """The mean over the replicas `over` (their messages msgs) as the wire carries it."""
        Rp = len(over)
        if fmt == "fp32":
            total = msgs[0]
            for d in msgs[1:]:
                total = total + d
            return total / np.float32(Rp)
        total = np.zeros(N, np.float32)  # survivor i of Rp owns slice i of each padded owned vector
        for idx in tg.owned_layout(cfg, shards):
            k, have = -(-idx.size // Rp), idx >= 0
            dec = []
            for i, r in enumerate(over):
                mm = np.zeros(Rp * k, np.float32)
                mm[:idx.size][have] = msgs[i][idx[have]] + res[r][idx[have]]
                d = np.concatenate([tg.wire_roundtrip(mm[j * k:(j + 1) * k], fmt, density) for j in range(Rp)])
                res[r][idx[have]] = (mm - d)[:idx.size][have]
                dec.append(d)
            got = np.zeros(Rp * k, np.float32)
            for j in range(Rp):
                part = dec[0][j * k:(j + 1) * k]
                for d in dec[1:]:
                    part = part + d[j * k:(j + 1) * k]
                got[j * k:(j + 1) * k] = tg.wire_roundtrip(part, fmt, density, Rp)
            total[idx[have]] = got[:idx.size][have]
        return total / np.float32(Rp)

    for t in range(1, steps + 1):
        g = tokens[(t - 1) * R * n:t * R * n + 1]
        assert g.size == R * n + 1
        live = [r for r in range(R) if alive(r, t)]
        for r in live:
            if t > 1 and not alive(r, t - 1):  # rejoins: the outer model, fresh moments and residual
                reps[r] = unflat(outer, P0)
                mo[r] = {k: torch.zeros_like(w) for k, w in P0.items()}
                vo[r] = {k: torch.zeros_like(w) for k, w in P0.items()}
                res[r] = np.zeros(N, np.float32)
        step_losses = []
        for r in live:
            x = torch.from_numpy(g[r * n:(r + 1) * n].reshape(B, T))
            y = torch.from_numpy(g[r * n + 1:(r + 1) * n + 1].reshape(B, T))
            loss, grads, _ = tg.loss_and_grads(reps[r], cfg, x, y)
            step_losses.append(float(loss))
            adamw(reps[r], grads, mo[r], vo[r], t)
        losses.append(sum(step_losses) / len(live))
        if pending and (t >= pending[0] + overlap or t == steps):
            t0, snaps, kept, over = pending
            left = [r for r in over if alive(r, t)]
            for r in left:
                res[r] = kept[r].copy()
            delta = mean_delta([outer - snaps[r] for r in left], left)
            buf = np.float32(mom) * buf + delta
            outer = outer - np.float32(olr) * (delta + np.float32(mom) * buf)
            for r in live:
                reps[r] = unflat(outer + (flat(reps[r]) - snaps[r]), P0)
            pending = None
        if fragments > 1:
            masks = fragment_masks(P0, cfg["L"], fragments)
            for f in sorted(held):  # exchanges in flight, due `overlap` steps after they started
                t0, snaps, over = held[f]
                if t < t0 + overlap and t != steps:
                    continue
                m, left = masks[f], [r for r in over if alive(r, t)]
                delta = mean_delta([outer - snaps[r] for r in left], left)
                buf[m] = np.float32(mom) * buf[m] + delta[m]
                outer[m] = outer[m] - np.float32(olr) * (delta[m] + np.float32(mom) * buf[m])
                for r in live:
                    v = flat(reps[r])
                    v[m] = outer[m] + (v[m] - snaps[r][m])
                    reps[r] = unflat(v, P0)
                del held[f]
            for f, m in enumerate(masks):
                d = t - f * H // fragments
                if not (t == steps or (d >= 0 and d % H == 0)):
                    continue
                if overlap and t != steps:
                    held[f] = (t, {r: flat(reps[r]) for r in live}, live)
                    continue
                delta = mean_delta([outer - flat(reps[r]) for r in live], live)
                buf[m] = np.float32(mom) * buf[m] + delta[m]
                outer[m] = outer[m] - np.float32(olr) * (delta[m] + np.float32(mom) * buf[m])
                for r in live:
                    v = flat(reps[r])
                    v[m] = outer[m]
                    reps[r] = unflat(v, P0)
            continue
        if t % H == 0 or t == steps:
            if overlap and t != steps:
                pending = (t, {r: flat(reps[r]) for r in live}, {r: res[r].copy() for r in live}, live)
                continue
            delta = mean_delta([outer - flat(reps[r]) for r in live], live)
            buf = np.float32(mom) * buf + delta
            outer = outer - np.float32(olr) * (delta + np.float32(mom) * buf)
            for r in live:
                reps[r] = unflat(outer, P0)
    return losses, outer


ELASTIC = [[0, 1, 2]] * 2 + [[0, 1]] * 2 + [[0, 1, 2]] * 2 + [[1, 2]] * 2  # syncs over 3, 2, 3, 2
OVERLAPPED = [[0, 1, 2]] * 2 + [[0, 2]] + [[0, 1, 2]] * 3 + [[1, 2]] * 2  # 1 lost in flight, back; 0 lost
NAIVE_CASES = [  # (format, top-k density, --wire-shards, --drop, --rejoin, the replicas alive at steps 1..8, --overlap[,
    # --fragments])
    ("fp32", 0.0, 0, "1@3,0@6", "1@5", [[0, 1, 2]] * 2 + [[0, 2]] * 2 + [[0, 1, 2]] + [[1, 2]] * 3, 0),
    # rejoined inside a window (step 4 follows step 3, not a sync): a resume that rebuilt replica 2
    ("fp32", 0.0, 0, "2@2", "2@4", [[0, 1, 2]] + [[0, 1]] * 2 + [[0, 1, 2]] * 5, 0),
    ("int8", 0.0, 0, "2@3,0@7", "2@5", ELASTIC, 0),
    ("int4", 0.25, 2, "2@3,0@7", "2@5", ELASTIC, 0),
    # --overlap 1: replica 1 dropped at step 3 while the exchange of the sync after step 2 is in
    # flight (redone by 0 and 2), back at step 4; replica 0 dropped at step 7, in no flight
    ("fp32", 0.0, 0, "1@3,0@7", "1@4", OVERLAPPED, 1),
    ("int8", 0.0, 0, "1@3,0@7", "1@4", OVERLAPPED, 1),
    # --fragments 2 (fragment 1 syncs after steps 1, 3, 5, 7, fragment 0 after 2, 4, 6, 8): replica 1
    # dropped at step 3, back at 5 with both fragments' outer values, replica 0 dropped at 6
    ("fp32", 0.0, 0, "1@3,0@6", "1@5", [[0, 1, 2]] * 2 + [[0, 2]] * 2 + [[0, 1, 2]] + [[1, 2]] * 3, 0, 2),
    # --fragments 2 --overlap 1 (an exchange in flight after every step but the last, so no rejoin):
    # replica 1 dropped at step 3 while fragment 0's exchange of step 2 is in flight, replica 0 at
    # step 6 while fragment 1's of step 5 is: each redone by the survivors
    ("fp32", 0.0, 0, "1@3,0@6", "", [[0, 1, 2]] * 2 + [[0, 2]] * 3 + [[2]] * 3, 1, 2),
]


def cmd_naive(bug=0):
    """The NAIVE_CASES (with --drop-bug bug: only the cases the bug shows in, fp32 for 1-3, the
    compressed ones for 4-5, unreported); returns {case: (ok, max loss error, max weight error)}."""
    R, H, steps, out = 3, 2, 8, {}
    toks = np.random.default_rng(7).integers(0, V, R * B * T * steps + 1)
    data = write_shard(f"{TMP}/r3.bin", toks)
    for fmt, density, shards, drops, rejoins, table, overlap, *frags in NAIVE_CASES:
        if bug and ((fmt == "fp32") != (bug < 4) or (bug in (2, 3, 5) and not rejoins)):
            continue  # (a bug of rejoined replicas shows only where one rejoins)
        F = frags[0] if frags else 1
        args = ["--data", data, "--steps", str(steps), "--replicas", str(R), "--sync-every", str(H),
                "--wire-format", fmt, "--topk", str(density), "--wire-shards", str(shards),
                "--drop", drops, "--overlap", str(overlap), "--fragments", str(F)] + NESTEROV
        args += ["--rejoin", rejoins] if rejoins else []
        key = f"{fmt} --drop {drops}" + (f" --rejoin {rejoins}" if rejoins else "") + (f" --overlap {overlap}" if overlap else "")
        key += f" --fragments {F}" if F > 1 else ""
        got = reference(args + (["--drop-bug", str(bug)] if bug else []), f"naive_{fmt}_{drops}_{overlap}_{F}_{bug}")
        want = naive(toks, R, H, steps, lambda r, t: r in table[t - 1], fmt, density, shards, overlap=overlap,
                     fragments=F)
        le, we = diffs(got, want)
        out[key] = (le <= 1e-6 and we <= 1e-6, le, we)
        if not bug:
            report(out[key][0], f"R 3 -H 2 {fmt} --topk {density} --wire-shards {shards} --drop {drops}"
                                f"{' --rejoin ' + rejoins if rejoins else ''}{' --overlap 1' if overlap else ''}"
                                f"{' --fragments 2' if F > 1 else ''}: against the loop written here: max loss error {le:.1e}, max weight "
                                f"error {we:.1e} (tol 1e-6)")
    if not bug:  # the same loop with everyone alive is the plain reference run (the loop's own check)
        got = reference(["--data", data, "--steps", str(steps), "--replicas", str(R), "--sync-every", str(H)]
                        + NESTEROV, "naive_all")
        le, we = diffs(got, naive(toks, R, H, steps, lambda r, t: True))
        report(le <= 1e-6 and we <= 1e-6, f"the loop written here with no drop == train_gpt2.py R 3 -H 2: "
                                          f"{le:.1e}, {we:.1e} (tol 1e-6)")
    return out


def cmd_mutants():
    report(not cmd_alone(bug=1), "planted: outer mean over R instead of R' fails the alone check")
    for bug, what in ((1, "outer mean over R instead of R'"), (2, "a rejoined replica keeps its old AdamW moments"),
                      (3, "a rejoined replica's AdamW step count restarts at 1"),
                      (4, "the survivors' residuals zeroed when R' changes"),
                      (5, "a rejoined replica keeps its old residual")):
        out = cmd_naive(bug=bug)
        report(out and not any(ok for ok, _, _ in out.values()),
               f"planted: {what} fails the naive check in " + ", ".join(
                   f"{fmt} (max loss error {le:.1e}, max weight error {we:.1e})" for fmt, (_, le, we) in out.items()))


def cmd_refusals():
    base = ["--data", f"{TMP}/r3.bin", "--steps", "8"]
    r3 = base + ["--replicas", "3", "--sync-every", "2"]
    cases = [
        (r3 + ["--drop", "3@2"], "--drop 3@2", "out of range"),
        (r3 + ["--drop", "1@0"], "--drop 1@0", "out of range"),
        (r3 + ["--drop", "1@9"], "--drop 1@9", "out of range"),
        (r3 + ["--drop", "1@-2"], "--drop 1@-2", "out of range"),
        (r3 + ["--rejoin", "1@3"], "--rejoin 1@3", "not dropped"),
        (base + ["--replicas", "3", "--sync-every", "1", "--drop", "1@2", "--rejoin", "1@2"], "--rejoin 1@2",
         "already has"),
        (r3 + ["--drop", "1@2", "--drop", "1@4"], "--drop 1@4", "already dropped"),
        (r3 + ["--drop", "0@2,1@3", "--drop", "2@5"], "--drop", "every replica"),
        (r3 + ["--drop", "1@2", "--sync-start", "2"], "--drop 1@2", "--sync-start"),
        (r3 + ["--drop", "1@2", "--rejoin", "1@4", "--fragments", "2", "--overlap", "1"], "--rejoin 1@4", "in flight"),
        (r3 + ["--drop", "1@2", "--rejoin", "1@3", "--overlap", "1"], "--rejoin 1@3", "in flight"),
        (r3 + ["--drop", "1:2"], "--drop", "k@s"),
        (base + ["--drop", "0@2"], "--replicas", ">= 2"),
        (base + ["--replicas", "2", "--drop", "0@2"], "--sync-every", "> 0"),
    ]
    for args, flag, words in cases:
        code, line = refusal(args)
        report(code == 2 and flag in line and words in line, f"refused ({code}): {' '.join(args[4:])}: {line}")
    # the accepted neighbours of those (a rejoin right after the first sync, after --sync-start, and
    # inside a window: a resume from a checkpoint written without the replica)
    for args in (r3 + ["--drop", "1@2", "--rejoin", "1@3"], r3 + ["--drop", "1@3", "--rejoin", "1@4", "--sync-start", "1"],
                 r3 + ["--drop", "1@2", "--rejoin", "1@4"], r3 + ["--drop", "1@4", "--rejoin", "1@5", "--sync-start", "1"]):
        code, line = refusal(args)
        report(code == 0, f"accepted: {' '.join(args[4:])}")


MODEL_FILE = f"{TMP}/m.bin"

if __name__ == "__main__":
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(5)
    with contextlib.redirect_stdout(io.StringIO()):
        assert tg.main(MODEL + ["--seed", "5", "--write-model", MODEL_FILE]) == 0
    cmd_alone()
    cmd_naive()
    cmd_mutants()
    cmd_refusals()
    print(f"test_ref_drop: {'FAILED ' + str(dl.failures) if dl.failures else 'all passed'}")
    sys.exit(1 if dl.failures else 0)
