#!/bin/bash
# gpu:TYPE:N among other gres, options the report cannot model, no --ddp-topo
#SBATCH -N 2 --ntasks-per-node=4 --gres=gpu:a100:4,nvme:1
#SBATCH --cpus-per-task=12 --gpu-bind=closest --time=10 -J train
srun python train.py
