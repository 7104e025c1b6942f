"""emu_rewrite.py: the source rewrite emucc applies to preprocessed CUDA before g++ compiles it.

Three rewrites, each keeping line numbers (no newline is added or removed):
  name<<<cfg>>>(args)           ->  ::emu::launch(<address of name>, ::emu::LaunchConfig(cfg), <a closure that
                                    holds the args' values, evaluated here, and calls name with them>)
  extern __shared__ T buf[];     ->  T* buf = (T*)::emu::dynamic_smem();
  __shared__                     ->  static            (blocks run one at a time, threads share statics)
and `#pragma unroll` lines become empty lines (g++ would warn about an unknown pragma).
A static __shared__ declaration inside a function is followed by its note: once per launch, the first
thread that reaches it adds its bytes to the kernel's static shared memory (::emu::static_smem), so
that the launcher can hold static plus dynamic bytes to the GPU's limits; a launch passes the text
before <<< as the kernel's name (LaunchConfig(...).named).
With check=True (emucc --check) also: each static __shared__ declaration gets a static_assert that it
fits in 48 KiB, and each kernel (`__global__` definition) starts with a call of ::emu::kernel_entry
that gives the launcher the kernel's name and its __launch_bounds__ thread limit.
String and character literals are copied untouched (raw strings end at their own delimiter; a quote
between digits is a C++14 digit separator, not a literal).
"""
import re
import sys

OPENERS, CLOSERS = "([{", ")]}"


def skip_literal(src, i):
    """Index just past the string or character literal that starts at src[i] (a quote). A raw string
    R"delim(...)delim" ends at its own delimiter, whatever quotes it holds."""
    quote = src[i]
    if quote == '"' and identifier_before(src, i) in ("R", "u8R", "uR", "UR", "LR"):
        open_ = src.find("(", i)
        end = src.find(")" + src[i + 1:open_] + '"', open_)
        if open_ < 0 or end < 0:
            raise SyntaxError("unterminated raw string literal")
        return end + len(src[i + 1:open_]) + 2
    i += 1
    while i < len(src) and src[i] != quote:
        i += 2 if src[i] == "\\" else 1
    return i + 1


def identifier_before(src, i):
    """The identifier (or number) that ends just before src[i]."""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] == "_"):
        j -= 1
    return src[j:i]


def is_digit_separator(src, i):
    """Whether the quote at src[i] separates digits (1'000'000, C++14) instead of starting a literal:
    the token before it is a number."""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_'."):
        j -= 1
    return j < i and src[j].isdigit()


def scan(src, i):
    """(index, character, depth) for each character of src from i on that is outside string and
    character literals; depth counts the brackets ( [ { opened since i and not yet closed, and is given
    before the character itself opens or closes one (so the closer of an enclosing bracket has depth 0)."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c == '"' or (c == "'" and not is_digit_separator(src, i)):
            i = skip_literal(src, i)
            continue
        yield i, c, depth
        if c in OPENERS:
            depth += 1
        elif c in CLOSERS:
            depth -= 1
        i += 1


def match_forward(src, i, close):
    """Index of the `close` text that ends the bracketed region starting at i (brackets nest)."""
    for k, _, depth in scan(src, i):
        if depth == 0 and src.startswith(close, k):
            return k
    raise SyntaxError("unterminated kernel launch")


def split_top(text):
    """text cut at its commas outside brackets, template angle brackets included: `T a[2][3], b` ->
    ["T a[2][3]", " b"]; `256, f<1, 2>()` -> ["256", " f<1, 2>()"]."""
    parts, depth, start = [], 0, 0
    for k, c in enumerate(text):
        if c in OPENERS + "<":
            depth += 1
        elif c in CLOSERS + ">":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    return parts + [text[start:]]


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


QUOTE = re.compile("[\"']")


def find_text(src, text, i, word=False):
    """Index of the next `text` at or after i outside string and character literals (with word=True: not
    inside a longer identifier), or -1."""
    while True:
        j = src.find(text, i)
        if j < 0:
            return -1
        q = QUOTE.search(src, i, j)
        while q:  # skip the literals that start before the match
            k = q.start()
            i = k + 1 if src[k] == "'" and is_digit_separator(src, k) else skip_literal(src, k)
            if i > j:
                break  # the match was inside a literal: look again after it
            q = QUOTE.search(src, i, j)
        else:
            end = j + len(text)
            if not word or (identifier_before(src, j) == "" and not (end < len(src) and (src[end].isalnum() or src[end] == "_"))):
                return j
            i = end


def c_string(text):
    """text as a C string literal."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def rewrite_launches(src):
    out = []
    pos = 0
    while True:
        i = find_text(src, "<<<", pos)
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
        out.append("::emu::launch(%s, ::emu::LaunchConfig(%s).named(%s), %s[=, emu_args_ = ::std::make_tuple(%s)] { "
                   "::std::apply([&](const auto&... emu_a_) { %s(emu_a_...); }, emu_args_); })"
                   % (kernel_id(name), cfg, c_string(" ".join(name.split())), gap, args, name))
        pos = args_end + 1
    out.append(src[pos:])
    return "".join(out)


EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\s+([^;\[\]]*?)\s*\b(\w+)\s*\[\s*\]\s*;")
ALIGN = re.compile(r"\b(alignas\s*\([^()]*\)|__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\))\s*")


def rewrite_extern_shared(m):
    ctype = " ".join(ALIGN.sub("", m.group(1)).split())
    newlines = "\n" * m.group(0).count("\n")  # keep the line count of a declaration spanning lines
    return "%s* %s = (%s*)::emu::dynamic_smem();%s" % (ctype, m.group(2), ctype, newlines)


def end_of_statement(src, i):
    """Index of the `;` or `{` that ends the declaration starting at i (outside brackets), and which."""
    for k, c, depth in scan(src, i):
        if depth == 0 and c in ";{":
            return k, c
    raise SyntaxError("unterminated declaration")


SMEM_LIMIT = 48 * 1024


def declarator_names(decl):
    """Variable names declared by `T a[2][3], b[4]` (the text after __shared__, before the `;`)."""
    names = []
    for part in split_top(decl):
        ids = re.findall(r"[A-Za-z_]\w*", ALIGN.sub("", part.split("=")[0]).split("[")[0])
        if ids:
            names.append(ids[-1])
    return names


LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
BLOCK_WORDS = ("else", "do", "try", "const", "noexcept", "mutable", "override")


def in_statements(masked, i):
    """Whether position i of the source (masked: its literals blanked) lies in a block of statements
    (a function body or a block inside one), not at namespace, class or initializer scope: the
    innermost unclosed { before i follows ) ] { } ; : or one of BLOCK_WORDS."""
    depth, k = 0, i
    while True:
        o, c = masked.rfind("{", 0, k), masked.rfind("}", 0, k)
        if o < 0:
            return False
        if c > o:
            depth += 1
            k = c
            continue
        if depth:
            depth -= 1
            k = o
            continue
        before = masked[:o].rstrip()
        if before and before[-1] in ")]{};:":
            return True
        return identifier_before(before, len(before)) in BLOCK_WORDS


def rewrite_shared(src, check):
    """__shared__ -> static, and inside a function the declaration's note (its bytes, once per launch);
    with check, a static_assert after each declaration that it fits in 48 KiB."""
    out, pos = [], 0
    masked = None
    while True:
        i = find_text(src, "__shared__", pos, word=True)
        if i < 0:
            break
        if masked is None:
            masked = LITERAL.sub(lambda m: " " * len(m.group(0)), src)
        out.append(src[pos:i] + "static")
        pos = i + len("__shared__")
        end, kind = end_of_statement(src, pos)
        names = declarator_names(src[pos:end]) if kind == ";" else []
        out.append(src[pos:end])
        pos = end
        if not names:
            continue
        size = " + ".join("sizeof(%s)" % n for n in names)
        if check:
            out.append('; static_assert(%s <= %d, "emucc --check: static __shared__ %s uses more than 48 KiB '
                       '(nvcc/ptxas refuse it: too much shared data)")' % (size, SMEM_LIMIT, ", ".join(names)))
        if in_statements(masked, i):
            out.append("; { static unsigned long long emu_sn_ = 0; ::emu::static_smem(&emu_sn_, %s); }" % size)
    out.append(src[pos:])
    return "".join(out)


def cut_launch_bounds(text):
    """text without its first __launch_bounds__(...) (its newlines kept), and the bound's first
    argument as an int expression ("0" when there is none)."""
    lb = find_text(text, "__launch_bounds__", 0, word=True)
    if lb < 0:
        return text, "0"
    open_ = text.index("(", lb)
    close = match_forward(text, open_ + 1, ")")
    bound = "(int)(%s)" % split_top(text[open_ + 1:close])[0].strip()
    return text[:lb] + "\n" * text[lb:close + 1].count("\n") + text[close + 1:], bound


def rewrite_kernels_checked(src):
    """--check: drop __global__ and __launch_bounds__(...); each kernel body starts with
    `if (::emu::kernel_entry(max_threads, __func__)) return;` (the launcher's probe for its bound and name)."""
    out, pos = [], 0
    while True:
        i = find_text(src, "__global__", pos, word=True)
        if i < 0:
            break
        end, kind = end_of_statement(src, i)
        head, bound = cut_launch_bounds(src[i + len("__global__"):end])
        out.append(src[pos:i] + head)
        out.append("{ if (::emu::kernel_entry(%s, __func__)) return;" % bound if kind == "{" else ";")
        pos = end + 1
    out.append(src[pos:])
    src = "".join(out)
    # bounds on declarations without a body elsewhere, or written before __global__
    while True:
        cut, bound = cut_launch_bounds(src)
        if bound == "0":
            return src
        src = cut


def rewrite(src, check=False):
    src = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b.*$", "", src, flags=re.M)
    src = EXTERN_SHARED.sub(rewrite_extern_shared, src)
    src = rewrite_shared(src, check)
    if check:
        src = rewrite_kernels_checked(src)
    return rewrite_launches(src)


if __name__ == "__main__":
    sys.stdout.write(rewrite(open(sys.argv[-1]).read(), check="--check" in sys.argv))
