# SPDX-License-Identifier: Apache-2.0
"""Runtime: one libddprt communicator (drt_init .. drt_finalize)."""

import collections
import contextlib
import copy
import ctypes
import queue
import sys
import threading
import traceback
import weakref

from . import _contract, _lib
from ._lib import Error, RuntimeFailure

ShrinkInfo = collections.namedtuple("ShrinkInfo", [
    "old_size", "new_size",    # the world's sizes before and after
    "old_rank", "new_rank",    # this rank's numbers before and after
    "old_nodes", "new_nodes",  # node counts before and after
    "lost_ranks",              # the ranks lost, by their old numbers, ascending
    "lost_nodes",              # the name of the node each of them ran on
    "old_rank_of",             # each new rank's old number
    "seconds"])                # drt_shrink's own time
ShrinkInfo.__doc__ = "What Runtime.shrink() did (drt_shrink_info_t)."


def _text(name):
    return name.decode("utf-8", "replace") if name is not None else None

_POINTERS = (ctypes._Pointer, ctypes.c_void_p, ctypes.c_char_p)

# a buffer's struct format code -> the dtypes whose elements it can hold.
# Raw bytes ('B', 'b', 'c': bytearray, bytes-like ctypes arrays) fit every
# dtype; 16-bit floats have no code of their own in Python (bfloat16 none at
# all), so 16-bit integers count as their raw storage.
_FITS = {"f": ("float32",), "d": ("float64",), "e": ("float16",),
         "H": ("float16", "bfloat16"), "h": ("float16", "bfloat16")}
_SIGNED = "hilqn"  # signed integer codes: int32 or int64 by their size
_RAW = "Bbc"
_NATIVE = {"little": "<", "big": ">"}[sys.byteorder]


def _described(code, size):
    if code in _SIGNED or code in _SIGNED.upper():
        return "%sint%d" % ("" if code in _SIGNED else "u", 8 * size)
    names = {"f": "float32", "d": "float64", "e": "float16", "?": "bool"}
    return names.get(code, "format '%s'" % code)


def _check_format(buf, fmt, size, dtype):
    """ValueError unless a buffer of this struct format holds dtype's
    elements in this machine's byte order (a float64 array reduced as
    float32 would be reduced as garbage)."""
    order, code = (fmt[0], fmt[1:]) if fmt[:1] in "@=<>!" else ("@", fmt)
    if order in "<>!" and {"!": ">"}.get(order, order) != _NATIVE and size > 1:
        raise ValueError("ddp-topo: the buffer (%s) is in %s byte order (format '%s'); the runtime "
                         "reduces this machine's (%s-endian) (convert it first, e.g. "
                         "array.byteswap())" % (type(buf).__name__, "big-endian" if order in ">!"
                                                else "little-endian", fmt, sys.byteorder))
    if code in _RAW and size == 1:
        return
    fits = _FITS.get(code, ())
    if code in _SIGNED:
        fits = ("int%d" % (8 * size),)
    if dtype not in fits:
        raise ValueError("ddp-topo: the buffer (%s) holds %s elements (format '%s'), not %s "
                         "(pass the dtype of its elements, or a buffer of %s; raw bytes such as a "
                         "bytearray fit any dtype)"
                         % (type(buf).__name__, _described(code, size), fmt, dtype, dtype))


def _region(buf, count, dtype, elem):
    """(address, count, keepalive) of buf: an object exposing a writable
    C-contiguous buffer whose elements are dtype's (count defaults to all
    of it), or a ctypes pointer with count elements (it carries no layout:
    the caller vouches for it)."""
    if isinstance(buf, _POINTERS):
        if not isinstance(count, int) or count < 0:
            raise ValueError("ddp-topo: a ctypes pointer needs count, the number of elements")
        return ctypes.cast(buf, ctypes.c_void_p).value, count, buf
    with memoryview(buf) as view:
        nbytes, readonly, contiguous = view.nbytes, view.readonly, view.c_contiguous
        fmt, size = view.format, view.itemsize
    if readonly or not contiguous:
        raise ValueError("ddp-topo: the buffer (%s) is %s; allreduce works in place on a "
                         "writable C-contiguous buffer (bytearray, array.array, a ctypes array)"
                         % (type(buf).__name__, "read-only" if readonly else "not contiguous"))
    _check_format(buf, fmt, size, dtype)
    if nbytes % elem:
        raise ValueError("ddp-topo: the buffer holds %d bytes, not a whole number of %d-byte "
                         "elements (check the dtype)" % (nbytes, elem))
    if count is None:
        count = nbytes // elem
    if not isinstance(count, int) or not 0 <= count <= nbytes // elem:
        raise ValueError("ddp-topo: count %r is not a number of elements from 0 to the buffer's %d"
                         % (count, nbytes // elem))
    # holding the ctypes view keeps the buffer exported: a bytearray cannot
    # be resized (and its memory moved) while the runtime writes to it
    view = (ctypes.c_char * nbytes).from_buffer(buf)
    return ctypes.addressof(view), count, view


class _Guard:
    """A lock that refuses its own holder instead of deadlocking: a signal
    handler or a callback that runs inside a call, on the thread making it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner = None

    @contextlib.contextmanager
    def hold(self, what):
        me = threading.get_ident()
        if self._owner == me:  # only this thread ever sets its own ident
            raise RuntimeFailure("ddp-topo: %s: this thread is already inside a call on the same "
                                 "Runtime (a signal handler or callback?): calls do not nest "
                                 "(make it after that call returns)" % what)
        with self._lock:
            self._owner = me
            try:
                yield
            finally:
                self._owner = None


class _State:
    """What finalizing needs, without the Runtime itself (weakref.finalize).

    libddprt lets one thread at a time call into a communicator
    (docs/runtime.md, "Threads"): every call holds `calls`, and close()
    takes the communicator away under it, so it waits for the call in
    flight and every later call finds it closed. Requests are waited
    outside it (libddprt allows that alongside other calls), each under its
    own lock, and close() waits for each before drt_finalize."""

    def __init__(self, lib, comm):
        self.lib, self.comm = lib, comm
        self.handle = comm  # the same pointer until drt_finalize, also while closing
        self.calls = _Guard()
        self.requests = weakref.WeakSet()  # added to only under calls, while open
        self.jobs = None  # the waiter's queue, once started
        self.waiter = None
        self.finalized = threading.Event()

    @contextlib.contextmanager
    def open_comm(self, what):
        """The communicator, held for one call; RuntimeFailure once closed."""
        with self.calls.hold(what):
            if self.comm is None:
                raise RuntimeFailure("ddp-topo: %s: this Runtime is closed (create a new one)"
                                     % what)
            yield self.comm

    def failure(self, rc, err, what):
        """The exception for a call that returned rc < 0: RankLost, naming
        the ranks gone and their nodes, when rc is DRT_ELOST."""
        return err.failure(what, self.lost() if rc == _lib.ELOST else None)

    def lost(self):
        """(ranks, nodes): the ranks this rank knows are gone (drt_lost_*,
        queries like drt_rank, so any thread may ask) and their nodes."""
        lib, c = self.lib, self.handle
        ranks = tuple(lib.drt_lost_rank(c, i) for i in range(lib.drt_lost_count(c)))
        return ranks, tuple(_text(lib.drt_node_name(c, r)) for r in ranks)

    def wait_requests(self):
        """Wait for every request still out; their owners get the failures."""
        for req in list(self.requests):
            try:
                req.wait()
            except RuntimeFailure:
                pass

    def _on_waiter(self):
        return threading.current_thread() is self.waiter

    def shutdown(self):
        with self.calls.hold("close"):
            comm, self.comm = self.comm, None
        if comm is None:  # closed, or another thread is closing it
            if not self._on_waiter():
                self.finalized.wait()
            return
        if self.waiter is not None:
            self.jobs.put(None)
            if not self._on_waiter():  # a callback that closes: the loop ends after it
                self.waiter.join()
        self.wait_requests()  # a failure was or will be reported by its owner
        self.lib.drt_finalize(comm)
        self.finalized.set()


class Request:
    """An iallreduce in flight; wait() or test() until done. The buffer is
    the runtime's until then. Any thread may wait for it or test it, also
    while other threads use the Runtime; close() waits for it."""

    def __init__(self, state, handle, keep):
        self._state, self._handle, self._keep = state, handle, keep
        self._lock = _Guard()  # drt_wait frees the handle: one caller at a time
        self._failure = None
        state.requests.add(self)

    def wait(self):
        """Block until done (bounded by DDPRT_TIMEOUT); RuntimeFailure if it
        failed, RankLost if a rank is gone (again at every later call)."""
        with self._lock.hold("wait"):
            if self._handle is not None:
                err = Error()
                rc = self._state.lib.drt_wait(self._handle, ctypes.byref(err))
                self._handle = self._keep = None
                if rc < 0:
                    self._failure = self._state.failure(rc, err, "iallreduce")
        if self._failure:
            raise copy.copy(self._failure)  # a fresh traceback at every call

    def test(self):
        """True once done (then the buffer holds the result); RuntimeFailure
        (RankLost) if it failed."""
        with self._lock.hold("test"):
            if self._handle is not None:
                done, err = ctypes.c_int(), Error()
                rc = self._state.lib.drt_test(self._handle, ctypes.byref(done), ctypes.byref(err))
                if rc == 0 and not done.value:
                    return False
        self.wait()  # frees it, and raises a failure
        return True

    def __del__(self):
        try:
            self.wait()  # the runtime may still write to the buffer until then
        except RuntimeFailure:
            pass


class Runtime:
    """libddprt's communicator over the job's ranks, from the environment
    contract. Collective: every rank creates one. Use as a context manager,
    or call close().

    Threads: any thread may call any method. The calls are serialised (one
    at a time into the communicator; a blocking allreduce holds it until it
    returns), and close() waits for the call in flight and the requests
    still out, then every later call raises RuntimeFailure. Serialising
    keeps each call whole, but only the program can make the ranks issue
    their collectives in the same order: calls from two threads pair up
    across the ranks in whatever order each rank ran them."""

    def __init__(self):
        _contract.plan()  # outside a launcher: NotLaunchedError, which says what to do
        lib = _lib.lib()
        comm, err = ctypes.c_void_p(), Error()
        if lib.drt_init(ctypes.byref(comm), ctypes.byref(err)) < 0:
            raise err.failure("drt_init")
        self._state = _State(lib, comm)
        self._close = weakref.finalize(self, self._state.shutdown)
        self._numbers()

    def _numbers(self):
        """rank, size, ... from the communicator: after drt_init and drt_shrink."""
        lib, c = self._state.lib, self._state.handle
        self.rank, self.size = lib.drt_rank(c), lib.drt_size(c)
        self.local_rank, self.local_size = lib.drt_local_rank(c), lib.drt_local_size(c)
        self.node_rank, self.node_count = lib.drt_node_rank(c), lib.drt_node_count(c)

    def allreduce(self, buf, dtype, op="sum", count=None):
        """Reduce buf in place across all ranks; every rank ends with the same
        bytes. buf's elements must be dtype's (raw bytes fit any)."""
        t, elem = _lib.dtype(dtype)
        o = _lib.op(op)
        addr, n, keep = _region(buf, count, dtype, elem)
        err = Error()
        with self._state.open_comm("allreduce") as comm:
            rc = self._state.lib.drt_allreduce(comm, addr, addr, n, t, o, ctypes.byref(err))
            del keep
            if rc < 0:
                raise self._state.failure(rc, err, "allreduce")

    def iallreduce(self, buf, dtype, op="sum", count=None):
        """Start an allreduce of buf in place; returns a Request."""
        t, elem = _lib.dtype(dtype)
        o = _lib.op(op)
        addr, n, keep = _region(buf, count, dtype, elem)
        handle, err = ctypes.c_void_p(), Error()
        with self._state.open_comm("iallreduce") as comm:
            rc = self._state.lib.drt_iallreduce(comm, addr, addr, n, t, o, ctypes.byref(handle),
                                                ctypes.byref(err))
            if rc < 0:
                raise self._state.failure(rc, err, "iallreduce")
            return Request(self._state, handle, keep)

    def barrier(self):
        err = Error()
        with self._state.open_comm("barrier") as comm:
            rc = self._state.lib.drt_barrier(comm, ctypes.byref(err))
            if rc < 0:
                raise self._state.failure(rc, err, "barrier")

    # GPU buffers (drt_gpu_*): run in CI on the CUDA/NCCL stand-in
    # (tests/python/gpu_standin.py), not yet on a GPU
    def gpu_attach(self, device=-1):
        """Create the NCCL communicators (collective) on device, or with -1
        the plugin's binding (DDP_TOPO_GPU, else LOCAL_RANK); the device used."""
        err = Error()
        with self._state.open_comm("gpu_attach") as comm:
            rc = self._state.lib.drt_gpu_attach(comm, device, ctypes.byref(err))
            if rc < 0:
                raise self._state.failure(rc, err, "gpu_attach")
            return self._state.lib.drt_gpu_device(comm)

    def gpu_allreduce(self, address, count, dtype, op="sum", stream=None):
        """Enqueue an in-place allreduce of count contiguous dtype elements of
        device memory at address on stream (a cudaStream_t as an int; None:
        the legacy default stream). An address carries no layout: a caller
        with a strided tensor must pass a contiguous one."""
        t, _ = _lib.dtype(dtype)
        o = _lib.op(op)
        if not isinstance(count, int) or count < 0:
            raise ValueError("ddp-topo: gpu_allreduce: count %r is not a number of elements "
                             "(0 or more)" % (count,))
        err = Error()
        with self._state.open_comm("gpu_allreduce") as comm:
            rc = self._state.lib.drt_gpu_allreduce(comm, address, address, count, t, o, stream,
                                                   ctypes.byref(err))
            if rc < 0:
                raise self._state.failure(rc, err, "gpu_allreduce")

    # Elastic (drt_lost_*, drt_node_name, drt_shrink): after RankLost, under
    # a launcher that keeps the survivors running (srun -k, ddp-run -k)
    def lost(self):
        """The ranks (numbers before any shrink since) this rank knows are gone."""
        _lib.elastic("drt_lost_count", "lost")
        with self._state.open_comm("lost"):
            return self._state.lost()[0]

    def node_name(self, rank=None):
        """The name of the node rank (default: this one) runs or ran on:
        DDP_TOPO_NODENAME (the plugin's SLURM node name, ddp-run's nodeK),
        else the host name; None for no such rank."""
        fn = _lib.elastic("drt_node_name", "node_name")
        rank = self.rank if rank is None else rank
        if not isinstance(rank, int):
            raise ValueError("ddp-topo: node_name: rank %r is not a whole number" % (rank,))
        with self._state.open_comm("node_name") as comm:
            return _text(fn(comm, rank))

    def shrink(self):
        """Collective over the survivors, after RankLost: agree on who is
        left, renumber them 0..M-1 in their old order and rebuild the
        world over them (drt_shrink; docs/runtime.md, "Elastic in Python").
        First waits for this Runtime's requests still out (each ends or
        fails), so none spans the shrink. Updates rank, size, local_rank, local_size,
        node_rank and node_count; returns a ShrinkInfo. RuntimeFailure if
        this rank was left out or too few survived to agree in time."""
        fn = _lib.elastic("drt_shrink", "shrink")
        state, info, err = self._state, _lib.ShrinkInfoC(), Error()
        with state.open_comm("shrink") as comm:
            state.wait_requests()
            rc = fn(comm, ctypes.byref(info), ctypes.byref(err))
            if rc < 0:
                raise state.failure(rc, err, "shrink")
            self._numbers()
            n = info.nlost
            return ShrinkInfo(info.old_size, info.new_size, info.old_rank, self.rank,
                              info.old_nodes, info.new_nodes, tuple(info.lost_ranks[:n]),
                              tuple(_text(info.lost_nodes[i]) for i in range(n)),
                              tuple(info.old_rank_of[:info.new_size]), info.seconds)

    # Queries for the hooks' telemetry (ddp_topo.torch): like rank and
    # size, any thread may make them, also from a when_done callback
    def node_of(self, rank):
        """The node (GROUP_RANK) rank runs on, -1 for no such rank."""
        return self._state.lib.drt_node_of(self._state.handle, rank)

    def last_algo(self):
        """"flat" or "hier": what the last allreduce ran (auto's choice);
        None with a libddprt older than drt_last_algo."""
        lib = self._state.lib
        fn = getattr(lib, "drt_last_algo", None)
        return _text(lib.drt_algo_name(fn(self._state.handle))) if fn else None

    def when_done(self, request, callback):
        """Call callback(None), or callback(the RuntimeFailure), from a waiter
        thread once request is done; requests complete in the order given.
        close() waits for the callbacks of the requests given before it."""
        state = self._state
        with state.open_comm("when_done"):
            if state.waiter is None:
                state.jobs = queue.SimpleQueue()
                state.waiter = threading.Thread(target=_wait_loop, args=(state.jobs,),
                                                name="ddp_topo waiter", daemon=True)
                state.waiter.start()
            state.jobs.put((request, callback))

    def close(self):
        """Wait for the call another thread has in flight, the outstanding
        requests and the callbacks given to when_done, then finalize.
        Idempotent; a second close() waits until the first is done."""
        self._state.shutdown()
        self._close.detach()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _wait_loop(jobs):
    for request, callback in iter(jobs.get, None):
        try:
            request.wait()
            error = None
        except RuntimeFailure as e:
            error = e
        try:
            callback(error)
        except Exception:  # the later requests' callbacks must still run
            traceback.print_exc()
