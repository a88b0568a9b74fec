/* Ring collectives over a group (world, node or rail) and the allreduce
 * algorithms built from them:
 *   flat: reduce-scatter + allgather around the world ring (bandwidth-optimal);
 *   hier: node reduce-scatter, rail allreduce of each rank's chunk, node
 *         allgather (needs the same number of ranks on every node);
 *   auto: the faster of the two for each power-of-two message size (auto.c).
 * Position i of a group ends a reduce-scatter owning chunk i. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_MIN_SEGMENT (1u << 20) /* below this the phases run one after another */
#define PIPE_MAX_SEGMENTS 8

typedef struct {
    size_t off;   /* bytes */
    size_t count; /* elements */
} span_t;

static int next_of(const group_t *g)
{
    return g->ranks[(g->me + 1) % g->n];
}

static int prev_of(const group_t *g)
{
    return g->ranks[(g->me + g->n - 1) % g->n];
}

/* count elements split as evenly as possible into n chunks */
static void balanced(span_t *s, int n, size_t base_off, size_t count, size_t esize)
{
    size_t off = base_off;

    for (int i = 0; i < n; i++) {
        s[i].count = count / (size_t)n + ((size_t)i < count % (size_t)n);
        s[i].off = off;
        off += s[i].count * esize;
    }
}

/* With src (out of place), the input is read from src and buf is written
 * only: each chunk is reduced exactly once by each position, the first time
 * buf is touched there, and the one chunk never reduced here is sent from
 * src and later overwritten by the allgather. */
static int ring_reduce_scatter(drt_comm_t *c, const group_t *g, unsigned char *buf,
                               const unsigned char *src, const span_t *s, size_t esize,
                               drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    int n = g->n;

    if (n < 2 && src)
        memcpy(buf + s[0].off, src + s[0].off, s[0].count * esize);
    for (int step = 0; step < n - 1; step++) {
        int send = ((g->me - step - 1) % n + n) % n, recv = ((g->me - step - 2) % n + n) % n;
        const unsigned char *from = step == 0 && src ? src : buf;
        if (xfer_reduce(c, next_of(g), from + s[send].off, s[send].count * esize, prev_of(g),
                        buf + s[recv].off, src ? src + s[recv].off : NULL, s[recv].count, t, op,
                        err) < 0)
            return -1;
    }
    return 0;
}

static int ring_allgather(drt_comm_t *c, const group_t *g, unsigned char *buf, const span_t *s,
                          size_t esize, drt_error_t *err)
{
    int n = g->n;

    for (int step = 0; step < n - 1; step++) {
        int send = ((g->me - step) % n + n) % n, recv = ((g->me - step - 1) % n + n) % n;
        if (xfer(c, next_of(g), buf + s[send].off, s[send].count * esize, prev_of(g),
                 buf + s[recv].off, s[recv].count * esize, err) < 0)
            return -1;
    }
    return 0;
}

/* Allreduce of count elements at buf (aligned, 16-bit floats already widened). */
static int ring_allreduce(drt_comm_t *c, const group_t *g, unsigned char *buf,
                          const unsigned char *src, size_t off, size_t count, size_t esize,
                          drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    span_t *s = calloc((size_t)g->n, sizeof(span_t));
    int rc;

    if (!s)
        return drt_fail(err, "out of memory");
    balanced(s, g->n, off, count, esize);
    if (g->n < 2 && src)
        memcpy(buf + off, src + off, count * esize);
    rc = g->n < 2 ? 0 : ring_reduce_scatter(c, g, buf, src, s, esize, t, op, err) < 0 ? -1
                                                        : ring_allgather(c, g, buf, s, esize, err);
    free(s);
    return rc;
}

static int hier_allreduce(drt_comm_t *c, unsigned char *buf, const unsigned char *src,
                          size_t count, size_t esize, drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    span_t *s = calloc((size_t)c->node.n, sizeof(span_t));
    int rc = -1;

    if (!s)
        return drt_fail(err, "out of memory");
    balanced(s, c->node.n, 0, count, esize);
    if (ring_reduce_scatter(c, &c->node, buf, src, s, esize, t, op, err) == 0 &&
        ring_allreduce(c, &c->rail, buf, NULL, s[c->node.me].off, s[c->node.me].count, esize, t,
                       op, err) == 0 &&
        (c->node.n < 2 || ring_allgather(c, &c->node, buf, s, esize, err) == 0))
        rc = 0;
    free(s);
    return rc;
}

/* Pipelined hierarchical allreduce: the message is cut into segments; the
 * main thread runs the node phases (reduce-scatter of segment k, allgather of
 * segment k-1) over shared memory while a second thread runs the rail
 * allreduce of each segment over TCP, so a large message pays roughly the
 * slowest phase rather than the sum of the three. */
typedef struct {
    drt_comm_t *c;
    unsigned char *buf;
    const unsigned char *src;
    size_t esize;
    drt_dtype_t t;
    drt_op_t op;
    span_t *seg;
    int nseg, rs_done, rail_done, failed; /* failed: 1 node phases, 2 rail, first one wins */
    pthread_mutex_t m;
    pthread_cond_t cv;
    drt_error_t rail_err;
} pipe_t;

static void pipe_mark(pipe_t *p, int *counter, int failed)
{
    pthread_mutex_lock(&p->m);
    if (failed) {
        p->failed = p->failed ? p->failed : counter == &p->rail_done ? 2 : 1;
        __atomic_store_n(&p->c->abort, 1, __ATOMIC_RELEASE);
    } else {
        (*counter)++;
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->m);
}

/* 0 when *counter > k, -1 when the other side failed */
static int pipe_wait(pipe_t *p, const int *counter, int k)
{
    int rc;

    pthread_mutex_lock(&p->m);
    while (*counter <= k && !p->failed)
        pthread_cond_wait(&p->cv, &p->m);
    rc = p->failed ? -1 : 0;
    pthread_mutex_unlock(&p->m);
    return rc;
}

static void node_spans(const pipe_t *p, int k, span_t *s)
{
    balanced(s, p->c->node.n, p->seg[k].off, p->seg[k].count, p->esize);
}

static void *rail_phase(void *arg)
{
    pipe_t *p = arg;
    span_t *s = calloc((size_t)p->c->node.n, sizeof(span_t));

    for (int k = 0; k < p->nseg; k++) {
        const span_t *mine;
        if (!s || pipe_wait(p, &p->rs_done, k) < 0)
            break;
        node_spans(p, k, s);
        mine = &s[p->c->node.me];
        if (ring_allreduce(p->c, &p->c->rail, p->buf, NULL, mine->off, mine->count, p->esize,
                           p->t, p->op, &p->rail_err) < 0) {
            pipe_mark(p, &p->rail_done, 1);
            break;
        }
        pipe_mark(p, &p->rail_done, 0);
    }
    if (!s)
        pipe_mark(p, &p->rail_done, 1);
    free(s);
    return NULL;
}

static int node_phases(pipe_t *p, drt_error_t *err)
{
    drt_comm_t *c = p->c;
    span_t *s = calloc((size_t)c->node.n, sizeof(span_t));

    if (!s)
        return drt_fail(err, "out of memory");
    for (int k = 0; k <= p->nseg; k++) {
        if (k < p->nseg) {
            node_spans(p, k, s);
            if (ring_reduce_scatter(c, &c->node, p->buf, p->src, s, p->esize, p->t, p->op, err) < 0)
                goto fail;
            pipe_mark(p, &p->rs_done, 0);
        }
        if (k >= 1) {
            if (pipe_wait(p, &p->rail_done, k - 1) < 0)
                goto fail;
            node_spans(p, k - 1, s);
            if (ring_allgather(c, &c->node, p->buf, s, p->esize, err) < 0)
                goto fail;
        }
    }
    free(s);
    return 0;
fail:
    pipe_mark(p, &p->rs_done, 1);
    free(s);
    return -1;
}

static int pipelined_hier(drt_comm_t *c, unsigned char *buf, const unsigned char *src,
                          size_t count, size_t esize, drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    size_t bytes = count * esize, nseg = bytes / PIPE_MIN_SEGMENT;
    pipe_t p = {.c = c, .buf = buf, .src = src, .esize = esize, .t = t, .op = op};
    pthread_t rail;
    int rc;

    p.nseg = (int)(nseg > PIPE_MAX_SEGMENTS ? PIPE_MAX_SEGMENTS : nseg);
    if (!(p.seg = calloc((size_t)p.nseg, sizeof(span_t))))
        return drt_fail(err, "out of memory");
    balanced(p.seg, p.nseg, 0, count, esize);
    pthread_mutex_init(&p.m, NULL);
    pthread_cond_init(&p.cv, NULL);
    c->abort = 0;
    if (pthread_create(&rail, NULL, rail_phase, &p) != 0) {
        free(p.seg);
        return drt_fail(err, "cannot start the pipeline thread");
    }
    rc = node_phases(&p, err);
    pthread_join(rail, NULL);
    if (p.failed == 2) { /* the rail phase failed first: its error is the cause */
        *err = p.rail_err;
        rc = -1;
    }
    c->abort = 0;
    pthread_mutex_destroy(&p.m);
    pthread_cond_destroy(&p.cv);
    free(p.seg);
    return rc;
}

int coll_run(drt_comm_t *c, drt_algo_t a, const coll_args_t *x, drt_error_t *err)
{
    if (a == DRT_ALGO_HIER && c->uniform && c->node.n > 1 && c->rail.n > 1 &&
        x->count * x->esize >= 2 * (size_t)PIPE_MIN_SEGMENT)
        return pipelined_hier(c, x->buf, x->src, x->count, x->esize, x->t, x->op, err);
    if (a == DRT_ALGO_HIER && c->uniform)
        return hier_allreduce(c, x->buf, x->src, x->count, x->esize, x->t, x->op, err);
    return ring_allreduce(c, &c->world, x->buf, x->src, 0, x->count, x->esize, x->t, x->op, err);
}

int coll_fence(drt_comm_t *c, drt_error_t *err)
{
    int32_t one = 1;

    return ring_allreduce(c, &c->world, (unsigned char *)&one, NULL, 0, 1, sizeof(one),
                          DRT_INT32, DRT_SUM, err);
}

int coll_agree_max(drt_comm_t *c, double *v, size_t n, drt_error_t *err)
{
    return ring_allreduce(c, &c->world, (unsigned char *)v, NULL, 0, n, sizeof(double),
                          DRT_FLOAT64, DRT_MAX, err);
}

/* The working buffer: recv itself when aligned for the type, else a copy;
 * 16-bit floats always widen to float32. */
int coll_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                   drt_op_t op, drt_error_t *err)
{
    size_t esize = drt_dtype_size(t);
    int half = t == DRT_BFLOAT16 || t == DRT_FLOAT16, read_send, rc;
    size_t wsize = half ? sizeof(float) : esize;
    unsigned char *work = recv;
    coll_args_t x;

    if (!esize)
        return drt_fail(err, "allreduce: unknown data type %d", (int)t);
    c->seq++;
    if (half || ((uintptr_t)recv % esize) != 0) {
        if (!(work = aligned_alloc(64, ((count * wsize) / 64 + 1) * 64)))
            return drt_fail(err, "out of memory for %zu elements", count);
    }
    /* out of place into recv itself: the algorithms read send directly when
     * it is aligned too (reductions load elements from it) */
    read_send = !half && work == (unsigned char *)recv && work != send &&
                (uintptr_t)send % esize == 0;
    if (half)
        drt_to_f32((float *)work, send, count, t);
    else if (work != send && !read_send)
        memmove(work, send, count * esize);
    x = (coll_args_t){work, read_send ? send : NULL, count, wsize, half ? DRT_FLOAT32 : t, op};
    rc = !c->uniform ? coll_run(c, DRT_ALGO_FLAT, &x, err)
         : c->algo == DRT_ALGO_AUTO ? auto_allreduce(c, &x, err) : coll_run(c, c->algo, &x, err);
    if (rc == 0 && op == DRT_AVG)
        drt_scale_avg(work, count, half ? DRT_FLOAT32 : t, c->size);
    if (rc == 0 && half)
        drt_from_f32(recv, (float *)work, count, t);
    else if (rc == 0 && work != (unsigned char *)recv)
        memcpy(recv, work, count * esize);
    if (work != (unsigned char *)recv)
        free(work);
    return rc;
}

int coll_broadcast(drt_comm_t *c, void *buf, size_t bytes, int root, drt_error_t *err)
{
    const group_t *g = &c->world;
    const size_t seg = 1 << 20;
    size_t nseg = (bytes + seg - 1) / seg;
    int pos = 0, r;

    if (root < 0 || root >= c->size)
        return drt_fail(err, "broadcast: root %d is not a rank (0-%d)", root, c->size - 1);
    for (int i = 0; i < g->n; i++)
        pos = g->ranks[i] == root ? i : pos;
    r = (g->me - pos + g->n) % g->n;
    c->seq++;
    /* pipeline: pass segment k-1 on while segment k arrives */
    for (size_t k = 0; k <= nseg && g->n > 1; k++) {
        size_t so = (k - 1) * seg, ro = k * seg;
        int sending = k >= 1 && r < g->n - 1, receiving = k < nseg && r > 0;
        if (xfer(c, sending ? next_of(g) : -1, (unsigned char *)buf + so,
                 sending ? (bytes - so < seg ? bytes - so : seg) : 0, receiving ? prev_of(g) : -1,
                 (unsigned char *)buf + ro, receiving ? (bytes - ro < seg ? bytes - ro : seg) : 0,
                 err) < 0)
            return -1;
    }
    return 0;
}

int coll_allgather(drt_comm_t *c, const void *send, void *recv, size_t bytes, drt_error_t *err)
{
    span_t *s = calloc((size_t)c->size, sizeof(span_t));
    int rc;

    if (!s)
        return drt_fail(err, "out of memory");
    for (int i = 0; i < c->world.n; i++)
        s[i] = (span_t){(size_t)c->world.ranks[i] * bytes, bytes};
    c->seq++;
    memmove((unsigned char *)recv + (size_t)c->rank * bytes, send, bytes);
    rc = ring_allgather(c, &c->world, recv, s, 1, err);
    free(s);
    return rc;
}

int coll_reduce_scatter(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    size_t esize = drt_dtype_size(t), total = count * (size_t)c->size;
    int half = t == DRT_BFLOAT16 || t == DRT_FLOAT16, rc;
    size_t wsize = half ? sizeof(float) : esize;
    drt_dtype_t wt = half ? DRT_FLOAT32 : t;
    span_t *s = calloc((size_t)c->size, sizeof(span_t));
    unsigned char *work = aligned_alloc(64, ((total * wsize) / 64 + 1) * 64);

    if (!s || !work || !esize) {
        free(s);
        free(work);
        return drt_fail(err, esize ? "out of memory" : "reduce_scatter: unknown data type");
    }
    if (half)
        drt_to_f32((float *)work, send, total, t);
    else
        memcpy(work, send, total * esize);
    for (int i = 0; i < c->world.n; i++)
        s[i] = (span_t){(size_t)c->world.ranks[i] * count * wsize, count};
    c->seq++;
    rc = ring_reduce_scatter(c, &c->world, work, NULL, s, wsize, wt, op, err);
    if (rc == 0 && op == DRT_AVG)
        drt_scale_avg(work + (size_t)c->rank * count * wsize, count, wt, c->size);
    if (rc == 0 && half)
        drt_from_f32(recv, (float *)(work + (size_t)c->rank * count * wsize), count, t);
    else if (rc == 0)
        memcpy(recv, work + (size_t)c->rank * count * esize, count * esize);
    free(s);
    free(work);
    return rc;
}

int coll_barrier(drt_comm_t *c, drt_error_t *err)
{
    c->seq++;
    return coll_fence(c, err);
}
