/* SPDX-License-Identifier: Apache-2.0 */
/* The collectives on host buffers: the front end that stages the caller's
 * data for the algorithms (alignment, 16-bit floats widened to float32)
 * and runs them on the CPU set (cpu.c, algo.c, auto.c). */
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

/* Each collective's frame: the flight recorder's entry and the metrics' count. */
static void enter(drt_comm_t *c, trace_op_t op, size_t count, int dtype)
{
    trace_enter(c, op, count, dtype);
    if (c->metrics)
        metrics_enter(c, op, count, dtype);
}

static int leave(drt_comm_t *c, int rc, const drt_error_t *err)
{
    if (c->metrics)
        metrics_leave(c, rc);
    return trace_leave(c, rc, err);
}

/* Once a rank is known gone, a collective could only wait for it (or for
 * survivors already in drt_shrink): each fails at once until drt_shrink. */
static int broken(drt_comm_t *c, drt_error_t *err)
{
    char where[64];
    int r;

    if (!__atomic_load_n(&c->nlost, __ATOMIC_ACQUIRE))
        return 0;
    r = drt_lost_rank(c, 0);
    return rt_fail(err, "rank %d (%s) is gone: collective #%llu not run (drt_shrink rebuilds the "
                   "world over the survivors)", r, rt_where(c, r, where, sizeof(where)),
                   (unsigned long long)c->seq + 1);
}

/* The working buffer: recv itself when aligned for the type, else a copy. */
int coll_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                   drt_op_t op, drt_error_t *err)
{
    size_t esize = drt_dtype_size(t);
    unsigned char *work = recv;
    int read_send, rc;
    coll_args_t x;

    if (!esize)
        return rt_fail(err, "allreduce: unknown data type %d", (int)t);
    if (broken(c, err))
        return -1;
    if (((uintptr_t)recv % esize) != 0) {
        if (!(work = aligned_alloc(64, ((count * esize) / 64 + 1) * 64)))
            return rt_fail(err, "out of memory for %zu elements", count);
    }
    enter(c, TRACE_ALLREDUCE, count, (int)t);
    /* out of place into recv itself: the algorithms read send directly when
     * it is aligned too (reductions load elements from it) */
    read_send = work == (unsigned char *)recv && work != send && (uintptr_t)send % esize == 0;
    if (work != send && !read_send)
        memmove(work, send, count * esize);
    x = (coll_args_t){work, read_send ? send : NULL, count, esize, t, op, c->size};
    rc = c->algo == DRT_ALGO_AUTO ? auto_allreduce(&c->cpu, &x, err)
                                  : algo_run(&c->cpu, c->algo, &x, err);
    if (rc == 0 && work != (unsigned char *)recv)
        memcpy(recv, work, count * esize);
    if (work != (unsigned char *)recv)
        free(work);
    return leave(c, rc, err);
}

int coll_broadcast(drt_comm_t *c, void *buf, size_t bytes, int root, drt_error_t *err)
{
    const group_t *g = &c->world;
    int pos = 0;

    if (root < 0 || root >= c->size)
        return rt_fail(err, "broadcast: root %d is not a rank (0-%d)", root, c->size - 1);
    if (broken(c, err))
        return -1;
    for (int i = 0; i < g->n; i++)
        pos = g->ranks[i] == root ? i : pos;
    enter(c, TRACE_BROADCAST, bytes, TRACE_BYTES);
    return leave(c, g->ops->broadcast(&c->cpu, g, buf, bytes, pos, err), err);
}

int coll_allgather(drt_comm_t *c, const void *send, void *recv, size_t bytes, drt_error_t *err)
{
    span_t *s = calloc((size_t)c->size, sizeof(span_t));
    int rc;

    if (!s || broken(c, err)) {
        free(s);
        return s ? -1 : rt_fail(err, "out of memory");
    }
    for (int i = 0; i < c->world.n; i++)
        s[i] = (span_t){(size_t)c->world.ranks[i] * bytes, bytes};
    enter(c, TRACE_ALLGATHER, bytes, TRACE_BYTES);
    memmove((unsigned char *)recv + (size_t)c->rank * bytes, send, bytes);
    rc = c->world.ops->allgather(&c->cpu, &c->world, recv, s, 1, err);
    free(s);
    return leave(c, rc, err);
}

int coll_reduce_scatter(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    size_t esize = drt_dtype_size(t), total = count * (size_t)c->size;
    span_t *s = calloc((size_t)c->size, sizeof(span_t));
    unsigned char *work = aligned_alloc(64, ((total * esize) / 64 + 1) * 64);
    coll_args_t x = {work, NULL, total, esize, t, op, c->size};
    int rc;

    if (!s || !work || !esize || broken(c, err)) {
        free(s);
        free(work);
        return s && work && esize ? -1 : rt_fail(err, esize ? "out of memory"
                                                  : "reduce_scatter: unknown data type");
    }
    memcpy(work, send, total * esize);
    for (int i = 0; i < c->world.n; i++)
        s[i] = (span_t){(size_t)c->world.ranks[i] * count * esize, count};
    enter(c, TRACE_REDUCE_SCATTER, count, (int)t);
    rc = c->world.ops->reduce_scatter(&c->cpu, &c->world, &x, s, err);
    if (rc == 0)
        memcpy(recv, work + (size_t)c->rank * count * esize, count * esize);
    free(s);
    free(work);
    return leave(c, rc, err);
}

int coll_barrier(drt_comm_t *c, drt_error_t *err)
{
    if (broken(c, err))
        return -1;
    enter(c, TRACE_BARRIER, 0, TRACE_BYTES);
    return leave(c, cpu_fence(c, err), err);
}
