#!/bin/bash
# --gpus-per-node=TYPE:N; a bare --ddp-topo=off
#SBATCH -N1 -n 2 --gpus-per-node=a100:2
#SBATCH --ddp-topo=off
srun python train.py
