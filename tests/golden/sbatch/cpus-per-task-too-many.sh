#!/bin/bash
# more CPUs per node than the node has: a clear error
#SBATCH -N1 --ntasks-per-node=8 --cpus-per-task=13 --ddp-topo=auto
srun python train.py
