# Shared by scripts/run_gpt2_*.sh (sourced): one node with $GPUS GPUs (default 8), the BF16 build,
# FineWeb 10B (python3 dev/data/fineweb.py) and the GPT-2 tokenizer. train_fineweb FLAGS... starts
# the run from the repository root with the data flags first, then FLAGS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GPUS=${GPUS:-8}

train_fineweb() {
    make -s train_gpt2 PRECISION=BF16
    mpirun -np "$GPUS" --bind-to none ./train_gpt2 -i "data/fineweb10B/fineweb_train_*.bin" \
        -j "data/fineweb10B/fineweb_val_*.bin" -tk data/gpt2_tokenizer.bin "$@"
}
