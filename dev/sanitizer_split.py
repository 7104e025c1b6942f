#!/usr/bin/env python3
"""Splits a compute-sanitizer log into the reports about our code and those inside the libraries
the trainer calls (NCCL, cuBLAS/cuBLASLt, cuDNN, NVRTC), so that only ours decide.

    python3 dev/sanitizer_split.py LOG [--sources FILE...]

A report is one block of the log: a line "========= <text>" that is not a summary opens it, the
indented "=========     ..." lines after it belong to it. A report on a device access (memcheck's
"Invalid __global__ read ... at KERNEL", racecheck's "Race reported between ... access at KERNEL")
is ours when it names one of our kernels (the __global__ functions of --sources, default
train_gpt2.cu and llmc/*.cuh) or one of those files, a library's when it names a library (its
kernels: nccl..., cutlass/xmma/gemm..., cudnn/sdpa/fmha...). A report on a CUDA API call ("Program
hit ... on CUDA API call to ...") belongs to the module of the first host frame outside the driver
(libcuda): the libraries link the CUDA runtime statically, so their calls show their own module
first, and ours show the trainer's. A report that names neither counts as ours (unattributed).

Prints "ours N, libraries M (...)" and the first lines of each of ours; exit 0 when none is ours,
1 when some are, 2 when the log cannot be read or its ERROR/RACECHECK SUMMARY counts errors that
no report here accounts for.
"""
import argparse
import glob
import os
import re
import sys

PREFIX = "========="
SUMMARY = re.compile(r"^(ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|COMPUTE-SANITIZER|Target application returned)")
LIBRARIES = [  # (name, pattern on a kernel name or module), first match wins
    ("NCCL", re.compile(r"nccl", re.I)),
    ("cuDNN", re.compile(r"cudnn|sdpa|fmha|fort_native", re.I)),
    ("cuBLAS", re.compile(r"cublas|cutlass|xmma|gemm|nvjet|splitK", re.I)),
    ("NVRTC", re.compile(r"nvrtc", re.I)),
]
DRIVER = re.compile(r"libcuda\.so|libcudadebugger", re.I)
KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*[(<]")


def our_kernels(sources):
    names = set()
    for path in sources:
        try:
            names.update(KERNEL_DEF.findall(open(path, encoding="utf-8", errors="replace").read()))
        except OSError as e:
            sys.exit("sanitizer_split.py: error: --sources %s: %s" % (path, e.strerror))
    return names


def blocks(lines):
    """The reports: lists of lines (the prefix stripped), and the summary lines."""
    out, summaries, cur = [], [], None
    for line in lines:
        if not line.startswith(PREFIX):
            continue  # the program's own output
        body = line[len(PREFIX):].rstrip("\n")
        if not body.strip():
            cur = None
            continue
        if body.startswith(" ") and not body.startswith("  "):  # "========= text": a new report
            text = body.strip()
            if SUMMARY.match(text):
                summaries.append(text)
                cur = None
                continue
            cur = [text]
            out.append(cur)
        elif cur is not None:
            cur.append(body.strip())
    return out, summaries


def library_of(text):
    for name, rx in LIBRARIES:
        if rx.search(text):
            return name
    return None


def frame_module(line):
    """The module of a "Host Frame:" line: the text after its last " in ", else the path before " ["."""
    rest = line.split("Host Frame:", 1)[1].strip()
    if " in " in rest:
        return rest.rsplit(" in ", 1)[1].strip()
    return rest.split(" [", 1)[0].strip()


def classify(report, kernels, files):
    """('ours' | a library's name, why)."""
    device = [l for l in report if l.startswith("at ") or " access at " in l]
    if device:
        text = " ".join(device)
        for k in kernels:
            if re.search(r"\b%s\b" % re.escape(k), text):
                return "ours", "kernel " + k
        for f in files:
            if f in text:
                return "ours", "file " + f
        lib = library_of(text)
        if lib:
            return lib, text[:120]
        return "ours", "unattributed: " + text[:120]
    for l in report:
        if "Host Frame:" in l:
            mod = frame_module(l)
            if DRIVER.search(mod):
                continue
            lib = library_of(os.path.basename(mod))
            return (lib, "called from " + mod) if lib else ("ours", "called from " + mod)
    lib = library_of(" ".join(report))
    return (lib, report[0][:120]) if lib else ("ours", "unattributed: " + report[0][:120])


def main():
    ap = argparse.ArgumentParser(description="compute-sanitizer reports: ours against the libraries'")
    ap.add_argument("log")
    ap.add_argument("--sources", nargs="+", default=None)
    a = ap.parse_args()
    sources = a.sources if a.sources is not None else ["train_gpt2.cu"] + sorted(glob.glob("llmc/*.cuh"))
    kernels = our_kernels(sources)
    if not kernels:
        sys.exit("sanitizer_split.py: error: no __global__ kernel found in --sources")
    files = sorted({os.path.basename(p) for p in sources})
    try:
        lines = open(a.log, encoding="utf-8", errors="replace").readlines()
    except OSError as e:
        print("sanitizer_split.py: error: %s: %s" % (a.log, e.strerror), file=sys.stderr)
        return 2
    reports, summaries = blocks(lines)
    counts, ours = {}, []
    for r in reports:
        who, why = classify(r, kernels, files)
        counts[who] = counts.get(who, 0) + 1
        if who == "ours":
            ours.append((why, r))
    libs = sorted((k, v) for k, v in counts.items() if k != "ours")
    print("ours %d, libraries %d%s" % (len(ours), sum(v for _, v in libs),
                                       " (" + ", ".join("%s %d" % kv for kv in libs) + ")" if libs else ""))
    for why, r in ours[:5]:
        print("  ours (%s): %s" % (why, " | ".join(r[:3])))
    claimed = 0
    for s in summaries:
        m = re.match(r"(ERROR|RACECHECK) SUMMARY: (\d+)", s)
        if m:
            claimed = max(claimed, int(m.group(2)))
    if claimed and not reports:
        print("sanitizer_split.py: error: %s: the summary counts %d errors but no report was found" % (a.log, claimed),
              file=sys.stderr)
        return 2
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
