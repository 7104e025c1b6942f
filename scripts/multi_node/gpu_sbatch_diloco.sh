#!/usr/bin/env bash
# GPT-2 350M (d24) on 4 nodes x 8 GPUs joined by slow links (Ethernet, other clusters): each node
# is a replica (-ds 8: ZeRO 1 over its 8 GPUs and NVLink) and the replicas synchronize every 50
# steps (-ls 50, DiLoCo with the default outer step, plain averaging; docs/distributed.md's table)
# after 1000 synchronous steps (-lss 1000),
# instead of all-reducing their gradients every step. 524288 tokens per step (B 16 x T 1024 x 32
# GPUs). Start-up as gpu_sbatch_fs.sh (srun without MPI, NCCL id through RENDEZVOUS_DIR).
# Bytes each GPU sends across the nodes (the trainer's closed form, llmc/accounting.h, as its
# start-up report prints it):
#   synchronous (-ls 0):  266153472 bytes per step (the fp32 gradient shard all-reduced over 4 nodes)
#   -ls 50:               266153496 bytes per outer sync = 5323070 per step (50x fewer; the 24 extra
#                         bytes are the replicas' checksums); inside the node each sync adds one
#                         bf16 parameter all-gather over NVLink (621024824 bytes)
#   a node's link carries 8 times a GPU's bytes.
# Memory per rank: the fs script's line for ZeRO 1 plus the outer state, 354871296 bytes (outer
# parameters and momentum, fp32, sharded over the node's 8 GPUs). -v, -s and the last step fall on
# outer syncs (-lss + k * 50), as -ls requires. This script has not been run on a cluster (README).
#SBATCH --job-name=gpt2gpu_diloco
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=gpt2gpu_diloco_%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
# --signal=USR1@120: every rank finishes its step and writes a checkpoint (inside a window too:
# each replica's own parameters and the outer state are in it), then exits 0; requeued below.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
RENDEZVOUS_DIR=${RENDEZVOUS_DIR:-$PWD/.nccl_rendezvous}
mkdir -p "$RENDEZVOUS_DIR"
LOG=log_gpt2_350M_diloco
FLAGS=(-pi fs -pf "$RENDEZVOUS_DIR"                          # start-up without MPI, as gpu_sbatch_fs.sh
       -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" -tk data/gpt2_tokenizer.bin
       -e d24 -b 16 -t 1024 -d 524288 -x 18865                # 350M, 524288 tokens per step over 32 GPUs
       -l 3e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 -s 20000 -g 144
       -z 1 -ds 8 -ls 50 -lss 1000                             # a node a replica, synced every 50 steps after 1000
       -r 1 -w 1 -n 2000 -y 1 -nk 3 -o "$LOG")
srun --mpi=none ./train_gpt2 "${FLAGS[@]}"
if [ ! -f "$LOG/model_final.bin" ]; then scontrol requeue "$SLURM_JOB_ID"; fi
