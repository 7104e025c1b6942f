#!/usr/bin/env bash
# GPT-2 124M (d12) on one node with 8 GPUs: FineWeb 10B tokens (python3 dev/data/fineweb.py),
# 524288 tokens per step (B 64 x T 1024 x 8 GPUs, grad_accum 1), ~1 epoch (18865 steps), lr 6e-4
# with 700 warmup steps decaying to 0, weight decay 0.1, ZeRO 1 (optimizer state sharded over
# the 8 GPUs), GELU recomputed (-r 1), bf16 with fp32 master weights.
# Memory per rank as the trainer reports it at start (params/grads/optimizer/activations):
#   params 311189760 grads 311189760 optimizer 124475904 activations 21952201732 bytes = 21.14 GiB
#   (from build/gpu/gpu_memory_bf16 d12 50257 1024 64 1024 8 8 1 1 1: the same closed forms and
#   buffer sizes the trainer prints; this script has not been run on GPUs, see README). NCCL and
#   cuBLASLt workspaces come on top.
source "$(dirname "$0")/fineweb_node.sh"
train_fineweb -e d12 -b 64 -t 1024 -d 524288 -x 18865 -l 6e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 \
    -s 20000 -g 144 -z 1 -r 1 -w 1 -n 5000 -o log_gpt2_124M "$@"
