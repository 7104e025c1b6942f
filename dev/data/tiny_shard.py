#!/usr/bin/env python3
"""Writes a small deterministic data shard of pseudo-random tokens for tests, optionally broken
on purpose so that the loaders' error paths can be tested (stdlib only).

Usage: python3 dev/data/tiny_shard.py OUT.bin --ntok N --vocab V --seed S
         [--bad-magic | --bad-version | --truncate | --token-too-big INDEX]
  --bad-magic        header magic 20240521 instead of 20240520
  --bad-version      header version 2 instead of 1
  --truncate         the file ends one token short of what the header says
  --token-too-big I  token number I (byte offset 1024 + 2*I) is set to V, one past the vocab
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import SHARD_MAGIC, SHARD_VERSION, header_bytes, token_bytes, write_atomic  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="deterministic test shard")
    ap.add_argument("out")
    ap.add_argument("--ntok", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    bad = ap.add_mutually_exclusive_group()
    bad.add_argument("--bad-magic", action="store_true")
    bad.add_argument("--bad-version", action="store_true")
    bad.add_argument("--truncate", action="store_true")
    bad.add_argument("--token-too-big", type=int, metavar="INDEX")
    a = ap.parse_args()
    if a.ntok < 1 or not 1 <= a.vocab <= 65535:
        ap.error("need ntok >= 1 and 1 <= vocab <= 65535")
    rng = random.Random(a.seed)
    toks = [rng.randrange(a.vocab) for _ in range(a.ntok)]
    if a.token_too_big is not None:
        if not 0 <= a.token_too_big < a.ntok:
            ap.error("--token-too-big index must be in [0, ntok)")
        toks[a.token_too_big] = a.vocab
    magic = SHARD_MAGIC + 1 if a.bad_magic else SHARD_MAGIC
    version = SHARD_VERSION + 1 if a.bad_version else SHARD_VERSION
    body = token_bytes(toks)
    if a.truncate:
        body = body[:-2]
    write_atomic(a.out, [header_bytes(magic, version, a.ntok), body])
    print("wrote %s: %d tokens, vocab %d, seed %d%s" % (a.out, a.ntok, a.vocab, a.seed,
          "" if a.token_too_big is None else ", token %d (byte offset %d) = %d"
          % (a.token_too_big, 1024 + 2 * a.token_too_big, a.vocab)))


if __name__ == "__main__":
    main()
