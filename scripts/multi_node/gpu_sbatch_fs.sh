#!/usr/bin/env bash
# GPT-2 350M (d24) on 2 nodes x 8 GPUs with slurm, NCCL start-up "fs".
# srun starts one task per GPU without MPI (-pi fs): ranks come from SLURM_PROCID /
# SLURM_NTASKS / SLURM_LOCALID, and rank 0 writes the NCCL id to a file in RENDEZVOUS_DIR, a
# directory every node sees (the name carries SLURM_JOB_ID.SLURM_STEP_ID; rank 0 removes it).
# A 2 x 8 mesh: -ds 8 makes each node a shard group (ZeRO 2: gradients and optimizer state
# sharded over its 8 GPUs, reduce-scatters over NVLink), and the 2 nodes are replicas whose fp32
# gradient shards are all-reduced once per step across the network. 524288 tokens per step
# (B 32 x T 1024 x 16 GPUs, grad_accum 1). Data and log dir on a file system every node sees.
# Memory per rank as the trainer reports it at start (params/grads/optimizer/activations):
#   params 887178240 grads 332944384 optimizer 354871296 activations 23228711940 bytes = 23.10 GiB
#   (from build/gpu/gpu_memory_bf16 d24 50257 1024 32 1024 16 8 2 1 1: the same closed forms and
#   buffer sizes the trainer prints; this script has not been run on a cluster, see README).
#SBATCH --job-name=gpt2gpu_fs
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=gpt2gpu_fs_%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
# --signal=USR1@120: 120 s before the time limit slurm sends SIGUSR1 to every rank, which
# finish their step, write a checkpoint and exit 0; --requeue lets the job be requeued below.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
RENDEZVOUS_DIR=${RENDEZVOUS_DIR:-$PWD/.nccl_rendezvous}
mkdir -p "$RENDEZVOUS_DIR"
srun --mpi=none ./train_gpt2 -pi fs -pf "$RENDEZVOUS_DIR" \
    -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" \
    -tk data/gpt2_tokenizer.bin -e d24 -b 32 -t 1024 -d 524288 \
    -x 18865 -l 3e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 -s 20000 -g 144 \
    -z 2 -ds 8 -r 1 -w 1 -n 2000 -y 1 -nk 3 -o log_gpt2_350M_multinode_fs
# preempted, or out of time: the run wrote a checkpoint of its last step and exited 0 without
# model_final.bin; requeue the job, and -y 1 resumes it from that checkpoint (docs/checkpoints.md)
if [ ! -f log_gpt2_350M_multinode_fs/model_final.bin ]; then scontrol requeue "$SLURM_JOB_ID"; fi
