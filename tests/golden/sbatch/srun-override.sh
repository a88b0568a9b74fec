#!/bin/bash
# the srun line's options override #SBATCH for its step
#SBATCH -N 2 --ntasks-per-node=4 -c 6
#SBATCH --gres=gpu:4 --ddp-topo=auto
module load cuda
export OMP_PROC_BIND=close
  NCCL_DEBUG=WARN exec srun --ntasks-per-node=2 -c 12 --label python train.py -n 3 -c 1
