#!/bin/bash
# srun flags (--nice, -I, pyxis's --no-container-mount-home) take no value;
# srun's --wait and pyxis's --container-image take one: the options after
# them are read, the program's (-m train) are not
#SBATCH -N 1 --ntasks-per-node=8 --gres=gpu:8 --ddp-topo=auto
srun --wait 60 --container-image nvcr.io/nvidia/pytorch:24.01-py3 --ntasks-per-node=4 --nice -I --no-container-mount-home python -m train
