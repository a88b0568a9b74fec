/* SPDX-License-Identifier: Apache-2.0 */
/* gpuerr: the GPU API's error paths on a machine without a GPU (run by
 * tests/integration/gpu-errors.test; see there for what each must say).
 *
 *   gpuerr          under ddp-run: CPU collectives first (and no CUDA
 *                   library mapped after them), then every drt_gpu_* call;
 *                   one line per step: "rank R: STEP: RC MESSAGE".
 *   gpuerr reuse LIB  alone: dlopen LIB by its path first (as PyTorch does
 *                   with its NCCL), then cudaload(): is that copy reused?
 *
 * Never a GPU needed: each call must return, never crash or hang. */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cudaload.h"
#include "ddprt.h"

static int me;

/* lines of /proc/self/maps naming a file that contains what */
static int mapped(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], last[512] = "";
    int n = 0;

    while (f && fgets(line, sizeof(line), f)) {
        const char *path = strchr(line, '/');
        if (path && strstr(path, what) && strcmp(path, last) != 0) {
            n++; /* one file maps several ranges, listed together */
            snprintf(last, sizeof(last), "%s", path);
        }
    }
    if (f)
        fclose(f);
    return n;
}

static void step(const char *name, int rc, const drt_error_t *err)
{
    printf("rank %d: %s: %d %s\n", me, name, rc, rc < 0 ? err->text : "");
    fflush(stdout);
}

static int cpu_sum(drt_comm_t *c, drt_error_t *err)
{
    int32_t v = 1;

    if (drt_allreduce(c, &v, &v, 1, DRT_INT32, DRT_SUM, err) < 0)
        return -1;
    return v == drt_size(c) ? 0 : -1;
}

/* device buckets refused (the attach's error); the same buckets then work
 * on the host: "buckets gpu" and "buckets host after" */
static void buckets(drt_comm_t *c)
{
    drt_buckets_t *b;
    drt_error_t err = {""};
    float g = 1;
    int rc;

    if (drt_buckets_create(c, 0, 0, DRT_SUM, &b, &err) < 0) {
        step("buckets gpu", -2, &err);
        return;
    }
    step("buckets gpu", drt_buckets_gpu(b, NULL, &err), &err);
    rc = drt_buckets_add(b, &g, 1, DRT_FLOAT32, &err) < 0 || drt_buckets_begin(b, &err) < 0 ||
                 drt_buckets_ready(b, 0, &err) < 0 || drt_buckets_finish(b, NULL, &err) < 0
             ? -1
             : g == (float)drt_size(c) ? 0 : -3;
    step("buckets host after", rc, &err);
    drt_buckets_free(b);
}

static int errors(void)
{
    drt_comm_t *c;
    drt_error_t err = {""};
    drt_request_t *req = (drt_request_t *)&err; /* must come back NULL */
    char dev[16]; /* never touched: no call may reach the device */

    if (drt_init(&c, &err) < 0) {
        fprintf(stderr, "gpuerr: drt_init: %s\n", err.text);
        return 1;
    }
    me = drt_rank(c);
    step("cpu", cpu_sum(c, &err), &err);
    printf("rank %d: mapped after CPU collectives: libcudart %d, libnccl %d\n", me,
           mapped("libcudart"), mapped("libnccl"));
    step("allreduce before attach", drt_gpu_allreduce(c, dev, dev, 4, DRT_FLOAT32, DRT_SUM, NULL,
                                                      &err), &err);
    step("attach", drt_gpu_attach(c, -1, &err), &err);
    printf("rank %d: device: %d\n", me, drt_gpu_device(c));
    step("bad dtype", drt_gpu_allreduce(c, dev, dev, 4, (drt_dtype_t)99, DRT_SUM, NULL, &err),
         &err);
    step("bad op", drt_gpu_allreduce(c, dev, dev, 4, DRT_FLOAT32, (drt_op_t)9, NULL, &err), &err);
    step("iallreduce", drt_gpu_iallreduce(c, dev, dev, 4, DRT_INT64, DRT_AVG, NULL, &req, &err),
         &err);
    printf("rank %d: request: %s\n", me, req ? "set" : "NULL");
    step("sync", drt_gpu_sync(c, NULL, &err), &err);
    printf("rank %d: mapped after GPU calls: libcudart %d, libnccl %d\n", me, mapped("libcudart"),
           mapped("libnccl"));
    step("cpu after", cpu_sum(c, &err), &err);
    buckets(c);
    /* GPU state without a device: drt_finalize must free it (ASan, valgrind) */
    drt_gpu_set_algo(c, DRT_ALGO_HIER);
    drt_finalize(c);
    return 0;
}

static int reuse(const char *lib)
{
    drt_error_t err = {""};
    void *mine = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    const cuda_api_t *a;

    if (!mine) {
        printf("cannot preload %s: %s\n", lib, dlerror());
        return 1;
    }
    if (!(a = cudaload(&err))) {
        printf("cudaload: %s\n", err.text);
        return 1;
    }
#ifdef CUDALOAD_HEADERS
    printf("reused %d, same handle %d, libnccl files mapped %d\n", a->nccl_reused,
           a->nccl == mine, mapped("libnccl"));
#endif
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "reuse") == 0)
        return reuse(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: gpuerr | gpuerr reuse LIBRARY\n");
        return 2;
    }
    return errors();
}
