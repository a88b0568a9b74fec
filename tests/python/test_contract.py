# SPDX-License-Identifier: Apache-2.0
"""Without a launcher: the package's variable names against runtime/contract.h
(and ddprt.h), plan() on given environments, and what fails outside a launcher.
Usage: test_contract.py SRCDIR. Prints "ok ..." / "not ok ..." lines."""

import os
import re
import subprocess
import sys

import ddp_topo
from ddp_topo import _contract

SRCDIR = sys.argv[1]
LAUNCHED = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500"}
NOT_LAUNCHED = ("ddp-topo: this task was not started by sbatch/srun --ddp-topo or ddp-run: "
                "%s is not set (submit with `sbatch --ddp-topo=auto`, or run under ddp-run)")


def check(good, name, seen=""):
    print("%s %s" % ("ok" if good else "not ok", name))
    if not good:
        print("#   saw: %s" % seen)


def header_defines():
    found = {}
    for header in ("runtime/contract.h", "runtime/ddprt.h"):
        with open(os.path.join(SRCDIR, header)) as f:
            found.update(re.findall(r'^#define (DRT_ENV_\w+) "([^"]*)"', f.read(), re.M))
    return found


def names():
    defined = header_defines()
    for macro, var in sorted(_contract.NAMES.items()):
        check(defined.get(macro) == var, "ddp_topo.NAMES[%s] is contract.h's %r" % (macro, var),
              defined.get(macro, "no such #define"))


def raises(env, exc):
    try:
        ddp_topo.plan(env)
    except exc as e:
        return str(e)
    return "no %s" % exc.__name__


def plans():
    p = ddp_topo.plan(LAUNCHED)
    check(p == ddp_topo.Plan(3, 4, 1, 2, 1, 2, "n1", 29500, None, None, None, None, None),
          "plan(): ranks, sizes, master; no runtime port or binding", p)
    full = dict(LAUNCHED, DDPRT_PORT="29501", DDP_TOPO_GPU="2", DDP_TOPO_DEVICE="0",
                DDP_TOPO_CPUS="0-11", DDP_TOPO_NIC="mlx5_0")
    p = ddp_topo.plan(full)
    check((p.runtime_port, p.gpu, p.device, p.cpus, p.nic) == (29501, 2, 0, "0-11", "mlx5_0"),
          "plan(): DDPRT_PORT, DDP_TOPO_GPU/DEVICE/CPUS/NIC", p)
    for var in ("RANK", "GROUP_RANK", "MASTER_PORT"):
        env = {k: v for k, v in LAUNCHED.items() if k != var}
        msg = raises(env, ddp_topo.NotLaunchedError)
        check(msg == NOT_LAUNCHED % var, "plan() without %s: NotLaunchedError naming it" % var, msg)
    env = {k: v for k, v in LAUNCHED.items() if k != "RANK"}
    env["SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo"] = "auto"
    msg = raises(env, ddp_topo.NotLaunchedError)
    want = ("ddp-topo: RANK is not set, though this job asked for --ddp-topo=auto: the ddp-topo "
            "plugin did not run for it (its plugstack.conf line was removed after the job was "
            "queued? ask your admin, or resubmit)")
    check(msg == want, "plan() in a job that asked for --ddp-topo but got no plugin: says so", msg)
    check(issubclass(ddp_topo.NotLaunchedError, RuntimeError), "NotLaunchedError is a RuntimeError")
    for var, bad, want in (("RANK", "x1", "RANK='x1' is not a whole number"),
                           ("RANK", "4", "RANK=4 is not below WORLD_SIZE=4"),
                           ("MASTER_PORT", "70000", "MASTER_PORT='70000' is not a whole number from 1 to 65535"),
                           ("DDPRT_PORT", "0", "DDPRT_PORT='0' is not a whole number from 1 to 65535"),
                           ("DDP_TOPO_GPU", "-1", "DDP_TOPO_GPU='-1'"),
                           ("DDP_TOPO_DEVICE", "x", "DDP_TOPO_DEVICE='x'")):
        msg = raises(dict(LAUNCHED, **{var: bad}), ValueError)
        check(want in msg, "plan() with %s=%s: ValueError saying %r" % (var, bad, want), msg)


def outside():
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHED}
    for code, name in (("ddp_topo.plan()", "plan()"), ("ddp_topo.Runtime()", "Runtime()"),
                       ("import ddp_topo.torch; ddp_topo.torch.init_process_group()",
                        "torch.init_process_group()")):
        if "torch" in code and os.environ.get("DDP_TOPO_NO_TORCH"):
            continue
        r = subprocess.run([sys.executable, "-c", "import ddp_topo; " + code], env=env,
                           capture_output=True, text=True)
        last = (r.stderr.strip().splitlines() or [""])[-1]
        check(r.returncode == 1 and last == "ddp_topo.NotLaunchedError: " + NOT_LAUNCHED % "RANK",
              "%s outside a launcher: the NotLaunchedError" % name, "rc %d: %s" % (r.returncode, last))
    env.update(LAUNCHED, DDPRT_LIBRARY="/nonexistent/libddprt.so.0")
    r = subprocess.run([sys.executable, "-c", "import ddp_topo; ddp_topo.Runtime()"], env=env,
                       capture_output=True, text=True)
    want = ("ddp_topo.RuntimeFailure: ddp-topo: cannot load libddprt from "
            "'/nonexistent/libddprt.so.0' (DDPRT_LIBRARY): ")
    check(want in r.stderr, "a DDPRT_LIBRARY that does not load: RuntimeFailure naming it", r.stderr)
    r = subprocess.run([sys.executable, "-c", "import sys, ddp_topo; print('torch' in sys.modules)"],
                       capture_output=True, text=True)
    check(r.stdout.strip() == "False", "import ddp_topo does not import torch", r.stdout + r.stderr)


names()
plans()
outside()
