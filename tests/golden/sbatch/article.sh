#!/bin/bash
# The job script of the seed article ("4 nodes x 8 GPUs"), as users have it:
# srun starting torchrun, a fixed MASTER_PORT, MASTER_ADDR=$(hostname) and
# ranks from SLURM's variables. The report names each with its line and the
# fix; tests/golden/sbatch/article.converted is `--convert`'s script.
#SBATCH --job-name=ddp-train
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=4
#SBATCH --time=24:00:00

export MASTER_ADDR=$(hostname)
export MASTER_PORT=29500
export NCCL_DEBUG=INFO WORLD_SIZE=$SLURM_NTASKS
RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID; export RANK LOCAL_RANK

srun torchrun --nnodes=4 --nproc_per_node=8 \
    --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT \
    train.py --epochs 10 --batch-size 32
