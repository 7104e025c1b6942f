"""emu_rewrite.py: the source rewrite emucc applies to preprocessed CUDA before g++ compiles it.

Three rewrites, each keeping line numbers (no newline is added or removed):
  name<<<cfg>>>(args)           ->  ::emu::launch(<address of name>, ::emu::LaunchConfig(cfg), [=] { name(args); })
  extern __shared__ T buf[];     ->  T* buf = (T*)::emu::dynamic_smem();
  __shared__                     ->  static            (blocks run one at a time, threads share statics)
and `#pragma unroll` lines become empty lines (g++ would warn about an unknown pragma).
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
        out.append("::emu::launch(%s, ::emu::LaunchConfig(%s), %s[=] { %s(%s); })" % (kernel_id(name), cfg, gap, name, args))
        pos = args_end + 1
    out.append(src[pos:])
    return "".join(out)


EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\s+([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;")
ALIGN = re.compile(r"\b(alignas\s*\([^()]*\)|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))\s*")


def rewrite_extern_shared(m):
    ctype = " ".join(ALIGN.sub("", m.group(1)).split())
    newlines = "\n" * m.group(0).count("\n")  # keep the line count of a declaration spanning lines
    return "%s* %s = (%s*)::emu::dynamic_smem();%s" % (ctype, m.group(2), ctype, newlines)


def rewrite(src):
    src = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$", "", src, flags=re.M)
    src = EXTERN_SHARED.sub(rewrite_extern_shared, src)
    src = re.sub(r"\b__shared__\b", "static", src)
    return rewrite_launches(src)


if __name__ == "__main__":
    sys.stdout.write(rewrite(open(sys.argv[1]).read()))
