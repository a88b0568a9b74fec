# SPDX-License-Identifier: Apache-2.0
"""PyTorch over ddp-topo: torch.distributed from the launcher's environment,
and DDP communication hooks that reduce gradients with libddprt.

    rt = ddp_topo.torch.init_process_group()
    model = DistributedDataParallel(net)
    model.register_comm_hook(rt, ddp_topo.torch.allreduce_hook)

Each hook averages once, as DDP does without a hook: the bucket is scaled by
1/world_size, then summed. CUDA tensors go through drt_gpu_allreduce on the
current stream (not yet run on a GPU); CPU tensors are what the tests prove."""

import ctypes

import torch
import torch.distributed as dist

from ._lib import RuntimeFailure
from ._runtime import Runtime

_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
           torch.float16: "float16", torch.int32: "int32", torch.int64: "int64"}


def init_process_group(backend=None, **kwargs):
    """torch.distributed from the environment (env://), gloo on CPU and nccl
    when the task has a GPU, the device set from the binding; returns the
    Runtime, the hooks' state. Raises NotLaunchedError outside a launcher."""
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    # Runtime first, then a barrier: without DDPRT_PORT its rendezvous is on
    # MASTER_PORT too, and rank 0 closes that listener only after the others
    # have their tables; the barrier keeps every rank from dialling torch's
    # TCPStore there until it is closed.
    rt = Runtime()
    try:
        rt.barrier()
        if backend == "nccl":
            torch.cuda.set_device(rt.gpu_attach())
        dist.init_process_group(backend, init_method="env://", **kwargs)
    except BaseException:
        rt.close()
        raise
    return rt


def _dtype(tensor):
    if tensor.dtype not in _DTYPES:
        raise ValueError("ddp-topo: cannot reduce a %s tensor (the runtime reduces %s)"
                         % (tensor.dtype, ", ".join(str(t) for t in _DTYPES)))
    return _DTYPES[tensor.dtype]


def _gpu_sum(rt, tensor):
    rt.gpu_allreduce(tensor.data_ptr(), tensor.numel(), _dtype(tensor), "sum",
                     torch.cuda.current_stream().cuda_stream)


def _raise_failure(fut):
    """A then() callback: the value, or the failure raised. DDP's reducer reads
    a Future's value in C++, so a failure must be an error of the Future
    (a callback that raises), not a Python set_exception."""
    value = fut.value()
    if isinstance(value, Exception):
        raise value
    return value


def _sum_later(rt, tensor, then):
    """Sum tensor in place across the ranks; a Future of then()'s value once
    done, or of the failure (the runtime's, naming the rank)."""
    fut = torch.futures.Future()

    def finish(error):
        try:
            if error is not None:
                raise error
            fut.set_result(then())
        except Exception as e:  # DDP raises it from backward()
            fut.set_result(e)

    try:
        if tensor.is_cuda:
            _gpu_sum(rt, tensor)  # ordered on the stream: done as far as torch can tell
            finish(None)
        else:
            req = rt.iallreduce(ctypes.c_void_p(tensor.data_ptr()), _dtype(tensor),
                                count=tensor.numel())
            rt.when_done(req, finish)
    except (RuntimeFailure, ValueError) as e:
        finish(e)
    return fut.then(_raise_failure)


def allreduce_hook(rt, bucket):
    """Blocking: the bucket is averaged before the hook returns."""
    fut, tensor = torch.futures.Future(), bucket.buffer()
    try:
        tensor.mul_(1.0 / rt.size)
        if tensor.is_cuda:
            _gpu_sum(rt, tensor)
        else:
            rt.allreduce(ctypes.c_void_p(tensor.data_ptr()), _dtype(tensor), count=tensor.numel())
        fut.set_result(tensor)
    except (RuntimeFailure, ValueError) as e:
        fut.set_result(e)
    return fut.then(_raise_failure)


def async_allreduce_hook(rt, bucket):
    """The bucket is averaged by the runtime's progress thread while backward
    goes on; a waiter thread completes the Future."""
    tensor = bucket.buffer()
    tensor.mul_(1.0 / rt.size)
    return _sum_later(rt, tensor, lambda: tensor)


def bf16_compress_hook(rt, bucket):
    """Averages a bfloat16 copy of the bucket (half the bytes on the wire;
    the runtime adds in float32) and writes it back."""
    tensor = bucket.buffer()
    compressed = tensor.mul_(1.0 / rt.size).to(torch.bfloat16)
    return _sum_later(rt, compressed, lambda: tensor.copy_(compressed))


# DDP refuses a hook *named* bf16_compress_hook without CUDA 11 and NCCL
# 2.10 (torch 1.13's _check_comm_hook goes by __name__): this one needs neither.
bf16_compress_hook.__name__ = "ddp_topo_bf16_compress_hook"
