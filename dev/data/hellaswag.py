#!/usr/bin/env python3
"""Downloads HellaSwag's validation set and writes it as an eval file for `-h 1` (needs internet
and tiktoken).

Each of the 10,042 examples: the context `ctx` and its four endings, each ending tokenized with a
leading space (GPT-2's tokenizer attaches it to the next word), the label the right ending.
Output: data/hellaswag/hellaswag_val.bin in llm.c's eval format (see dev/data/data_common.py).
Usage: python3 dev/data/hellaswag.py [--out-dir data/hellaswag] [--split val|train]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import download_once, need_tiktoken, write_eval_file  # noqa: E402

URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_%s.jsonl"


def fetch(split, out_dir):
    return download_once(URL % split, os.path.join(out_dir, "hellaswag_%s.jsonl" % split))


def main():
    ap = argparse.ArgumentParser(description="HellaSwag -> eval file for train_gpt2 -h 1")
    ap.add_argument("--out-dir", default="data/hellaswag")
    ap.add_argument("--split", default="val", choices=["val", "train"], help="the test split has no labels")
    a = ap.parse_args()
    enc = need_tiktoken()
    examples = []
    with open(fetch(a.split, a.out_dir), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            ex = json.loads(line)
            context = enc.encode_ordinary(ex["ctx"])
            endings = [enc.encode_ordinary(" " + e) for e in ex["endings"]]
            examples.append((int(ex["label"]), context, endings))
    out = os.path.join(a.out_dir, "hellaswag_%s.bin" % a.split)
    write_eval_file(out, examples)
    longest = max(len(c) + max(len(e) for e in es) for _, c, es in examples)
    print("hellaswag %s: %d examples, longest needs T >= %d, written to %s" % (a.split, len(examples), longest - 1, out))


if __name__ == "__main__":
    main()
