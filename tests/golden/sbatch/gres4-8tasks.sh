#!/bin/bash
# 8 tasks per node on 4 allocated GPUs: the error the plugin gives at launch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:4
#SBATCH --ddp-topo=auto
srun python train.py
