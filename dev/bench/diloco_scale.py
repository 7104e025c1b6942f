#!/usr/bin/python3
"""What -ls (DiLoCo) and its replica-link options buy at scale, MODELLED (not measured): GPT-2 124M
and 1558M on 8 nodes x 8 H100s, a 8 x 8 mesh (dp_shard 8 = one node, dp_replicate 8 = the nodes),
ZeRO 1, BF16, with inter-node links of 10, 100 and 400 Gbit/s per node.

Per optimizer step and GPU:
- compute: the derated step time of dev/bench/gpu_model.py (its kernels, constants and sources);
- inside the node (NVLink): the bf16 gradient reduce-scatter and parameter all-gather over the 8
  GPUs, (S-1)/S N 2 bytes each (llmc/accounting.h), at 450 GB/s per GPU and direction (NVIDIA H100
  SXM datasheet: NVLink 900 GB/s total);
- across nodes: a GPU owns ceil(n/S) of each of its fragment's n elements (the model's units split
  evenly; the trainer pads each unit, a few elements more); an outer sync of those `owned` elements
  sends docs/distributed.md's closed form: 2 (R-1) b(ceil(owned/R)) + 8 (R-1) bytes, b(n) = 4n
  (fp32), 2n (bf16), 4 ceil(n/128) + n (int8), 4 ceil(n/128) + ceil(n/2) (int4); with -rk D
  (R-1) (b_1(s) + b_R(s)) + 8 (R-1), b_m(s) the sum over s's 4096-value chunks of 2k + b(k),
  k = min(len, m ceil(D len)). Synchronous training sends the same every step without the 8 (R-1).
  The node's 8 GPUs share its link, so a transfer takes 8 times a GPU's bytes over the link.
- fragments (-lf F): layer l goes to fragment floor(l F / L), wte and wpe with fragment 0, the
  final LayerNorm with F-1 (llmc/outer_sync.h); each fragment syncs once per window of H steps.
- blocking (-lo 0): a step with a fragment's sync waits for its whole transfer (mean step: compute
  plus every fragment's transfer / H; slowest step: compute plus the largest fragment's transfer).
- overlapped (-lo tau): a fragment's transfer starts after its step and must land tau steps later,
  so only what exceeds tau steps of compute is waited for; the link carries one transfer at a time,
  so the mean step is at least the window's transfers / H.
Nothing else overlaps (synchronous training's replica all-reduce and a blocking sync stall compute).

    python3 dev/bench/diloco_scale.py [--markdown]                  the tables of docs/distributed.md
    python3 dev/bench/diloco_scale.py --ls H [--rq F] [--rk D] [--lf F] [--lo TAU]   one configuration
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_model as gm  # noqa: E402

NODES, GPUS_PER_NODE = 8, 8
NVLINK = 450e9       # bytes/s per GPU and direction, H100 SXM datasheet (900 GB/s bidirectional)
LINKS_GBIT = (10, 100, 400)
RUNS = {"124M": 64, "1558M": 16}  # micro-batch B per GPU at T 1024 (scripts/run_gpt2_*.sh)
WINDOWS = (100, 500)
BLOCK, CHUNK = 128, 4096          # llmc/wire_format.h: int8/int4 scale blocks, top-k chunks
# name: (-ls H, -rq, -rk, -lf, -lo); the second table's columns
OPTIONS = {
    "sync -rq int8": (0, "int8", 0.0, 1, 0),
    "-ls 100": (100, "fp32", 0.0, 1, 0),
    "-ls 100 -rq int8": (100, "int8", 0.0, 1, 0),
    "-ls 100 -rq int4 -rk 0.02": (100, "int4", 0.02, 1, 0),
    "-ls 100 -lf 4": (100, "fp32", 0.0, 4, 0),
    "-ls 100 -lf 4 -lo 1": (100, "fp32", 0.0, 4, 1),
    "-ls 100 -lf 4 -lo 1 -rq int8": (100, "int8", 0.0, 4, 1),
}


def wire_bytes(n, fmt):
    scales = 4 * math.ceil(n / BLOCK)
    return {"fp32": 4 * n, "bf16": 2 * n, "int8": scales + n, "int4": scales + math.ceil(n / 2)}[fmt]


def topk_bytes(s, fmt, D, m):
    total = 0
    for start in range(0, s, CHUNK):
        length = min(CHUNK, s - start)
        k = min(length, m * math.ceil(D * length))
        total += 2 * k + wire_bytes(k, fmt)
    return total


def sync_bytes(owned, R, fmt, D, checksums=True):
    """Bytes one GPU sends across the replicas in one sync of `owned` elements."""
    s = math.ceil(owned / R)
    body = (R - 1) * (topk_bytes(s, fmt, D, 1) + topk_bytes(s, fmt, D, R)) if D > 0 else 2 * (R - 1) * wire_bytes(s, fmt)
    return body + (8 * (R - 1) if checksums else 0)


def fragment_sizes(L, C, F):
    """Elements of each fragment (llmc/outer_sync.h's split)."""
    sizes = [0] * F
    for layer in range(L):
        sizes[layer * F // L] += 12 * C * C + 13 * C
    sizes[0] += gm.VP * C + gm.MAXT * C
    sizes[F - 1] += 2 * C
    return sizes


def model(size, B, link_gbit, H, fmt="fp32", D=0.0, F=1, tau=0):
    """(compute s, replica bytes per GPU per sync, mean step s, slowest step s)."""
    L, C, _ = gm.MODELS[size]
    N = gm.num_params(L, C)
    S, R = GPUS_PER_NODE, NODES
    compute = gm.summarize(size, B, 1024, "H100", True)[0]["derated"][0]
    step = compute + 2 * (S - 1) / S * N * 2 / NVLINK
    link = link_gbit * 1e9 / 8  # bytes/s per node
    if H == 0:
        b = sync_bytes(math.ceil(N / S), R, fmt, D, checksums=False)
        return compute, b, step + S * b / link, step + S * b / link
    sent = [sync_bytes(math.ceil(n / S), R, fmt, D) for n in fragment_sizes(L, C, F)]
    t = [S * b / link for b in sent]
    wait = [max(0.0, x - tau * step) for x in t]
    mean = max(step + sum(wait) / H, sum(t) / H)
    return compute, sum(sent), mean, step + max(wait)


def windows_table():
    head = ["model", "link Gbit/s", "compute ms", "replica MB/GPU/step (sync)", "sync step ms"]
    head += [f"-ls {H} step ms (speed-up)" for H in WINDOWS]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size, B in RUNS.items():
        for link in LINKS_GBIT:
            compute, sb, sync, _ = model(size, B, link, 0)
            cells = [f"{size} (B {B})", str(link), f"{compute * 1e3:.0f}", f"{sb / 1e6:.1f}", f"{sync * 1e3:.0f}"]
            for H in WINDOWS:
                local = model(size, B, link, H)[2]
                cells.append(f"{local * 1e3:.0f} ({sync / local:.1f}x)")
            print("| " + " | ".join(cells) + " |")


def options_table():
    """Mean (slowest) step ms of each OPTIONS configuration, and its bytes per token against sync fp32."""
    head = ["model", "link Gbit/s", "sync"] + list(OPTIONS)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size, B in RUNS.items():
        sync_b = model(size, B, 10, 0)[1]
        cells = [f"{size}: x fewer replica bytes/token than sync", "", "1x"]
        for H, fmt, D, F, tau in OPTIONS.values():
            b = model(size, B, 10, H, fmt, D, F, tau)[1]
            cells.append(f"{sync_b * max(H, 1) / b:.0f}x")
        print("| " + " | ".join(cells) + " |")
        for link in LINKS_GBIT:
            sync = model(size, B, link, 0)[2]
            cells = [f"{size} (B {B})", str(link), f"{sync * 1e3:.0f}"]
            for H, fmt, D, F, tau in OPTIONS.values():
                _, _, mean, slow = model(size, B, link, H, fmt, D, F, tau)
                cells.append(f"{mean * 1e3:.0f} ({slow * 1e3:.0f})")
            print("| " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--ls", type=int, default=None, help="model one configuration: -ls H (0: synchronous)")
    p.add_argument("--rq", default="fp32", choices=["fp32", "bf16", "int8", "int4"])
    p.add_argument("--rk", type=float, default=0.0)
    p.add_argument("--lf", type=int, default=1)
    p.add_argument("--lo", type=int, default=0)
    a = p.parse_args()
    if a.ls is not None:
        if a.ls < 0 or not 1 <= a.lf or (a.ls == 0 and (a.lf > 1 or a.lo)) or (a.ls and a.lo >= a.ls):
            sys.exit("diloco_scale.py: --ls H >= 0; --lf and --lo need --ls > 0, --lo < --ls")
        print("MODELLED (not measured): model | link Gbit/s | replica bytes/GPU/sync | mean step ms | slowest step ms")
        for size, B in RUNS.items():
            for link in LINKS_GBIT:
                _, b, mean, slow = model(size, B, link, a.ls, a.rq, a.rk, a.lf, a.lo)
                print(f"{size} | {link} | {b} | {mean * 1e3:.1f} | {slow * 1e3:.1f}")
        return
    print("MODELLED (not measured): 8 nodes x 8 H100, ZeRO 1 in the node, replicas across nodes, T 1024\n")
    windows_table()
    print("\nMODELLED: mean step ms (slowest step ms) with the replica-link options\n")
    options_table()


if __name__ == "__main__":
    main()
