/* SPDX-License-Identifier: Apache-2.0 */
/* Requests: the non-blocking allreduce (drt_iallreduce, drt_test,
 * drt_wait). A progress thread runs queued requests in the order issued, so
 * a training loop can compute while gradients travel. The blocking
 * collectives (blocking.c) first wait until the queue is empty
 * (request_drain), so every rank sees the same order of operations. A GPU
 * request (gpu.c) is only wrapped here, never queued. */
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

struct drt_request {
    drt_comm_t *comm;
    const void *send;
    void *recv;
    size_t count;
    drt_dtype_t dtype;
    drt_op_t op;
    int done, rc;
    double t_start, t_end; /* when the progress thread began and ended it */
    drt_error_t err;
    drt_request_t *next;
    struct gpu_req *gpu; /* drt_gpu_iallreduce's (gpu.c): polled there, never queued */
};

drt_request_t *request_gpu(drt_comm_t *c, struct gpu_req *g)
{
    drt_request_t *r = calloc(1, sizeof(*r));

    if (r)
        *r = (drt_request_t){.comm = c, .gpu = g};
    return r;
}

static void *progress(void *arg)
{
    drt_comm_t *c = arg;

    pthread_mutex_lock(&c->lock);
    for (;;) {
        drt_request_t *r;
        while (!c->queue_head && !c->stopping)
            pthread_cond_wait(&c->cond, &c->lock);
        if (!c->queue_head)
            break;
        r = c->queue_head;
        pthread_mutex_unlock(&c->lock);
        r->t_start = rt_now();
        r->rc = coll_allreduce(c, r->send, r->recv, r->count, r->dtype, r->op, &r->err);
        r->t_end = rt_now();
        pthread_mutex_lock(&c->lock);
        c->queue_head = r->next;
        if (!c->queue_head)
            c->queue_tail = NULL;
        r->done = 1;
        pthread_cond_broadcast(&c->cond);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

int drt_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                   drt_op_t op, drt_request_t **out, drt_error_t *err)
{
    drt_request_t *r = calloc(1, sizeof(*r));

    if (!r)
        return rt_fail(err, "out of memory");
    *r = (drt_request_t){.comm = c, .send = send, .recv = recv, .count = count, .dtype = t, .op = op};
    pthread_mutex_lock(&c->lock);
    if (!c->thread_started) {
        if (pthread_create(&c->thread, NULL, progress, c) != 0) {
            pthread_mutex_unlock(&c->lock);
            free(r);
            return rt_fail(err, "cannot start the progress thread");
        }
        c->thread_started = 1;
    }
    if (c->queue_tail)
        c->queue_tail->next = r;
    else
        c->queue_head = r;
    c->queue_tail = r;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    *out = r;
    return 0;
}

int drt_test(drt_request_t *r, int *done, drt_error_t *err)
{
    if (r->gpu)
        return rt_status(r->comm, gpu_req_test(r->gpu, done, err));
    pthread_mutex_lock(&r->comm->lock);
    *done = r->done;
    pthread_mutex_unlock(&r->comm->lock);
    if (*done && r->rc < 0 && err)
        *err = r->err;
    return *done ? rt_status(r->comm, r->rc) : 0;
}

int drt_wait(drt_request_t *r, drt_error_t *err)
{
    int rc;

    if (!r->gpu) {
        drt_comm_t *c = r->comm;
        return rt_status(c, request_wait_timed(r, NULL, err));
    }
    rc = rt_status(r->comm, gpu_req_wait(r->gpu, err));
    free(r);
    return rc;
}

int request_wait_timed(drt_request_t *r, double *busy, drt_error_t *err)
{
    drt_comm_t *c = r->comm;
    int rc;

    pthread_mutex_lock(&c->lock);
    while (!r->done)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
    rc = r->rc;
    if (rc < 0 && err)
        *err = r->err;
    if (busy)
        *busy = r->t_end - r->t_start;
    free(r);
    return rc;
}

void request_drain(drt_comm_t *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->queue_head)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

void request_stop(drt_comm_t *c)
{
    if (!c->thread_started)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
}
