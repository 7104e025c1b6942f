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
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
srun --mpi=pmix ./train_gpt2cpu \
    -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" \
    -tk data/gpt2_tokenizer.bin -e d6 -b 8 -t 512 -d $((8 * 512 * 4 * 4)) \
    -x 5000 -l 6e-4 -u 200 -q 0.1 -c 0.1 -v 250 -m 20 -s 1000 \
    -z 2 -ds 2 -n 1000 -o log_cpu_multinode
