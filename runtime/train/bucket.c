/* SPDX-License-Identifier: Apache-2.0 */
/* Gradient buckets: the allreduce of a bucket starts on the non-blocking
 * path the moment backward has produced its last gradient, so it travels
 * while backward computes the rest (PyTorch DDP's Reducer, in C).
 *
 * Buckets are packed once, at the first step, from the last registered
 * gradient backwards (backward produces the last layer's first), and are
 * always started in index order: the progress thread runs requests in the
 * order issued, and every rank must issue the same allreduces in the same
 * order, or they would reduce different buckets with each other.
 *
 * The step's end exchanges a few numbers per rank (one small allgather):
 * when each bucket was complete on each rank, measured from the previous
 * step's end, the one moment all ranks share without a common clock; and
 * whether a rank has seen a preemption signal.
 *
 * With drt_buckets_gpu the buckets live in device memory: the copies, the
 * zeroing and the allreduces are enqueued on the caller's stream (NCCL),
 * in the same order as on the host, and finish waits on their events. */
#include "../internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CAP (25u << 20)
#define DEFAULT_FIRST_CAP (1u << 20)

typedef struct {
    void *user;        /* the caller's buffer; NULL: storage in the bucket */
    size_t count;
    drt_dtype_t t;
    int bucket;
    size_t off;        /* bytes into the bucket */
    int ready;
} grad_t;

typedef struct {
    unsigned char *buf;
    size_t bytes, count;
    drt_dtype_t t;
    int pending;       /* gradients not ready yet this step */
    drt_request_t *req;
    double started;    /* when it was issued */
    double busy;       /* host: the progress thread's time on it; device: issue to done */
} bucket_t;

struct drt_buckets {
    drt_comm_t *c;
    size_t cap, first_cap;
    drt_op_t op;
    int device;        /* drt_buckets_gpu: device buffers, on stream */
    void *stream;
    grad_t *g;
    int ng, gcap;
    bucket_t *bk;
    int nb;
    int in_step;
    int next;          /* the next bucket to start */
    double ref;        /* the previous step's end (the first begin's time) */
    double t_begin, t_last_ready;
    double *mine, *all; /* the step exchange: per bucket arrival, the signal */
    double *first;      /* per bucket: the first rank's arrival */
};

/* ---- the memory the buckets live in: host, or the GPU's (drt_buckets_gpu) ---- */

static int mem_alloc(drt_buckets_t *b, size_t bytes, unsigned char **p, drt_error_t *err)
{
    void *v = NULL;

    if (b->device && gpu_buf_alloc(b->c, bytes, &v, err) < 0)
        return -1;
    if (!b->device && !(v = calloc(1, bytes)))
        return rt_fail(err, "out of memory for a %zu-byte bucket", bytes);
    *p = v;
    return 0;
}

static void mem_free(drt_buckets_t *b, void *p)
{
    if (b->device)
        gpu_buf_free(b->c, p);
    else
        free(p);
}

static int mem_copy(drt_buckets_t *b, void *dst, const void *src, size_t bytes, drt_error_t *err)
{
    if (b->device)
        return gpu_buf_copy(b->c, dst, src, bytes, b->stream, err);
    memcpy(dst, src, bytes);
    return 0;
}

static int mem_zero(drt_buckets_t *b, void *p, size_t bytes, drt_error_t *err)
{
    if (b->device)
        return gpu_buf_zero(b->c, p, bytes, b->stream, err);
    memset(p, 0, bytes);
    return 0;
}

static int env_bytes(const char *name, size_t dflt, size_t *out, drt_error_t *err)
{
    const char *s = getenv(name);
    char *end;
    double mb;

    *out = dflt;
    if (!s || !*s)
        return 0;
    mb = strtod(s, &end);
    if (end == s || *end || !(mb > 0) || mb > 1e6)
        return rt_fail(err, "%s='%.40s' is not a positive number of MiB", name, s);
    *out = (size_t)(mb * (1 << 20));
    return 0;
}

int drt_buckets_create(drt_comm_t *c, size_t cap, size_t first_cap, drt_op_t op,
                       drt_buckets_t **out, drt_error_t *err)
{
    drt_buckets_t *b;

    *out = NULL;
    if ((unsigned)op > DRT_MAX)
        return rt_fail(err, "drt_buckets_create: unknown reduction %d", (int)op);
    b = calloc(1, sizeof(*b));
    if (!b)
        return rt_fail(err, "out of memory");
    *b = (drt_buckets_t){.c = c, .cap = cap, .first_cap = first_cap, .op = op};
    if ((!cap && env_bytes("DDPRT_BUCKET_MB", DEFAULT_CAP, &b->cap, err) < 0) ||
        (!first_cap && env_bytes("DDPRT_FIRST_BUCKET_MB", DEFAULT_FIRST_CAP, &b->first_cap, err) < 0)) {
        free(b);
        return -1;
    }
    *out = b;
    return 0;
}

int drt_buckets_gpu(drt_buckets_t *b, void *stream, drt_error_t *err)
{
    if (b->bk)
        return rt_fail(err, "drt_buckets_gpu: the buckets were packed at the first step");
    if (drt_gpu_attach(b->c, -1, err) < 0)
        return -1;
    b->device = 1;
    b->stream = stream;
    return 0;
}

int drt_buckets_add(drt_buckets_t *b, void *grad, size_t count, drt_dtype_t t, drt_error_t *err)
{
    if (b->bk)
        return rt_fail(err, "drt_buckets_add: the buckets were packed at the first step");
    if (!drt_dtype_size(t) || !count || count > SIZE_MAX / 8)
        return rt_fail(err, "drt_buckets_add: bad gradient (%zu elements of dtype %d)", count, (int)t);
    if (b->ng == b->gcap) {
        int n = b->gcap ? 2 * b->gcap : 64;
        grad_t *g = realloc(b->g, (size_t)n * sizeof(*g));
        if (!g)
            return rt_fail(err, "out of memory");
        b->g = g;
        b->gcap = n;
    }
    b->g[b->ng] = (grad_t){.user = grad, .count = count, .t = t, .bucket = -1};
    return b->ng++;
}

/* Assign gradients to buckets, last registered first; then allocate. */
static int pack(drt_buckets_t *b, drt_error_t *err)
{
    b->bk = calloc((size_t)b->ng + 1, sizeof(bucket_t));
    if (!b->bk)
        return rt_fail(err, "out of memory");
    for (int i = b->ng - 1; i >= 0; i--) {
        grad_t *g = &b->g[i];
        size_t sz = g->count * drt_dtype_size(g->t);
        bucket_t *k = b->nb ? &b->bk[b->nb - 1] : NULL;
        size_t cap = b->nb <= 1 ? b->first_cap : b->cap;
        if (!k || k->t != g->t || (k->bytes && k->bytes + sz > cap)) {
            k = &b->bk[b->nb++];
            k->t = g->t;
        }
        if (sz > SIZE_MAX - k->bytes)
            return rt_fail(err, "drt_buckets: gradient %d does not fit a bucket (%zu bytes after %zu)",
                           i, sz, k->bytes);
        g->bucket = (int)(k - b->bk);
        g->off = k->bytes;
        k->bytes += sz;
        k->count += g->count;
    }
    for (int k = 0; k < b->nb; k++)
        if (mem_alloc(b, b->bk[k].bytes, &b->bk[k].buf, err) < 0)
            return -1;
    b->mine = calloc((size_t)b->nb + 1, sizeof(double));
    b->first = calloc((size_t)b->nb, sizeof(double));
    b->all = calloc(((size_t)b->nb + 1) * (size_t)drt_size(b->c), sizeof(double));
    return b->mine && b->first && b->all ? 0 : rt_fail(err, "out of memory");
}

static void unpack(drt_buckets_t *b)
{
    for (int k = 0; k < b->nb; k++)
        mem_free(b, b->bk[k].buf);
    free(b->bk);
    free(b->mine);
    free(b->first);
    free(b->all);
    b->bk = NULL;
    b->mine = b->first = b->all = NULL;
    b->nb = 0;
}

void *drt_buckets_grad(drt_buckets_t *b, int index)
{
    grad_t *g;

    if (index < 0 || index >= b->ng)
        return NULL;
    g = &b->g[index];
    if (g->user)
        return g->user;
    return b->bk ? b->bk[g->bucket].buf + g->off : NULL;
}

int drt_buckets_count(const drt_buckets_t *b)
{
    return b->nb;
}

int drt_buckets_begin(drt_buckets_t *b, drt_error_t *err)
{
    if (b->in_step)
        return rt_fail(err, "drt_buckets_begin: the previous step was not finished");
    if (!b->ng)
        return rt_fail(err, "drt_buckets_begin: no gradient was added");
    if (!b->bk && pack(b, err) < 0) {
        unpack(b); /* begin may be called again; it packs from scratch */
        return -1;
    }
    /* from zero: a step that failed half way left counts behind */
    for (int k = 0; k < b->nb; k++)
        b->bk[k].pending = 0;
    for (int i = 0; i < b->ng; i++) {
        b->g[i].ready = 0;
        b->bk[b->g[i].bucket].pending++;
    }
    b->next = 0;
    b->in_step = 1;
    b->t_begin = b->t_last_ready = rt_now();
    if (b->ref == 0)
        b->ref = b->t_begin;
    return 0;
}

static int start(drt_buckets_t *b, int k, drt_error_t *err)
{
    bucket_t *bk = &b->bk[k];

    bk->started = rt_now();
    b->mine[k] = bk->started - b->ref;
    if (b->device)
        return drt_gpu_iallreduce(b->c, bk->buf, bk->buf, bk->count, bk->t, b->op, b->stream,
                                  &bk->req, err);
    return drt_iallreduce(b->c, bk->buf, bk->buf, bk->count, bk->t, b->op, &bk->req, err);
}

/* every complete bucket from b->next on, in order */
static int start_ready(drt_buckets_t *b, drt_error_t *err)
{
    /* next counts only started buckets: those are what finish waits for */
    for (; b->next < b->nb && !b->bk[b->next].pending; b->next++)
        if (start(b, b->next, err) < 0)
            return -1;
    return 0;
}

int drt_buckets_ready(drt_buckets_t *b, int index, drt_error_t *err)
{
    grad_t *g;

    if (!b->in_step)
        return rt_fail(err, "drt_buckets_ready(%d): outside a step (call drt_buckets_begin)", index);
    if (index < 0 || index >= b->ng)
        return rt_fail(err, "drt_buckets_ready(%d): no such gradient (%d were added)", index, b->ng);
    g = &b->g[index];
    if (g->ready)
        return rt_fail(err, "drt_buckets_ready(%d): marked ready twice in one step", index);
    if (g->user && mem_copy(b, b->bk[g->bucket].buf + g->off, g->user,
                            g->count * drt_dtype_size(g->t), err) < 0)
        return -1; /* not ready: finish zeroes it, so the ranks' buckets still match */
    g->ready = 1;
    b->t_last_ready = rt_now();
    b->bk[g->bucket].pending--;
    return rt_status(b->c, start_ready(b, err));
}

/* Gradients never marked ready contribute zeros; then start the rest. */
static int start_rest(drt_buckets_t *b, drt_error_t *err)
{
    for (int i = 0; i < b->ng; i++) {
        grad_t *g = &b->g[i];
        if (g->ready)
            continue;
        if (mem_zero(b, b->bk[g->bucket].buf + g->off, g->count * drt_dtype_size(g->t), err) < 0)
            return -1;
        b->bk[g->bucket].pending--;
        g->ready = 1;
    }
    return start_ready(b, err);
}

/* Wait for every started bucket (all of them unless starting one failed:
 * then only those, so no request is left behind). rc: -1 when an error
 * is already in err, which then stays the one reported. */
static int wait_all(drt_buckets_t *b, int rc, drt_error_t *err)
{
    drt_error_t e;

    for (int k = 0; k < b->next; k++) {
        bucket_t *bk = &b->bk[k];
        int w = b->device ? drt_wait(bk->req, &e) : request_wait_timed(bk->req, &bk->busy, &e);
        if (b->device)
            bk->busy = rt_now() - bk->started;
        if (w < 0 && rc == 0) {
            rc = -1;
            if (err)
                *err = e;
        }
        bk->req = NULL;
    }
    return rc;
}

static int copy_back(drt_buckets_t *b, drt_error_t *err)
{
    for (int i = 0; i < b->ng; i++) {
        grad_t *g = &b->g[i];
        if (g->user && mem_copy(b, g->user, b->bk[g->bucket].buf + g->off,
                                g->count * drt_dtype_size(g->t), err) < 0)
            return -1;
    }
    return 0;
}

/* From the exchange: the largest lag at a bucket, and the rank whose mean
 * lag behind each bucket's first arrival is largest. */
static void skew(const drt_buckets_t *b, drt_step_stats_t *st)
{
    int n = drt_size(b->c), w = b->nb + 1;

    st->skew_s = 0;
    for (int k = 0; k < b->nb; k++) {
        double lo = b->all[k], hi = lo;
        for (int r = 1; r < n; r++) {
            double v = b->all[(size_t)r * w + k];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        b->first[k] = lo;
        st->skew_s = hi - lo > st->skew_s ? hi - lo : st->skew_s;
    }
    st->slowest_rank = -1;
    st->slowest_lag_s = 0;
    for (int r = 0; n > 1 && r < n; r++) {
        double lag = 0;
        for (int k = 0; k < b->nb; k++)
            lag += b->all[(size_t)r * w + k] - b->first[k];
        lag /= b->nb;
        if (st->slowest_rank < 0 || lag > st->slowest_lag_s) {
            st->slowest_rank = r;
            st->slowest_lag_s = lag;
        }
    }
}

static int exchange(drt_buckets_t *b, drt_step_stats_t *st, drt_error_t *err)
{
    int n = drt_size(b->c), w = b->nb + 1;

    b->mine[b->nb] = drt_preempt_signal();
    if (drt_allgather(b->c, b->mine, b->all, (size_t)w * sizeof(double), err) < 0)
        return -1;
    st->stop = 0;
    for (int r = 0; r < n; r++)
        st->stop |= b->all[(size_t)r * w + b->nb] != 0;
    skew(b, st);
    return 0;
}

int drt_buckets_finish(drt_buckets_t *b, drt_step_stats_t *stats, drt_error_t *err)
{
    drt_step_stats_t st = {0};
    double t_enter = rt_now(), t_end;
    int rc;

    if (!b->in_step)
        return rt_fail(err, "drt_buckets_finish: outside a step (call drt_buckets_begin)");
    b->in_step = 0;
    st.compute_s = (b->next == b->nb ? b->t_last_ready : t_enter) - b->t_begin;
    rc = wait_all(b, start_rest(b, err), err);
    if (rc < 0)
        return rt_status(b->c, -1);
    if (copy_back(b, err) < 0 || exchange(b, &st, err) < 0)
        return rt_status(b->c, -1);
    t_end = rt_now();
    for (int k = 0; k < b->nb; k++) {
        st.comm_s += b->bk[k].busy;
        st.bytes += b->bk[k].bytes;
    }
    st.buckets = b->nb;
    /* written before the request was done (the queue's lock orders it) */
    st.algo = b->device ? gpu_last_algo(b->c) : b->c->cpu.last;
    st.exposed_s = t_end - t_enter;
    st.step_s = t_end - b->t_begin;
    b->ref = t_end;
    metrics_step(b->c, &st);
    if (stats)
        *stats = st;
    return 0;
}

void drt_buckets_free(drt_buckets_t *b)
{
    drt_error_t e;

    if (!b)
        return;
    /* a step abandoned after an error: its requests must not outlive the buffers */
    if (b->in_step)
        wait_all(b, 0, NULL);
    /* the stream may still copy from the buckets (finish only enqueues the
     * copies back); cudaFree need not wait for it. A stream that does not
     * get there in DDPRT_TIMEOUT keeps the buckets: a leak, not a crash. */
    if (b->device && b->nb && drt_gpu_sync(b->c, b->stream, &e) < 0) {
        fprintf(stderr, "ddprt: gradient buckets not freed: %s\n", e.text);
        b->nb = 0;
    }
    unpack(b);
    free(b->g);
    free(b);
}
