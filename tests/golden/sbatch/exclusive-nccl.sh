#!/bin/bash
# --exclusive on an NCCL topology: every CPU of the node is split, and an
# NCCL file lists CPUs, not cores: the report names the ranks that may get
# the two hyperthreads of one core (if CPU n+48 is CPU n's sibling, as on p4d)
#SBATCH -N1 --ntasks-per-node=8 -c 4 --gres=gpu:8 --exclusive --ddp-topo=auto
srun python train.py
