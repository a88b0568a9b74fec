/* SPDX-License-Identifier: Apache-2.0 */
/* GPU buffers over NCCL: the public drt_gpu_* calls (ddprt.h), the device,
 * the world/node/rail communicators, and the watchdog that keeps a stuck
 * or failed collective from hanging the job.
 *
 * Communicators are made once, on drt_gpu_attach (or the first GPU
 * collective), non-blocking (config.blocking = 0), so every wait polls
 * under DDPRT_TIMEOUT. Their unique ids travel over the runtime's own CPU
 * groups: the world's from rank 0, a node's from its local rank 0, a rail's
 * from node 0; nothing needs a world-wide exchange beyond the bootstrap's.
 *
 * Failure: the first error (an NCCL async error, DDPRT_TIMEOUT passing on
 * outstanding work, a peer's abort notice) is recorded, every communicator
 * is aborted on a helper thread bounded by DDPRT_TIMEOUT, and every later
 * GPU call returns that error: peers blocked in NCCL get theirs from their
 * own watchdog (their work stops completing) or from the notice. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "config.h"

#include "gpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_args(drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    if (!drt_dtype_size(t))
        return drt_fail(err, "ddprt: drt_gpu_allreduce: unknown data type %d", (int)t);
    if ((unsigned)op > DRT_MAX)
        return drt_fail(err, "ddprt: drt_gpu_allreduce: unknown operation %d", (int)op);
    return 0;
}

#ifndef CUDALOAD_HEADERS
/* Built without the headers: every call says so (cudaload's message). */
static int no_gpu(drt_error_t *err)
{
    cudaload(err);
    return -1;
}

int drt_gpu_attach(drt_comm_t *c, int device, drt_error_t *err)
{
    (void)c;
    (void)device;
    return no_gpu(err);
}

int drt_gpu_device(const drt_comm_t *c)
{
    (void)c;
    return -1;
}

void drt_gpu_set_algo(drt_comm_t *c, drt_algo_t algo)
{
    (void)c;
    (void)algo;
}

int drt_gpu_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                      drt_op_t op, void *stream, drt_error_t *err)
{
    (void)c, (void)send, (void)recv, (void)count, (void)stream;
    return check_args(t, op, err) < 0 ? -1 : no_gpu(err);
}

int drt_gpu_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, void *stream, drt_request_t **req,
                       drt_error_t *err)
{
    *req = NULL;
    return drt_gpu_allreduce(c, send, recv, count, t, op, stream, err);
}

int drt_gpu_sync(drt_comm_t *c, void *stream, drt_error_t *err)
{
    (void)c;
    (void)stream;
    return no_gpu(err);
}

int gpu_req_test(struct gpu_req *g, int *done, drt_error_t *err)
{
    (void)g;
    *done = 1;
    return no_gpu(err);
}

int gpu_req_wait(struct gpu_req *g, drt_error_t *err)
{
    (void)g;
    return no_gpu(err);
}

void gpu_finalize(drt_comm_t *c)
{
    (void)c;
}

int gpu_buf_alloc(drt_comm_t *c, size_t bytes, void **p, drt_error_t *err)
{
    (void)c, (void)bytes;
    *p = NULL;
    return no_gpu(err);
}

void gpu_buf_free(drt_comm_t *c, void *p)
{
    (void)c, (void)p;
}

int gpu_buf_copy(drt_comm_t *c, void *dst, const void *src, size_t bytes, void *stream,
                 drt_error_t *err)
{
    (void)c, (void)dst, (void)src, (void)bytes, (void)stream;
    return no_gpu(err);
}

int gpu_buf_zero(drt_comm_t *c, void *p, size_t bytes, void *stream, drt_error_t *err)
{
    (void)c, (void)p, (void)bytes, (void)stream;
    return no_gpu(err);
}

drt_algo_t gpu_last_algo(const drt_comm_t *c)
{
    (void)c;
    return DRT_ALGO_FLAT;
}
#else
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <time.h>

#define PIPE_MIN_GPU (4u << 20) /* NCCL saturates links from a few MiB on */
#define WATCHDOG_PERIOD 0.05    /* seconds: PyTorch's is 0.1 */

void gpu_idle(unsigned spins)
{
    struct timespec ts = {0, spins < 1000 ? 20000 : 500000};

    if (spins < 100)
        sched_yield();
    else
        nanosleep(&ts, NULL);
}

/* ---- failure: recorded once, communicators aborted under a deadline ---- */

int gpu_failed(struct gpu *g, drt_error_t *err)
{
    int failed;

    pthread_mutex_lock(&g->mu);
    failed = g->failed;
    if (failed && err)
        *err = g->failure;
    pthread_mutex_unlock(&g->mu);
    return failed ? -1 : 0;
}

/* ncclCommAbort (or, on a clean finalize, ncclCommDestroy) of every
 * communicator on a thread of its own: an abort can hang (NVIDIA/nccl#863),
 * and the caller must not. Whoever of the two finishes last frees it. */
typedef struct {
    const cuda_api_t *api;
    ncclComm_t comm[GPU_GROUPS];
    int destroy, done, refs;
    pthread_mutex_t m;
    pthread_cond_t cv;
} teardown_t;

static void teardown_put(teardown_t *t)
{
    int last;

    pthread_mutex_lock(&t->m);
    last = --t->refs == 0;
    pthread_mutex_unlock(&t->m);
    if (last) {
        pthread_mutex_destroy(&t->m);
        pthread_cond_destroy(&t->cv);
        free(t);
    }
}

static void *teardown_run(void *arg)
{
    teardown_t *t = arg;

    for (int i = 0; i < GPU_GROUPS; i++)
        if (t->comm[i])
            (t->destroy ? t->api->ncclCommDestroy : t->api->ncclCommAbort)(t->comm[i]);
    pthread_mutex_lock(&t->m);
    t->done = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->m);
    teardown_put(t);
    return NULL;
}

/* take the communicators away from every caller (issue held), then end them */
static void teardown(struct gpu *g, int destroy)
{
    ncclComm_t comm[GPU_GROUPS];
    teardown_t *t;
    struct timespec until;
    pthread_t th;
    int any = 0, done;

    pthread_mutex_lock(&g->issue);
    for (int i = 0; i < GPU_GROUPS; i++) {
        any |= (comm[i] = g->ng[i].comm) != NULL;
        g->ng[i].comm = NULL;
    }
    pthread_mutex_unlock(&g->issue);
    if (!any)
        return;
    if (!(t = calloc(1, sizeof(*t)))) {
        drt_warn(g->c, "ddprt: out of memory: the NCCL communicators are left as they are");
        return;
    }
    *t = (teardown_t){.api = g->api, .comm = {comm[0], comm[1], comm[2]}, .destroy = destroy,
                      .refs = 2};
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&th, NULL, teardown_run, t) != 0) {
        t->refs = 1;
        teardown_run(t);
        return;
    }
    pthread_detach(th);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)g->c->timeout + 1;
    pthread_mutex_lock(&t->m);
    while (!t->done && pthread_cond_timedwait(&t->cv, &t->m, &until) != ETIMEDOUT)
        ;
    done = t->done;
    pthread_mutex_unlock(&t->m);
    if (!done)
        drt_warn(g->c, "ddprt: %s of the NCCL communicators did not return within "
                 "DDPRT_TIMEOUT=%gs; left behind on its thread",
                 destroy ? "ncclCommDestroy" : "ncclCommAbort", g->c->timeout);
    teardown_put(t);
}

int gpu_fail(struct gpu *g, drt_error_t *err, const char *fmt, ...)
{
    va_list ap;
    int first;

    pthread_mutex_lock(&g->mu);
    first = !g->failed;
    if (first) {
        va_start(ap, fmt);
        vsnprintf(g->failure.text, sizeof(g->failure.text), fmt, ap);
        va_end(ap);
        g->failed = 1;
    }
    pthread_mutex_unlock(&g->mu);
    if (first) {
        drt_log(g->c, "%s: aborting the NCCL communicators", g->failure.text);
        teardown(g, 0);
    }
    return gpu_failed(g, err);
}

/* ---- the watchdog ---- */

/* collective seq's work: its event said rc, or (cudaErrorNotReady) it is late */
static int fail_work(struct gpu *g, uint64_t seq, cudaError_t rc, drt_error_t *err)
{
    if (rc != cudaErrorNotReady)
        return gpu_fail(g, err, "ddprt: GPU collective #%llu failed: CUDA error: %s",
                        (unsigned long long)seq, g->api->cudaGetErrorString(rc));
    return gpu_fail(g, err, "ddprt: GPU collective #%llu not done after DDPRT_TIMEOUT=%gs (a "
                    "peer stopped, or its stream waits on something that never happens)",
                    (unsigned long long)seq, g->c->timeout);
}

/* outstanding work: done ones dropped; -1 with the oldest collective's
 * number in *seq when one ran past DDPRT_TIMEOUT */
static int work_check(struct gpu *g, uint64_t *seq, cudaError_t *bad)
{
    double now = drt_now();
    size_t keep = 0;
    int late = 0;

    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->nwork; i++) {
        gpu_work_t *w = &g->work[i];
        cudaError_t rc = g->api->cudaEventQuery(w->done);
        if (rc == cudaSuccess) {
            g->api->cudaEventDestroy(w->done);
            continue;
        }
        if (!late && (rc != cudaErrorNotReady || now - w->issued > g->c->timeout)) {
            late = 1;
            *seq = w->seq;
            *bad = rc;
        }
        g->work[keep++] = *w;
    }
    g->nwork = keep;
    *seq = late ? *seq : keep ? g->work[0].seq : g->c->seq;
    pthread_mutex_unlock(&g->mu);
    return late ? -1 : (int)keep;
}

/* an NCCL communicator reporting an error: -1 with its message in why */
static int async_check(struct gpu *g, char *why, size_t len)
{
    for (int i = 0; i < GPU_GROUPS; i++) {
        ncclResult_t rc = ncclSuccess;
        int bad;
        pthread_mutex_lock(&g->issue);
        bad = g->ng[i].comm && g->api->ncclCommGetAsyncError(g->ng[i].comm, &rc) == ncclSuccess &&
              rc != ncclSuccess && rc != ncclInProgress;
        if (bad)
            snprintf(why, len, "NCCL error on the %s communicator: %s: %s", g->ng[i].name,
                     g->api->ncclGetErrorString(rc), g->api->ncclGetLastError(g->ng[i].comm));
        pthread_mutex_unlock(&g->issue);
        if (bad)
            return -1;
    }
    return 0;
}

/* A peer that died: its process is gone (this node) or its socket to us
 * hung up (another node). Looked at, never read: the CPU path owns the
 * channels. -1 when none. */
static int dead_peer(drt_comm_t *c)
{
    for (int r = 0; r < c->size; r++) {
        const chan_t *ch = &c->chan[r];
        struct pollfd p = {.fd = ch->fd, .events = POLLRDHUP};
        if (r == c->rank || !ch->tp)
            continue;
        if (ch->tp->dead(ch) ||
            (ch->fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))))
            return r;
    }
    return -1;
}

static void watch_once(struct gpu *g)
{
    char why[240];
    uint64_t seq = 0;
    cudaError_t bad = cudaSuccess;
    drt_error_t notice;
    char where[64];
    int n, dead;

    if (gpu_failed(g, NULL) < 0)
        return;
    if ((n = work_check(g, &seq, &bad)) < 0) {
        fail_work(g, seq, bad, NULL);
    } else if (async_check(g, why, sizeof(why)) < 0) {
        gpu_fail(g, NULL, "ddprt: GPU collective #%llu failed: %s", (unsigned long long)seq, why);
    } else if (n > 0 && notice_check(g->c, &notice) < 0) {
        /* only while GPU work is out: the CPU path reads the same socket */
        gpu_fail(g, NULL, "ddprt: GPU collective #%llu failed: %s", (unsigned long long)seq,
                 notice.text);
    } else if (n > 0 && (dead = dead_peer(g->c)) >= 0) {
        /* tell every rank, as the CPU path does: theirs may only time out */
        notice_send(g->c, dead);
        gpu_fail(g, NULL, "ddprt: rank %d (%s) died during GPU collective #%llu (seen by "
                 "rank %d)", dead, drt_where(g->c, dead, where, sizeof(where)),
                 (unsigned long long)seq, g->c->rank);
    }
}

static void *watchdog(void *arg)
{
    struct gpu *g = arg;
    struct timespec ts = {0, (long)(WATCHDOG_PERIOD * 1e9)};

    g->api->cudaSetDevice(g->device);
    for (;;) {
        pthread_mutex_lock(&g->mu);
        if (g->dog_stop) {
            pthread_mutex_unlock(&g->mu);
            return NULL;
        }
        pthread_mutex_unlock(&g->mu);
        watch_once(g);
        nanosleep(&ts, NULL);
    }
}

/* ---- the device ---- */

/* DDP_TOPO_DEVICE: the plugin's CUDA ordinal for the rank, already in the
 * numbering the task sees (a task/cgroup node renumbers GPUs from 0) */
static int plugin_device(const char *dev, drt_error_t *err)
{
    char *end;
    long v = strtol(dev, &end, 10);

    if (*end || end == dev || v < 0 || v > INT_MAX)
        return drt_fail(err, "ddprt: DDP_TOPO_DEVICE=%s is not a CUDA device ordinal (unset "
                        "it, or pass a device to drt_gpu_attach)", dev);
    return (int)v;
}

/* DDP_TOPO_GPU is a node GPU index: its place in CUDA_VISIBLE_DEVICES */
static int topo_device(const char *topo, drt_error_t *err)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES"), *p = vis;
    char *end;
    long want = strtol(topo, &end, 10);

    if (*end || end == topo || want < 0)
        return drt_fail(err, "ddprt: DDP_TOPO_GPU=%s is not a GPU index (unset it, or pass a "
                        "device to drt_gpu_attach)", topo);
    if (!vis)
        return (int)want;
    for (int i = 0; *p; i++) {
        long v = strtol(p, &end, 10);
        if (end != p && v == want && (*end == ',' || !*end))
            return i;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return drt_fail(err, "ddprt: DDP_TOPO_GPU=%s is not in CUDA_VISIBLE_DEVICES=%s (unset "
                    "DDP_TOPO_GPU, or pass a device to drt_gpu_attach)", topo, vis);
}

/* the device index to use, from the arguments and environment alone */
static int pick_device(drt_comm_t *c, int device, drt_error_t *err)
{
    const char *topo = getenv("DDP_TOPO_GPU");

    const char *dev = getenv(DRT_ENV_DEVICE);

    if (device >= 0)
        return device;
    if (dev && *dev)
        return plugin_device(dev, err);
    return topo && *topo ? topo_device(topo, err) : (int)c->env.local_rank;
}

/* What this rank does alone: the device (checked before anything loads),
 * the libraries, events. */
/* *prev: the caller's device, restored by attach once the communicators
 * exist (-1 when CUDA never got that far) */
static int local_setup(struct gpu *g, int device, int *prev, drt_error_t *err)
{
    const char *topo = getenv("DDP_TOPO_GPU");
    const char *dev = getenv(DRT_ENV_DEVICE);
    const char *from = device >= 0      ? "asked for"
                       : dev && *dev    ? DRT_ENV_DEVICE
                       : topo && *topo ? "DDP_TOPO_GPU"
                                        : "LOCAL_RANK";
    const cuda_api_t *a;
    cudaError_t rc;
    int count = 0;

    if ((g->device = pick_device(g->c, device, err)) < 0 || !(a = g->api = cudaload(err)))
        return -1;
    if ((rc = a->cudaGetDeviceCount(&count)) != cudaSuccess || count == 0)
        return drt_fail(err, "ddprt: no CUDA device: cudaGetDeviceCount: %s (is the NVIDIA "
                        "driver loaded? see nvidia-smi)",
                        rc != cudaSuccess ? a->cudaGetErrorString(rc) : "none visible");
    if (a->cudaGetDevice(prev) != cudaSuccess)
        *prev = -1;
    if (g->device >= count)
        return drt_fail(err, "ddprt: CUDA device %d (%s) does not exist: %d visible (bind one "
                        "GPU per rank, e.g. srun --ddp-topo=auto, or pass a device to "
                        "drt_gpu_attach)", g->device, from, count);
    if ((rc = a->cudaSetDevice(g->device)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->t0, cudaEventDefault)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->t1, cudaEventDefault)) != cudaSuccess)
        return drt_fail(err, "ddprt: CUDA device %d: %s", g->device, a->cudaGetErrorString(rc));
    return 0;
}

/* ---- the communicators ---- */

typedef struct {
    int32_t ok;
    ncclUniqueId id;
} id_msg_t;

static group_t *cpu_group(drt_comm_t *c, int i)
{
    return i == GPU_WORLD ? c->cpu.world : i == GPU_NODE ? c->cpu.node : c->cpu.rail;
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
        if (!m[i].ok)
            return drt_fail(err, "ddprt: rank %d could not make the NCCL %s communicator's id "
                            "(ncclGetUniqueId failed there)", cg->ranks[0], g->ng[i].name);
        cfg.blocking = 0;
        cfg.commName = names[i];
        rc = g->api->ncclCommInitRankConfig(&g->ng[i].comm, cg->n, m[i].id, cg->me, &cfg);
        if (rc != ncclSuccess && rc != ncclInProgress)
            return drt_fail(err, "ddprt: NCCL %s communicator (%d ranks): init failed: %s: %s",
                            g->ng[i].name, cg->n, g->api->ncclGetErrorString(rc),
                            g->api->ncclGetLastError(g->ng[i].comm));
    }
    return 0;
}

/* every communicator initialised, polled under DDPRT_TIMEOUT */
static int comms_ready(struct gpu *g, double deadline, drt_error_t *err)
{
    for (int i = 0, spins = 0; i < GPU_GROUPS; spins++) {
        nccl_group_t *ng = &g->ng[i];
        ncclResult_t rc = ncclInternalError;
        g->api->ncclCommGetAsyncError(ng->comm, &rc);
        if (rc == ncclSuccess) {
            i++;
            continue;
        }
        if (rc != ncclInProgress)
            return drt_fail(err, "ddprt: NCCL %s communicator (%d ranks): init failed: %s: %s",
                            ng->name, g->groups[i].n, g->api->ncclGetErrorString(rc),
                            g->api->ncclGetLastError(ng->comm));
        if (drt_now() > deadline)
            return drt_fail(err, "ddprt: NCCL %s communicator (%d ranks, from rank %d) not ready "
                            "after DDPRT_TIMEOUT=%gs: a rank of it did not call drt_gpu_attach "
                            "or cannot reach the others (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO)",
                            ng->name, g->groups[i].n, g->groups[i].ranks[0], g->c->timeout);
        gpu_idle((unsigned)spins);
    }
    return 0;
}

static void set_init(struct gpu *g)
{
    drt_comm_t *c = g->c;
    const group_t *cpu[GPU_GROUPS] = {c->cpu.world, c->cpu.node, c->cpu.rail};

    for (int i = 0; i < GPU_GROUPS; i++)
        g->groups[i] = (group_t){.n = cpu[i]->n, .me = cpu[i]->me, .ranks = cpu[i]->ranks,
                                 .ops = &nccl_group_ops, .impl = &g->ng[i]};
    if (g->rail_host)
        g->groups[GPU_RAIL].ops = &staged_rail_ops;
    g->set = (coll_set_t){.c = c, .world = &g->groups[GPU_WORLD], .node = &g->groups[GPU_NODE],
                          .rail = &g->groups[GPU_RAIL], .ops = &nccl_set_ops,
                          .uniform = c->uniform, .nnodes = c->nnodes, .equal_chunks = 1,
                          .pipe_min = g->api->nccl_version >= 22600 ? PIPE_MIN_GPU : 0,
                          .impl = g};
    for (int i = 0; i < 64; i++)
        g->set.sizes[i].choice = -1;
}

/* the state, made on first touch (drt_gpu_set_algo needs it before attach) */
static struct gpu *gpu_state(drt_comm_t *c)
{
    struct gpu *g = c->gpu;
    static const char *const names[] = {"world", "node", "rail"};

    if (g || !(g = calloc(1, sizeof(*g))))
        return g;
    g->c = c;
    g->device = -1;
    g->algo = DRT_ALGO_FLAT;
    for (int i = 0; i < GPU_GROUPS; i++)
        g->ng[i].name = names[i];
    pthread_mutex_init(&g->issue, NULL);
    pthread_mutex_init(&g->mu, NULL);
    c->gpu = g;
    return g;
}

static int env_algo(struct gpu *g, drt_error_t *err)
{
    const char *v = getenv("DDPRT_GPU_ALGO"), *r = getenv("DDPRT_GPU_RAIL");

    if (r && *r && strcmp(r, "nccl") && strcmp(r, "host"))
        return drt_fail(err, "ddprt: DDPRT_GPU_RAIL=%s: not nccl or host", r);
    g->rail_host = r && !strcmp(r, "host");
    if (g->algo_set || !v || !*v)
        return 0;
    if (drt_algo_parse(v, &g->algo) < 0)
        return drt_fail(err, "ddprt: DDPRT_GPU_ALGO=%s: not flat, hier or auto", v);
    return 0;
}

/* undo a failed attach: this rank's part only (peers fail on their own) */
static void attach_undo(struct gpu *g)
{
    teardown(g, 0);
    if (g->api) {
        if (g->fork)
            g->api->cudaEventDestroy(g->fork);
        if (g->t0)
            g->api->cudaEventDestroy(g->t0);
        if (g->t1)
            g->api->cudaEventDestroy(g->t1);
    }
    g->fork = g->t0 = g->t1 = NULL;
    g->device = -1;
}

/* Every rank agrees before each NCCL step: one rank without a GPU, or whose
 * init failed at once, must not leave the others waiting for it until the
 * timeout. */
static int agree_ready(drt_comm_t *c, int mine, const char *what, drt_error_t *err)
{
    double worst = mine < 0 ? c->rank + 1 : 0;
    drt_error_t e;

    if (drt_allreduce(c, &worst, &worst, 1, DRT_FLOAT64, DRT_MAX, &e) < 0)
        return mine < 0 ? -1 : drt_fail(err, "%s", e.text);
    if (mine < 0)
        return -1;
    if (worst > 0)
        return drt_fail(err, "ddprt: rank %d could not %s (its own error says why)",
                        (int)worst - 1, what);
    return 0;
}

static int attach_comms(struct gpu *g, int device, int *prev, drt_error_t *err)
{
    drt_comm_t *c = g->c;
    int mine = env_algo(g, err) < 0 ? -1 : local_setup(g, device, prev, err);
    id_msg_t ids[GPU_GROUPS];

    if (agree_ready(c, mine, "use its GPU, so no NCCL communicator was made", err) < 0)
        return -1;
    set_init(g);
    /* the pipelined hier runs the node and rail communicators at once, on
     * two streams: without one launch order across communicators that can
     * deadlock; NCCL 2.26+ derives it from the host's issue order, which is
     * the same on every rank (older NCCL: no pipelining, set_init) */
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
    if (comm_ids(g, ids, err) < 0)
        return -1;
    mine = comm_start(g, ids, err);
    if (agree_ready(c, mine, "start its NCCL communicators", err) < 0 ||
        comms_ready(g, drt_now() + c->timeout, err) < 0)
        return -1;
    if (pthread_create(&g->dog, NULL, watchdog, g) != 0)
        return drt_fail(err, "ddprt: cannot start the GPU watchdog thread");
    g->dog_started = 1;
    drt_log(c, "GPU: CUDA device %d, NCCL %d from %s%s; world %d, node %d, rail %d ranks",
            g->device, g->api->nccl_version, g->api->nccl_file,
            g->api->nccl_reused ? " (already loaded)" : "", g->groups[0].n, g->groups[1].n,
            g->groups[2].n);
    return 0;
}

static int attach(struct gpu *g, int device, drt_error_t *err)
{
    int prev = -1, rc = attach_comms(g, device, &prev, err);

    if (prev >= 0) /* the caller's current device is the caller's */
        g->api->cudaSetDevice(prev);
    return rc;
}

int drt_gpu_attach(drt_comm_t *c, int device, drt_error_t *err)
{
    struct gpu *g = gpu_state(c);

    if (!g)
        return drt_fail(err, "out of memory");
    if (g->dog_started) {
        if (device >= 0 && device != g->device)
            return drt_fail(err, "ddprt: drt_gpu_attach: already attached to CUDA device %d, "
                            "not %d", g->device, device);
        return gpu_failed(g, err);
    }
    if (attach(g, device, err) < 0) {
        attach_undo(g);
        if (!g->algo_set) /* nothing worth keeping: a CPU-only run holds no GPU state */
            gpu_finalize(c);
        return -1;
    }
    return 0;
}

int drt_gpu_device(const drt_comm_t *c)
{
    return c->gpu && c->gpu->dog_started ? c->gpu->device : -1;
}

void drt_gpu_set_algo(drt_comm_t *c, drt_algo_t algo)
{
    struct gpu *g = gpu_state(c);

    if (g) {
        g->algo = algo;
        g->algo_set = 1;
    }
}

/* ---- collectives ---- */

/* the device for this call, the caller's restored after */
static int enter(struct gpu *g, int *prev, drt_error_t *err)
{
    const cuda_api_t *a = g->api;
    cudaError_t rc;

    if ((rc = a->cudaGetDevice(prev)) != cudaSuccess ||
        (rc = a->cudaSetDevice(g->device)) != cudaSuccess)
        return drt_fail(err, "ddprt: CUDA device %d: %s", g->device, a->cudaGetErrorString(rc));
    return 0;
}

/* the watchdog's: an event after this call's work */
static int track(struct gpu *g, cudaStream_t s, drt_error_t *err)
{
    const cuda_api_t *a = g->api;
    gpu_work_t w = {.seq = g->c->seq, .issued = drt_now()};
    cudaError_t rc;

    if ((rc = a->cudaEventCreateWithFlags(&w.done, cudaEventDisableTiming)) != cudaSuccess ||
        (rc = a->cudaEventRecord(w.done, s)) != cudaSuccess)
        return gpu_fail(g, err, "ddprt: GPU collective #%llu: cudaEventRecord: %s",
                        (unsigned long long)w.seq, a->cudaGetErrorString(rc));
    pthread_mutex_lock(&g->mu);
    if (g->nwork == g->capwork) {
        size_t cap = g->capwork ? 2 * g->capwork : 16;
        gpu_work_t *more = realloc(g->work, cap * sizeof(*more));
        if (!more) {
            pthread_mutex_unlock(&g->mu);
            a->cudaEventDestroy(w.done);
            return drt_fail(err, "out of memory");
        }
        g->work = more;
        g->capwork = cap;
    }
    g->work[g->nwork++] = w;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int run(struct gpu *g, const coll_args_t *x, drt_error_t *err)
{
    drt_algo_t algo = g->algo;

    /* NCCL averages integers by summing and dividing once, on a
     * communicator of all avg_n ranks: only flat does that */
    if (x->op == DRT_AVG && (x->t == DRT_INT32 || x->t == DRT_INT64))
        algo = DRT_ALGO_FLAT;
    if (algo == DRT_ALGO_AUTO)
        return auto_allreduce(&g->set, x, err);
    return algo_run(&g->set, algo, x, err);
}

int drt_gpu_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                      drt_op_t op, void *stream, drt_error_t *err)
{
    coll_args_t x = {recv, send == recv ? NULL : send, count, drt_dtype_size(t), t, op, c->size};
    struct gpu *g;
    int prev, rc;

    if (check_args(t, op, err) < 0 || drt_gpu_attach(c, -1, err) < 0)
        return -1;
    async_drain(c); /* auto's fences and a host rail use the CPU groups */
    g = c->gpu;
    c->seq++;
    if (!count)
        return 0;
    if (enter(g, &prev, err) < 0)
        return -1;
    g->stream = g->cur = stream;
    rc = run(g, &x, err);
    if (rc == 0)
        rc = track(g, stream, err);
    g->api->cudaSetDevice(prev);
    return rc;
}

/* ---- requests and sync: an event, polled ---- */

struct gpu_req {
    struct gpu *g;
    cudaEvent_t done;
    uint64_t seq;
    double deadline;
};

/* the request's event, made on the communicators' device */
static struct gpu_req *req_new(struct gpu *g, cudaStream_t stream, drt_error_t *err)
{
    struct gpu_req *q = calloc(1, sizeof(*q));
    cudaError_t rc;

    if (!q) {
        drt_fail(err, "out of memory");
        return NULL;
    }
    *q = (struct gpu_req){g, NULL, g->c->seq, drt_now() + g->c->timeout};
    if ((rc = g->api->cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming)) ==
            cudaSuccess &&
        (rc = g->api->cudaEventRecord(q->done, stream)) == cudaSuccess)
        return q;
    drt_fail(err, "ddprt: GPU collective #%llu: its request's event: %s",
             (unsigned long long)q->seq, g->api->cudaGetErrorString(rc));
    if (q->done)
        g->api->cudaEventDestroy(q->done);
    free(q);
    return NULL;
}

int drt_gpu_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, void *stream, drt_request_t **req,
                       drt_error_t *err)
{
    struct gpu_req *q;
    struct gpu *g;
    int prev;

    *req = NULL;
    if (drt_gpu_allreduce(c, send, recv, count, t, op, stream, err) < 0)
        return -1;
    g = c->gpu;
    if (enter(g, &prev, err) < 0)
        return -1;
    q = req_new(g, stream, err);
    g->api->cudaSetDevice(prev);
    if (q && !(*req = async_gpu_request(c, q))) {
        g->api->cudaEventDestroy(q->done);
        free(q);
        return drt_fail(err, "out of memory");
    }
    return q ? 0 : -1;
}

int gpu_req_test(struct gpu_req *q, int *done, drt_error_t *err)
{
    struct gpu *g = q->g;
    cudaError_t rc = g->api->cudaEventQuery(q->done);

    *done = 1;
    if (rc == cudaSuccess)
        return 0;
    if (gpu_failed(g, err) < 0)
        return -1;
    if (rc != cudaErrorNotReady || drt_now() > q->deadline)
        return fail_work(g, q->seq, rc, err);
    *done = 0;
    return 0;
}

int gpu_req_wait(struct gpu_req *q, drt_error_t *err)
{
    int done = 0, rc;

    for (unsigned spins = 0; (rc = gpu_req_test(q, &done, err)) == 0 && !done; spins++)
        gpu_idle(spins);
    q->g->api->cudaEventDestroy(q->done);
    free(q);
    return rc;
}

int drt_gpu_sync(drt_comm_t *c, void *stream, drt_error_t *err)
{
    struct gpu *g = c->gpu;
    int prev, rc;

    if (!g || !g->dog_started)
        return drt_fail(err, "ddprt: drt_gpu_sync: no GPU attached (call drt_gpu_attach "
                        "first)");
    if (gpu_failed(g, err) < 0 || enter(g, &prev, err) < 0)
        return -1;
    rc = g->api->cudaEventRecord(g->fork, stream) != cudaSuccess
             ? drt_fail(err, "ddprt: drt_gpu_sync: cudaEventRecord failed")
             : gpu_wait_event(g, g->fork, "drt_gpu_sync", err);
    g->api->cudaSetDevice(prev);
    return rc;
}

/* ---- the end ---- */

/* 1 once the outstanding work is done, polled under DDPRT_TIMEOUT; 0 on a
 * failure or when it is still not done then */
static int work_drained(struct gpu *g, uint64_t *seq, cudaError_t *bad)
{
    double end = drt_now() + g->c->timeout;
    int left;

    for (unsigned spins = 0; gpu_failed(g, NULL) == 0; spins++) {
        if ((left = work_check(g, seq, bad)) <= 0)
            return left == 0;
        if (drt_now() > end)
            return 0;
        gpu_idle(spins);
    }
    return 0;
}

void gpu_finalize(drt_comm_t *c)
{
    struct gpu *g = c->gpu;
    uint64_t seq;
    cudaError_t bad;

    if (!g)
        return;
    if (g->dog_started) {
        pthread_mutex_lock(&g->mu);
        g->dog_stop = 1;
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->dog, NULL);
        /* destroy once all work is done (every rank of a node must make the
         * same choice: ranks that finalize together see their work end
         * together); abort only on a failure or after DDPRT_TIMEOUT */
        teardown(g, work_drained(g, &seq, &bad));
        for (size_t i = 0; i < g->nwork; i++)
            g->api->cudaEventDestroy(g->work[i].done);
        nccl_lanes_free(g);
        nccl_stage_free(g);
        attach_undo(g);
    }
    free(g->work);
    pthread_mutex_destroy(&g->issue);
    pthread_mutex_destroy(&g->mu);
    free(g);
    c->gpu = NULL;
}
/* ---- device memory for the gradient buckets (bucket.c) ---- */

static int buf_done(struct gpu *g, int prev, cudaError_t rc, const char *what, drt_error_t *err)
{
    g->api->cudaSetDevice(prev);
    if (rc == cudaSuccess)
        return 0;
    return drt_fail(err, "ddprt: gradient buckets: %s on CUDA device %d: %s", what, g->device,
                    g->api->cudaGetErrorString(rc));
}

int gpu_buf_alloc(drt_comm_t *c, size_t bytes, void **p, drt_error_t *err)
{
    int prev;

    *p = NULL;
    if (drt_gpu_attach(c, -1, err) < 0 || enter(c->gpu, &prev, err) < 0)
        return -1;
    return buf_done(c->gpu, prev, c->gpu->api->cudaMalloc(p, bytes), "cudaMalloc", err);
}

void gpu_buf_free(drt_comm_t *c, void *p)
{
    drt_error_t e;
    int prev;

    /* on the buckets' device: cudaFree may set up a context on the current one */
    if (p && c->gpu && enter(c->gpu, &prev, &e) == 0) {
        c->gpu->api->cudaFree(p);
        c->gpu->api->cudaSetDevice(prev);
    }
}

int gpu_buf_copy(drt_comm_t *c, void *dst, const void *src, size_t bytes, void *stream,
                 drt_error_t *err)
{
    int prev;

    if (!c->gpu || enter(c->gpu, &prev, err) < 0)
        return c->gpu ? -1 : drt_fail(err, "ddprt: gradient buckets: no GPU attached");
    return buf_done(c->gpu, prev,
                    c->gpu->api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                                 (cudaStream_t)stream),
                    "cudaMemcpyAsync", err);
}

int gpu_buf_zero(drt_comm_t *c, void *p, size_t bytes, void *stream, drt_error_t *err)
{
    int prev;

    if (!c->gpu || enter(c->gpu, &prev, err) < 0)
        return c->gpu ? -1 : drt_fail(err, "ddprt: gradient buckets: no GPU attached");
    return buf_done(c->gpu, prev, c->gpu->api->cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream),
                    "cudaMemsetAsync", err);
}

drt_algo_t gpu_last_algo(const drt_comm_t *c)
{
    return c->gpu ? c->gpu->set.last : DRT_ALGO_FLAT;
}
#endif
