# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run: DDP training with one ddp_topo hook (--hook) and the
hooks' telemetry asked for through the environment only
(DDPRT_TORCH_LOG_EVERY, DDPRT_TORCH_METRICS), as a job script would:
the script measures nothing. --slow-rank R --slow-ms MS: rank R sleeps
MS before each backward, a straggler the telemetry must name.
--algo-probe: no training; one step of one bucket reduced with hier, then
the runtime set to flat before the step ends (libddprt's drt_set_algo), so
the window's own small vector runs flat: the line must name hier."""

import argparse
import ctypes
import time

import torch
from torch.nn.parallel import DistributedDataParallel

import ddp_topo.torch

HOOKS = {"allreduce": ddp_topo.torch.allreduce_hook,
         "async": ddp_topo.torch.async_allreduce_hook,
         "bf16": ddp_topo.torch.bf16_compress_hook}


def algo_probe(rt):
    lib, comm = rt._state.lib, rt._state.handle
    tel = ddp_topo.torch.telemetry(rt, every=1)
    buf = (ctypes.c_float * 1024)()
    lib.drt_set_algo(comm, 2)  # DRT_ALGO_HIER
    handed = tel.handed(ctypes.sizeof(buf), True)
    rt.allreduce(buf, "float32")
    lib.drt_set_algo(comm, 1)  # DRT_ALGO_FLAT: the window's vector
    tel.done(handed, blocking=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hook", default="async")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0)
    ap.add_argument("--algo-probe", action="store_true")
    args = ap.parse_args()
    rt = ddp_topo.torch.init_process_group()
    if args.algo_probe:
        algo_probe(rt)
        rt.close()
        return
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(),
                              torch.nn.Linear(512, 512), torch.nn.Tanh(), torch.nn.Linear(512, 1))
    model = DistributedDataParallel(net, bucket_cap_mb=0.5)  # a few buckets a step
    model.register_comm_hook(rt, HOOKS[args.hook])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    for _ in range(args.steps):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        if rt.rank == args.slow_rank:
            time.sleep(args.slow_ms / 1e3)
        loss.backward()
        opt.step()
    rt.close()


if __name__ == "__main__":
    main()
