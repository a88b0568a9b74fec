#!/bin/bash
# report-args: --job-id 1234 --step-id 3
#SBATCH --nodes=2 --ntasks-per-node=3
#SBATCH --gpus=6
#SBATCH --ddp-topo=verbose,env
srun python train.py
