/* SPDX-License-Identifier: Apache-2.0 */
/* gpucheck: the one-GPU checks of tests/gpu/run (README.md there), one per
 * subcommand. Each prints what it did and ends with a line "PASS ...",
 * "FAIL ..." or "SKIP ..."; the exit status is 0, 1 or 77 (2: bad usage or
 * the libraries would not load). Device memory and streams come through
 * runtime/gpu/cudaload.h, the table libddprt uses, so the test and the library
 * share one libcudart and one NCCL. */
#include "config.h"
#include "gpu/cudaload.h"
#include "ddprt.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define USAGE \
    "Usage: gpucheck probe                  CUDA runtime, NCCL and device count\n" \
    "       gpucheck sweep [MAXBYTES]       every dtype x op x count, in and out of place\n" \
    "       gpucheck order                  allreduce behind a busy stream\n" \
    "       gpucheck watchdog               a stream stuck on a host flag\n" \
    "       gpucheck inittimeout DONEFILE   2 ranks; rank 1 never attaches\n" \
    "       gpucheck pair                   2 ranks on one GPU (NCCL_HOSTID, ...)\n" \
    "       gpucheck buckets                gradient buckets on device buffers (1 or 2 ranks)\n" \
    "All but probe run under ddp-run; DDPRT_TIMEOUT bounds every wait.\n"

/* The result line: PASS/FAIL/SKIP and why; returns the exit status. */
static int result(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int result(int status, const char *fmt, ...)
{
    va_list ap;

    fputs(status == 0 ? "PASS " : status == 77 ? "SKIP " : "FAIL ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    return status;
}

#ifndef CUDALOAD_HEADERS
int main(int argc, char **argv)
{
    drt_error_t err;

    if (argc < 2 || !strcmp(argv[1], "--help"))
        return fputs(USAGE, argc < 2 ? stderr : stdout), argc < 2 ? 2 : 0;
    cudaload(&err);
    return result(77, "%s", err.text);
}
#else
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static const cuda_api_t *api;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* A CUDA call's error as a FAIL line naming the call: -1. */
static int cuda_failed(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    result(1, "%s: %s", what, api->cudaGetErrorString(e));
    return -1;
}
#define CU(call) cuda_failed(api->call, #call)

static double timeout_s(void)
{
    const char *s = getenv("DDPRT_TIMEOUT");

    return s && atof(s) > 0 ? atof(s) : 300;
}

/* This rank's communicator on device (-1: the plugin's binding). */
static drt_comm_t *open_comm(int device)
{
    drt_comm_t *c;
    drt_error_t err;

    if (drt_init(&c, &err) < 0)
        return result(1, "drt_init: %s", err.text), NULL;
    if (drt_gpu_attach(c, device, &err) < 0) {
        result(1, "drt_gpu_attach: %s", err.text);
        drt_finalize(c);
        return NULL;
    }
    return c;
}

static int probe(void)
{
    drt_error_t err;
    int n = 0, rt = 0, drv = 0;
    cudaError_t e;
    char bus[32] = "?";

    if (!(api = cudaload(&err)))
        return printf("cannot load: %s\n", err.text), 2;
    api->cudaRuntimeGetVersion(&rt);
    api->cudaDriverGetVersion(&drv);
    printf("cudart %s (runtime %d, driver %d); NCCL %s, version %d%s\n", api->cudart_file, rt,
           drv, api->nccl_file, api->nccl_version, api->nccl_reused ? " (already loaded)" : "");
    if ((e = api->cudaGetDeviceCount(&n)) != cudaSuccess || n == 0)
        return result(77, "no CUDA device (cudaGetDeviceCount: %s)",
                      e != cudaSuccess ? api->cudaGetErrorString(e) : "0 devices");
    api->cudaDeviceGetPCIBusId(bus, sizeof(bus), 0);
    return result(0, "%d CUDA device%s, device 0 at %s", n, n == 1 ? "" : "s", bus);
}

/* ---- values: small integers, exact in every type ------------------------- */

static uint16_t half_of(int k) /* float16 of 1 <= k < 2048 */
{
    int e = 0;

    while ((k >> e) > 1)
        e++;
    return (uint16_t)(((e + 15) << 10) | (((k << 10) >> e) & 0x3ff));
}

static void put(unsigned char *h, size_t i, drt_dtype_t t, int k)
{
    float f = (float)k;
    double d = k;
    int32_t i32 = k;
    int64_t i64 = k;
    uint32_t u;
    uint16_t b;

    switch (t) {
    case DRT_FLOAT64: memcpy(h + 8 * i, &d, 8); break;
    case DRT_INT64: memcpy(h + 8 * i, &i64, 8); break;
    case DRT_INT32: memcpy(h + 4 * i, &i32, 4); break;
    case DRT_BFLOAT16: memcpy(&u, &f, 4); b = (uint16_t)(u >> 16); memcpy(h + 2 * i, &b, 2); break;
    case DRT_FLOAT16: b = half_of(k); memcpy(h + 2 * i, &b, 2); break;
    default: memcpy(h + 4 * i, &f, 4);
    }
}

/* Rank r's input i is (r + 1) * (i % 7 + 1); the sum over n ranks is
 * (i % 7 + 1) * n(n+1)/2, exact in every type for n <= 8. */
static void fill(unsigned char *h, size_t count, drt_dtype_t t, int mult)
{
    for (size_t i = 0; i < count; i++)
        put(h, i, t, mult * (int)(i % 7 + 1));
}

/* The first element where got and want differ, or -1. */
static long first_diff(const unsigned char *got, const unsigned char *want, size_t count,
                       size_t esize)
{
    if (!memcmp(got, want, count * esize))
        return -1;
    for (size_t i = 0; i < count; i++)
        if (memcmp(got + i * esize, want + i * esize, esize))
            return (long)i;
    return -1;
}

/* ---- sweep: every dtype x op x count, in place and out of place ---------- */

typedef struct {
    void *pristine, *recv;        /* device: the input, the result */
    unsigned char *want, *got;    /* host */
    cudaStream_t s;
} bufs_t;

static const char *const dtype_names[] = {"float32", "float64", "bfloat16", "float16", "int32",
                                          "int64"};
static const char *const op_names[] = {"sum", "avg", "min", "max"};

/* One case; in place it goes as a request (drt_wait), out of place as a
 * stream-ordered call and drt_gpu_sync. 0 right, 1 wrong, -1 error. */
static int one_case(drt_comm_t *c, const bufs_t *b, drt_dtype_t t, drt_op_t op, size_t count,
                    int inplace)
{
    size_t esize = drt_dtype_size(t), bytes = count * esize;
    drt_request_t *req;
    drt_error_t err;
    long bad;
    int rc;

    if (inplace ? CU(cudaMemcpyAsync(b->recv, b->pristine, bytes, cudaMemcpyDeviceToDevice, b->s))
                : CU(cudaMemsetAsync(b->recv, 0xff, bytes, b->s))) /* poison: NaN or -1 */
        return -1;
    if (inplace)
        rc = drt_gpu_iallreduce(c, b->recv, b->recv, count, t, op, b->s, &req, &err) < 0 ||
             drt_wait(req, &err) < 0 ? -1 : 0;
    else
        rc = drt_gpu_allreduce(c, b->pristine, b->recv, count, t, op, b->s, &err) < 0 ||
             drt_gpu_sync(c, b->s, &err) < 0 ? -1 : 0;
    if (rc < 0)
        return printf("%s %s count %zu %s: %s\n", dtype_names[t], op_names[op], count,
                      inplace ? "in place" : "out of place", err.text), -1;
    if (CU(cudaMemcpy(b->got, b->recv, bytes, cudaMemcpyDeviceToHost)))
        return -1;
    if ((bad = first_diff(b->got, b->want, count, esize)) < 0)
        return 0;
    printf("%s %s count %zu %s: element %ld differs\n", dtype_names[t], op_names[op], count,
           inplace ? "in place" : "out of place", bad);
    return 1;
}

/* 0, 1, odd, 2^k - 1 and 2^k + 1, and the largest (256 MiB of the type). */
static size_t case_counts(size_t max_count, size_t *counts)
{
    static const size_t fixed[] = {0, 1, 1001, 15, 17, 4095, 4097, 1048575, 1048577};
    size_t n = 0;

    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (fixed[i] <= max_count)
            counts[n++] = fixed[i];
    counts[n++] = max_count;
    return n;
}

/* All ops and counts of one dtype: the wrong ones, or -1 on an error. */
static int sweep_dtype(drt_comm_t *c, bufs_t *b, drt_dtype_t t, size_t max_bytes, int *cases)
{
    size_t counts[16], esize = drt_dtype_size(t), n = case_counts(max_bytes / esize, counts);
    int wrong = 0, rc;

    fill(b->want, max_bytes / esize, t, 1);
    if (CU(cudaMemcpy(b->pristine, b->want, max_bytes / esize * esize, cudaMemcpyHostToDevice)))
        return -1;
    for (int op = DRT_SUM; op <= DRT_MAX; op++)
        for (size_t i = 0; i < n; i++)
            for (int inplace = 0; inplace < 2; inplace++) {
                if ((rc = one_case(c, b, t, (drt_op_t)op, counts[i], inplace)) < 0)
                    return -1;
                wrong += rc;
                (*cases)++;
            }
    return wrong;
}

static int sweep(size_t max_bytes)
{
    drt_comm_t *c = open_comm(-1);
    bufs_t b = {0};
    int cases = 0, wrong = 0, rc = 0;
    double t0 = now();

    if (!c)
        return 1;
    b.want = malloc(max_bytes);
    b.got = malloc(max_bytes);
    if (!b.want || !b.got)
        rc = result(1, "out of host memory for 2 x %zu bytes", max_bytes);
    else if (CU(cudaMalloc(&b.pristine, max_bytes)) || CU(cudaMalloc(&b.recv, max_bytes)) ||
             CU(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking)))
        rc = 1;
    for (int t = DRT_FLOAT32; rc == 0 && t <= DRT_INT64; t++) {
        int w = sweep_dtype(c, &b, (drt_dtype_t)t, max_bytes, &cases);
        if (w < 0)
            rc = result(1, "%s: the sweep stopped at an error (above)", dtype_names[t]);
        wrong += w > 0 ? w : 0;
    }
    if (rc == 0)
        rc = result(wrong ? 1 : 0, "%d cases (6 dtypes x 4 ops x counts 0..%zu bytes x in/out "
                    "of place) on device %d in %.1f s, %d wrong", cases, max_bytes,
                    drt_gpu_device(c), now() - t0, wrong);
    if (b.s)
        api->cudaStreamDestroy(b.s);
    api->cudaFree(b.pristine);
    api->cudaFree(b.recv);
    free(b.want);
    free(b.got);
    drt_finalize(c);
    return rc;
}

/* ---- order: the allreduce waits for the work queued before it ------------ */

#define BUSY_BYTES (256u << 20)
#define BUSY_COPIES 1000 /* about 0.15 s of device copies on an H200 */
#define ORDER_COUNT (16u << 20)

/* Keep the stream busy, then queue send <- pristine behind that: an
 * allreduce that ran early would reduce the poison still in send. */
static int queue_busy(const bufs_t *b, void *big, void *send)
{
    for (int i = 0; i < BUSY_COPIES; i++)
        if (CU(cudaMemcpyAsync((char *)big + BUSY_BYTES, big, BUSY_BYTES,
                               cudaMemcpyDeviceToDevice, b->s)))
            return -1;
    return CU(cudaMemsetAsync(b->recv, 0xff, ORDER_COUNT * 4, b->s)) ||
           CU(cudaMemcpyAsync(send, b->pristine, ORDER_COUNT * 4, cudaMemcpyDeviceToDevice, b->s))
           ? -1 : 0;
}

/* One way (as_request: drt_gpu_iallreduce + drt_test/drt_wait; else
 * drt_gpu_allreduce + drt_gpu_sync); 0 when right and still busy at issue. */
static int order_one(drt_comm_t *c, const bufs_t *b, void *big, void *send, int as_request)
{
    const char *how = as_request ? "drt_gpu_iallreduce" : "drt_gpu_allreduce";
    drt_request_t *req = NULL;
    drt_error_t err;
    int busy, done = 0, rc;
    long bad;
    double t0;

    if (CU(cudaMemsetAsync(send, 0, ORDER_COUNT * 4, b->s)) || queue_busy(b, big, send) < 0)
        return 1;
    t0 = now();
    rc = as_request ? drt_gpu_iallreduce(c, send, b->recv, ORDER_COUNT, DRT_FLOAT32, DRT_SUM, b->s,
                                         &req, &err)
                    : drt_gpu_allreduce(c, send, b->recv, ORDER_COUNT, DRT_FLOAT32, DRT_SUM, b->s,
                                        &err);
    if (rc < 0)
        return result(1, "%s: %s", how, err.text);
    busy = api->cudaStreamQuery(b->s) == cudaErrorNotReady;
    if (as_request && drt_test(req, &done, &err) < 0)
        return result(1, "drt_test: %s", err.text);
    if ((as_request ? drt_wait(req, &err) : drt_gpu_sync(c, b->s, &err)) < 0)
        return result(1, "%s: %s", as_request ? "drt_wait" : "drt_gpu_sync", err.text);
    printf("%s: issued %s the stream was done; waited %.1f ms in all\n", how,
           busy ? "before" : "AFTER", (now() - t0) * 1e3);
    if (CU(cudaMemcpy(b->got, b->recv, ORDER_COUNT * 4, cudaMemcpyDeviceToHost)))
        return 1;
    if ((bad = first_diff(b->got, b->want, ORDER_COUNT, 4)) >= 0)
        return result(1, "%s: element %ld of the result is wrong: it ran before the work "
                      "queued ahead of it, or the wait returned early", how, bad);
    if (!busy)
        return result(1, "%s: the busy stream finished before the call returned: either the "
                      "call blocked, or BUSY_COPIES is too small for this device", how);
    if (done)
        return result(1, "drt_test said done while the stream was still busy");
    return 0;
}

static int order(void)
{
    drt_comm_t *c = open_comm(-1);
    bufs_t b = {0};
    void *big = NULL, *send = NULL;
    int rc = 1;

    if (!c)
        return 1;
    b.want = malloc(ORDER_COUNT * 4);
    b.got = malloc(ORDER_COUNT * 4);
    if (b.want && b.got && !CU(cudaMalloc(&big, 2 * (size_t)BUSY_BYTES)) &&
        !CU(cudaMalloc(&send, ORDER_COUNT * 4)) && !CU(cudaMalloc(&b.recv, ORDER_COUNT * 4)) &&
        !CU(cudaMalloc(&b.pristine, ORDER_COUNT * 4)) &&
        !CU(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking))) {
        fill(b.want, ORDER_COUNT, DRT_FLOAT32, 1);
        if (!CU(cudaMemcpy(b.pristine, b.want, ORDER_COUNT * 4, cudaMemcpyHostToDevice)) &&
            order_one(c, &b, big, send, 1) == 0 && order_one(c, &b, big, send, 0) == 0)
            rc = result(0, "both calls returned while %d copies of %u MiB were queued ahead, "
                        "and the results show they ran after them", BUSY_COPIES,
                        BUSY_BYTES >> 20);
    }
    if (b.s)
        api->cudaStreamDestroy(b.s);
    api->cudaFree(big);
    api->cudaFree(send);
    api->cudaFree(b.recv);
    api->cudaFree(b.pristine);
    free(b.want);
    free(b.got);
    drt_finalize(c);
    return rc;
}

/* ---- watchdog: a stream that never gets to the allreduce ----------------- */

static atomic_int released;

/* A host function on the stream: it holds the stream until released. */
static void hold_stream(void *arg)
{
    (void)arg;
    while (!atomic_load(&released))
        nap_ms(1);
}

/* Releases the stream at the deadline, if the test has not by then, so
 * that a watchdog that never fires fails the test instead of hanging it. */
static void *release_later(void *arg)
{
    double until = now() + *(double *)arg;

    while (!atomic_load(&released) && now() < until)
        nap_ms(10);
    if (!atomic_load(&released))
        atomic_store(&released, 2);
    return NULL;
}

/* Issue on a held stream; drt_gpu_sync must fail within DDPRT_TIMEOUT. */
static int stuck(drt_comm_t *c, cudaStream_t s, void *buf, double limit)
{
    __typeof__(cudaLaunchHostFunc) *launch;
    drt_error_t err;
    double t0, waited;
    int rc;

    /* the library's own handle: the same libcudart, not a second loader */
    if (!(*(void **)&launch = dlsym(api->cudart, "cudaLaunchHostFunc")))
        return result(77, "%s has no cudaLaunchHostFunc", api->cudart_file);
    if (CU(cudaStreamQuery(s)) || cuda_failed(launch(s, hold_stream, NULL), "cudaLaunchHostFunc"))
        return 1;
    t0 = now();
    if (drt_gpu_allreduce(c, buf, buf, 1024, DRT_FLOAT32, DRT_SUM, s, &err) < 0)
        return result(1, "drt_gpu_allreduce on the held stream: %s (issuing must not wait)",
                      err.text);
    rc = drt_gpu_sync(c, s, &err);
    waited = now() - t0;
    if (!atomic_load(&released))
        atomic_store(&released, 1);
    printf("drt_gpu_sync returned %d after %.1f s: %s\n", rc, waited, rc < 0 ? err.text : "");
    if (rc == 0 || atomic_load(&released) == 2)
        return result(1, "drt_gpu_sync returned only after the stream was released (%.1f s; "
                      "limit %.0f s): no watchdog fired", waited, limit);
    if (waited > limit)
        return result(1, "the timeout came after %.1f s, past DDPRT_TIMEOUT + 5 = %.0f s",
                      waited, limit);
    rc = drt_gpu_allreduce(c, buf, buf, 1024, DRT_FLOAT32, DRT_SUM, s, &err);
    if (rc == 0)
        return result(1, "after the timeout the next GPU allreduce succeeded; the job's "
                      "communicators should be aborted");
    return result(0, "drt_gpu_sync failed after %.1f s (DDPRT_TIMEOUT %.0f s), and the next "
                  "call fails: %s", waited, timeout_s(), err.text);
}

static int watchdog(void)
{
    drt_comm_t *c = open_comm(-1);
    double limit = timeout_s() + 5, release_at = limit + 15;
    cudaStream_t s = NULL;
    void *buf = NULL;
    pthread_t th;
    int rc = 1;

    if (!c)
        return 1;
    if (pthread_create(&th, NULL, release_later, &release_at) != 0)
        return drt_finalize(c), result(1, "cannot start a thread");
    if (!CU(cudaMalloc(&buf, 4096)) && !CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)))
        rc = stuck(c, s, buf, limit);
    if (!atomic_load(&released))
        atomic_store(&released, 1);
    pthread_join(th, NULL);
    drt_finalize(c);
    return rc;
}

/* ---- inittimeout: rank 1 never joins the NCCL communicators -------------- */

static int inittimeout(const char *done_file)
{
    drt_comm_t *c;
    drt_error_t err;
    double t0, waited, limit = timeout_s() + 5;
    FILE *f;
    int rc;

    if (drt_init(&c, &err) < 0)
        return result(1, "drt_init: %s", err.text);
    if (drt_size(c) != 2)
        return drt_finalize(c), result(2, "run it as 2 ranks: ddp-run -n 2 gpucheck inittimeout F");
    if (drt_rank(c) == 1) { /* alive, connected, but never attaching: until rank 0 is done */
        for (t0 = now(); access(done_file, F_OK) != 0 && now() - t0 < 3 * limit + 30;)
            nap_ms(50);
        drt_finalize(c);
        return 0;
    }
    t0 = now();
    rc = drt_gpu_attach(c, 0, &err);
    waited = now() - t0;
    if ((f = fopen(done_file, "w")))
        fclose(f);
    drt_finalize(c);
    printf("drt_gpu_attach returned %d after %.1f s: %s\n", rc, waited, rc < 0 ? err.text : "");
    if (rc == 0)
        return result(1, "drt_gpu_attach succeeded without rank 1");
    if (waited > limit)
        return result(1, "it failed after %.1f s, past DDPRT_TIMEOUT + 5 = %.0f s", waited, limit);
    if (!strstr(err.text, "rank 1"))
        return result(1, "the error does not name rank 1: %s", err.text);
    return result(0, "failed after %.1f s (DDPRT_TIMEOUT %.0f s), naming rank 1", waited,
                  timeout_s());
}

/* ---- pair: 2 ranks on the one GPU, when NCCL can be talked into it ------- */

static int pair(void)
{
    drt_comm_t *c = open_comm(0);
    bufs_t b = {0};
    const size_t count = 1 << 20;
    drt_error_t err;
    int rc = 1, n;

    if (!c)
        return 1;
    n = drt_size(c);
    b.want = malloc(count * 4);
    b.got = malloc(count * 4);
    if (b.want && b.got && !CU(cudaMalloc(&b.recv, count * 4)) &&
        !CU(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking))) {
        fill(b.got, count, DRT_FLOAT32, drt_rank(c) + 1);
        fill(b.want, count, DRT_FLOAT32, n * (n + 1) / 2);
        if (CU(cudaMemcpy(b.recv, b.got, count * 4, cudaMemcpyHostToDevice)))
            rc = 1;
        else if (drt_gpu_allreduce(c, b.recv, b.recv, count, DRT_FLOAT32, DRT_SUM, b.s, &err) < 0 ||
                 drt_gpu_sync(c, b.s, &err) < 0)
            rc = result(1, "rank %d: %s", drt_rank(c), err.text);
        else if (!CU(cudaMemcpy(b.got, b.recv, count * 4, cudaMemcpyDeviceToHost)))
            rc = first_diff(b.got, b.want, count, 4) < 0
                 ? result(0, "rank %d of %d: allreduce right", drt_rank(c), n)
                 : result(1, "rank %d of %d: allreduce wrong", drt_rank(c), n);
    }
    if (b.s)
        api->cudaStreamDestroy(b.s);
    api->cudaFree(b.recv);
    free(b.want);
    free(b.got);
    drt_finalize(c);
    return rc;
}

/* ---- gradient buckets on device buffers (drt_buckets_gpu) ---- */

enum { NB_GRADS = 4 };
static const size_t bk_counts[NB_GRADS] = {4096, 1 << 20, 17, 3000};

/* what rank r puts in gradient g: small integers, exact in float32 */
static float bk_value(int g, int r)
{
    return (float)((g + 1) * (r + 1));
}

/* One step on a non-blocking stream s: each gradient is written with
 * cudaMemcpyAsync on s, marked ready, then its own buffer is poisoned on
 * s, so only the buckets' copy back can make it right again. unused: a
 * gradient left unready (its bucket's storage still holds the last step's
 * sum, so only the zeroing makes it 0). Gradient 3 lives in the buckets. */
static int bucket_step(drt_comm_t *c, drt_buckets_t *b, cudaStream_t s, float *host, int unused,
                       drt_step_stats_t *st)
{
    drt_error_t err;
    int r = drt_rank(c);

    if (drt_buckets_begin(b, &err) < 0)
        return result(1, "drt_buckets_begin: %s", err.text), -1;
    for (int g = NB_GRADS - 1; g >= 0; g--) {
        void *p = drt_buckets_grad(b, g);
        if (g == unused)
            continue;
        for (size_t k = 0; k < bk_counts[g]; k++)
            host[k] = bk_value(g, r);
        if (CU(cudaMemcpyAsync(p, host, bk_counts[g] * 4, cudaMemcpyHostToDevice, s)))
            return -1;
        if (drt_buckets_ready(b, g, &err) < 0)
            return result(1, "drt_buckets_ready(%d): %s", g, err.text), -1;
        if (g != 3 && CU(cudaMemsetAsync(p, 0xff, bk_counts[g] * 4, s))) /* NaN */
            return -1;
    }
    if (drt_buckets_finish(b, st, &err) < 0)
        return result(1, "drt_buckets_finish: %s", err.text), -1;
    if (drt_gpu_sync(c, s, &err) < 0)
        return result(1, "drt_gpu_sync after finish: %s", err.text), -1;
    return 0;
}

/* the sums over ranks, the unused gradient zero */
static int bucket_results(drt_comm_t *c, drt_buckets_t *b, float *host, int unused)
{
    int n = drt_size(c);

    for (int g = 0; g < NB_GRADS; g++) {
        float want = g == unused ? 0.0f : bk_value(g, 0) * (float)(n * (n + 1) / 2);
        if (CU(cudaMemcpy(host, drt_buckets_grad(b, g), bk_counts[g] * 4, cudaMemcpyDeviceToHost)))
            return -1;
        for (size_t k = 0; k < bk_counts[g]; k++)
            if (host[k] != want)
                return result(1, "rank %d: gradient %d element %zu: %g, want %g", drt_rank(c), g, k,
                              host[k], want), -1;
    }
    return 0;
}

/* gradients 0-2 in the caller's device buffers, 3 in the buckets' */
static int bucket_add(drt_buckets_t *b, void *dev[NB_GRADS], drt_error_t *err)
{
    for (int g = 0; g < NB_GRADS; g++) {
        if (g < 3 && CU(cudaMalloc(&dev[g], bk_counts[g] * 4)))
            return -1;
        if (drt_buckets_add(b, dev[g], bk_counts[g], DRT_FLOAT32, err) < 0)
            return result(1, "drt_buckets_add: %s", err->text), -1;
    }
    return 0;
}

/* Two steps, SUM over the ranks (1, or 2 on one GPU under NCCL_HOSTID):
 * all four gradients, then gradient 2 unused. */
static int bucket_steps(drt_comm_t *c, drt_buckets_t *b, cudaStream_t s, float *host)
{
    drt_step_stats_t st = {0};

    if (bucket_step(c, b, s, host, -1, &st) < 0 || bucket_results(c, b, host, -1) < 0 ||
        bucket_step(c, b, s, host, 2, &st) < 0 || bucket_results(c, b, host, 2) < 0)
        return 1;
    if (st.buckets < 3 || !(st.comm_s > 0))
        return result(1, "%d buckets, comm %g s: want at least 3 and some time", st.buckets, st.comm_s);
    return result(0, "rank %d of %d: %d device buckets, %zu bytes, 2 steps: every sum right, the "
                  "unused gradient zero, the caller's buffers rewritten", drt_rank(c), drt_size(c),
                  st.buckets, st.bytes);
}

static int buckets(void)
{
    drt_comm_t *c = open_comm(0);
    drt_buckets_t *b = NULL;
    void *dev[NB_GRADS] = {0};
    float *host = malloc(bk_counts[1] * 4);
    cudaStream_t s = NULL;
    drt_error_t err = {""};
    int rc = 1;

    if (c && host && !CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) {
        if (drt_buckets_create(c, 1 << 20, 16 << 10, DRT_SUM, &b, &err) < 0)
            rc = result(1, "drt_buckets_create: %s", err.text);
        else if (drt_buckets_gpu(b, s, &err) < 0)
            rc = result(1, "drt_buckets_gpu: %s", err.text);
        else if (bucket_add(b, dev, &err) == 0)
            rc = bucket_steps(c, b, s, host);
    }
    drt_buckets_free(b); /* waits for s */
    for (int g = 0; g < NB_GRADS; g++)
        api->cudaFree(dev[g]);
    if (s)
        api->cudaStreamDestroy(s);
    free(host);
    if (c)
        drt_finalize(c);
    return rc;
}

/* MAXBYTES: a whole number of bytes, at least 8, at most 4 GiB. */
static int parse_bytes(const char *s, size_t *v)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 10);

    if (*s < '0' || *s > '9' || *end || x < 8 || x > (4ull << 30))
        return fprintf(stderr, "gpucheck: MAXBYTES '%.40s': expected bytes from 8 to 4294967296\n",
                       s), -1;
    *v = (size_t)x;
    return 0;
}

int main(int argc, char **argv)
{
    drt_error_t err;
    size_t max_bytes = 256u << 20;
    const char *cmd = argc > 1 ? argv[1] : "";

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(cmd, "--help"))
        return fputs(USAGE, stdout), 0;
    if (!strcmp(cmd, "probe"))
        return probe();
    if (strcmp(cmd, "sweep") && strcmp(cmd, "order") && strcmp(cmd, "watchdog") &&
        strcmp(cmd, "pair") && strcmp(cmd, "buckets") && (strcmp(cmd, "inittimeout") || argc != 3))
        return fputs(USAGE, stderr), 2;
    if (!strcmp(cmd, "sweep") && argc > 2 && parse_bytes(argv[2], &max_bytes) < 0)
        return 2;
    if (!(api = cudaload(&err)))
        return result(1, "%s", err.text);
    return !strcmp(cmd, "sweep") ? sweep(max_bytes) : !strcmp(cmd, "order") ? order()
           : !strcmp(cmd, "watchdog") ? watchdog() : !strcmp(cmd, "pair") ? pair()
           : !strcmp(cmd, "buckets") ? buckets() : inittimeout(argv[2]);
}
#endif
