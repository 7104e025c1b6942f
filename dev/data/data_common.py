"""Shared writers for the data scripts (stdlib only): data shards and tokenizer files in the
formats of docs/formats.md, always written to a temporary name and renamed into place."""
import array
import os
import struct
import sys
import tempfile

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
TOKENIZER_MAGIC, TOKENIZER_VERSION = 20240328, 2
HEADER_INTS = 256


def header_bytes(*ints):
    """The 1024-byte header: the given int32 values, then zeros, little-endian."""
    return struct.pack("<%di" % HEADER_INTS, *(list(ints) + [0] * (HEADER_INTS - len(ints))))


def write_atomic(path, chunks):
    """Write byte chunks to a temporary file next to path, then rename it onto path."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_" + os.path.basename(path), dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)      # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def token_bytes(tokens):
    """uint16 little-endian bytes of a token list; refuses ids that do not fit."""
    if isinstance(tokens, array.array) and tokens.typecode == "H":
        a = array.array("H", tokens)          # already uint16: just copy
    else:
        a = array.array("H")
        for t in tokens:
            if not 0 <= t < 65536:
                raise ValueError("token id %d does not fit in uint16" % t)
        a.extend(tokens)
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def write_shard(path, tokens, vocab_size=None):
    """Data shard: header [magic, version, ntok], then the tokens as uint16."""
    if vocab_size is not None and tokens and max(tokens) >= vocab_size:
        raise ValueError("%s: token %d >= vocab size %d" % (path, max(tokens), vocab_size))
    write_atomic(path, [header_bytes(SHARD_MAGIC, SHARD_VERSION, len(tokens)), token_bytes(tokens)])


def write_tokenizer(path, pieces, eot_id):
    """Tokenizer: header [magic, version, vocab size, eot id], then per token a uint8 length
    (1..255) and its bytes."""
    body = bytearray()
    for i, p in enumerate(pieces):
        if not 1 <= len(p) <= 255:
            raise ValueError("token %d has %d bytes (must be 1..255)" % (i, len(p)))
        body.append(len(p))
        body += p
    write_atomic(path, [header_bytes(TOKENIZER_MAGIC, TOKENIZER_VERSION, len(pieces), eot_id), bytes(body)])


def write_tiktoken_tokenizer(path, enc):
    """Tokenizer file from a tiktoken encoding (passed in, so this module needs no tiktoken):
    every id's bytes, the end-of-text token written as its text."""
    pieces = []
    for i in range(enc.n_vocab):
        try:
            pieces.append(enc.decode_single_token_bytes(i))
        except KeyError:
            if i != enc.eot_token:
                raise
            pieces.append(b"<|endoftext|>")
    write_tokenizer(path, pieces, enc.eot_token)


def download_once(url, path):
    """Downloads url to path (atomically) unless path exists; a failed download exits with one line."""
    if os.path.exists(path):
        return path
    import urllib.request
    print("downloading", url)
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as e:
        sys.exit("error: download of %s failed (no internet?): %s" % (url, e))
    write_atomic(path, [data])
    return path


def need_tiktoken():
    """Import tiktoken's gpt2 encoding or exit with a clear message."""
    try:
        import tiktoken
    except ImportError:
        sys.exit("error: this script needs tiktoken (pip install tiktoken)")
    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:   # the BPE files are downloaded on first use
        sys.exit("error: could not load tiktoken's gpt2 encoding (needs internet the first time): %s" % e)


EVAL_MAGIC, EVAL_VERSION, EVAL_START = 20240522, 1, 65535


def eval_example_bytes(index, label, context, completions):
    """One example of a multiple-choice eval file (llm.c's format): uint16 start mark 65535, the
    example's byte count, index, label, number of completions, the context (length, tokens), then
    each completion (length, tokens)."""
    body = [index, label, len(completions), len(context)] + list(context)
    for c in completions:
        body += [len(c)] + list(c)
    words = [EVAL_START, 2 * (len(body) + 2)] + body
    if words[1] >= 65536 or not 0 <= label < len(completions):
        raise ValueError("example %d: too large (%d bytes) or label %d out of range" % (index, words[1], label))
    if any(not 0 <= t < EVAL_START for t in list(context) + [t for c in completions for t in c]):
        raise ValueError("example %d: a token does not fit below 65535" % index)
    return token_bytes(words)


def write_eval_file(path, examples):
    """Eval file: header [magic, version, number of examples, longest example in bytes], then
    the examples; examples: (label, context tokens, [completion tokens, ...]) in order."""
    chunks = [eval_example_bytes(i, label, ctx, comps) for i, (label, ctx, comps) in enumerate(examples)]
    if not chunks:
        raise ValueError("%s: no examples" % path)
    longest = max(len(c) for c in chunks)
    write_atomic(path, [header_bytes(EVAL_MAGIC, EVAL_VERSION, len(chunks), longest)] + chunks)
