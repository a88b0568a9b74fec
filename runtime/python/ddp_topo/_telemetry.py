# SPDX-License-Identifier: Apache-2.0
"""What the DDP hooks' communication costs, per step, without the training
script measuring anything: ddp-train's telemetry for ddp_topo.torch.

The hooks tell it when each bucket was handed over and when its allreduce
was done; a step ends when its last bucket (GradBucket.is_last()) is done.
Per step: comm (the buckets' allreduces, end to end: the runtime runs them
one after another), exposed (from the last bucket's hand-over, when
backward has computed every gradient, to its allreduce done: what backward
did not hide; with the blocking hook every bucket's whole allreduce), step
(from the previous step's end), compute (step minus exposed: forward,
backward, the optimizer, data loading), bytes, and the algorithm the
step's last bucket ran. Every `every` steps the ranks sum one small vector
(each its mean compute in its own slot), started before the last bucket's
Future completes, so every rank issues it at the same point; once done,
rank 0 prints ddp-train's line (without the loss, which the hooks never
see) and, with a metrics file, writes it as a JSON line. The slowest rank
is the one with the longest compute, named when it lags the fastest by at
least straggler_ms."""

import ctypes
import json
import os
import stat
import threading
import time


def _open_metrics(path):
    """path for writing, as ddp-train's --metrics: a new or regular file,
    emptied; a final symbolic link, a FIFO (which would block until read), a
    device or a directory is refused, naming it."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise ValueError("ddp-topo: telemetry metrics file %r: not a regular file (give a "
                             "new or regular file)" % (path,))
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise ValueError("ddp-topo: telemetry metrics file %r: %s (give a new or regular file)"
                         % (path, e.strerror)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("ddp-topo: telemetry metrics file %r: not a regular file (give a new "
                         "or regular file)" % (path,))
    os.ftruncate(fd, 0)
    return os.fdopen(fd, "w", encoding="utf-8")


def _busbw(size, nbytes, secs):
    """Bus bandwidth in GB/s as nccl-tests (and ddp-train) define it."""
    return 2.0 * (size - 1) / size * nbytes / secs / 1e9 if size > 1 and secs > 0 else 0.0


class Telemetry:
    """One per Runtime; the hooks call handed() and done(). Threads: DDP's
    autograd thread calls handed(), and done() for blocking hooks; the
    Runtime's waiter thread calls done() for async ones and _report(). All
    of the state is under one lock; the line is printed outside it."""

    def __init__(self, rt, every, metrics=None, straggler_ms=10.0, out=None):
        if not isinstance(every, int) or every < 1:
            raise ValueError("ddp-topo: telemetry every %r: expected a whole number of steps, 1 "
                             "or more" % (every,))
        self.rt, self.every, self.straggler_ms = rt, every, straggler_ms
        self._out = out or (lambda line: os.write(1, (line + "\n").encode()))
        self._file = None
        if metrics and rt.rank == 0:
            self._file = _open_metrics(metrics)  # a run starts it over
        self._lock = threading.Lock()  # the hooks' thread and the waiter's
        self.steps = 0
        self._t_end = None  # the previous step's end
        self._step = self._new_step()
        self._win = self._new_window()

    @staticmethod
    def _new_step():
        return {"pending": 0, "last": False, "t_first": None, "t_last": 0.0, "prev_done": 0.0,
                "comm": 0.0, "blocked": 0.0, "bytes": 0, "buckets": 0}

    @staticmethod
    def _new_window():
        return {"steps": 0, "step": 0.0, "compute": 0.0, "comm": 0.0, "exposed": 0.0,
                "bytes": 0, "buckets": 0, "algo": None}

    def handed(self, nbytes, last):
        """A bucket's allreduce starts (or, blocking, is about to run)."""
        now = time.monotonic()
        with self._lock:
            s = self._step
            if s["t_first"] is None:
                s["t_first"] = now
            s["pending"] += 1
            s["bytes"] += nbytes
            s["buckets"] += 1
            s["last"] = s["last"] or last
            s["t_last"] = now
        return now

    def done(self, t_handed, blocking=False):
        """That bucket's allreduce is done (blocking: backward waited for all
        of it); at the step's last, the step is counted (and every `every`
        steps the window's vector started)."""
        now = time.monotonic()
        with self._lock:
            s = self._step
            if blocking:
                s["blocked"] += now - t_handed
            s["comm"] += now - max(t_handed, s["prev_done"])
            s["prev_done"] = now
            s["pending"] -= 1
            if not (s["last"] and s["pending"] == 0):
                return
            self._end_step(s, now)
            if self.steps % self.every:
                return
            win, self._win = self._win, self._new_window()
        self._exchange(win)

    def failed(self):
        """A bucket's allreduce failed: the step is not counted, and the next
        starts clean (after a shrink, say)."""
        with self._lock:
            self._step = self._new_step()
            self._t_end = None

    def _end_step(self, s, now):
        # the buckets' algorithm, read now: once the window's vector is
        # issued, the last allreduce is that small one (auto: often flat)
        self._win["algo"] = self.rt.last_algo()
        start = self._t_end if self._t_end is not None else s["t_first"]
        step = now - start
        exposed = max(s["blocked"], now - s["t_last"])
        w = self._win
        w["steps"] += 1
        w["step"] += step
        w["exposed"] += exposed
        w["compute"] += max(step - exposed, 0.0)
        w["comm"] += s["comm"]
        w["bytes"] += s["bytes"]
        w["buckets"] += s["buckets"]
        self.steps += 1
        self._t_end = now
        self._step = self._new_step()

    def _exchange(self, win):
        n = self.rt.size
        vec = (ctypes.c_double * n)()
        vec[self.rt.rank] = win["compute"] / win["steps"]
        req = self.rt.iallreduce(vec, "float64")
        self.rt.when_done(req, lambda error: self._report(win, vec, error))

    def _report(self, win, vec, error):
        """rank 0's line and JSON line for the window (on the waiter thread)."""
        if error is not None or self.rt.rank != 0:
            return
        k, algo = win["steps"], win["algo"]
        means = list(vec)
        slow = max(range(len(means)), key=lambda r: means[r])
        lag = (means[slow] - min(means)) * 1e3
        if len(means) < 2 or lag < self.straggler_ms:
            slow, lag = -1, 0.0
        rec = {"step": self.steps, "step_ms": win["step"] / k * 1e3,
               "compute_ms": win["compute"] / k * 1e3, "comm_ms": win["comm"] / k * 1e3,
               "exposed_ms": win["exposed"] / k * 1e3,
               "busbw_gbs": _busbw(self.rt.size, win["bytes"], win["comm"]),
               "buckets": round(win["buckets"] / k), "slowest_rank": slow, "slowest_lag_ms": lag,
               "algo": algo}
        line = ("step %d step %.2f ms compute %.2f ms comm %.2f ms exposed %.2f ms busbw %.3f "
                "GB/s algo %s" % (rec["step"], rec["step_ms"], rec["compute_ms"], rec["comm_ms"],
                                  rec["exposed_ms"], rec["busbw_gbs"], algo))
        if slow >= 0:
            line += " slowest rank %d (node %d) lag %.1f ms" % (slow, self.rt.node_of(slow), lag)
        else:
            line += " slowest none"
        self._out(line)
        if self._file:
            self._file.write(json.dumps(rec) + "\n")
            self._file.flush()

    def close(self):
        if self._file:
            self._file.close()
            self._file = None
