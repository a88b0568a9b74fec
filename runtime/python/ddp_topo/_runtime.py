# SPDX-License-Identifier: Apache-2.0
"""Runtime: one libddprt communicator (drt_init .. drt_finalize)."""

import ctypes
import queue
import threading
import weakref

from . import _contract, _lib
from ._lib import Error, RuntimeFailure

_POINTERS = (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p)


def _region(buf, count, elem):
    """(address, count, keepalive) of buf: an object exposing a writable
    C-contiguous buffer (count defaults to all of it), or a ctypes pointer
    with count elements."""
    if isinstance(buf, _POINTERS):
        if count is None or count < 0:
            raise ValueError("ddp-topo: a ctypes pointer needs count, the number of elements")
        return ctypes.cast(buf, ctypes.c_void_p).value, count, buf
    with memoryview(buf) as view:
        nbytes, readonly, contiguous = view.nbytes, view.readonly, view.c_contiguous
    if readonly or not contiguous:
        raise ValueError("ddp-topo: the buffer (%s) is %s; allreduce works in place on a "
                         "writable C-contiguous buffer (bytearray, array.array, a ctypes array)"
                         % (type(buf).__name__, "read-only" if readonly else "not contiguous"))
    if nbytes % elem:
        raise ValueError("ddp-topo: the buffer holds %d bytes, not a whole number of %d-byte "
                         "elements (check the dtype)" % (nbytes, elem))
    if count is None:
        count = nbytes // elem
    if not 0 <= count <= nbytes // elem:
        raise ValueError("ddp-topo: count %d is more than the buffer's %d elements"
                         % (count, nbytes // elem))
    # holding the ctypes view keeps the buffer exported: a bytearray cannot
    # be resized (and its memory moved) while the runtime writes to it
    view = (ctypes.c_char * nbytes).from_buffer(buf)
    return ctypes.addressof(view), count, view


class _State:
    """What finalizing needs, without the Runtime itself (weakref.finalize)."""

    def __init__(self, lib, comm):
        self.lib, self.comm = lib, comm
        self.requests = weakref.WeakSet()
        self.jobs = None  # the waiter's queue, once started
        self.waiter = None

    def shutdown(self):
        if self.waiter is not None:
            self.jobs.put(None)
            self.waiter.join()
        for req in list(self.requests):
            try:
                req.wait()
            except RuntimeFailure:
                pass  # closing: the failure was or will be reported by its owner
        comm, self.comm = self.comm, None
        if comm:
            self.lib.drt_finalize(comm)


class Request:
    """An iallreduce in flight; wait() or test() until done. The buffer is
    the runtime's until then."""

    def __init__(self, state, handle, keep):
        self._state, self._handle, self._keep = state, handle, keep
        state.requests.add(self)

    def wait(self):
        """Block until done (bounded by DDPRT_TIMEOUT); RuntimeFailure if it failed."""
        handle, self._handle = self._handle, None
        if handle is None:
            return
        self._state.requests.discard(self)
        err = Error()
        rc = self._state.lib.drt_wait(handle, ctypes.byref(err))
        self._keep = None
        if rc < 0:
            raise err.failure("iallreduce")

    def test(self):
        """True once done (then the buffer holds the result); RuntimeFailure if it failed."""
        if self._handle is None:
            return True
        done, err = ctypes.c_int(), Error()
        if self._state.lib.drt_test(self._handle, ctypes.byref(done), ctypes.byref(err)) < 0:
            self.wait()  # frees it, and raises the failure
            raise err.failure("iallreduce")
        if done.value:
            self.wait()
        return bool(done.value)

    def __del__(self):
        try:
            self.wait()  # the runtime may still write to the buffer until then
        except RuntimeFailure:
            pass


class Runtime:
    """libddprt's communicator over the job's ranks, from the environment
    contract. Collective: every rank creates one. Use as a context manager,
    or call close()."""

    def __init__(self):
        _contract.plan()  # outside a launcher: NotLaunchedError, which says what to do
        lib = _lib.lib()
        comm, err = ctypes.c_void_p(), Error()
        if lib.drt_init(ctypes.byref(comm), ctypes.byref(err)) < 0:
            raise err.failure("drt_init")
        self._state = _State(lib, comm)
        self._close = weakref.finalize(self, self._state.shutdown)
        c = comm
        self.rank, self.size = lib.drt_rank(c), lib.drt_size(c)
        self.local_rank, self.local_size = lib.drt_local_rank(c), lib.drt_local_size(c)
        self.node_rank, self.node_count = lib.drt_node_rank(c), lib.drt_node_count(c)

    def _comm(self, what):
        if self._state.comm is None:
            raise RuntimeFailure("ddp-topo: %s: this Runtime is closed (create a new one)" % what)
        return self._state.comm

    def allreduce(self, buf, dtype, op="sum", count=None):
        """Reduce buf in place across all ranks; every rank ends with the same bytes."""
        comm = self._comm("allreduce")
        t, elem = _lib.dtype(dtype)
        o = _lib.op(op)
        addr, n, keep = _region(buf, count, elem)
        err = Error()
        rc = self._state.lib.drt_allreduce(comm, addr, addr, n, t, o, ctypes.byref(err))
        del keep
        if rc < 0:
            raise err.failure("allreduce")

    def iallreduce(self, buf, dtype, op="sum", count=None):
        """Start an allreduce of buf in place; returns a Request."""
        comm = self._comm("iallreduce")
        t, elem = _lib.dtype(dtype)
        o = _lib.op(op)
        addr, n, keep = _region(buf, count, elem)
        handle, err = ctypes.c_void_p(), Error()
        if self._state.lib.drt_iallreduce(comm, addr, addr, n, t, o, ctypes.byref(handle),
                                          ctypes.byref(err)) < 0:
            raise err.failure("iallreduce")
        return Request(self._state, handle, keep)

    def barrier(self):
        err = Error()
        if self._state.lib.drt_barrier(self._comm("barrier"), ctypes.byref(err)) < 0:
            raise err.failure("barrier")

    # GPU buffers (drt_gpu_*): run in CI on the CUDA/NCCL stand-in
    # (tests/python/gpu_standin.py), not yet on a GPU
    def gpu_attach(self, device=-1):
        """Create the NCCL communicators (collective) on device, or with -1
        the plugin's binding (DDP_TOPO_GPU, else LOCAL_RANK); the device used."""
        comm, err = self._comm("gpu_attach"), Error()
        if self._state.lib.drt_gpu_attach(comm, device, ctypes.byref(err)) < 0:
            raise err.failure("gpu_attach")
        return self._state.lib.drt_gpu_device(comm)

    def gpu_allreduce(self, address, count, dtype, op="sum", stream=None):
        """Enqueue an in-place allreduce of device memory at address on stream
        (a cudaStream_t as an int; None: the legacy default stream)."""
        comm, err = self._comm("gpu_allreduce"), Error()
        t, _ = _lib.dtype(dtype)
        if self._state.lib.drt_gpu_allreduce(comm, address, address, count, t, _lib.op(op),
                                             stream, ctypes.byref(err)) < 0:
            raise err.failure("gpu_allreduce")

    def when_done(self, request, callback):
        """Call callback(None), or callback(the RuntimeFailure), from a waiter
        thread once request is done; requests complete in the order given."""
        state = self._state
        self._comm("when_done")
        if state.waiter is None:
            state.jobs = queue.SimpleQueue()
            state.waiter = threading.Thread(target=_wait_loop, args=(state.jobs,),
                                            name="ddp_topo waiter", daemon=True)
            state.waiter.start()
        state.jobs.put((request, callback))

    def close(self):
        """Wait for outstanding requests, then finalize (idempotent)."""
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _wait_loop(jobs):
    for request, callback in iter(jobs.get, None):
        try:
            request.wait()
        except RuntimeFailure as e:
            callback(e)
        else:
            callback(None)
