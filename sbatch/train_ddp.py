#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The classic PyTorch DDP example (a model, a DistributedSampler, the learning
rate scaled by the world size, rank 0 printing each epoch's loss), started by
SLURM with ddp-topo instead of torchrun:

    sbatch sbatch/train_ddp.sbatch                       (2 nodes x 2 tasks)
    ddp-run -n 4 --nodes 2 /usr/bin/python3 sbatch/train_ddp.py --epochs 2

Every task is one rank. The plugin (or ddp-run) has already set RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, the runtime's own port
DDPRT_PORT and the task's GPU and CPU binding, so nothing here computes them.
The gradients are averaged by libddprt through a DDP communication hook
(--hook; `gloo` keeps torch's own allreduce, to compare).
"""
import argparse
import statistics
import sys
import time
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import ddp_topo.torch

HOOKS = {
    "allreduce": ddp_topo.torch.allreduce_hook,  # blocking drt_allreduce per bucket
    "async": ddp_topo.torch.async_allreduce_hook,  # overlaps with the backward pass
    "bf16": ddp_topo.torch.bf16_compress_hook,  # half the bytes on the wire
    "gloo": None,  # no hook: torch's own allreduce (gloo on CPU, nccl on GPU)
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--hook", choices=sorted(HOOKS), default="async",
                   help="who averages the gradients (default: async, the fastest: README)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: run every epoch)")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by the world size")
    p.add_argument("--hidden", type=int, default=256,
                   help="width of the MLP's 3 hidden layers (2048: 10.5M parameters)")
    p.add_argument("--samples", type=int, default=2048, help="size of the synthetic data set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-steps", action="store_true",
                   help="rank 0 prints every step's loss (mean over all ranks)")
    p.add_argument("--checksum", action="store_true",
                   help="every rank prints a CRC of its parameters at the end")
    p.add_argument("--time", action="store_true",
                   help="rank 0 prints the median step time (steps after the first 3)")
    return p.parse_args()


def make_data(args):
    # the same synthetic set on every rank (same seed): inputs and the labels
    # a fixed random "teacher" gives them, so the loss has something to learn
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, 1024, generator=g)
    y = (x @ torch.randn(1024, 10, generator=g)).argmax(dim=1)
    return TensorDataset(x, y)


def make_model(hidden):
    return nn.Sequential(
        nn.Linear(1024, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10))


def step(model, optimizer, loss_fn, x, y):
    """One training step; returns the local loss (detached)."""
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()  # DDP averages the gradients here, bucket by bucket
    optimizer.step()
    return loss.detach()


def say(line):
    # one write per line: ranks that share a stdout (ddp-run) never mix lines
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def mean_over_ranks(t):
    t = t.clone()
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def checksum(model):
    crc = 0
    for p in model.parameters():
        crc = zlib.crc32(p.detach().cpu().contiguous().numpy().tobytes(), crc)
    return f"{crc:08x}"


def main():
    args = parse_args()
    # Was: MASTER_ADDR from `scontrol show hostnames`, MASTER_PORT, RANK and
    # WORLD_SIZE from SLURM_* variables, and torchrun started per node. The
    # plugin sets all of torchrun's variables; this call reads them (env://),
    # picks gloo on CPU or nccl when the task has a GPU, sets that GPU, and
    # starts libddprt on its own port. It returns the runtime: the hooks' state.
    rt = ddp_topo.torch.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    # Was: device = LOCAL_RANK % torch.cuda.device_count(). The plugin's
    # binding already chose this task's GPU and init_process_group made it
    # the current device.
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    if device.type == "cuda" and rank == 0 and HOOKS[args.hook] is not None:
        # libddprt's GPU path is opt-in until it has run on a real GPU
        say("CUDA buckets: " + ("libddprt's GPU allreduce" if ddp_topo.torch.gpu_path(rt) == "ddprt"
                                else "torch's NCCL allreduce (DDPRT_TORCH_GPU=ddprt for libddprt's)"))

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    data = make_data(args)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = make_model(args.hidden).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if HOOKS[args.hook] is not None:
        ddp.register_comm_hook(rt, HOOKS[args.hook])
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr * world)
    loss_fn = nn.CrossEntropyLoss()

    steps, times = 0, []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on all ranks
        total, batches = torch.zeros(1, dtype=torch.float64), 0
        for x, y in loader:
            t0 = time.perf_counter()
            loss = step(ddp, optimizer, loss_fn, x.to(device), y.to(device))
            times.append(time.perf_counter() - t0)
            total += loss.cpu().double()
            batches += 1
            steps += 1
            if args.log_steps:
                mean = mean_over_ranks(loss.cpu().double())
                if rank == 0:
                    say(f"Step {steps}, Loss: {mean:.9f}")
            if steps == args.steps:
                break
        mean = mean_over_ranks(total / batches)
        if rank == 0:
            say(f"Epoch {epoch}, Loss: {mean:.6f}")
        if steps == args.steps:
            break

    if args.time and rank == 0:
        timed = times[3:] or times
        say(f"Step time: {statistics.median(timed) * 1e3:.1f} ms (median of {len(timed)} steps, "
            f"hook {args.hook}, {sum(p.numel() for p in model.parameters())} parameters, {world} ranks)")
    if args.checksum:
        say(f"Rank {rank} parameters: {checksum(model)}")
    # DDP first: when its reducer drops the last reference to the process
    # group, torch 1.13 joins gloo's threads while holding the GIL, and one of
    # them may need the GIL to free a tensor (a deadlock at exit)
    del ddp, optimizer
    dist.destroy_process_group()
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
