#!/usr/bin/env bash
# Data-parallel CPU training on one machine: RANKS MPI processes, each with THREADS OpenMP
# threads, on the KJV corpus (bash dev/data/kjv.sh). Edit the variables for your machine.
# ZeRO stage 1 shards the optimizer state over all ranks (-z 1; -ds 0 = one shard group).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-2}
THREADS=${THREADS:-1}
make -s train_gpt2cpu
mpirun -np "$RANKS" --bind-to none -x OMP_NUM_THREADS="$THREADS" ./train_gpt2cpu \
    -i data/kjv/kjv_train.bin -j data/kjv/kjv_val.bin -tk data/kjv/kjv_tokenizer.bin \
    -e d4 -sl 256 -b 4 -t 256 -d $((4 * 256 * RANKS * 2)) \
    -x 200 -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 8 -s 100 -g 128 \
    -z 1 -ds 0 -n 100 -o log_cpu_mpi "$@"
