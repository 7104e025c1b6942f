#!/usr/bin/env python3
"""Builds a second byte-level corpus, unlike the KJV in every way: Python source code, the standard
library's own .py files as this machine's Python ships them (sorted by path, each file one document
preceded by <|endoftext|>), for the optimizer and model benchmarks (dev/bench/optimizers.py).

Tokens: byte-level, vocab 257 (as dev/data/kjv.py: id i < 256 is the byte i, 256 is EOT).
Split: every 20th file (by sorted position, 1-based) is validation, the others training; at most
--max-tokens in all (default 4M), files taken in order until it is reached.
The files differ between Python versions, so the corpus is a benchmark's, never a test's.
Outputs in data/pysrc/: pysrc_train.bin, pysrc_val.bin (data shards) and pysrc_tokenizer.bin.
Usage: python3 dev/data/pysrc.py [--out-dir data/pysrc] [--root DIR] [--max-tokens N]
"""
import argparse
import os
import sys
import sysconfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import write_shard, write_tokenizer  # noqa: E402

VOCAB, EOT = 257, 256
VAL_EVERY = 20


def source_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__", "test", "tests"))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description="Python sources -> byte-level token shards")
    ap.add_argument("--out-dir", default="data/pysrc")
    ap.add_argument("--root", default=sysconfig.get_paths()["stdlib"], help="where the .py files are")
    ap.add_argument("--max-tokens", type=int, default=4_000_000)
    a = ap.parse_args()
    train, val, total = [], [], 0
    for i, path in enumerate(source_files(a.root), 1):
        with open(path, "rb") as f:
            doc = [EOT] + list(f.read())
        if total + len(doc) > a.max_tokens:
            break
        (val if i % VAL_EVERY == 0 else train).extend(doc)
        total += len(doc)
    if not val or not train:
        sys.exit(f"pysrc.py: error: too few .py files under {a.root}")
    os.makedirs(a.out_dir, exist_ok=True)
    write_shard(os.path.join(a.out_dir, "pysrc_train.bin"), train, VOCAB)
    write_shard(os.path.join(a.out_dir, "pysrc_val.bin"), val, VOCAB)
    pieces = [bytes([i]) for i in range(256)] + [b"<|endoftext|>"]
    write_tokenizer(os.path.join(a.out_dir, "pysrc_tokenizer.bin"), pieces, EOT)
    print(f"pysrc: train {len(train)} tokens, val {len(val)} tokens ({a.root}) -> {a.out_dir}")


if __name__ == "__main__":
    main()
