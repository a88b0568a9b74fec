#!/bin/bash
# Launchers however spelt, and what is left alone: the first srun line is the
# report's step; every launcher line is named, and converted where it can be.
#SBATCH -N2 --ntasks-per-node=1 --gpus-per-node=4 --ddp-topo=auto
srun -n 2 --cpus-per-task 8 python -u -m torch.distributed.run --nproc-per-node 4 -m trainer.main --lr 0.1
srun --container-image nvcr.io/nvidia/pytorch:24.01-py3 torchrun --standalone --nproc_per_node=4 train.py
srun deepspeed --num_gpus 4 train.py --deepspeed ds.json
srun accelerate launch --num_processes 4 train.py
srun bash -c 'echo $RANK'   # a shell as the program: not a launcher
srun --export=ALL,MASTER_PORT=29500 python3 train.py   # srun's own option: not the script's
