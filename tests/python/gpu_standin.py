# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run with the CUDA/NCCL stand-in (gpu-standin.test):
ddp_topo.Runtime's device-pointer path (gpu_attach, gpu_allreduce) through
its ctypes layer, on device memory the stand-in's cudaMalloc returned, on
the legacy stream and on a stream of its own, and a negative count refused
before anything reaches NCCL. One line per rank: "ok ..."
or "not ok ... (saw ...)"."""

import array
import ctypes
import os

import ddp_topo


def say(line):
    os.write(1, (line + "\n").encode())


def main():
    rt = ddp_topo.Runtime()
    device = rt.gpu_attach()
    cuda = ctypes.CDLL(os.environ["DDPRT_CUDART_LIBRARY"])  # the copy libddprt loaded
    n = 1001
    dev = ctypes.c_void_p()
    stream = ctypes.c_void_p()
    assert cuda.cudaMalloc(ctypes.byref(dev), n * 4) == 0
    assert cuda.cudaStreamCreateWithFlags(ctypes.byref(stream), 0) == 0  # blocking: cudaMemcpy waits
    host = array.array("f", [float(rt.rank + 1 + i % 5) for i in range(n)])
    addr, _ = host.buffer_info()
    want = [sum(float(r + 1 + i % 5) for r in range(rt.size)) for i in range(n)]
    bad = []
    try:  # before it was checked, ctypes made -1 a count of 2**64 - 1 elements
        rt.gpu_allreduce(dev.value, -1, "float32")
        bad.append("count -1: no exception")
    except ValueError as e:
        if "count -1 is not a number of elements" not in str(e):
            bad.append("count -1: %s" % e)
    for name, s in (("legacy stream", None), ("own stream", stream.value)):
        assert cuda.cudaMemcpy(dev, ctypes.c_void_p(addr), n * 4, 1) == 0  # host to device
        rt.gpu_allreduce(dev.value, n, "float32", "sum", s)
        out = array.array("f", [0.0] * n)
        assert cuda.cudaMemcpy(ctypes.c_void_p(out.buffer_info()[0]), dev, n * 4, 2) == 0
        if list(out) != want:
            bad.append("%s: %s..." % (name, list(out)[:3]))
    cuda.cudaStreamDestroy(stream)
    cuda.cudaFree(dev)
    rt.close()
    if bad:
        say("not ok rank %d device %d (saw %s, want %s...)" % (rt.rank, device, bad, want[:3]))
    else:
        say("ok rank %d: device %d, %d sums on both streams" % (rt.rank, device, n))


main()
