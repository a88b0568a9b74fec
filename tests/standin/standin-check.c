/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA/NCCL stand-in's contract, checked (tests/standin/README.md).
 *
 *   standin-check [LIBRARY]   (default: .libs/libddpgpustandin.so next to it)
 *
 * Single-process checks run here; multi-process ones run this program again
 * as ranks (`standin-check LIBRARY child SCENARIO RANK NRANKS DIR IDHEX...`),
 * each printing "ok WHAT" or "not ok WHAT (saw: ...)" lines that the parent
 * numbers. Every child is killed after a deadline, so a bug fails, never
 * hangs. Nothing sleeps to wait for an event: conditions are polled with
 * deadlines; a "does not happen" check polls for a bounded time. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

#define FNS(X) \
    X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(cudaGetErrorString) \
    X(cudaGetLastError) X(cudaRuntimeGetVersion) X(cudaDriverGetVersion) \
    X(cudaDeviceGetPCIBusId) X(cudaMalloc) X(cudaFree) X(cudaMallocAsync) X(cudaFreeAsync) \
    X(cudaMemcpy) X(cudaMemcpyAsync) X(cudaHostAlloc) X(cudaFreeHost) X(cudaMemsetAsync) \
    X(cudaStreamCreateWithFlags) X(cudaStreamDestroy) X(cudaStreamQuery) \
    X(cudaStreamWaitEvent) X(cudaEventCreateWithFlags) X(cudaEventDestroy) X(cudaEventRecord) \
    X(cudaEventQuery) X(cudaEventElapsedTime) X(cudaLaunchHostFunc) X(cudaStreamSynchronize) \
    X(cudaDeviceSynchronize) X(cudaEventSynchronize) \
    X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) \
    X(ncclCommInitRankConfig) X(ncclCommInitRank) X(ncclCommGetAsyncError) X(ncclCommAbort) \
    X(ncclCommShrink) \
    X(ncclCommFinalize) X(ncclCommDestroy) X(ncclGroupStart) X(ncclGroupEnd) \
    X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) \
    X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ddp_standin_stats)
#define FIELD(f) __typeof__(f) *f;
static struct {
    FNS(FIELD)
} A;

static const char *lib_path;
static int nchecks, nfailed;

/* ---- TAP ---- */

static void check(int cond, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int cond, const char *what, const char *fmt, ...)
{
    char saw[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(saw, sizeof(saw), fmt, ap);
    va_end(ap);
    nchecks++;
    if (cond) {
        printf("ok %d - %s\n", nchecks, what);
    } else {
        nfailed++;
        printf("not ok %d - %s (saw: %s)\n", nchecks, what, saw);
    }
    fflush(stdout);
}

/* a child's line: no number, the parent gives it one */
static void say(int cond, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(int cond, const char *what, const char *fmt, ...)
{
    char saw[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(saw, sizeof(saw), fmt, ap);
    va_end(ap);
    if (cond)
        printf("ok %s\n", what);
    else
        printf("not ok %s (saw: %s)\n", what, saw);
    fflush(stdout);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void nap(void)
{
    struct timespec ts = {0, 1000000};

    nanosleep(&ts, NULL);
}

/* poll an int flag until it equals want, at most secs; 1 if it did */
static int poll_flag(volatile int *flag, int want, double secs)
{
    for (double end = now_s() + secs; now_s() < end;) {
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == want)
            return 1;
        nap();
    }
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == want;
}

static int load(void)
{
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);

    if (!h) {
        printf("Bail out! cannot load %s: %s\n", lib_path, dlerror());
        return -1;
    }
#define SYM(f) \
    if (!(*(void **)&A.f = dlsym(h, #f))) { \
        printf("Bail out! %s has no %s\n", lib_path, #f); \
        return -1; \
    }
    FNS(SYM)
    return 0;
}

/* stderr of the calls between begin and end, into buf */
static int cap_fd = -1, saved_fd = -1;
static void cap_begin(void)
{
    char name[] = "/tmp/standin-check-XXXXXX";

    fflush(stderr);
    cap_fd = mkstemp(name);
    unlink(name);
    saved_fd = dup(2);
    dup2(cap_fd, 2);
}

static void cap_end(char *buf, size_t len)
{
    ssize_t n;

    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    lseek(cap_fd, 0, SEEK_SET);
    n = read(cap_fd, buf, len - 1);
    buf[n > 0 ? n : 0] = 0;
    close(cap_fd);
    if (n > 0 && buf[n - 1] == '\n')
        buf[n - 1] = 0;
}

/* ---- gates: host functions that hold a stream until released ---- */

typedef struct {
    volatile int open, entered;
} gate_t;

static void gate_fn(void *arg)
{
    gate_t *g = arg;

    __atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
        nap();
}

static void flag_fn(void *arg)
{
    __atomic_store_n((volatile int *)arg, 1, __ATOMIC_RELEASE);
}

/* ---- single-process checks ---- */

static void memory_checks(void)
{
    char buf[2048], host[64];
    void *p = NULL, *h = NULL;
    cudaError_t rc;

    check(A.cudaFree(NULL) == cudaSuccess, "cudaFree(NULL) is a no-op success", "-");
    A.cudaMalloc(&p, 256);
    cap_begin();
    rc = A.cudaMemsetAsync(host, 0, sizeof(host), 0);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "cudaMemsetAsync") &&
              strstr(buf, "was not returned by cudaMalloc"),
          "memset of a pointer no cudaMalloc returned is refused, named", "rc %d, '%s'", rc, buf);
    cap_begin();
    rc = A.cudaMemsetAsync((char *)p + 200, 0, 100, 0);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "runs past the end"),
          "an interior pointer running out of bounds is refused", "rc %d, '%s'", rc, buf);
    check(A.cudaMemsetAsync((char *)p + 200, 0, 56, 0) == cudaSuccess,
          "an interior pointer in bounds is fine", "-");
    A.cudaDeviceSynchronize();
    cap_begin();
    rc = A.cudaMemcpy(p, host, 64, cudaMemcpyDeviceToHost);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "destination is device"),
          "cudaMemcpy with the wrong kind (D2H into device memory) is refused", "rc %d, '%s'", rc,
          buf);
    check(A.cudaMemcpy(p, host, 64, cudaMemcpyHostToDevice) == cudaSuccess &&
              A.cudaMemcpy(host, p, 64, cudaMemcpyDefault) == cudaSuccess,
          "the right kind, and cudaMemcpyDefault, work", "-");
    check(A.cudaGetLastError() == cudaErrorInvalidValue && A.cudaGetLastError() == cudaSuccess,
          "cudaGetLastError returns the last error and clears it", "-");
    A.cudaHostAlloc(&h, 128, 0);
    cap_begin();
    rc = A.cudaFree(h);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "cudaFreeHost"),
          "cudaFree of cudaHostAlloc memory is refused", "rc %d, '%s'", rc, buf);
    check(A.cudaFreeHost(h) == cudaSuccess, "cudaFreeHost frees it", "-");
    check(A.cudaFree(p) == cudaSuccess, "cudaFree", "-");
    cap_begin();
    rc = A.cudaMemsetAsync(p, 0, 8, 0);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "use after free"),
          "use after free is refused, named", "rc %d, '%s'", rc, buf);
    cap_begin();
    rc = A.cudaFree(p);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "double free"), "double free is refused",
          "rc %d, '%s'", rc, buf);
    A.cudaGetLastError();
}

struct freer {
    void *p;
    volatile int done;
    cudaError_t rc;
};

static void *free_thread(void *arg)
{
    struct freer *f = arg;

    f->rc = A.cudaFree(f->p);
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void stream_checks(void)
{
    unsigned char out[4096];
    cudaStream_t s, nb;
    void *p, *q;
    gate_t g = {0, 0};
    volatile int flag = 0;
    cudaError_t rc;
    int all = 1;

    A.cudaStreamCreateWithFlags(&s, cudaStreamDefault);
    A.cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
    A.cudaMalloc(&p, sizeof(out));
    /* order on one stream: the copy sees the memset, gated so both queue first */
    A.cudaLaunchHostFunc(s, gate_fn, &g);
    A.cudaMemsetAsync(p, 7, sizeof(out), s);
    A.cudaMemcpyAsync(out, p, sizeof(out), cudaMemcpyDeviceToHost, s);
    check(A.cudaStreamQuery(s) == cudaErrorNotReady, "a gated stream is not ready", "-");
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    A.cudaStreamSynchronize(s);
    for (size_t i = 0; i < sizeof(out); i++)
        all &= out[i] == 7;
    check(all && A.cudaStreamQuery(s) == cudaSuccess, "memset then memcpy on one stream: in order",
          "out[0]=%d", out[0]);

    /* the legacy NULL stream waits for a blocking stream... */
    g = (gate_t){0, 0};
    A.cudaLaunchHostFunc(s, gate_fn, &g);
    A.cudaLaunchHostFunc(0, flag_fn, (void *)&flag);
    check(!poll_flag(&flag, 1, 0.3), "NULL-stream work waits for earlier work on a blocking stream",
          "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    check(poll_flag(&flag, 1, 5), "... and runs once that work is done", "flag %d", flag);
    /* ...and later blocking-stream work waits for the NULL stream */
    g = (gate_t){0, 0};
    flag = 0;
    A.cudaLaunchHostFunc(0, gate_fn, &g);
    A.cudaLaunchHostFunc(s, flag_fn, (void *)&flag);
    check(!poll_flag(&flag, 1, 0.3), "blocking-stream work waits for earlier NULL-stream work",
          "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    poll_flag(&flag, 1, 5);
    /* a non-blocking stream does neither */
    g = (gate_t){0, 0};
    flag = 0;
    A.cudaLaunchHostFunc(nb, gate_fn, &g);
    A.cudaLaunchHostFunc(0, flag_fn, (void *)&flag);
    check(poll_flag(&flag, 1, 5), "NULL-stream work does not wait for a non-blocking stream",
          "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    A.cudaDeviceSynchronize();

    /* stream-ordered memory */
    A.cudaMallocAsync(&q, 64, s);
    A.cudaFreeAsync(q, s);
    rc = A.cudaMemsetAsync(q, 0, 8, s);
    check(rc == cudaErrorInvalidValue, "memory given to cudaFreeAsync may not be used after",
          "rc %d", rc);
    A.cudaStreamSynchronize(s);
    check(A.cudaStreamQuery(cudaStreamPerThread) != cudaSuccess,
          "cudaStreamPerThread is refused (not modelled)", "-");

    /* cudaFree waits for the device's streams (here a non-blocking one) */
    g = (gate_t){0, 0};
    flag = 0;
    A.cudaLaunchHostFunc(nb, gate_fn, &g);
    {
        pthread_t th;
        struct freer fr = {p, 0, cudaSuccess};
        pthread_create(&th, NULL, free_thread, &fr);
        check(!poll_flag(&fr.done, 1, 0.3), "cudaFree does not return while a stream of its "
              "device has work", "done %d", fr.done);
        __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
        check(poll_flag(&fr.done, 1, 5) && fr.rc == cudaSuccess, "... and returns once it is done",
              "done %d rc %d", fr.done, fr.rc);
        pthread_join(th, NULL);
    }
    /* cudaStreamDestroy with work pending returns at once; the work finishes */
    g = (gate_t){0, 0};
    flag = 0;
    A.cudaLaunchHostFunc(s, gate_fn, &g);
    A.cudaLaunchHostFunc(s, flag_fn, (void *)&flag);
    check(A.cudaStreamDestroy(s) == cudaSuccess && flag == 0,
          "cudaStreamDestroy with work pending returns at once", "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    check(poll_flag(&flag, 1, 5), "... and the work still runs", "flag %d", flag);
    check(A.cudaStreamQuery(s) == cudaErrorInvalidResourceHandle,
          "a destroyed stream's handle is refused", "-");
    A.cudaStreamDestroy(nb);
    A.cudaGetLastError();
}

static void event_checks(void)
{
    cudaEvent_t e0, e1, nt;
    cudaStream_t s;
    gate_t g = {0, 0};
    float ms = -1;
    cudaError_t rc;

    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaEventCreateWithFlags(&e0, cudaEventDefault);
    A.cudaEventCreateWithFlags(&e1, cudaEventDefault);
    A.cudaEventCreateWithFlags(&nt, cudaEventDisableTiming);
    check(A.cudaEventQuery(e0) == cudaSuccess, "a never-recorded event queries cudaSuccess", "-");
    A.cudaEventRecord(e0, s);
    A.cudaLaunchHostFunc(s, gate_fn, &g);
    A.cudaEventRecord(e1, s);
    A.cudaEventRecord(nt, s);
    check(A.cudaEventQuery(e1) == cudaErrorNotReady, "an event behind a gate is not ready", "-");
    rc = A.cudaEventElapsedTime(&ms, e0, e1);
    check(rc == cudaErrorNotReady, "cudaEventElapsedTime before the end is cudaErrorNotReady",
          "rc %d", rc);
    {
        cudaStream_t w;
        volatile int flag = 0;
        A.cudaStreamCreateWithFlags(&w, cudaStreamNonBlocking);
        A.cudaStreamWaitEvent(w, e1, 0);
        A.cudaLaunchHostFunc(w, flag_fn, (void *)&flag);
        check(!poll_flag(&flag, 1, 0.2), "cudaStreamWaitEvent holds another stream", "flag %d",
              flag);
        __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
        check(poll_flag(&flag, 1, 5), "... until the event is reached", "flag %d", flag);
        A.cudaStreamDestroy(w);
    }
    A.cudaEventSynchronize(nt);
    rc = A.cudaEventElapsedTime(&ms, e0, e1);
    check(rc == cudaSuccess && ms >= 0 && ms < 60000, "cudaEventElapsedTime when both are done",
          "rc %d ms %g", rc, ms);
    rc = A.cudaEventElapsedTime(&ms, e0, nt);
    check(rc == cudaErrorInvalidResourceHandle,
          "cudaEventElapsedTime with a DisableTiming event is cudaErrorInvalidResourceHandle",
          "rc %d", rc);
    A.cudaEventDestroy(e0);
    A.cudaEventDestroy(e1);
    A.cudaEventDestroy(nt);
    check(A.cudaEventQuery(e0) == cudaErrorInvalidResourceHandle,
          "a destroyed event's handle is refused", "-");
    A.cudaStreamDestroy(s);
    A.cudaGetLastError();
}

/* a host function that calls CUDA and NCCL, which CUDA forbids */
static cudaError_t hostfn_rc = cudaSuccess;
static ncclResult_t hostfn_nrc = ncclSuccess;
static void calls_cuda_fn(void *arg)
{
    int n;

    hostfn_rc = A.cudaGetDeviceCount(&n);
    hostfn_nrc = A.ncclGetVersion(&n);
    __atomic_store_n((volatile int *)arg, 1, __ATOMIC_RELEASE);
}

/* the quarantine forgets the oldest frees first, never a recent one */
static void quarantine_checks(void)
{
    enum { N = 1100 };
    static void *p[N];
    char buf[2048];
    cudaError_t rc;

    for (int i = 0; i < N; i++)
        A.cudaMalloc(&p[i], 64);
    for (int i = 0; i < N; i++)
        A.cudaFree(p[i]);
    cap_begin();
    rc = A.cudaMemsetAsync(p[N - 3], 0, 8, 0);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "use after free"),
          "1100 frees: the third most recent is still known as a use after free", "rc %d, '%s'",
          rc, buf);
    cap_begin();
    rc = A.cudaMemsetAsync(p[N - 1024], 0, 8, 0);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "use after free"),
          "... and so is the 1024th most recent", "rc %d, '%s'", rc, buf);
    A.cudaGetLastError();
}

static void hardening_checks(void)
{
    char buf[2048];
    cudaStream_t s, s1;
    gate_t g = {0, 0};
    volatile int flag = 0;
    cudaEvent_t e;
    void *p;
    cudaError_t rc;

    quarantine_checks();
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaLaunchHostFunc(s, calls_cuda_fn, (void *)&flag);
    poll_flag(&flag, 1, 5);
    check(hostfn_rc == cudaErrorNotPermitted && hostfn_nrc == ncclInvalidUsage,
          "a CUDA or NCCL call from a host function is refused (cudaErrorNotPermitted)",
          "cuda %d nccl %d", hostfn_rc, hostfn_nrc);
    A.cudaStreamSynchronize(s);

    /* overlapping copies: copy engines are no memmove */
    A.cudaMalloc(&p, 256);
    cap_begin();
    rc = A.cudaMemcpyAsync((char *)p + 16, p, 64, cudaMemcpyDeviceToDevice, s);
    cap_end(buf, sizeof(buf));
    check(rc == cudaErrorInvalidValue && strstr(buf, "overlap"),
          "a copy between overlapping ranges is refused", "rc %d, '%s'", rc, buf);
    check(A.cudaMemcpyAsync((char *)p + 64, p, 64, cudaMemcpyDeviceToDevice, s) == cudaSuccess,
          "... adjacent ranges are fine", "-");
    A.cudaStreamSynchronize(s);
    A.cudaFree(p);

    /* a destroyed blocking stream's pending work still orders the NULL stream */
    A.cudaStreamCreateWithFlags(&s1, cudaStreamDefault);
    A.cudaLaunchHostFunc(s1, gate_fn, &g);
    A.cudaStreamDestroy(s1);
    flag = 0;
    A.cudaLaunchHostFunc(0, flag_fn, (void *)&flag);
    check(!poll_flag(&flag, 1, 0.3), "NULL-stream work waits for a destroyed blocking stream's "
          "pending work", "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    check(poll_flag(&flag, 1, 5), "... and runs once it is done", "flag %d", flag);
    A.cudaDeviceSynchronize();

    /* an event destroyed with a record and a wait on it pending: both still run */
    g = (gate_t){0, 0};
    flag = 0;
    A.cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    A.cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    A.cudaLaunchHostFunc(s, gate_fn, &g);
    A.cudaEventRecord(e, s);
    A.cudaStreamWaitEvent(s1, e, 0);
    A.cudaLaunchHostFunc(s1, flag_fn, (void *)&flag);
    check(A.cudaEventDestroy(e) == cudaSuccess && !poll_flag(&flag, 1, 0.2),
          "cudaEventDestroy of an event still pending returns at once; its waiter still waits",
          "flag %d", flag);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    check(poll_flag(&flag, 1, 5) && A.cudaStreamSynchronize(s) == cudaSuccess,
          "... until the record runs", "flag %d", flag);
    A.cudaStreamDestroy(s1);

    /* cudaMallocAsync takes the stream's device; cudaFree syncs that device */
    A.cudaSetDevice(1);
    A.cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    A.cudaSetDevice(0);
    g = (gate_t){0, 0};
    A.cudaLaunchHostFunc(s1, gate_fn, &g);
    A.cudaMallocAsync(&p, 64, s1);
    {
        pthread_t th;
        struct freer fr = {p, 0, cudaSuccess};
        pthread_create(&th, NULL, free_thread, &fr); /* a fresh thread: device 0 */
        check(!poll_flag(&fr.done, 1, 0.3), "cudaMallocAsync on device 1's stream is device 1's "
              "memory: cudaFree waits for device 1", "done %d", fr.done);
        __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
        check(poll_flag(&fr.done, 1, 5) && fr.rc == cudaSuccess, "... and returns once it is idle",
              "done %d rc %d", fr.done, fr.rc);
        pthread_join(th, NULL);
    }
    A.cudaStreamDestroy(s1);
    A.cudaStreamDestroy(s);
    A.cudaGetLastError();
}

/* ---- children: one rank each ---- */

static int rank_, nranks_;
static const char *dir_;
static ncclUniqueId ids_[4];

static ncclComm_t init_comm(int which, const char *name, int blocking, ncclResult_t *rc)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclComm_t c = NULL;

    cfg.blocking = blocking;
    cfg.commName = name;
    *rc = A.ncclCommInitRankConfig(&c, nranks_, ids_[which], rank_, &cfg);
    return c;
}

/* a non-blocking call's end, polled under a deadline */
static ncclResult_t settle(ncclComm_t c, ncclResult_t rc, double secs, int *seen_inprog)
{
    double end = now_s() + secs;

    while (rc == ncclInProgress && now_s() < end) {
        if (seen_inprog)
            *seen_inprog = 1;
        nap();
        if (A.ncclCommGetAsyncError(c, &rc) != ncclSuccess)
            return ncclInternalError;
    }
    return rc;
}

/* a file in the shared directory: the ranks' own signals, polled */
static void mark(const char *what)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir_, what);
    if ((fd = open(path, O_WRONLY | O_CREAT, 0644)) >= 0)
        close(fd);
}

static int marked(const char *what, double secs)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", dir_, what);
    for (double end = now_s() + secs; now_s() < end; nap())
        if (access(path, F_OK) == 0)
            return 1;
    return 0;
}

/* the reference: what rank r contributes at i, small exact values */
static double val(int r, size_t i, int op)
{
    if (op == ncclProd)
        return (double)((int)((i + (size_t)r) % 3) - 1 + (i % 2 ? 2 : 0)); /* -1..3 */
    return (double)((int)((i * 7 + (size_t)r * 3) % 23) - 11);
}

static size_t tsize(ncclDataType_t t)
{
    return t == ncclFloat64 || t == ncclInt64 ? 8 : t == ncclFloat16 || t == ncclBfloat16 ? 2 : 4;
}

/* doubles to a type and back, for the exact values used (16-bit: small ints) */
static void put(void *b, size_t i, ncclDataType_t t, double v)
{
    float f = (float)v;
    uint32_t u;

    switch (t) {
    case ncclFloat32: ((float *)b)[i] = f; break;
    case ncclFloat64: ((double *)b)[i] = v; break;
    case ncclInt32: ((int32_t *)b)[i] = (int32_t)v; break;
    case ncclInt64: ((int64_t *)b)[i] = (int64_t)v; break;
    case ncclBfloat16: memcpy(&u, &f, 4); ((uint16_t *)b)[i] = (uint16_t)(u >> 16); break;
    default: { /* float16 of a small integer or a power-of-two fraction: exact */
        int e = 0;
        uint16_t sign = f < 0 ? 0x8000 : 0;
        float a = f < 0 ? -f : f;
        if (a == 0) {
            ((uint16_t *)b)[i] = sign;
            break;
        }
        while (a >= 2) a /= 2, e++;
        while (a < 1) a *= 2, e--;
        ((uint16_t *)b)[i] = (uint16_t)(sign | (uint16_t)((e + 15) << 10) |
                                        (uint16_t)((a - 1) * 1024));
    }
    }
}

static double get(const void *b, size_t i, ncclDataType_t t)
{
    uint32_t u;
    float f;

    switch (t) {
    case ncclFloat32: return ((const float *)b)[i];
    case ncclFloat64: return ((const double *)b)[i];
    case ncclInt32: return ((const int32_t *)b)[i];
    case ncclInt64: return (double)((const int64_t *)b)[i];
    case ncclBfloat16: u = (uint32_t)((const uint16_t *)b)[i] << 16; memcpy(&f, &u, 4); return f;
    default: {
        uint16_t h = ((const uint16_t *)b)[i];
        int e = (h >> 10) & 0x1f;
        double m = (h & 0x3ff) / 1024.0;
        double v = e ? (1 + m) : m * 2;
        for (; e > 15; e--) v *= 2;
        for (; e < 15 && e; e++) v /= 2;
        if (!((h >> 10) & 0x1f)) for (int k = 0; k < 14; k++) v /= 2;
        return h & 0x8000 ? -v : v;
    }
    }
}

static double expect(size_t i, int op, ncclDataType_t t, int premul)
{
    double acc = 0, k = t == ncclInt32 || t == ncclInt64 ? 2 : 0.5;

    for (int r = 0; r < nranks_; r++) {
        double v = val(r, i, op) * (premul ? k : 1);
        if (r == 0) acc = v;
        else if (op == ncclProd) acc *= v;
        else if (op == ncclMax) acc = v > acc ? v : acc;
        else if (op == ncclMin) acc = v < acc ? v : acc;
        else acc += v;
    }
    if (op == ncclAvg)
        acc = t == ncclInt32 || t == ncclInt64 ? (double)((long)acc / nranks_) : acc / nranks_;
    return acc;
}

static const char *tname(ncclDataType_t t)
{
    return t == ncclFloat32 ? "float32" : t == ncclFloat64 ? "float64" : t == ncclBfloat16 ? "bfloat16"
           : t == ncclFloat16 ? "float16" : t == ncclInt32 ? "int32" : "int64";
}

/* one allreduce of count elements, checked against the host's answer */
static void one_allreduce(ncclComm_t c, cudaStream_t s, ncclDataType_t t, int op, int premul,
                          size_t count, int inplace)
{
    static const char *const ops[] = {"sum", "prod", "max", "min", "avg"};
    size_t es = tsize(t), bad = count;
    unsigned char *h = malloc(count * es), *o = malloc(count * es);
    void *d, *r;
    ncclRedOp_t rop = (ncclRedOp_t)op;
    ncclResult_t rc = ncclSuccess;
    char what[160];
    double got = 0, want = 0;

    for (size_t i = 0; i < count; i++)
        put(h, i, t, val(rank_, i, op));
    A.cudaMalloc(&d, count * es);
    r = d;
    if (!inplace)
        A.cudaMalloc(&r, count * es);
    A.cudaMemcpy(d, h, count * es, cudaMemcpyHostToDevice);
    if (premul) {
        unsigned char k[8];
        put(k, 0, t, t == ncclInt32 || t == ncclInt64 ? 2 : 0.5);
        rc = A.ncclRedOpCreatePreMulSum(&rop, k, t, ncclScalarHostImmediate, c);
    }
    if (rc == ncclSuccess)
        rc = A.ncclAllReduce(d, r, count, t, rop, c, s);
    if (rc == ncclSuccess)
        rc = A.cudaStreamSynchronize(s) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
    if (premul)
        A.ncclRedOpDestroy(rop, c);
    A.cudaMemcpy(o, r, count * es, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < count && bad == count; i++)
        if ((got = get(o, i, t)) != (want = expect(i, op, t, premul)))
            bad = i;
    snprintf(what, sizeof(what), "allreduce %zu x %s %s%s", count, tname(t),
             premul ? "premulsum" : ops[op], inplace ? " in place" : "");
    say(rc == ncclSuccess && bad == count, what, "rc %d, [%zu] = %g, want %g", rc, bad, got, want);
    A.cudaFree(d);
    if (!inplace)
        A.cudaFree(r);
    free(h);
    free(o);
}

/* reduce-scatter, allgather and broadcast, in and out of place, and count 0 */
static void moves(ncclComm_t c, cudaStream_t s)
{
    size_t rc_ = 1000, n = (size_t)nranks_;
    float *h = malloc(n * rc_ * 4), *o = malloc(n * rc_ * 4);
    void *d, *r;
    size_t bad;

    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < n * rc_; i++)
            h[i] = (float)val(rank_, i, ncclSum);
        A.cudaMalloc(&d, n * rc_ * 4);
        A.cudaMalloc(&r, rc_ * 4);
        A.cudaMemcpy(d, h, n * rc_ * 4, cudaMemcpyHostToDevice);
        void *out = inplace ? (char *)d + (size_t)rank_ * rc_ * 4 : r;
        ncclResult_t rc = A.ncclReduceScatter(d, out, rc_, ncclFloat32, ncclSum, c, s);
        A.cudaStreamSynchronize(s);
        A.cudaMemcpy(o, out, rc_ * 4, cudaMemcpyDeviceToHost);
        bad = rc_;
        for (size_t i = 0; i < rc_ && bad == rc_; i++)
            if (o[i] != (float)expect((size_t)rank_ * rc_ + i, ncclSum, ncclFloat32, 0))
                bad = i;
        say(rc == ncclSuccess && bad == rc_, inplace ? "reduce-scatter in place" : "reduce-scatter",
            "rc %d, first bad %zu", rc, bad);
        A.cudaFree(d);
        A.cudaFree(r);
    }
    for (int inplace = 0; inplace < 2; inplace++) {
        A.cudaMalloc(&d, n * rc_ * 4);
        A.cudaMalloc(&r, rc_ * 4);
        for (size_t i = 0; i < rc_; i++)
            h[i] = (float)(rank_ * 10000 + (int)i);
        void *in = inplace ? (char *)d + (size_t)rank_ * rc_ * 4 : r;
        A.cudaMemcpy(in, h, rc_ * 4, cudaMemcpyHostToDevice);
        ncclResult_t rc = A.ncclAllGather(in, d, rc_, ncclFloat32, c, s);
        A.cudaStreamSynchronize(s);
        A.cudaMemcpy(o, d, n * rc_ * 4, cudaMemcpyDeviceToHost);
        bad = n * rc_;
        for (size_t i = 0; i < n * rc_ && bad == n * rc_; i++)
            if (o[i] != (float)((int)(i / rc_) * 10000 + (int)(i % rc_)))
                bad = i;
        say(rc == ncclSuccess && bad == n * rc_, inplace ? "allgather in place" : "allgather",
            "rc %d, first bad %zu", rc, bad);
        A.cudaFree(d);
        A.cudaFree(r);
    }
    A.cudaMalloc(&d, rc_);
    memset(h, rank_, rc_);
    A.cudaMemcpy(d, h, rc_, cudaMemcpyHostToDevice);
    ncclResult_t rc = A.ncclBroadcast(d, d, rc_, ncclUint8, nranks_ - 1, c, s);
    A.cudaStreamSynchronize(s);
    A.cudaMemcpy(o, d, rc_, cudaMemcpyDeviceToHost);
    say(rc == ncclSuccess && ((unsigned char *)o)[0] == nranks_ - 1 &&
            ((unsigned char *)o)[rc_ - 1] == nranks_ - 1,
        "broadcast from the last rank", "rc %d, got %d", rc, ((unsigned char *)o)[0]);
    rc = A.ncclAllReduce(d, d, 0, ncclFloat32, ncclSum, c, s);
    say(rc == ncclSuccess && A.cudaStreamSynchronize(s) == cudaSuccess,
        "count 0 is legal (still a rendezvous)", "rc %d", rc);
    {
        void *x;
        cudaError_t e;
        A.cudaMalloc(&x, 64);
        rc = A.ncclAllReduce(x, (char *)x + 4, 8, ncclFloat32, ncclSum, c, s);
        say(rc == ncclInvalidArgument, "overlapping send and recv, not in place, are refused",
            "rc %d", rc);
        rc = A.ncclAllReduce(x, x, 100, ncclFloat32, ncclSum, c, s);
        say(rc == ncclInvalidArgument, "a collective out of bounds is refused", "rc %d", rc);
        e = A.cudaFree(x);
        (void)e;
    }
    A.cudaFree(d);
    free(h);
    free(o);
}

/* avg of values whose sum overflows the type: NCCL premultiplies by 1/n,
 * so the result is finite; int32 sums wrap as on a GPU */
static void edge_reductions(ncclComm_t c, cudaStream_t s)
{
    unsigned char h[16], o[16];
    void *d;
    ncclResult_t rc;
    double got;

    A.cudaMalloc(&d, 16);
    put(h, 0, ncclFloat16, 30000);
    A.cudaMemcpy(d, h, 2, cudaMemcpyHostToDevice);
    rc = A.ncclAllReduce(d, d, 1, ncclFloat16, ncclAvg, c, s);
    A.cudaStreamSynchronize(s);
    A.cudaMemcpy(o, d, 2, cudaMemcpyDeviceToHost);
    got = get(o, 0, ncclFloat16);
    say(rc == ncclSuccess && got == 30000, "avg of float16 30000 on every rank is 30000 (NCCL: "
        "PreMulSum by 1/n, no overflow)", "rc %d, got %g", rc, got);
    ((float *)h)[0] = 3e38f;
    A.cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);
    rc = A.ncclAllReduce(d, d, 1, ncclFloat32, ncclAvg, c, s);
    A.cudaStreamSynchronize(s);
    A.cudaMemcpy(o, d, 4, cudaMemcpyDeviceToHost);
    got = ((float *)o)[0];
    say(rc == ncclSuccess && got > 2.9e38 && got < 3.1e38, "avg of float32 3e38 on every rank "
        "is about 3e38", "rc %d, got %g", rc, got);
    ((int32_t *)h)[0] = INT32_MAX;
    A.cudaMemcpy(d, h, 4, cudaMemcpyHostToDevice);
    rc = A.ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c, s);
    A.cudaStreamSynchronize(s);
    A.cudaMemcpy(o, d, 4, cudaMemcpyDeviceToHost);
    say(rc == ncclSuccess && ((int32_t *)o)[0] == (int32_t)(0x7fffffffu * (uint32_t)nranks_),
        "an int32 sum wraps as on a GPU", "rc %d, got %d", rc, ((int32_t *)o)[0]);
    A.cudaFree(d);
}

static void child_coll(void)
{
    static const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat16,
                                           ncclInt32, ncclInt64};
    struct ddp_standin_stats stt;
    ncclResult_t rc;
    cudaStream_t s;
    ncclComm_t c;

    A.cudaSetDevice(rank_);
    c = init_comm(0, "check coll", 1, &rc);
    say(rc == ncclSuccess, "blocking init", "rc %d: %s", rc, A.ncclGetLastError(NULL));
    if (rc != ncclSuccess)
        return;
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (int op = 0; op < 5; op++)
            one_allreduce(c, s, types[t], op, 0, 1000, op == 0);
        one_allreduce(c, s, types[t], ncclSum, 1, 1000, 0);
    }
    one_allreduce(c, s, ncclFloat32, ncclSum, 0, 300000, 1); /* more than one window */
    moves(c, s);
    edge_reductions(c, s);
    A.ddp_standin_stats(&stt);
    say(stt.connect_waits == 1, "the first collective waited for the peers' connection (once)",
        "connect_waits %ld", stt.connect_waits);
    say(A.ncclCommDestroy(c) == ncclSuccess, "ncclCommDestroy", "-");
    rc = A.ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, s);
    say(rc == ncclInvalidArgument, "a destroyed communicator's handle is refused", "rc %d", rc);
    A.cudaStreamDestroy(s);
}

static void child_mismatch(void)
{
    ncclResult_t rc, as = ncclSuccess;
    cudaStream_t s;
    ncclComm_t c;
    void *d;
    double end;

    A.cudaSetDevice(rank_);
    c = init_comm(0, "check mismatch", 1, &rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc(&d, 64);
    rc = A.ncclAllReduce(d, d, rank_ ? 11 : 10, ncclFloat32, ncclSum, c, s);
    for (end = now_s() + 10; now_s() < end; nap())
        if (A.ncclCommGetAsyncError(c, &as) != ncclSuccess || as != ncclSuccess)
            break;
    say(rc == ncclSuccess && as == ncclInvalidUsage, "a mismatched collective: async error "
        "ncclInvalidUsage", "call rc %d, async %d", rc, as);
    const char *m = A.ncclGetLastError(c);
    say(strstr(m, "collective #1 mismatch: rank 0 allreduce 10 x float32 sum vs rank 1 allreduce "
               "11 x float32 sum") != NULL, "... its message names both ranks' calls", "'%s'", m);
    say(A.cudaStreamQuery(s) == cudaErrorNotReady, "... and the kernel spins", "-");
    say(A.ncclCommAbort(c) == ncclSuccess && A.cudaStreamSynchronize(s) == cudaSuccess,
        "... until ncclCommAbort", "-");
    say(strstr(m, "collective #1 mismatch") != NULL, "... and the text ncclGetLastError gave "
        "outlives the communicator", "'%s'", m);
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

struct aborter {
    ncclComm_t c;
    volatile int done;
};

static void *abort_thread(void *arg)
{
    struct aborter *a = arg;

    A.ncclCommAbort(a->c);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* two communicators issued in opposite orders: the GPU deadlock */
static void child_deadlock(void)
{
    ncclResult_t r0, r1;
    cudaStream_t s;
    ncclComm_t a, b;
    void *d;

    A.cudaSetDevice(rank_);
    a = init_comm(0, "check A", 1, &r0);
    b = init_comm(1, "check B", 1, &r1);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc(&d, 64);
    /* connect both in the same order first */
    A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, a, s);
    A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, b, s);
    A.cudaStreamSynchronize(s);
    A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, rank_ ? b : a, s);
    A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, rank_ ? a : b, s);
    int stuck = 1;
    for (double end = now_s() + 0.3; now_s() < end && stuck; nap())
        stuck = A.cudaStreamQuery(s) == cudaErrorNotReady;
    say(stuck, "two communicators in opposite orders on two ranks deadlock", "-");
    if (rank_ == 0) {
        struct aborter ab = {b, 0};
        pthread_t th;
        pthread_create(&th, NULL, abort_thread, &ab);
        say(!poll_flag(&ab.done, 1, 0.4), "ncclCommAbort of the communicator queued behind the "
            "other's spinning kernel does not return", "done %d", ab.done);
        A.ncclCommAbort(a);
        say(poll_flag(&ab.done, 1, 5), "... until the other is aborted too", "done %d", ab.done);
        pthread_join(th, NULL);
    } else {
        struct aborter ab = {NULL, 0};
        A.ncclGroupStart();
        A.ncclCommAbort(a);
        A.ncclCommAbort(b);
        A.ncclGroupEnd();
        ab.done = 1;
        say(ab.done, "a group abort of both returns", "-");
    }
    say(A.cudaStreamSynchronize(s) == cudaSuccess, "... and the stream drains", "-");
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

static void child_nonblocking(void)
{
    ncclResult_t rc, got;
    cudaStream_t s;
    ncclComm_t c;
    void *d;
    int seen = 0;

    A.cudaSetDevice(rank_);
    if (rank_ == 1 && !marked("rank0-in-progress", 10))
        say(0, "rank 0 saw its init in progress", "no mark");
    c = init_comm(0, "check nb", 0, &rc);
    say(rc == ncclInProgress, "non-blocking init returns ncclInProgress", "rc %d", rc);
    if (rank_ == 0) {
        A.ncclCommGetAsyncError(c, &got);
        say(got == ncclInProgress, "... and stays in progress while a peer has not joined",
            "async %d", got);
        A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        say(A.ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, s) == ncclInvalidArgument,
            "... a collective then is ncclInvalidArgument", "-");
        A.cudaStreamDestroy(s);
        mark("rank0-in-progress");
    }
    rc = settle(c, rc, 10, NULL);
    say(rc == ncclSuccess, "... then ncclSuccess once every rank joined", "rc %d", rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc(&d, 64);
    rc = A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s);
    say(rc == ncclInProgress, "a collective on a non-blocking comm returns ncclInProgress", "rc %d",
        rc);
    say(A.cudaMemsetAsync(d, 0, 4, s) != cudaSuccess, "... other work on its stream while it is "
        "in progress is refused", "-");
    rc = settle(c, rc, 10, &seen);
    say(rc == ncclSuccess && seen, "... ncclCommGetAsyncError says ncclInProgress, then ncclSuccess",
        "rc %d seen %d", rc, seen);
    say(A.cudaStreamSynchronize(s) == cudaSuccess, "... and its kernel runs", "-");
    rc = A.ncclCommFinalize(c);
    rc = settle(c, rc, 10, NULL);
    say(rc == ncclSuccess && A.ncclCommDestroy(c) == ncclSuccess, "finalize, then destroy",
        "rc %d", rc);
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

/* ncclCommShrink: ranks 0 and 1 drop rank 2, which joined the
 * communicator and then left; their allreduce waits for it meanwhile */
static void child_shrink(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    struct ddp_standin_stats st0, st1;
    ncclResult_t rc;
    cudaStream_t s;
    ncclComm_t c, k = NULL;
    float *d, h[4] = {0};
    int ex[2] = {2, 2}, self[1] = {rank_};

    A.cudaSetDevice(rank_);
    c = init_comm(0, "check shrink", 1, &rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc((void **)&d, sizeof(h));
    A.cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    rc = A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s); /* connects the three */
    A.cudaStreamSynchronize(s);
    if (rank_ == 2) {
        say(rc == ncclSuccess, "rank 2 joins, does one allreduce, then leaves", "rc %d", rc);
        A.ncclCommAbort(c);
        A.cudaFree(d);
        A.cudaStreamDestroy(s);
        return;
    }
    rc = A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s);
    say(rc == ncclSuccess, "an allreduce rank 2 never joins is in flight", "rc %d", rc);
    say(A.ncclCommShrink(c, ex, 0, &k, NULL, NCCL_SHRINK_ABORT) == ncclInvalidArgument && !k,
        "ncclCommShrink excluding nobody is ncclInvalidArgument (NCCL's own check)", "-");
    say(A.ncclCommShrink(c, self, 1, &k, NULL, NCCL_SHRINK_ABORT) == ncclInvalidArgument,
        "... excluding the caller too", "-");
    say(A.ncclCommShrink(c, ex, 2, &k, NULL, NCCL_SHRINK_ABORT) == ncclInvalidArgument,
        "... and a rank excluded twice", "-");
    A.ddp_standin_stats(&st0);
    rc = A.ncclCommShrink(c, ex, 1, &k, NULL, NCCL_SHRINK_DEFAULT);
    A.ddp_standin_stats(&st1);
    say(rc == ncclInvalidUsage && st1.violations == st0.violations + 1,
        "NCCL_SHRINK_DEFAULT with a collective in flight is a contract violation", "rc %d", rc);
    cfg.blocking = 0;
    cfg.commName = "check shrunk";
    rc = settle(k, A.ncclCommShrink(c, ex, 1, &k, &cfg, NCCL_SHRINK_ABORT), 20, NULL);
    say(rc == ncclSuccess && k, "NCCL_SHRINK_ABORT ends it and makes the 2-rank communicator",
        "rc %d", rc);
    say(A.cudaStreamSynchronize(s) == cudaSuccess, "... the aborted allreduce leaves the stream",
        "-");
    for (int i = 0; i < 4; i++)
        h[i] = (float)(rank_ + 1);
    A.cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice);
    rc = settle(k, A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, k, s), 20, NULL);
    A.cudaStreamSynchronize(s);
    A.cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
    say(rc == ncclSuccess && h[0] == 3 && h[3] == 3, "... whose allreduce sums the two survivors",
        "rc %d, %g %g", rc, h[0], h[3]);
    say(A.ncclCommDestroy(c) == ncclInvalidUsage,
        "after an abortive shrink the parent takes no ncclCommDestroy", "-");
    say(A.ncclCommAbort(c) == ncclSuccess, "... only ncclCommAbort", "-");
    rc = A.ncclCommFinalize(k);
    rc = settle(k, rc, 10, NULL);
    say(rc == ncclSuccess && A.ncclCommDestroy(k) == ncclSuccess, "the shrunk one ends cleanly",
        "rc %d", rc);
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

static void child_dup(void)
{
    ncclResult_t rc;
    ncclComm_t c;

    A.cudaSetDevice(0);
    c = init_comm(0, "check dup", 1, &rc);
    const char *m = A.ncclGetLastError(NULL);
    say(rc == ncclInvalidUsage && !c && strstr(m, "Duplicate GPU detected : rank 0 and rank 1 both "
        "on CUDA device"), "two ranks on one GPU of one host are refused", "rc %d '%s'", rc, m);
    char id[32];
    snprintf(id, sizeof(id), "host%d", rank_);
    setenv("NCCL_HOSTID", id, 1);
    c = init_comm(1, "check dup2", 1, &rc);
    say(rc == ncclSuccess, "... but fine on two hosts (NCCL_HOSTID)", "rc %d", rc);
    if (c)
        A.ncclCommDestroy(c);
}

/* hang, error: the kernel never ends; the peer's waits; abort ends both */
static void child_fault(const char *kind)
{
    ncclResult_t rc, as = ncclSuccess;
    cudaStream_t s;
    ncclComm_t c;
    void *d;

    A.cudaSetDevice(rank_);
    c = init_comm(0, "check fault", 1, &rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc(&d, 64);
    rc = A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s);
    int stuck = 1;
    for (double end = now_s() + 0.3; now_s() < end && stuck; nap())
        stuck = A.cudaStreamQuery(s) == cudaErrorNotReady;
    say(rc == ncclSuccess && stuck, "the faulted collective never finishes", "rc %d", rc);
    if (!strcmp(kind, "error") && rank_ == 1) {
        for (double end = now_s() + 5; now_s() < end && as == ncclSuccess; nap())
            A.ncclCommGetAsyncError(c, &as);
        say(as == ncclRemoteError && strstr(A.ncclGetLastError(c), "injected fault"),
            "error: the comm's async error is ncclRemoteError, 'injected fault'", "async %d '%s'",
            as, A.ncclGetLastError(c));
    }
    say(A.ncclCommAbort(c) == ncclSuccess && A.cudaStreamSynchronize(s) == cudaSuccess,
        "ncclCommAbort ends it", "-");
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

static void child_initfail(void)
{
    ncclResult_t rc, as;
    ncclComm_t c;
    double end;

    A.cudaSetDevice(rank_);
    c = init_comm(0, "check initfail", 0, &rc);
    say(rc == ncclInProgress, "initfail: init returns ncclInProgress first", "rc %d", rc);
    as = ncclInProgress;
    for (end = now_s() + (rank_ ? 5 : 0.3); now_s() < end && as == ncclInProgress; nap())
        A.ncclCommGetAsyncError(c, &as);
    if (rank_ == 1)
        say(as == ncclSystemError, "initfail: then ncclSystemError", "async %d", as);
    else
        say(as == ncclInProgress, "initfail: its peer stays in progress", "async %d", as);
    say(A.ncclCommAbort(c) == ncclSuccess, "ncclCommAbort of it", "-");
}

/* single-rank communicators and env-driven single-process behaviours */
static void child_recordfail(void)
{
    cudaEvent_t e;
    cudaError_t r1, r2, r3;

    A.cudaEventCreateWithFlags(&e, 0);
    r1 = A.cudaEventRecord(e, 0);
    r2 = A.cudaEventRecord(e, 0);
    r3 = A.cudaEventRecord(e, 0);
    say(r1 == cudaSuccess && r2 == cudaErrorLaunchFailure && r3 == cudaSuccess,
        "recordfail: the 2nd cudaEventRecord fails with cudaErrorLaunchFailure", "%d %d %d", r1,
        r2, r3);
    A.cudaEventSynchronize(e);
    A.cudaEventDestroy(e);
}

static void *slow_abort(void *arg);

/* single-rank communicators: the argument checks that need no peer */
static void child_single(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t rc;
    cudaStream_t s;
    ncclComm_t c = NULL;
    void *d;

    cfg.blocking = 2;
    rc = A.ncclCommInitRankConfig(&c, 1, ids_[1], 0, &cfg);
    say(rc == ncclInvalidArgument && strstr(A.ncclGetLastError(NULL), "blocking attribute"),
        "config.blocking other than 0, 1 or unset is ncclInvalidArgument", "rc %d", rc);
    if (rc == ncclSuccess)
        A.ncclCommDestroy(c);
    c = init_comm(0, "check single", 1, &rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaMalloc(&d, 64);
    say(A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s) == ncclSuccess &&
            A.cudaStreamSynchronize(s) == cudaSuccess, "a single-rank allreduce", "-");
    say(A.ncclCommFinalize(c) == ncclSuccess, "ncclCommFinalize (blocking)", "-");
    rc = A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s);
    say(rc == ncclInvalidUsage, "a collective after ncclCommFinalize is ncclInvalidUsage", "rc %d",
        rc);
    rc = A.ncclCommFinalize(c);
    say(rc == ncclInvalidUsage, "... and so is a second ncclCommFinalize", "rc %d", rc);
    say(A.ncclCommDestroy(c) == ncclSuccess, "... ncclCommDestroy still ends it", "-");
    c = init_comm(2, "check single 2", 1, &rc);
    rc = A.ncclAllReduce(d, d, SIZE_MAX / 4 + 3, ncclFloat32, ncclSum, c, s);
    say(rc == ncclInvalidArgument, "a count whose byte size overflows size_t is refused", "rc %d",
        rc);
    A.cudaStreamSynchronize(s);
    A.ncclCommDestroy(c);
    A.cudaFree(d);
    A.cudaStreamDestroy(s);
}

/* a host range past the top of the address space (a GPU would fault) */
static void child_wrap(void)
{
    void *d;
    cudaError_t rc;

    A.cudaMalloc(&d, 64);
    rc = A.cudaMemcpyAsync(d, (void *)(UINTPTR_MAX - 15), 64, cudaMemcpyHostToDevice, 0);
    say(rc == cudaErrorInvalidValue, "a host range wrapping around the address space is refused",
        "rc %d", rc);
    A.cudaDeviceSynchronize();
    A.cudaFree(d);
}

/* a process that joined a communicator its peers never joined, and exits:
 * its segment does not stay in /dev/shm */
static void child_orphan(void)
{
    char path[200] = "/dev/shm";
    pid_t pid;
    int st = -1;

    memcpy(path + 8, ids_[0].internal + 8, 64); /* the id's name, "/ddp-gpu-standin-..." */
    path[8 + 64] = 0;
    if ((pid = fork()) == 0) {
        ncclResult_t rc;
        nranks_ = 2; /* rank 1 never comes */
        init_comm(0, "check orphan", 0, &rc);
        exit(rc == ncclInProgress && access(path, F_OK) == 0 ? 0 : 9);
    }
    waitpid(pid, &st, 0);
    say(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a lone rank's non-blocking init made its segment",
        "status %d", st);
    say(access(path, F_OK) != 0, "... and its exit unlinked it", "%s exists", path);
}

struct destroyer {
    cudaStream_t s;
    cudaEvent_t e;
    cudaError_t rc;
};

static void *destroy_thread(void *arg)
{
    struct destroyer *d = arg;

    d->rc = d->s ? A.cudaStreamDestroy(d->s) : A.cudaEventDestroy(d->e);
    return NULL;
}

/* two threads destroying one stream (one event) while an abort's cleanup
 * holds the context lock: exactly one wins, nothing is freed twice */
static void child_abortrace(void)
{
    struct ddp_standin_stats stt = {0};
    struct destroyer d[4];
    pthread_t th, dt[4];
    ncclResult_t rc;
    cudaStream_t s;
    cudaEvent_t e;
    ncclComm_t c;
    int ok_s = 0, ok_e = 0;

    c = init_comm(0, "check slow race", 1, &rc);
    A.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    A.cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    pthread_create(&th, NULL, slow_abort, c);
    for (double end = now_s() + 5; now_s() < end && !stt.aborts; nap())
        A.ddp_standin_stats(&stt);
    for (double end = now_s() + 0.05; now_s() < end;)
        nap(); /* into the cleanup, which holds the lock 800 ms */
    for (int i = 0; i < 4; i++) {
        d[i] = (struct destroyer){i < 2 ? s : NULL, e, cudaSuccess};
        pthread_create(&dt[i], NULL, destroy_thread, &d[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(dt[i], NULL);
    pthread_join(th, NULL);
    ok_s = (d[0].rc == cudaSuccess) + (d[1].rc == cudaSuccess);
    ok_e = (d[2].rc == cudaSuccess) + (d[3].rc == cudaSuccess);
    say(ok_s == 1, "two cudaStreamDestroy of one stream behind the context lock: one succeeds",
        "%d succeeded", ok_s);
    say(ok_e == 1, "two cudaEventDestroy of one event behind the context lock: one succeeds",
        "%d succeeded", ok_e);
    A.ddp_standin_stats(&stt);
    say(stt.live_streams == 0 && stt.live_events == 0, "... and each is counted once",
        "streams %ld events %ld", stt.live_streams, stt.live_events);
}

static void *slow_abort(void *arg)
{
    A.ncclCommAbort((ncclComm_t)arg);
    return NULL;
}

static void child_abortslow(void)
{
    struct ddp_standin_stats stt;
    ncclResult_t rc;
    cudaEvent_t e;
    ncclComm_t c;
    pthread_t th;
    double longest = 0, t0;

    c = init_comm(0, "check slow", 1, &rc);
    A.cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    pthread_create(&th, NULL, slow_abort, c);
    for (double end = now_s() + 5; now_s() < end && longest < 0.3;) {
        A.ddp_standin_stats(&stt);
        if (!stt.aborts) {
            nap();
            continue;
        }
        t0 = now_s();
        A.cudaEventQuery(e);
        if (now_s() - t0 > longest)
            longest = now_s() - t0;
    }
    pthread_join(th, NULL);
    say(longest >= 0.3, "abortslow: the abort's cleanup holds the context lock: cudaEventQuery "
        "blocks", "longest query %.3fs", longest);
    A.cudaEventDestroy(e);
}

static void *malloc_thread(void *arg)
{
    A.cudaMalloc((void **)arg, 16);
    A.cudaFree(*(void **)arg);
    return NULL;
}

static void child_ctx(void)
{
    struct ddp_standin_stats stt;
    int d = -1, others = 0;
    void *p;

    A.cudaGetDevice(&d);
    A.ddp_standin_stats(&stt);
    for (int i = 0; i < 64; i++)
        others += stt.contexts[i];
    say(d == 0 && others == 0, "cudaGetDevice makes no context", "dev %d, contexts %d", d, others);
    A.cudaSetDevice(3);
    A.ddp_standin_stats(&stt);
    others = 0;
    for (int i = 0; i < 64; i++)
        others += i != 3 && stt.contexts[i];
    say(stt.contexts[3] == 1 && others == 0, "cudaSetDevice(3) makes a context on device 3 only",
        "contexts[3] %d, others %d", stt.contexts[3], others);
    pthread_t th;
    pthread_create(&th, NULL, malloc_thread, &p);
    pthread_join(th, NULL);
    A.ddp_standin_stats(&stt);
    say(stt.contexts[0] == 1, "cudaMalloc on a fresh thread makes a context on device 0",
        "contexts[0] %d", stt.contexts[0]);
}

static void child_visible(void)
{
    char bus[32] = "";
    int n = -1;

    A.cudaGetDeviceCount(&n);
    A.cudaDeviceGetPCIBusId(bus, sizeof(bus), 1);
    say(n == 2 && !strcmp(bus, "0000:11:00.0"), "CUDA_VISIBLE_DEVICES=3,1,x,2: 2 devices, the "
        "second physical device 1", "count %d, bus id of 1 '%s'", n, bus);
}

/* a clean run leaves nothing; "leak" leaves a stream */
static void child_report(int leak)
{
    ncclResult_t rc;
    cudaStream_t s;
    ncclComm_t c;
    void *d;

    A.cudaStreamCreateWithFlags(&s, 0);
    A.cudaMalloc(&d, 64);
    c = init_comm(0, "check report", 1, &rc);
    A.ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s);
    A.cudaStreamSynchronize(s);
    A.ncclCommDestroy(c);
    A.cudaFree(d);
    if (!leak)
        A.cudaStreamDestroy(s);
    say(rc == ncclSuccess, leak ? "a run that leaks a stream" : "a clean run", "rc %d", rc);
}

/* two communicators' kernels at once on two streams of one device */
static void child_overlap(void)
{
    struct ddp_standin_stats stt;
    cudaStream_t s1, s2;
    ncclComm_t a, b;
    ncclResult_t rc;
    void *d1, *d2;
    int v = 0;

    A.ncclGetVersion(&v);
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", 1); /* too late: read at the first call */
    A.cudaSetDevice(rank_);
    a = init_comm(0, "check ov A", 1, &rc);
    b = init_comm(1, "check ov B", 1, &rc);
    A.cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    A.cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    A.cudaMalloc(&d1, 64);
    A.cudaMalloc(&d2, 64);
    /* connected first (a first collective waits for every rank's), one at a time */
    A.ncclAllReduce(d1, d1, 4, ncclFloat32, ncclSum, a, s1);
    A.cudaStreamSynchronize(s1);
    A.ncclAllReduce(d2, d2, 4, ncclFloat32, ncclSum, b, s2);
    A.cudaStreamSynchronize(s2);
    /* rank 1 comes only once rank 0 has seen a's kernel (spinning for rank
     * 1) and b's run at once: no timing decides the outcome */
    if (rank_ == 1)
        marked("rank0-saw", 15);
    A.ncclAllReduce(d1, d1, 4, ncclFloat32, ncclSum, a, s1);
    A.ncclAllReduce(d2, d2, 4, ncclFloat32, ncclSum, b, s2);
    for (double end = now_s() + 10; rank_ == 0 && now_s() < end; nap()) {
        A.ddp_standin_stats(&stt);
        if (stt.cross_comm_overlaps >= 1)
            break;
    }
    if (rank_ == 0)
        mark("rank0-saw");
    A.cudaStreamSynchronize(s1);
    A.cudaStreamSynchronize(s2);
    A.ddp_standin_stats(&stt);
    if (rank_ == 1)
        say(A.cudaStreamQuery(s1) == cudaSuccess && A.cudaStreamQuery(s2) == cudaSuccess,
            "both communicators' kernels ran", "-");
    if (rank_ == 0)
        say(stt.cross_comm_overlaps >= 1, "two communicators' kernels at once on one device are "
            "counted (NCCL_LAUNCH_ORDER_IMPLICIT set after the first NCCL call has no effect)",
            "overlaps %ld", stt.cross_comm_overlaps);
    A.ncclCommDestroy(a);
    A.ncclCommDestroy(b);
    A.cudaFree(d1);
    A.cudaFree(d2);
    A.cudaStreamDestroy(s1);
    A.cudaStreamDestroy(s2);
}

/* a kernel that finds its memory freed: the context is lost for good */
static void child_sticky(void)
{
    cudaStream_t s1, s2;
    gate_t g = {0, 0};
    void *p;
    cudaError_t rc;

    A.cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    A.cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    A.cudaMallocAsync(&p, 64, s2);
    A.cudaLaunchHostFunc(s1, gate_fn, &g);
    A.cudaMemsetAsync(p, 0, 64, s1);
    A.cudaFreeAsync(p, s2);
    A.cudaStreamSynchronize(s2);
    __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
    rc = A.cudaStreamSynchronize(s1);
    say(rc == cudaErrorIllegalAddress, "a stream op on memory freed under it: "
        "cudaErrorIllegalAddress", "rc %d", rc);
    rc = A.cudaMalloc(&p, 8);
    say(rc == cudaErrorIllegalAddress, "... sticky: later calls fail too", "rc %d", rc);
}

static void child_refuse(void)
{
    int n = -1, v = 0;
    cudaError_t rc = A.cudaGetDeviceCount(&n);
    ncclResult_t nr = A.ncclGetVersion(&v);

    say(rc != cudaSuccess && nr == ncclSystemError, "without DDP_GPU_STANDIN=1 every call fails",
        "cuda %d nccl %d", rc, nr);
}

static int child(int argc, char **argv)
{
    const char *what = argv[3];

    if (argc < 7)
        return 2;
    rank_ = atoi(argv[4]);
    nranks_ = atoi(argv[5]);
    dir_ = argv[6];
    for (int i = 7; i < argc && i < 11; i++)
        for (int k = 0; k < (int)sizeof(ncclUniqueId); k++) {
            unsigned x = 0;
            sscanf(argv[i] + 2 * k, "%2x", &x);
            ids_[i - 7].internal[k] = (char)x;
        }
    if (load() < 0)
        return 1;
    if (!strcmp(what, "coll")) child_coll();
    else if (!strcmp(what, "mismatch")) child_mismatch();
    else if (!strcmp(what, "deadlock")) child_deadlock();
    else if (!strcmp(what, "nonblocking")) child_nonblocking();
    else if (!strcmp(what, "dup")) child_dup();
    else if (!strcmp(what, "shrink")) child_shrink();
    else if (!strcmp(what, "hang") || !strcmp(what, "error")) child_fault(what);
    else if (!strcmp(what, "initfail")) child_initfail();
    else if (!strcmp(what, "recordfail")) child_recordfail();
    else if (!strcmp(what, "abortslow")) child_abortslow();
    else if (!strcmp(what, "abortrace")) child_abortrace();
    else if (!strcmp(what, "single")) child_single();
    else if (!strcmp(what, "orphan")) child_orphan();
    else if (!strcmp(what, "wrap")) child_wrap();
    else if (!strcmp(what, "ctx")) child_ctx();
    else if (!strcmp(what, "visible")) child_visible();
    else if (!strcmp(what, "report")) child_report(0);
    else if (!strcmp(what, "leak")) child_report(1);
    else if (!strcmp(what, "overlap")) child_overlap();
    else if (!strcmp(what, "sticky")) child_sticky();
    else if (!strcmp(what, "refuse")) child_refuse();
    else
        return 2;
    return 0;
}

/* ---- the parent: ranks spawned, their lines numbered ---- */

typedef struct {
    pid_t pid;
    int fd, status, rank;
    char out[16384];
    size_t len;
} kid_t;

static char tmpdir[64];
static char self[4096]; /* this program: /proc/self/exe is valgrind's under valgrind */

/* SCENARIO on n ranks with ENV ("A=1 B=2", "-A" unsets), nids fresh ids;
 * each rank's lines checked; want_rc: the exit status rank 1 must give (-1: 0 all) */
static void scenario(const char *what, int n, int nids, const char *env, double secs,
                     int want_rc1)
{
    char hex[4][2 * sizeof(ncclUniqueId) + 1], sn[8], sr[8];
    kid_t kids[4];
    ncclUniqueId id;

    for (int i = 0; i < nids; i++) {
        A.ncclGetUniqueId(&id);
        for (int k = 0; k < (int)sizeof(id); k++)
            sprintf(hex[i] + 2 * k, "%02x", (unsigned char)id.internal[k]);
    }
    snprintf(sn, sizeof(sn), "%d", n);
    for (int r = 0; r < n; r++) {
        int p[2];
        if (pipe(p) < 0)
            return;
        kids[r] = (kid_t){.fd = p[0], .rank = r};
        if ((kids[r].pid = fork()) == 0) {
            char buf[512], *save = NULL, rs[8];
            dup2(p[1], 1);
            dup2(p[1], 2);
            close(p[0]);
            snprintf(rs, sizeof(rs), "%d", r);
            setenv("RANK", rs, 1);
            snprintf(buf, sizeof(buf), "%s", env);
            for (char *e = strtok_r(buf, " ", &save); e; e = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(e, '=');
                if (*e == '-')
                    unsetenv(e + 1);
                else if (eq) {
                    *eq = 0;
                    setenv(e, eq + 1, 1);
                }
            }
            snprintf(sr, sizeof(sr), "%d", r);
            char *args[12] = {"standin-check", (char *)lib_path, "child", (char *)what, sr, sn,
                              tmpdir};
            for (int i = 0; i < nids; i++)
                args[7 + i] = hex[i];
            execv(self, args);
            _exit(127);
        }
        close(p[1]);
        fcntl(p[0], F_SETFL, O_NONBLOCK);
    }
    /* read until every rank exits or the deadline passes */
    double end = now_s() + secs;
    int left = n, timed_out = 0;
    while (left > 0) {
        for (int r = 0; r < n; r++) {
            ssize_t got;
            while (kids[r].fd >= 0 && kids[r].len < sizeof(kids[r].out) - 1 &&
                   (got = read(kids[r].fd, kids[r].out + kids[r].len,
                               sizeof(kids[r].out) - 1 - kids[r].len)) > 0)
                kids[r].len += (size_t)got;
            if (kids[r].pid > 0 && waitpid(kids[r].pid, &kids[r].status, WNOHANG) == kids[r].pid) {
                kids[r].pid = 0;
                left--;
            }
        }
        if (left && now_s() > end) {
            timed_out = 1;
            for (int r = 0; r < n; r++)
                if (kids[r].pid > 0) {
                    kill(kids[r].pid, SIGKILL);
                    waitpid(kids[r].pid, &kids[r].status, 0);
                    kids[r].pid = 0;
                    left--;
                }
        }
        nap();
    }
    for (int r = 0; r < n; r++) {
        ssize_t got;
        while (kids[r].len < sizeof(kids[r].out) - 1 &&
               (got = read(kids[r].fd, kids[r].out + kids[r].len,
                           sizeof(kids[r].out) - 1 - kids[r].len)) > 0)
            kids[r].len += (size_t)got;
        kids[r].out[kids[r].len] = 0;
        close(kids[r].fd);
        int lines = 0;
        for (char *l = kids[r].out, *nl; *l; l = nl ? nl + 1 : l + strlen(l)) {
            char what2[1200];
            nl = strchr(l, '\n');
            if (nl)
                *nl = 0;
            if (!strncmp(l, "ok ", 3)) {
                snprintf(what2, sizeof(what2), "%s rank %d: %s", what, r, l + 3);
                check(1, what2, "-");
                lines++;
            } else if (!strncmp(l, "not ok ", 7)) {
                snprintf(what2, sizeof(what2), "%s rank %d: %s", what, r, l + 7);
                check(0, what2, "%s", "the rank's own line above");
                lines++;
            } else if (*l) {
                printf("# %s rank %d: %s\n", what, r, l);
            }
            if (nl)
                *nl = '\n';
        }
        int rc = WIFEXITED(kids[r].status) ? WEXITSTATUS(kids[r].status) : 128 + WTERMSIG(kids[r].status);
        int want = r == 1 && want_rc1 >= 0 ? want_rc1 : 0;
        char w[200];
        snprintf(w, sizeof(w), "%s rank %d: exits %d%s", what, r, want,
                 timed_out ? "" : " in time");
        check(!timed_out && rc == want && (lines > 0 || want != 0), w, "rc %d%s, %d lines", rc,
              timed_out ? ", killed at the deadline" : "", lines);
    }
}

static int file_has(const char *path, const char *needle, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : -1;

    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = 0;
    return strstr(buf, needle) != NULL;
}

int main(int argc, char **argv)
{
    static char def[4096];
    char path[512], buf[4096];
    struct ddp_standin_stats stt;

    if (argc > 2 && !strcmp(argv[2], "child")) {
        lib_path = argv[1];
        return child(argc, argv);
    }
    if (argc > 1) {
        lib_path = argv[1];
    } else {
        snprintf(def, sizeof(def), "%s", argv[0]);
        char *slash = strrchr(def, '/');
        snprintf(slash ? slash + 1 : def, sizeof(def) - (size_t)(slash ? slash + 1 - def : 0),
                 ".libs/libddpgpustandin.so");
        lib_path = def;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!realpath(argv[0], self) && readlink("/proc/self/exe", self, sizeof(self) - 1) < 0)
        return 1;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/standin-check.XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    setenv("DDP_GPU_STANDIN", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("DDP_GPU_STANDIN_FAULT");
    unsetenv("DDP_GPU_STANDIN_REPORT");
    unsetenv("DDP_GPU_STANDIN_DEVICES");
    unsetenv("NCCL_HOSTID");
    unsetenv("NCCL_LAUNCH_ORDER_IMPLICIT");
    if (load() < 0)
        return 1;

    int n = -1, v = 0;
    A.cudaGetDeviceCount(&n);
    check(n == 8, "8 devices by default", "%d", n);
    A.ncclGetVersion(&v);
    check(v == NCCL_VERSION_CODE, "ncclGetVersion is the headers' NCCL_VERSION_CODE", "%d", v);
    A.cudaRuntimeGetVersion(&v);
    check(v == CUDART_VERSION, "cudaRuntimeGetVersion is the headers' CUDART_VERSION", "%d", v);
    memory_checks();
    stream_checks();
    event_checks();
    hardening_checks();
    A.ddp_standin_stats(&stt);
    check(stt.live_streams == 0 && stt.live_events == 0 && stt.live_allocs == 0 &&
              stt.live_host_allocs == 0,
          "the single-process checks leave nothing live", "streams %ld events %ld allocs %ld "
          "host %ld", stt.live_streams, stt.live_events, stt.live_allocs, stt.live_host_allocs);

    scenario("refuse", 1, 0, "-DDP_GPU_STANDIN", 20, -1);
    scenario("ctx", 1, 0, "", 20, -1);
    scenario("visible", 1, 0, "CUDA_VISIBLE_DEVICES=3,1,x,2", 20, -1);
    scenario("sticky", 1, 0, "", 20, -1);
    scenario("coll", 4, 1, "", 120, -1);
    scenario("mismatch", 2, 1, "", 30, -1);
    scenario("deadlock", 2, 2, "", 30, -1);
    scenario("nonblocking", 2, 1, "", 30, -1);
    scenario("dup", 2, 2, "", 30, -1);
    scenario("shrink", 3, 1, "", 60, -1);
    scenario("hang", 2, 1, "DDP_GPU_STANDIN_FAULT=hang@fault:1:1", 30, -1);
    scenario("error", 2, 1, "DDP_GPU_STANDIN_FAULT=error@fault:1:*", 30, -1);
    scenario("initfail", 2, 1, "DDP_GPU_STANDIN_FAULT=initfail@*:1:*", 30, -1);
    scenario("recordfail", 1, 0, "DDP_GPU_STANDIN_FAULT=recordfail@*:*:2", 20, -1);
    scenario("abortslow", 1, 1, "DDP_GPU_STANDIN_FAULT=abortslow:600@slow:*:*", 20, -1);
    scenario("abortrace", 1, 1, "DDP_GPU_STANDIN_FAULT=abortslow:800@race:*:*", 20, -1);
    scenario("single", 1, 3, "", 20, -1);
    scenario("wrap", 1, 0, "", 20, -1);
    scenario("orphan", 1, 1, "", 20, -1);
    scenario("hang", 2, 1, "DDP_GPU_STANDIN_FAULT=exit@fault:1:1:7", 30, 7);
    scenario("overlap", 2, 2, "", 30, -1);
    snprintf(path, sizeof(path), "DDP_GPU_STANDIN_REPORT=%s/report", tmpdir);
    scenario("report", 1, 1, path, 20, -1);
    snprintf(path, sizeof(path), "%s/report", tmpdir);
    check(file_has(path, "leaked streams=0 events=0 comms=0 allocs=0 host_allocs=0 redops=0; "
                   "contexts dev0=1; connect_waits=1 cross_comm_overlaps=0 violations=0 aborts=0",
                   buf, sizeof(buf)),
          "DDP_GPU_STANDIN_REPORT: a clean run reports no leaks", "'%s'", buf);
    unlink(path);
    snprintf(path, sizeof(path), "DDP_GPU_STANDIN_REPORT=%s/report", tmpdir);
    scenario("leak", 1, 1, path, 20, -1);
    snprintf(path, sizeof(path), "%s/report", tmpdir);
    check(file_has(path, "leaked streams=1 events=0", buf, sizeof(buf)),
          "DDP_GPU_STANDIN_REPORT: a stream not destroyed is counted", "'%s'", buf);
    unlink(path);
    snprintf(path, sizeof(path), "%s/rank0-in-progress", tmpdir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/rank0-issued", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    printf("1..%d\n", nchecks);
    return nfailed ? 1 : 0;
}
