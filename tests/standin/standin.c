/* SPDX-License-Identifier: Apache-2.0 */
/* A strict CPU stand-in for the CUDA runtime and NCCL, for tests only
 * (tests/standin/README.md says what it models and where it is stricter).
 *
 * One file on purpose: everything but the API is static, so the shared
 * object exports exactly the CUDA/NCCL entry points and ddp_standin_stats.
 *
 * Locking: one global mutex (G) guards every registry, every stream queue
 * and every event; stream workers drop it while they run an op. Data in the
 * NCCL shared-memory segments is touched only with atomics. Waits poll a
 * condition on G's condvar with a short timeout, so every wait also sees an
 * abort flag set without a signal. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

#define MAXDEV 64
#define QUARANTINE_MAX 1024          /* freed allocations remembered (and kept mapped) */
#define QUARANTINE_BYTES (256u << 20) /* ...up to this much memory */
#define WINDOW (512u << 10)          /* bytes per rank per round in a comm segment */
#define SHM_MAGIC 0x64647073u        /* "ddps" */
#define ID_MAGIC 0x5354414eu
#define PREMUL_BASE ((int)ncclNumOps)

static const char REFUSAL[] = "ddp-gpu-standin: refusing to run: this is a test stand-in for the "
                              "CUDA runtime and NCCL, not a GPU (set DDP_GPU_STANDIN=1 only in "
                              "tests)";

/* ---- global state ---- */

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t G_cv = PTHREAD_COND_INITIALIZER; /* any progress at all */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_ok;                /* set once by init(), read-only after */
static char refuse_why[512];
static int ndev_phys = 8, nvis;    /* devices, and those CUDA_VISIBLE_DEVICES shows */
static int vis_map[MAXDEV];        /* visible ordinal -> physical index */
static int opt_abort, order_implicit = -1; /* -1: not read yet (first NCCL call) */
static const char *opt_report;
static int my_rank = -1;

struct fault {
    char kind[16];
    char comm[64];
    int rank, call, arg; /* rank/call -1: any */
};
static struct fault faults[32];
static int nfaults;

/* per physical device, all under G */
static int ctx_made[MAXDEV];
static cudaError_t ctx_sticky[MAXDEV];
static int ctx_cleanup[MAXDEV];    /* an abort's cleanup holds the context lock */
static int overlap_warned;

static struct ddp_standin_stats st; /* counters, under G */
static long live_redops;
static long record_calls;

/* per thread */
static __thread int t_dev = -1;    /* visible ordinal; -1: never chose one */
static __thread cudaError_t t_last;
static __thread char t_nccl_msg[512];
static __thread int t_group;
static __thread struct comm *t_deferred[64];
static __thread int t_ndeferred;
static __thread int t_hostfn;      /* this thread is running a cudaLaunchHostFunc function */

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* a poll step: yield at first, then sleep longer (never a busy wait) */
static void backoff(unsigned spins)
{
    struct timespec ts = {0, spins < 1000 ? 20000 : 200000};

    if (spins < 50)
        sched_yield();
    else
        nanosleep(&ts, NULL);
}

/* wait on G's condvar at most 2 ms: waiters re-check their condition and
 * the abort flags, which are set without a broadcast from other processes */
static void g_wait(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 2000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&G_cv, &G, &ts);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* a string copied, cut to fit (snprintf "%s" would do, and warn) */
static void scopy(char *d, size_t n, const char *s)
{
    size_t l = strlen(s);

    if (l >= n)
        l = n - 1;
    memcpy(d, s, l);
    d[l] = 0;
}

/* ---- initialisation from the environment ---- */

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void refuse(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(refuse_why, sizeof(refuse_why), fmt, ap);
    va_end(ap);
}

/* CUDA's rule: a comma list of ordinals; the first bad or repeated entry
 * ends it, and so does one past the devices */
static void parse_visible(void)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES"), *p = v;

    nvis = 0;
    if (!v) {
        for (int i = 0; i < ndev_phys; i++)
            vis_map[nvis++] = i;
        return;
    }
    while (*p && nvis < MAXDEV) {
        char *end;
        long d = strtol(p, &end, 10);
        int dup = 0;
        if (end == p || (*end && *end != ',') || d < 0 || d >= ndev_phys)
            break;
        for (int i = 0; i < nvis; i++)
            dup |= vis_map[i] == d;
        if (dup)
            break;
        vis_map[nvis++] = (int)d;
        p = *end ? end + 1 : end;
    }
}

/* KIND@COMM:RANK:CALL[:ARG], KIND being hang, error, exit, initfail,
 * recordfail, delay:MS or abortslow:MS */
static int parse_fault(char *s, struct fault *f)
{
    char *at = strchr(s, '@'), *fld[4] = {0};
    long v;
    int n = 0;

    memset(f, 0, sizeof(*f));
    if (!at)
        return -1;
    *at = 0;
    for (char *p = at + 1; n < 4; n++) {
        fld[n] = p;
        if (!(p = strchr(p, ':')))
            break;
        *p++ = 0;
    }
    if (n < 2)
        return -1;
    char *colon = strchr(s, ':');
    if (colon) {
        *colon = 0;
        if (parse_int(colon + 1, 0, 3600000, &v) < 0)
            return -1;
        f->arg = (int)v;
        if (strcmp(s, "delay") && strcmp(s, "abortslow"))
            return -1;
    } else if (!strcmp(s, "delay") || !strcmp(s, "abortslow")) {
        return -1;
    }
    if (strcmp(s, "hang") && strcmp(s, "error") && strcmp(s, "exit") && strcmp(s, "delay") &&
        strcmp(s, "initfail") && strcmp(s, "abortslow") && strcmp(s, "recordfail") &&
        strcmp(s, "shrinkfail"))
        return -1;
    scopy(f->kind, sizeof(f->kind), s);
    scopy(f->comm, sizeof(f->comm), fld[0]);
    f->rank = f->call = -1;
    if (strcmp(fld[1], "*") && parse_int(fld[1], 0, INT_MAX, &v) < 0)
        return -1;
    if (strcmp(fld[1], "*"))
        f->rank = (int)v;
    if (strcmp(fld[2], "*") && parse_int(fld[2], 1, INT_MAX, &v) < 0)
        return -1;
    if (strcmp(fld[2], "*"))
        f->call = (int)v;
    if (fld[3]) {
        if (strcmp(f->kind, "exit") || parse_int(fld[3], 0, 255, &v) < 0)
            return -1;
        f->arg = (int)v;
    } else if (!strcmp(f->kind, "exit")) {
        f->arg = 3;
    }
    return 0;
}

static int parse_faults(const char *spec)
{
    char buf[2048], *save = NULL;

    scopy(buf, sizeof(buf), spec);
    for (char *one = strtok_r(buf, ";", &save); one; one = strtok_r(NULL, ";", &save)) {
        char copy[256];
        scopy(copy, sizeof(copy), one);
        if (nfaults == 32 || parse_fault(copy, &faults[nfaults]) < 0) {
            refuse("ddp-gpu-standin: refusing to run: DDP_GPU_STANDIN_FAULT: bad fault '%s' "
                   "(KIND@COMM:RANK:CALL[:ARG], KIND one of hang, error, exit, delay:MS, "
                   "initfail, abortslow:MS, recordfail)", one);
            return -1;
        }
        nfaults++;
    }
    return 0;
}

static void init(void)
{
    const char *on = getenv("DDP_GPU_STANDIN"), *v;
    long n;

    if (!on || strcmp(on, "1")) {
        refuse("%s", REFUSAL);
        return;
    }
    if ((v = getenv("DDP_GPU_STANDIN_DEVICES")) && *v) {
        if (parse_int(v, 1, MAXDEV, &n) < 0) {
            refuse("ddp-gpu-standin: refusing to run: DDP_GPU_STANDIN_DEVICES=%s is not a "
                   "number of devices from 1 to %d", v, MAXDEV);
            return;
        }
        ndev_phys = (int)n;
    }
    if ((v = getenv("DDP_GPU_STANDIN_ABORT")) && *v) {
        if (strcmp(v, "0") && strcmp(v, "1")) {
            refuse("ddp-gpu-standin: refusing to run: DDP_GPU_STANDIN_ABORT=%s is not 0 or 1", v);
            return;
        }
        opt_abort = !strcmp(v, "1");
    }
    if ((v = getenv("DDP_GPU_STANDIN_FAULT")) && *v && parse_faults(v) < 0)
        return;
    v = getenv("DDP_GPU_STANDIN_RANK");
    if (!v || !*v)
        v = getenv("RANK");
    if (v && *v && parse_int(v, 0, INT_MAX, &n) == 0)
        my_rank = (int)n;
    opt_report = getenv("DDP_GPU_STANDIN_REPORT");
    parse_visible();
    st.ndevices = nvis;
    init_ok = 1;
}

/* 1 when running; else the refusal, printed once per process */
static int ready(void)
{
    static int told;
    int tell;

    pthread_once(&init_once, init);
    if (init_ok)
        return 1;
    pthread_mutex_lock(&G);
    tell = !told;
    told = 1;
    pthread_mutex_unlock(&G);
    if (tell)
        fprintf(stderr, "%s\n", refuse_why);
    scopy(t_nccl_msg, sizeof(t_nccl_msg), refuse_why);
    return 0;
}

/* NCCL reads NCCL_LAUNCH_ORDER_IMPLICIT once, then caches it */
static void nccl_first_call(void)
{
    pthread_mutex_lock(&G);
    if (order_implicit < 0) {
        const char *v = getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
        order_implicit = v && *v && strcmp(v, "0") != 0;
    }
    pthread_mutex_unlock(&G);
}

/* ---- errors ---- */

static void violation_locked(void)
{
    st.violations++;
}

/* a contract violation: said on stderr, counted, fatal with ABORT=1 */
static void say(const char *fmt, va_list ap)
{
    char msg[768];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "ddp-gpu-standin: %s\n", msg);
    scopy(t_nccl_msg, sizeof(t_nccl_msg), msg);
    if (opt_abort) {
        fprintf(stderr, "ddp-gpu-standin: DDP_GPU_STANDIN_ABORT=1: aborting\n");
        abort();
    }
}

static cudaError_t cuda_bad(cudaError_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t cuda_bad(cudaError_t rc, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&G);
    violation_locked();
    pthread_mutex_unlock(&G);
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    t_last = rc;
    return rc;
}

static ncclResult_t nccl_bad(ncclResult_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t nccl_bad(ncclResult_t rc, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&G);
    violation_locked();
    pthread_mutex_unlock(&G);
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    return rc;
}

/* an error that is no violation (not ready, refused): only remembered */
static cudaError_t cuda_rc(cudaError_t rc)
{
    if (rc != cudaSuccess && rc != cudaErrorNotReady)
        t_last = rc;
    return rc;
}

/* ---- devices and contexts ---- */

static void ctx_touch_locked(int phys)
{
    ctx_made[phys] = 1;
    st.contexts[phys] = 1;
}

/* the thread's device, its context made (device 0 when it never chose) */
static int cur_dev(void)
{
    if (t_dev < 0)
        t_dev = 0;
    pthread_mutex_lock(&G);
    ctx_touch_locked(vis_map[t_dev]);
    pthread_mutex_unlock(&G);
    return t_dev;
}

/* the context lock: blocks while an abort's cleanup holds it (G held) */
static void gate_locked(int phys)
{
    while (ctx_cleanup[phys])
        g_wait();
}

/* ---- the allocation registry ---- */

enum { MEM_DEV = 1, MEM_HOST = 2 };

typedef struct {
    uintptr_t base;
    size_t size;
    int kind, phys;
    int freed;         /* in quarantine: still mapped, so no reuse hides a use after free */
    int free_pending;  /* cudaFreeAsync issued, the stream has not passed it */
    const char *by;    /* the call that made it */
} alloc_t;

static alloc_t *allocs;
static size_t nallocs, capallocs;
static alloc_t quar[QUARANTINE_MAX]; /* a ring: quar_head is the oldest */
static size_t nquar, quar_head, quar_bytes;

static int alloc_add_locked(void *p, size_t size, int kind, int phys, const char *by)
{
    if (nallocs == capallocs) {
        size_t cap = capallocs ? 2 * capallocs : 64;
        alloc_t *more = realloc(allocs, cap * sizeof(*more));
        if (!more)
            return -1;
        allocs = more;
        capallocs = cap;
    }
    allocs[nallocs++] = (alloc_t){(uintptr_t)p, size, kind, phys, 0, 0, by};
    if (kind == MEM_DEV)
        st.live_allocs++;
    else
        st.live_host_allocs++;
    return 0;
}

/* the live allocation holding p, or NULL */
static alloc_t *alloc_at_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;

    for (size_t i = 0; i < nallocs; i++)
        if (a >= allocs[i].base && a < allocs[i].base + (allocs[i].size ? allocs[i].size : 1))
            return &allocs[i];
    return NULL;
}

static alloc_t *quar_at_locked(const void *p)
{
    uintptr_t a = (uintptr_t)p;

    for (size_t i = 0; i < nquar; i++) {
        alloc_t *q = &quar[(quar_head + i) % QUARANTINE_MAX];
        if (a >= q->base && a < q->base + (q->size ? q->size : 1))
            return q;
    }
    return NULL;
}

/* to the quarantine; the oldest leaves it (and is unmapped) when full */
static void alloc_retire_locked(alloc_t *a)
{
    alloc_t dead = *a;

    if (dead.kind == MEM_DEV)
        st.live_allocs--;
    else
        st.live_host_allocs--;
    *a = allocs[--nallocs];
    dead.freed = 1;
    /* the oldest leaves first, so the most recent frees are always known */
    while (nquar && (nquar == QUARANTINE_MAX || quar_bytes + dead.size > QUARANTINE_BYTES)) {
        free((void *)quar[quar_head].base);
        quar_bytes -= quar[quar_head].size;
        quar_head = (quar_head + 1) % QUARANTINE_MAX;
        nquar--;
    }
    if (dead.size > QUARANTINE_BYTES) {
        free((void *)dead.base);
        return;
    }
    quar[(quar_head + nquar++) % QUARANTINE_MAX] = dead;
    quar_bytes += dead.size;
}

static const char *kind_name(int k)
{
    return k == MEM_DEV ? "device" : "pinned host";
}

/* What [p, p+n) is: MEM_DEV (phys in *phys), MEM_HOST, or 0 for memory the
 * stand-in does not know (plain host memory). -1 with why filled when it
 * touches an allocation wrongly: out of bounds, freed, free pending. */
static int classify_locked(const void *p, size_t n, int *phys, char *why, size_t len)
{
    alloc_t *a = alloc_at_locked(p), *q;
    uintptr_t u = (uintptr_t)p;

    if (n > UINTPTR_MAX - u) { /* no memory wraps around the address space */
        snprintf(why, len, "%p + %zu bytes wraps around the address space", p, n);
        return -1;
    }
    if (a) {
        if (n > a->size - (u - a->base)) {
            snprintf(why, len, "%p + %zu bytes runs past the end of %s allocation %p (%zu bytes, "
                     "from %s)", p, n, kind_name(a->kind), (void *)a->base, a->size, a->by);
            return -1;
        }
        if (a->free_pending) {
            snprintf(why, len, "%p is in %s allocation %p (%zu bytes) already given to "
                     "cudaFreeAsync", p, kind_name(a->kind), (void *)a->base, a->size);
            return -1;
        }
        *phys = a->phys;
        return a->kind;
    }
    if ((q = quar_at_locked(p))) {
        snprintf(why, len, "%p is in freed %s allocation %p (%zu bytes, from %s): use after free",
                 p, kind_name(q->kind), (void *)q->base, q->size, q->by);
        return -1;
    }
    /* host memory must not run into an allocation either */
    for (size_t i = 0; n && i < nallocs; i++)
        if (allocs[i].base > u && allocs[i].base - u < n) {
            snprintf(why, len, "%p + %zu bytes overlaps %s allocation %p (%zu bytes)", p, n,
                     kind_name(allocs[i].kind), (void *)allocs[i].base, allocs[i].size);
            return -1;
        }
    *phys = -1;
    return 0;
}

/* device memory of [p, p+n), or -1 with why: "not from cudaMalloc" too */
static int need_dev_mem_locked(const void *p, size_t n, int *phys, char *why, size_t len)
{
    int k = classify_locked(p, n, phys, why, len);

    if (k == MEM_DEV)
        return 0;
    if (k == MEM_HOST)
        snprintf(why, len, "%p is pinned host memory (cudaHostAlloc), not device memory", p);
    else if (k == 0)
        snprintf(why, len, "%p was not returned by cudaMalloc/cudaMallocAsync (no allocation "
                 "holds it)", p);
    return -1;
}

/* ---- streams and events ---- */

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu

enum { OP_COPY, OP_SET, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_KERNEL, OP_FREE, OP_NOP };

struct stream;
struct comm;

typedef struct {
    struct stream *s;
    uint64_t seq;
} dep_t;

typedef struct kernel {
    struct comm *comm;
    int kind, op, dtype, root, fault; /* fault: index+1 in faults[], 0 none */
    const void *send;
    void *recv;
    size_t count;
    uint64_t nth;                /* the Nth collective on that comm */
    unsigned char scalar[8];     /* PreMulSum's, copied at the call */
    int premul;
} kernel_t;

typedef struct op {
    struct op *next;
    int type;
    uint64_t seq;
    dep_t *deps;
    int ndeps;
    union {
        struct { void *dst; const void *src; size_t n; int val; } mem;
        struct { struct event *ev; uint64_t gen; } ev;
        struct { cudaHostFn_t fn; void *arg; } host;
        kernel_t k;
        void *free_ptr;
    } u;
} op_t;

typedef struct stream {
    unsigned magic;
    int dev, phys, flags, legacy, refs, dead;
    op_t *head, *tail;
    uint64_t submitted, completed;
    struct comm *inprog;         /* a non-blocking collective still in progress */
    pthread_cond_t wake;
    struct stream *next_all;     /* every stream ever made, for the legacy rule */
} stream_t;

typedef struct event {
    unsigned magic;
    int dev, phys, flags, refs, dead;
    uint64_t recorded, completed;
    double when;                 /* when `completed` was reached */
} event_t;

static stream_t *all_streams;    /* live ones (dead ones leave when their worker ends) */
static stream_t *legacy[MAXDEV];
static event_t **events;
static size_t nevents, capevents;

static void stream_unref_locked(stream_t *s)
{
    if (--s->refs > 0)
        return;
    for (stream_t **pp = &all_streams; *pp; pp = &(*pp)->next_all)
        if (*pp == s) {
            *pp = s->next_all;
            break;
        }
    s->magic = 0;
    pthread_cond_destroy(&s->wake);
    free(s);
}

static void event_unref_locked(event_t *e)
{
    if (--e->refs > 0)
        return;
    e->magic = 0;
    free(e);
}

static int stream_live_locked(const stream_t *s)
{
    for (stream_t *x = all_streams; x; x = x->next_all)
        if (x == s && !x->dead && !x->legacy)
            return 1;
    return 0;
}

static int event_live_locked(const event_t *e)
{
    for (size_t i = 0; i < nevents; i++)
        if (events[i] == e)
            return 1;
    return 0;
}

static void run_op(stream_t *s, op_t *o);

static int stream_live_or_legacy_locked(const stream_t *s)
{
    return s->legacy || stream_live_locked(s);
}

static int deps_done_locked(const op_t *o)
{
    for (int i = 0; i < o->ndeps; i++)
        if (o->deps[i].s->completed < o->deps[i].seq)
            return 0;
    return 1;
}

/* a wait op's event reached (G held) */
static int wait_done_locked(const op_t *o)
{
    return o->type != OP_WAIT || o->u.ev.ev->completed >= o->u.ev.gen;
}

static void op_free_locked(op_t *o)
{
    for (int i = 0; i < o->ndeps; i++)
        stream_unref_locked(o->deps[i].s);
    free(o->deps);
    if (o->type == OP_RECORD || o->type == OP_WAIT)
        event_unref_locked(o->u.ev.ev);
    free(o);
}

/* a stream's worker: its queue in order; G dropped while an op runs */
static void *worker(void *arg)
{
    stream_t *s = arg;

    pthread_mutex_lock(&G);
    for (;;) {
        op_t *o;
        while (!s->head && !s->dead)
            pthread_cond_wait(&s->wake, &G);
        if (!(o = s->head))
            break;
        while (!deps_done_locked(o) || !wait_done_locked(o))
            g_wait();
        pthread_mutex_unlock(&G);
        run_op(s, o);
        pthread_mutex_lock(&G);
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = o->seq;
        st.live_ops--;
        op_free_locked(o);
        pthread_cond_broadcast(&G_cv);
    }
    stream_unref_locked(s);
    pthread_mutex_unlock(&G);
    return NULL;
}

static stream_t *stream_new_locked(int dev, int flags, int is_legacy)
{
    stream_t *s = calloc(1, sizeof(*s));
    pthread_attr_t at;
    pthread_t th;

    if (!s)
        return NULL;
    *s = (stream_t){.magic = STREAM_MAGIC, .dev = dev, .phys = vis_map[dev], .flags = flags,
                    .legacy = is_legacy, .refs = 2};
    pthread_cond_init(&s->wake, NULL);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, worker, s) != 0) {
        pthread_attr_destroy(&at);
        pthread_cond_destroy(&s->wake);
        free(s);
        return NULL;
    }
    pthread_attr_destroy(&at);
    s->next_all = all_streams;
    all_streams = s;
    return s;
}

/* The stream a handle names, for a call (G held): the legacy stream of the
 * current device for 0 and cudaStreamLegacy; NULL with *rc for a bad one. */
static stream_t *stream_of_locked(cudaStream_t h, int dev, const char *call, cudaError_t *rc,
                                  char *why, size_t len)
{
    stream_t *s = (stream_t *)h;

    *rc = cudaErrorInvalidResourceHandle;
    if (h == cudaStreamPerThread) {
        snprintf(why, len, "%s: cudaStreamPerThread is not modelled by the stand-in", call);
        return NULL;
    }
    if (!h || h == cudaStreamLegacy) {
        int phys = vis_map[dev];
        if (!legacy[phys] && !(legacy[phys] = stream_new_locked(dev, 0, 1))) {
            *rc = cudaErrorMemoryAllocation;
            snprintf(why, len, "%s: cannot start the NULL stream's thread", call);
            return NULL;
        }
        return legacy[phys];
    }
    if (!stream_live_locked(s)) {
        snprintf(why, len, "%s: stream %p is not a live stream (never made, or destroyed)",
                 call, (void *)h);
        return NULL;
    }
    return s;
}

/* stream_of_locked, once the context locks of the stream's device and of
 * the current one are free; looked up again after every wait, since the
 * stream may be destroyed while G is dropped (G held) */
static stream_t *stream_gated_locked(cudaStream_t h, int dev, const char *call, cudaError_t *rc,
                                     char *why, size_t len)
{
    for (;;) {
        stream_t *s = stream_of_locked(h, dev, call, rc, why, len);
        if (!s || (!ctx_cleanup[s->phys] && !ctx_cleanup[vis_map[dev]]))
            return s;
        g_wait();
    }
}

static int add_dep_locked(op_t *o, stream_t *on)
{
    dep_t *more;

    if (on->completed >= on->submitted)
        return 0;
    if (!(more = realloc(o->deps, (size_t)(o->ndeps + 1) * sizeof(*more))))
        return -1;
    o->deps = more;
    o->deps[o->ndeps++] = (dep_t){on, on->submitted};
    on->refs++;
    return 0;
}

/* The legacy NULL stream's rule: its work waits for the blocking streams
 * of its device, and theirs waits for it; non-blocking streams do not. */
static int legacy_deps_locked(stream_t *s, op_t *o)
{
    if (s->legacy) {
        for (stream_t *x = all_streams; x; x = x->next_all)
            if (x != s && x->phys == s->phys && !x->legacy && /* destroyed ones' work too */
                !(x->flags & cudaStreamNonBlocking) && add_dep_locked(o, x) < 0)
                return -1;
        return 0;
    }
    if (!(s->flags & cudaStreamNonBlocking) && legacy[s->phys])
        return add_dep_locked(o, legacy[s->phys]);
    return 0;
}

/* o on s (G held); -1 (o freed) when out of memory */
static int enqueue_locked(stream_t *s, op_t *o)
{
    if (legacy_deps_locked(s, o) < 0) {
        op_free_locked(o);
        return -1;
    }
    o->seq = ++s->submitted;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    st.live_ops++;
    pthread_cond_signal(&s->wake);
    return 0;
}

/* the worker's wait for s to pass seq (G held) */
static void stream_wait_locked(stream_t *s, uint64_t seq)
{
    while (s->completed < seq)
        g_wait();
}

/* no memory for a drain's list: wait until the device is idle instead */
static void device_idle_locked(int phys)
{
    for (int busy = 1; busy;) {
        busy = 0;
        for (stream_t *x = all_streams; x; x = x->next_all)
            busy |= x->phys == phys && x->completed < x->submitted;
        if (busy)
            g_wait();
    }
}

/* every stream of a device drained to what was queued now, however many (G held) */
static void device_drain_locked(int phys)
{
    dep_t *w;
    size_t n = 0, i = 0;

    for (stream_t *x = all_streams; x; x = x->next_all)
        n += x->phys == phys && x->completed < x->submitted;
    if (!n)
        return;
    if (!(w = malloc(n * sizeof(*w)))) {
        device_idle_locked(phys);
        return;
    }
    for (stream_t *x = all_streams; x; x = x->next_all)
        if (x->phys == phys && x->completed < x->submitted) {
            w[i++] = (dep_t){x, x->submitted};
            x->refs++;
        }
    for (i = 0; i < n; i++) {
        stream_wait_locked(w[i].s, w[i].seq);
        stream_unref_locked(w[i].s);
    }
    free(w);
}

/* ---- executing ops ---- */

static int recheck(const void *p, size_t n, int must_dev, char *why, size_t len)
{
    int phys, k;

    pthread_mutex_lock(&G);
    k = n ? classify_locked(p, n, &phys, why, len) : 0;
    pthread_mutex_unlock(&G);
    if (k < 0)
        return -1;
    if (must_dev && n && k != MEM_DEV) {
        snprintf(why, len, "%p is no longer device memory", p);
        return -1;
    }
    return 0;
}

/* an op that found bad memory when it ran: the context is lost, as a GPU's */
static void illegal(stream_t *s, const char *what, const char *why)
{
    pthread_mutex_lock(&G);
    violation_locked();
    if (ctx_sticky[s->phys] == cudaSuccess)
        ctx_sticky[s->phys] = cudaErrorIllegalAddress;
    pthread_mutex_unlock(&G);
    fprintf(stderr, "ddp-gpu-standin: %s on stream %p of device %d ran into bad memory: %s; "
            "the context is lost (cudaErrorIllegalAddress from now on)\n", what, (void *)s,
            s->dev, why);
    if (opt_abort)
        abort();
}

static void run_kernel(stream_t *s, kernel_t *k);

static void run_op(stream_t *s, op_t *o)
{
    char why[256];
    int lost;

    pthread_mutex_lock(&G);
    lost = ctx_sticky[s->phys] != cudaSuccess;
    pthread_mutex_unlock(&G);
    switch (o->type) {
    case OP_COPY:
        if (lost)
            break;
        if (recheck(o->u.mem.dst, o->u.mem.n, 0, why, sizeof(why)) < 0 ||
            recheck(o->u.mem.src, o->u.mem.n, 0, why, sizeof(why)) < 0)
            illegal(s, "cudaMemcpy", why);
        else if (o->u.mem.n) /* a 0-byte copy is CUDA's no-op, with any pointers */
            memmove(o->u.mem.dst, o->u.mem.src, o->u.mem.n);
        break;
    case OP_SET:
        if (lost)
            break;
        if (recheck(o->u.mem.dst, o->u.mem.n, 1, why, sizeof(why)) < 0)
            illegal(s, "cudaMemsetAsync", why);
        else if (o->u.mem.n)
            memset(o->u.mem.dst, o->u.mem.val, o->u.mem.n);
        break;
    case OP_RECORD:
        pthread_mutex_lock(&G);
        if (o->u.ev.ev->completed < o->u.ev.gen) {
            o->u.ev.ev->completed = o->u.ev.gen;
            o->u.ev.ev->when = now_s();
        }
        pthread_mutex_unlock(&G);
        break;
    case OP_HOSTFN:
        if (!lost) {
            t_hostfn = 1; /* CUDA forbids CUDA calls in it: CUDA_READY refuses them */
            o->u.host.fn(o->u.host.arg);
            t_hostfn = 0;
        }
        break;
    case OP_KERNEL:
        run_kernel(s, &o->u.k);
        break;
    case OP_FREE:
        pthread_mutex_lock(&G);
        {
            alloc_t *a = alloc_at_locked(o->u.free_ptr);
            if (a && a->base == (uintptr_t)o->u.free_ptr)
                alloc_retire_locked(a);
        }
        pthread_mutex_unlock(&G);
        break;
    default:
        break;
    }
}

/* ---- the CUDA API ---- */

#define API __attribute__((visibility("default")))
#define CUDA_READY() \
    do { \
        if (!ready()) \
            return t_last = cudaErrorInitializationError; \
        if (t_hostfn) \
            return hostfn_call(__func__); \
    } while (0)

/* CUDA: "the host function must not make any CUDA API calls"; it may
 * answer cudaErrorNotPermitted, so the stand-in always does */
static cudaError_t hostfn_call(const char *call)
{
    return cuda_bad(cudaErrorNotPermitted, "%s called from a host function (cudaLaunchHostFunc): "
                    "CUDA and NCCL calls are not permitted there", call);
}

/* the context's sticky error for the current device, or cudaSuccess */
static cudaError_t sticky(int dev)
{
    cudaError_t rc;

    pthread_mutex_lock(&G);
    gate_locked(vis_map[dev]);
    rc = ctx_sticky[vis_map[dev]];
    pthread_mutex_unlock(&G);
    if (rc != cudaSuccess)
        t_last = rc;
    return rc;
}

API cudaError_t cudaGetDeviceCount(int *count)
{
    CUDA_READY();
    if (!count)
        return cuda_bad(cudaErrorInvalidValue, "cudaGetDeviceCount: count is NULL");
    *count = nvis;
    if (!nvis)
        return t_last = cudaErrorNoDevice;
    return cudaSuccess;
}

API cudaError_t cudaSetDevice(int device)
{
    CUDA_READY();
    if (device < 0 || device >= nvis)
        return cuda_bad(cudaErrorInvalidDevice, "cudaSetDevice(%d): %d device(s) visible",
                        device, nvis);
    t_dev = device;
    pthread_mutex_lock(&G);
    ctx_touch_locked(vis_map[device]); /* since CUDA 12, cudaSetDevice makes the context */
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

API cudaError_t cudaGetDevice(int *device)
{
    CUDA_READY();
    if (!device)
        return cuda_bad(cudaErrorInvalidValue, "cudaGetDevice: device is NULL");
    *device = t_dev < 0 ? 0 : t_dev; /* no context made */
    return cudaSuccess;
}

API const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorNotPermitted: return "operation not permitted";
    default: return "unrecognized error code";
    }
}

API cudaError_t cudaGetLastError(void)
{
    cudaError_t rc;

    CUDA_READY();
    rc = t_last;
    t_last = cudaSuccess;
    if (rc == cudaSuccess && t_dev >= 0) {
        pthread_mutex_lock(&G);
        rc = ctx_sticky[vis_map[t_dev]];
        pthread_mutex_unlock(&G);
    }
    return rc;
}

API cudaError_t cudaRuntimeGetVersion(int *v)
{
    CUDA_READY();
    if (!v)
        return cuda_bad(cudaErrorInvalidValue, "cudaRuntimeGetVersion: NULL");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

API cudaError_t cudaDriverGetVersion(int *v)
{
    CUDA_READY();
    if (!v)
        return cuda_bad(cudaErrorInvalidValue, "cudaDriverGetVersion: NULL");
    *v = CUDART_VERSION;
    return cudaSuccess;
}

API cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    CUDA_READY();
    if (device < 0 || device >= nvis)
        return cuda_bad(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId: device %d of %d",
                        device, nvis);
    if (!id || len < 13)
        return cuda_bad(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId: buffer of %d bytes",
                        len);
    snprintf(id, (size_t)len, "0000:%02x:00.0", vis_map[device] + 0x10);
    return cudaSuccess;
}

static cudaError_t dev_alloc(void **p, size_t size, const char *call, stream_t **on,
                             cudaStream_t h)
{
    int dev = cur_dev(), phys = vis_map[dev];
    char why[256];
    cudaError_t rc;
    void *mem;

    if (!p)
        return cuda_bad(cudaErrorInvalidValue, "%s: devPtr is NULL", call);
    *p = NULL;
    if ((rc = sticky(dev)) != cudaSuccess)
        return rc;
    pthread_mutex_lock(&G);
    if (on && !(*on = stream_of_locked(h, dev, call, &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return cuda_bad(rc, "%s", why);
    }
    if (on)
        phys = (*on)->phys; /* cudaMallocAsync: the pool of the stream's device */
    if ((rc = ctx_sticky[phys]) != cudaSuccess) {
        pthread_mutex_unlock(&G);
        return t_last = rc;
    }
    pthread_mutex_unlock(&G);
    if (size == 0)
        return cudaSuccess; /* CUDA: success, NULL */
    if (!(mem = aligned_alloc(256, (size + 255) & ~(size_t)255)))
        return t_last = cudaErrorMemoryAllocation;
    memset(mem, 0xa5, size); /* device memory is not zeroed: nobody may count on it */
    pthread_mutex_lock(&G);
    if (alloc_add_locked(mem, size, MEM_DEV, phys, call) < 0) {
        pthread_mutex_unlock(&G);
        free(mem);
        return t_last = cudaErrorMemoryAllocation;
    }
    pthread_mutex_unlock(&G);
    *p = mem;
    return cudaSuccess;
}

API cudaError_t cudaMalloc(void **p, size_t size)
{
    CUDA_READY();
    return dev_alloc(p, size, "cudaMalloc", NULL, 0);
}

API cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t h)
{
    stream_t *s;

    CUDA_READY();
    return dev_alloc(p, size, "cudaMallocAsync", &s, h);
}

/* cudaFree and cudaFreeHost: the whole device synchronised first */
static cudaError_t free_mem(void *p, int want, const char *call)
{
    int dev = cur_dev();
    char why[256];
    alloc_t *a;
    cudaError_t rc;

    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&G);
    gate_locked(vis_map[dev]);
    a = alloc_at_locked(p);
    if (!a || a->base != (uintptr_t)p || a->kind != want || a->free_pending) {
        alloc_t *q = a ? NULL : quar_at_locked(p);
        if (q)
            snprintf(why, sizeof(why), "%p is in freed %s allocation %p (%zu bytes): double "
                     "free", p, kind_name(q->kind), (void *)q->base, q->size);
        else if (!a)
            snprintf(why, sizeof(why), "%p was not returned by %s", p,
                     want == MEM_DEV ? "cudaMalloc/cudaMallocAsync" : "cudaHostAlloc");
        else if (a->kind != want)
            snprintf(why, sizeof(why), "%p is %s memory (%s): free it with %s", p,
                     kind_name(a->kind), a->by, a->kind == MEM_DEV ? "cudaFree" : "cudaFreeHost");
        else if (a->free_pending)
            snprintf(why, sizeof(why), "%p was already given to cudaFreeAsync", p);
        else
            snprintf(why, sizeof(why), "%p is inside allocation %p (%zu bytes), not its start",
                     p, (void *)a->base, a->size);
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidValue, "%s(%p): %s", call, p, why);
    }
    rc = ctx_sticky[vis_map[dev]];
    /* the current device and the memory's own: whichever CUDA syncs, both */
    if (a->kind == MEM_DEV && a->phys != vis_map[dev])
        device_drain_locked(a->phys);
    device_drain_locked(vis_map[dev]);
    if ((a = alloc_at_locked(p)) && a->base == (uintptr_t)p) /* still there after the drain */
        alloc_retire_locked(a);
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaFree(void *p)
{
    CUDA_READY();
    return free_mem(p, MEM_DEV, "cudaFree");
}

API cudaError_t cudaFreeHost(void *p)
{
    CUDA_READY();
    return free_mem(p, MEM_HOST, "cudaFreeHost");
}

API cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    void *mem;

    CUDA_READY();
    if (!p)
        return cuda_bad(cudaErrorInvalidValue, "cudaHostAlloc: pHost is NULL");
    *p = NULL;
    if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
                            cudaHostAllocWriteCombined))
        return cuda_bad(cudaErrorInvalidValue, "cudaHostAlloc: flags 0x%x", flags);
    cur_dev();
    if (!(mem = aligned_alloc(256, ((size ? size : 1) + 255) & ~(size_t)255)))
        return t_last = cudaErrorMemoryAllocation;
    pthread_mutex_lock(&G);
    if (alloc_add_locked(mem, size, MEM_HOST, -1, "cudaHostAlloc") < 0) {
        pthread_mutex_unlock(&G);
        free(mem);
        return t_last = cudaErrorMemoryAllocation;
    }
    pthread_mutex_unlock(&G);
    *p = mem;
    return cudaSuccess;
}

static op_t *op_new(int type)
{
    op_t *o = calloc(1, sizeof(*o));

    if (o)
        o->type = type;
    return o;
}

/* o queued on h's stream, after the context checks; the message names call.
 * ev (record and wait ops) is checked and referenced under the same lock. */
static cudaError_t submit(cudaStream_t h, op_t *o, event_t *ev, const char *call, stream_t **out)
{
    int dev = cur_dev();
    char why[400];
    cudaError_t rc;
    stream_t *s;

    if (!o)
        return t_last = cudaErrorMemoryAllocation;
    pthread_mutex_lock(&G);
    if (!(s = stream_gated_locked(h, dev, call, &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        free(o);
        return cuda_bad(rc, "%s", why);
    }
    if (ev && !event_live_locked(ev)) {
        pthread_mutex_unlock(&G);
        free(o);
        return cuda_bad(cudaErrorInvalidResourceHandle, "%s: event %p is not a live event "
                        "(never made, or destroyed)", call, (void *)ev);
    }
    if (ev && o->type == OP_RECORD && ev->phys != s->phys) {
        pthread_mutex_unlock(&G);
        free(o);
        return cuda_bad(cudaErrorInvalidResourceHandle, "%s: event %p of device %d recorded "
                        "on stream %p of device %d", call, (void *)ev, ev->dev, (void *)h, s->dev);
    }
    if ((rc = ctx_sticky[s->phys]) != cudaSuccess) {
        pthread_mutex_unlock(&G);
        free(o);
        return t_last = rc;
    }
    if (s->inprog) {
        pthread_mutex_unlock(&G);
        free(o);
        return cuda_bad(cudaErrorNotPermitted, "%s: stream %p has a collective still in progress "
                        "(ncclInProgress) on a non-blocking communicator: no other work may be "
                        "enqueued on it until ncclCommGetAsyncError says ncclSuccess", call,
                        (void *)h);
    }
    if (ev) {
        ev->refs++;
        o->u.ev.ev = ev;
        o->u.ev.gen = o->type == OP_RECORD ? ++ev->recorded : ev->recorded;
    }
    if (enqueue_locked(s, o) < 0) {
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorMemoryAllocation, "%s: out of memory", call);
    }
    if (out)
        *out = s;
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

static int overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn)
{
    return an && bn && a < b + bn && b < a + an;
}

/* the kind checked against what the registry says the pointers are */
static cudaError_t copy_check(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                              const char *call)
{
    char why[256];
    int dp, sp, dk, sk;
    static const char *const names[] = {"cudaMemcpyHostToHost", "cudaMemcpyHostToDevice",
                                        "cudaMemcpyDeviceToHost", "cudaMemcpyDeviceToDevice",
                                        "cudaMemcpyDefault"};

    if ((unsigned)kind > cudaMemcpyDefault)
        return cuda_bad(cudaErrorInvalidValue, "%s: kind %d is no cudaMemcpyKind", call,
                        (int)kind);
    if (n && (!dst || !src))
        return cuda_bad(cudaErrorInvalidValue, "%s(dst %p, src %p, %zu bytes): NULL pointer",
                        call, dst, src, n);
    if (!n)
        return cudaSuccess;
    pthread_mutex_lock(&G);
    dk = classify_locked(dst, n, &dp, why, sizeof(why));
    if (dk < 0) {
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidValue, "%s(dst %p, src %p, %zu bytes): destination: %s",
                        call, dst, src, n, why);
    }
    sk = classify_locked(src, n, &sp, why, sizeof(why));
    pthread_mutex_unlock(&G);
    if (sk < 0)
        return cuda_bad(cudaErrorInvalidValue, "%s(dst %p, src %p, %zu bytes): source: %s", call,
                        dst, src, n, why);
    if (dst != src && overlaps((uintptr_t)dst, n, (uintptr_t)src, n))
        return cuda_bad(cudaErrorInvalidValue, "%s(dst %p, src %p, %zu bytes): the ranges overlap "
                        "(copy engines are no memmove: undefined on a GPU)", call, dst, src, n);
    if (kind == cudaMemcpyDefault)
        return cudaSuccess; /* unified addressing: the registry says which */
    if ((dk == MEM_DEV) != (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) ||
        (sk == MEM_DEV) != (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice))
        return cuda_bad(cudaErrorInvalidValue, "%s(dst %p, src %p, %zu bytes, %s): the "
                        "destination is %s and the source is %s memory", call, dst, src, n,
                        names[kind], dk == MEM_DEV ? "device" : "host",
                        sk == MEM_DEV ? "device" : "host");
    return cudaSuccess;
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t h)
{
    cudaError_t rc;
    op_t *o;

    CUDA_READY();
    if ((rc = copy_check(dst, src, n, kind, "cudaMemcpyAsync")) != cudaSuccess)
        return rc;
    if ((o = op_new(OP_COPY)))
        o->u.mem.dst = dst, o->u.mem.src = src, o->u.mem.n = n;
    return submit(h, o, NULL, "cudaMemcpyAsync", NULL);
}

API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t rc;
    stream_t *s = NULL;
    op_t *o;
    uint64_t seq;

    CUDA_READY();
    if ((rc = copy_check(dst, src, n, kind, "cudaMemcpy")) != cudaSuccess)
        return rc;
    if ((o = op_new(OP_COPY)))
        o->u.mem.dst = dst, o->u.mem.src = src, o->u.mem.n = n;
    if ((rc = submit(0, o, NULL, "cudaMemcpy", &s)) != cudaSuccess)
        return rc;
    pthread_mutex_lock(&G);
    seq = s->submitted;
    stream_wait_locked(s, seq); /* the legacy stream is never freed */
    rc = ctx_sticky[s->phys];
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t h)
{
    char why[256];
    int phys;
    op_t *o;

    CUDA_READY();
    if (n) {
        pthread_mutex_lock(&G);
        int bad = need_dev_mem_locked(p, n, &phys, why, sizeof(why));
        pthread_mutex_unlock(&G);
        if (bad < 0)
            return cuda_bad(cudaErrorInvalidValue, "cudaMemsetAsync(%p, %d, %zu bytes): %s", p,
                            value, n, why);
    }
    if ((o = op_new(OP_SET)))
        o->u.mem.dst = p, o->u.mem.n = n, o->u.mem.val = value;
    return submit(h, o, NULL, "cudaMemsetAsync", NULL);
}

API cudaError_t cudaFreeAsync(void *p, cudaStream_t h)
{
    alloc_t *a;
    op_t *o;
    cudaError_t rc;

    CUDA_READY();
    if (!p)
        return cudaSuccess;
    pthread_mutex_lock(&G);
    a = alloc_at_locked(p);
    if (!a || a->base != (uintptr_t)p || a->kind != MEM_DEV || a->free_pending) {
        int freed = !a && quar_at_locked(p);
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidValue, "cudaFreeAsync(%p): %s", p,
                        freed ? "already freed (double free)"
                        : !a  ? "not returned by cudaMalloc/cudaMallocAsync"
                        : a->kind != MEM_DEV ? "pinned host memory (use cudaFreeHost)"
                        : a->free_pending ? "already given to cudaFreeAsync"
                                          : "inside an allocation, not its start");
    }
    a->free_pending = 1; /* under the check's lock: a second free at once is refused */
    pthread_mutex_unlock(&G);
    if ((o = op_new(OP_FREE)))
        o->u.free_ptr = p;
    if ((rc = submit(h, o, NULL, "cudaFreeAsync", NULL)) != cudaSuccess) {
        pthread_mutex_lock(&G);
        if ((a = alloc_at_locked(p)) && a->base == (uintptr_t)p)
            a->free_pending = 0; /* not queued: still the caller's */
        pthread_mutex_unlock(&G);
    }
    return rc;
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
    int dev;
    cudaError_t rc;
    stream_t *s;

    CUDA_READY();
    if (!out)
        return cuda_bad(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: pStream is NULL");
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return cuda_bad(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: flags 0x%x", flags);
    dev = cur_dev();
    if ((rc = sticky(dev)) != cudaSuccess)
        return rc;
    pthread_mutex_lock(&G);
    s = stream_new_locked(dev, (int)flags, 0);
    if (s)
        st.live_streams++;
    pthread_mutex_unlock(&G);
    if (!s)
        return t_last = cudaErrorMemoryAllocation;
    *out = (cudaStream_t)s;
    return cudaSuccess;
}

/* CUDA returns at once; the queued work still finishes */
API cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    stream_t *s = (stream_t *)h;

    CUDA_READY();
    pthread_mutex_lock(&G);
    /* checked again after the context lock: another thread may destroy it meanwhile */
    while (h && h != cudaStreamLegacy && h != cudaStreamPerThread && stream_live_locked(s) &&
           ctx_cleanup[s->phys])
        g_wait();
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread || !stream_live_locked(s)) {
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live "
                        "stream", (void *)h);
    }
    s->dead = 1;
    st.live_streams--;
    pthread_cond_signal(&s->wake);
    stream_unref_locked(s); /* the handle's ref; the worker keeps its own */
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

API cudaError_t cudaStreamQuery(cudaStream_t h)
{
    char why[256];
    int dev;
    cudaError_t rc;
    stream_t *s;

    CUDA_READY();
    dev = cur_dev();
    pthread_mutex_lock(&G);
    if (!(s = stream_gated_locked(h, dev, "cudaStreamQuery", &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return cuda_bad(rc, "%s", why);
    }
    rc = ctx_sticky[s->phys] != cudaSuccess     ? ctx_sticky[s->phys]
         : s->completed < s->submitted ? cudaErrorNotReady
                                       : cudaSuccess;
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    char why[256];
    cudaError_t rc;
    stream_t *s;
    int dev;

    CUDA_READY();
    dev = cur_dev();
    pthread_mutex_lock(&G);
    if (!(s = stream_gated_locked(h, dev, "cudaStreamSynchronize", &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return cuda_bad(rc, "%s", why);
    }
    s->refs++;
    stream_wait_locked(s, s->submitted);
    rc = ctx_sticky[s->phys];
    stream_unref_locked(s);
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaDeviceSynchronize(void)
{
    int phys;
    cudaError_t rc;

    CUDA_READY();
    phys = vis_map[cur_dev()];
    pthread_mutex_lock(&G);
    gate_locked(phys);
    device_drain_locked(phys);
    rc = ctx_sticky[phys];
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *arg)
{
    op_t *o;

    CUDA_READY();
    if (!fn)
        return cuda_bad(cudaErrorInvalidValue, "cudaLaunchHostFunc: fn is NULL");
    if ((o = op_new(OP_HOSTFN)))
        o->u.host.fn = fn, o->u.host.arg = arg;
    return submit(h, o, NULL, "cudaLaunchHostFunc", NULL);
}

/* ---- events: generation counters ---- */

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
    event_t *e, **more;
    int dev;
    cudaError_t rc;

    CUDA_READY();
    if (!out)
        return cuda_bad(cudaErrorInvalidValue, "cudaEventCreateWithFlags: event is NULL");
    if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming))
        return cuda_bad(cudaErrorInvalidValue, "cudaEventCreateWithFlags: flags 0x%x (only "
                        "cudaEventBlockingSync and cudaEventDisableTiming are modelled)", flags);
    dev = cur_dev();
    if ((rc = sticky(dev)) != cudaSuccess)
        return rc;
    if (!(e = calloc(1, sizeof(*e))))
        return t_last = cudaErrorMemoryAllocation;
    *e = (event_t){.magic = EVENT_MAGIC, .dev = dev, .phys = vis_map[dev], .flags = (int)flags,
                   .refs = 1};
    pthread_mutex_lock(&G);
    if (nevents == capevents) {
        size_t cap = capevents ? 2 * capevents : 64;
        if (!(more = realloc(events, cap * sizeof(*more)))) {
            pthread_mutex_unlock(&G);
            free(e);
            return t_last = cudaErrorMemoryAllocation;
        }
        events = more;
        capevents = cap;
    }
    events[nevents++] = e;
    st.live_events++;
    pthread_mutex_unlock(&G);
    *out = (cudaEvent_t)e;
    return cudaSuccess;
}

API cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    event_t *e = (event_t *)h;

    CUDA_READY();
    pthread_mutex_lock(&G);
    /* the context lock first: its wait drops G, and the list may change */
    while (event_live_locked(e) && ctx_cleanup[e->phys])
        g_wait();
    for (size_t i = 0; i < nevents; i++)
        if (events[i] == e) {
            events[i] = events[--nevents];
            st.live_events--;
            event_unref_locked(e); /* a pending record keeps it until it runs */
            pthread_mutex_unlock(&G);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&G);
    return cuda_bad(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event",
                    (void *)h);
}

/* recordfail: the Nth cudaEventRecord of the process fails; its N in *nth */
static int record_fault(long *nth)
{
    long n;

    pthread_mutex_lock(&G);
    n = *nth = ++record_calls;
    pthread_mutex_unlock(&G);
    for (int i = 0; i < nfaults; i++)
        if (!strcmp(faults[i].kind, "recordfail") &&
            (faults[i].rank < 0 || faults[i].rank == my_rank) &&
            (faults[i].call < 0 || faults[i].call == n))
            return 1;
    return 0;
}

API cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh)
{
    long nth;

    CUDA_READY();
    if (record_fault(&nth)) {
        fprintf(stderr, "ddp-gpu-standin: injected fault: cudaEventRecord #%ld fails "
                "(DDP_GPU_STANDIN_FAULT recordfail)\n", nth);
        return t_last = cudaErrorLaunchFailure;
    }
    return submit(sh, op_new(OP_RECORD), (event_t *)h, "cudaEventRecord", NULL);
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned int flags)
{
    CUDA_READY();
    if (flags)
        return cuda_bad(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags 0x%x", flags);
    return submit(sh, op_new(OP_WAIT), (event_t *)h, "cudaStreamWaitEvent", NULL);
}

/* the live event h, its device's context lock passed (G held) */
static event_t *event_get_locked(cudaEvent_t h)
{
    event_t *e = (event_t *)h;

    if (!event_live_locked(e))
        return NULL;
    gate_locked(e->phys);
    return event_live_locked(e) ? e : NULL; /* the gate may have waited */
}

API cudaError_t cudaEventQuery(cudaEvent_t h)
{
    event_t *e;
    cudaError_t rc;

    CUDA_READY();
    pthread_mutex_lock(&G);
    if (!(e = event_get_locked(h))) {
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): not a live event",
                        (void *)h);
    }
    rc = ctx_sticky[e->phys] != cudaSuccess ? ctx_sticky[e->phys]
         : e->completed < e->recorded      ? cudaErrorNotReady
                                            : cudaSuccess;
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    event_t *e;
    cudaError_t rc;
    uint64_t want;

    CUDA_READY();
    pthread_mutex_lock(&G);
    if (!(e = event_get_locked(h))) {
        pthread_mutex_unlock(&G);
        return cuda_bad(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): not a live "
                        "event", (void *)h);
    }
    e->refs++;
    want = e->recorded;
    while (e->completed < want && ctx_sticky[e->phys] == cudaSuccess)
        g_wait();
    rc = ctx_sticky[e->phys];
    event_unref_locked(e);
    pthread_mutex_unlock(&G);
    return cuda_rc(rc);
}

API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    event_t *e0, *e1;
    cudaError_t rc = cudaSuccess;
    const char *why = "";

    CUDA_READY();
    if (!ms)
        return cuda_bad(cudaErrorInvalidValue, "cudaEventElapsedTime: ms is NULL");
    pthread_mutex_lock(&G);
    e0 = event_get_locked(a);
    e1 = event_get_locked(b);
    if (!e0 || !e1)
        rc = cudaErrorInvalidResourceHandle, why = "not a live event";
    else if ((e0->flags | e1->flags) & cudaEventDisableTiming)
        rc = cudaErrorInvalidResourceHandle, why = "an event made with cudaEventDisableTiming";
    else if (!e0->recorded || !e1->recorded)
        rc = cudaErrorInvalidResourceHandle, why = "an event never recorded";
    else if (e0->completed < e0->recorded || e1->completed < e1->recorded)
        rc = cudaErrorNotReady;
    else
        *ms = (float)((e1->when - e0->when) * 1e3);
    pthread_mutex_unlock(&G);
    if (rc == cudaErrorInvalidResourceHandle)
        return cuda_bad(rc, "cudaEventElapsedTime(%p, %p): %s", (void *)a, (void *)b, why);
    return cuda_rc(rc);
}

/* ---- NCCL: 16-bit floats, converted here (round to nearest even) ---- */

static float bits_f(uint32_t u)
{
    float f;

    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static float h2f(uint16_t h)
{
    uint32_t u = (uint32_t)(h & 0x7fff) << 13, exp = u & (0x7c00u << 13);

    u += (127u - 15u) << 23;
    if (exp == 0x7c00u << 13) {
        u += (128u - 16u) << 23; /* inf, nan */
    } else if (exp == 0) {
        u += 1u << 23; /* subnormal: renormalised by the subtraction */
        u = f_bits(bits_f(u) - bits_f(113u << 23));
    }
    return bits_f(u | (uint32_t)(h & 0x8000) << 16);
}

static uint16_t f2h(float f)
{
    uint32_t u = f_bits(f), sign = (u >> 16) & 0x8000, o;

    u &= 0x7fffffff;
    if (u >= 0x47800000u) {
        o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {
        /* subnormal half: let the FPU round, adding 0.5 aligns the bits */
        o = f_bits(bits_f(u) + 0.5f) - 0x3f000000u;
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = u >> 13;
    }
    return (uint16_t)(o | sign);
}

static float bf2f(uint16_t b)
{
    return bits_f((uint32_t)b << 16);
}

static uint16_t f2bf(float f)
{
    uint32_t u = f_bits(f);

    if ((u & 0x7fffffff) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* ---- reductions, elementwise, in the type's own precision ---- */

static size_t type_size(int t)
{
    static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

    return t >= 0 && t < (int)ncclNumTypes ? sz[t] : 0;
}

static int reduce_type(int t)
{
    return t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat16 ||
           t == ncclInt32 || t == ncclInt64;
}

static const char *type_name(int t)
{
    static const char *const n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                    "float16", "float32", "float64", "bfloat16", "fp8e4m3",
                                    "fp8e5m2"};

    return t >= 0 && t < (int)ncclNumTypes ? n[t] : "?";
}

#define OP_PREMUL 100
static const char *op_name(int op)
{
    static const char *const n[] = {"sum", "prod", "max", "min", "avg"};

    return op == OP_PREMUL ? "premulsum" : op >= 0 && op < 5 ? n[op] : "?";
}

#define BINOP(op, a, b) \
    ((op) == ncclProd ? (a) * (b) : (op) == ncclMax ? ((a) > (b) ? (a) : (b)) \
     : (op) == ncclMin ? ((a) < (b) ? (a) : (b)) : (a) + (b))

#define REDUCE_NATIVE(T) \
    do { \
        T *x = acc; \
        const T *y = in; \
        for (size_t i = 0; i < n; i++) \
            x[i] = (T)BINOP(op, x[i], y[i]); \
    } while (0)

/* integers wrap, as on a GPU: sum and product in the unsigned type U
 * (signed overflow would be undefined in C), max and min signed */
#define REDUCE_INT(T, U) \
    do { \
        T *x = acc; \
        const T *y = in; \
        for (size_t i = 0; i < n; i++) \
            x[i] = op == ncclSum ? (T)((U)x[i] + (U)y[i]) \
                   : op == ncclProd ? (T)((U)x[i] * (U)y[i]) : (T)BINOP(op, x[i], y[i]); \
    } while (0)

/* acc[i] = acc[i] op in[i]; 16-bit: to float, op, rounded back each time */
static void reduce_into(void *acc, const void *in, size_t n, int t, int op)
{
    uint16_t *h = acc;
    const uint16_t *g = in;

    switch (t) {
    case ncclFloat32: REDUCE_NATIVE(float); break;
    case ncclFloat64: REDUCE_NATIVE(double); break;
    case ncclInt32: REDUCE_INT(int32_t, uint32_t); break;
    case ncclInt64: REDUCE_INT(int64_t, uint64_t); break;
    case ncclFloat16:
        for (size_t i = 0; i < n; i++) {
            float a = h2f(h[i]), b = h2f(g[i]);
            h[i] = f2h(BINOP(op, a, b));
        }
        break;
    case ncclBfloat16:
        for (size_t i = 0; i < n; i++) {
            float a = bf2f(h[i]), b = bf2f(g[i]);
            h[i] = f2bf(BINOP(op, a, b));
        }
        break;
    default: break;
    }
}

/* x[i] *= k in the type's precision (PreMulSum's inputs; avg's 1/n) */
static void scale(void *x, size_t n, int t, const unsigned char *k)
{
    float kf;
    double kd;
    int32_t k32;
    int64_t k64;
    uint16_t kh, *h = x;

    switch (t) {
    case ncclFloat32:
        memcpy(&kf, k, 4);
        for (size_t i = 0; i < n; i++)
            ((float *)x)[i] *= kf;
        break;
    case ncclFloat64:
        memcpy(&kd, k, 8);
        for (size_t i = 0; i < n; i++)
            ((double *)x)[i] *= kd;
        break;
    case ncclInt32:
        memcpy(&k32, k, 4);
        for (size_t i = 0; i < n; i++) /* wrapping, as on a GPU */
            ((int32_t *)x)[i] = (int32_t)((uint32_t)((int32_t *)x)[i] * (uint32_t)k32);
        break;
    case ncclInt64:
        memcpy(&k64, k, 8);
        for (size_t i = 0; i < n; i++)
            ((int64_t *)x)[i] = (int64_t)((uint64_t)((int64_t *)x)[i] * (uint64_t)k64);
        break;
    case ncclFloat16:
        memcpy(&kh, k, 2);
        for (size_t i = 0; i < n; i++)
            h[i] = f2h(h2f(h[i]) * h2f(kh));
        break;
    case ncclBfloat16:
        memcpy(&kh, k, 2);
        for (size_t i = 0; i < n; i++)
            h[i] = f2bf(bf2f(h[i]) * bf2f(kh));
        break;
    default: break;
    }
}

/* ncclAvg of integers: NCCL's SumPostDiv, the wrapped sum divided by n,
 * truncating toward zero */
static void average_int(void *x, size_t n, int t, int nranks)
{
    if (t == ncclInt32)
        for (size_t i = 0; i < n; i++)
            ((int32_t *)x)[i] /= nranks;
    else if (t == ncclInt64)
        for (size_t i = 0; i < n; i++)
            ((int64_t *)x)[i] /= nranks;
}

/* ncclAvg of floats is NCCL's PreMulSum by 1/n: every input times
 * (type)(float)(1.0/n) before the sum, as in NCCL's hostToDevRedOp */
static void avg_scalar(int t, int nranks, unsigned char *k)
{
    double d = 1.0 / nranks;
    float f = (float)d;
    uint16_t h = t == ncclFloat16 ? f2h(f) : f2bf(f);

    if (t == ncclFloat64)
        memcpy(k, &d, 8);
    else if (t == ncclFloat32)
        memcpy(k, &f, 4);
    else
        memcpy(k, &h, 2);
}

/* ---- communicators ---- */

#define COMM_MAGIC 0x434f4d4du

enum { K_AR, K_RS, K_AG, K_BC };
static const char *const kind_names[] = {"allreduce", "reducescatter", "allgather", "broadcast"};

typedef struct {
    uint64_t seq;
    int32_t kind, op, dtype, root;
    uint64_t count;
} desc_t;

typedef struct {
    uint64_t joined, first, phase; /* atomics, across processes */
    int32_t phys, pid;
    char host[64];
    desc_t d;
    char pad[16];
} slot_t;

typedef struct {
    uint32_t magic;
    int32_t nranks;  /* set once by the first to join */
    uint64_t njoined;
    int32_t creator; /* the pid in the id: a stale segment names its maker */
    int32_t pad;
} shm_hdr_t;

typedef struct {
    uint32_t magic;
    int32_t pid;
    char name[64];
} id_t_;

typedef struct comm {
    unsigned magic;
    int nranks, rank, dev, phys, blocking, initfail, joined_all, unlinked;
    char name[64], shm_name[64];
    unsigned char *map;
    size_t map_len;
    shm_hdr_t *hdr;
    slot_t *slot;
    unsigned char *win;
    int state;                   /* 0 joining, 1 ready, 2 init failed */
    ncclResult_t async;          /* under G: the worker sets errors */
    char lastmsg[512];
    int connected, first_issued;
    int pending;                 /* a non-blocking call in progress */
    int pending_seen;            /* ...reported ncclInProgress once */
    int finalizing;
    stream_t *pending_stream;
    uint64_t ncalls, exec_done;  /* collectives issued; kernels finished (in order) */
    uint64_t bar;                /* barriers passed (the kernels') */
    int kernels;                 /* enqueued, not finished */
    int aborted;                 /* atomic */
    int shrunk;                  /* an abortive ncclCommShrink's parent: abort only */
    int nshrink;                 /* shrinks made from it (names their segments) */
} comm_t;

static comm_t **comms;
static size_t ncomms, capcomms;

typedef struct {
    comm_t *comm;
    int dtype, live;
    unsigned char scalar[8];
} redop_t;
static redop_t redops[256];

static int comm_live_locked(const comm_t *c)
{
    for (size_t i = 0; i < ncomms; i++)
        if (comms[i] == c)
            return 1;
    return 0;
}

static void comm_unlist_locked(comm_t *c)
{
    for (size_t i = 0; i < ncomms; i++)
        if (comms[i] == c) {
            comms[i] = comms[--ncomms];
            st.live_comms--;
            return;
        }
}

static int comm_list_locked(comm_t *c)
{
    if (ncomms == capcomms) {
        size_t cap = capcomms ? 2 * capcomms : 16;
        comm_t **more = realloc(comms, cap * sizeof(*more));
        if (!more)
            return -1;
        comms = more;
        capcomms = cap;
    }
    comms[ncomms++] = c;
    st.live_comms++;
    return 0;
}

static int aborted(comm_t *c)
{
    return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE);
}

static void comm_msg(comm_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void comm_msg(comm_t *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->lastmsg, sizeof(c->lastmsg), fmt, ap);
    va_end(ap);
}

#define NCCL_READY() \
    do { \
        if (!ready()) \
            return ncclSystemError; \
        if (t_hostfn) \
            return nccl_bad(ncclInvalidUsage, "%s called from a host function " \
                            "(cudaLaunchHostFunc): not permitted there", __func__); \
        nccl_first_call(); \
    } while (0)

API ncclResult_t ncclGetVersion(int *v)
{
    NCCL_READY();
    if (!v)
        return nccl_bad(ncclInvalidArgument, "ncclGetVersion: NULL");
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

API const char *ncclGetErrorString(ncclResult_t rc)
{
    switch (rc) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* copied into the thread's buffer under G: the comm's own text may be
 * written by its kernel meanwhile, and is freed with it at abort/destroy */
API const char *ncclGetLastError(ncclComm_t h)
{
    if (!ready())
        return t_nccl_msg;
    pthread_mutex_lock(&G);
    if (h && comm_live_locked((comm_t *)h) && ((comm_t *)h)->lastmsg[0])
        scopy(t_nccl_msg, sizeof(t_nccl_msg), ((comm_t *)h)->lastmsg);
    pthread_mutex_unlock(&G);
    return t_nccl_msg;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    id_t_ x = {ID_MAGIC, (int32_t)getpid(), {0}};
    unsigned char rnd[12];
    int fd;

    NCCL_READY();
    if (!id)
        return nccl_bad(ncclInvalidArgument, "ncclGetUniqueId: NULL");
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd)) {
        if (fd >= 0)
            close(fd);
        return nccl_bad(ncclSystemError, "ncclGetUniqueId: cannot read /dev/urandom");
    }
    close(fd);
    snprintf(x.name, sizeof(x.name), "/ddp-gpu-standin-%d-", (int)x.pid);
    for (int i = 0; i < 12; i++)
        snprintf(x.name + strlen(x.name), 3, "%02x", rnd[i]);
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &x, sizeof(x));
    return ncclSuccess;
}

static size_t seg_size(int n)
{
    return sizeof(shm_hdr_t) + 64 + (size_t)n * sizeof(slot_t) + (size_t)n * WINDOW;
}

/* this rank's place in the segment; -1 with lastmsg */
static int seg_join(comm_t *c, const id_t_ *x)
{
    size_t len = seg_size(c->nranks);
    struct stat sb;
    int fd, want = 0;
    char host[64] = "";
    const char *hid = getenv("NCCL_HOSTID");

    scopy(c->shm_name, sizeof(c->shm_name), x->name);
    if ((fd = shm_open(x->name, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
        comm_msg(c, "shm_open %s: %s", x->name, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) < 0 || ((size_t)sb.st_size < len && ftruncate(fd, (off_t)len) < 0) ||
        (fstat(fd, &sb) == 0 && (size_t)sb.st_size != len)) {
        comm_msg(c, "%s: ranks disagree on the communicator's size (%d ranks here)", x->name,
                 c->nranks);
        close(fd);
        return -1;
    }
    c->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        comm_msg(c, "mmap %s: %s", x->name, strerror(errno));
        return -1;
    }
    c->map_len = len;
    c->hdr = (shm_hdr_t *)c->map;
    c->slot = (slot_t *)(c->map + sizeof(shm_hdr_t) + 64);
    c->win = (unsigned char *)(c->slot + c->nranks);
    if (!__atomic_compare_exchange_n(&c->hdr->nranks, &want, c->nranks, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) && want != c->nranks) {
        comm_msg(c, "ranks disagree on nranks: %d here, %d elsewhere", c->nranks, want);
        return -1;
    }
    c->hdr->creator = x->pid;
    c->hdr->magic = SHM_MAGIC;
    if (__atomic_exchange_n(&c->slot[c->rank].joined, 1, __ATOMIC_ACQ_REL)) {
        comm_msg(c, "rank %d of '%s' joined twice", c->rank, c->name); /* one claim wins */
        return -1;
    }
    if (hid && *hid)
        scopy(host, sizeof(host), hid);
    else
        gethostname(host, sizeof(host) - 1);
    memcpy(c->slot[c->rank].host, host, sizeof(host));
    c->slot[c->rank].phys = c->phys;
    c->slot[c->rank].pid = (int32_t)getpid();
    if ((int)__atomic_add_fetch(&c->hdr->njoined, 1, __ATOMIC_ACQ_REL) == c->nranks) {
        shm_unlink(c->shm_name); /* all here: nothing is left in /dev/shm */
        c->unlinked = 1;
    }
    return 0;
}

static void seg_leave(comm_t *c)
{
    if (!c->map)
        return;
    if (!c->unlinked && (int)__atomic_load_n(&c->hdr->njoined, __ATOMIC_ACQUIRE) < c->nranks)
        shm_unlink(c->shm_name); /* the peers still to come would wait anyway */
    munmap(c->map, c->map_len);
    c->map = NULL;
}

/* joining done: every rank here, and no two on one GPU (as NCCL checks) */
static int joined_check_locked(comm_t *c)
{
    if (c->state != 0)
        return c->state;
    if ((int)__atomic_load_n(&c->hdr->njoined, __ATOMIC_ACQUIRE) < c->nranks)
        return 0;
    for (int j = 0; j < c->nranks; j++)
        if (j != c->rank && c->slot[j].phys == c->phys &&
            !strncmp(c->slot[j].host, c->slot[c->rank].host, 64)) {
            int a = j < c->rank ? j : c->rank, b = j < c->rank ? c->rank : j;
            comm_msg(c, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %x",
                     a, b, (unsigned)(c->phys + 0x10) << 12);
            fprintf(stderr, "ddp-gpu-standin: '%s': %s\n", c->name, c->lastmsg);
            c->async = ncclInvalidUsage;
            return c->state = 2;
        }
    return c->state = 1;
}

static const struct fault *fault_for(const comm_t *c, const char *kinds, uint64_t nth)
{
    for (int i = 0; i < nfaults; i++) {
        const struct fault *f = &faults[i];
        char k[24] = ",";
        scopy(k + 1, sizeof(k) - 2, f->kind);
        strcat(k, ",");
        if (strstr(kinds, k) && (f->rank < 0 || f->rank == my_rank) &&
            (!strcmp(f->comm, "*") || strstr(c->name, f->comm)) &&
            (f->call < 0 || (uint64_t)f->call == nth || !nth))
            return f;
    }
    return NULL;
}

static void comm_free(comm_t *c)
{
    pthread_mutex_lock(&G);
    for (int i = 0; i < 256; i++)
        if (redops[i].live && redops[i].comm == c) {
            redops[i].live = 0; /* NCCL frees a communicator's ops with it */
            live_redops--;
        }
    pthread_mutex_unlock(&G);
    seg_leave(c);
    c->magic = 0;
    free(c);
}

static int config_bad(const char *call, const ncclConfig_t *cfg, ncclResult_t *rc)
{
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t)))
        *rc = nccl_bad(ncclInvalidArgument, "%s: config not made with NCCL_CONFIG_INITIALIZER",
                       call);
    else if (cfg && cfg->blocking != NCCL_CONFIG_UNDEF_INT && cfg->blocking != 0 &&
             cfg->blocking != 1)
        *rc = nccl_bad(ncclInvalidArgument, "%s: Invalid config blocking attribute value %d",
                       call, cfg->blocking); /* NCCL's own words */
    else
        return 0;
    return 1;
}

/* a new communicator, rank of nranks, over x's segment, on visible device
 * dev (-1: the thread's): an init's or a shrink's (name: when cfg gives none) */
static ncclResult_t comm_make(ncclComm_t *out, int nranks, int rank, const id_t_ *xp,
                              ncclConfig_t *cfg, const char *name, int dev)
{
    id_t_ x = *xp;
    comm_t *c;
    const struct fault *f;

    if (dev < 0)
        dev = cur_dev();
    if (!(c = calloc(1, sizeof(*c))))
        return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->dev = dev;
    c->phys = vis_map[dev];
    c->blocking = !cfg || cfg->blocking != 0;
    scopy(c->name, sizeof(c->name), cfg && cfg->commName ? cfg->commName : name);
    if ((f = fault_for(c, ",initfail,", 0))) {
        c->initfail = 1;
        c->state = 2;
        c->async = ncclSystemError;
        comm_msg(c, "injected fault: initfail of communicator '%s' on rank %d", c->name, my_rank);
        scopy(t_nccl_msg, sizeof(t_nccl_msg), c->lastmsg);
        if (c->blocking) {
            free(c);
            return ncclSystemError;
        }
    } else if (seg_join(c, &x) < 0) {
        ncclResult_t bad = nccl_bad(ncclInvalidArgument, "ncclCommInitRankConfig '%s': %s",
                                    c->name, c->lastmsg);
        seg_leave(c);
        free(c);
        return bad;
    }
    pthread_mutex_lock(&G);
    if (comm_list_locked(c) < 0) {
        pthread_mutex_unlock(&G);
        comm_free(c);
        return ncclSystemError;
    }
    if (!c->blocking) {
        pthread_mutex_unlock(&G);
        *out = (ncclComm_t)c;
        return ncclInProgress;
    }
    while (joined_check_locked(c) == 0)
        g_wait();
    if (c->state == 2) {
        ncclResult_t rc = c->async;
        scopy(t_nccl_msg, sizeof(t_nccl_msg), c->lastmsg);
        comm_unlist_locked(c);
        pthread_mutex_unlock(&G);
        comm_free(c);
        return rc;
    }
    pthread_mutex_unlock(&G);
    *out = (ncclComm_t)c;
    return ncclSuccess;
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t *cfg)
{
    id_t_ x;
    ncclResult_t rc;

    NCCL_READY();
    memcpy(&x, id.internal, sizeof(x));
    if (!out)
        return nccl_bad(ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
    *out = NULL;
    if (nranks < 1 || nranks > 1024 || rank < 0 || rank >= nranks)
        return nccl_bad(ncclInvalidArgument, "ncclCommInitRankConfig: rank %d of %d ranks",
                        rank, nranks);
    if (x.magic != ID_MAGIC || strncmp(x.name, "/ddp-gpu-standin-", 17) ||
        !memchr(x.name, 0, sizeof(x.name)))
        return nccl_bad(ncclInvalidArgument, "ncclCommInitRankConfig: not an id from "
                        "ncclGetUniqueId");
    if (config_bad("ncclCommInitRankConfig", cfg, &rc))
        return rc;
    if (t_group)
        return nccl_bad(ncclInvalidUsage, "ncclCommInitRankConfig inside ncclGroupStart/End: not "
                        "modelled by the stand-in");
    return comm_make(out, nranks, rank, &x, cfg, "", -1);
}

static comm_t *comm_work_locked(ncclComm_t h, const char *call, ncclResult_t *rc, char *why,
                                size_t len);

/* the excluded list: in range, no repeats, not the caller; -1 with why */
static int excl_check(const comm_t *p, const int *excl, int nexcl, int *below, char *why,
                      size_t len)
{
    *below = 0;
    for (int i = 0; i < nexcl; i++) {
        if (excl[i] < 0 || excl[i] >= p->nranks || excl[i] == p->rank) {
            snprintf(why, len, "ncclCommShrink on '%s' (rank %d of %d): excluded rank %d is %s",
                     p->name, p->rank, p->nranks, excl[i],
                     excl[i] == p->rank ? "the caller (excluded ranks must not call it)"
                                        : "out of range");
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (excl[j] == excl[i]) {
                snprintf(why, len, "ncclCommShrink on '%s': rank %d excluded twice", p->name,
                         excl[i]);
                return -1;
            }
        *below += excl[i] < p->rank;
    }
    return 0;
}

/* NCCL_SHRINK_ABORT: the parent's kernels end (their abort flag), then it
 * takes only ncclCommAbort. A kernel queued behind another communicator's
 * running one never ends: said once after 5 s (abort that one first, in
 * the same group), then waited for as NCCL would (G held) */
static void shrink_abort_locked(comm_t *p)
{
    double t0 = now_s();
    int said = 0;

    __atomic_store_n(&p->aborted, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&G_cv);
    while (p->kernels > 0) {
        if (!said && now_s() - t0 > 5) {
            said = 1;
            violation_locked();
            fprintf(stderr, "ddp-gpu-standin: ncclCommShrink(NCCL_SHRINK_ABORT) on '%s' waits "
                    "for %d kernel(s) queued behind another communicator's running kernel "
                    "(abort that one first, in the same ncclGroupStart/End)\n", p->name,
                    p->kernels);
        }
        g_wait();
    }
    p->shrunk = 1;
}

API ncclResult_t ncclCommShrink(ncclComm_t h, int *excl, int nexcl, ncclComm_t *out,
                                ncclConfig_t *cfg, int flags)
{
    char why[300];
    ncclResult_t rc;
    comm_t *p;
    id_t_ x = {ID_MAGIC, 0, {0}};
    int below, n, dev;

    NCCL_READY();
    if (!out)
        return nccl_bad(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
    *out = NULL;
    if (flags != NCCL_SHRINK_DEFAULT && flags != NCCL_SHRINK_ABORT)
        return nccl_bad(ncclInvalidArgument, "ncclCommShrink: shrinkFlags %d", flags);
    if (!excl || nexcl <= 0) /* NCCL's own check: a shrink drops someone */
        return nccl_bad(ncclInvalidArgument, "ncclCommShrink: excludeRanksList %p, count %d",
                        (void *)excl, nexcl);
    if (config_bad("ncclCommShrink", cfg, &rc))
        return rc;
    if (t_group && (!cfg || cfg->blocking != 0))
        return nccl_bad(ncclInvalidUsage, "ncclCommShrink of a blocking communicator inside "
                        "ncclGroupStart/End: not modelled by the stand-in");
    pthread_mutex_lock(&G);
    if (!(p = comm_work_locked(h, "ncclCommShrink", &rc, why, sizeof(why))) ||
        (rc = ncclInvalidArgument, excl_check(p, excl, nexcl, &below, why, sizeof(why)) < 0)) {
        pthread_mutex_unlock(&G);
        return nccl_bad(rc, "%s", why);
    }
    if (p->async != ncclSuccess) { /* NCCL's ncclCommEnsureReady keeps the parent's error */
        rc = p->async;
        scopy(t_nccl_msg, sizeof(t_nccl_msg), p->lastmsg);
        pthread_mutex_unlock(&G);
        return rc;
    }
    if (!(flags & NCCL_SHRINK_ABORT) && p->kernels > 0) {
        pthread_mutex_unlock(&G);
        return nccl_bad(ncclInvalidUsage, "ncclCommShrink(NCCL_SHRINK_DEFAULT) on '%s' with %d "
                        "collective(s) in flight: NCCL assumes none (NCCL_SHRINK_ABORT ends "
                        "them)", p->name, p->kernels);
    }
    if (fault_for(p, ",shrinkfail,", 0)) {
        comm_msg(p, "injected fault: shrinkfail of '%s' on rank %d", p->name, my_rank);
        scopy(t_nccl_msg, sizeof(t_nccl_msg), p->lastmsg);
        pthread_mutex_unlock(&G);
        return ncclSystemError;
    }
    if (flags & NCCL_SHRINK_ABORT)
        shrink_abort_locked(p);
    /* every survivor names the same segment without talking: the parent's, numbered */
    x.pid = p->hdr->creator;
    snprintf(x.name, sizeof(x.name), "%.50s.%d", p->shm_name, ++p->nshrink);
    n = p->nranks - nexcl;
    below = p->rank - below;
    scopy(why, sizeof(why), p->name);
    dev = p->dev; /* the parent's, whichever thread calls (NCCL: comm->cudaDev) */
    pthread_mutex_unlock(&G);
    return comm_make(out, n, below, &x, cfg, why, dev);
}

API ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

/* all ranks issued their first collective: NCCL's lazy connection done */
static int connected_locked(comm_t *c)
{
    if (c->connected)
        return 1;
    for (int j = 0; j < c->nranks; j++)
        if (!__atomic_load_n(&c->slot[j].first, __ATOMIC_ACQUIRE))
            return 0;
    return c->connected = 1;
}

/* a non-blocking call's end: reported in progress once, connection made,
 * finalize's work done (G held) */
/* The stream an in-progress call holds a reference on (it may be destroyed
 * meanwhile, as CUDA allows: freed when the last reference goes). */
static void pending_stream_clear_locked(comm_t *c)
{
    stream_t *s = c->pending_stream;

    if (!s)
        return;
    if (s->inprog == c)
        s->inprog = NULL;
    c->pending_stream = NULL;
    stream_unref_locked(s);
}

static int pending_done_locked(comm_t *c)
{
    if (c->pending && connected_locked(c) && c->pending_seen) {
        c->pending = 0;
        pending_stream_clear_locked(c);
    }
    c->pending_seen = 1;
    if (c->finalizing == 1 && c->kernels == 0)
        c->finalizing = 2;
    return !c->pending && c->finalizing != 1;
}

API ncclResult_t ncclCommGetAsyncError(ncclComm_t h, ncclResult_t *rc)
{
    comm_t *c = (comm_t *)h;

    NCCL_READY();
    if (!rc)
        return nccl_bad(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    pthread_mutex_lock(&G);
    if (!c || !comm_live_locked(c)) {
        pthread_mutex_unlock(&G);
        return nccl_bad(ncclInvalidArgument, "ncclCommGetAsyncError(%p): not a live "
                        "communicator (never made, or aborted/destroyed)", (void *)h);
    }
    if (c->state == 0 && joined_check_locked(c) == 0)
        *rc = ncclInProgress;
    else if (c->state == 2 || c->async != ncclSuccess)
        *rc = c->async;
    else
        *rc = pending_done_locked(c) ? ncclSuccess : ncclInProgress;
    pthread_mutex_unlock(&G);
    return ncclSuccess;
}

/* the live, ready communicator h for call, or NULL with *rc (G held) */
static comm_t *comm_use_locked(ncclComm_t h, const char *call, ncclResult_t *rc, char *why,
                               size_t len)
{
    comm_t *c = (comm_t *)h;

    *rc = ncclInvalidArgument;
    if (!c || !comm_live_locked(c)) {
        snprintf(why, len, "%s(comm %p): not a live communicator (never made, or "
                 "aborted/destroyed)", call, (void *)h);
        return NULL;
    }
    if (c->state == 0 && joined_check_locked(c) == 0) {
        snprintf(why, len, "%s on '%s': its init is still in progress (NCCL: no call on a "
                 "communicator in progress)", call, c->name);
        return NULL;
    }
    if (c->shrunk) {
        *rc = ncclInvalidUsage;
        snprintf(why, len, "%s on '%s' after an abortive ncclCommShrink: only ncclCommAbort may "
                 "follow (a destroy there can wait forever: pytorch/pytorch#194679)", call,
                 c->name);
        return NULL;
    }
    if (c->pending || c->finalizing == 1) {
        snprintf(why, len, "%s on '%s': its last call is still in progress (poll "
                 "ncclCommGetAsyncError until ncclSuccess first)", call, c->name);
        return NULL;
    }
    if (c->state == 2) {
        *rc = c->async;
        snprintf(why, len, "%s on '%s': its init failed", call, c->name);
        return NULL;
    }
    return c;
}

/* comm_use_locked for new work: not after ncclCommFinalize (its resources
 * are being freed), and past the device's context lock; looked up again
 * after that wait, since another thread may abort it meanwhile (G held) */
static comm_t *comm_work_locked(ncclComm_t h, const char *call, ncclResult_t *rc, char *why,
                                size_t len)
{
    for (;;) {
        comm_t *c = comm_use_locked(h, call, rc, why, len);
        if (c && c->finalizing) {
            *rc = ncclInvalidUsage;
            snprintf(why, len, "%s on '%s' after ncclCommFinalize: only ncclCommDestroy may "
                     "follow", call, c->name);
            return NULL;
        }
        if (!c || !ctx_cleanup[c->phys])
            return c;
        g_wait();
    }
}

API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t,
                                          ncclScalarResidence_t res, ncclComm_t h)
{
    char why[300];
    ncclResult_t rc;
    comm_t *c;

    NCCL_READY();
    if (!op || !scalar || !reduce_type((int)t))
        return nccl_bad(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op %p, scalar %p, "
                        "type %s", (void *)op, scalar, type_name((int)t));
    if (res != ncclScalarHostImmediate)
        return nccl_bad(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: ncclScalarDevice is "
                        "not modelled by the stand-in");
    pthread_mutex_lock(&G);
    if (!(c = comm_work_locked(h, "ncclRedOpCreatePreMulSum", &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return nccl_bad(rc, "%s", why);
    }
    for (int i = 0; i < 256; i++)
        if (!redops[i].live) {
            redops[i] = (redop_t){c, (int)t, 1, {0}};
            memcpy(redops[i].scalar, scalar, type_size((int)t)); /* copied now: immediate */
            live_redops++;
            *op = (ncclRedOp_t)(PREMUL_BASE + i);
            pthread_mutex_unlock(&G);
            return ncclSuccess;
        }
    pthread_mutex_unlock(&G);
    return nccl_bad(ncclInternalError, "ncclRedOpCreatePreMulSum: more than 256 live ops");
}

API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t h)
{
    char why[300];
    ncclResult_t rc;
    comm_t *c;
    int i = (int)op - PREMUL_BASE;

    NCCL_READY();
    pthread_mutex_lock(&G);
    if (!(c = comm_use_locked(h, "ncclRedOpDestroy", &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return nccl_bad(rc, "%s", why);
    }
    if (i < 0 || i >= 256 || !redops[i].live || redops[i].comm != c) {
        pthread_mutex_unlock(&G);
        return nccl_bad(ncclInvalidArgument, "ncclRedOpDestroy(op %d) on '%s': %s", (int)op,
                        c->name, i < 0 ? "a built-in op"
                        : i >= 256 || !redops[i].live ? "not a live op (destroyed twice?)"
                                                      : "an op of another communicator");
    }
    redops[i].live = 0;
    live_redops--;
    pthread_mutex_unlock(&G);
    return ncclSuccess;
}

/* ---- collectives: checked at the call, run by the stream ---- */

/* device memory of c's device, [p, p+n) (G held) */
static int coll_mem_locked(comm_t *c, const void *p, size_t n, const char *what, char *why,
                           size_t len)
{
    char w[256];
    int phys;

    if (!n)
        return 0;
    if (need_dev_mem_locked(p, n, &phys, w, sizeof(w)) < 0) {
        snprintf(why, len, "%s %p (%zu bytes): %s", what, p, n, w);
        return -1;
    }
    if (phys != c->phys) {
        snprintf(why, len, "%s %p is memory of physical device %d, the communicator's is %d",
                 what, p, phys, c->phys);
        return -1;
    }
    return 0;
}

/* the in-place rules: only the one exact placement may overlap */
static int coll_args_locked(comm_t *c, const kernel_t *k, char *why, size_t len)
{
    size_t es = type_size(k->dtype), n = (size_t)c->nranks;
    size_t sbytes = k->count * es, rbytes = k->count * es;
    uintptr_t sp = (uintptr_t)k->send, rp = (uintptr_t)k->recv, inplace = rp;

    if (k->count > SIZE_MAX / es / n) { /* the byte counts below would wrap */
        snprintf(why, len, "count %zu x %zu bytes x %zu ranks overflows size_t", k->count, es, n);
        return -1;
    }
    if (k->kind == K_RS) {
        sbytes = n * k->count * es;
        inplace = sp + (size_t)c->rank * k->count * es; /* recv is send's block `rank` */
    } else if (k->kind == K_AG) {
        rbytes = n * k->count * es;
        inplace = rp + (size_t)c->rank * k->count * es; /* send is recv's block `rank` */
    }
    if (k->kind == K_BC && k->root != c->rank)
        sbytes = 0; /* only the root's send buffer is read */
    if (coll_mem_locked(c, k->send, sbytes, "sendbuff", why, len) < 0 ||
        coll_mem_locked(c, k->recv, rbytes, "recvbuff", why, len) < 0)
        return -1;
    if (overlaps(sp, sbytes, rp, rbytes) &&
        !((k->kind == K_RS && rp == inplace) || (k->kind == K_AG && sp == inplace) ||
          ((k->kind == K_AR || k->kind == K_BC) && sp == rp))) {
        snprintf(why, len, "sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap, "
                 "but not in place (in place: %s)", k->send, sbytes, k->recv, rbytes,
                 k->kind == K_RS   ? "recvbuff == sendbuff + rank * recvcount * size"
                 : k->kind == K_AG ? "sendbuff == recvbuff + rank * sendcount * size"
                                   : "sendbuff == recvbuff");
        return -1;
    }
    return 0;
}

/* the op: a built-in, or one of c's live PreMulSum ops, its scalar copied */
static int coll_op_locked(comm_t *c, kernel_t *k, int op, char *why, size_t len)
{
    int i = op - PREMUL_BASE;

    k->op = op;
    if (k->kind == K_AG || k->kind == K_BC)
        return 0;
    if (!reduce_type(k->dtype)) {
        snprintf(why, len, "data type %s: reductions of it are not modelled by the stand-in",
                 type_name(k->dtype));
        return -1;
    }
    if (op == ncclAvg && k->dtype != ncclInt32 && k->dtype != ncclInt64) {
        k->premul = 1; /* NCCL: PreMulSum by 1/n; k->op stays avg for the match */
        avg_scalar(k->dtype, c->nranks, k->scalar);
        return 0;
    }
    if (op >= 0 && op < PREMUL_BASE)
        return 0;
    if (i < 0 || i >= 256 || !redops[i].live || redops[i].comm != c) {
        snprintf(why, len, "op %d is %s", op,
                 i < 0 || i >= 256 ? "no reduction operation"
                 : !redops[i].live ? "a destroyed PreMulSum op"
                                   : "another communicator's PreMulSum op");
        return -1;
    }
    if (redops[i].dtype != k->dtype) {
        snprintf(why, len, "PreMulSum op %d was made for %s, not %s", op,
                 type_name(redops[i].dtype), type_name(k->dtype));
        return -1;
    }
    k->op = OP_PREMUL;
    k->premul = 1;
    memcpy(k->scalar, redops[i].scalar, sizeof(k->scalar));
    return 0;
}

/* NCCL's lazy connection: the first collective waits for every rank's */
static void first_collective_locked(comm_t *c)
{
    if (c->first_issued)
        return;
    c->first_issued = 1;
    st.connect_waits++;
    __atomic_store_n(&c->slot[c->rank].first, 1, __ATOMIC_RELEASE);
    if (!c->blocking)
        return;
    while (!connected_locked(c) && !aborted(c))
        g_wait();
}

static ncclResult_t collective(int kind, const void *send, void *recv, size_t count, int dtype,
                               int op, int root, ncclComm_t h, cudaStream_t sh, const char *call)
{
    char why[512], sw[256];
    ncclResult_t rc;
    cudaError_t crc;
    const struct fault *f;
    comm_t *c;
    stream_t *s;
    op_t *o;

    NCCL_READY();
    if (t_group)
        return nccl_bad(ncclInvalidUsage, "%s inside ncclGroupStart/ncclGroupEnd: not modelled "
                        "by the stand-in", call);
    if (!type_size(dtype))
        return nccl_bad(ncclInvalidArgument, "%s: data type %d", call, dtype);
    if (!(o = op_new(OP_KERNEL)))
        return ncclSystemError;
    o->u.k = (kernel_t){.kind = kind, .dtype = dtype, .root = root, .send = send, .recv = recv,
                        .count = count};
    pthread_mutex_lock(&G);
    if (!(c = comm_work_locked(h, call, &rc, why, sizeof(why))))
        goto bad;
    rc = ncclInvalidArgument;
    if (kind == K_BC && (root < 0 || root >= c->nranks)) {
        snprintf(why, sizeof(why), "%s on '%s': root %d of %d ranks", call, c->name, root,
                 c->nranks);
        goto bad;
    }
    if (coll_op_locked(c, &o->u.k, op, sw, sizeof(sw)) < 0 ||
        coll_args_locked(c, &o->u.k, sw, sizeof(sw)) < 0) {
        snprintf(why, sizeof(why), "%s on '%s' (rank %d): %s", call, c->name, c->rank, sw);
        goto bad;
    }
    if (!(s = stream_of_locked(sh, c->dev, call, &crc, sw, sizeof(sw))) || s->phys != c->phys) {
        if (s)
            snprintf(sw, sizeof(sw), "stream %p is of physical device %d, the communicator's "
                     "is %d", (void *)sh, s->phys, c->phys);
        snprintf(why, sizeof(why), "%s on '%s': %s", call, c->name, sw);
        goto bad;
    }
    if (ctx_sticky[c->phys] != cudaSuccess) {
        pthread_mutex_unlock(&G);
        free(o);
        return ncclUnhandledCudaError;
    }
    if (s->inprog) {
        snprintf(why, sizeof(why), "%s on '%s': stream %p has a collective still in progress",
                 call, c->name, (void *)sh);
        goto bad;
    }
    o->u.k.comm = c;
    o->u.k.nth = ++c->ncalls;
    if ((f = fault_for(c, ",hang,error,exit,delay,", o->u.k.nth)))
        o->u.k.fault = (int)(f - faults) + 1;
    c->kernels++; /* held across the connection wait: an abort frees c only after */
    first_collective_locked(c);
    if (aborted(c) || !stream_live_or_legacy_locked(s)) {
        c->kernels--;
        pthread_cond_broadcast(&G_cv);
        pthread_mutex_unlock(&G);
        free(o);
        return nccl_bad(ncclInvalidArgument, "%s: the communicator was aborted, or the stream "
                        "destroyed, while the call waited for its peers", call);
    }
    if (enqueue_locked(s, o) < 0) {
        c->kernels--;
        pthread_mutex_unlock(&G);
        return ncclSystemError;
    }
    if (!c->blocking) {
        c->pending = 1;
        c->pending_seen = 0;
        c->pending_stream = s;
        s->refs++;
        s->inprog = c;
        pthread_mutex_unlock(&G);
        return ncclInProgress;
    }
    pthread_mutex_unlock(&G);
    return ncclSuccess;
bad:
    pthread_mutex_unlock(&G);
    free(o);
    return nccl_bad(rc, "%s", why);
}

API ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t st_)
{
    return collective(K_AR, s, r, n, (int)t, (int)op, 0, c, st_, "ncclAllReduce");
}

API ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t,
                                   ncclRedOp_t op, ncclComm_t c, cudaStream_t st_)
{
    return collective(K_RS, s, r, n, (int)t, (int)op, 0, c, st_, "ncclReduceScatter");
}

API ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c,
                               cudaStream_t st_)
{
    return collective(K_AG, s, r, n, (int)t, 0, 0, c, st_, "ncclAllGather");
}

API ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root,
                               ncclComm_t c, cudaStream_t st_)
{
    return collective(K_BC, s, r, n, (int)t, 0, root, c, st_, "ncclBroadcast");
}

/* ---- the kernel, on the stream's worker ---- */

/* until c is aborted: a stuck GPU kernel */
static void spin_until_abort(comm_t *c)
{
    for (unsigned i = 0; !aborted(c); i++)
        backoff(i < 1000 ? i : 1000);
}

/* every rank past barrier number ++bar; -1 when aborted first */
static int barrier(comm_t *c)
{
    uint64_t b = ++c->bar;

    __atomic_store_n(&c->slot[c->rank].phase, b, __ATOMIC_RELEASE);
    for (int j = 0; j < c->nranks; j++)
        for (unsigned i = 0; __atomic_load_n(&c->slot[j].phase, __ATOMIC_ACQUIRE) < b; i++) {
            if (aborted(c))
                return -1;
            backoff(i);
        }
    return 0;
}

static void desc_text(const desc_t *d, int rank, char *out, size_t len)
{
    snprintf(out, len, "rank %d %s %llu x %s %s", rank, kind_names[d->kind],
             (unsigned long long)d->count, type_name(d->dtype),
             d->kind == K_AG ? "" : d->kind == K_BC ? "root" : op_name(d->op));
    if (d->kind == K_BC)
        snprintf(out + strlen(out), len - strlen(out), " %d", d->root);
    if (d->kind == K_AG)
        out[strlen(out) - 1] = 0;
}

static int desc_same(const desc_t *a, const desc_t *b)
{
    return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype &&
           (a->kind == K_AG || a->kind == K_BC || a->op == b->op) &&
           (a->kind != K_BC || a->root == b->root);
}

/* the kernel's error: async error set, message kept, then stuck until abort */
static void kernel_fail(comm_t *c, ncclResult_t rc, const char *msg)
{
    pthread_mutex_lock(&G);
    if (c->async == ncclSuccess) {
        c->async = rc;
        scopy(c->lastmsg, sizeof(c->lastmsg), msg);
    }
    if (rc == ncclInvalidUsage)
        violation_locked();
    pthread_mutex_unlock(&G);
    fprintf(stderr, "ddp-gpu-standin: communicator '%s' rank %d: %s\n", c->name, c->rank, msg);
    if (rc == ncclInvalidUsage && opt_abort)
        abort();
    spin_until_abort(c);
}

static unsigned char *win_of(comm_t *c, int r)
{
    return c->win + (size_t)r * WINDOW;
}

/* rounds through the windows: write mine, barrier, read, barrier */
static int move_data(comm_t *c, const kernel_t *k)
{
    size_t es = type_size(k->dtype), n = (size_t)c->nranks;
    size_t per = k->kind == K_RS ? WINDOW / (n * es) : WINDOW / es;
    const unsigned char *send = k->send;
    unsigned char *recv = k->recv;

    for (size_t off = 0; off < k->count; off += per) {
        size_t l = k->count - off < per ? k->count - off : per;
        unsigned char *mine = win_of(c, c->rank);
        if (k->kind == K_RS) {
            for (size_t b = 0; b < n; b++)
                memcpy(mine + b * per * es, send + (b * k->count + off) * es, l * es);
        } else if (k->kind != K_BC || k->root == c->rank) {
            memcpy(mine, send + off * es, l * es);
        }
        if (k->premul)
            for (size_t b = 0; b < (k->kind == K_RS ? n : 1); b++)
                scale(mine + b * per * es, l, k->dtype, k->scalar);
        if (barrier(c) < 0)
            return -1;
        if (k->kind == K_AR || k->kind == K_RS) {
            size_t at = k->kind == K_RS ? (size_t)c->rank * per * es : 0;
            memcpy(recv + off * es, win_of(c, 0) + at, l * es);
            for (int j = 1; j < c->nranks; j++) /* rank order: identical on every rank */
                reduce_into(recv + off * es, win_of(c, j) + at, l, k->dtype,
                            k->premul || k->op == ncclAvg ? ncclSum : k->op);
            if (k->op == ncclAvg && !k->premul)
                average_int(recv + off * es, l, k->dtype, c->nranks);
        } else if (k->kind == K_AG) {
            for (size_t j = 0; j < n; j++)
                memmove(recv + (j * k->count + off) * es, win_of(c, (int)j), l * es);
        } else {
            memmove(recv + off * es, win_of(c, k->root), l * es);
        }
        if (barrier(c) < 0)
            return -1;
    }
    return 0;
}

static int buffers_ok(stream_t *s, comm_t *c, const kernel_t *k)
{
    size_t es = type_size(k->dtype), n = (size_t)c->nranks, sb = k->count * es, rb = sb;
    char why[256];

    if (k->kind == K_RS)
        sb *= n;
    if (k->kind == K_AG)
        rb *= n;
    if (k->kind == K_BC && k->root != c->rank)
        sb = 0;
    if (recheck(k->send, sb, 1, why, sizeof(why)) < 0 ||
        recheck(k->recv, rb, 1, why, sizeof(why)) < 0) {
        illegal(s, kind_names[k->kind], why);
        return -1;
    }
    return 0;
}

static void kernel_body(stream_t *s, comm_t *c, const kernel_t *k)
{
    const struct fault *f = k->fault ? &faults[k->fault - 1] : NULL;
    char a[160], b[160], msg[400];
    desc_t d = {k->nth, k->kind, k->op, k->dtype, k->root, k->count};

    if (f && !strcmp(f->kind, "exit")) {
        fprintf(stderr, "ddp-gpu-standin: injected fault: exit(%d) in collective #%llu of '%s'\n",
                f->arg, (unsigned long long)k->nth, c->name);
        _exit(f->arg);
    }
    if (f && !strcmp(f->kind, "delay"))
        for (double end = now_s() + f->arg / 1e3; now_s() < end && !aborted(c);)
            sleep_ms(1);
    if (f && !strcmp(f->kind, "hang")) {
        spin_until_abort(c);
        return;
    }
    if (f && !strcmp(f->kind, "error")) {
        snprintf(msg, sizeof(msg), "injected fault: error in collective #%llu of '%s' on rank %d",
                 (unsigned long long)k->nth, c->name, my_rank);
        kernel_fail(c, ncclRemoteError, msg);
        return;
    }
    if (buffers_ok(s, c, k) < 0) {
        spin_until_abort(c);
        return;
    }
    c->slot[c->rank].d = d;
    if (barrier(c) < 0)
        return;
    for (int j = 1; j < c->nranks; j++)
        if (!desc_same(&c->slot[0].d, &c->slot[j].d) || c->slot[j].d.seq != c->slot[0].d.seq) {
            desc_text(&c->slot[0].d, 0, a, sizeof(a));
            desc_text(&c->slot[j].d, j, b, sizeof(b));
            snprintf(msg, sizeof(msg), "collective #%llu mismatch: %s vs %s",
                     (unsigned long long)k->nth, a, b);
            kernel_fail(c, ncclInvalidUsage, msg);
            return;
        }
    if (move_data(c, k) < 0)
        return;
    barrier(c);
}

/* two communicators' kernels on one device at once (different streams) */
static comm_t *running[MAXDEV][16];
static stream_t *running_on[MAXDEV][16];

static void overlap_begin_locked(stream_t *s, comm_t *c)
{
    comm_t *other = NULL;
    int free_slot = -1;

    for (int i = 0; i < 16; i++) {
        if (!running[s->phys][i])
            free_slot = free_slot < 0 ? i : free_slot;
        else if (running[s->phys][i] != c && running_on[s->phys][i] != s)
            other = running[s->phys][i];
    }
    if (free_slot >= 0) {
        running[s->phys][free_slot] = c;
        running_on[s->phys][free_slot] = s;
    }
    if (!other || order_implicit > 0)
        return;
    st.cross_comm_overlaps++;
    if (!overlap_warned || opt_abort) {
        overlap_warned = 1;
        fprintf(stderr, "ddp-gpu-standin: kernels of communicators %s and %s overlap on device %d "
                "without NCCL_LAUNCH_ORDER_IMPLICIT=1: may deadlock on a GPU\n", other->name,
                c->name, s->dev);
        if (opt_abort)
            abort();
    }
}

static void overlap_end_locked(stream_t *s, comm_t *c)
{
    for (int i = 0; i < 16; i++)
        if (running[s->phys][i] == c && running_on[s->phys][i] == s) {
            running[s->phys][i] = NULL;
            running_on[s->phys][i] = NULL;
            return;
        }
}

static void run_kernel(stream_t *s, kernel_t *k)
{
    comm_t *c = k->comm;

    pthread_mutex_lock(&G);
    /* NCCL runs one communicator's work in issue order, whatever the streams */
    while (c->exec_done + 1 < k->nth && !aborted(c))
        g_wait();
    overlap_begin_locked(s, c);
    pthread_mutex_unlock(&G);
    if (!aborted(c))
        kernel_body(s, c, k);
    pthread_mutex_lock(&G);
    overlap_end_locked(s, c);
    if (c->exec_done < k->nth)
        c->exec_done = k->nth;
    c->kernels--;
    pthread_cond_broadcast(&G_cv);
    pthread_mutex_unlock(&G);
}

/* ---- the end of a communicator ---- */

/* after its flag: the last kernel executed, then the cleanup holding the
 * device's context lock (every CUDA call on that device waits), then free */
static void abort_finish(comm_t *c)
{
    const struct fault *f = fault_for(c, ",abortslow,", 0);
    int phys = c->phys;

    pthread_mutex_lock(&G);
    while (c->kernels > 0)
        g_wait();
    pending_stream_clear_locked(c);
    ctx_cleanup[phys]++;
    pthread_mutex_unlock(&G);
    if (f)
        sleep_ms(f->arg);
    comm_free(c);
    pthread_mutex_lock(&G);
    ctx_cleanup[phys]--;
    pthread_cond_broadcast(&G_cv);
    pthread_mutex_unlock(&G);
}

API ncclResult_t ncclCommAbort(ncclComm_t h)
{
    comm_t *c = (comm_t *)h;

    NCCL_READY();
    if (!h)
        return ncclSuccess;
    pthread_mutex_lock(&G);
    if (!comm_live_locked(c)) {
        pthread_mutex_unlock(&G);
        return nccl_bad(ncclInvalidArgument, "ncclCommAbort(%p): not a live communicator "
                        "(aborted or destroyed already?)", (void *)h);
    }
    comm_unlist_locked(c); /* the handle is dead from now on */
    st.aborts++;
    __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&G_cv);
    if (t_group) {
        if (t_ndeferred < 64) {
            t_deferred[t_ndeferred++] = c;
            pthread_mutex_unlock(&G);
            return ncclSuccess;
        }
    }
    pthread_mutex_unlock(&G);
    abort_finish(c);
    return ncclSuccess;
}

API ncclResult_t ncclCommFinalize(ncclComm_t h)
{
    char why[300];
    ncclResult_t rc;
    comm_t *c;

    NCCL_READY();
    pthread_mutex_lock(&G);
    if (!(c = comm_use_locked(h, "ncclCommFinalize", &rc, why, sizeof(why)))) {
        pthread_mutex_unlock(&G);
        return nccl_bad(rc, "%s", why);
    }
    if (c->finalizing) {
        pthread_mutex_unlock(&G);
        return nccl_bad(ncclInvalidUsage, "ncclCommFinalize on '%s': finalized already",
                        c->name);
    }
    if (!c->blocking) {
        c->finalizing = c->kernels ? 1 : 2;
        pthread_mutex_unlock(&G);
        return c->finalizing == 1 ? ncclInProgress : ncclSuccess;
    }
    while (c->kernels > 0)
        g_wait();
    c->finalizing = 2;
    pthread_mutex_unlock(&G);
    return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(ncclComm_t h)
{
    char why[300];
    ncclResult_t rc;
    comm_t *c;

    NCCL_READY();
    if (!h)
        return ncclSuccess;
    pthread_mutex_lock(&G);
    if (!(c = comm_use_locked(h, "ncclCommDestroy", &rc, why, sizeof(why))) &&
        !(comm_live_locked((comm_t *)h) && ((comm_t *)h)->state == 2)) {
        pthread_mutex_unlock(&G);
        return nccl_bad(rc, "%s", why);
    }
    c = (comm_t *)h;
    comm_unlist_locked(c);
    while (c->kernels > 0) /* its work first, however long it takes */
        g_wait();
    pthread_mutex_unlock(&G);
    comm_free(c);
    return ncclSuccess;
}

API ncclResult_t ncclGroupStart(void)
{
    NCCL_READY();
    t_group++;
    return ncclSuccess;
}

/* the deferred aborts: every flag is set already, so none waits on another */
API ncclResult_t ncclGroupEnd(void)
{
    NCCL_READY();
    if (t_group == 0)
        return nccl_bad(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--t_group > 0)
        return ncclSuccess;
    for (int i = 0; i < t_ndeferred; i++)
        abort_finish(t_deferred[i]);
    t_ndeferred = 0;
    return ncclSuccess;
}

/* At exit, the segments of this process's communicators that never
 * completed (a peer never came): nobody else would unlink them, and
 * /dev/shm must not fill up with them. A killed process cannot do this. */
__attribute__((destructor)) static void seg_orphans(void)
{
    if (!init_ok)
        return;
    pthread_mutex_lock(&G);
    for (size_t i = 0; i < ncomms; i++) {
        comm_t *c = comms[i];
        if (c->map && !c->unlinked &&
            (int)__atomic_load_n(&c->hdr->njoined, __ATOMIC_ACQUIRE) < c->nranks) {
            shm_unlink(c->shm_name);
            c->unlinked = 1;
        }
    }
    pthread_mutex_unlock(&G);
}

/* ---- accounting ---- */

API int ddp_standin_stats(struct ddp_standin_stats *out)
{
    if (!ready() || !out)
        return -1;
    pthread_mutex_lock(&G);
    *out = st;
    pthread_mutex_unlock(&G);
    return 0;
}

/* DDP_GPU_STANDIN_REPORT=FILE: one line per process, one write */
__attribute__((destructor)) static void report(void)
{
    char line[1024], devs[512] = "";
    struct ddp_standin_stats s;
    long redo;
    int fd;

    if (!init_ok || !opt_report || !*opt_report)
        return;
    pthread_mutex_lock(&G);
    s = st;
    redo = live_redops;
    pthread_mutex_unlock(&G);
    for (int d = 0; d < MAXDEV; d++)
        if (s.contexts[d])
            snprintf(devs + strlen(devs), sizeof(devs) - strlen(devs), " dev%d=1", d);
    snprintf(line, sizeof(line), "ddp-gpu-standin: pid %d rank %d: leaked streams=%ld events=%ld "
             "comms=%ld allocs=%ld host_allocs=%ld redops=%ld; contexts%s; connect_waits=%ld "
             "cross_comm_overlaps=%ld violations=%ld aborts=%ld\n", (int)getpid(), my_rank,
             s.live_streams, s.live_events, s.live_comms, s.live_allocs, s.live_host_allocs, redo,
             devs, s.connect_waits, s.cross_comm_overlaps, s.violations, s.aborts);
    if ((fd = open(opt_report, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) >= 0) {
        if (write(fd, line, strlen(line)) < 0) {
            /* nothing to do: the test reading the file says it is missing */
        }
        close(fd);
    }
}
