/* SPDX-License-Identifier: Apache-2.0 */
/* GPU buffers over NCCL: the public drt_gpu_* calls (ddprt.h) and the
 * device memory of the gradient buckets. What each call needs lives below
 * (gpu.h lists the files): the device (gpudev.c), the communicators
 * (gpucomm.c), the failure state and the watchdog (gpuwatch.c). */
#include "config.h"

#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_args(drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    if (!drt_dtype_size(t))
        return rt_fail(err, "ddprt: drt_gpu_allreduce: unknown data type %d", (int)t);
    if ((unsigned)op > DRT_MAX)
        return rt_fail(err, "ddprt: drt_gpu_allreduce: unknown operation %d", (int)op);
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

void gpu_pause(drt_comm_t *c)
{
    (void)c;
}

void gpu_shrink(drt_comm_t *c, const uint32_t *m, int n)
{
    (void)c, (void)m, (void)n;
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
        return rt_fail(err, "ddprt: DDPRT_GPU_RAIL=%s: not nccl or host", r);
    g->rail_host = r && !strcmp(r, "host");
    if (g->algo_set || !v || !*v)
        return 0;
    if (drt_algo_parse(v, &g->algo) < 0)
        return rt_fail(err, "ddprt: DDPRT_GPU_ALGO=%s: not flat, hier or auto", v);
    return 0;
}

/* what the set and attach made on the device (their frees synchronise
 * it: never while an abort may still be running there) */
static void device_free(struct gpu *g)
{
    if (g->api && !g->td_stuck) {
        nccl_lanes_free(g);
        nccl_stage_free(g);
        if (g->fork)
            g->api->cudaEventDestroy(g->fork);
        if (g->t0)
            g->api->cudaEventDestroy(g->t0);
        if (g->t1)
            g->api->cudaEventDestroy(g->t1);
        if (g->warm)
            g->api->cudaFree(g->warm);
    }
    g->fork = g->t0 = g->t1 = NULL;
    g->warm = NULL;
}

/* undo a failed attach: this rank's part only (peers fail on their own) */
static void attach_undo(struct gpu *g)
{
    gpu_teardown_wait(g, 0);
    device_free(g);
    g->device = -1;
}

static int attach(struct gpu *g, int device, drt_error_t *err)
{
    drt_comm_t *c = g->c;
    int mine = env_algo(g, err) < 0 ? -1 : gpu_local_setup(g, device, err);

    if (gpu_comms_attach(g, mine, err) < 0 || gpu_watch_start(g, err) < 0)
        return -1;
    rt_log(c, "GPU: CUDA device %d, NCCL %d from %s%s; world %d, node %d, rail %d ranks",
           g->device, g->api->nccl_version, g->api->nccl_file,
           g->api->nccl_reused ? " (already loaded)" : "", g->groups[0].n, g->groups[1].n,
           g->groups[2].n);
    return 0;
}

int drt_gpu_attach(drt_comm_t *c, int device, drt_error_t *err)
{
    struct gpu *g = gpu_state(c);

    if (!g)
        return rt_fail(err, "out of memory");
    if (g->dog_started) {
        if (device >= 0 && device != g->device)
            return rt_fail(err, "ddprt: drt_gpu_attach: already attached to CUDA device %d, "
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

/* the rank's device, current on this thread (and left so: gpudev.c says
 * why) */
static int enter(struct gpu *g, drt_error_t *err)
{
    cudaError_t rc = g->api->cudaSetDevice(g->device);

    if (rc != cudaSuccess)
        return rt_fail(err, "ddprt: CUDA device %d: %s", g->device,
                       g->api->cudaGetErrorString(rc));
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

static int gpu_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                         drt_op_t op, void *stream, drt_error_t *err)
{
    coll_args_t x = {recv, send == recv ? NULL : send, count, drt_dtype_size(t), t, op, c->size};
    struct gpu *g;

    if (check_args(t, op, err) < 0 || drt_gpu_attach(c, -1, err) < 0)
        return -1;
    request_drain(c); /* auto's fences and a host rail use the CPU groups */
    g = c->gpu;
    c->seq++;
    if (!count)
        return 0;
    if (gpu_failed(g, err) < 0 || enter(g, err) < 0)
        return -1;
    g->stream = g->cur = stream;
    if (run(g, &x, err) < 0)
        return -1;
    return gpu_track(g, stream, err);
}

int drt_gpu_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                      drt_op_t op, void *stream, drt_error_t *err)
{
    return rt_status(c, gpu_allreduce(c, send, recv, count, t, op, stream, err));
}

int drt_gpu_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, void *stream, drt_request_t **req,
                       drt_error_t *err)
{
    struct gpu_req *q;

    *req = NULL;
    if (gpu_allreduce(c, send, recv, count, t, op, stream, err) < 0 ||
        !(q = gpu_req_new(c->gpu, stream, err)))
        return rt_status(c, -1);
    if (!(*req = request_gpu(c, q))) {
        gpu_req_free(q);
        return rt_fail(err, "out of memory");
    }
    return 0;
}

static int gpu_sync(drt_comm_t *c, void *stream, drt_error_t *err)
{
    struct gpu *g = c->gpu;

    if (!g || !g->dog_started)
        return rt_fail(err, "ddprt: drt_gpu_sync: no GPU attached (call drt_gpu_attach "
                       "first)");
    if (gpu_failed(g, err) < 0 || enter(g, err) < 0)
        return -1;
    if (g->api->cudaEventRecord(g->fork, stream) != cudaSuccess)
        return rt_fail(err, "ddprt: drt_gpu_sync: cudaEventRecord failed");
    return gpu_wait_event(g, g->fork, "drt_gpu_sync", err);
}

int drt_gpu_sync(drt_comm_t *c, void *stream, drt_error_t *err)
{
    return rt_status(c, gpu_sync(c, stream, err));
}

/* ---- the end ---- */

/* the state freed; c->gpu_child (drt_shrink's) stays */
static void gpu_release(drt_comm_t *c)
{
    struct gpu *g = c->gpu;

    if (!g)
        return;
    if (g->dog_started) {
        gpu_watch_stop(g);
        /* destroy once all work is done (every rank of a node must make the
         * same choice: ranks that finalize together see their work end
         * together); abort only on a failure or after DDPRT_TIMEOUT */
        gpu_teardown_wait(g, gpu_work_drained(g));
        device_free(g);
    }
    gpu_teardown_wait(g, 0); /* an attach's failure may have left one under way */
    gpu_work_free(g);
    pthread_mutex_destroy(&g->issue);
    pthread_mutex_destroy(&g->mu);
    free(g);
    c->gpu = NULL;
}

void gpu_finalize(drt_comm_t *c)
{
    gpu_release(c);
    gpu_child_drop(c);
}

void gpu_pause(drt_comm_t *c)
{
    if (c->gpu && c->gpu->dog_started)
        gpu_watch_stop(c->gpu);
}

void gpu_shrink(drt_comm_t *c, const uint32_t *m, int n)
{
    struct gpu *g = c->gpu;
    int *excl = g ? calloc((size_t)c->size, sizeof(int)) : NULL;
    int nexcl = 0;

    gpu_child_drop(c); /* an earlier shrink's, never adopted: its members changed again */
    for (int r = 0, i = 0; excl && r < c->size; r++) {
        if (i < n && m[i] == (uint32_t)r)
            i++;
        else
            excl[nexcl++] = r;
    }
    if (g && g->dog_started)
        gpu_comms_shrink(g, excl, excl ? nexcl : 0);
    free(excl);
    gpu_release(c);
}

/* ---- device memory for the gradient buckets (bucket.c) ---- */

static int buf_done(struct gpu *g, cudaError_t rc, const char *what, drt_error_t *err)
{
    if (rc == cudaSuccess)
        return 0;
    return rt_fail(err, "ddprt: gradient buckets: %s on CUDA device %d: %s", what, g->device,
                   g->api->cudaGetErrorString(rc));
}

int gpu_buf_alloc(drt_comm_t *c, size_t bytes, void **p, drt_error_t *err)
{
    *p = NULL;
    if (drt_gpu_attach(c, -1, err) < 0 || enter(c->gpu, err) < 0)
        return -1;
    return buf_done(c->gpu, c->gpu->api->cudaMalloc(p, bytes), "cudaMalloc", err);
}

void gpu_buf_free(drt_comm_t *c, void *p)
{
    drt_error_t e;

    /* cudaFree synchronises the device: not while an abort may run there */
    if (p && c->gpu && !c->gpu->td_stuck && enter(c->gpu, &e) == 0)
        c->gpu->api->cudaFree(p);
}

int gpu_buf_copy(drt_comm_t *c, void *dst, const void *src, size_t bytes, void *stream,
                 drt_error_t *err)
{
    if (!c->gpu || enter(c->gpu, err) < 0)
        return c->gpu ? -1 : rt_fail(err, "ddprt: gradient buckets: no GPU attached");
    return buf_done(c->gpu,
                    c->gpu->api->cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                                 (cudaStream_t)stream),
                    "cudaMemcpyAsync", err);
}

int gpu_buf_zero(drt_comm_t *c, void *p, size_t bytes, void *stream, drt_error_t *err)
{
    if (!c->gpu || enter(c->gpu, err) < 0)
        return c->gpu ? -1 : rt_fail(err, "ddprt: gradient buckets: no GPU attached");
    return buf_done(c->gpu, c->gpu->api->cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream),
                    "cudaMemsetAsync", err);
}

drt_algo_t gpu_last_algo(const drt_comm_t *c)
{
    return c->gpu ? c->gpu->set.last : DRT_ALGO_FLAT;
}
#endif
