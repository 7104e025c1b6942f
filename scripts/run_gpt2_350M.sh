#!/usr/bin/env bash
# GPT-2 350M (d24) on one node with 8 GPUs: FineWeb 10B tokens, 524288 tokens per step
# (B 64 x T 1024 x 8 GPUs, grad_accum 1), lr 3e-4 with 700 warmup steps decaying to 0, weight
# decay 0.1, ZeRO 1, GELU recomputed, bf16 with fp32 master weights.
# Memory per rank as the trainer reports it at start (params/grads/optimizer/activations):
#   params 887178240 grads 887178240 optimizer 354871296 activations 46457422852 bytes = 45.25 GiB
#   (from build/gpu/gpu_memory_bf16 d24 50257 1024 64 1024 8 8 1 1 1: the same closed forms and
#   buffer sizes the trainer prints; this script has not been run on GPUs, see README). NCCL and
#   cuBLASLt workspaces come on top.
source "$(dirname "$0")/fineweb_node.sh"
train_fineweb -e d24 -b 64 -t 1024 -d 524288 -x 18865 -l 3e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 \
    -s 20000 -g 144 -z 1 -r 1 -w 1 -n 5000 -o log_gpt2_350M "$@"
