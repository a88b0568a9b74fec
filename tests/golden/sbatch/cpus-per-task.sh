#!/bin/bash
# --cpus-per-task: each rank gets its share of the cores SLURM allocates
# (2 tasks x 4 CPUs on one socket), not of the whole node
#SBATCH -N1 --ntasks-per-node=2 -c 4
#SBATCH --gres=gpu:2 --ddp-topo=auto
srun python train.py
