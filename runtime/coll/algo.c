/* SPDX-License-Identifier: Apache-2.0 */
/* The allreduce algorithms, written once over a set's group backends:
 *   flat: the world group's allreduce (the CPU ring: reduce-scatter +
 *         allgather, bandwidth-optimal);
 *   hier: node reduce-scatter, rail allreduce of each rank's span, node
 *         allgather (needs the same number of ranks on every node);
 *   pipelined hier: large messages cut into segments, the rail phase of
 *         segment k on the set's side lane while lane 0 runs the node phases,
 *         so a large message pays roughly the slowest phase, not the sum.
 * auto (auto.c) chooses between flat and hier from timed runs. */
#include "../internal.h"

#include <stdlib.h>

void algo_balanced(span_t *sp, int n, size_t base_off, size_t count, size_t esize)
{
    size_t off = base_off;

    for (int i = 0; i < n; i++) {
        sp[i].count = count / (size_t)n + ((size_t)i < count % (size_t)n);
        sp[i].off = off;
        off += sp[i].count * esize;
    }
}

static int flat(coll_set_t *s, const coll_args_t *x, drt_error_t *err)
{
    return s->world->ops->allreduce(s, s->world, x, 0, err);
}

/* The node phases sum; the rail phase applies the operation, so an
 * average is divided exactly once. */
static coll_args_t node_args(const coll_args_t *x)
{
    coll_args_t sum = *x;

    sum.op = x->op == DRT_AVG ? DRT_SUM : x->op;
    return sum;
}

/* The rail allreduce of this rank's span of the node reduce-scatter. */
static int rail_span(coll_set_t *s, const coll_args_t *x, const span_t *mine, drt_error_t *err)
{
    coll_args_t r = *x;

    r.src = NULL; /* the node phase left the input in buf */
    r.count = mine->count;
    return s->rail->ops->allreduce(s, s->rail, &r, mine->off, err);
}

static int hier_once(coll_set_t *s, const coll_args_t *x, drt_error_t *err)
{
    const group_t *node = s->node;
    span_t *sp = calloc((size_t)node->n, sizeof(span_t));
    coll_args_t sum = node_args(x);
    int rc = -1;

    if (!sp)
        return rt_fail(err, "out of memory");
    algo_balanced(sp, node->n, 0, x->count, x->esize);
    if (node->ops->reduce_scatter(s, node, &sum, sp, err) == 0 &&
        rail_span(s, x, &sp[node->me], err) == 0 &&
        node->ops->allgather(s, node, x->buf, sp, x->esize, err) == 0)
        rc = 0;
    free(sp);
    return rc;
}

/* Segment k's rail phase, queued on the side lane. */
typedef struct {
    const coll_args_t *x;
    const span_t *mine;
} rail_job_t;

static int rail_job(coll_set_t *s, void *arg, drt_error_t *err)
{
    const rail_job_t *j = arg;

    return rail_span(s, j->x, j->mine, err);
}

typedef struct {
    int nseg;
    span_t *node;    /* nseg x node size spans: segment k's node spans */
    rail_job_t *jobs;
} pipe_plan_t;

/* nseg segments of whole units (a unit: the node size when spans must be
 * equal), each split over the node */
static int pipe_plan(coll_set_t *s, const coll_args_t *x, size_t unit, pipe_plan_t *p,
                     drt_error_t *err)
{
    size_t bytes = x->count * x->esize, nseg = bytes / s->pipe_min, L = (size_t)s->node->n;
    span_t seg[PIPE_MAX_SEGMENTS];

    p->nseg = (int)(nseg > PIPE_MAX_SEGMENTS ? PIPE_MAX_SEGMENTS : nseg);
    p->node = calloc((size_t)p->nseg * L, sizeof(span_t));
    p->jobs = calloc((size_t)p->nseg, sizeof(rail_job_t));
    if (!p->node || !p->jobs) {
        free(p->node);
        free(p->jobs);
        return rt_fail(err, "out of memory");
    }
    algo_balanced(seg, p->nseg, 0, x->count / unit, x->esize * unit);
    for (int k = 0; k < p->nseg; k++) {
        algo_balanced(p->node + (size_t)k * L, (int)L, seg[k].off, seg[k].count * unit, x->esize);
        p->jobs[k] = (rail_job_t){x, &p->node[(size_t)k * L + (size_t)s->node->me]};
    }
    return 0;
}

/* Lane 0: reduce-scatter of segment k, then (once the side lane is done
 * with it) the allgather of segment k-1. Every rank issues the same phases
 * in the same order. */
static int pipelined(coll_set_t *s, const coll_args_t *x, size_t unit, drt_error_t *err)
{
    const lane_ops_t *lanes = s->ops->lanes;
    const group_t *node = s->node;
    coll_args_t sum = node_args(x);
    size_t L = (size_t)node->n;
    pipe_plan_t p;
    int failed = 0, rc;

    if (pipe_plan(s, x, unit, &p, err) < 0)
        return -1;
    if (lanes->open(s, err) < 0) {
        free(p.node);
        free(p.jobs);
        return -1;
    }
    for (int k = 0; k <= p.nseg && !failed; k++) {
        if (k < p.nseg)
            failed = node->ops->reduce_scatter(s, node, &sum, p.node + (size_t)k * L, err) < 0 ||
                     lanes->side(s, rail_job, &p.jobs[k], err) < 0;
        if (!failed && k >= 1)
            failed = lanes->join(s, k - 1, err) < 0 ||
                     node->ops->allgather(s, node, x->buf, p.node + (size_t)(k - 1) * L,
                                          x->esize, err) < 0;
    }
    rc = lanes->close(s, failed, err);
    free(p.node);
    free(p.jobs);
    return failed ? -1 : rc;
}

/* Where spans must be equal, the largest prefix the node size divides runs
 * hierarchically and the few elements after it flat. */
static int hier(coll_set_t *s, const coll_args_t *x, drt_error_t *err)
{
    size_t unit = s->equal_chunks ? (size_t)s->node->n : 1;
    coll_args_t head = *x, tail = *x;
    int rc;

    head.count = x->count - x->count % unit;
    if (s->pipe_min && s->node->n > 1 && s->rail->n > 1 &&
        head.count * x->esize >= 2 * s->pipe_min)
        rc = pipelined(s, &head, unit, err);
    else
        rc = hier_once(s, &head, err);
    if (rc < 0 || head.count == x->count)
        return rc;
    tail.buf += head.count * x->esize;
    tail.src = x->src ? x->src + head.count * x->esize : NULL;
    tail.count = x->count - head.count;
    return flat(s, &tail, err);
}

int algo_run(coll_set_t *s, drt_algo_t a, const coll_args_t *x, drt_error_t *err)
{
    s->last = a == DRT_ALGO_HIER && s->uniform ? DRT_ALGO_HIER : DRT_ALGO_FLAT;
    return s->last == DRT_ALGO_HIER ? hier(s, x, err) : flat(s, x, err);
}
