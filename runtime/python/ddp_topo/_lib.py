# SPDX-License-Identifier: Apache-2.0
"""libddprt through ctypes: found by DDPRT_LIBRARY (a path), else the
installed soname; loaded at the first Runtime, so `import ddp_topo` and
plan() work without it."""

import ctypes
import os
import threading

SONAME = "libddprt.so.0"

# the runtime's enums (runtime/ddprt.h), in declaration order
OPS = {"sum": 0, "avg": 1, "min": 2, "max": 3}
ELOST = -2  # DRT_ELOST: a call failed because a rank of the world is gone


class RuntimeFailure(RuntimeError):
    """A libddprt call failed; the message is the runtime's."""


class RankLost(RuntimeFailure):
    """A call failed because ranks of the world are gone (DRT_ELOST): ranks,
    their numbers in the world before (ascending), and nodes, the name of the
    node each ran on. Under a launcher that keeps the survivors running
    (srun -k, ddp-run -k), every survivor may call Runtime.shrink()."""

    def __init__(self, message, ranks=(), nodes=()):
        super().__init__(message)
        self.ranks, self.nodes = tuple(ranks), tuple(nodes)

    def __reduce__(self):  # pickles (and copies) with its ranks and nodes
        return type(self), (str(self), self.ranks, self.nodes)


class Error(ctypes.Structure):
    """drt_error_t"""
    _fields_ = [("text", ctypes.c_char * 320)]

    def failure(self, what, lost=None):
        """The exception for a failed call: RankLost with lost's (ranks,
        nodes) when the runtime said DRT_ELOST, else RuntimeFailure."""
        text = "ddp-topo: %s: %s" % (what, self.text.decode("utf-8", "replace") or "no message")
        return RankLost(text, *lost) if lost is not None else RuntimeFailure(text)


class ShrinkInfoC(ctypes.Structure):
    """drt_shrink_info_t"""
    _fields_ = [("old_size", ctypes.c_int), ("new_size", ctypes.c_int),
                ("old_rank", ctypes.c_int), ("old_nodes", ctypes.c_int),
                ("new_nodes", ctypes.c_int), ("nlost", ctypes.c_int),
                ("lost_ranks", ctypes.POINTER(ctypes.c_int)),
                ("lost_nodes", ctypes.POINTER(ctypes.c_char_p)),
                ("old_rank_of", ctypes.POINTER(ctypes.c_int)),
                ("seconds", ctypes.c_double)]


_P = ctypes.c_void_p
_ERR = ctypes.POINTER(Error)
_SIZE = ctypes.c_size_t
_INT = ctypes.c_int
# name: (result, argument types)
_PROTOTYPES = {
    "drt_init": (_INT, [ctypes.POINTER(_P), _ERR]),
    "drt_finalize": (None, [_P]),
    "drt_rank": (_INT, [_P]), "drt_size": (_INT, [_P]),
    "drt_local_rank": (_INT, [_P]), "drt_local_size": (_INT, [_P]),
    "drt_node_rank": (_INT, [_P]), "drt_node_count": (_INT, [_P]),
    "drt_dtype_parse": (_INT, [ctypes.c_char_p, ctypes.POINTER(_INT)]),
    "drt_dtype_size": (_SIZE, [_INT]),
    "drt_allreduce": (_INT, [_P, _P, _P, _SIZE, _INT, _INT, _ERR]),
    "drt_iallreduce": (_INT, [_P, _P, _P, _SIZE, _INT, _INT, ctypes.POINTER(_P), _ERR]),
    "drt_test": (_INT, [_P, ctypes.POINTER(_INT), _ERR]),
    "drt_wait": (_INT, [_P, _ERR]),
    "drt_barrier": (_INT, [_P, _ERR]),
    "drt_gpu_attach": (_INT, [_P, _INT, _ERR]),
    "drt_gpu_device": (_INT, [_P]),
    "drt_gpu_allreduce": (_INT, [_P, _P, _P, _SIZE, _INT, _INT, _P, _ERR]),
    "drt_node_of": (_INT, [_P, _INT]),
    "drt_algo_name": (ctypes.c_char_p, [_INT]),
}
# the telemetry's queries: bound where the library has them (an older one has not)
_TELEMETRY = {
    "drt_last_algo": (_INT, [_P]),
}
# the elastic calls: bound where the library has them (an older one has not)
_ELASTIC = {
    "drt_lost_count": (_INT, [_P]),
    "drt_lost_rank": (_INT, [_P, _INT]),
    "drt_node_name": (ctypes.c_char_p, [_P, _INT]),
    "drt_shrink": (_INT, [_P, ctypes.POINTER(ShrinkInfoC), _ERR]),
}

_lock = threading.Lock()
_lib = None


def _load():
    path = os.environ.get("DDPRT_LIBRARY") or SONAME
    try:
        lib = ctypes.CDLL(path)  # CDLL releases the GIL during every call
    except OSError as e:
        raise RuntimeFailure(
            "ddp-topo: cannot load libddprt from '%s'%s: %s (install ddp-topo, or set "
            "DDPRT_LIBRARY to the library's path, e.g. <builddir>/runtime/.libs/libddprt.so.0)"
            % (path, " (DDPRT_LIBRARY)" if path != SONAME else "", e)) from None
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    for name, (restype, argtypes) in list(_ELASTIC.items()) + list(_TELEMETRY.items()):
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes
    return lib


def lib():
    """The loaded library (once per process)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _load()
        return _lib


def elastic(name, what):
    """One of the elastic calls; RuntimeFailure when this libddprt is older."""
    fn = getattr(lib(), name, None)
    if fn is None:
        raise RuntimeFailure("ddp-topo: %s: this libddprt (%s) has no %s: it is older than the "
                             "elastic API (install a libddprt that has it, or set DDPRT_LIBRARY "
                             "to one)" % (what, os.environ.get("DDPRT_LIBRARY") or SONAME, name))
    return fn


def dtype(name):
    """A dtype name (float32, float64, bfloat16, float16, int32, int64), parsed
    by the runtime itself: (enum value, bytes per element)."""
    t = _INT()
    if not isinstance(name, str) or lib().drt_dtype_parse(name.encode(), ctypes.byref(t)) < 0:
        raise ValueError("ddp-topo: dtype %r is not one of float32, float64, bfloat16, float16, "
                         "int32, int64" % (name,))
    return t.value, lib().drt_dtype_size(t.value)


def op(name):
    if name not in OPS:
        raise ValueError("ddp-topo: op %r is not one of %s" % (name, ", ".join(OPS)))
    return OPS[name]
