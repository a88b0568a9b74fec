/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-allreduce-bench --device cuda: device buffers on the rank's GPU.
 * Each call is timed on the device, with CUDA events recorded around it on
 * the stream (so launch overhead counts, for ddprt and --nccl alike), then
 * its result is copied back and checked: every iteration. CUDA and NCCL
 * come through runtime/gpu/cudaload.h, the library's own table, so the tool and
 * libddprt use one copy of each. */
#include "config.h"
#include "bench.h"
#include "gpu/cudaload.h"

#include <stdio.h>
#include <string.h>

#ifndef CUDALOAD_HEADERS
int gpu_open(drt_comm_t *c, const opts_t *o, char *desc, size_t len, drt_error_t *err)
{
    (void)c, (void)o, (void)desc, (void)len;
    cudaload(err);
    return -1;
}

int gpu_measure(drt_comm_t *c, const opts_t *o, size_t count, double *seconds, long *wrong,
                drt_error_t *err)
{
    (void)c, (void)o, (void)count, (void)seconds, (void)wrong;
    cudaload(err);
    return -1;
}

void gpu_close(void)
{
}
#else
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static struct {
    const cuda_api_t *api;
    cudaStream_t s;
    cudaEvent_t ev[2];
    ncclComm_t comm; /* --nccl */
} g;

static int cuda_err(cudaError_t e, const char *what, drt_error_t *err)
{
    if (e == cudaSuccess)
        return 0;
    snprintf(err->text, sizeof(err->text), "%s: %s", what, g.api->cudaGetErrorString(e));
    return -1;
}
#define CU(err, f, args) cuda_err(g.api->f args, #f, err)

static int nccl_err(ncclResult_t r, const char *what, drt_error_t *err)
{
    if (r == ncclSuccess)
        return 0;
    snprintf(err->text, sizeof(err->text), "%s: %s (%s)", what, g.api->ncclGetErrorString(r),
             g.api->ncclGetLastError(g.comm));
    return -1;
}

/* A blocking ncclCommInitRank (NCCL's default, as nccl-tests use it) has no
 * deadline of its own: a rank that never comes ends the run instead. */
static void init_too_long(int sig)
{
    static const char msg[] = "ddp-allreduce-bench: ncclCommInitRankConfig did not finish "
                              "within twice DDPRT_TIMEOUT (is every rank running?)\n";
    (void)sig;
    if (write(2, msg, sizeof(msg) - 1) < 0)
        _exit(1);
    _exit(1);
}

static unsigned init_limit(void)
{
    const char *s = getenv("DDPRT_TIMEOUT");
    double t = s && atof(s) > 0 ? atof(s) : 300;

    return 2 * t > 86400 ? 86400 : (unsigned)(2 * t) + 1;
}

/* --nccl: a world communicator of our own, its id from rank 0. */
static int nccl_open(drt_comm_t *c, drt_error_t *err)
{
    struct {
        int rc;
        ncclUniqueId id;
    } msg = {0};
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t r;

    if (drt_rank(c) == 0)
        msg.rc = g.api->ncclGetUniqueId(&msg.id);
    if (drt_broadcast(c, &msg, sizeof(msg), 0, err) < 0)
        return -1;
    if (msg.rc != ncclSuccess)
        return nccl_err((ncclResult_t)msg.rc, "ncclGetUniqueId on rank 0", err);
    signal(SIGALRM, init_too_long);
    alarm(init_limit());
    r = g.api->ncclCommInitRankConfig(&g.comm, drt_size(c), msg.id, drt_rank(c), &cfg);
    alarm(0);
    return nccl_err(r, "ncclCommInitRankConfig", err);
}

int gpu_open(drt_comm_t *c, const opts_t *o, char *desc, size_t len, drt_error_t *err)
{
    if (!(g.api = cudaload(err)) || drt_gpu_attach(c, -1, err) < 0)
        return -1;
    drt_gpu_set_algo(c, o->algo);
    if (CU(err, cudaSetDevice, (drt_gpu_device(c))) ||
        CU(err, cudaStreamCreateWithFlags, (&g.s, cudaStreamNonBlocking)) ||
        CU(err, cudaEventCreateWithFlags, (&g.ev[0], cudaEventDefault)) ||
        CU(err, cudaEventCreateWithFlags, (&g.ev[1], cudaEventDefault)))
        return -1;
    if (o->nccl && nccl_open(c, err) < 0)
        return -1;
    snprintf(desc, len, "device cuda:%d, NCCL %d.%d.%d (%s)", drt_gpu_device(c),
             g.api->nccl_version / 10000, g.api->nccl_version / 100 % 100,
             g.api->nccl_version % 100, g.api->nccl_file);
    return 0;
}

static ncclDataType_t nccl_type(drt_dtype_t t)
{
    static const ncclDataType_t map[] = {ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat16,
                                         ncclInt32, ncclInt64};
    return map[t];
}

/* One call between the two events, finished (bounded by DDPRT_TIMEOUT). */
static int timed_call(drt_comm_t *c, const opts_t *o, const void *send, void *recv, size_t count,
                      float *ms, drt_error_t *err)
{
    static const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMin, ncclMax};

    if (CU(err, cudaEventRecord, (g.ev[0], g.s)))
        return -1;
    if (o->nccl ? nccl_err(g.api->ncclAllReduce(send, recv, count, nccl_type(o->dtype),
                                                ops[o->op], g.comm, g.s), "ncclAllReduce", err)
                : drt_gpu_allreduce(c, send, recv, count, o->dtype, o->op, g.s, err))
        return -1;
    if (CU(err, cudaEventRecord, (g.ev[1], g.s)) || drt_gpu_sync(c, g.s, err) < 0)
        return -1;
    return CU(err, cudaEventElapsedTime, (ms, g.ev[0], g.ev[1]));
}

/* How far a correct result may be off: NCCL sums 16-bit floats in 16 bits
 * and averages floats by pre-multiplying with 1/n (rounding each term). */
static double tolerance(drt_dtype_t t)
{
    static const double rel[] = {0x1p-23, 0x1p-52, 0x1p-8, 0x1p-10, 0, 0};
    return rel[t];
}

static int run_iters(drt_comm_t *c, const opts_t *o, size_t count, void *send, void *recv,
                     unsigned char *host, double *seconds, long *wrong, drt_error_t *err)
{
    size_t bytes = count * drt_dtype_size(o->dtype);

    for (int i = 0; i < o->warmup + o->iters; i++) {
        float ms = 0;
        /* poison first: a call that wrote nothing shows as wrong */
        if (CU(err, cudaMemsetAsync, (recv, 0xff, bytes, g.s)) || drt_barrier(c, err) < 0 ||
            timed_call(c, o, send, recv, count, &ms, err) < 0)
            return -1;
        if (i < o->warmup)
            continue;
        *seconds += ms * 1e-3;
        if (CU(err, cudaMemcpy, (host, recv, bytes, cudaMemcpyDeviceToHost)))
            return -1;
        *wrong += check(o, host, count, drt_size(c), tolerance(o->dtype));
    }
    *seconds /= o->iters;
    return 0;
}

int gpu_measure(drt_comm_t *c, const opts_t *o, size_t count, double *seconds, long *wrong,
                drt_error_t *err)
{
    size_t bytes = count * drt_dtype_size(o->dtype);
    unsigned char *host = malloc(bytes + 1);
    void *send = NULL, *recv = NULL;
    int rc = -1;

    if (!host)
        snprintf(err->text, sizeof(err->text), "out of host memory for %zu bytes (lower -e)", bytes);
    else if (!CU(err, cudaMalloc, (&send, bytes + 1)) && !CU(err, cudaMalloc, (&recv, bytes + 1))) {
        for (size_t i = 0; i < count; i++)
            store(host, i, o->dtype, input(drt_rank(c), i));
        if (!CU(err, cudaMemcpy, (send, host, bytes, cudaMemcpyHostToDevice)))
            rc = run_iters(c, o, count, send, recv, host, seconds, wrong, err);
    }
    g.api->cudaFree(send);
    g.api->cudaFree(recv);
    free(host);
    return rc;
}

void gpu_close(void)
{
    if (!g.api)
        return;
    if (g.comm)
        g.api->ncclCommDestroy(g.comm);
    for (int i = 0; i < 2; i++)
        if (g.ev[i])
            g.api->cudaEventDestroy(g.ev[i]);
    if (g.s)
        g.api->cudaStreamDestroy(g.s);
    g.api = NULL;
}
#endif
