# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run: DDP training of a small MLP from one seed, once per
mode: "gloo" (DDP's own allreduce over gloo) and each ddp_topo hook.
Rank 0 prints "losses MODE l0 l1 ..." (its loss at every step); every rank
prints "hash MODE RANK sha256-of-its-parameters".

--die-rank R --die-step S: rank R kills itself (SIGKILL) in step S of the
first hook mode; the others ignore SIGTERM (ddp-run's forwarding) so that
only the runtime can stop them, and print "raised after T s: MESSAGE"."""

import argparse
import ctypes
import hashlib
import os
import signal
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

import ddp_topo
import ddp_topo.torch

HOOKS = {"allreduce": ddp_topo.torch.allreduce_hook,
         "async": ddp_topo.torch.async_allreduce_hook,
         "bf16": ddp_topo.torch.bf16_compress_hook}


def say(line):
    """One line in one write(2): ranks share ddp-run's stdout, and with
    PYTHONUNBUFFERED print() writes the newline separately."""
    os.write(1, (line + "\n").encode())


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach().contiguous()
        h.update(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return h.hexdigest()[:16]


def data(rank, steps, batch=16):
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    x = torch.randn(steps, batch, 32, generator=g)
    return x, x.sum(dim=2, keepdim=True).sin()


def train(rt, mode, args):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(),
                              torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    # small buckets: several per step, so the hooks overlap and keep order
    model = DistributedDataParallel(net, bucket_cap_mb=0.01)
    if mode != "gloo":
        model.register_comm_hook(rt, HOOKS[mode])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xs, ys = data(rt.rank, args.steps)
    losses = []
    for step in range(args.steps):
        if step == args.die_step and rt.rank == args.die_rank and mode != "gloo":
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs[step]), ys[step])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if rt.rank == 0:
        say("losses %s %s" % (mode, " ".join("%.9g" % v for v in losses)))
    say("hash %s %d %s" % (mode, rt.rank, digest(model)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="gloo,allreduce,async,bf16")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--die-rank", type=int, default=-1)
    ap.add_argument("--die-step", type=int, default=-1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.die_rank >= 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    rt = ddp_topo.torch.init_process_group()
    for mode in args.modes.split(","):
        start = time.monotonic()
        try:
            train(rt, mode, args)
        except RuntimeError as e:
            say("rank %d raised after %.1f s: %s: %s" % (rt.rank, time.monotonic() - start,
                                                         type(e).__name__, e))
            sys.exit(3)
    rt.close()


main()
