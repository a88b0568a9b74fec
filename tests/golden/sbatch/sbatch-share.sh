#!/bin/bash
# '#SBATCH --share' is SLURM's old --oversubscribe (node sharing): it does not
# let ranks share GPUs, so 6 tasks on 4 GPUs still fail as the job would
#SBATCH --nodes=1 --ntasks-per-node=6 --share
#SBATCH --gres=gpu:4
#SBATCH --ddp-topo=auto
srun python train.py
