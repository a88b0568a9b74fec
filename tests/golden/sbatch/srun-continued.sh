#!/bin/bash
# an srun command continued with backslashes is read whole; the report
# names its first line
#SBATCH -N 2 --ntasks-per-node=8 --gres=gpu:8 --ddp-topo=auto
# a comment ends at its line, backslash or not \
srun --ntasks-per-node=4 \
     --gpus-per-node=4 \
     python train.py --epochs 3 \
     -n 1
