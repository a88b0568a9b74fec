/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU path's failure state, and what keeps a stuck or failed
 * collective from hanging the job: the watchdog, the work it watches, the
 * requests, and the teardown of the communicators.
 *
 * Failure: the first error (an NCCL async error, DDPRT_TIMEOUT passing on
 * outstanding work, a peer's abort notice) is recorded and every later GPU
 * call returns it. The communicators are aborted together (one NCCL group:
 * in NCCL 2.28 ncclCommAbort waits for that communicator's last work on its
 * stream, which may sit behind another communicator's spinning kernel) on a
 * thread of its own, which nobody waits for but drt_finalize, bounded:
 * the thread that saw the failure returns it at once. Peers blocked in NCCL
 * get theirs from their own watchdog (their work stops completing) or from
 * the notice.
 *
 * Nothing here calls the files above it (gpu.h): it owns no communicator
 * setup and no collective. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "config.h"

#include "gpu.h"

#ifdef CUDALOAD_HEADERS
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCHDOG_PERIOD 0.05 /* seconds: PyTorch's is 0.1 */

void gpu_idle(unsigned spins)
{
    struct timespec ts = {0, spins < 1000 ? 20000 : 500000};

    if (spins < 100)
        sched_yield();
    else
        nanosleep(&ts, NULL);
}

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

/* ---- the teardown: on a thread of its own, since an abort can hang
 * (NVIDIA/nccl#863) and ncclCommAbort's cleanup synchronises the device.
 * Whoever of the thread and the gpu state lets go last frees it. ---- */

struct teardown {
    const cuda_api_t *api;
    ncclComm_t comm[GPU_GROUPS];
    int destroy, done, refs;
    int *excl, nexcl;  /* > 0: shrink the world without these old ranks */
    ncclComm_t child;  /* ...the shrunk world, or NULL with why */
    char why[240];
    pthread_mutex_t m;
    pthread_cond_t cv;
};

static void teardown_put(struct teardown *t)
{
    int last;

    pthread_mutex_lock(&t->m);
    last = --t->refs == 0;
    pthread_mutex_unlock(&t->m);
    if (last) {
        pthread_mutex_destroy(&t->m);
        pthread_cond_destroy(&t->cv);
        free(t->excl);
        free(t);
    }
}

#ifdef CUDALOAD_SHRINK
/* drt_shrink's: node and rail aborted in the same group as the shrink, so
 * every abort flag is set before the shrink waits for the world's last
 * kernel (it may sit behind theirs on a stream); the parent is then
 * aborted, never destroyed (a destroy after an abortive shrink can wait
 * forever: pytorch/pytorch#194679) */
static void shrink_run(struct teardown *t)
{
    const cuda_api_t *a = t->api;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc, end;

    cfg.blocking = 0;
    cfg.commName = "ddprt world";
    a->ncclGroupStart();
    for (int i = GPU_NODE; i < GPU_GROUPS; i++)
        if (t->comm[i])
            a->ncclCommAbort(t->comm[i]);
    rc = a->ncclCommShrink(t->comm[GPU_WORLD], t->excl, t->nexcl, &t->child, &cfg,
                           NCCL_SHRINK_ABORT);
    end = a->ncclGroupEnd();
    if (rc == ncclSuccess)
        rc = end;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        snprintf(t->why, sizeof(t->why), "%s: %s", a->ncclGetErrorString(rc),
                 a->ncclGetLastError(t->comm[GPU_WORLD]));
        if (t->child)
            a->ncclCommAbort(t->child);
        t->child = NULL;
    }
    a->ncclCommAbort(t->comm[GPU_WORLD]);
}
#endif

static void *teardown_run(void *arg)
{
    struct teardown *t = arg;
    const cuda_api_t *a = t->api;

#ifdef CUDALOAD_SHRINK
    if (t->nexcl > 0)
        shrink_run(t);
    else
#endif
    if (t->destroy) { /* a clean end: all work is done, nothing waits on another */
        for (int i = 0; i < GPU_GROUPS; i++)
            if (t->comm[i])
                a->ncclCommDestroy(t->comm[i]);
    } else { /* every abort flag set before any abort waits */
        a->ncclGroupStart();
        for (int i = 0; i < GPU_GROUPS; i++)
            if (t->comm[i])
                a->ncclCommAbort(t->comm[i]);
        a->ncclGroupEnd();
    }
    pthread_mutex_lock(&t->m);
    t->done = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->m);
    teardown_put(t);
    return NULL;
}

/* take the communicators away from every caller (issue held), then start
 * ending them; g->td is the teardown (one at a time: later calls find no
 * communicator left) */
static void teardown_begin(struct gpu *g, int destroy, int *excl, int nexcl)
{
    ncclComm_t comm[GPU_GROUPS];
    struct teardown *t;
    pthread_t th;
    int any = 0;

    pthread_mutex_lock(&g->issue);
    for (int i = 0; i < GPU_GROUPS; i++) {
        any |= (comm[i] = g->ng[i].comm) != NULL;
        g->ng[i].comm = NULL;
    }
    pthread_mutex_unlock(&g->issue);
    if (!any) {
        free(excl);
        return;
    }
    if (!(t = calloc(1, sizeof(*t)))) {
        rt_warn(g->c, "ddprt: out of memory: the NCCL communicators are left as they are");
        free(excl);
        return;
    }
    *t = (struct teardown){.api = g->api, .comm = {comm[0], comm[1], comm[2]},
                           .destroy = destroy, .refs = 2, .excl = excl,
                           .nexcl = comm[GPU_WORLD] && excl ? nexcl : 0};
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_mutex_lock(&g->mu);
    g->td = t;
    pthread_mutex_unlock(&g->mu);
    if (pthread_create(&th, NULL, teardown_run, t) != 0) {
        teardown_run(t); /* here, then: it drops the thread's reference */
        return;
    }
    pthread_detach(th);
}

static void teardown_start(struct gpu *g, int destroy)
{
    teardown_begin(g, destroy, NULL, 0);
}

/* the teardown under way, waited for (bounded); *child: a shrink's result */
static int teardown_wait(struct gpu *g, ncclComm_t *child, char *why, size_t len)
{
    struct teardown *t;
    struct timespec until;
    int done;

    pthread_mutex_lock(&g->mu);
    t = g->td;
    g->td = NULL;
    pthread_mutex_unlock(&g->mu);
    if (!t)
        return g->td_stuck ? -1 : 0;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)g->c->timeout + 1;
    pthread_mutex_lock(&t->m);
    while (!t->done && pthread_cond_timedwait(&t->cv, &t->m, &until) != ETIMEDOUT)
        ;
    done = t->done;
    pthread_mutex_unlock(&t->m);
    if (!done) {
        rt_warn(g->c, "ddprt: %s of the NCCL communicators did not return within "
                "DDPRT_TIMEOUT=%gs; left behind on its thread, with the GPU memory and "
                "events it may still use", t->destroy ? "ncclCommDestroy" : "ncclCommAbort",
                g->c->timeout);
        g->td_stuck = 1;
    }
    if (child && done) {
        *child = t->child;
        snprintf(why, len, "%s", t->why);
    }
    teardown_put(t);
    return done ? 0 : -1;
}

int gpu_teardown_wait(struct gpu *g, int destroy)
{
    teardown_start(g, destroy);
    return teardown_wait(g, NULL, NULL, 0);
}

ncclComm_t gpu_teardown_shrink(struct gpu *g, int *excl, int nexcl, char *why, size_t len)
{
    ncclComm_t child = NULL;
    int *mine = malloc((size_t)nexcl * sizeof(int)); /* NCCL sorts it: the thread's own */

    snprintf(why, len, mine ? "the communicators were aborted already (an error before the "
             "loss, or no drt_shrink within the grace)" : "out of memory");
    if (mine)
        memcpy(mine, excl, (size_t)nexcl * sizeof(int));
    teardown_begin(g, 0, mine, nexcl);
    if (teardown_wait(g, &child, why, len) < 0)
        snprintf(why, len, "it did not return within DDPRT_TIMEOUT");
    return child;
}

/* The first failure wins: recorded, logged, and the communicators aborted,
 * unless keep: then they stay for SHRINK_GRACE (lost_at) for drt_shrink. */
static void fail_v(struct gpu *g, int keep, const char *fmt, va_list ap)
{
    int first;

    pthread_mutex_lock(&g->mu);
    first = !g->failed;
    if (first) {
        vsnprintf(g->failure.text, sizeof(g->failure.text), fmt, ap);
        g->failed = 1;
        g->lost_at = keep ? rt_now() : 0;
    }
    pthread_mutex_unlock(&g->mu);
    if (!first)
        return;
    if (keep) {
        rt_log(g->c, "%s: the NCCL communicators wait %gs for drt_shrink", g->failure.text,
               SHRINK_GRACE);
        return;
    }
    rt_log(g->c, "%s: aborting the NCCL communicators", g->failure.text);
    teardown_start(g, 0);
}

int gpu_fail(struct gpu *g, drt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fail_v(g, 0, fmt, ap);
    va_end(ap);
    return gpu_failed(g, err);
}

/* A rank lost: as gpu_fail, but where drt_shrink can shrink the world
 * communicator in place (ncclCommShrink aborts its in-flight work itself)
 * the communicators stay for SHRINK_GRACE, so a caller that goes to
 * drt_shrink at once finds them; the watchdog aborts them after that, so a
 * caller that waits on its stream instead is not left hanging. */
static void gpu_lose(struct gpu *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gpu_lose(struct gpu *g, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fail_v(g, g->can_shrink, fmt, ap);
    va_end(ap);
}

/* the grace after a loss passed without drt_shrink: abort as gpu_fail would */
static void lose_expired(struct gpu *g)
{
    int expired;

    pthread_mutex_lock(&g->mu);
    expired = g->lost_at > 0 && rt_now() > g->lost_at + SHRINK_GRACE;
    if (expired)
        g->lost_at = 0;
    pthread_mutex_unlock(&g->mu);
    if (expired) {
        rt_log(g->c, "no drt_shrink within %gs of the loss: aborting the NCCL communicators",
               SHRINK_GRACE);
        teardown_start(g, 0);
    }
}

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

/* ---- the work list: an event after each collective ---- */

static int work_add(struct gpu *g, gpu_work_t w, drt_error_t *err)
{
    pthread_mutex_lock(&g->mu);
    if (g->nwork == g->capwork) {
        size_t cap = g->capwork ? 2 * g->capwork : 16;
        gpu_work_t *more = realloc(g->work, cap * sizeof(*more));
        if (!more) {
            pthread_mutex_unlock(&g->mu);
            return rt_fail(err, "out of memory");
        }
        g->work = more;
        g->capwork = cap;
    }
    g->work[g->nwork++] = w;
    if (w.seq > g->last_seq)
        g->last_seq = w.seq;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int gpu_track(struct gpu *g, cudaStream_t s, drt_error_t *err)
{
    const cuda_api_t *a = g->api;
    gpu_work_t w = {.seq = g->c->seq, .issued = rt_now()};
    cudaError_t rc;

    if ((rc = a->cudaEventCreateWithFlags(&w.done, cudaEventDisableTiming)) != cudaSuccess)
        return gpu_fail(g, err, "ddprt: GPU collective #%llu: cudaEventCreateWithFlags: %s",
                        (unsigned long long)w.seq, a->cudaGetErrorString(rc));
    if ((rc = a->cudaEventRecord(w.done, s)) != cudaSuccess) {
        a->cudaEventDestroy(w.done);
        return gpu_fail(g, err, "ddprt: GPU collective #%llu: cudaEventRecord: %s",
                        (unsigned long long)w.seq, a->cudaGetErrorString(rc));
    }
    if (work_add(g, w, err) < 0) {
        a->cudaEventDestroy(w.done);
        return -1;
    }
    return 0;
}

/* The first n entries' states, queried without g->mu: a query may wait
 * for CUDA's context lock (an abort's cleanup holds it), and a caller's
 * gpu_failed must not wait with it. Only one thread removes entries (the
 * watchdog, or finalize once it stopped); others only append. */
static cudaError_t *work_query(struct gpu *g, size_t *n)
{
    gpu_work_t *snap;
    cudaError_t *rc;

    pthread_mutex_lock(&g->mu);
    *n = g->nwork;
    snap = *n ? malloc(*n * sizeof(*snap)) : NULL;
    if (snap)
        memcpy(snap, g->work, *n * sizeof(*snap));
    pthread_mutex_unlock(&g->mu);
    rc = snap ? malloc(*n * sizeof(*rc)) : NULL;
    for (size_t i = 0; rc && i < *n; i++)
        rc[i] = g->api->cudaEventQuery(snap[i].done);
    free(snap);
    if (!rc)
        *n = 0;
    return rc;
}

/* outstanding work: done ones dropped; -1 with the oldest late or failed
 * collective's number in *seq, else how many are left */
static int work_check(struct gpu *g, uint64_t *seq, cudaError_t *bad)
{
    double now = rt_now();
    size_t n, keep = 0, ndone = 0;
    cudaError_t *rc = work_query(g, &n);
    cudaEvent_t *done = n ? malloc(n * sizeof(*done)) : NULL;
    int late = 0, left;

    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->nwork; i++) {
        gpu_work_t *w = &g->work[i];
        cudaError_t r = i < n ? rc[i] : cudaErrorNotReady;
        if (r == cudaSuccess && done) {
            done[ndone++] = w->done;
            continue;
        }
        if (!late && i < n && (r != cudaErrorNotReady || now - w->issued > g->c->timeout)) {
            late = 1;
            *seq = w->seq;
            *bad = r;
        }
        g->work[keep++] = *w;
    }
    g->nwork = keep;
    if (!late) /* not c->seq: the caller's thread changes it */
        *seq = keep ? g->work[0].seq : g->last_seq;
    left = (int)keep;
    pthread_mutex_unlock(&g->mu);
    for (size_t i = 0; i < ndone; i++)
        g->api->cudaEventDestroy(done[i]);
    free(done);
    free(rc);
    return late ? -1 : left;
}

int gpu_work_drained(struct gpu *g)
{
    double end = rt_now() + g->c->timeout;
    uint64_t seq;
    cudaError_t bad;
    int left;

    for (unsigned spins = 0; gpu_failed(g, NULL) == 0; spins++) {
        if ((left = work_check(g, &seq, &bad)) <= 0)
            return left == 0;
        if (rt_now() > end)
            return 0;
        gpu_idle(spins);
    }
    return 0;
}

void gpu_work_free(struct gpu *g)
{
    if (!g->td_stuck) /* else an abort still running may use them */
        for (size_t i = 0; i < g->nwork; i++)
            g->api->cudaEventDestroy(g->work[i].done);
    free(g->work);
    g->work = NULL;
    g->nwork = g->capwork = 0;
}

/* ---- the watchdog ---- */

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

    if (gpu_failed(g, NULL) < 0) {
        lose_expired(g);
        return;
    }
    if ((n = work_check(g, &seq, &bad)) < 0) {
        fail_work(g, seq, bad, NULL);
    } else if (async_check(g, why, sizeof(why)) < 0) {
        /* the peers' kernels wait for ours: tell them whose error it is */
        notice_send_kind(g->c, g->c->rank, NOTICE_GPU_ERROR, seq);
        gpu_fail(g, NULL, "ddprt: GPU collective #%llu failed: %s", (unsigned long long)seq, why);
    } else if (n > 0 &&
               notice_check(g->c, NOTICE_DIED_ONLY | 1u << NOTICE_GPU_ERROR, &notice) < 0) {
        /* only while GPU work is out: the CPU path reads the same socket */
        if (__atomic_load_n(&g->c->nlost, __ATOMIC_ACQUIRE) > 0) /* a rank died */
            gpu_lose(g, "ddprt: GPU collective #%llu failed: %s", (unsigned long long)seq,
                     notice.text);
        else
            gpu_fail(g, NULL, "ddprt: GPU collective #%llu failed: %s",
                     (unsigned long long)seq, notice.text);
    } else if (n > 0 && (dead = dead_peer(g->c)) >= 0) {
        /* tell every rank, as the CPU path does: theirs may only time out */
        rt_mark_lost(g->c, dead);
        notice_send_kind(g->c, dead, NOTICE_DIED, seq);
        gpu_lose(g, "ddprt: rank %d (%s) died during GPU collective #%llu (seen by rank %d)",
                 dead, rt_where(g->c, dead, where, sizeof(where)), (unsigned long long)seq,
                 g->c->rank);
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

int gpu_watch_start(struct gpu *g, drt_error_t *err)
{
    if (pthread_create(&g->dog, NULL, watchdog, g) != 0)
        return rt_fail(err, "ddprt: cannot start the GPU watchdog thread");
    g->dog_started = 1;
    return 0;
}

void gpu_watch_stop(struct gpu *g)
{
    int already;

    pthread_mutex_lock(&g->mu);
    already = g->dog_stop;
    g->dog_stop = 1;
    pthread_mutex_unlock(&g->mu);
    if (!already) /* drt_shrink stops it before drt_finalize does */
        pthread_join(g->dog, NULL);
}

/* ---- requests: an event, polled ---- */

struct gpu_req {
    struct gpu *g;
    cudaEvent_t done;
    uint64_t seq;
    double deadline;
};

struct gpu_req *gpu_req_new(struct gpu *g, cudaStream_t stream, drt_error_t *err)
{
    struct gpu_req *q = calloc(1, sizeof(*q));
    cudaError_t rc;

    if (!q) {
        rt_fail(err, "out of memory");
        return NULL;
    }
    *q = (struct gpu_req){g, NULL, g->c->seq, rt_now() + g->c->timeout};
    if ((rc = g->api->cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming)) ==
            cudaSuccess &&
        (rc = g->api->cudaEventRecord(q->done, stream)) == cudaSuccess)
        return q;
    rt_fail(err, "ddprt: GPU collective #%llu: its request's event: %s",
            (unsigned long long)q->seq, g->api->cudaGetErrorString(rc));
    if (q->done)
        g->api->cudaEventDestroy(q->done);
    free(q);
    return NULL;
}

/* After a failure the event goes to the work list, destroyed by finalize
 * once the abort has returned: destroying it now could wait for CUDA's
 * context lock, which the abort's cleanup holds. */
void gpu_req_free(struct gpu_req *q)
{
    gpu_work_t w = {.done = q->done, .seq = q->seq};

    if (gpu_failed(q->g, NULL) == 0 || work_add(q->g, w, NULL) < 0)
        q->g->api->cudaEventDestroy(q->done);
    free(q);
}

int gpu_req_test(struct gpu_req *q, int *done, drt_error_t *err)
{
    struct gpu *g = q->g;
    cudaError_t rc;

    *done = 1;
    /* the failure first: after an abort the event may complete over
     * garbage, and the query may wait for the abort's context lock */
    if (gpu_failed(g, err) < 0)
        return -1;
    if ((rc = g->api->cudaEventQuery(q->done)) == cudaSuccess)
        return gpu_failed(g, err);
    if (rc != cudaErrorNotReady || rt_now() > q->deadline)
        return fail_work(g, q->seq, rc, err);
    *done = 0;
    return 0;
}

int gpu_req_wait(struct gpu_req *q, drt_error_t *err)
{
    int done = 0, rc;

    for (unsigned spins = 0; (rc = gpu_req_test(q, &done, err)) == 0 && !done; spins++)
        gpu_idle(spins);
    gpu_req_free(q);
    return rc;
}
#endif
