#!/usr/bin/env python3
"""SASS report: per kernel of an sm_90 cubin, registers and spills (from the ptxas -v log of the
same compile), tensor-core instructions (HMMA, HGMMA), 128-bit global loads and stores
(LDG.E.128, STG.E.128) and narrow (1- and 2-byte) global loads, from nvdisasm's disassembly.

    sass_report.py [--check] [--nvdisasm PATH] PREC:CUBIN:PTXAS_LOG ... > report.txt
    sass_report.py --find-nvdisasm      (prints where nvdisasm is; exit 1 when it is nowhere)

With --check it exits 1 when a kernel spills or breaks a rule of REQUIRE (every kernel whose
name matches must have at least the count) or of AT_MOST (at most the count), or when a rule
matches no kernel at all (a renamed
kernel must not silently escape its rule). nvdisasm comes from PyPI's nvidia-cuda-nvdisasm
(dev/install_deps.sh installs it); found on PATH, in a site-packages directory or in build/tools.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

# The rules, one line each: (regex on the demangled kernel name, counter, minimum, why).
REQUIRE = [
    # (layernorm_backward_kernel<false> is the element-by-element instance, for rows not whole packs)
    (r"layernorm(?!_backward_kernel<false>)", "LDG.128", 1, "LayerNorm kernels stream their rows with 128-bit loads"),
    (r"residual", "LDG.128", 1, "the residual add reads 128 bits at a time"),
    (r"gelu", "LDG.128", 1, "GELU reads 128 bits at a time"),
    (r"adamw", "LDG.128", 1, "AdamW reads its state 128 bits at a time"),
    # (no attention rule: every rule holds for both precisions, and only the BF16 build has the fa2
    # kernels; their HMMA counts are checked by dev/bench/gpu_model.py --check-sass)
]
# (regex, counter, maximum, why): upper bounds
AT_MOST = [
    (r"residual_layernorm_forward_kernel<3>", "LDG.128", 12,
     "C 768 loads a, b, weight and bias, 3 packs each: nothing it wrote is read back"),
]
COUNTERS = ("HMMA", "LDG.128", "STG.128", "LDG.narrow", "LDG")
RULES = [(p, c, n, why, ">=") for p, c, n, why in REQUIRE] + [(p, c, n, why, "<=") for p, c, n, why in AT_MOST]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_nvdisasm(explicit):
    if explicit:
        return explicit
    found = shutil.which("nvdisasm")
    if found:
        return found
    roots = [p for p in sys.path if p.endswith("-packages")]
    roots += glob.glob("/usr/lib/python3*/dist-packages") + glob.glob("/usr/local/lib/python3*/dist-packages")
    roots += glob.glob(os.path.expanduser("~/.local/lib/python3*/site-packages"))
    roots.append(os.path.join(ROOT, "build", "tools"))
    for r in roots:
        hits = sorted(glob.glob(os.path.join(r, "nvidia", "*", "bin", "nvdisasm")) +
                      glob.glob(os.path.join(r, "nvidia", "cuda_nvdisasm", "bin", "nvdisasm")))
        if hits:
            return hits[-1]
    sys.exit("error: nvdisasm not found (pip install nvidia-cuda-nvdisasm, or run dev/install_deps.sh)")


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\n")))


def ptxas_info(log_path):
    """{mangled: (registers, spill_store_bytes, spill_load_bytes)} for sm_90 entries of a ptxas -v log."""
    info, name = {}, None
    spill = (0, 0)
    for line in open(log_path):
        m = re.search(r"Compiling entry function '([^']+)' for 'sm_(\d+)'", line)
        if m:
            name = m.group(1) if m.group(2) == "90" else None
            spill = (0, 0)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            spill = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            info[name] = (int(m.group(1)),) + spill
            name = None
    return info


OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_counts(nvdisasm, cubin):
    """{mangled: {counter: n}} from the disassembly."""
    text = subprocess.run([nvdisasm, cubin], capture_output=True, text=True, check=True).stdout
    counts, cur = {}, None
    for line in text.split("\n"):
        m = re.match(r"^\.text\.(\S+):\s*$", line)
        if m:
            cur = counts.setdefault(m.group(1), dict.fromkeys(COUNTERS, 0))
            continue
        if cur is None:
            continue
        m = OPCODE.search(line)
        if not m:
            continue
        op = m.group(1)
        if op.startswith("HMMA") or op.startswith("HGMMA"):
            cur["HMMA"] += 1
        if op.startswith("LDG."):
            cur["LDG"] += 1
            if ".128" in op:
                cur["LDG.128"] += 1
            if re.search(r"\.(U8|S8|U16|S16)\b", op):
                cur["LDG.narrow"] += 1
        if op.startswith("STG.") and ".128" in op:
            cur["STG.128"] += 1
    return counts


def short_name(demangled):
    return demangled.split("(")[0]


def main(argv):
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    explicit = None
    if "--nvdisasm" in argv:
        i = argv.index("--nvdisasm")
        explicit = argv[i + 1]
        del argv[i:i + 2]
    if not argv:
        sys.exit(__doc__)
    nvdisasm = find_nvdisasm(explicit)
    if argv == ["--find-nvdisasm"]:
        print(nvdisasm)
        return 0
    problems = []
    print("SASS of the sm_90 build (nvdisasm %s); counts are static instructions in each kernel's code" % nvdisasm)
    print("%-5s %5s %6s %5s %8s %8s %7s %5s  %s" % ("prec", "regs", "spill", "HMMA", "LDG.128", "STG.128", "LDG.2B",
                                                   "LDG", "kernel"))
    for unit in argv:
        prec, cubin, log = unit.split(":")
        regs = ptxas_info(log)
        counts = sass_counts(nvdisasm, cubin)
        names = demangle(sorted(counts))
        matched = dict.fromkeys(range(len(RULES)), 0)
        for mangled in sorted(counts, key=lambda n: names[n]):
            c = counts[mangled]
            r = regs.get(mangled, (-1, 0, 0))
            spill = r[1] + r[2]
            print("%-5s %5d %6d %5d %8d %8d %7d %5d  %s" % (prec, r[0], spill, c["HMMA"], c["LDG.128"], c["STG.128"],
                                                          c["LDG.narrow"], c["LDG"], names[mangled]))
            if spill:
                problems.append("%s %s spills %d bytes" % (prec, names[mangled], spill))
            for i, (pattern, counter, bound, why, op) in enumerate(RULES):
                if re.search(pattern, short_name(names[mangled])):
                    matched[i] += 1
                    if (c[counter] < bound) if op == ">=" else (c[counter] > bound):
                        problems.append("%s %s: %d %s, want %s %d (%s)" % (prec, short_name(names[mangled]),
                                                                          c[counter], counter, op, bound, why))
        for i, n in matched.items():
            if n == 0:
                problems.append("%s: no kernel matches rule /%s/ (%s)" % (prec, RULES[i][0], RULES[i][3]))
    print("\nrules: " + "; ".join("/%s/ %s %s %d" % (p, c, op, n) for p, c, n, _, op in RULES) + "; no kernel spills")
    for p in problems:
        print("FAIL: " + p)
    if not problems:
        print("all rules hold")
    return 1 if (check and problems) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
