# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run: one ddp_topo.Runtime used from several threads.

    threads_check.py concurrent            2 threads reduce at once, 3 ways; a
                                           when_done callback that raises
    threads_check.py close DIR             close() while another thread is in allreduce
    threads_check.py close-async DIR       close() while requests are in flight: one
                                           waited in another thread, one given to
                                           when_done, one only held

Every rank prints "ok rank R: ..." / "not ok rank R: ... (saw ...)" lines.
The buffers hold rank + 1 everywhere, so a sum is right whichever thread's
call a peer pairs it with (the ranks agree on the order of calls, not on
which thread made them). In the close modes rank 0 closes while its call
is in flight: the other ranks join that call only once rank 0 has started
to close (DIR/closing), so the call is still running when close() begins."""

import array
import linecache
import os
import sys
import threading
import time

import ddp_topo

N = 1 << 16          # elements per buffer in the concurrent mode
BIG = 1 << 20        # and in the close modes
ITERS = 30
PATIENCE = 120.0     # seconds any wait below may take on a loaded machine


def say(line):
    os.write(1, (line + "\n").encode())


def check(rt, good, name, seen=""):
    say("%s rank %d: %s%s" % ("ok" if good else "not ok", rt.rank, name,
                              "" if good else " (saw %s)" % (seen,)))
    return good


def filled(rt, n):
    return array.array("f", [rt.rank + 1.0]) * n


def summed(rt, n):
    return array.array("f", [rt.size * (rt.size + 1) / 2.0]) * n


def first_wrong(buf, want):
    """'' when buf == want, else the first differing element."""
    if buf == want:
        return ""
    i = next(i for i in range(len(want)) if buf[i] != want[i])
    return "%r vs %r at %d" % (buf[i], want[i], i)


def poll(cond, what):
    """Wait for cond() (an event in another thread or process), bounded."""
    deadline = time.monotonic() + PATIENCE
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("threads_check: gave up waiting for %s after %.0f s"
                             % (what, PATIENCE))
        time.sleep(0.01)


def in_c_call(thread, needle):
    """True while thread's innermost Python line is the one calling the C
    function named by needle (a ctypes call pushes no frame of its own)."""
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and needle in linecache.getline(frame.f_code.co_filename,
                                                              frame.f_lineno)


def concurrent(rt):
    ways = {"blocking": lambda buf: rt.allreduce(buf, "float32"),
            "async": lambda buf: rt.iallreduce(buf, "float32").wait()}
    want = summed(rt, N)
    for pair in (("blocking", "blocking"), ("blocking", "async"), ("async", "async")):
        seen = []

        def worker(t, way):
            for i in range(ITERS):
                buf = filled(rt, N)
                try:
                    ways[way](buf)
                except ddp_topo.RuntimeFailure as e:
                    seen.append("thread %d iter %d raised: %s" % (t, i, e))
                    return
                wrong = first_wrong(buf, want)
                if wrong:
                    seen.append("thread %d iter %d wrong: %s" % (t, i, wrong))
        threads = [threading.Thread(target=worker, args=(t, way)) for t, way in enumerate(pair)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(rt, not seen, "2 threads, %s + %s, %d calls each: every sum is %g"
              % (pair[0], pair[1], ITERS, want[0]), seen[:3])
    callbacks_go_on(rt)
    rt.close()


def callbacks_go_on(rt):
    """A when_done callback that raises is reported (stderr) and the
    waiter thread goes on to the next one."""
    second = threading.Event()

    def broken(error):
        raise ValueError("threads_check: a callback that raises (expected)")
    rt.when_done(rt.iallreduce(filled(rt, 4), "float32"), broken)
    rt.when_done(rt.iallreduce(filled(rt, 4), "float32"), lambda error: second.set())
    check(rt, second.wait(PATIENCE), "after a when_done callback raised, the next one still ran",
          "no call within %.0f s" % PATIENCE)


def closed_calls(rt):
    """After close(): every call raises RuntimeFailure saying it is closed."""
    calls = {"allreduce": lambda: rt.allreduce(bytearray(4), "float32"),
             "iallreduce": lambda: rt.iallreduce(bytearray(4), "float32"),
             "barrier": rt.barrier, "gpu_attach": rt.gpu_attach,
             "when_done": lambda: rt.when_done(None, print)}
    for name, call in calls.items():
        try:
            call()
            msg = "no exception"
        except ddp_topo.RuntimeFailure as e:
            msg = str(e)
        want = "ddp-topo: %s: this Runtime is closed (create a new one)" % name
        check(rt, msg == want, "after close, %s raises %r" % (name, want), msg)
    rt.close()
    check(rt, True, "a second close() returns at once")


def rendezvous(rt, signal):
    """Ranks other than 0 wait until rank 0 has started to close."""
    if rt.rank:
        poll(lambda: os.path.exists(signal), signal)


def close_during_allreduce(rt, signal):
    buf, want, done = filled(rt, BIG), summed(rt, BIG), []

    def worker():
        rendezvous(rt, signal)
        try:
            rt.allreduce(buf, "float32")
            done.append(first_wrong(buf, want) or "right")
        except ddp_topo.RuntimeFailure as e:
            done.append("raised: %s" % e)
    t = threading.Thread(target=worker)
    t.start()
    if rt.rank == 0:
        poll(lambda: in_c_call(t, "drt_allreduce("), "the allreduce thread to be in drt_allreduce")
        open(signal, "w").close()
        rt.close()
        at_close = first_wrong(buf, want) or "right"  # the call's bytes are in by now
        check(rt, at_close == "right", "close() during another thread's allreduce waits for it: "
              "when it returns the sum is in", at_close)
    t.join()
    if rt.rank:
        check(rt, done == ["right"], "the allreduce rank 0 closed during: the sum is right", done)
        rt.close()
    closed_calls(rt)


def close_during_requests(rt, signal):
    want, seen = summed(rt, BIG), {}
    waited, given, held = filled(rt, BIG), filled(rt, BIG), filled(rt, BIG)

    def worker():
        rendezvous(rt, signal)
        req = rt.iallreduce(waited, "float32")
        try:
            req.wait()
            seen["waited"] = first_wrong(waited, want) or "right"
        except ddp_topo.RuntimeFailure as e:
            seen["waited"] = "raised: %s" % e
    t = threading.Thread(target=worker)
    t.start()
    if rt.rank == 0:
        poll(lambda: in_c_call(t, "drt_wait("), "the waiting thread to be in drt_wait")
    else:
        t.join()  # the same order of calls as rank 0: waited, given, held
    def given_done(error):
        seen["given"] = error or first_wrong(given, want) or "right"
    rt.when_done(rt.iallreduce(given, "float32"), given_done)
    pending = rt.iallreduce(held, "float32")
    if rt.rank == 0:
        open(signal, "w").close()
    rt.close()
    # what close() waited for is complete when it returns
    seen["waited at close"] = first_wrong(waited, want) or "right"
    seen["held"] = first_wrong(held, want) or "right"
    t.join()
    check(rt, pending.test(), "a held Request is done after close()")
    for name in ("waited at close", "waited", "given", "held"):
        check(rt, seen.get(name) == "right", "close() with a request in flight (%s): it "
              "completes first, the sum is right" % name, seen.get(name, "nothing"))
    closed_calls(rt)


def main():
    mode = sys.argv[1]
    rt = ddp_topo.Runtime()
    if mode == "concurrent":
        concurrent(rt)
    elif mode == "close":
        close_during_allreduce(rt, os.path.join(sys.argv[2], "closing"))
    elif mode == "close-async":
        close_during_requests(rt, os.path.join(sys.argv[2], "closing"))
    else:
        raise SystemExit("threads_check: unknown mode %r" % mode)


main()
