"""emu_rewrite.py: the source rewrite emucc applies to preprocessed CUDA before g++ compiles it.

Three rewrites, each keeping line numbers (no newline is added or removed):
  name<<<cfg>>>(args)           ->  ::emu::launch(<address of name>, ::emu::LaunchConfig(cfg), <a closure that
                                    holds the args' values, evaluated here, and calls name with them>)
  extern __shared__ T buf[];     ->  T* buf = (T*)::emu::dynamic_smem();
  __shared__                     ->  static            (blocks run one at a time, threads share statics)
and `#pragma unroll` lines become empty lines (g++ would warn about an unknown pragma).
With check=True (emucc --check) also: each static __shared__ declaration gets a static_assert that it
fits in 48 KiB, and each kernel (`__global__` definition) starts with a call of ::emu::kernel_entry
that gives the launcher the kernel's name and its __launch_bounds__ thread limit.
String and character literals are copied untouched.
"""
import re
import sys

CLOSE = {"(": ")", "[": "]", "{": "}"}


def skip_literal(src, i):
    """Index just past the string or char literal starting at src[i]."""
    quote = src[i]
    i += 1
    while i < len(src) and src[i] != quote:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def match_forward(src, i, close):
    """Index of the `close` text that ends the bracketed region starting at i (brackets nest)."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = skip_literal(src, i)
            continue
        if depth == 0 and src.startswith(close, i):
            return i
        if c in CLOSE:
            depth += 1
        elif c in ")]}":
            depth -= 1
        i += 1
    raise SyntaxError("unterminated kernel launch")


def kernel_name_start(src, end):
    """Start of the kernel expression ending at src[end-1]: a qualified name with optional template args."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    if src[i - 1] == ">":  # template argument list
        depth = 0
        while i > 0:
            i -= 1
            if src[i] in ">)]":
                depth += 1
            elif src[i] in "<([":
                depth -= 1
                if depth == 0:
                    break
        while i > 0 and src[i - 1].isspace():
            i -= 1
    while i > 0 and (src[i - 1].isalnum() or src[i - 1] in "_:"):
        i -= 1
    return i


def kernel_id(name):
    """Expression for the kernel's address, or nullptr where the name alone does not pick one function
    (a template whose arguments are deduced from the call); see emu::kernel_id in emu_launch.h."""
    return "::emu::kernel_id([&](auto t_) -> decltype(::emu::kernel_address(t_, %s)) { return ::emu::kernel_address(t_, %s); })" % (name, name)


def find_launch(src, i):
    """Index of the next `<<<` outside string and character literals, or -1."""
    while i < len(src):
        if src[i] in "\"'":
            i = skip_literal(src, i)
        elif src.startswith("<<<", i):
            return i
        else:
            i += 1
    return -1


def rewrite_launches(src):
    out = []
    pos = 0
    while True:
        i = find_launch(src, pos)
        if i < 0:
            break
        start = kernel_name_start(src, i)
        name = src[start:i].strip()
        cfg_end = match_forward(src, i + 3, ">>>")
        cfg = src[i + 3:cfg_end]
        j = cfg_end + 3
        while src[j].isspace():
            j += 1
        if src[j] != "(":
            raise SyntaxError("kernel launch of %s without an argument list" % name)
        args_end = match_forward(src, j + 1, ")")
        args = src[j + 1:args_end]
        gap = src[cfg_end + 3:j]  # whitespace (maybe newlines) between >>> and (
        out.append(src[pos:start])
        # The arguments are evaluated at the launch (into a tuple of their decayed types), as CUDA
        # copies them then; the body may run later, when the stream reaches the kernel.
        out.append("::emu::launch(%s, ::emu::LaunchConfig(%s), %s[=, emu_args_ = ::std::make_tuple(%s)] { "
                   "::std::apply([&](const auto&... emu_a_) { %s(emu_a_...); }, emu_args_); })"
                   % (kernel_id(name), cfg, gap, args, name))
        pos = args_end + 1
    out.append(src[pos:])
    return "".join(out)


EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\s+([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;")
ALIGN = re.compile(r"\b(alignas\s*\([^()]*\)|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))\s*")


def rewrite_extern_shared(m):
    ctype = " ".join(ALIGN.sub("", m.group(1)).split())
    newlines = "\n" * m.group(0).count("\n")  # keep the line count of a declaration spanning lines
    return "%s* %s = (%s*)::emu::dynamic_smem();%s" % (ctype, m.group(2), ctype, newlines)


def find_token(src, tok, i):
    """Index of the next identifier `tok` outside string and character literals, or -1."""
    while True:
        j = src.find(tok, i)
        if j < 0:
            return -1
        k = i
        while k < j:  # skip literals between i and j
            if src[k] in "\"'":
                k = skip_literal(src, k)
                if k > j:
                    break
            else:
                k += 1
        if k > j:
            i = k
            continue
        before = src[j - 1] if j > 0 else " "
        after = src[j + len(tok)] if j + len(tok) < len(src) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return j
        i = j + len(tok)


def end_of_statement(src, i):
    """Index of the `;` or `{` that ends the declaration starting at i (outside brackets), and which."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = skip_literal(src, i)
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c in ";{":
            return i, c
        i += 1
    raise SyntaxError("unterminated declaration")


SMEM_LIMIT = 48 * 1024


def declarator_names(decl):
    """Variable names declared by `T a[2][3], b[4]` (the text after __shared__, before the `;`)."""
    parts, depth, cur = [], 0, ""
    for c in decl:
        if c in "([<{":
            depth += 1
        elif c in ")]>}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    names = []
    for part in parts:
        part = ALIGN.sub("", part.split("=")[0]).split("[")[0]
        ids = re.findall(r"[A-Za-z_]\w*", part)
        if ids:
            names.append(ids[-1])
    return names


def rewrite_shared_checked(src):
    """--check: __shared__ -> static, and a static_assert that each declaration fits in 48 KiB."""
    out, pos = [], 0
    while True:
        i = find_token(src, "__shared__", pos)
        if i < 0:
            break
        end, kind = end_of_statement(src, i)
        out.append(src[pos:i] + "static")
        decl = src[i + len("__shared__"):end]
        out.append(decl)
        pos = end
        if kind == ";":
            names = declarator_names(decl)
            if names:
                total = " + ".join("sizeof(%s)" % n for n in names)
                out.append('; static_assert(%s <= %d, "emucc --check: static __shared__ %s uses more than 48 KiB '
                           '(nvcc/ptxas refuse it: too much shared data)")' % (total, SMEM_LIMIT, ", ".join(names)))
    out.append(src[pos:])
    return "".join(out)


def rewrite_kernels_checked(src):
    """--check: drop __global__ and __launch_bounds__(...); each kernel body starts with
    `if (::emu::kernel_entry(max_threads, __func__)) return;` (the launcher's probe for its bound and name)."""
    out, pos = [], 0
    while True:
        i = find_token(src, "__global__", pos)
        if i < 0:
            break
        end, kind = end_of_statement(src, i)
        head = src[i + len("__global__"):end]
        bound = "0"
        lb = find_token(head, "__launch_bounds__", 0)
        if lb >= 0:
            open_ = head.index("(", lb)
            close = match_forward(head, open_ + 1, ")")
            args = head[open_ + 1:close]
            depth, first = 0, ""
            for c in args:
                if c in "([<":
                    depth += 1
                elif c in ")]>":
                    depth -= 1
                if c == "," and depth == 0:
                    break
                first += c
            bound = "(int)(%s)" % first.strip()
            head = head[:lb] + " " * 0 + head[close + 1:]
        out.append(src[pos:i] + head)
        if kind == "{":
            out.append("{ if (::emu::kernel_entry(%s, __func__)) return;" % bound)
        else:
            out.append(";")
        pos = end + 1
    out.append(src[pos:])
    src = "".join(out)
    # bounds on declarations without a body elsewhere, or written before __global__
    while True:
        lb = find_token(src, "__launch_bounds__", 0)
        if lb < 0:
            break
        open_ = src.index("(", lb)
        close = match_forward(src, open_ + 1, ")")
        src = src[:lb] + "\n" * src[lb:close + 1].count("\n") + src[close + 1:]
    return src


def rewrite(src, check=False):
    src = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$", "", src, flags=re.M)
    src = EXTERN_SHARED.sub(rewrite_extern_shared, src)
    if check:
        src = rewrite_shared_checked(src)
        src = rewrite_kernels_checked(src)
    else:
        src = re.sub(r"\b__shared__\b", "static", src)
    return rewrite_launches(src)


if __name__ == "__main__":
    sys.stdout.write(rewrite(open(sys.argv[-1]).read(), check="--check" in sys.argv))
