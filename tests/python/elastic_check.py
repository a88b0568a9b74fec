# SPDX-License-Identifier: Apache-2.0
"""Run under ddp-run -k -n 3 --nodes 2: ddp_topo's elastic calls on the real
runtime. Rank 2 (node 1) SIGKILLs itself; ranks 0 and 1 see RankLost from a
request and from the runtime's queries, shrink to 2, reduce; then rank 1
dies and rank 0 shrinks again, to a world of one. Each survivor prints
"ok NAME" / "not ok NAME" lines, NAME starting with its first rank."""

import array
import os
import signal
import sys

import ddp_topo


def say(line):
    os.write(1, (line + "\n").encode())


class Checks:
    def __init__(self, rank):
        self.prefix, self.failed = "rank %d: " % rank, 0

    def __call__(self, name, got, want):
        good = got == want
        self.failed += not good
        say("%s %s%s" % ("ok" if good else "not ok", self.prefix, name))
        if not good:
            say("#   got %r want %r" % (got, want))


def lose(rt, check, doomed, what):
    """doomed SIGKILLs itself after a barrier; the others' next call raises
    RankLost naming it, which is returned."""
    rt.barrier()
    if rt.rank == doomed:
        os.kill(os.getpid(), signal.SIGKILL)
    buf = array.array("f", [1.0])
    try:
        if what == "request":
            rt.iallreduce(buf, "float32").wait()
        else:
            rt.allreduce(buf, "float32")
    except ddp_topo.RankLost as e:
        check("%s: RankLost is a RuntimeFailure" % what,
              isinstance(e, ddp_topo.RuntimeFailure), True)
        return e
    check("%s: RankLost raised" % what, "nothing", "RankLost")
    sys.exit(1)


def main():
    rt = ddp_topo.Runtime()
    check = Checks(rt.rank)
    check("node_name() is ddp-run's", rt.node_name(), "node" + os.environ["DDP_RUN_NODE"])
    check("node_name(2) is node1", rt.node_name(2), "node1")
    check("node_name(size): None", rt.node_name(rt.size), None)
    check("lost() before any loss", rt.lost(), ())

    e = lose(rt, check, 2, "request")
    check("RankLost.ranks and .nodes", (e.ranks, e.nodes), ((2,), ("node1",)))
    check("lost() after it", rt.lost(), (2,))
    old = rt.rank
    info = rt.shrink()
    want = ddp_topo.ShrinkInfo(3, 2, old, old, 2, 1, (2,), ("node1",), (0, 1), info.seconds)
    check("shrink: the ShrinkInfo", info, want)
    check("shrink: rank, size, nodes, lost()", (rt.rank, rt.size, rt.node_count, rt.lost()),
          (old, 2, 1, ()))
    buf = array.array("f", [rt.rank + 1.0])
    rt.allreduce(buf, "float32")
    check("allreduce over the 2 left", buf[0], 3.0)

    e = lose(rt, check, 1, "allreduce")
    check("second loss: RankLost names rank 1 (node0)", (e.ranks, e.nodes), ((1,), ("node0",)))
    info = rt.shrink()
    check("second shrink: a world of one", (info.old_size, info.new_size, info.old_rank_of,
                                            rt.rank, rt.size), (2, 1, (0,), 0, 1))
    buf = array.array("f", [5.0])
    rt.allreduce(buf, "float32")
    check("allreduce alone", buf[0], 5.0)
    rt.close()
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
