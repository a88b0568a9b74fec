# SPDX-License-Identifier: Apache-2.0
"""PyTorch over ddp-topo: torch.distributed from the launcher's environment,
and DDP communication hooks that reduce gradients with libddprt.

    rt = ddp_topo.torch.init_process_group()
    model = DistributedDataParallel(net)
    model.register_comm_hook(rt, ddp_topo.torch.allreduce_hook)

Each hook averages once, as DDP does without a hook: the bucket is scaled by
1/world_size, then summed. CPU tensors go through libddprt, which the tests
prove. CUDA tensors go through torch's own NCCL allreduce by default, since
libddprt's GPU path (drt_gpu_allreduce on the current stream) has not yet
run on a real GPU: ask for it with init_process_group(gpu="ddprt") or
DDPRT_TORCH_GPU=ddprt.
A bucket must be dense and contiguous (checked before it is touched, on
either device); the bf16 hook reduces a contiguous copy, so any layout
works there. DDP may call the hooks from its own threads: the Runtime
serialises its calls.

Telemetry: with init_process_group(log_every=N) (or DDPRT_TORCH_LOG_EVERY=N,
and metrics=FILE or DDPRT_TORCH_METRICS=FILE for JSON lines), or
telemetry(rt, N), rank 0 prints ddp-train's telemetry line for the hooks
every N steps: step, compute, comm and exposed time, busbw, the algorithm
and the slowest rank (_telemetry.py says how each is measured)."""

import ctypes
import os
import weakref

import torch
import torch.distributed as dist

from ._lib import RuntimeFailure
from ._runtime import Runtime
from ._telemetry import Telemetry

_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
           torch.float16: "float16", torch.int32: "int32", torch.int64: "int64"}


_GPU_PATHS = ("torch", "ddprt")
# the GPU path each Runtime of init_process_group was given (others: the default)
_gpu_path_of = weakref.WeakKeyDictionary()
# each Runtime's telemetry, when asked for
_telemetry_of = weakref.WeakKeyDictionary()


def telemetry(rt, every=10, metrics=None, straggler_ms=10.0):
    """Report the hooks' communication on rt every `every` steps: rank 0
    prints ddp-train's telemetry line (no loss: the hooks never see it) and,
    with metrics=FILE, writes each line as JSON (ddp-train --plot draws
    it). straggler_ms: the lag that names the slowest rank. Collective in
    effect: every rank must ask with the same `every`. Returns it."""
    tel = Telemetry(rt, every, metrics, straggler_ms)
    old = _telemetry_of.get(rt)
    if old is not None:
        old.close()
    _telemetry_of[rt] = tel
    weakref.finalize(rt, tel.close)
    return tel


def _env_every(log_every):
    if log_every is not None:
        return log_every
    text = os.environ.get("DDPRT_TORCH_LOG_EVERY", "0")
    try:
        return int(text)
    except ValueError:
        raise ValueError("ddp-topo: DDPRT_TORCH_LOG_EVERY=%r: expected a whole number of steps "
                         "(0: no telemetry)" % (text,)) from None


def _gpu_path(choice=None):
    """Who sums CUDA buckets: "torch" (its NCCL process group, the default)
    or "ddprt" (libddprt's GPU path, not yet run on a real GPU)."""
    choice = choice or os.environ.get("DDPRT_TORCH_GPU") or "torch"
    if choice not in _GPU_PATHS:
        raise ValueError("ddp-topo: GPU path %r: expected torch (torch's NCCL allreduce, the "
                         "default) or ddprt (libddprt's, set DDPRT_TORCH_GPU=ddprt)" % (choice,))
    return choice


def gpu_path(rt):
    """"torch" or "ddprt": who sums rt's CUDA buckets in the hooks."""
    return _gpu_path_of.get(rt) or _gpu_path()


def _bound_device():
    """The binding's device without libddprt's communicators: the plan puts
    CUDA_VISIBLE_DEVICES in plan order and gives local rank r device r mod n."""
    return int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()


def _libuv_missing():
    """True when this torch's TCPStore asks for libuv by default (torch 2.4
    on) but was built without it, as Debian's 2.6 and 2.14 are: env:// then
    fails with "use_libuv was requested". A store asked for libuv tells."""
    try:
        store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False, use_libuv=True)
    except TypeError:  # no use_libuv before torch 2.2: nothing to choose
        return False
    except RuntimeError:
        return True
    del store
    return False


def _env_method():
    """env://, with the store's other backend where libuv is missing and the
    user did not choose (USE_LIBUV, torch's own variable, wins)."""
    if "USE_LIBUV" not in os.environ and _libuv_missing():
        return "env://?use_libuv=0"
    return "env://"


def init_process_group(backend=None, gpu=None, log_every=None, metrics=None, **kwargs):
    """torch.distributed from the environment (env://), gloo on CPU and nccl
    when the task has a GPU, the device set from the binding; returns the
    Runtime, the hooks' state. gpu: who sums CUDA buckets in the hooks,
    "torch" (default; DDPRT_TORCH_GPU) or "ddprt", whose NCCL communicators
    are then attached here. log_every, metrics: the hooks' telemetry
    (telemetry(); default DDPRT_TORCH_LOG_EVERY, 0: none, and
    DDPRT_TORCH_METRICS). Raises NotLaunchedError outside a launcher."""
    path = _gpu_path(gpu)
    every = _env_every(log_every)
    if not isinstance(every, int) or every < 0:
        raise ValueError("ddp-topo: log_every %r: expected a whole number of steps (0: no "
                         "telemetry)" % (every,))
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
            torch.cuda.set_device(rt.gpu_attach() if path == "ddprt" else _bound_device())
        dist.init_process_group(backend, init_method=_env_method(), **kwargs)
    except BaseException:
        rt.close()
        raise
    _gpu_path_of[rt] = path
    if every:
        telemetry(rt, every, metrics or os.environ.get("DDPRT_TORCH_METRICS") or None)
    return rt


def _dtype(tensor):
    if tensor.dtype not in _DTYPES:
        raise ValueError("ddp-topo: cannot reduce a %s tensor (the runtime reduces %s)"
                         % (tensor.dtype, ", ".join(str(t) for t in _DTYPES)))
    return _DTYPES[tensor.dtype]


def _layout(tensor):
    """(address, count, dtype name) of a tensor the runtime can reduce in
    place: numel() elements from data_ptr() are exactly the tensor's only
    when it is dense and contiguous (a view such as base[::2] is neither:
    reduced as if it were, it would mix in, and change, base's other
    elements). Checked before the bucket is touched, for every path."""
    name = _dtype(tensor)
    if tensor.layout != torch.strided:
        raise ValueError("ddp-topo: cannot reduce a %s tensor (the runtime reduces dense "
                         "tensors: pass tensor.to_dense())" % tensor.layout)
    if not tensor.is_contiguous():
        raise ValueError("ddp-topo: cannot reduce a non-contiguous tensor (shape %s, stride %s): "
                         "the runtime reduces numel() elements from data_ptr() (reduce "
                         "tensor.contiguous() and copy the result back)"
                         % (tuple(tensor.shape), tensor.stride()))
    return tensor.data_ptr(), tensor.numel(), name


def _sum_now(rt, tensor, layout):
    """Sum tensor in place across the ranks (on a GPU: enqueued on the
    current stream, done as far as torch can tell)."""
    address, count, name = layout
    if tensor.is_cuda and gpu_path(rt) == "torch":
        if not dist.is_initialized():
            raise ValueError("ddp-topo: a CUDA bucket is summed by torch's NCCL allreduce, but "
                             "torch.distributed is not initialized (use ddp_topo.torch."
                             "init_process_group(), or DDPRT_TORCH_GPU=ddprt for libddprt's "
                             "GPU path)")
        dist.all_reduce(tensor)  # enqueued on the current stream, as DDP's own
    elif tensor.is_cuda:
        rt.gpu_allreduce(address, count, name, "sum", torch.cuda.current_stream().cuda_stream)
    else:
        rt.allreduce(ctypes.c_void_p(address), name, count=count)


def _raise_failure(fut):
    """A then() callback: the value, or the failure raised. DDP's reducer reads
    a Future's value in C++, so a failure must be an error of the Future
    (a callback that raises), not a Python set_exception."""
    value = fut.value()
    if isinstance(value, Exception):
        raise value
    return value


def _handed(rt, tensor, bucket):
    """The telemetry and this bucket's hand-over time, (None, None) without
    telemetry (then the bucket is not asked anything beyond its buffer)."""
    tel = _telemetry_of.get(rt)
    if tel is None:
        return None, None
    return tel, tel.handed(tensor.numel() * tensor.element_size(), bucket.is_last())


def _sum_later(rt, tensor, then, bucket, scale=1.0):
    """Scale tensor, then sum it in place across the ranks; a Future of
    then()'s value once done, or of the failure (the runtime's, naming the
    rank; a tensor the runtime cannot reduce is left untouched). bucket:
    DDP's, for the telemetry (is it the step's last)."""
    fut = torch.futures.Future()
    tel, handed = _handed(rt, tensor, bucket)

    def finish(error):
        try:
            if error is not None:
                raise error
            value = then()
            if tel:  # before the Future: its vector precedes any later bucket
                tel.done(handed)
            fut.set_result(value)
        except Exception as e:  # DDP raises it from backward()
            if tel:
                tel.failed()
            fut.set_result(e)

    try:
        layout = _layout(tensor)
        if scale != 1.0:
            tensor.mul_(scale)
        if tensor.is_cuda:
            _sum_now(rt, tensor, layout)
            finish(None)
        else:
            address, count, name = layout
            rt.when_done(rt.iallreduce(ctypes.c_void_p(address), name, count=count), finish)
    except (RuntimeFailure, ValueError) as e:
        finish(e)
    return fut.then(_raise_failure)


def allreduce_hook(rt, bucket):
    """Blocking: the bucket is averaged before the hook returns."""
    fut, tensor = torch.futures.Future(), bucket.buffer()
    tel, handed = _handed(rt, tensor, bucket)
    try:
        layout = _layout(tensor)
        tensor.mul_(1.0 / rt.size)
        _sum_now(rt, tensor, layout)
        if tel:
            tel.done(handed, blocking=True)
        fut.set_result(tensor)
    except (RuntimeFailure, ValueError) as e:
        if tel:
            tel.failed()
        fut.set_result(e)
    return fut.then(_raise_failure)


def async_allreduce_hook(rt, bucket):
    """The bucket is averaged by the runtime's progress thread while backward
    goes on; a waiter thread completes the Future."""
    tensor = bucket.buffer()
    return _sum_later(rt, tensor, lambda: tensor, bucket, 1.0 / rt.size)


def bf16_compress_hook(rt, bucket):
    """Averages a bfloat16 copy of the bucket (half the bytes on the wire;
    each reduction step adds in float32 and rounds to bfloat16) and writes
    it back. The copy is contiguous
    whatever the bucket's layout, so a strided bucket is reduced right."""
    tensor = bucket.buffer()
    compressed = tensor.mul_(1.0 / rt.size).to(torch.bfloat16).contiguous()
    return _sum_later(rt, compressed, lambda: tensor.copy_(compressed), bucket)


# DDP refuses a hook *named* bf16_compress_hook without CUDA 11 and NCCL
# 2.10 (torch 1.13's _check_comm_hook goes by __name__): this one needs neither.
bf16_compress_hook.__name__ = "ddp_topo_bf16_compress_hook"
