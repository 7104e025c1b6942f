#!/usr/bin/python3
"""What -ls (DiLoCo) buys at scale, MODELLED (not measured): GPT-2 124M and 1558M on 8 nodes x 8
H100s, a 8 x 8 mesh (dp_shard 8 = one node, dp_replicate 8 = the nodes), ZeRO 1, BF16, with
inter-node links of 10, 100 and 400 Gbit/s per node, synchronous training against an outer sync
every H steps.

Per optimizer step and GPU:
- compute: the derated step time of dev/bench/gpu_model.py (its kernels, constants and sources);
- inside the node (NVLink): the bf16 gradient reduce-scatter and parameter all-gather over the 8
  GPUs, (S-1)/S N 2 bytes each (llmc/accounting.h), at 450 GB/s per GPU and direction (NVIDIA H100
  SXM datasheet: NVLink 900 GB/s total);
- across nodes: synchronous training all-reduces each GPU's fp32 gradient shard over the 8 nodes
  every step, 2 (R-1)/R (N/S) 4 bytes per GPU; with -ls H the same bytes (the pseudo-gradient
  shard) once every H steps, plus 8 (R-1) bytes of checksums. The node's 8 GPUs share its link, so
  a step moves 8 times a GPU's bytes through it. Nothing overlaps (an upper bound on step time:
  the trainer overlaps the inner collectives with compute, and synchronous training's replica
  all-reduce with nothing).
The step time of -ls is averaged over the window (a sync step waits for the whole transfer).

    python3 dev/bench/diloco_scale.py [--markdown]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_model as gm  # noqa: E402

NODES, GPUS_PER_NODE = 8, 8
NVLINK = 450e9       # bytes/s per GPU and direction, H100 SXM datasheet (900 GB/s bidirectional)
LINKS_GBIT = (10, 100, 400)
RUNS = {"124M": 64, "1558M": 16}  # micro-batch B per GPU at T 1024 (scripts/run_gpt2_*.sh)
WINDOWS = (100, 500)


def step_times(size, B, link_gbit, H):
    L, C, _ = gm.MODELS[size]
    N = gm.num_params(L, C)
    S, R = GPUS_PER_NODE, NODES
    compute = gm.summarize(size, B, 1024, "H100", True)[0]["derated"][0]
    inner = 2 * (S - 1) / S * N * 2 / NVLINK
    replica_bytes = 2 * (R - 1) / R * (N / S) * 4  # per GPU per synchronous step
    link = link_gbit * 1e9 / 8 * 1.0                # bytes/s per node
    sync = compute + inner + S * replica_bytes / link
    local = compute + inner + S * (replica_bytes + 8 * (R - 1)) / link / H
    return N, compute, replica_bytes, sync, local


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    head = ["model", "link Gbit/s", "compute ms", "replica MB/GPU/step (sync)", "sync step ms"]
    head += [f"-ls {H} step ms (speed-up)" for H in WINDOWS]
    print("MODELLED (not measured): 8 nodes x 8 H100, ZeRO 1 in the node, replicas across nodes, T 1024\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size, B in RUNS.items():
        for link in LINKS_GBIT:
            cells = None
            for H in WINDOWS:
                N, compute, rb, sync, local = step_times(size, B, link, H)
                if cells is None:
                    cells = [f"{size} (B {B})", str(link), f"{compute * 1e3:.0f}", f"{rb / 1e6:.1f}",
                             f"{sync * 1e3:.0f}"]
                cells.append(f"{local * 1e3:.0f} ({sync / local:.1f}x)")
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
