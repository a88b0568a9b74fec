/* SPDX-License-Identifier: Apache-2.0 */
/* The NCCL backend of the collective seam (backend.h): the world, node and
 * rail groups' collectives on their NCCL communicators, and the GPU set's
 * memory, fences, timers and lanes. Everything is enqueued on the current
 * call's stream (g->cur) from the caller's thread, in the same order on
 * every rank; nothing here blocks in CUDA: waits poll an event under
 * DDPRT_TIMEOUT. The algorithms themselves are algo.c's and auto.c's. */
#include "config.h"

#include "gpu.h"

#ifdef CUDALOAD_HEADERS
#include <stdio.h>
#include <stdlib.h>

static struct gpu *of(const coll_set_t *s)
{
    return s->impl;
}

static int cuda_ok(struct gpu *g, cudaError_t rc, const char *what, drt_error_t *err)
{
    if (rc == cudaSuccess)
        return 0;
    return gpu_fail(g, err, "ddprt: GPU collective #%llu: %s: %s",
                    (unsigned long long)g->c->seq, what, g->api->cudaGetErrorString(rc));
}

int nccl_begin(struct gpu *g, const nccl_group_t *ng, drt_error_t *err)
{
    pthread_mutex_lock(&g->issue);
    if (ng->comm && gpu_failed(g, err) == 0)
        return 0;
    pthread_mutex_unlock(&g->issue);
    if (gpu_failed(g, err) == 0)
        rt_fail(err, "ddprt: the NCCL %s communicator was aborted", ng->name);
    return -1;
}

/* nccl_settle (gpu.h), then destroys *op (when given) before letting the comm go */
static int nccl_settle_op(struct gpu *g, nccl_group_t *ng, ncclResult_t rc,
                          const char *what, ncclRedOp_t *op, drt_error_t *err)
{
    const cuda_api_t *a = g->api;
    double deadline = rt_now() + g->c->timeout;
    char last[160];

    /* non-blocking communicators: the call may still be in progress, and
     * the communicator takes no other call until it is not */
    for (unsigned spins = 0; rc == ncclInProgress; spins++) {
        pthread_mutex_unlock(&g->issue);
        if (rt_now() > deadline)
            return gpu_fail(g, err, "ddprt: GPU collective #%llu: %s on the NCCL %s "
                            "communicator still in progress after DDPRT_TIMEOUT=%gs (a peer "
                            "did not join)", (unsigned long long)g->c->seq, what, ng->name,
                            g->c->timeout);
        gpu_idle(spins);
        if (nccl_begin(g, ng, err) < 0)
            return -1;
        if (a->ncclCommGetAsyncError(ng->comm, &rc) != ncclSuccess)
            rc = ncclInternalError;
    }
    snprintf(last, sizeof(last), "%s", rc == ncclSuccess ? "" : a->ncclGetLastError(ng->comm));
    if (op)
        a->ncclRedOpDestroy(*op, ng->comm);
    pthread_mutex_unlock(&g->issue);
    if (rc == ncclSuccess)
        return 0;
    /* the peers' kernels wait for this rank's: tell them whose error it is */
    notice_send_kind(g->c, g->c->rank, NOTICE_GPU_ERROR, g->c->seq);
    return gpu_fail(g, err, "ddprt: GPU collective #%llu: %s on the NCCL %s communicator "
                    "failed: %s%s%s", (unsigned long long)g->c->seq, what, ng->name,
                    a->ncclGetErrorString(rc), *last ? ": " : "", last);
}

int nccl_settle(struct gpu *g, nccl_group_t *ng, ncclResult_t rc, const char *what,
                drt_error_t *err)
{
    return nccl_settle_op(g, ng, rc, what, NULL, err);
}

int gpu_wait_event(struct gpu *g, cudaEvent_t ev, const char *what, drt_error_t *err)
{
    double deadline = rt_now() + g->c->timeout;

    for (unsigned spins = 0;; spins++) {
        cudaError_t rc;
        /* the failure first: an abort in progress may hold CUDA's context
         * lock, and cudaEventQuery would wait for it */
        if (gpu_failed(g, err) < 0)
            return -1;
        if ((rc = g->api->cudaEventQuery(ev)) == cudaSuccess)
            return 0;
        if (rc != cudaErrorNotReady)
            return cuda_ok(g, rc, what, err);
        if (rt_now() > deadline)
            return gpu_fail(g, err, "ddprt: GPU collective #%llu: %s: not done after "
                            "DDPRT_TIMEOUT=%gs (a peer stopped, or the stream waits on "
                            "something that never happens)", (unsigned long long)g->c->seq,
                            what, g->c->timeout);
        gpu_idle(spins);
    }
}

/* ---- the group backend ---- */

static ncclDataType_t nccl_type(drt_dtype_t t)
{
    static const ncclDataType_t map[] = {ncclFloat32, ncclFloat64, ncclBfloat16,
                                         ncclFloat16, ncclInt32,   ncclInt64};
    return map[t];
}

static int is_float(drt_dtype_t t)
{
    return t != DRT_INT32 && t != DRT_INT64;
}

/* The reduction for x on a group (issue held). AVG divides by avg_n once:
 * ncclAvg when the group is the whole average, else a sum of floats each
 * pre-multiplied by 1/avg_n (made here, destroyed by the caller). */
static ncclResult_t red_op(struct gpu *g, nccl_group_t *ng, int n, const coll_args_t *x,
                           ncclRedOp_t *op, int *made)
{
    union {
        float f;
        double d;
        uint16_t h;
    } k;
    float f = 1.0f / (float)x->avg_n;

    static const ncclRedOp_t map[] = {ncclSum, ncclAvg, ncclMin, ncclMax};
    *made = 0;
    *op = map[x->op];
    if (x->op != DRT_AVG || n == x->avg_n)
        return ncclSuccess;
    if (x->t == DRT_FLOAT64)
        k.d = 1.0 / (double)x->avg_n;
    else if (x->t == DRT_FLOAT32)
        k.f = f;
    else
        rt_from_f32(&k.h, &f, 1, x->t);
    *made = 1;
    return g->api->ncclRedOpCreatePreMulSum(op, &k, nccl_type(x->t), ncclScalarHostImmediate,
                                            ng->comm);
}

enum { RS, AR };

/* a reduce-scatter or allreduce of count elements from in to out */
static int reduce_call(coll_set_t *s, const group_t *grp, int kind, const void *in, void *out,
                       size_t count, const coll_args_t *x, drt_error_t *err)
{
    struct gpu *g = of(s);
    nccl_group_t *ng = grp->impl;
    const cuda_api_t *a = g->api;
    ncclRedOp_t op;
    ncclResult_t rc;
    int made;

    if (x->op == DRT_AVG && !is_float(x->t) && grp->n != x->avg_n)
        return rt_fail(err, "ddprt: an integer average over the %s group (%d of %d ranks) "
                       "would round more than once: use the flat algorithm", ng->name, grp->n,
                       x->avg_n);
    if (nccl_begin(g, ng, err) < 0)
        return -1;
    rc = red_op(g, ng, grp->n, x, &op, &made);
    made &= rc == ncclSuccess;
    if (rc == ncclSuccess && kind == RS)
        rc = a->ncclReduceScatter(in, out, count, nccl_type(x->t), op, ng->comm, g->cur);
    else if (rc == ncclSuccess)
        rc = a->ncclAllReduce(in, out, count, nccl_type(x->t), op, ng->comm, g->cur);
    /* the op may go once the call using it has returned, which on a
     * non-blocking communicator is when it is no longer in progress */
    return nccl_settle_op(g, ng, rc, kind == RS ? "reduce-scatter" : "allreduce",
                          made ? &op : NULL, err);
}

/* NCCL's reduce-scatter and allgather take equal, contiguous blocks in
 * rank order (the set has equal_chunks, so algo.c gives exactly that) */
static int blocks(const group_t *grp, const span_t *sp, size_t esize, drt_error_t *err)
{
    for (int i = 1; i < grp->n; i++)
        if (sp[i].count != sp[0].count || sp[i].off != sp[0].off + (size_t)i * sp[0].count * esize)
            return rt_fail(err, "ddprt: NCCL %s: spans must be equal and contiguous "
                           "(span %d: %zu elements at byte %zu)",
                           ((const nccl_group_t *)grp->impl)->name, i, sp[i].count, sp[i].off);
    return 0;
}

static int nccl_reduce_scatter(coll_set_t *s, const group_t *grp, const coll_args_t *x,
                               const span_t *sp, drt_error_t *err)
{
    const unsigned char *in = (x->src ? x->src : x->buf) + sp[0].off;

    if (blocks(grp, sp, x->esize, err) < 0)
        return -1;
    /* in place when out is in's block me: NCCL's in-place rule */
    return reduce_call(s, grp, RS, in, x->buf + sp[grp->me].off, sp[0].count, x, err);
}

static int nccl_allreduce(coll_set_t *s, const group_t *grp, const coll_args_t *x, size_t off,
                          drt_error_t *err)
{
    const unsigned char *in = (x->src ? x->src : x->buf) + off;

    return reduce_call(s, grp, AR, in, x->buf + off, x->count, x, err);
}

/* bytes: the types do not matter to a copy */
static int nccl_allgather(coll_set_t *s, const group_t *grp, unsigned char *buf,
                          const span_t *sp, size_t esize, drt_error_t *err)
{
    struct gpu *g = of(s);
    nccl_group_t *ng = grp->impl;
    ncclResult_t rc;

    if (blocks(grp, sp, esize, err) < 0 || nccl_begin(g, ng, err) < 0)
        return -1;
    rc = g->api->ncclAllGather(buf + sp[grp->me].off, buf + sp[0].off, sp[0].count * esize,
                               ncclInt8, ng->comm, g->cur);
    return nccl_settle(g, ng, rc, "allgather", err);
}

static int nccl_broadcast(coll_set_t *s, const group_t *grp, void *buf, size_t bytes, int root,
                          drt_error_t *err)
{
    struct gpu *g = of(s);
    nccl_group_t *ng = grp->impl;
    ncclResult_t rc;

    if (nccl_begin(g, ng, err) < 0)
        return -1;
    rc = g->api->ncclBroadcast(buf, buf, bytes, ncclInt8, root, ng->comm, g->cur);
    return nccl_settle(g, ng, rc, "broadcast", err);
}

const group_ops_t nccl_group_ops = {"nccl", nccl_reduce_scatter, nccl_allgather, nccl_allreduce,
                                    nccl_broadcast};

/* ---- the rail through host memory (DDPRT_GPU_RAIL=host) ----
 * For GPU nodes whose NICs cannot reach GPU memory (no GPUDirect RDMA), or
 * where NCCL's network transport is not wanted: the rail phase copies this
 * rank's span to pinned host memory, runs the CPU backend's rail ring over
 * TCP, and copies the result back (Horovod's cross-node phase does the
 * same over MPI). The node phases stay on NCCL. 16-bit floats cross as 16
 * bits, as on the CPU path. The copies are waited for
 * (polled, under DDPRT_TIMEOUT), so the pipelined hier runs this phase in
 * turn with the node phases rather than beside them. */
static int stage_room(struct gpu *g, size_t bytes, drt_error_t *err)
{
    if (bytes > g->stage_cap) {
        cudaError_t rc;
        if (g->stage)
            g->api->cudaFreeHost(g->stage);
        g->stage = NULL;
        g->stage_cap = 0;
        if ((rc = g->api->cudaHostAlloc((void **)&g->stage, bytes, cudaHostAllocDefault)) !=
            cudaSuccess)
            return rt_fail(err, "ddprt: cannot pin %zu bytes of host memory for the rail "
                           "phase: %s", bytes, g->api->cudaGetErrorString(rc));
        g->stage_cap = bytes;
    }
    if (!g->stage_ev)
        return cuda_ok(g, g->api->cudaEventCreateWithFlags(&g->stage_ev, cudaEventDisableTiming),
                       "cudaEventCreateWithFlags", err);
    return 0;
}

/* a copy on the current lane, waited for (polled) */
static int copy_wait(struct gpu *g, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind, drt_error_t *err)
{
    const cuda_api_t *a = g->api;

    if (cuda_ok(g, a->cudaMemcpyAsync(dst, src, bytes, kind, g->cur), "cudaMemcpyAsync",
                err) < 0 ||
        cuda_ok(g, a->cudaEventRecord(g->stage_ev, g->cur), "cudaEventRecord", err) < 0)
        return -1;
    return gpu_wait_event(g, g->stage_ev, "the rail phase's copy through host memory", err);
}

static int staged_allreduce(coll_set_t *s, const group_t *grp, const coll_args_t *x, size_t off,
                            drt_error_t *err)
{
    struct gpu *g = of(s);
    drt_comm_t *c = g->c;
    size_t bytes = x->count * x->esize;
    const unsigned char *in = (x->src ? x->src : x->buf) + off;
    coll_args_t h = {NULL, NULL, x->count, x->esize, x->t, x->op, x->avg_n};

    (void)grp; /* the CPU rail group: the same ranks in the same order */
    if (stage_room(g, bytes, err) < 0 ||
        copy_wait(g, g->stage, in, bytes, cudaMemcpyDeviceToHost, err) < 0)
        return -1;
    h.buf = g->stage;
    if (c->rail.ops->allreduce(&c->cpu, &c->rail, &h, 0, err) < 0)
        return gpu_fail(g, err, "%s", err->text); /* the peers' NCCL phases must stop too */
    return copy_wait(g, x->buf + off, g->stage, bytes, cudaMemcpyHostToDevice, err);
}

/* algo.c asks a rail group for its allreduce only */
static int staged_only(drt_error_t *err)
{
    return rt_fail(err, "ddprt: the host-staged rail group runs allreduce only");
}

static int staged_rs(coll_set_t *s, const group_t *grp, const coll_args_t *x, const span_t *sp,
                     drt_error_t *err)
{
    (void)s, (void)grp, (void)x, (void)sp;
    return staged_only(err);
}

static int staged_ag(coll_set_t *s, const group_t *grp, unsigned char *buf, const span_t *sp,
                     size_t esize, drt_error_t *err)
{
    (void)s, (void)grp, (void)buf, (void)sp, (void)esize;
    return staged_only(err);
}

static int staged_bcast(coll_set_t *s, const group_t *grp, void *buf, size_t bytes, int root,
                        drt_error_t *err)
{
    (void)s, (void)grp, (void)buf, (void)bytes, (void)root;
    return staged_only(err);
}

const group_ops_t staged_rail_ops = {"nccl node + TCP rail", staged_rs, staged_ag,
                                     staged_allreduce, staged_bcast};

void nccl_stage_free(struct gpu *g)
{
    if (g->stage)
        g->api->cudaFreeHost(g->stage);
    if (g->stage_ev)
        g->api->cudaEventDestroy(g->stage_ev);
    g->stage = NULL;
    g->stage_ev = NULL;
    g->stage_cap = 0;
}

/* ---- device memory, fences, timers: stream-ordered on lane 0 ---- */

static void *gpu_alloc(coll_set_t *s, size_t bytes, drt_error_t *err)
{
    struct gpu *g = of(s);
    void *p = NULL;
    cudaError_t rc = g->api->cudaMallocAsync(&p, bytes ? bytes : 1, g->stream);

    if (rc != cudaSuccess) {
        rt_fail(err, "ddprt: cannot allocate %zu bytes on CUDA device %d: %s", bytes,
                g->device, g->api->cudaGetErrorString(rc));
        return NULL;
    }
    return p;
}

static void gpu_release(coll_set_t *s, void *p)
{
    struct gpu *g = of(s);

    g->api->cudaFreeAsync(p, g->stream);
}

static int gpu_copy(coll_set_t *s, void *dst, const void *src, size_t bytes, drt_error_t *err)
{
    struct gpu *g = of(s);

    return cuda_ok(g, g->api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->cur),
                   "cudaMemcpyAsync", err);
}

/* lane 0's work so far done, polled */
static int drain(struct gpu *g, cudaEvent_t ev, const char *what, drt_error_t *err)
{
    if (cuda_ok(g, g->api->cudaEventRecord(ev, g->stream), "cudaEventRecord", err) < 0)
        return -1;
    return gpu_wait_event(g, ev, what, err);
}

static int gpu_fence(coll_set_t *s, drt_error_t *err)
{
    struct gpu *g = of(s);

    return drain(g, g->fork, "fence", err) < 0 ? -1 : cpu_fence(g->c, err);
}

static int gpu_timer_start(coll_set_t *s, drt_error_t *err)
{
    struct gpu *g = of(s);

    return cuda_ok(g, g->api->cudaEventRecord(g->t0, g->stream), "cudaEventRecord", err);
}

static int gpu_timer_stop(coll_set_t *s, double *seconds, drt_error_t *err)
{
    struct gpu *g = of(s);
    float ms = 0;

    if (drain(g, g->t1, "timed run", err) < 0 ||
        cuda_ok(g, g->api->cudaEventElapsedTime(&ms, g->t0, g->t1), "cudaEventElapsedTime",
                err) < 0)
        return -1;
    *seconds = ms / 1e3;
    return 0;
}

/* ---- lanes: a second stream, ordered by events, issued from this thread ---- */

static int lane_open(coll_set_t *s, drt_error_t *err)
{
    struct gpu *g = of(s);

    g->lane_calls = g->lane_failed = 0;
    if (g->side)
        return 0;
    return cuda_ok(g, g->api->cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags", err);
}

/* lane_done[k] for side call k, made on first need and kept */
static int lane_event(struct gpu *g, int k, drt_error_t *err)
{
    cudaEvent_t *more;

    if (k < g->nlane_done)
        return 0;
    if (!(more = realloc(g->lane_done, (size_t)(k + 1) * sizeof(*more))))
        return rt_fail(err, "out of memory");
    g->lane_done = more;
    if (cuda_ok(g, g->api->cudaEventCreateWithFlags(&more[k], cudaEventDisableTiming),
                "cudaEventCreateWithFlags", err) < 0)
        return -1;
    g->nlane_done = k + 1;
    return 0;
}

static int lane_side(coll_set_t *s, int (*fn)(coll_set_t *, void *, drt_error_t *), void *arg,
                     drt_error_t *err)
{
    struct gpu *g = of(s);
    const cuda_api_t *a = g->api;
    int k = g->lane_calls, rc;

    if (lane_event(g, k, err) < 0 ||
        cuda_ok(g, a->cudaEventRecord(g->fork, g->stream), "cudaEventRecord", err) < 0 ||
        cuda_ok(g, a->cudaStreamWaitEvent(g->side, g->fork, 0), "cudaStreamWaitEvent", err) < 0)
        return -1;
    g->cur = g->side;
    rc = fn(s, arg, err);
    g->cur = g->stream;
    g->lane_calls++;
    if (rc < 0)
        return g->lane_failed = -1;
    return cuda_ok(g, a->cudaEventRecord(g->lane_done[k], g->side), "cudaEventRecord", err);
}

static int lane_join(coll_set_t *s, int k, drt_error_t *err)
{
    struct gpu *g = of(s);

    if (k >= g->lane_calls)
        return rt_fail(err, "ddprt: lane join %d before side call %d", k, k);
    return cuda_ok(g, g->api->cudaStreamWaitEvent(g->stream, g->lane_done[k], 0),
                   "cudaStreamWaitEvent", err);
}

/* lane 0 waits for the side lane's last call: later work sees it done */
static int lane_close(coll_set_t *s, int failed, drt_error_t *err)
{
    struct gpu *g = of(s);

    if (failed || g->lane_failed)
        return -1;
    if (!g->lane_calls)
        return 0;
    return lane_join(s, g->lane_calls - 1, err);
}

void nccl_lanes_free(struct gpu *g)
{
    for (int k = 0; k < g->nlane_done; k++)
        g->api->cudaEventDestroy(g->lane_done[k]);
    free(g->lane_done);
    g->lane_done = NULL;
    g->nlane_done = 0;
    if (g->side)
        g->api->cudaStreamDestroy(g->side);
    g->side = NULL;
}

static const lane_ops_t nccl_lane_ops = {lane_open, lane_side, lane_join, lane_close};

const set_ops_t nccl_set_ops = {gpu_alloc,       gpu_release,    gpu_copy,      gpu_fence,
                                gpu_timer_start, gpu_timer_stop, &nccl_lane_ops};
#endif
