#!/usr/bin/env python3
"""Downloads tiny shakespeare and writes GPT-2 (tiktoken) token shards (needs internet + tiktoken).

Documents: the text split at blank lines; each piece is preceded by <|endoftext|> (50256).
Split: the first 32768 tokens are validation, the rest training.
Outputs: data/tinyshakespeare/tiny_shakespeare_{train,val}.bin and data/gpt2_tokenizer.bin.
Usage: python3 dev/data/tinyshakespeare.py [--out-dir data/tinyshakespeare]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_common import download_once, need_tiktoken, write_shard, write_tiktoken_tokenizer  # noqa: E402

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
VAL_TOKENS = 32768


def main():
    ap = argparse.ArgumentParser(description="tiny shakespeare -> GPT-2 token shards")
    ap.add_argument("--out-dir", default="data/tinyshakespeare")
    a = ap.parse_args()
    enc = need_tiktoken()
    text_path = download_once(URL, os.path.join(a.out_dir, "tiny_shakespeare.txt"))
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    tokens = []
    for doc in text.split("\n\n"):
        tokens.append(enc.eot_token)
        tokens.extend(enc.encode_ordinary(doc + "\n\n"))
    val, train = tokens[:VAL_TOKENS], tokens[VAL_TOKENS:]
    write_shard(os.path.join(a.out_dir, "tiny_shakespeare_val.bin"), val, enc.n_vocab)
    write_shard(os.path.join(a.out_dir, "tiny_shakespeare_train.bin"), train, enc.n_vocab)
    tok_path = os.path.join(os.path.dirname(os.path.abspath(a.out_dir)), "gpt2_tokenizer.bin")
    write_tiktoken_tokenizer(tok_path, enc)
    print("tinyshakespeare: train %d tokens, val %d tokens; tokenizer %s" % (len(train), len(val), tok_path))


if __name__ == "__main__":
    main()
