#!/bin/bash
# report-args: --job-id 1234
#SBATCH --nodes=2 --ntasks-per-node=2
#SBATCH --gpus-per-task=2
#SBATCH --ddp-topo=auto,verbose
srun python train.py
