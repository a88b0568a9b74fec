/* SPDX-License-Identifier: Apache-2.0 */
/* The flight recorder (DDPRT_TRACE_DIR): every rank keeps its last
 * TRACE_N collectives on host buffers in a ring and writes it to
 * DIR/ddprt-trace.RANK when a collective fails (a timeout, a lost rank, a
 * broken connection) or when the process gets DRT_TRACE_SIGNAL. A hang
 * then leaves each rank's view, and `ddp-topo trace DIR` puts the views
 * side by side (the format: contract.h).
 *
 * The collective's thread writes its slot; a dump may read the ring from
 * the signal's thread meanwhile. Each field is an atomic word and the slot's
 * sequence number is read before and after: a slot overwritten during the
 * read is left out, never printed torn. */
#define _GNU_SOURCE /* mkostemp */
#include "../internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TRACE_N 1024 /* entries per communicator: 40 KiB */
#define MAX_COMMS 8  /* communicators a signal dumps */

typedef struct {
    uint64_t seq;      /* 0: never used */
    uint64_t count;    /* elements (bytes for broadcast and allgather) */
    uint64_t meta;     /* op | dtype << 8 | algo << 16 | state << 24 */
    uint64_t start_us; /* wall clock, so that ranks on other nodes compare */
    uint64_t end_us;   /* 0 while in it */
} entry_t;

struct trace {
    entry_t ring[TRACE_N];
    char dir[4096];
    pthread_mutex_t dump_lock; /* the signal's thread and a failing collective */
};

enum { ST_ENTERED = 1, ST_DONE, ST_FAILED };
static const char *const op_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                       "barrier"};
static const char *const dtype_names[] = {"float32", "float64", "bfloat16", "float16", "int32",
                                          "int64", "bytes"};
static const char *const state_names[] = {"?", DRT_TRACE_ENTERED, DRT_TRACE_DONE,
                                          DRT_TRACE_FAILED};

/* the signal's side: a self-pipe read by one thread per process */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static drt_comm_t *registered[MAX_COMMS];
static int sig_pipe[2] = {-1, -1};

static uint64_t wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void put(uint64_t *w, uint64_t v)
{
    __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

static uint64_t get(const uint64_t *w)
{
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

void trace_enter(drt_comm_t *c, trace_op_t op, size_t count, int dtype)
{
    entry_t *e;

    c->seq++;
    if (!c->trace)
        return;
    e = &c->trace->ring[c->seq % TRACE_N];
    put(&e->meta, 0); /* a reader skips it until it is whole */
    put(&e->seq, c->seq);
    put(&e->count, count);
    put(&e->start_us, wall_us());
    put(&e->end_us, 0);
    put(&e->meta, (uint64_t)op | (uint64_t)dtype << 8 | (uint64_t)c->algo << 16 |
                  (uint64_t)ST_ENTERED << 24);
}

int trace_leave(drt_comm_t *c, int rc, const drt_error_t *err)
{
    entry_t *e;
    uint64_t m;

    if (!c->trace)
        return rc;
    e = &c->trace->ring[c->seq % TRACE_N];
    m = get(&e->meta) & 0xffff; /* op and dtype; the algorithm that ran, and the state */
    if (m % 256 == TRACE_ALLREDUCE)
        m |= (uint64_t)c->cpu.last << 16;
    put(&e->end_us, wall_us());
    put(&e->meta, m | (uint64_t)(rc < 0 ? ST_FAILED : ST_DONE) << 24);
    if (rc < 0)
        trace_dump(c, err->text);
    return rc;
}

static void write_entry(FILE *f, const entry_t *e)
{
    uint64_t seq = get(&e->seq), m = get(&e->meta), count = get(&e->count);
    uint64_t start = get(&e->start_us), end = get(&e->end_us);
    unsigned op = m & 255, dt = (m >> 8) & 255, algo = (m >> 16) & 255, st = (m >> 24) & 255;

    if (!seq || !st || st > ST_FAILED || get(&e->seq) != seq || op >= 5 || dt >= 7)
        return; /* empty, being written, or overwritten meanwhile */
    fprintf(f, "c %llu %s %llu %s %s %s %llu.%06llu %llu.%06llu\n", (unsigned long long)seq,
            op_names[op], (unsigned long long)count, dtype_names[dt],
            op == TRACE_ALLREDUCE ? drt_algo_name((drt_algo_t)algo) : "-", state_names[st],
            (unsigned long long)(start / 1000000), (unsigned long long)(start % 1000000),
            (unsigned long long)(end / 1000000), (unsigned long long)(end % 1000000));
}

static void write_dump(const drt_comm_t *c, FILE *f, const char *reason)
{
    const char *run = getenv(DRT_ENV_RUN_ID);
    uint64_t now = wall_us(), last = 0;
    char one_line[512];

    for (int i = 0; i < TRACE_N; i++) /* not c->seq: the collective's thread moves it */
        if (get(&c->trace->ring[i].seq) > last)
            last = get(&c->trace->ring[i].seq);
    snprintf(one_line, sizeof(one_line), "%s", reason);
    one_line[strcspn(one_line, "\n")] = 0;
    fprintf(f, "%s\nrank %d size %d epoch %u run %s pid %ld time %llu.%06llu\nreason %s\n",
            DRT_TRACE_MAGIC, c->rank, c->size, c->epoch, run && *run && !strpbrk(run, " \n")
            ? run : "-", (long)getpid(), (unsigned long long)(now / 1000000),
            (unsigned long long)(now % 1000000), one_line);
    for (int r = 0; r < c->size; r++)
        fprintf(f, "node %d %s\n", r, c->names[r][0] ? c->names[r] : "-");
    for (uint64_t s = last >= TRACE_N ? last - TRACE_N + 1 : 1; s <= last; s++)
        write_entry(f, &c->trace->ring[s % TRACE_N]);
}

/* DIR/ddprt-trace.RANK, replaced whole (a temporary file, then rename) */
void trace_dump(drt_comm_t *c, const char *reason)
{
    struct trace *t = c->trace;
    char tmp[4200], path[4200];
    FILE *f;
    int fd, ok;

    if (!t)
        return;
    pthread_mutex_lock(&t->dump_lock);
    snprintf(path, sizeof(path), "%s/%s%d", t->dir, DRT_TRACE_FILE, c->rank);
    snprintf(tmp, sizeof(tmp), "%s/.%s%d.XXXXXX", t->dir, DRT_TRACE_FILE, c->rank);
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0 || !(f = fdopen(fd, "w"))) {
        rt_warn(c, "trace: cannot write in DDPRT_TRACE_DIR %s: %s (make it, writable by the "
                "job's user)", t->dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        pthread_mutex_unlock(&t->dump_lock);
        return;
    }
    write_dump(c, f, reason);
    ok = fflush(f) == 0 && !ferror(f);
    if (fclose(f) != 0 || !ok || rename(tmp, path) < 0) {
        rt_warn(c, "trace: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    } else {
        rt_log(c, "trace: wrote %s (%s)", path, reason);
    }
    pthread_mutex_unlock(&t->dump_lock);
}

static void on_signal(int sig)
{
    int saved = errno;
    char b = 1;

    (void)sig;
    ssize_t n = write(sig_pipe[1], &b, 1); /* a full pipe: a dump is due anyway */
    (void)n;
    errno = saved;
}

static void *sig_thread(void *arg)
{
    char b;

    (void)arg;
    while (read(sig_pipe[0], &b, 1) == 1 || errno == EINTR) {
        pthread_mutex_lock(&reg_lock);
        for (int i = 0; i < MAX_COMMS; i++)
            if (registered[i])
                trace_dump(registered[i], "signal " DRT_TRACE_SIGNAL_NAME " (a dump was asked for)");
        pthread_mutex_unlock(&reg_lock);
    }
    return NULL;
}

/* Once per process: the handler, unless the program has its own. */
static void sig_setup(const drt_comm_t *c)
{
    struct sigaction sa, old;
    pthread_t th;

    if (sig_pipe[0] >= 0)
        return;
    if (sigaction(DRT_TRACE_SIGNAL, NULL, &old) == 0 && old.sa_handler != SIG_DFL &&
        old.sa_handler != SIG_IGN) {
        rt_log(c, "trace: the program handles SIG" DRT_TRACE_SIGNAL_NAME " itself: no dump on "
               "that signal");
        sig_pipe[0] = sig_pipe[1] = -2;
        return;
    }
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return;
    fcntl(sig_pipe[0], F_SETFL, 0); /* the thread blocks; the handler never does */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (pthread_create(&th, NULL, sig_thread, NULL) != 0)
        return;
    pthread_detach(th);
    sigaction(DRT_TRACE_SIGNAL, &sa, NULL);
}

int trace_open(drt_comm_t *c, drt_error_t *err)
{
    const char *dir = getenv(DRT_ENV_TRACE_DIR);
    struct stat st;
    int slot = -1;

    if (!dir || !*dir)
        return 0;
    if (strlen(dir) >= sizeof(c->trace->dir))
        return rt_fail(err, "DDPRT_TRACE_DIR is longer than %zu bytes", sizeof(c->trace->dir) - 1);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return rt_fail(err, "DDPRT_TRACE_DIR %s: %s (give a directory the job can write)", dir,
                       strerror(errno));
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return rt_fail(err, "DDPRT_TRACE_DIR %s: not a directory", dir);
    if (!(c->trace = calloc(1, sizeof(*c->trace))))
        return rt_fail(err, "out of memory for the trace ring");
    snprintf(c->trace->dir, sizeof(c->trace->dir), "%s", dir);
    pthread_mutex_init(&c->trace->dump_lock, NULL);
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_COMMS && slot < 0; i++)
        if (!registered[i])
            registered[slot = i] = c;
    sig_setup(c);
    pthread_mutex_unlock(&reg_lock);
    if (slot < 0)
        rt_log(c, "trace: more than %d communicators: this one dumps on failures only", MAX_COMMS);
    return 0;
}

void trace_close(drt_comm_t *c)
{
    if (!c->trace)
        return;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < MAX_COMMS; i++)
        if (registered[i] == c)
            registered[i] = NULL;
    pthread_mutex_unlock(&reg_lock);
    pthread_mutex_destroy(&c->trace->dump_lock);
    free(c->trace);
    c->trace = NULL;
}
