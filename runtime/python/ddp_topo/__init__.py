# SPDX-License-Identifier: Apache-2.0
"""ddp_topo: the task's plan from ddp-topo's environment contract, and
libddprt's collectives from Python (ctypes; no compiler needed).

    import ddp_topo
    p = ddp_topo.plan()            # rank, world_size, ..., gpu, device, cpus, nic
    with ddp_topo.Runtime() as rt:
        rt.allreduce(buf, "float32")

Threads: any thread may use a Runtime; its calls run one at a time, and
close() waits for the call in flight (Runtime's docstring; docs/runtime.md,
"Threads"). A buffer's element type must be the dtype's (raw bytes fit any).

Elastic: a call that fails because a rank is gone raises RankLost (a
RuntimeFailure) naming the ranks and their nodes; under srun -k or ddp-run -k
the survivors call rt.shrink() and go on (sbatch/train_elastic.py).

PyTorch: ddp_topo.torch (imports torch only when used)."""

from ._contract import NAMES, NotLaunchedError, Plan, plan
from ._lib import RankLost, RuntimeFailure
from ._runtime import Request, Runtime, ShrinkInfo

__all__ = ["NAMES", "NotLaunchedError", "Plan", "RankLost", "Request", "Runtime",
           "RuntimeFailure", "ShrinkInfo", "plan"]

for _cls in (NotLaunchedError, Plan, RankLost, Request, Runtime, RuntimeFailure, ShrinkInfo):
    _cls.__module__ = __name__  # tracebacks say ddp_topo.RuntimeFailure
