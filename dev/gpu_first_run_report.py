#!/usr/bin/env python3
"""REPORT.md and report.json of dev/gpu_first_run.sh, from what its phases left in --out:
results.tsv (section, name, status, value: every build, check and timed figure), torch.json
(dev/bench/torch_gpt2.py), model.json (python3 dev/bench/gpu_model.py --json: its figures are
modelled, never measured), profiles/op_*.txt (-op 1 tables), ncu_*.csv (Nsight Compute's details
page). Prints the report.

    python3 dev/gpu_first_run_report.py --out DIR --card NAME [--steps N] [--llmc PATH]

The model's constants are those of the card named in --card when the model has them (an "H200"
entry, say), else H100's, said so in the report.
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import sys

BS = (8, 16, 32, 64)


def read_results(path):
    rows = []
    try:
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3:
                rows.append((parts + [""])[:4])
    except OSError as e:
        sys.exit("gpu_first_run_report.py: error: %s: %s" % (path, e.strerror))
    return rows


def load_json(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def model_gpu(model, card):
    """The model's key for this card, and a note when it is not the card's own."""
    gpus = (model or {}).get("gpus", {})
    for key in sorted(gpus, key=len, reverse=True):
        if key in card:
            return key, ""
    if "H100" in gpus:
        why = "the model has no constants for %s: H100's" % card if "model only" not in card else ""
        return "H100", why
    return (sorted(gpus)[0], "") if gpus else (None, "no model figures (dev/bench/gpu_model.py --json failed)")


def unit_us(value, unit):
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
    return value * scale.get(unit.strip().lower(), 1.0)


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def ncu_summary(path):
    """Per kernel (short name): launches and the median of each metric, from ncu --csv --page details."""
    try:
        lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    except OSError:
        return []
    per = {}  # (kernel, launch id) -> {metric: value}
    for r in csv.DictReader(lines):
        name = r.get("Kernel Name") or r.get("Function Name") or ""
        metric, val, unit = r.get("Metric Name", ""), number(r.get("Metric Value", "") or ""), r.get("Metric Unit", "") or ""
        if not name or val is None:
            continue
        short = re.sub(r"\(.*", "", name).replace("void ", "").strip()
        d = per.setdefault((short, r.get("ID", "")), {"grid": r.get("Grid Size", ""), "block": r.get("Block Size", "")})
        d[metric] = unit_us(val, unit) if metric == "Duration" else val
    kernels = {}
    for (short, _), d in per.items():
        kernels.setdefault(short, []).append(d)
    out = []
    for short, ds in sorted(kernels.items()):
        def med(key):
            vals = [d[key] for d in ds if key in d]
            return statistics.median(vals) if vals else None
        out.append({"kernel": short, "launches": len(ds), "duration_us": med("Duration"), "grid": ds[0]["grid"],
                    "block": ds[0]["block"], "registers": med("Registers Per Thread"),
                    "achieved_occupancy_pct": med("Achieved Occupancy"),
                    "theoretical_occupancy_pct": med("Theoretical Occupancy"),
                    "sm_throughput_pct": med("Compute (SM) Throughput"), "memory_throughput_pct": med("Memory Throughput"),
                    "waves_per_sm": med("Waves Per SM")})
    return out


def fmt(x, digits=2):
    return "—" if x is None else ("%.*f" % (digits, x))


def main():
    ap = argparse.ArgumentParser(description="the first GPU run's report")
    ap.add_argument("--out", required=True)
    ap.add_argument("--card", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--llmc", default="")
    a = ap.parse_args()
    if not os.path.isdir(a.out):
        sys.exit("gpu_first_run_report.py: error: --out %s: no such folder" % a.out)
    rows = read_results(os.path.join(a.out, "results.tsv"))
    env = {r[1]: (r[2] + (" " + r[3] if r[3] else "")).strip() for r in rows if r[0] == "env"}
    date = env.get("date", "")
    card = a.card
    measured_ok = "model only" not in card
    meas = {r[1]: float(r[3]) for r in rows if r[0] == "time" and r[2] == "measured" and number(r[3]) is not None}
    torch = load_json(os.path.join(a.out, "torch.json")) or {}
    for run in torch.get("runs", []):
        if run.get("median_ms") is not None:
            meas["PyTorch %s B %d" % (run["mode"], run["B"])] = run["median_ms"]
    model = load_json(os.path.join(a.out, "model.json"))
    gpu, model_note = model_gpu(model, card)
    step_model = ((model or {}).get("gpus", {}).get(gpu, {}) or {}).get("step_ms", {}) if gpu else {}

    cols = [("ours -at ours", "ours -at ours B %d"), ("ours -at cudnn", "ours -at cudnn B %d"),
            ("PyTorch torch.compile", "PyTorch compile B %d"), ("PyTorch eager", "PyTorch eager B %d")]
    if a.llmc or any(k.startswith("llm.c") for k in meas):
        cols.append(("llm.c", "llm.c B %d"))
    figures = []
    lines = ["# First GPU run: %s%s" % (card, ", " + date if date else ""), ""]
    where = ("measured on %s (nvidia-smi), %s" % (card, date)) if measured_ok else "nothing measured (--model-only)"
    lines.append("GPT-2 124M, T 1024, one GPU, BF16: ms per step, median of steps 4-%d (our trainer's "
                 "metrics.jsonl, llm.c's and PyTorch's step lines); %s. The last two columns are MODELLED by "
                 "dev/bench/gpu_model.py with %s constants%s, not measured." %
                 (a.steps, where, gpu or "no", " (" + model_note + ")" if model_note else ""))
    lines.append("")
    head = [c for c, _ in cols] + ["modelled -at ours", "modelled -at cudnn"]
    lines.append("| B | " + " | ".join(head) + " |")
    lines.append("|---|" + "---|" * len(head))
    for B in BS:
        cells = []
        for title, key in cols:
            v = meas.get(key % B)
            cells.append(fmt(v))
            if v is not None:
                figures.append({"figure": "step ms", "what": title, "B": B, "T": 1024, "ms": v, "kind": "measured",
                                "card": card, "date": date})
        for at in ("ours", "cudnn"):
            v = step_model.get("-at %s B %d" % (at, B))
            cells.append(fmt(v))
            if v is not None:
                figures.append({"figure": "step ms", "what": "-at " + at, "B": B, "T": 1024, "ms": round(v, 3),
                                "kind": "modelled", "model_gpu": gpu})
        lines.append("| %d | %s |" % (B, " | ".join(cells)))
    tv = torch.get("torch")
    if tv:
        lines += ["", "PyTorch %s (%s): bf16 autocast, %s, AdamW %s; torch.compile with its defaults, B in the order "
                  "64, 32, 16, 8 in one process (a second B makes it recompile once for a dynamic batch size), run while "
                  "our builds used the CPU; eager after the compiled runs (dev/bench/torch_gpt2.py)." %
                  (tv, torch.get("device", ""), "SDPA" if torch.get("sdpa") else "attention written out",
                   "fused" if torch.get("fused_adamw") else "unfused")]
        for run in torch.get("runs", []):
            if run.get("median_ms") is None:
                lines.append("PyTorch %s B %d: %s" % (run["mode"], run["B"], run.get("error", "failed")))

    # GELU: our kernels (-ge 0, the default, the table above) against cuBLASLt's epilogues (-ge 1)
    ge = []
    for at in ("ours", "cudnn"):
        g0, g1 = meas.get("ours -at %s B 64" % at), meas.get("ours -at %s -ge 1 B 64" % at)
        if g1 is not None:
            figures.append({"figure": "step ms -ge 1", "what": "ours -at " + at, "B": 64, "T": 1024, "ms": g1,
                            "kind": "measured", "card": card, "date": date})
        if g0 is not None or g1 is not None:
            ge.append("| -at %s | %s | %s | %s |" % (at, fmt(g0), fmt(g1), fmt(g1 / g0, 3) if g0 and g1 else "—"))
    if ge:
        lines += ["", "## GELU at B 64: our kernels (-ge 0) against cuBLASLt's epilogues (-ge 1), measured", "",
                  "| path | -ge 0 ms | -ge 1 ms | -ge 1 / -ge 0 |", "|---|---|---|---|"] + ge

    profiles = {}
    for path in sorted(glob.glob(os.path.join(a.out, "profiles", "op_*.txt"))):
        text = open(path).read().strip()
        if text:
            name = os.path.basename(path)[3:-4]  # ours_B8
            profiles[name] = text
    if profiles:
        lines += ["", "## Where a step goes: -op 1 (CUDA events per op family), measured on %s" % card]
        for name in sorted(profiles, key=lambda n: (n.split("_B")[0], int(n.split("_B")[1]))):
            at, B = name.split("_B")
            lines += ["", "-at %s, B %s:" % (at, B), "", "```", profiles[name], "```"]

    ncu = {}
    for path in sorted(glob.glob(os.path.join(a.out, "ncu_*.csv"))):
        at = os.path.basename(path)[4:-4]
        ncu[at] = ncu_summary(path)
    if any(ncu.values()):
        lines += ["", "## Nsight Compute: the attention kernels of one step, B 8, T 1024, NH 12, HS 64 (measured, "
                  "--clock-control none)", "", "| path | kernel | launches | us (median) | grid | block | registers | "
                  "achieved occupancy % | theoretical % | SM throughput % | memory throughput % | waves per SM |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for at, ks in sorted(ncu.items()):
            for k in ks:
                lines.append("| -at %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    at, k["kernel"][:60], k["launches"], fmt(k["duration_us"], 1), k["grid"], k["block"],
                    fmt(k["registers"], 0), fmt(k["achieved_occupancy_pct"], 1), fmt(k["theoretical_occupancy_pct"], 1),
                    fmt(k["sm_throughput_pct"], 1), fmt(k["memory_throughput_pct"], 1), fmt(k["waves_per_sm"], 2)))

    checks = [{"section": r[0], "name": r[1], "status": r[2], "detail": r[3]} for r in rows if r[0] in ("build", "check")]
    timing_fail = [{"section": r[0], "name": r[1], "status": r[2], "detail": r[3]} for r in rows
                   if r[0] == "time" and r[2] != "measured"]
    if checks or timing_fail:
        lines += ["", "## Builds and checks", "", "| section | check | status | detail |", "|---|---|---|---|"]
        for c in checks + timing_fail:
            lines.append("| %s | %s | %s | %s |" % (c["section"], c["name"], c["status"], c["detail"].replace("|", "/")))
    if env:
        lines += ["", "## The machine", ""] + ["- %s: %s" % (k, v) for k, v in env.items()]
    report = {"card": card, "date": date, "model_gpu": gpu, "model_note": model_note, "steps": a.steps,
              "figures": figures, "profiles": profiles, "ncu": ncu, "checks": checks + timing_fail, "env": env,
              "torch": torch or None}
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "REPORT.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
