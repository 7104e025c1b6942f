#!/usr/bin/env bash
# GPT-2 350M (d24) on 4 nodes x 8 GPUs as in gpu_sbatch_diloco.sh (a node a replica, ZeRO 1 inside,
# outer syncs every 50 steps), with elastic replicas (-le 1, docs/distributed.md "Elastic
# replicas"): each node runs as its own job step in a loop, so that when a node's replica is lost
# (its GPU dies, its process hangs past -wt) the other nodes train on without it and the loop
# starts it again with -y 1; it rejoins after the next outer sync. Losing node 0 (world rank 0:
# the logs, the rendezvous, the agreement) stops every node after the survivors' checkpoint of
# that step; the job then requeues itself and all resume from it (node 0's replica rebuilt from
# the outer state). -le 1 needs -pi tcp (or -pi fs -pf DIR). The first 1000 steps are synchronous
# (-lss 1000): a node lost in them stops every node (those steps need every replica), node 0's
# step ends and the job requeues, all resuming from the last checkpoint; from step 1001 on a lost
# node is dropped as above. Ranks come from RANK / WORLD_SIZE / LOCAL_RANK set
# here (each step's SLURM_PROCID counts within its node); every step passes the job's id as -pj,
# since the steps' own ids differ. This script has not been run on a cluster (README).
#SBATCH --job-name=gpt2gpu_elastic
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=gpt2gpu_elastic_%j.out
#SBATCH --signal=USR1@120
#SBATCH --requeue
set -uo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
LOG=log_gpt2_350M_elastic
NODES=${SLURM_JOB_NUM_NODES:-4}
GPUS=8
HOST0=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
FLAGS=(-pi tcp -ps "$HOST0" -pp 29512 -pj "$SLURM_JOB_ID" -le 1 -wt 120 -lm 2
       -i "data/fineweb10B/fineweb_train_*.bin" -j "data/fineweb10B/fineweb_val_*.bin" -tk data/gpt2_tokenizer.bin
       -e d24 -b 16 -t 1024 -d 524288 -x 18865
       -l 3e-4 -u 700 -q 0.0 -c 0.1 -v 250 -m 20 -s 20000 -g 144
       -z 1 -ds "$GPUS" -ls 50 -lss 1000 -r 1 -w 1 -n 2000 -y 1 -nk 3 -o "$LOG")

# node n's replica, started again (with -y 1, in FLAGS) whenever it ends without the final model,
# while node 0 still runs
replica() {
    local n=$1
    while [ ! -f "$LOG/model_final.bin" ]; do
        srun --nodes=1 --ntasks="$GPUS" --relative="$n" --mpi=none bash -c \
            'exec env -u SLURM_PROCID -u SLURM_NTASKS -u SLURM_LOCALID RANK=$(('"$n"' * '"$GPUS"' + SLURM_PROCID)) \
             WORLD_SIZE='"$((NODES * GPUS))"' LOCAL_RANK=$SLURM_LOCALID ./train_gpt2 "$@"' _ "${FLAGS[@]}"
        [ "$n" -eq 0 ] && break # node 0 lost: every node stops; the job requeues below
        kill -0 "$NODE0" 2>/dev/null || break
        sleep 10
    done
}
replica 0 &
NODE0=$!
for n in $(seq 1 $((NODES - 1))); do replica "$n" & done
wait "$NODE0"
kill $(jobs -p) 2>/dev/null
wait
if [ ! -f "$LOG/model_final.bin" ]; then scontrol requeue "$SLURM_JOB_ID"; fi
