/* SPDX-License-Identifier: Apache-2.0 */
/* threadcheck: libddprt's thread rules (ddprt.h; docs/runtime.md, "Threads")
 * as a program that keeps to them, for ThreadSanitizer to check: the main
 * thread issues every collective (non-blocking ones, and blocking ones
 * between them), a second thread waits for or tests each request, a third
 * reads the queries all along. Every sum is checked. Exit 0 when all were
 * right; rank 0 prints one summary line. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddprt.h"

#define REQS 120
#define COUNT 4099 /* not a multiple of any rank count's chunking */

static drt_comm_t *comm;
static int me, n;
static float bufs[REQS][COUNT], blocking[COUNT];
static drt_request_t *reqs[REQS];
static int issued; /* requests in reqs[], under mu */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_int stop_queries, wrong;

static float want(void)
{
    return (float)n * (float)(n + 1) / 2; /* of rank + 1 over the ranks: exact */
}

static void check(const float *buf, const char *what, int i)
{
    for (int k = 0; k < COUNT; k++)
        if (buf[k] != want()) {
            if (atomic_fetch_add(&wrong, 1) < 5)
                fprintf(stderr, "threadcheck: rank %d: %s %d: element %d is %g, not %g\n", me,
                        what, i, k, (double)buf[k], (double)want());
            return;
        }
}

/* Even requests are waited for, odd ones tested until done, then waited
 * (drt_wait frees them). */
static void *waiter(void *arg)
{
    drt_error_t err;

    (void)arg;
    for (int i = 0; i < REQS; i++) {
        drt_request_t *r;
        int done = 0, rc = 0;
        pthread_mutex_lock(&mu);
        while (issued <= i)
            pthread_cond_wait(&cv, &mu);
        r = reqs[i];
        pthread_mutex_unlock(&mu);
        while (i % 2 && !done && rc == 0)
            if ((rc = drt_test(r, &done, &err)) == 0 && !done)
                sched_yield(); /* the machine may have fewer cores than threads */
        if (drt_wait(r, &err) < 0 || rc < 0) {
            atomic_fetch_add(&wrong, 1);
            fprintf(stderr, "threadcheck: rank %d: request %d: %s\n", me, i, err.text);
            continue;
        }
        check(bufs[i], "request", i);
    }
    return NULL;
}

/* The queries, from any thread while collectives run: always the same. */
static void *queries(void *arg)
{
    const int at_start[] = {drt_rank(comm), drt_size(comm), drt_local_rank(comm),
                            drt_local_size(comm), drt_node_rank(comm), drt_node_count(comm),
                            drt_rail_rank(comm), drt_rail_size(comm), drt_node_of(comm, 0)};

    (void)arg;
    while (!atomic_load(&stop_queries)) {
        const int now[] = {drt_rank(comm), drt_size(comm), drt_local_rank(comm),
                           drt_local_size(comm), drt_node_rank(comm), drt_node_count(comm),
                           drt_rail_rank(comm), drt_rail_size(comm), drt_node_of(comm, 0)};
        for (size_t k = 0; k < sizeof(now) / sizeof(now[0]); k++)
            if (now[k] != at_start[k]) {
                atomic_fetch_add(&wrong, 1);
                fprintf(stderr, "threadcheck: rank %d: query %zu changed\n", me, k);
                return NULL;
            }
    }
    return NULL;
}

static void fill(float *buf)
{
    for (int k = 0; k < COUNT; k++)
        buf[k] = (float)(me + 1);
}

static int issue_all(void)
{
    drt_error_t err;

    for (int i = 0; i < REQS; i++) {
        fill(bufs[i]);
        if (drt_iallreduce(comm, bufs[i], bufs[i], COUNT, DRT_FLOAT32, DRT_SUM, &reqs[i], &err) < 0) {
            fprintf(stderr, "threadcheck: rank %d: drt_iallreduce %d: %s\n", me, i, err.text);
            return -1; /* the waiter never gets request i: the caller stops */
        }
        pthread_mutex_lock(&mu);
        issued = i + 1;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
        if (i % 10 == 9) { /* drains the queue while the waiter waits in it */
            fill(blocking);
            if (drt_allreduce(comm, blocking, blocking, COUNT, DRT_FLOAT32, DRT_SUM, &err) < 0) {
                fprintf(stderr, "threadcheck: rank %d: drt_allreduce: %s\n", me, err.text);
                return -1;
            }
            check(blocking, "blocking allreduce after request", i);
        }
    }
    return 0;
}

int main(void)
{
    drt_error_t err;
    pthread_t w, q;
    int total;

    if (drt_init(&comm, &err) < 0) {
        fprintf(stderr, "threadcheck: %s\n", err.text);
        return 1;
    }
    me = drt_rank(comm);
    n = drt_size(comm);
    if (pthread_create(&q, NULL, queries, NULL) != 0 || pthread_create(&w, NULL, waiter, NULL) != 0) {
        fprintf(stderr, "threadcheck: cannot start a thread\n");
        return 1;
    }
    if (issue_all() < 0)
        return 1; /* a peer failed: exit without waiting (the waiter would wait forever) */
    pthread_join(w, NULL);
    atomic_store(&stop_queries, 1);
    pthread_join(q, NULL);
    total = atomic_load(&wrong);
    if (drt_allreduce(comm, &total, &total, 1, DRT_INT32, DRT_SUM, &err) < 0) {
        fprintf(stderr, "threadcheck: rank %d: final tally: %s\n", me, err.text);
        return 1;
    }
    if (me == 0)
        printf("threadcheck: %d ranks on %d nodes: %d requests waited or tested by another thread, "
               "%d blocking allreduces between them, queries from a third: %d wrong\n",
               n, drt_node_count(comm), REQS, REQS / 10, total);
    drt_finalize(comm);
    return total ? 1 : 0;
}
