#!/bin/bash
# report-args: --share
#SBATCH --nodes=1 --ntasks-per-node=6
#SBATCH --gres=gpu:4
#SBATCH --ddp-topo
srun python train.py
