#!/usr/bin/env python3
"""Builds the embedded byte-level KJV corpus from Debian's bible-kjv (`bible` command).

Text: every verse of Gen1:1-Rev22:21 with its reference ("Ge1:1 ") stripped, one verse per line,
a blank line between chapters. Each book is one document, preceded by <|endoftext|>.
Tokens: byte-level, vocab 257: id i < 256 is the byte i, id 256 is <|endoftext|> (EOT).
Split: books whose 1-based position in the canon is a multiple of 20 (Proverbs, Matthew,
1 Peter) are validation (about 5%); the other 63 books are training.
Outputs in data/kjv/: kjv_train.bin, kjv_val.bin (data shards), kjv_tokenizer.bin.
Usage: python3 dev/data/kjv.py [--out-dir data/kjv] [--force]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import write_shard, write_tokenizer  # noqa: E402

VOCAB, EOT = 257, 256
VAL_EVERY = 20
VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")
NAMES = ("kjv_train.bin", "kjv_val.bin", "kjv_tokenizer.bin")


def read_books():
    """[(book abbreviation, text)] in canonical order, from the `bible` command."""
    if shutil.which("bible") is None:
        sys.exit("kjv.py: error: the `bible` command is missing; install Debian's bible-kjv "
                 "(apt-get install -y bible-kjv), or run dev/data/kjv.sh as root")
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                         stdout=subprocess.PIPE).stdout.decode("ascii")
    books = []            # [name, [lines], last chapter]
    for line in out.splitlines():
        if not line.strip():
            continue
        m = VERSE.match(line)
        if not m:
            sys.exit("kjv.py: error: unexpected line from `bible`: %r" % line[:80])
        book, chapter, text = m.group(1), int(m.group(2)), m.group(4).strip()
        if not books or books[-1][0] != book:
            books.append([book, [], chapter])
        elif books[-1][2] != chapter:
            books[-1][1].append("")            # blank line between chapters
            books[-1][2] = chapter
        books[-1][1].append(text)
    if len(books) != 66:
        sys.exit("kjv.py: error: expected 66 books from `bible`, got %d" % len(books))
    return [(b[0], "\n".join(b[1]) + "\n") for b in books]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default="data/kjv")
    ap.add_argument("--force", action="store_true", help="regenerate even if up to date")
    a = ap.parse_args()
    outs = [os.path.join(a.out_dir, n) for n in NAMES]
    sources = [os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_common.py")]
    newest_src = max(os.path.getmtime(s) for s in sources)
    if not a.force and all(os.path.exists(p) and os.path.getmtime(p) > newest_src for p in outs):
        print("kjv: %s up to date (use --force to rebuild)" % a.out_dir)
        return
    train, val, val_names = [], [], []
    for i, (name, text) in enumerate(read_books(), start=1):
        doc = [EOT] + list(text.encode("ascii"))
        if i % VAL_EVERY == 0:
            val += doc
            val_names.append(name)
        else:
            train += doc
    write_shard(outs[0], train, VOCAB)
    write_shard(outs[1], val, VOCAB)
    write_tokenizer(outs[2], [bytes([i]) for i in range(256)] + [b"<|endoftext|>"], EOT)
    print("kjv: train %d tokens, val %d tokens (val books: %s) -> %s"
          % (len(train), len(val), ", ".join(val_names), a.out_dir))


if __name__ == "__main__":
    main()
