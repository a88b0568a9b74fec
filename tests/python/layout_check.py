# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run: buffers and tensors whose layout or element type is
not what the call says. Each is refused with a ValueError naming what is
wrong, and left as it was, or (what the runtime can reduce) comes back
right with nothing outside it changed. Every rank prints "ok rank R: ..."
/ "not ok rank R: ... (saw ...)" lines; with DDP_TOPO_NO_TORCH set the
torch cases are left out (numpy comes with torch)."""

import array
import ctypes
import os

import ddp_topo


def say(line):
    os.write(1, (line + "\n").encode())


def check(rt, good, name, seen=""):
    say("%s rank %d: %s%s" % ("ok" if good else "not ok", rt.rank, name,
                              "" if good else " (saw %s)" % (seen,)))


def refused(rt, name, call, want, before, after):
    """call() must raise ValueError containing want, leaving after() == before."""
    try:
        call()
        msg = "no exception"
    except ValueError as e:
        msg = str(e)
    check(rt, want in msg, "%s: refused, saying %r" % (name, want), msg)
    check(rt, after() == before, "%s: the buffer is unchanged" % name, after())


def buffers(rt):
    """Python buffers whose struct format is not the dtype asked for."""
    mine = [rt.rank + 1.0 + i for i in range(8)]
    cases = (("a float64 array.array reduced as float32", array.array("d", mine), "float32",
              "holds float64 elements (format 'd'), not float32"),
             ("a float32 array.array reduced as float64", array.array("f", mine), "float64",
              "holds float32 elements (format 'f'), not float64"),
             ("a float32 array.array reduced as int32", array.array("f", mine), "int32",
              "holds float32 elements (format 'f'), not int32"),
             ("an int32 array.array reduced as float32", array.array("i", range(8)), "float32",
              "holds int32 elements (format 'i'), not float32"),
             ("a uint32 array.array reduced as int32", array.array("I", range(8)), "int32",
              "holds uint32 elements (format 'I'), not int32"),
             ("an int64 array.array reduced as int32", array.array("q", range(8)), "int32",
              "holds int64 elements (format 'q'), not int32"),
             ("a big-endian ctypes float array", (ctypes.c_float.__ctype_be__ * 8)(*mine),
              "float32", "is in big-endian byte order (format '>f')"),
             ("a strided memoryview", memoryview(array.array("f", mine))[::2], "float32",
              "is not contiguous"))
    for name, buf, dtype, want in cases:
        refused(rt, name, lambda: rt.allreduce(buf, dtype), want, bytes(buf), lambda: bytes(buf))
        refused(rt, name + " (iallreduce)", lambda: rt.iallreduce(buf, dtype), want, bytes(buf),
                lambda: bytes(buf))
    total = sum(r + 1.0 for r in range(rt.size))
    want = [total + rt.size * i for i in range(8)]
    fits = (("float32 array.array", array.array("f", mine), "float32"),
            ("float64 array.array", array.array("d", mine), "float64"),
            ("little-endian ctypes float array", (ctypes.c_float.__ctype_le__ * 8)(*mine),
             "float32"),
            ("int64 array.array", array.array("q", [int(v) for v in mine]), "int64"),
            ("2-D float32 memoryview",
             memoryview(array.array("f", mine)).cast("B").cast("f", (2, 4)), "float32"))
    for name, buf, dtype in fits:
        rt.allreduce(buf, dtype)
        got = list(memoryview(buf).cast("B").cast(memoryview(buf).format[-1]))
        check(rt, got == want, "%s as %s: the sum is right" % (name, dtype), got)


def numpy_buffers(rt):
    import numpy
    mine = numpy.arange(8, dtype=numpy.float64) + rt.rank + 1
    refused(rt, "a float64 numpy array reduced as float32", lambda: rt.allreduce(mine, "float32"),
            "holds float64 elements (format 'd'), not float32", mine.tobytes(), mine.tobytes)
    view = numpy.arange(8, dtype=numpy.float32)[::2]
    refused(rt, "a strided numpy view", lambda: rt.allreduce(view, "float32"), "is not contiguous",
            view.tobytes(), view.tobytes)
    half = numpy.full(8, rt.rank + 1, dtype=numpy.float16)
    rt.allreduce(half, "float16")
    check(rt, list(half) == [rt.size * (rt.size + 1) / 2] * 8,
          "a float16 numpy array: the sum is right", list(half))


class Bucket:
    """What a comm hook reads of DDP's GradBucket (it has no Python
    constructor): the flat tensor to reduce."""

    def __init__(self, tensor):
        self._tensor = tensor

    def buffer(self):
        return self._tensor


def tensors(rt):
    import torch
    import ddp_topo.torch as dt

    def base():
        return torch.arange(8, dtype=torch.float32) * (rt.rank + 1)
    mean = torch.arange(8, dtype=torch.float32) * (rt.size + 1) / 2.0  # base() over the ranks
    hooks = (("allreduce_hook", dt.allreduce_hook),
             ("async_allreduce_hook", dt.async_allreduce_hook),
             ("bf16_compress_hook", dt.bf16_compress_hook))
    views = (("base[::2]", lambda b: b[::2]), ("a transposed 2x4", lambda b: b.view(2, 4).t()))
    for hname, hook in hooks:
        for vname, pick in views:
            b = base()
            before = b.clone()
            view = pick(b)
            fut = hook(rt, Bucket(view))
            name = "%s on %s of arange(8)" % (hname, vname)
            if hname == "bf16_compress_hook":  # reduces a contiguous copy: right
                fut.wait()
                want = mean
                inside = torch.zeros(8, dtype=torch.bool)
                pick(inside).fill_(True)
                good = (torch.allclose(b[inside], want[inside], rtol=1e-2) and
                        torch.equal(b[~inside], before[~inside]))
                check(rt, good, name + ": the view is averaged, base's other elements unchanged",
                      b.tolist())
                continue
            try:
                fut.wait()
                msg = "no exception"
            except RuntimeError as e:
                msg = str(e)
            check(rt, "cannot reduce a non-contiguous tensor" in msg,
                  name + ": the Future fails, saying the tensor is not contiguous", msg[:200])
            check(rt, torch.equal(b, before), name + ": base is unchanged", b.tolist())
        b = base()
        before = b.clone()
        hook(rt, Bucket(b[2:6])).wait()  # contiguous, at an offset: reduced right
        want = before.clone()
        want[2:6] = mean[2:6]
        good = (torch.allclose(b, want, rtol=1e-2) and torch.equal(b[:2], before[:2]) and
                torch.equal(b[6:], before[6:]))
        check(rt, good, "%s on base[2:6]: averaged, the rest unchanged" % hname, b.tolist())


def main():
    with ddp_topo.Runtime() as rt:
        buffers(rt)
        if not os.environ.get("DDP_TOPO_NO_TORCH"):
            numpy_buffers(rt)
            tensors(rt)
        rt.barrier()


main()
