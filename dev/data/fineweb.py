#!/usr/bin/env python3
"""Downloads FineWeb (HuggingFaceFW/fineweb, sample-10BT by default) with the `datasets` library
and writes GPT-2 (tiktoken) token shards of 100M tokens (needs internet, datasets and tiktoken).

Each document is preceded by <|endoftext|> (50256); documents run across shard boundaries.
Split: shard 0 is validation, all later shards training.
Outputs: data/fineweb10B/fineweb_val_000000.bin, fineweb_train_000001.bin, ... and
data/gpt2_tokenizer.bin.
Usage: python3 dev/data/fineweb.py [--sample 10BT|100BT] [--shard-size 100000000] [--out-dir DIR]
       [--workers N]
"""
import argparse
import array
import multiprocessing as mp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import need_tiktoken, write_shard, write_tiktoken_tokenizer  # noqa: E402

_enc = None


def tokenize(doc):
    """One document -> uint16 tokens, EOT first (runs in worker processes)."""
    global _enc
    if _enc is None:
        _enc = need_tiktoken()
    toks = [_enc.eot_token] + _enc.encode_ordinary(doc["text"])
    return array.array("H", toks)


def main():
    ap = argparse.ArgumentParser(description="FineWeb -> GPT-2 token shards")
    ap.add_argument("--sample", default="10BT", choices=["10BT", "100BT"])
    ap.add_argument("--shard-size", type=int, default=100_000_000)
    ap.add_argument("--out-dir", default=None, help="default data/fineweb10B (or 100B)")
    ap.add_argument("--workers", type=int, default=max(1, os.cpu_count() // 2))
    a = ap.parse_args()
    out_dir = a.out_dir or "data/fineweb%s" % a.sample[:-1]
    enc = need_tiktoken()
    try:
        import datasets
    except ImportError:
        sys.exit("error: fineweb.py needs the `datasets` library (pip install datasets)")
    try:
        ds = datasets.load_dataset("HuggingFaceFW/fineweb", name="sample-" + a.sample, split="train")
    except Exception as e:
        sys.exit("error: could not load HuggingFaceFW/fineweb (no internet?): %s" % e)
    os.makedirs(out_dir, exist_ok=True)
    write_tiktoken_tokenizer(os.path.join(os.path.dirname(os.path.abspath(out_dir)), "gpt2_tokenizer.bin"), enc)

    shard, buf = 0, array.array("H")

    def flush(tokens):
        nonlocal shard
        split = "val" if shard == 0 else "train"
        path = os.path.join(out_dir, "fineweb_%s_%06d.bin" % (split, shard))
        write_shard(path, tokens)
        print("wrote %s (%d tokens)" % (path, len(tokens)))
        shard += 1

    with mp.Pool(a.workers) as pool:
        for toks in pool.imap(tokenize, ds, chunksize=16):
            buf.extend(toks)
            while len(buf) >= a.shard_size:
                flush(buf[:a.shard_size])
                buf = buf[a.shard_size:]
    if len(buf):
        flush(buf)


if __name__ == "__main__":
    main()
