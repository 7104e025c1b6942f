#!/usr/bin/env bash
# GPT-2 1558M (d48) on one node with 8 GPUs: FineWeb 10B tokens, 524288 tokens per step
# (B 32 x T 1024 x 8 GPUs x grad_accum 2), lr 2e-4 with 700 warmup steps decaying to 0, weight
# decay 0.1, ZeRO 1 (the fp32 m, v and master weights sharded over the 8 GPUs), recomputation of
# GELU and both LayerNorms in backward (-r 2: with -r 1, B 32 needs 74.1 GB and leaves
# less than 8 GB of an 80 GB GPU for workspaces), bf16.
# Memory per rank as the trainer reports it at start (params/grads/optimizer/activations):
#   params 3894216000 grads 3894216000 optimizer 1557686400 activations 54866609156 bytes = 59.80 GiB
#   (from build/gpu/gpu_memory_bf16 d48 50257 1024 32 1024 8 8 1 2 1: the same closed forms and
#   buffer sizes the trainer prints; this script has not been run on GPUs, see README). NCCL and
#   cuBLASLt workspaces come on top.
source "$(dirname "$0")/fineweb_node.sh"
train_fineweb -e d48 -b 32 -t 1024 -d 524288 -x 18865 -l 2e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 \
    -s 20000 -g 144 -z 1 -r 2 -w 1 -n 2000 -o log_gpt2_1558M "$@"
