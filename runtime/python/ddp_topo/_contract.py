# SPDX-License-Identifier: Apache-2.0
"""The environment contract, read in pure Python (no library needed).

The names are runtime/contract.h's DRT_ENV_* values, written again here
because Python cannot include a C header; tests/python/test_contract.py
compares the two so they cannot drift."""

import collections
import os

# C macro name -> variable, for every variable this package reads
NAMES = {
    "DRT_ENV_RANK": "RANK",
    "DRT_ENV_WORLD_SIZE": "WORLD_SIZE",
    "DRT_ENV_LOCAL_RANK": "LOCAL_RANK",
    "DRT_ENV_LOCAL_WORLD_SIZE": "LOCAL_WORLD_SIZE",
    "DRT_ENV_GROUP_RANK": "GROUP_RANK",
    "DRT_ENV_GROUP_WORLD_SIZE": "GROUP_WORLD_SIZE",
    "DRT_ENV_MASTER_ADDR": "MASTER_ADDR",
    "DRT_ENV_MASTER_PORT": "MASTER_PORT",
    "DRT_ENV_PORT": "DDPRT_PORT",
    "DRT_ENV_GPU": "DDP_TOPO_GPU",
    "DRT_ENV_DEVICE": "DDP_TOPO_DEVICE",
    "DRT_ENV_CPUS": "DDP_TOPO_CPUS",
    "DRT_ENV_NIC": "DDP_TOPO_NIC",
    "DRT_ENV_SPANK_OPTION": "SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo",
}

# Plan's integer fields and the variables they come from, in the order a
# missing one is reported (the runtime's drt_env_load checks the same ones)
_INTS = (
    ("rank", "DRT_ENV_RANK"),
    ("world_size", "DRT_ENV_WORLD_SIZE"),
    ("local_rank", "DRT_ENV_LOCAL_RANK"),
    ("local_world_size", "DRT_ENV_LOCAL_WORLD_SIZE"),
    ("node_rank", "DRT_ENV_GROUP_RANK"),
    ("node_count", "DRT_ENV_GROUP_WORLD_SIZE"),
)
# a rank must be below its size, as drt_env_load checks
_BELOW = (("rank", "world_size"), ("local_rank", "local_world_size"), ("node_rank", "node_count"))

Plan = collections.namedtuple(
    "Plan",
    "rank world_size local_rank local_world_size node_rank node_count "
    "master_addr master_port runtime_port gpu device cpus nic",
)
Plan.__doc__ = "This task's place in the job and its binding, from the launcher's environment."


class NotLaunchedError(RuntimeError):
    """The task was not started by a launcher that sets the contract."""


def _not_launched(var, env):
    asked = env.get(NAMES["DRT_ENV_SPANK_OPTION"])
    if asked:  # the job asked, the plugin did not run (contract.h says when)
        return NotLaunchedError(
            "ddp-topo: %s is not set, though this job asked for --ddp-topo=%.40s: the ddp-topo "
            "plugin did not run for it (its plugstack.conf line was removed after the job was "
            "queued? ask your admin, or resubmit)" % (var, asked))
    return NotLaunchedError(
        "ddp-topo: this task was not started by sbatch/srun --ddp-topo or ddp-run: "
        "%s is not set (submit with `sbatch --ddp-topo=auto`, or run under ddp-run)" % var)


def _number(env, macro, lo, hi):
    var = NAMES[macro]
    text = env.get(var, "")
    if not text.isascii() or not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError("ddp-topo: %s='%.40s' is not a whole number from %d to %d "
                         "(the launcher's variables are broken: unset it, or fix the job script "
                         "that sets it)" % (var, text, lo, hi))
    return int(text)


def _optional(env, macro, lo=None, hi=None):
    text = env.get(NAMES[macro], "")
    if not text:
        return None
    return text if lo is None else _number(env, macro, lo, hi)


def plan(environ=None):
    """The task's Plan from environ (default os.environ).

    Raises NotLaunchedError naming the first missing variable, ValueError
    for a value that is not a number in range."""
    env = os.environ if environ is None else environ
    required = [m for _, m in _INTS] + ["DRT_ENV_MASTER_ADDR", "DRT_ENV_MASTER_PORT"]
    for macro in required:
        if not env.get(NAMES[macro]):
            raise _not_launched(NAMES[macro], env)
    ints = {field: _number(env, macro, 0, 2**32 - 1) for field, macro in _INTS}
    for low, high in _BELOW:
        if ints[low] >= ints[high]:
            raise ValueError("ddp-topo: %s=%d is not below %s=%d (the launcher's variables "
                             "disagree)" % (NAMES[dict(_INTS)[low]], ints[low],
                                            NAMES[dict(_INTS)[high]], ints[high]))
    return Plan(master_addr=env[NAMES["DRT_ENV_MASTER_ADDR"]],
                master_port=_number(env, "DRT_ENV_MASTER_PORT", 1, 65535),
                runtime_port=_optional(env, "DRT_ENV_PORT", 1, 65535),
                gpu=_optional(env, "DRT_ENV_GPU", 0, 2**31 - 1),
                device=_optional(env, "DRT_ENV_DEVICE", 0, 2**31 - 1),
                cpus=_optional(env, "DRT_ENV_CPUS"),
                nic=_optional(env, "DRT_ENV_NIC"), **ints)
