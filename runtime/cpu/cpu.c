/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU backend: ring collectives over each group's channels (shared
 * memory within a node, TCP between nodes) on host buffers, and what the
 * algorithms need of host memory: scratch buffers, fences, a clock, and a
 * thread as the pipelined hier's second lane.
 *
 * Rings: position i of a group ends a reduce-scatter owning span i. With
 * src (out of place), the input is read from src and buf is written only:
 * each span is reduced exactly once by each position, the first time buf is
 * touched there, and the one span never reduced here is sent from src and
 * later overwritten by the allgather. */
#include "../internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_MIN_SEGMENT (1u << 20) /* below this the hier phases run one after another */

static int next_of(const group_t *g)
{
    return g->ranks[(g->me + 1) % g->n];
}

static int prev_of(const group_t *g)
{
    return g->ranks[(g->me + g->n - 1) % g->n];
}

/* DRT_AVG: the span this position owns, divided once */
static void scale_own(const group_t *g, const coll_args_t *x, const span_t *sp)
{
    if (x->op == DRT_AVG && x->avg_n > 0)
        rt_scale_avg(x->buf + sp[g->me].off, sp[g->me].count, x->t, x->avg_n);
}

static int ring_reduce_scatter(coll_set_t *set, const group_t *g, const coll_args_t *x,
                               const span_t *sp, drt_error_t *err)
{
    const unsigned char *src = x->src;
    unsigned char *buf = x->buf;
    size_t esize = x->esize;
    int n = g->n;

    if (n < 2 && src)
        memcpy(buf + sp[0].off, src + sp[0].off, sp[0].count * esize);
    for (int step = 0; step < n - 1; step++) {
        int send = ((g->me - step - 1) % n + n) % n, recv = ((g->me - step - 2) % n + n) % n;
        const unsigned char *from = step == 0 && src ? src : buf;
        if (xfer_reduce(set->c, next_of(g), from + sp[send].off, sp[send].count * esize,
                        prev_of(g), buf + sp[recv].off, src ? src + sp[recv].off : NULL,
                        sp[recv].count, x->t, x->op, err) < 0)
            return -1;
    }
    scale_own(g, x, sp);
    return 0;
}

static int ring_allgather(coll_set_t *set, const group_t *g, unsigned char *buf,
                          const span_t *sp, size_t esize, drt_error_t *err)
{
    int n = g->n;

    for (int step = 0; step < n - 1; step++) {
        int send = ((g->me - step) % n + n) % n, recv = ((g->me - step - 1) % n + n) % n;
        if (xfer(set->c, next_of(g), buf + sp[send].off, sp[send].count * esize, prev_of(g),
                 buf + sp[recv].off, sp[recv].count * esize, err) < 0)
            return -1;
    }
    return 0;
}

static int ring_allreduce(coll_set_t *set, const group_t *g, const coll_args_t *x, size_t off,
                          drt_error_t *err)
{
    span_t one, *sp = g->n < 2 ? &one : calloc((size_t)g->n, sizeof(span_t));
    int rc;

    if (!sp)
        return rt_fail(err, "out of memory");
    algo_balanced(sp, g->n, off, x->count, x->esize);
    rc = ring_reduce_scatter(set, g, x, sp, err) < 0 ? -1
                                                       : ring_allgather(set, g, x->buf, sp,
                                                                        x->esize, err);
    if (sp != &one)
        free(sp);
    return rc;
}

/* A chain from the root around the ring, pipelined: each position passes
 * segment k-1 on while segment k arrives. */
static int ring_broadcast(coll_set_t *set, const group_t *g, void *buf, size_t bytes, int root,
                          drt_error_t *err)
{
    const size_t seg = 1 << 20;
    size_t nseg = (bytes + seg - 1) / seg;
    int r = (g->me - root + g->n) % g->n;

    for (size_t k = 0; k <= nseg && g->n > 1; k++) {
        size_t so = (k - 1) * seg, ro = k * seg;
        int sending = k >= 1 && r < g->n - 1, receiving = k < nseg && r > 0;
        if (xfer(set->c, sending ? next_of(g) : -1, (unsigned char *)buf + so,
                 sending ? (bytes - so < seg ? bytes - so : seg) : 0, receiving ? prev_of(g) : -1,
                 (unsigned char *)buf + ro, receiving ? (bytes - ro < seg ? bytes - ro : seg) : 0,
                 err) < 0)
            return -1;
    }
    return 0;
}

static const group_ops_t ring_ops = {"cpu", ring_reduce_scatter, ring_allgather, ring_allreduce,
                                     ring_broadcast};

/* ---- host memory, fences and the clock ---- */

static void *host_alloc(coll_set_t *set, size_t bytes, drt_error_t *err)
{
    void *p = aligned_alloc(64, (bytes / 64 + 1) * 64);

    (void)set;
    if (!p)
        rt_fail(err, "out of memory for %zu bytes", bytes);
    return p;
}

static void host_release(coll_set_t *set, void *p)
{
    (void)set;
    free(p);
}

static int host_copy(coll_set_t *set, void *dst, const void *src, size_t bytes, drt_error_t *err)
{
    (void)set;
    (void)err;
    memcpy(dst, src, bytes);
    return 0;
}

static int host_fence(coll_set_t *set, drt_error_t *err)
{
    return cpu_fence(set->c, err);
}

/* The pipeline's side lane: a thread running queued phases in order. A
 * failure on either lane stops the other (c->abort ends its transfers);
 * the first failure is the cause. */
typedef struct {
    int (*fn)(coll_set_t *, void *, drt_error_t *);
    void *arg;
} job_t;

typedef struct {
    double t0; /* the running timer */
    pthread_t thread;
    pthread_mutex_t m;
    pthread_cond_t cv;
    job_t jobs[PIPE_MAX_SEGMENTS];
    int queued, done, closing, failed; /* failed: 1 lane 0, 2 the side lane */
    drt_error_t side_err;
} cpu_state_t;

static int host_timer_start(coll_set_t *set, drt_error_t *err)
{
    (void)err;
    ((cpu_state_t *)set->impl)->t0 = rt_now();
    return 0;
}

static int host_timer_stop(coll_set_t *set, double *seconds, drt_error_t *err)
{
    (void)err;
    *seconds = rt_now() - ((cpu_state_t *)set->impl)->t0;
    return 0;
}

static void lane_failed(coll_set_t *set, cpu_state_t *st, int who)
{
    st->failed = st->failed ? st->failed : who;
    __atomic_store_n(&set->c->abort, 1, __ATOMIC_RELEASE);
}

static void *side_main(void *arg)
{
    coll_set_t *set = arg;
    cpu_state_t *st = set->impl;

    pthread_mutex_lock(&st->m);
    for (;;) {
        job_t job;
        while (st->done == st->queued && !st->closing && !st->failed)
            pthread_cond_wait(&st->cv, &st->m);
        if (st->failed || st->done == st->queued)
            break;
        job = st->jobs[st->done];
        pthread_mutex_unlock(&st->m);
        int rc = job.fn(set, job.arg, &st->side_err);
        pthread_mutex_lock(&st->m);
        if (rc < 0)
            lane_failed(set, st, 2);
        else
            st->done++;
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->m);
    return NULL;
}

static int lane_open(coll_set_t *set, drt_error_t *err)
{
    cpu_state_t *st = set->impl;

    st->queued = st->done = st->closing = st->failed = 0;
    set->c->abort = 0;
    if (pthread_create(&st->thread, NULL, side_main, set) != 0)
        return rt_fail(err, "cannot start the pipeline thread");
    return 0;
}

static int lane_side(coll_set_t *set, int (*fn)(coll_set_t *, void *, drt_error_t *), void *arg,
                     drt_error_t *err)
{
    cpu_state_t *st = set->impl;
    int rc = 0;

    pthread_mutex_lock(&st->m);
    if (st->failed || st->queued == PIPE_MAX_SEGMENTS)
        rc = st->failed ? -1 : rt_fail(err, "pipeline: more than %d segments", PIPE_MAX_SEGMENTS);
    else
        st->jobs[st->queued++] = (job_t){fn, arg};
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->m);
    return rc;
}

static int lane_join(coll_set_t *set, int k, drt_error_t *err)
{
    cpu_state_t *st = set->impl;
    int rc;

    (void)err; /* a side failure's message comes from close */
    pthread_mutex_lock(&st->m);
    while (st->done <= k && !st->failed)
        pthread_cond_wait(&st->cv, &st->m);
    rc = st->failed ? -1 : 0;
    pthread_mutex_unlock(&st->m);
    return rc;
}

static int lane_close(coll_set_t *set, int failed, drt_error_t *err)
{
    cpu_state_t *st = set->impl;
    int rc;

    pthread_mutex_lock(&st->m);
    if (failed)
        lane_failed(set, st, 1);
    st->closing = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->m);
    pthread_join(st->thread, NULL);
    rc = st->failed ? -1 : 0;
    if (st->failed == 2) /* the side lane failed first: its error is the cause */
        *err = st->side_err;
    set->c->abort = 0;
    return rc;
}

static const lane_ops_t thread_lanes = {lane_open, lane_side, lane_join, lane_close};

static const set_ops_t host_ops = {host_alloc, host_release, host_copy, host_fence,
                                   host_timer_start, host_timer_stop, &thread_lanes};

int cpu_set_init(drt_comm_t *c)
{
    cpu_state_t *st = calloc(1, sizeof(*st));
    group_t *g[] = {&c->world, &c->node, &c->rail};

    if (!st)
        return -1;
    pthread_mutex_init(&st->m, NULL);
    pthread_cond_init(&st->cv, NULL);
    for (int i = 0; i < 3; i++)
        g[i]->ops = &ring_ops;
    c->cpu = (coll_set_t){.c = c, .world = &c->world, .node = &c->node, .rail = &c->rail,
                          .ops = &host_ops, .uniform = c->uniform, .nnodes = c->nnodes,
                          .pipe_min = PIPE_MIN_SEGMENT, .impl = st};
    for (int i = 0; i < 64; i++)
        c->cpu.sizes[i].choice = -1;
    return 0;
}

void cpu_set_free(drt_comm_t *c)
{
    cpu_state_t *st = c->cpu.impl;

    if (!st)
        return;
    pthread_mutex_destroy(&st->m);
    pthread_cond_destroy(&st->cv);
    free(st);
    c->cpu.impl = NULL;
}

int cpu_fence(drt_comm_t *c, drt_error_t *err)
{
    int32_t one = 1;
    coll_args_t x = {(unsigned char *)&one, NULL, 1, sizeof(one), DRT_INT32, DRT_SUM, 0};

    return ring_allreduce(&c->cpu, &c->world, &x, 0, err);
}

int cpu_agree_max(drt_comm_t *c, double *v, size_t n, drt_error_t *err)
{
    coll_args_t x = {(unsigned char *)v, NULL, n, sizeof(double), DRT_FLOAT64, DRT_MAX, 0};

    return ring_allreduce(&c->cpu, &c->world, &x, 0, err);
}
