#!/usr/bin/python3
"""Checks dev/bench/cpu.py's choice of PyTorch's OpenBLAS core (check_blas) on made-up probe results:
the fastest core whose sgemm is right wins, in the PyTorch worker's environment only; a wrong or
failed core is never used, however fast; the caller's core is kept when it is the fastest; no
right core stops the bench. Exits 1 on any mismatch."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402

failures = []


def expect(what, ok):
    print("%-4s %s" % ("ok" if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def choose(results, caller=None, cores=("SkylakeX", "Cooperlake")):
    """check_blas with probe() answering from results (keyed by OPENBLAS_CORETYPE, None: unset)."""
    asked = []

    def probe(env):
        core = env.get("OPENBLAS_CORETYPE")
        asked.append(core)
        return dict(results[core], lib="libopenblas-test.so")

    cpu.probe, cpu.cores_for_cpu = probe, lambda: list(cores)
    env = {"OMP_NUM_THREADS": "2"}
    if caller:
        env["OPENBLAS_CORETYPE"] = caller
    lines = cpu.check_blas(env)
    return env, lines, asked


def r(gflops, err=1e-6, core=None):
    return {"core": core or "X", "sgemm_gflops": gflops, "err": err}


# OpenBLAS left to itself falls back to Prescott: a core for the CPU's vectors is faster
env, lines, asked = choose({None: r(60, core="Prescott"), "SkylakeX": r(400), "Cooperlake": r(440)})
expect("fallback: the fastest right core is set", env.get("OPENBLAS_CORETYPE") == "Cooperlake")
expect("fallback: every candidate probed once", asked == [None, "SkylakeX", "Cooperlake"])
expect("fallback: the choice is printed", "OPENBLAS_CORETYPE=Cooperlake" in lines[-1])

# a caller's core for narrower vectors (Haswell on AVX-512) is replaced, and said so
env, lines, _ = choose({"Haswell": r(240), "SkylakeX": r(480), "Cooperlake": r(430)}, caller="Haswell")
expect("caller's slower core: replaced by SkylakeX", env.get("OPENBLAS_CORETYPE") == "SkylakeX")
expect("caller's core: reported as the caller's", "Haswell (the caller)" in lines[0])

# the caller's core is kept when it is the fastest right one
env, _, asked = choose({"SkylakeX": r(480), "Cooperlake": r(430)}, caller="SkylakeX")
expect("caller's fastest core: kept", env.get("OPENBLAS_CORETYPE") == "SkylakeX")
expect("caller's core: not probed twice", asked == ["SkylakeX", "Cooperlake"])

# OpenBLAS's own choice is kept (no variable set) when it is the fastest
env, _, _ = choose({None: r(500, core="Cooperlake"), "SkylakeX": r(400), "Cooperlake": r(450)})
expect("own choice fastest: no OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE" not in env)

# a fast core that computes wrongly, and one whose probe failed, are never used
env, lines, _ = choose({None: r(100), "SkylakeX": r(900, err=0.3),
                        "Cooperlake": dict(r(0), err=float("inf"), failed=["Illegal instruction"])})
expect("wrong core: not used", "OPENBLAS_CORETYPE" not in env)
expect("wrong core: reported", any("WRONG" in l and "SkylakeX" in l for l in lines))
expect("failed probe: reported", any("failed" in l and "Cooperlake" in l for l in lines))

# the other environment variables of the worker survive the choice
env, _, _ = choose({None: r(60), "SkylakeX": r(400), "Cooperlake": r(300)})
expect("worker environment kept", env.get("OMP_NUM_THREADS") == "2")

# no right core: the bench stops rather than compare against a wrong PyTorch
try:
    choose({None: r(100, err=1.0), "SkylakeX": r(400, err=1.0), "Cooperlake": r(300, err=1.0)})
    expect("no right core: the bench stops", False)
except SystemExit as e:
    expect("no right core: the bench stops", "no OpenBLAS core" in str(e))

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
