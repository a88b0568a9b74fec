# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run: ddp_topo.Runtime's collectives on plain Python buffers
(no numpy), in each dtype, checked against the sum computed here. Prints
one TAP-ish line per check from rank 0 ("ok ..." / "not ok ..."), and
"ranks agree" lines that every rank prints."""

import array
import ctypes
import os
import struct

import ddp_topo

# dtype: (struct format, value of rank r at index i), values exact in every type
FORMATS = {"float32": "f", "float64": "d", "float16": "e", "int32": "i", "int64": "q"}


def say(line):
    """One line in one write(2): ranks share ddp-run's stdout, and with
    PYTHONUNBUFFERED print() writes the newline separately."""
    os.write(1, (line + "\n").encode())


def value(r, i):
    return float(r + 1) * 0.5 + (i % 7)


def expected(size, i, op):
    vals = [float(r + 1) * 0.5 + (i % 7) for r in range(size)]
    return {"sum": sum(vals), "max": max(vals), "min": min(vals), "avg": sum(vals) / size}[op]


def check(rt, name, got, want):
    good = all(abs(g - w) <= 1e-6 * max(1.0, abs(w)) for g, w in zip(got, want))
    if rt.rank == 0:
        say("%s %s" % ("ok" if good and len(got) == len(want) else "not ok", name))
        if not good:
            say("#   got %s want %s" % (list(got)[:8], list(want)[:8]))
    return good


def make(rt, n, integer):
    vals = [value(rt.rank, i) for i in range(n)]
    return [int(v * 2) for v in vals] if integer else vals


def run_dtype(rt, dtype, fmt, n=1000):
    integer = dtype.startswith("int")
    scale = 2 if integer else 1
    for op in ("sum", "max", "min"):
        want = [expected(rt.size, i, op) * scale for i in range(n)]
        buf = bytearray(struct.pack("<%d%s" % (n, fmt), *make(rt, n, integer)))
        rt.allreduce(buf, dtype, op)
        check(rt, "bytearray %s %s" % (dtype, op), struct.unpack("<%d%s" % (n, fmt), buf), want)
    want = [expected(rt.size, i, "sum") * scale for i in range(n)]
    if fmt != "e":  # array.array has no float16
        arr = array.array(fmt, make(rt, n, integer))
        rt.allreduce(arr, dtype)
        check(rt, "array.array %s sum" % dtype, arr, want)
    ctype = {"f": ctypes.c_float, "d": ctypes.c_double, "i": ctypes.c_int32,
             "q": ctypes.c_int64, "e": ctypes.c_uint16}[fmt]
    raw = struct.pack("<%d%s" % (n, fmt), *make(rt, n, integer))
    carr = (ctype * n).from_buffer_copy(raw)
    rt.allreduce(ctypes.cast(carr, ctypes.POINTER(ctype)), dtype, count=n)
    check(rt, "ctypes pointer+count %s sum" % dtype,
          struct.unpack("<%d%s" % (n, fmt), bytes(carr)), want)
    buf = bytearray(raw)
    req = rt.iallreduce(buf, dtype)
    req.wait()
    check(rt, "iallreduce %s sum" % dtype, struct.unpack("<%d%s" % (n, fmt), buf), want)


def bf16(x):  # float32's upper half: exact for these small values
    return struct.unpack("<H", struct.pack("<f", x)[2:])[0]


def run_bf16(rt, n=1000):
    buf = bytearray(struct.pack("<%dH" % n, *(bf16(value(rt.rank, i)) for i in range(n))))
    req = rt.iallreduce(buf, "bfloat16")
    while not req.test():
        pass
    got = [struct.unpack("<f", b"\0\0" + buf[2 * i:2 * i + 2])[0] for i in range(n)]
    check(rt, "bytearray bfloat16 sum (iallreduce + test)", got,
          [expected(rt.size, i, "sum") for i in range(n)])


def errors(rt):
    for call, want in ((lambda: rt.allreduce(bytearray(8), "float8"), "dtype 'float8' is not one of"),
                       (lambda: rt.allreduce(bytes(8), "float32"), "is read-only"),
                       (lambda: rt.allreduce(bytearray(6), "float32"), "not a whole number of 4-byte"),
                       (lambda: rt.allreduce(bytearray(8), "float32", op="prod"), "op 'prod' is not one of"),
                       (lambda: rt.allreduce(ctypes.c_void_p(0), "float32"), "needs count")):
        try:
            call()
            msg = "no exception"
        except ValueError as e:
            msg = str(e)
        if rt.rank == 0:
            say("%s bad argument: %s" % ("ok" if want in msg else "not ok", want))
            if want not in msg:
                say("#   got: " + msg)


def lifetimes(rt):
    """A Request dropped unwaited waits when collected; close() waits for the
    ones still held. Returns (buffer, request) for the second."""
    want = [float(x * rt.size) for x in (1, 2, 3, 4)]
    buf = bytearray(struct.pack("<4f", 1, 2, 3, 4))
    req = rt.iallreduce(buf, "float32")
    del req
    check(rt, "a Request dropped unwaited: the buffer holds the result", struct.unpack("<4f", buf), want)
    held = bytearray(struct.pack("<4f", 1, 2, 3, 4))
    return held, rt.iallreduce(held, "float32"), want


def main():
    with ddp_topo.Runtime() as rt:
        p = ddp_topo.plan()
        say("rank %d: Runtime rank %d size %d local %d node %d/%d; plan rank %d world %d "
              "local %d/%d node %d/%d" % (p.rank, rt.rank, rt.size, rt.local_rank, rt.node_rank,
                                          rt.node_count, p.rank, p.world_size, p.local_rank,
                                          p.local_world_size, p.node_rank, p.node_count))
        for dtype, fmt in FORMATS.items():
            run_dtype(rt, dtype, fmt)
        run_bf16(rt)
        errors(rt)
        rt.barrier()
        held, pending, want = lifetimes(rt)
    check(rt, "close() waits for a Request in flight", struct.unpack("<4f", held) if pending.test() else [], want)
    try:
        rt.barrier()
        say("not ok barrier after close raised nothing")
    except ddp_topo.RuntimeFailure as e:
        if p.rank == 0:
            say("ok after close: %s" % e)


main()
