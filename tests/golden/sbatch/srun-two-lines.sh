#!/bin/bash
# two steps: the report is for the first srun line, and says so
#SBATCH -N1 --ntasks-per-node=2 --gpus-per-node=2 --ddp-topo=auto
srun -n 1 --gpus-per-node=1 python prepare.py
srun -n 1 python train.py
