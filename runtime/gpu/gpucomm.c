/* SPDX-License-Identifier: Apache-2.0 */
/* The world, node and rail NCCL communicators of a rank, and the
 * collective set over them (backend.h).
 *
 * They are made once, on drt_gpu_attach (or the first GPU collective),
 * non-blocking (config.blocking = 0), so every wait polls under
 * DDPRT_TIMEOUT. Their unique ids travel over the runtime's own CPU groups:
 * the world's from rank 0, a node's from its local rank 0, a rail's from
 * node 0; nothing needs a world-wide exchange beyond the bootstrap's. Every
 * rank agrees after each step, so one rank's failure (no GPU, an init that
 * failed at once or later) fails every rank at once, not at the timeout.
 * A warm-up allreduce on each communicator ends the attach: NCCL connects
 * a communicator's peers at its first collective, and the first training
 * step should not pay for it. */
#include "config.h"

#include "gpu.h"

#ifdef CUDALOAD_HEADERS
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PIPE_MIN_GPU (4u << 20) /* NCCL saturates links from a few MiB on */

typedef struct {
    int32_t ok;
    ncclUniqueId id;
} id_msg_t;

static group_t *cpu_group(drt_comm_t *c, int i)
{
    return i == GPU_WORLD ? c->cpu.world : i == GPU_NODE ? c->cpu.node : c->cpu.rail;
}

/* Every rank agrees before each NCCL step: one rank without a GPU, or whose
 * init failed, must not leave the others waiting for it until the timeout. */
static int agree_ready(drt_comm_t *c, int mine, const char *what, drt_error_t *err)
{
    double worst = mine < 0 ? c->rank + 1 : 0;
    drt_error_t e;

    if (drt_allreduce(c, &worst, &worst, 1, DRT_FLOAT64, DRT_MAX, &e) < 0)
        return mine < 0 ? -1 : rt_fail(err, "%s", e.text);
    if (mine < 0)
        return -1;
    if (worst > 0)
        return rt_fail(err, "ddprt: rank %d could not %s (its own error says why)",
                       (int)worst - 1, what);
    return 0;
}

/* Each group's id from its position 0 over the CPU group. Every rank takes
 * part in all three, even when an id failed, so nobody is left waiting. */
static int comm_ids(struct gpu *g, id_msg_t m[GPU_GROUPS], drt_error_t *err)
{
    for (int i = 0; i < GPU_GROUPS; i++) {
        group_t *cg = cpu_group(g->c, i);
        m[i] = (id_msg_t){0};
        if (cg->me == 0)
            m[i].ok = g->api->ncclGetUniqueId(&m[i].id) == ncclSuccess;
        if (cg->ops->broadcast(&g->c->cpu, cg, &m[i], sizeof(m[i]), 0, err) < 0)
            return -1;
    }
    return 0;
}

/* the non-blocking inits (comms_ready polls them) */
static int comm_start(struct gpu *g, const id_msg_t m[GPU_GROUPS], drt_error_t *err)
{
    static const char *const names[] = {"ddprt world", "ddprt node", "ddprt rail"};

    for (int i = 0; i < GPU_GROUPS; i++) {
        group_t *cg = cpu_group(g->c, i);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        ncclResult_t rc;
        if (g->ng[i].comm) /* the world, shrunk in place (adopt) */
            continue;
        if (!m[i].ok)
            return rt_fail(err, "ddprt: rank %d could not make the NCCL %s communicator's id "
                           "(ncclGetUniqueId failed there)", cg->ranks[0], g->ng[i].name);
        cfg.blocking = 0;
        cfg.commName = names[i];
        rc = g->api->ncclCommInitRankConfig(&g->ng[i].comm, cg->n, m[i].id, cg->me, &cfg);
        if (rc != ncclSuccess && rc != ncclInProgress)
            return rt_fail(err, "ddprt: NCCL %s communicator (%d ranks): init failed: %s: %s",
                           g->ng[i].name, cg->n, g->api->ncclGetErrorString(rc),
                           g->api->ncclGetLastError(g->ng[i].comm));
    }
    return 0;
}

/* one communicator's init: 1 done, 0 still in progress, -1 failed */
static int comm_state(struct gpu *g, int i, drt_error_t *err)
{
    nccl_group_t *ng = &g->ng[i];
    ncclResult_t rc = ncclInternalError;

    g->api->ncclCommGetAsyncError(ng->comm, &rc);
    if (rc == ncclSuccess || rc == ncclInProgress)
        return rc == ncclSuccess;
    /* the peers' inits wait for this rank's forever: tell them now */
    notice_send_kind(g->c, g->c->rank, NOTICE_GPU_INIT, g->c->seq);
    return rt_fail(err, "ddprt: NCCL %s communicator (%d ranks): init failed: %s: %s",
                   ng->name, g->groups[i].n, g->api->ncclGetErrorString(rc),
                   g->api->ncclGetLastError(ng->comm));
}

/* every communicator initialised, polled under DDPRT_TIMEOUT, or a peer's
 * notice that its init failed */
static int comms_ready(struct gpu *g, double deadline, drt_error_t *err)
{
    for (int i = 0, spins = 0, st; i < GPU_GROUPS; spins++) {
        if ((st = comm_state(g, i, err)) < 0)
            return -1;
        if (st) {
            i++;
            continue;
        }
        if (spins % 64 == 0 && notice_check(g->c, ~0u, err) < 0)
            return -1;
        if (rt_now() > deadline)
            return rt_fail(err, "ddprt: NCCL %s communicator (%d ranks, from rank %d) not ready "
                           "after DDPRT_TIMEOUT=%gs: a rank of it did not call drt_gpu_attach "
                           "or cannot reach the others (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO)",
                           g->ng[i].name, g->groups[i].n, g->groups[i].ranks[0],
                           g->c->timeout);
        gpu_idle((unsigned)spins);
    }
    return 0;
}

/* one float summed on each communicator, in the same order on every rank,
 * on the side lane's stream (made here), waited for (polled). The float
 * stays until finalize: a stream-ordered free behind a collective that
 * failed would be one more call on a stream NCCL may still hold. */
static int warm_up(struct gpu *g, drt_error_t *err)
{
    const cuda_api_t *a = g->api;

    if ((!g->side && a->cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking) != cudaSuccess) ||
        a->cudaMalloc((void **)&g->warm, sizeof(float)) != cudaSuccess ||
        a->cudaMemsetAsync(g->warm, 0, sizeof(float), g->side) != cudaSuccess)
        return rt_fail(err, "ddprt: CUDA device %d: cannot set up the NCCL warm-up", g->device);
    for (int i = 0; i < GPU_GROUPS; i++) {
        nccl_group_t *ng = &g->ng[i];
        if (nccl_begin(g, ng, err) < 0 ||
            nccl_settle(g, ng,
                        a->ncclAllReduce(g->warm, g->warm, 1, ncclFloat32, ncclSum, ng->comm,
                                         g->side),
                        "warm-up allreduce", err) < 0)
            return -1;
    }
    if (a->cudaEventRecord(g->fork, g->side) != cudaSuccess)
        return rt_fail(err, "ddprt: CUDA device %d: cudaEventRecord failed", g->device);
    return gpu_wait_event(g, g->fork, "the NCCL warm-up allreduces", err);
}

/* NCCL_LAUNCH_ORDER_IMPLICIT=1 as the process started: a copy of NCCL
 * loaded before ddprt may have read it any time since */
static int started_with_order(void)
{
    static const char want[] = "NCCL_LAUNCH_ORDER_IMPLICIT=";
    char buf[1 << 16];
    ssize_t n;
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC), found = 0;

    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1); /* bounded: a huge environment counts as no */
    close(fd);
    for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(buf + i) + 1) {
        buf[n] = 0;
        if (!strncmp(buf + i, want, sizeof(want) - 1))
            found = atoi(buf + i + sizeof(want) - 1) != 0;
    }
    return found;
}

/* Whether NCCL runs with one launch order across communicators, which the
 * pipelined hier's two streams need (without it they can deadlock). NCCL
 * reads the variable once: ours (gpudev.c) was set before we loaded it. */
static int order_in_effect(struct gpu *g, const char **why)
{
    const char *v = getenv("NCCL_LAUNCH_ORDER_IMPLICIT");

    *why = NULL;
    if (g->api->nccl_version < 22600)
        *why = "NCCL is older than 2.26";
    else if (!v || !atoi(v))
        *why = "NCCL_LAUNCH_ORDER_IMPLICIT is set to 0";
    else if (g->api->nccl_reused && !started_with_order())
        *why = "NCCL was loaded before ddprt (by PyTorch?) and the process did not start with "
               "NCCL_LAUNCH_ORDER_IMPLICIT=1 (set it in the job's environment)";
    return *why == NULL;
}

static void set_init(struct gpu *g)
{
    drt_comm_t *c = g->c;
    const group_t *cpu[GPU_GROUPS] = {c->cpu.world, c->cpu.node, c->cpu.rail};
    const char *why;

    for (int i = 0; i < GPU_GROUPS; i++)
        g->groups[i] = (group_t){.n = cpu[i]->n, .me = cpu[i]->me, .ranks = cpu[i]->ranks,
                                 .ops = &nccl_group_ops, .impl = &g->ng[i]};
    if (g->rail_host)
        g->groups[GPU_RAIL].ops = &staged_rail_ops;
    if (!(g->pipelined = order_in_effect(g, &why)))
        rt_log(c, "GPU: hier runs unpipelined: %s", why);
#ifdef CUDALOAD_SHRINK
    {
        const char *v = getenv("DDPRT_GPU_SHRINK");
        g->can_shrink = g->api->ncclCommShrink && !(v && !strcmp(v, "0"));
    }
#endif
    g->set = (coll_set_t){.c = c, .world = &g->groups[GPU_WORLD], .node = &g->groups[GPU_NODE],
                          .rail = &g->groups[GPU_RAIL], .ops = &nccl_set_ops,
                          .uniform = c->uniform, .nnodes = c->nnodes, .equal_chunks = 1,
                          .pipe_min = g->pipelined ? PIPE_MIN_GPU : 0, .impl = g};
    for (int i = 0; i < 64; i++)
        g->set.sizes[i].choice = -1;
}

void gpu_child_drop(drt_comm_t *c)
{
    const cuda_api_t *a;

    if (!c->gpu_child) /* and never load the libraries into a CPU-only run */
        return;
    if ((a = cudaload(NULL)))
        a->ncclCommAbort((ncclComm_t)c->gpu_child);
    c->gpu_child = NULL;
}

/* drt_shrink's world communicator, taken when every rank has one (else
 * each would wait for the others' shrink); otherwise made again from an id
 * like the node and rail ones. Every rank takes part. */
static int adopt(struct gpu *g, drt_error_t *err)
{
    drt_comm_t *c = g->c;
    double have = c->gpu_child ? 1 : 0;

    if (drt_allreduce(c, &have, &have, 1, DRT_FLOAT64, DRT_MIN, err) < 0)
        return -1;
    if (have == 1) {
        g->ng[GPU_WORLD].comm = (ncclComm_t)c->gpu_child;
        c->gpu_child = NULL;
        rt_log(c, "GPU: the world communicator was shrunk in place (ncclCommShrink)");
    } else if (c->gpu_child) {
        rt_log(c, "GPU: a rank could not shrink the world communicator: made again");
        gpu_child_drop(c);
    }
    return 0;
}

void gpu_comms_shrink(struct gpu *g, int *excl, int nexcl)
{
    char why[240];

    if (!g->can_shrink || nexcl == 0) {
        gpu_teardown_wait(g, 0);
        return;
    }
    if (!(g->c->gpu_child = gpu_teardown_shrink(g, excl, nexcl, why, sizeof(why))))
        rt_log(g->c, "GPU: ncclCommShrink: %s (the world communicator is made again)", why);
}

/* mine: this rank's setup so far (gpu_local_setup's result) */
int gpu_comms_attach(struct gpu *g, int mine, drt_error_t *err)
{
    drt_comm_t *c = g->c;
    id_msg_t ids[GPU_GROUPS];

    if (agree_ready(c, mine, "use its GPU, so no NCCL communicator was made", err) < 0)
        return -1;
    set_init(g);
    if (adopt(g, err) < 0 || comm_ids(g, ids, err) < 0)
        return -1;
    if ((mine = comm_start(g, ids, err)) < 0) /* the peers' inits would wait for it */
        notice_send_kind(c, c->rank, NOTICE_GPU_INIT, c->seq);
    if (mine == 0)
        mine = comms_ready(g, rt_now() + c->timeout, err);
    /* before the warm-up: its first collective would wait for a rank whose
     * init failed */
    if (agree_ready(c, mine, "start its NCCL communicators", err) < 0)
        return -1;
    return agree_ready(c, warm_up(g, err), "warm up its NCCL communicators", err);
}
#endif
