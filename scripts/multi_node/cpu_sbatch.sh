#!/usr/bin/env bash
# Data-parallel CPU training across several machines with slurm: one MPI rank per node, all of
# its cores as OpenMP threads. srun starts the ranks (Open MPI takes rank and world size from
# slurm through PMIx); the data and log dir must be on a file system every node sees.
# A 2 x 2 mesh on 4 nodes: -ds 2 makes shard groups of 2 consecutive ranks (ZeRO-2 inside a
# group), and the 2 groups are replicas whose gradient shards are all-reduced once per step.
#SBATCH --job-name=gpt2cpu
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --time=04:00:00
#SBATCH --output=gpt2cpu_%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
# --signal=USR1@120: 120 s before the time limit slurm sends SIGUSR1 to every rank, which
# finish their step, write a checkpoint and exit 0; --requeue lets the job be requeued below.
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
srun --mpi=pmix ./train_gpt2cpu \
    -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" \
    -tk data/gpt2_tokenizer.bin -e d6 -b 8 -t 512 -d $((8 * 512 * 4 * 4)) \
    -x 5000 -l 6e-4 -u 200 -q 0.1 -c 0.1 -v 250 -m 20 -s 1000 \
    -z 2 -ds 2 -n 1000 -y 1 -nk 3 -o log_cpu_multinode
# preempted, or out of time: the run wrote a checkpoint of its last step and exited 0 without
# model_final.bin; requeue the job, and -y 1 resumes it from that checkpoint (docs/checkpoints.md)
if [ ! -f log_cpu_multinode/model_final.bin ]; then scontrol requeue "$SLURM_JOB_ID"; fi
