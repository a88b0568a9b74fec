#!/bin/bash
# the step's --ddp-topo wins over the script's: mode env, no binding
#SBATCH -N1 --ntasks-per-node=2 --gres=gpu:2
#SBATCH --ddp-topo=auto,share
srun --ddp-topo=env python train.py
