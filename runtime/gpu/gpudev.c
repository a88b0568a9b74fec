/* SPDX-License-Identifier: Apache-2.0 */
/* Which CUDA device a rank uses, and what it sets up there alone. */
#include "config.h"

#include "gpu.h"

#ifdef CUDALOAD_HEADERS
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* DDP_TOPO_DEVICE: the plugin's CUDA ordinal for the rank, already in the
 * numbering the task sees (a task/cgroup node renumbers GPUs from 0) */
static int plugin_device(const char *dev, drt_error_t *err)
{
    char *end;
    long v = strtol(dev, &end, 10);

    if (*end || end == dev || v < 0 || v > INT_MAX)
        return rt_fail(err, "ddprt: DDP_TOPO_DEVICE=%s is not a CUDA device ordinal (unset "
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
        return rt_fail(err, "ddprt: DDP_TOPO_GPU=%s is not a GPU index (unset it, or pass a "
                       "device to drt_gpu_attach)", topo);
    if (!vis)
        return (int)want;
    for (int i = 0; *p; i++) {
        long v = strtol(p, &end, 10);
        if (end != p && v == want && (*end == ',' || !*end))
            return i;
        p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p);
    }
    return rt_fail(err, "ddprt: DDP_TOPO_GPU=%s is not in CUDA_VISIBLE_DEVICES=%s (unset "
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
 * the libraries, the set's events. */
int gpu_local_setup(struct gpu *g, int device, drt_error_t *err)
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

    if ((g->device = pick_device(g->c, device, err)) < 0)
        return -1;
    /* NCCL reads it once, at its first use: before the library loads (the
     * pipelined hier needs it; gpucomm.c checks it took effect). A user's
     * value stays. */
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 0);
    if (!(a = g->api = cudaload(err)))
        return -1;
    if ((rc = a->cudaGetDeviceCount(&count)) != cudaSuccess || count == 0)
        return rt_fail(err, "ddprt: no CUDA device: cudaGetDeviceCount: %s (is the NVIDIA "
                       "driver loaded? see nvidia-smi)",
                       rc != cudaSuccess ? a->cudaGetErrorString(rc) : "none visible");
    if (g->device >= count)
        return rt_fail(err, "ddprt: CUDA device %d (%s) does not exist: %d visible (bind one "
                       "GPU per rank, e.g. srun --ddp-topo=auto, or pass a device to "
                       "drt_gpu_attach)", g->device, from, count);
    /* left current: restoring the caller's device (0 on a thread that never
     * chose one) would make a context there, 0.5 GB on every rank's GPU 0 */
    if ((rc = a->cudaSetDevice(g->device)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->t0, cudaEventDefault)) != cudaSuccess ||
        (rc = a->cudaEventCreateWithFlags(&g->t1, cudaEventDefault)) != cudaSuccess)
        return rt_fail(err, "ddprt: CUDA device %d: %s", g->device, a->cudaGetErrorString(rc));
    return 0;
}
#endif
