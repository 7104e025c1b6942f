#!/usr/bin/env python3
"""Launch limits of every kernel the GPU trainer compiles (train_gpt2.cu and llmc/, the BF16 and
FP32 builds, sm_80 and sm_90), as a markdown table; exits 1 naming the kernel and its launch on
any launch the hardware would refuse.

    launch_limits.py [--src DIR] [--build PREC:PTXAS_LOG:KEEP_DIR ...] [--check-doc FILE | --write-doc FILE]
    launch_limits.py --same-kernels LOG OTHER_LOG   # exit 1 unless OTHER_LOG has LOG's kernels, resources alike

Every number comes from the build or the source, none is copied here:
- per kernel instance (from the build's nvcc -Xptxas -v log, gpu-nvcc-check's build/gpu/ptxas_*.log):
  registers per thread and static shared memory for sm_80 and sm_90, and from its PTX (nvcc -keep:
  KEEP_DIR/*.compute_80.ptx, compute_90.ptx) the .maxntid of its __launch_bounds__;
- per launch site (every `kernel<<<grid, block, dynamic, stream>>>` in the sources, each compiled
  instance matched to exactly one): the block and the dynamic shared memory, the site's own
  arguments evaluated with the sources' #defines (template arguments from the instance's name);
  where an argument is a variable, SITES says what it is (a #define expression, verified to be
  what the source assigns, or dev/bench/gpu_model.py's mirror of the code);
- the dynamic shared memory limit of each instance: every cudaFuncSetAttribute(...,
  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) in the sources, directly or through a helper
  taking the kernel as a parameter, with the conditions that guard it evaluated (a setup-once
  static flag counts as true); a raise this script cannot read is an error, not a guess;
- the grids at GPT-2 124M and 1558M as scripts/run_gpt2_124M.sh and run_gpt2_1558M.sh run them (their
  -b and -t), at the head sizes fa2_head_size_ok serves (where C divides): gpu_model.py's launch
  geometry (its Launch objects, at the build's X128) where it models the kernel, SITES otherwise.
The rules (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" and
cudaFuncSetAttribute): at most 1024 threads per block (x, y <= 1024, z <= 64) and no more than
the kernel's .maxntid; registers per block, allocated per warp in units of 256, at most 65536;
static shared memory at most 48 KiB; dynamic at most the kernel's MaxDynamicSharedMemorySize,
which is 48 KiB minus the static size unless raised, and a raise may not exceed the opt-in maximum
per block minus the static size (sm_80 166912 B, sm_90 232448 B: the SM's shared memory less the
1 KiB the runtime keeps per block, gpu_model.py's GPUS); grid x <= 2^31 - 1, y and z <= 65535,
none 0. Audit errors (a kernel without a launch site, a site SITES does not know, an argument
that does not evaluate) exit 1 as well: the table cannot silently miss a kernel.
"""
import argparse
import contextlib
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.environ.get("GPU_MODEL_DIR") or os.path.join(ROOT, "dev", "bench"))
import gpu_model as gm  # noqa: E402

# The two architectures the builds compile for, their per-block limits from gpu_model.py's GPUS
ARCHS = {"sm_80": gm.GPUS["A100"], "sm_90": gm.GPUS["H200"]}
BLOCK_RESERVED = 1024  # shared memory the runtime keeps per block (gpu_model.resident_blocks too)
DEFAULT_DYN = 48 * 1024  # the static limit, and static + dynamic without a raise
MAX_THREADS, MAX_BLOCK_DIM, MAX_REGS_BLOCK = 1024, (1024, 1024, 64), 65536
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
HEAD_SIZES = []  # the head sizes the tensor-core attention serves: fa2_head_size_ok's (read by audit)
SLICES = 8  # the wire kernels' slices (grid y): ranks of a group, 8 here (65535 allowed)
DOC_BEGIN = "<!-- launch_limits.py table: begin -->"
DOC_END = "<!-- launch_limits.py table: end -->"
BUILDS = ["BF16:build/gpu/ptxas_train_gpt2_BF16.log:build/gpu/keep_train_gpt2_BF16",
          "FP32:build/gpu/ptxas_train_gpt2_FP32.log:build/gpu/keep_train_gpt2_FP32"]


class AuditError(Exception):
    pass


def optin(arch):
    return ARCHS[arch]["smem_sm"] - BLOCK_RESERVED


# ---------------------------------------------------------------------------------------------
# The sources
def strip_comments(text):
    """The text with comments and string contents as spaces (offsets and lines unchanged)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + text[j:j + 1])  # a literal's contents blanked
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out).replace("\\\n", " \n")


class Source:
    def __init__(self, path, rel):
        self.rel = rel
        self.text = strip_comments(open(path).read())

    def line(self, pos):
        return self.text.count("\n", 0, pos) + 1

    def where(self, pos):
        return "%s:%d" % (self.rel, self.line(pos))


def read_sources(src):
    paths = [os.path.join(src, "train_gpt2.cu")] + sorted(glob.glob(os.path.join(src, "llmc", "*.cuh")) +
                                                           glob.glob(os.path.join(src, "llmc", "*.h")) +
                                                           glob.glob(os.path.join(src, "llmc", "*.cpp")))
    if not os.path.isfile(paths[0]):
        raise AuditError("%s: no train_gpt2.cu (--src is the repository root)" % src)
    return [Source(p, os.path.relpath(p, src)) for p in paths]


def balanced(text, i, open_="(", close=")"):
    """The end (exclusive) of the bracketed run starting at text[i] == open_."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise AuditError("unbalanced %s at offset %d" % (open_, i))


def split_args(s):
    """Top-level comma split of an argument list (parentheses, brackets and template angles)."""
    out, depth, cur = [], 0, ""
    for k, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and re.search(r"\w$", s[:k]) and re.match(r"\s*[\w:]+\s*>", s[k + 1:]):
            depth += 1  # a template argument list such as kernel<64>
        elif c == ">" and depth > 0 and re.search(r"<\s*[\w:]+\s*$", cur):
            depth -= 1
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur.strip())
    return out


def collect_macros(sources):
    """{name: (params or None, body, where)}; a name #defined twice with different bodies maps to None
    (an error only if an evaluation needs it)."""
    macros = {}
    for s in sources:
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\([^)]*\))?(.*)$", s.text, re.M):
            name, params, body = m.group(1), m.group(2), m.group(3).strip()
            params = [p.strip() for p in params[1:-1].split(",")] if params else None
            new = (params, body, s.where(m.start()))
            if name in macros and macros[name] is not None and macros[name][:2] != new[:2]:
                macros[name] = None
            elif name not in macros:
                macros[name] = new
    return macros


class Evaluator:
    """C integer expressions of the sources' #defines: macros expanded, then evaluated as Python
    with only the names given (build constants, template and helper parameters)."""

    CASTS = r"\(\s*(?:const\s+)?(?:unsigned\s+int|unsigned\s+long|unsigned|size_t|int|long|uint32_t|uint64_t)\s*\)"

    def __init__(self, macros, names):
        self.macros, self.names = macros, dict(names)

    def expand(self, expr, depth=0):
        if depth > 40:
            raise AuditError("macro expansion too deep in %r" % expr)
        out, i = [], 0
        for m in re.finditer(r"\b[A-Za-z_]\w*\b", expr):
            name = m.group(0)
            if m.start() < i or name in self.names or name not in self.macros:
                continue  # inside a macro's arguments already taken, a given name, or no macro
            if self.macros[name] is None:
                raise AuditError("%s is #defined more than once, differently: cannot evaluate %r" % (name, expr))
            params, body, _ = self.macros[name]
            if params is None:
                out.append(expr[i:m.start()] + "(" + self.expand(body, depth + 1) + ")")
                i = m.end()
            else:
                j = m.end()
                while j < len(expr) and expr[j].isspace():
                    j += 1
                if j >= len(expr) or expr[j] != "(":
                    continue
                e = balanced(expr, j)
                args = split_args(expr[j + 1:e - 1])
                if len(args) != len(params):
                    raise AuditError("%s takes %d arguments: %r" % (name, len(params), expr))
                sub = body
                for p, a in zip(params, args):
                    sub = re.sub(r"\b%s\b" % re.escape(p), "(" + a + ")", sub)
                out.append(expr[i:m.start()] + "(" + self.expand(sub, depth + 1) + ")")
                i = e
        out.append(expr[i:])
        return "".join(out)

    def __call__(self, expr, extra=None):
        names = dict(self.names, **(extra or {}))
        saved = self.names
        self.names = names
        try:
            py = self.expand(expr)
        finally:
            self.names = saved
        py = re.sub(self.CASTS, " ", py)
        py = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", py)
        py = py.replace("&&", " and ").replace("||", " or ")
        py = re.sub(r"!(?!=)", " not ", py)
        py = re.sub(r"(?<![/])/(?![/])", "//", py)
        py = re.sub(r"\btrue\b", "True", py)
        py = re.sub(r"\bfalse\b", "False", py)
        if "?" in py:
            raise AuditError("cannot evaluate %r (a ?: expression)" % expr)
        env = {"__builtins__": {}, "dim3": lambda *a: tuple(a) + (1,) * (3 - len(a))}
        env.update({k: v for k, v in names.items() if re.match(r"^\w+$", k)})
        for k, v in names.items():  # dotted names (a struct's field)
            if not re.match(r"^\w+$", k):
                py = re.sub(r"\b%s\b" % re.escape(k), repr(v), py)
        try:
            return eval(py, env)  # noqa: S307 (the sources' own integer expressions)
        except Exception as e:
            raise AuditError("cannot evaluate %r (as %r): %s" % (expr, py.strip(), e))


# ---------------------------------------------------------------------------------------------
# Launch sites and raises
class Site:
    def __init__(self, src, pos, kernel, args):
        self.src, self.pos = src, pos
        m = re.match(r"^(\w+)\s*(?:<(.*)>)?$", kernel.strip())
        if not m:
            raise AuditError("%s: cannot read the kernel %r" % (src.where(pos), kernel))
        self.base, self.targ = m.group(1), (m.group(2) or "").strip() or None
        self.args = args
        self.where = src.where(pos)  # file:line, for audit errors (the report names the file only)

    @property
    def key(self):
        return "%s<%s>" % (self.base, self.targ) if self.targ else self.base


def launch_sites(sources):
    sites = []
    for s in sources:
        for m in re.finditer(r"\b([A-Za-z_]\w*\s*(?:<[^<>;]*>)?)\s*<<<(.*?)>>>", s.text, re.S):
            args = split_args(m.group(2))
            if not 2 <= len(args) <= 4:
                raise AuditError("%s: a launch with %d configuration arguments" % (s.where(m.start()), len(args)))
            sites.append(Site(s, m.start(), m.group(1), args))
    return sites


def enclosing_blocks(text, pos):
    """The positions of the '{' of the blocks containing pos, innermost first."""
    stack = []
    for m in re.finditer(r"[{}]", text[:pos]):
        if m.group(0) == "{":
            stack.append(m.start())
        elif stack:
            stack.pop()
    return stack[::-1]


def function_of(src, pos):
    """(name, parameter names, body start, body end) of the function whose body holds pos."""
    blocks = enclosing_blocks(src.text, pos)
    if not blocks:
        raise AuditError("%s: not inside a function" % src.where(pos))
    start = blocks[-1]
    head = src.text[max(0, start - 400):start]
    m = re.search(r"(\w+)\s*\(([^()]*)\)\s*$", head)
    if not m:
        raise AuditError("%s: cannot read the enclosing function" % src.where(pos))
    params = [re.findall(r"\w+", p)[-1] for p in m.group(2).split(",") if re.findall(r"\w+", p)]
    return m.group(1), params, start, balanced(src.text, start, "{", "}")


def guards(src, pos):
    """The conditions that guard pos inside its function: the `if (...)` of each enclosing block
    and of a brace-less statement; a loop or else branch is an error (not read)."""
    name, params, fstart, fend = function_of(src, pos)
    conds = []
    for b in enclosing_blocks(src.text, pos)[:-1]:
        before = src.text[fstart:b].rstrip()
        if before.endswith(")"):
            o = before.rfind("(")
            depth, k = 0, len(before) - 1
            while k >= 0:  # the matching '('
                depth += before[k] == ")"
                depth -= before[k] == "("
                if depth == 0:
                    o = k
                    break
                k -= 1
            kw = re.search(r"(\w+)\s*$", before[:o])
            if kw and kw.group(1) == "if" and not re.search(r"\belse\s*if\s*$", before[:o]):
                conds.append(before[o + 1:-1])
                continue
            raise AuditError("%s: a raise inside a %s block is not read" % (src.where(pos), kw.group(1) if kw else "?"))
        if re.search(r"\belse\s*$", before) or re.search(r"\b(do|for|while)\b[^;{}]*$", before):
            raise AuditError("%s: a raise inside an else, do or loop block is not read" % src.where(pos))
    stmt_start = max(src.text.rfind(c, fstart, pos) for c in ";{}") + 1
    head = src.text[stmt_start:pos]
    m = re.match(r"\s*if\s*\(", head)
    if m:
        o = stmt_start + m.end() - 1
        conds.append(src.text[o + 1:balanced(src.text, o) - 1])
    elif re.search(r"\b(else|for|while)\b", head):
        raise AuditError("%s: a raise behind else or a loop is not read" % src.where(pos))
    body = src.text[fstart:fend]
    once = set(re.findall(r"\bstatic\s+(?:int|bool)\s+(\w+)\s*=\s*(?:0|false)\s*;", body))
    attrs = set(re.findall(r"\bcudaFuncAttributes\s+(\w+)\s*;", body))
    return name, params, [c for c in conds if re.sub(r"\s", "", c) not in {"!" + v for v in once}], attrs


def kernel_name(expr):
    m = re.match(r"^\s*&?\s*(\w+)\s*(?:<\s*([^<>]*?)\s*>)?\s*$", expr)
    return (m.group(1), m.group(2)) if m else None


def raises(sources, calls_text):
    """Each MaxDynamicSharedMemorySize raise, directly or through one helper that takes the kernel as
    a parameter: dicts of the kernel (base, template argument text), the bytes (an expression in the
    helper's parameters), the helper's parameters bound to a call's arguments, the conditions in the
    helper's scope (inner) and around the call (outer), the cudaFuncAttributes variables in scope."""
    out = []
    for s in sources:
        for m in re.finditer(r"\bcudaFuncSetAttribute\s*\(", s.text):
            e = balanced(s.text, m.end() - 1)
            args = split_args(s.text[m.end():e - 1])
            if len(args) != 3 or "MaxDynamicSharedMemorySize" not in args[1]:
                continue
            fname, params, conds, attrs = guards(s, m.start())
            k = kernel_name(args[0])
            if not k:
                raise AuditError("%s: cannot read the kernel %r of a raise" % (s.where(m.start()), args[0]))
            if k[0] not in params:
                out.append({"kernel": k, "value": args[2], "bind": {}, "kparam": None, "inner": conds, "outer": [],
                            "where": s.where(m.start()), "attrs": attrs})
                continue
            if k[1] is not None:
                raise AuditError("%s: a raise of %r, a template of a parameter, is not read" % (s.where(m.start()),
                                                                                           args[0]))
            ncalls = 0
            for c_src, c in calls_text(fname):
                cargs = split_args(c_src.text[c.end():balanced(c_src.text, c.end() - 1) - 1])
                if len(cargs) != len(params):
                    raise AuditError("%s: a call of %s with %d arguments" % (c_src.where(c.start()), fname, len(cargs)))
                bind = dict(zip(params, cargs))
                ck = kernel_name(bind[k[0]])
                if not ck:
                    raise AuditError("%s: cannot read the kernel %r of a %s call" %
                                     (c_src.where(c.start()), bind[k[0]], fname))
                _, _, outer, _ = guards(c_src, c.start())
                out.append({"kernel": ck, "value": args[2], "bind": bind, "kparam": k[0], "inner": conds,
                            "outer": outer, "where": "%s via %s" % (c_src.where(c.start()), s.where(m.start())),
                            "attrs": attrs})
                ncalls += 1
            if not ncalls:
                raise AuditError("%s: %s raises a kernel's limit, and is never called" % (s.where(m.start()), fname))
    return out


def raised_limit(raise_list, base, targ, static, E):
    """(bytes, where) of the raise of instance base<targ> that runs (static: its static shared
    memory, for a cudaFuncAttributes' sharedSizeBytes), or None."""
    found = None
    for r in raise_list:
        rb, rt = r["kernel"]
        if rb != base or (rt is None) != (targ is None):
            continue
        if rt is not None and rt.replace(" ", "") != targ.replace(" ", "") and str(E(rt)) != targ:
            continue
        fields = {a + ".sharedSizeBytes": static for a in r["attrs"]}
        vals = {p: E(a, fields) for p, a in r["bind"].items() if p != r["kparam"]}
        scope = dict(vals, **fields)
        if not all(E(c, scope) for c in r["inner"]) or not all(E(c, fields) for c in r["outer"]):
            continue
        v = E(r["value"], scope)
        if found is not None and found[0] != v:
            raise AuditError("raised twice, to %d (%s) and %d (%s)" % (found[0], found[1], v, r["where"]))
        found = (v, r["where"])
    return found


# ---------------------------------------------------------------------------------------------
# The builds: ptxas -v logs and PTX
def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\n")))


def instance_of(demangled):
    """(base, template arguments or None) of a demangled kernel name."""
    d = re.sub(r"^void\s+", "", demangled)
    m = re.match(r"^(\w+)(<.*?>)?\(", d)
    if not m:
        raise AuditError("cannot read the kernel name %r" % demangled)
    targ = m.group(2)[1:-1] if m.group(2) else None
    return m.group(1), targ


def read_ptxas(path):
    """{mangled: {arch: (registers, static shared bytes)}}"""
    if not os.path.isfile(path):
        raise AuditError("%s: no such ptxas log (make -f dev/gpu.mk gpu-nvcc-check writes the trainer's)" % path)
    out, name, arch = {}, None, None
    for line in open(path):
        m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
        if m:
            name, arch = m.group(1), m.group(2)
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            sm = re.search(r"(\d+) bytes smem", line)
            out.setdefault(name, {})[arch] = (int(m.group(1)), int(sm.group(1)) if sm else 0)
            name = None
    if not out:
        raise AuditError("%s: no kernel in this ptxas log" % path)
    return out


def read_bounds(keep, arch):
    """{mangled: (maxntid product or None, minnctapersm or None)} from the build's PTX."""
    paths = glob.glob(os.path.join(keep, "*.compute_%s.ptx" % arch[3:]))
    if len(paths) != 1:
        raise AuditError("%s: %d compute_%s PTX files (nvcc -keep writes one)" % (keep, len(paths), arch[3:]))
    text = open(paths[0]).read()
    out = {}
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(", text):
        head = text[m.end():text.find("{", m.end())]
        t = re.search(r"\.maxntid\s+(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", head)
        b = re.search(r"\.minnctapersm\s+(\d+)", head)
        out[m.group(1)] = (int(t.group(1)) * int(t.group(2)) * int(t.group(3)) if t else None,
                           int(b.group(1)) if b else None)
    return out


# ---------------------------------------------------------------------------------------------
# Geometry: the runs of scripts/run_gpt2_*.sh
def script_geometry(src, size):
    path = os.path.join(src, "scripts", "run_gpt2_%s.sh" % size)
    text = open(path).read()
    b, t, e = (re.search(r"\s-%s\s+(\w+)" % f, text) for f in ("b", "t", "e"))
    if not (b and t and e):
        raise AuditError("%s: no -b, -t and -e" % path)
    L, C, NH = gm.MODELS[size]
    if e.group(1) != "d%d" % L:
        raise AuditError("%s: -e %s, gpu_model.py's %s has %d layers" % (path, e.group(1), size, L))
    return {"size": size, "B": int(b.group(1)), "T": int(t.group(1)), "L": L, "C": C, "NH": NH, "V": gm.V,
            "Vp": gm.VP, "N": gm.num_params(L, C), "BT": int(b.group(1)) * int(t.group(1))}


@contextlib.contextmanager
def model_pack(x128):
    """gpu_model.py's launch geometry at a build's X128 (it models BF16: PACK 8)."""
    saved = gm.PACK
    gm.PACK = x128
    try:
        yield
    finally:
        gm.PACK = saved


def cdiv(a, b):
    return -(-a // b)


def served_head_sizes(sources):
    """The head sizes of fa2_head_size_ok (llmc/attention_fa2.cuh): those the audit runs attention at."""
    for s in sources:
        m = re.search(r"\bfa2_head_size_ok\s*\(\s*int\s+(\w+)\s*\)\s*\{\s*return\s+([^;]*);", s.text)
        if m:
            terms = [t.strip() for t in m.group(2).split("||")]
            sizes = [re.match(r"^%s\s*==\s*(\d+)$" % m.group(1), t) for t in terms]
            if all(sizes):
                return [int(x.group(1)) for x in sizes]
            raise AuditError("%s: cannot read fa2_head_size_ok's head sizes" % s.where(m.start()))
    raise AuditError("no fa2_head_size_ok in the sources: which head sizes does the tensor-core attention take?")


def heads(g):
    return [(hs, g["C"] // hs) for hs in HEAD_SIZES if g["C"] % hs == 0]


def gm_grids(launches):
    return [(ln.grid + (1, 1))[:3] for ln in launches]


def gm_threads(launches):
    return {ln.threads for ln in launches}


# SITES: per launch site (the kernel as written before <<<), how its grids at a geometry are found:
# "model", gpu_model.py's Launch objects of it (their threads must be the site's), or "grid",
# [(x, y, z), ...], one per launch at the geometry ([] where it launches none); both take (g, inst,
# E): g, script_geometry plus X128, fa2 (BF16: the tensor-core attention) and insts (the site's
# compiled template arguments); inst, this instance's; E, the build's Evaluator. "threads", where
# the site's block is a variable: a #define expression ("assigned": the assignment the source must
# hold) or "model" (gpu_model.py's threads, at each geometry).
def _ln_fwd(g, inst, E):
    # residual_layernorm_forward's switch: the instance of the row's packs, else LN_MAX_PACKS's
    packs = cdiv(g["C"], 32 * g["X128"])
    used = packs if packs in g["insts"] else E("LN_MAX_PACKS")
    return [gm.ln_forward_launch(g["BT"], g["C"])] if inst == used else []


def _ln_bwd(g, inst, E):
    return [gm.ln_backward_launches(g["BT"], g["C"], "H200", "head")[0]]


def _bias(g):
    return [gm.bias_backward_launches(g["BT"], oc, "H200", "head") for oc in (g["C"], 3 * g["C"], 4 * g["C"])]


def _fa2(kernel):
    def grid(g, inst, E):
        if not g["fa2"] or g["C"] % int(inst):
            return []
        return [gm.FA2_LAUNCHES[kernel][2](g["B"], g["C"] // int(inst), g["T"])]
    return grid


def _scalar(g, inst, E):  # the fallback: FP32 at every head size, BF16 at those fa2 does not take
    return [(cdiv(g["B"] * nh * g["T"], E("ATT_SCALAR_WARPS")), 1, 1) for hs, nh in heads(g)
            if not (g["fa2"] and hs in HEAD_SIZES)]


def _capped(n, per, cap):
    return (min(cdiv(max(n, 1), per), cap), 1, 1)


SITES = {
    "encoder_forward_kernel": {"model": lambda g, i, E: [gm.encoder_forward(g["BT"], g["C"])]},
    # dwte: a block row per bucket of equal tokens, at most min(B T, V) of them (the model's count is
    # the expected one for random tokens); threads: the model's mirror of encoder_backward's
    "encoder_backward_wte_kernel": {"threads": "model",
                                    "grid": lambda g, i, E: [(min(g["BT"], g["V"]),) + ln.grid[1:] + (1,)
                                                             for ln in gm.encoder_backward_launches(g["B"], g["T"],
                                                                                                    g["C"])[:1]],
                                    "model": lambda g, i, E: gm.encoder_backward_launches(g["B"], g["T"], g["C"])[:1]},
    "encoder_backward_wpe_kernel": {"model": lambda g, i, E: gm.encoder_backward_launches(g["B"], g["T"], g["C"])[1:]},
    "residual_layernorm_forward_kernel<P>": {"model": _ln_fwd},
    "layernorm_backward_kernel<true>": {"model": _ln_bwd, "threads": "32 * LN_BWD_WARPS",
                                        "assigned": r"threads\s*=\s*32\s*\*\s*LN_BWD_WARPS"},
    "layernorm_backward_kernel<false>": {"model": _ln_bwd, "threads": "32 * LN_BWD_WARPS",
                                         "assigned": r"threads\s*=\s*32\s*\*\s*LN_BWD_WARPS"},
    "colsum_finish_kernel": {"model": lambda g, i, E: [gm.ln_backward_launches(g["BT"], g["C"], "H200", "head")[1]] +
                             [b[1] for b in _bias(g)]},
    "bias_backward_kernel": {"model": lambda g, i, E: [b[0] for b in _bias(g)]},
    "gelu_forward_kernel": {"model": lambda g, i, E: [gm.gelu_launch(g["BT"] * 4 * g["C"], "gelu_forward_kernel")]},
    "gelu_backward_inplace_kernel": {"model": lambda g, i, E: [gm.gelu_launch(g["BT"] * 4 * g["C"],
                                                                              "gelu_backward_inplace_kernel")]},
    "gelu_backward_rebuild_kernel": {"model": lambda g, i, E: [gm.gelu_launch(g["BT"] * 4 * g["C"],
                                                                              "gelu_backward_rebuild_kernel")]},
    "fused_classifier_kernel": {"model": lambda g, i, E: [gm.classifier_launch(g["BT"], g["Vp"])]},
    "loss_accumulate_kernel": {"model": lambda g, i, E: [gm.loss_acc_launch(g["BT"])]},
    "adamw_multi_kernel<G>": {"model": lambda g, i, E: [gm.adamw_launch(g["L"], g["C"])]},
    "sum_of_squares_kernel<T>": {"model": lambda g, i, E: [gm.norm_launch(g["N"], "H200")]},
    # not compiled into the trainer (the kernel tests' per-tensor AdamW)
    "adamw_kernel<G>": {"grid": lambda g, i, E: [_capped(g["N"], 256 * g["X128"], 4096)]},
    "attention_forward_fa2_kernel<D>": {"grid": _fa2("attention_forward_fa2_kernel")},
    "attention_backward_fa2_dq_kernel<D>": {"grid": _fa2("attention_backward_fa2_dq_kernel")},
    "attention_backward_fa2_dkv_kernel<D>": {"grid": _fa2("attention_backward_fa2_dkv_kernel")},
    "attention_forward_scalar_kernel": {"grid": _scalar},
    "attention_backward_query_scalar_kernel": {"grid": _scalar},
    "attention_backward_key_scalar_kernel": {"grid": _scalar},
    # DiLoCo's outer step (llmc/outer_kernels.cuh, outer_blocks), over at most every parameter
    "outer_nonfinite_kernel": {"grid": lambda g, i, E: [(1, 1, 1)]},
    "outer_local_kernel": {"grid": lambda g, i, E: [_capped(g["N"], E("OUTER_THREADS"), E("OUTER_MAX_BLOCKS"))]},
    "outer_message_kernel": {"grid": lambda g, i, E: [_capped(g["N"], E("OUTER_THREADS"), E("OUTER_MAX_BLOCKS"))]},
    "outer_update_kernel": {"grid": lambda g, i, E: [_capped(g["N"], E("OUTER_THREADS"), E("OUTER_MAX_BLOCKS"))]},
    # ZeRO's shard sums (llmc/shard_kernels.cuh: ceil(n / 256) blocks, at most 4096)
    "accumulate_kernel": {"grid": lambda g, i, E: [_capped(g["N"], 256, 4096)]},
    "scale_kernel": {"grid": lambda g, i, E: [_capped(g["N"], 256, 4096)]},
    # the replica link's wire formats (llmc/wire_kernels.cuh: wire_grid, ceil(n / 256) blocks at most
    # 4096; int8/int4, one block per WIRE_BLOCK values per slice; top-k, a block per chunk per slice)
    "wire_bf16_kernel": {"grid": lambda g, i, E: [_capped(g["N"] * SLICES, 256, 4096)]},
    "wire_int_kernel": {"grid": lambda g, i, E: [(cdiv(g["N"], E("WIRE_BLOCK")), SLICES, 1)]},
    "wire_decode_sum_kernel": {"grid": lambda g, i, E: [_capped(g["N"] * SLICES, 256, 4096)]},
    "wire_topk_kernel": {"grid": lambda g, i, E: [(cdiv(g["N"], E("WIRE_TOPK_CHUNK")), SLICES, 1)]},
    "wire_topk_sum_kernel": {"grid": lambda g, i, E: [(cdiv(g["N"], E("WIRE_TOPK_CHUNK")), SLICES, 1)]},
    "wire_gradient_message_kernel": {"grid": lambda g, i, E: [_capped(g["N"], 256, 4096)]},
    "wire_gradient_back_kernel": {"grid": lambda g, i, E: [_capped(g["N"], 256, 4096)]},
    # -opt muon (llmc/muon.cuh: muon_blocks, ceil(n / 256) blocks at most 4096) over one block matrix,
    # the largest 4 C x C; the polynomial over S, C x C (the smaller side is C)
    "muon_blend_kernel<G>": {"grid": lambda g, i, E: [_capped(4 * g["C"] * g["C"], 256, 4096)]},
    "muon_scale_kernel": {"grid": lambda g, i, E: [_capped(4 * g["C"] * g["C"], 256, 4096)]},
    "muon_poly_kernel": {"grid": lambda g, i, E: [_capped(g["C"] * g["C"], 256, 4096)]},
    "muon_step_kernel": {"grid": lambda g, i, E: [_capped(4 * g["C"] * g["C"], 256, 4096)]},
    "muon_owned_add_kernel": {"grid": lambda g, i, E: [(1, 1, 1)]},  # one sum into the norm (llmc/muon_owned.cuh)
}


def site_grids(site, g, inst, E):
    """(grids, model threads or None) of a site at g."""
    spec = SITES[site.key]
    with model_pack(g["X128"]):
        launches = spec["model"](g, inst, E) if "model" in spec else None
        grids = spec["grid"](g, inst, E) if "grid" in spec else gm_grids(launches)
    return grids, (gm_threads(launches) if launches else None)


# ---------------------------------------------------------------------------------------------
# The audit
def fmt_grid(grids):
    if not grids:
        return "—"
    top = tuple(max(gr[d] for gr in grids) for d in range(3))
    while len(top) > 1 and top[-1] == 1:
        top = top[:-1]
    return " x ".join(str(v) for v in top)


def match_site(sites, base, targ):
    """[(site, template binding)] of the sites that launch instance base<targ>."""
    out = []
    for s in sites:
        if s.base != base or (s.targ is None) != (targ is None):
            continue
        if s.targ is None:
            out.append((s, {}))
        elif re.match(r"^[A-Za-z_]\w*$", s.targ) and s.targ not in ("true", "false"):
            out.append((s, {s.targ: int(targ) if re.match(r"^\d+$", targ) else targ}))  # a template parameter
        elif s.targ.replace(" ", "") == targ.replace(" ", ""):
            out.append((s, {}))
    return out


def as_block(block, site):
    if isinstance(block, int):
        block = (block, 1, 1)
    if not (isinstance(block, tuple) and len(block) == 3 and all(isinstance(b, int) for b in block)):
        raise AuditError("%s: block %r: not integers" % (site.where, block))
    return block


def site_config(site, binding, E, geoms, x128, prec, insts):
    """(dynamic bytes, [(geometry, grids, block (x, y, z))]) of a site's launches of one instance; the
    block is the site's, or at each geometry gpu_model.py's where the site computes it at run time."""
    spec = SITES[site.key]
    inst = next(iter(binding.values())) if binding else site.targ
    block = None
    if spec.get("threads") not in (None, "model"):
        body = site.src.text[function_of(site.src, site.pos)[2]:site.pos]
        if not re.search(spec["assigned"], body):
            raise AuditError("%s: its block is no longer %s: update SITES" % (site.where, spec["threads"]))
        block = E(spec["threads"], binding)
    elif spec.get("threads") is None:
        block = E(site.args[1], binding)
    dyn = E(site.args[2], binding) if len(site.args) > 2 else 0
    per_geo = []
    for g in geoms:
        gg = dict(g, X128=x128, fa2=prec == "BF16", insts=insts)
        grids, mthreads = site_grids(site, gg, inst, E)
        here = block
        if block is None:  # the model's mirror of a block computed at run time
            if not mthreads or len(mthreads) != 1:
                raise AuditError("%s: gpu_model.py gives no single block size at %s" % (site.where, g["size"]))
            here = next(iter(mthreads))
        elif mthreads:
            total = block if isinstance(block, int) else block[0] * block[1] * block[2]
            if mthreads != {total}:
                raise AuditError("%s: the source launches %d threads a block, gpu_model.py's launch geometry %s" %
                                 (site.where, total, sorted(mthreads)))
        per_geo.append((g, grids, as_block(here, site)))
    if not isinstance(dyn, int):
        raise AuditError("%s: dynamic shared memory %r: not an integer" % (site.where, dyn))
    return dyn, per_geo


def violations(arch, block, regs, static, dyn, raised, maxntid, per_geo):
    """The limits one launch configuration breaks on arch, one line each (block: the site's, the
    largest of its geometries' where it varies)."""
    threads = block[0] * block[1] * block[2]
    limit = raised[0] if raised else DEFAULT_DYN - static
    alloc = cdiv(threads, 32) * cdiv(regs * 32, 256) * 256
    bad = []
    if threads > MAX_THREADS or any(b > m for b, m in zip(block, MAX_BLOCK_DIM)) or min(block) < 1:
        bad.append("block %s: at most %d threads, %s per dimension" % (block, MAX_THREADS, MAX_BLOCK_DIM))
    if maxntid is not None and threads > maxntid:
        bad.append("%d threads a block, its __launch_bounds__ allow %d" % (threads, maxntid))
    if alloc > MAX_REGS_BLOCK:
        bad.append("%d registers x %d threads: %d allocated a block (256 a warp at a time), at most %d" %
                   (regs, threads, alloc, MAX_REGS_BLOCK))
    if static > DEFAULT_DYN:
        bad.append("%d B static shared memory, at most %d" % (static, DEFAULT_DYN))
    if raised and raised[0] + static > optin(arch):
        bad.append("raised to %d B (%s) + %d B static: above %s's opt-in %d B" %
                   (raised[0], raised[1], static, arch, optin(arch)))
    if dyn > limit:
        if raised:
            bad.append("%d B dynamic, its limit raised only to %d B (%s)" % (dyn, limit, raised[1]))
        else:
            bad.append("%d B static + %d B dynamic = %d B > %d B and its limit is not raised (dynamic at most %d B)" %
                       (static, dyn, static + dyn, DEFAULT_DYN, limit))
    for g, grids, _ in per_geo:
        for gr in grids:
            if any(v < 1 for v in gr) or any(v > m for v, m in zip(gr, MAX_GRID)):
                bad.append("grid %s at %s: each dimension 1 .. %s" % (gr, g["size"], MAX_GRID))
    return bad, limit, alloc


def audit(src, builds):
    """(table rows, violation lines, audit errors, sites no build compiles, geometries)"""
    sources = read_sources(src)
    macros = collect_macros(sources)
    sites = launch_sites(sources)
    errors, fails, rows = [], [], []
    keys = {s.key for s in sites}
    for k in sorted(keys - set(SITES)):
        errors.append("%s (%s): a launch site launch_limits.py's SITES does not know: give it its grid" %
                      (k, ", ".join(s.where for s in sites if s.key == k)))
    for k in sorted(set(SITES) - keys):
        errors.append("SITES has %s, which no source launches: take it out" % k)

    def calls_text(fname):
        for s in sources:
            for m in re.finditer(r"(?<![\w.])%s\s*\(" % re.escape(fname), s.text):
                if re.search(r"\b(void|int|static|inline)\s*$", s.text[max(0, m.start() - 200):m.start()]):
                    continue  # the definition
                yield s, m
    raise_list = raises(sources, calls_text)
    HEAD_SIZES[:] = served_head_sizes(sources)
    geoms = [script_geometry(src, size) for size in ("124M", "1558M")]
    compiled = set()
    for prec, log, keep in builds:
        ptxas = read_ptxas(log)
        bounds = {a: read_bounds(keep, a) for a in ARCHS}
        names = demangle(sorted(ptxas))
        x128 = 16 // (4 if prec == "FP32" else 2)
        E = Evaluator(macros, {"X128": x128, "sizeof(floatX)": 16 // x128})
        insts = {}
        for mangled in ptxas:
            base, targ = instance_of(names[mangled])
            for s, binding in match_site(sites, base, targ):
                insts.setdefault(s.key, set()).update(binding.values())
        natural = lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", "%s<%s>" % instance_of(names[n]))]  # noqa: E731
        for mangled in sorted(ptxas, key=natural):
            base, targ = instance_of(names[mangled])
            name = "%s<%s>" % (base, targ) if targ else base
            matched = match_site(sites, base, targ)
            if len(matched) != 1:
                errors.append("%s %s: %d launch sites in the sources (%s): the audit needs exactly one" %
                              (prec, name, len(matched), ", ".join(s.where for s, _ in matched) or "none"))
                continue
            site, binding = matched[0]
            compiled.add(site.key)
            if site.key not in SITES:
                continue
            try:
                dyn, per_geo = site_config(site, binding, E, geoms, x128, prec, insts.get(site.key, set()))
            except AuditError as e:
                errors.append("%s %s: %s" % (prec, name, e))
                continue
            blocks = []
            for _, _, b in per_geo:
                if b not in blocks:
                    blocks.append(b)
            block = max(blocks, key=lambda b: b[0] * b[1] * b[2])
            cols = {"regs": [], "static": [], "limit": [], "alloc": [], "bounds": [], "total": []}
            failed = False
            for arch in ARCHS:
                if arch not in ptxas[mangled]:
                    errors.append("%s %s: no %s entry in %s" % (prec, name, arch, log))
                    continue
                regs, static = ptxas[mangled][arch]
                maxntid, minblocks = bounds[arch].get(mangled, (None, None))
                try:
                    raised = raised_limit(raise_list, base, targ, static, E)
                except AuditError as e:
                    errors.append("%s %s: %s" % (prec, name, e))
                    raised = None
                bad, limit, alloc = violations(arch, block, regs, static, dyn, raised, maxntid, per_geo)
                grids = ", ".join("grid %s at %s B %d T %d" % (fmt_grid(gr), g["size"], g["B"], g["T"])
                                  for g, gr, _ in per_geo if gr) or "not launched at %s" % " or ".join(
                                      g["size"] for g in geoms)
                for b in bad:
                    fails.append("FAIL: %s %s %s (%s): block %s, %d B dynamic (%s): %s" %
                                 (prec, arch, name, site.src.rel, "x".join(map(str, block)), dyn, grids, b))
                failed |= bool(bad)
                cols["regs"].append(str(regs))
                cols["static"].append(str(static))
                cols["limit"].append("%d%s" % (limit, " raised" if raised else ""))
                cols["alloc"].append(alloc)
                cols["bounds"].append("—" if not maxntid else str(maxntid) if not minblocks else "%d, %d" % (maxntid, minblocks))
                cols["total"].append(static + dyn)
            one = lambda xs: xs[0] if len(set(xs)) == 1 else " / ".join(xs)  # noqa: E731
            def dims(b):
                b = list(b)
                while len(b) > 1 and b[-1] == 1:
                    b.pop()
                return " x ".join(map(str, b))
            rows.append({"build": prec, "kernel": name, "block": " / ".join(dims(b) for b in blocks),
                         "bounds": one(cols["bounds"]), "regs": " / ".join(cols["regs"]),
                         "regs_block": str(max(cols["alloc"])) if cols["alloc"] else "—",
                         "static": one(cols["static"]), "dyn": str(dyn), "limit": one(cols["limit"]),
                         "total": one([str(t) for t in cols["total"]]),
                         "fits48": "yes" if all(t <= DEFAULT_DYN for t in cols["total"]) else "no: opt-in",
                         "grids": [fmt_grid(gr) for _, gr, _ in per_geo], "verdict": "**FAIL**" if failed else "ok"})
    return rows, fails, errors, [s for s in sites if s.key not in compiled], geoms


def report(rows, fails, errors, unused, geoms):
    """The markdown the script prints (and docs/gpu.md holds): the limits and geometry, the table, the
    sites no build compiles, the audit errors and the violations."""
    g1, g2 = geoms
    lim = ", ".join("%s %d B" % (a, optin(a)) for a in ARCHS)
    geo = " and ".join("%s (L %d, C %d, B %d, T %d: scripts/run_gpt2_%s.sh)" % (g["size"], g["L"], g["C"], g["B"],
                                                                           g["T"], g["size"]) for g in geoms)
    out = ["Limits: %d threads, %d registers (allocated 256 a warp at a time) and %d B of static shared memory a "
           "block; the dynamic limit %d B less the static bytes unless raised, and raised, static + dynamic at most "
           "the opt-in: %s. Grids: the largest launch in "
           "each dimension at %s, attention at head sizes %s where C divides (NH = C / head size), the wire "
           "kernels at %d slices, grids that fill the GPU at %s's %d SMs (gpu_model.py's launch geometry, at the "
           "build's X128). bounds: the PTX .maxntid and .minnctapersm of __launch_bounds__." %
           (MAX_THREADS, MAX_REGS_BLOCK, DEFAULT_DYN, DEFAULT_DYN, lim, geo, ", ".join(map(str, HEAD_SIZES)), SLICES,
            "H200", gm.GPUS["H200"]["sms"]), "",
           "| build | kernel | block | bounds | regs sm_80 / sm_90 | regs a block | static B | dynamic B | "
           "dynamic limit B | static + dynamic | within 48 KiB | grid %s B %d T %d | grid %s B %d T %d | |" %
           (g1["size"], g1["B"], g1["T"], g2["size"], g2["B"], g2["T"]),
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" %
                   (r["build"], r["kernel"], r["block"], r["bounds"], r["regs"], r["regs_block"], r["static"],
                    r["dyn"], r["limit"], r["total"], r["fits48"], r["grids"][0], r["grids"][1], r["verdict"]))
    out.append("")
    for s in unused:
        out.append("Not compiled into these builds: `%s` (%s)." % (s.key, s.src.rel))
    if errors or fails:
        out.append("")
        out += ["    error: %s" % e for e in errors] + ["    %s" % f for f in fails]
    out += ["", "%d kernel instances, %d launch limit violations, %d audit errors." %
            (len(rows), len(fails), len(errors))]
    return "\n".join(out) + "\n"


def doc_table(path):
    text = open(path).read()
    if DOC_BEGIN not in text or DOC_END not in text:
        raise AuditError("%s: no %s ... %s markers" % (path, DOC_BEGIN, DOC_END))
    a = text.index(DOC_BEGIN) + len(DOC_BEGIN)
    return text, a, text.index(DOC_END)


def same_kernels(log, other):
    """0 when the two ptxas logs have the same kernels with the same registers and static shared
    memory per architecture (the cuDNN build against the BF16 one: the table covers it), else 1."""
    a, b = read_ptxas(log), read_ptxas(other)
    names = demangle(sorted(set(a) | set(b)))
    bad = 0
    for k in sorted(set(a) | set(b), key=lambda n: names[n]):
        if a.get(k) != b.get(k):
            bad += 1
            print("FAIL: %s: %s in %s, %s in %s (registers, static shared bytes per architecture)" %
                  (names[k], a.get(k, "absent"), log, b.get(k, "absent"), other))
    if not bad:
        print("ok: %s has the %d kernels of %s, each with the same registers and static shared memory on %s" %
              (other, len(a), log, " and ".join(sorted({arch for v in a.values() for arch in v}))))
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description="launch limits of the GPU trainer's kernels")
    p.add_argument("--src", default=ROOT, help="the repository root whose sources are read")
    p.add_argument("--build", action="append", metavar="PREC:PTXAS_LOG:KEEP_DIR",
                   help="a build (default: gpu-nvcc-check's BF16 and FP32 trainer builds)")
    p.add_argument("--check-doc", metavar="FILE", help="exit 1 if FILE's table is not this table")
    p.add_argument("--write-doc", metavar="FILE", help="write this table between FILE's markers")
    p.add_argument("--same-kernels", nargs=2, metavar=("LOG", "OTHER_LOG"),
                   help="exit 1 unless OTHER_LOG compiles LOG's kernels with the same resources")
    a = p.parse_args()
    if a.same_kernels:
        try:
            return same_kernels(*a.same_kernels)
        except AuditError as e:
            print("launch_limits.py: error: %s" % e)
            return 1
    builds = []
    for b in a.build or BUILDS:
        parts = b.split(":")
        if len(parts) != 3 or parts[0] not in ("BF16", "FP32"):
            sys.exit("launch_limits.py: error: --build %s: PREC:PTXAS_LOG:KEEP_DIR, PREC BF16 or FP32" % b)
        builds.append(parts)
    try:
        rows, fails, errors, unused, geoms = audit(a.src, builds)
        t = report(rows, fails, errors, unused, geoms)
        if a.check_doc or a.write_doc:
            path = a.check_doc or a.write_doc
            text, s, e = doc_table(path)
            if a.write_doc:
                open(path, "w").write(text[:s] + "\n" + t + text[e:])
                print("launch_limits.py: %s: table written (%d rows)" % (path, len(rows)))
            elif text[s:e].strip() != t.strip():
                print("FAIL: %s: its launch-limits table is not what launch_limits.py prints now; rerun "
                      "python3 dev/gpu_kernels/launch_limits.py --write-doc %s" % (path, path))
                return 1
            else:
                print("ok: %s: its launch-limits table is this build's (%d rows)" % (path, len(rows)))
            return 0
    except AuditError as e:
        print("launch_limits.py: error: %s" % e)
        return 1
    sys.stdout.write(t)
    return 1 if fails or errors else 0


if __name__ == "__main__":
    sys.exit(main())
