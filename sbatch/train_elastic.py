#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Data-parallel training that survives a lost rank: the survivors catch
ddp_topo.RankLost, shrink the world (Runtime.shrink) and go on to the end,
every one with the same parameters.

    sbatch sbatch/train_elastic.sbatch                       (srun -k, 2 nodes x 2 tasks)
    ddp-run -k -n 4 --nodes 2 /usr/bin/python3 sbatch/train_elastic.py --die-ranks 2 --die-step 20

Why no torch.distributed here: its process group cannot shrink. Every
member of a gloo or NCCL group takes part in each of its collectives, so
one that died leaves the others failing or waiting; a new group needs every
rank of the old world, and torch's TCPStore lives in rank 0, which may be
the one lost. DistributedDataParallel goes through its group in its
constructor (parameter shapes, the broadcast of the weights), when it
rebuilds its buckets after the first step, before each forward of a model
with buffers (broadcast_buffers) and every step with
find_unused_parameters, even with a ddp_topo hook; DistributedSampler and
destroy_process_group know only the old world. So this script
reduces the gradients itself, one ddp_topo allreduce per step of a flat
vector, and the shrunken world keeps working.

What makes the run after a loss the run it would have been (up to
rounding): each step's global batch is drawn from the step's number alone,
each rank takes every size-th sample of it and sums its loss divided by the
global batch, so the summed gradient is the whole batch's mean gradient at
any world size. A rank whose allreduce failed changes nothing; the lost
rank may have been seen after some survivors finished that step, so after
each shrink the new rank 0's parameters and step are everyone's, and all go
on from one state.
"""
import argparse
import ctypes
import os
import signal
import sys
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import ddp_topo


def parse_args():
    """The options, checked against the world size (the launcher's, read
    before the runtime starts, so a bad one stops every rank at once)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--global-batch", type=int, default=96,
                   help="samples per step, all ranks together")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--samples", type=int, default=2048, help="size of the synthetic data set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10, help="rank 0 prints the loss every N steps")
    p.add_argument("--die-ranks", default="",
                   help="to try it: these ranks (comma-separated) SIGKILL themselves at "
                        "--die-step, as a node failure would kill them")
    p.add_argument("--die-step", type=int, default=0)
    args = p.parse_args()
    world = ddp_topo.plan().world_size  # NotLaunchedError outside srun --ddp-topo or ddp-run
    try:
        args.die = {int(r) for r in args.die_ranks.split(",") if r}
    except ValueError:
        p.error("--die-ranks %r: not comma-separated rank numbers (e.g. --die-ranks 2,3)"
                % args.die_ranks)
    if any(not 0 <= r < world for r in args.die) or len(args.die) >= world:
        p.error("--die-ranks %s: ranks from 0 to %d, and at least one left alive"
                % (args.die_ranks, world - 1))
    if args.steps < 1 or args.global_batch < world or args.global_batch > args.samples:
        p.error("--steps must be 1 or more and --global-batch from the world size (%d) to "
                "--samples (%d)" % (world, args.samples))
    return args


def say(line):
    # one write per line: ranks that share a stdout (ddp-run) never mix lines
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def make_data(args):
    # the same synthetic set on every rank: inputs and the labels a fixed
    # random "teacher" gives them, so the loss has something to learn
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, 32, generator=g)
    return x, (x @ torch.randn(32, 4, generator=g)).argmax(dim=1)


def allreduce(rt, t):
    """Sum a contiguous CPU tensor in place across the ranks."""
    rt.allreduce(ctypes.c_void_p(t.data_ptr()), {torch.float32: "float32",
                                                 torch.float64: "float64"}[t.dtype],
                 count=t.numel())


def agree(rt, model, step):
    """Everyone takes rank 0's parameters and step (a sum where the other
    ranks add zeros: exact). Returns the step."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]
                     + [torch.tensor([float(step)], dtype=torch.float64)])
    if rt.rank != 0:
        flat.zero_()
    allreduce(rt, flat)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(flat[:-1].float(), model.parameters())
    return int(flat[-1].item())


def train_step(rt, model, data, step, args):
    """One step: the global batch's mean gradient, summed over the ranks,
    then SGD. Returns the global batch's mean loss. The update comes only
    after the allreduce succeeded: a failed step changes nothing here."""
    x, y = data
    g = torch.Generator().manual_seed(args.seed * 1000003 + step)
    mine = torch.randperm(len(x), generator=g)[:args.global_batch][rt.rank::rt.size]
    model.zero_grad()
    loss = F.cross_entropy(model(x[mine]), y[mine], reduction="sum") / args.global_batch
    loss.backward()
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
    allreduce(rt, flat)
    with torch.no_grad():
        offset = 0
        for p in params:
            p -= args.lr * flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
    return flat[-1].item()


def who(ranks, nodes):
    """"rank 2 on node1", "ranks 2,3 on node1" """
    return "rank%s %s on %s" % ("s" if len(ranks) > 1 else "", ",".join(map(str, ranks)),
                                ",".join(sorted(set(map(str, nodes)))))


def recover(rt, model, step, lost):
    """After RankLost: shrink, then agree on the parameters and the step;
    again if another rank goes meanwhile. Returns the step to go on from."""
    while True:
        say("rank %d: lost %s at step %d: shrinking" % (rt.rank, who(lost.ranks, lost.nodes), step))
        old = rt.rank
        info = rt.shrink()
        say("rank %d (was %d): world %d -> %d ranks, %d -> %d nodes, in %.3f s (lost %s)"
            % (rt.rank, old, info.old_size, info.new_size, info.old_nodes, info.new_nodes,
               info.seconds, who(info.lost_ranks, info.lost_nodes)))
        try:
            return agree(rt, model, step)
        except ddp_topo.RankLost as again:
            lost = again


def checksum(model):
    crc = 0
    for p in model.parameters():
        crc = zlib.crc32(p.detach().contiguous().numpy().tobytes(), crc)
    return "%08x" % crc


def main():
    args = parse_args()
    rt = ddp_topo.Runtime()
    first_rank, first_size = rt.rank, rt.size
    torch.manual_seed(args.seed)
    data = make_data(args)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 4))
    step, loss, start = agree(rt, model, 0), float("nan"), time.monotonic()
    while step < args.steps:
        if step == args.die_step and first_rank in args.die and rt.size == first_size:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            loss = train_step(rt, model, data, step, args)
        except ddp_topo.RankLost as lost:
            step = recover(rt, model, step, lost)
            continue
        step += 1
        if rt.rank == 0 and (step % args.log_every == 0 or step == args.steps):
            say("step %d loss %.6f (%d ranks)" % (step, loss, rt.size))
    say("rank %d/%d (was %d/%d) done: %d steps, loss %.6f, parameters %s, %.1f s"
        % (rt.rank, rt.size, first_rank, first_size, step, loss, checksum(model),
           time.monotonic() - start))
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
