#!/bin/bash
# srun values the shell fills in at run time ($VAR, ${VAR}, `cmd`) are named
# and left out: the #SBATCH values stay, nothing fails
#SBATCH -N 2 --ntasks-per-node=4 --gres=gpu:4
#SBATCH --ddp-topo=auto
srun -n $SLURM_NTASKS --cpus-per-task=${SLURM_CPUS_PER_TASK} --gres=gpu:$N -m `cat dist` python train.py
