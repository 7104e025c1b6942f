"""Bit-for-bit goldens of the distributed runs (dev/tests/35_distributed.sh, 36_diloco.sh,
55_multi_gpu.sh). Every run those checks make of a real trainer (./train_gpt2cpu and the emulated
build/gpu/train_gpt2emu_fp32 and _bf16) goes through dev/test_distributed.py's mpirun, which calls
note(): a run that ended well and wrote into an -o directory leaves one line in the ledger
build/golden_runs/GROUP.txt (GROUP: the directory under build/ the run wrote into: dist, diloco,
multi_gpu):

    DIR CMD trl=L1,L2,... rec=R model=M state=S

CMD is a hash of the command (ranks, trainer, flags); L1.. every step's train loss as
metrics.jsonl writes it (%.9g: a float32 exactly); R a hash of every step record but its times
(losses, norms, lr, outer-sync norms, val losses, skips); M of the model files (model_final.bin
and checkpoints' model_N.bin), S of the state files and manifests. The goldens,
dev/tests/golden/GROUP.txt, are such ledgers recorded from a tree whose numbers are the reference
(the data-parallel layer's move, issue 35, must leave every one of them unchanged).

  python3 dev/test_golden.py check GROUP [--partial]   the ledger against the golden: every line equal,
                                                        none missing (--partial: missing ones allowed),
                                                        none unknown
  python3 dev/test_golden.py record GROUP               the ledger becomes the golden
  python3 dev/test_golden.py add GROUP                  the ledger's runs the golden does not have yet join
                                                        it (new tests); refused while any other run differs
  python3 dev/test_golden.py reset GROUP                empties the ledger (each test file does so first)
  python3 dev/test_golden.py mutant                     the test of the test: a copy of the CPU trainer whose
                                                        AdamW eps is 1e-4 larger in relative terms (every
                                                        tolerance check still passes) must differ from the
                                                        golden of build/dist/r2_s2_z1
  python3 dev/test_golden.py targets [--plant]          the same bits on every host: TARGET_RUNS, golden runs
                                                        of dist and diloco (replayed from the commands the
                                                        ledger kept), made again by CPU trainers built for
                                                        x86-64-v3 (AVX2, 6x16 tiles of 256-bit vectors) and,
                                                        on a host with AVX-512, x86-64-v4 (12x32 tiles of
                                                        512-bit vectors), must equal their goldens bit for
                                                        bit (--plant: x86-64-v3 and build/dist/base only, a
                                                        copy whose layernorm mean is summed in lanes of the
                                                        vector width, which must differ)
"""
import hashlib
import json
import os
import re
import sys

LEDGER = "build/golden_runs"
GOLDEN = "dev/tests/golden"
REAL_TRAINERS = {"./train_gpt2cpu", "build/gpu/train_gpt2emu_fp32", "build/gpu/train_gpt2emu_bf16"}
TIMES = {"ms", "tokens_per_s", "mfu"}


def _hash(text):
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:16]


def _command_key(trainer, n, args):
    """The run's identity: ranks, trainer and flags (a TCP port, which changes each time, left out)."""
    norm = list(args)
    for i, a in enumerate(norm[:-1]):
        if a == "-pp":
            norm[i + 1] = "PORT"
    return _hash(" ".join([str(n), trainer] + norm))


def _files_hash(d, pattern):
    names = sorted(f for f in os.listdir(d) if re.fullmatch(pattern, f))
    if not names:
        return "-"
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"=" + hashlib.sha256(open(os.path.join(d, name), "rb").read()).digest())
    return h.hexdigest()[:16]


def _line(d, key):
    losses, records = [], []
    path = os.path.join(d, "metrics.jsonl")
    for text in open(path) if os.path.exists(path) else []:
        rec = json.loads(text)
        if "step" not in rec:
            continue
        kept = {k: v for k, v in rec.items() if k not in TIMES}
        records.append(json.dumps(kept, sort_keys=True))
        if "train_loss" in rec:
            losses.append(re.search(r'"train_loss": ([^,}]+)', text).group(1))
    model = _files_hash(d, r"model_(final|\d+)\.bin")
    state = _files_hash(d, r"(state_\d+_\d+\.bin|DONE_\d+)")
    return f"{d} {key} trl={','.join(losses) or '-'} rec={_hash(chr(10).join(records))} model={model} state={state}"


def note(trainer, n, args, returncode):
    """Called after every mpirun of dev/test_distributed.py: a real trainer's run that ended well and
    wrote an -o directory under build/ goes into its group's ledger."""
    if returncode != 0 or trainer not in REAL_TRAINERS or "-o" not in args:
        return
    d = args[len(args) - 1 - args[::-1].index("-o") + 1]
    parts = os.path.normpath(d).split(os.sep)
    if len(parts) < 3 or parts[0] != "build" or not os.path.isdir(d):
        return
    os.makedirs(LEDGER, exist_ok=True)
    with open(os.path.join(LEDGER, parts[1] + ".txt"), "a") as f:
        f.write(_line(os.path.normpath(d), _command_key(trainer, n, args)) + "\n")
    with open(os.path.join(LEDGER, parts[1] + ".cmd"), "a") as f: # the command itself, for `targets`
        f.write(json.dumps({"dir": os.path.normpath(d), "trainer": trainer, "n": n, "args": list(args)}) + "\n")


def _read(path):
    """DIR -> line; a directory written twice keeps its last run."""
    out = {}
    for line in open(path) if os.path.exists(path) else []:
        if line.strip() and not line.startswith("#"):
            out[line.split()[0]] = line.rstrip("\n")
    return out


def _fields(line):
    return dict(f.split("=", 1) for f in line.split()[2:])


def check(group, partial):
    golden, got = _read(f"{GOLDEN}/{group}.txt"), _read(f"{LEDGER}/{group}.txt")
    if not golden:
        sys.exit(f"no golden {GOLDEN}/{group}.txt")
    bad = 0
    for d, want in sorted(golden.items()):
        if d not in got:
            if not partial:
                print(f"FAIL  {d}: not run (the golden has it)")
                bad += 1
            continue
        have = got[d]
        if have == want:
            print(f"ok    {d}: {len(_fields(want)['trl'].split(','))} losses, records, model and state files bit for bit")
            continue
        bad += 1
        if have.split()[1] != want.split()[1]:
            print(f"FAIL  {d}: run with other flags than the golden's (command hash {have.split()[1]}, golden "
                  f"{want.split()[1]})")
            continue
        a, b = _fields(want), _fields(have)
        what = [k for k in ("trl", "rec", "model", "state") if a.get(k) != b.get(k)]
        print(f"FAIL  {d}: {', '.join(what)} differ")
        la, lb = a["trl"].split(","), b["trl"].split(",")
        for i, (x, y) in enumerate(zip(la, lb)):
            if x != y:
                print(f"        step {i + 1}: golden {x}, now {y}")
        if len(la) != len(lb):
            print(f"        {len(la)} steps in the golden, {len(lb)} now")
    unknown = sorted(set(got) - set(golden))
    for d in unknown:
        print(f"FAIL  {d}: a run the golden does not have (record it)")
    bad += len(unknown)
    seen = len(set(golden) & set(got))
    print(f"{group}: {seen} of {len(golden)} golden runs compared, {bad} failing")
    sys.exit(1 if bad or seen == 0 else 0)


def add(group):
    golden, got = _read(f"{GOLDEN}/{group}.txt"), _read(f"{LEDGER}/{group}.txt")
    differ = [d for d in golden if d in got and got[d] != golden[d]]
    if differ:
        sys.exit(f"refused: {len(differ)} runs differ from the golden (first: {differ[0]})")
    new = sorted(set(got) - set(golden))
    lines = [l for l in open(f"{GOLDEN}/{group}.txt") if l.startswith("#")]
    with open(f"{GOLDEN}/{group}.txt", "w") as f:
        f.writelines(lines)
        for d in sorted(set(golden) | set(new)):
            f.write((golden.get(d) or got[d]) + "\n")
    print(f"{len(new)} runs added to {GOLDEN}/{group}.txt: {' '.join(new)}")


def record(group):
    got = _read(f"{LEDGER}/{group}.txt")
    if not got:
        sys.exit(f"nothing in {LEDGER}/{group}.txt to record")
    os.makedirs(GOLDEN, exist_ok=True)
    with open(f"{GOLDEN}/{group}.txt", "w") as f:
        f.write(f"# dev/test_golden.py record {group}: DIR CMD trl=... rec=... model=... state=... (see the script)\n")
        for d in sorted(got):
            f.write(got[d] + "\n")
    print(f"{len(got)} runs recorded in {GOLDEN}/{group}.txt")


def mutant():
    import shutil
    import subprocess
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import test_distributed as td
    d = "build/golden_mutant"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree("llmc", d + "/llmc")
    shutil.copy("train_gpt2.c", d)
    old = "params[i] = fmaf(-lr, fmaf(weight_decay, params[i], mhat / (sqrtf(vhat) + eps)), params[i]);"
    hits = [f for f in [d + "/train_gpt2.c"] + [os.path.join(d, "llmc", x) for x in os.listdir(d + "/llmc")]
            if old in open(f).read()]
    if len(hits) != 1:
        sys.exit(f"the mutation did not apply ({len(hits)} places)")
    text = open(hits[0]).read().replace(old, old.replace("+ eps)", "+ eps * 1.0001f)"))
    open(hits[0], "w").write(text)
    trainer = d + "/train_gpt2cpu"
    flags = subprocess.run(["make", "-s", "--no-print-directory", "cpu-cflags"], check=True, capture_output=True,
                           text=True).stdout.split()
    subprocess.run(["mpicc"] + flags + ["-o", trainer, d + "/train_gpt2.c", "-lm"], check=True)
    args = td.COMMON + ["-z", "1", "-ds", "2"]
    want = _read(f"{GOLDEN}/dist.txt").get("build/dist/r2_s2_z1")
    if want is None or want.split()[1] != _command_key("./train_gpt2cpu", 2, args + ["-o", "build/dist/r2_s2_z1"]):
        sys.exit("the golden has no build/dist/r2_s2_z1 of these flags")
    td.TRAINER = trainer
    out = d + "/run"
    td.run_ok(2, args, out)
    losses, base_losses = td.train_losses(out + "/main.log"), td.train_losses("build/dist/base/main.log")
    loss_err = max(abs(losses[s] - base_losses[s]) for s in base_losses) if os.path.exists("build/dist/base") else 0.0
    a, b = _fields(want), _fields(_line(out, "-"))
    differ = [k for k in ("trl", "rec", "model") if a[k] != b[k]]
    print(f"the AdamW eps mutant on 2 ranks, ZeRO 1: max loss error {loss_err:.2e} against the 1-rank run (the "
          f"equivalence test's tolerance is 1e-4); against the golden: {', '.join(differ) or 'nothing'} differ"
          + (" (caught)" if differ else " (NOT caught)"))
    sys.exit(0 if "model" in differ else 1)


# The runs `targets` makes again: one rank, ZeRO 1 on 2 ranks, ZeRO 2 on a 2 x 2 mesh, DiLoCo on a
# 2 x 2 mesh, top-k with error feedback (the run whose one near-tie choice differed on an Intel host
# with the old build), int4 with top-k, and streamed fragments overlapped with training.
TARGET_RUNS = ["build/dist/base", "build/dist/r2_s2_z1", "build/dist/r4_s2_z2", "build/diloco/ref_4_2_2",
               "build/diloco/wf_ref_fp32_1_3_1_0.05", "build/diloco/wf_sync_int4_1_2_2_0.05",
               "build/diloco/frag_lo_1"]


def _host_has_avx512():
    flags = next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split()
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"))


def _build_copy(d, arch, plant):
    """train_gpt2.c and llmc/ copied into d and built there with make's CFLAGS for -march=arch."""
    import shutil
    import subprocess
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree("llmc", d + "/llmc")
    shutil.copy("train_gpt2.c", d)
    if plant: # a layernorm mean summed in lanes of the vector width: the bits follow the target
        text = open(d + "/train_gpt2.c").read()
        old = "float m = vf_array_sum(x, C) / C;"
        new = "vfloat mv = (vfloat){0}; for (int c = 0; c < C; c += VEC_W) { mv += vf_load_n(x + c, " \
              "C - c < VEC_W ? C - c : VEC_W, 0.0f); } float m = 0.0f; for (int j = 0; j < VEC_W; j++) { m += mv[j]; } m /= C;"
        if text.count(old) != 1:
            sys.exit("the plant did not apply")
        open(d + "/train_gpt2.c", "w").write(text.replace(old, new))
    flags = subprocess.run(["make", "-s", "--no-print-directory", "cpu-cflags", f"CPU_ARCH={arch}"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["mpicc"] + flags + ["-o", d + "/train_gpt2cpu", d + "/train_gpt2.c", "-lm"], check=True)
    return d + "/train_gpt2cpu"


def targets(plant):
    import subprocess
    cmds = {}
    for group in ("dist", "diloco"):
        for text in open(f"{LEDGER}/{group}.cmd") if os.path.exists(f"{LEDGER}/{group}.cmd") else []:
            c = json.loads(text)
            cmds[c["dir"]] = c
    golden = {**_read(f"{GOLDEN}/dist.txt"), **_read(f"{GOLDEN}/diloco.txt")}
    arches = ["x86-64-v3"] + (["x86-64-v4"] if _host_has_avx512() and not plant else [])
    runs = TARGET_RUNS[:1] if plant else TARGET_RUNS
    print(f"host: AVX-512 {'yes' if _host_has_avx512() else 'no'}; native build against the goldens: "
          f"dev/test_golden.py check; here: {', '.join(arches)}{' (planted)' if plant else ''}")
    bad = 0
    for arch in arches:
        d = f"build/golden_targets/{arch}{'_plant' if plant else ''}"
        trainer = _build_copy(d, arch, plant)
        tile = None
        for run_dir in runs:
            c = cmds.get(run_dir)
            if c is None or run_dir not in golden:
                print(f"FAIL  {run_dir}: {'no golden' if c else 'not run in this make test (no command kept)'}")
                bad += 1
                continue
            args = list(c["args"])
            out = f"{d}/{os.path.basename(run_dir)}"
            args[len(args) - 1 - args[::-1].index("-o") + 1] = out
            import shutil
            shutil.rmtree(out, ignore_errors=True)
            r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(c["n"]),
                                "-x", "OMP_NUM_THREADS=1", trainer] + args, capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                print(f"FAIL  {arch} {run_dir}: the run failed:\n{r.stdout[-800:]}{r.stderr[-800:]}")
                bad += 1
                continue
            tile = tile or re.search(r"matmul tile (\S+ of \d+-bit vectors)", r.stdout)
            want = golden[run_dir]
            if want.split()[1] != _command_key(c["trainer"], c["n"], c["args"]):
                print(f"FAIL  {run_dir}: the kept command is not the golden's")
                bad += 1
                continue
            a, b = _fields(want), _fields(_line(out, "-"))
            differ = [k for k in ("trl", "rec", "model", "state") if a[k] != b[k]]
            bad += bool(differ)
            print(f"{'FAIL' if differ else 'ok  '}  {arch} {run_dir} ({c['n']} ranks): "
                  f"{', '.join(differ) + ' differ' if differ else 'losses, records, model and state files bit for bit'}")
        print(f"      {arch}: matmul tile {tile.group(1) if tile else '?'}")
    print(f"{len(arches) * len(runs)} runs of other targets compared, {bad} failing"
          + ((" (caught)" if bad == len(runs) else " (NOT caught)") if plant else ""))
    sys.exit((bad != len(runs)) if plant else (1 if bad else 0))


if __name__ == "__main__":
    if sys.argv[1] == "targets":
        targets("--plant" in sys.argv)
    if sys.argv[1] == "mutant":
        mutant()
    cmd, group = sys.argv[1], sys.argv[2]
    if cmd == "check":
        check(group, "--partial" in sys.argv)
    elif cmd == "record":
        record(group)
    elif cmd == "add":
        add(group)
    elif cmd == "reset":
        for path in (f"{LEDGER}/{group}.txt", f"{LEDGER}/{group}.cmd"):
            if os.path.exists(path):
                os.remove(path)
    else:
        sys.exit(__doc__)
