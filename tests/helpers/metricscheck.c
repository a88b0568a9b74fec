/* SPDX-License-Identifier: Apache-2.0 */
/* Known collectives for the metrics' counts (metrics.test): 5 allreduces of
 * 1000 floats, 2 broadcasts of 10000 bytes, a barrier; then, with LOST
 * given, rank LOST exits and the others' next allreduce fails and they
 * drt_shrink; then 3 allreduces of 100000 floats and 4 bucketed steps of a
 * 300000-float gradient (each an allreduce and an allgather of the step's
 * times). Then every rank prints "held" and waits until the file HOLD
 * exists (so the test reads the metrics of a live run), and finalizes.
 * Usage: metricscheck HOLD [LOST] */
#include "ddprt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static float buf[300000];

static int check(const char *what, int rc, const drt_error_t *err)
{
    if (rc < 0)
        fprintf(stderr, "metricscheck: %s: %s\n", what, err->text);
    return rc;
}

static int steps(drt_comm_t *c, drt_error_t *err)
{
    drt_buckets_t *b;
    drt_step_stats_t st;
    int rc = check("buckets", drt_buckets_create(c, SIZE_MAX, SIZE_MAX, DRT_AVG, &b, err), err);

    if (rc < 0 || check("add", drt_buckets_add(b, buf, 300000, DRT_FLOAT32, err), err) < 0)
        return -1;
    for (int s = 0; s < 4 && rc == 0; s++)
        rc = check("step", drt_buckets_begin(b, err) < 0 || drt_buckets_ready(b, 0, err) < 0 ||
                   drt_buckets_finish(b, &st, err) < 0 ? -1 : 0, err);
    drt_buckets_free(b);
    return rc;
}

static void hold(const char *file)
{
    printf("held\n");
    fflush(stdout);
    for (int i = 0; i < 2400 && access(file, F_OK) != 0; i++) /* 120 s at most */
        nanosleep(&(struct timespec){0, 50000000}, NULL);
}

int main(int argc, char **argv)
{
    drt_comm_t *c;
    drt_error_t err;
    drt_shrink_info_t info;
    int lost = argc > 2 ? atoi(argv[2]) : -1, rc = 0;

    if (argc < 2 || check("init", drt_init(&c, &err), &err) < 0)
        return 1;
    for (int i = 0; i < 5 && rc == 0; i++)
        rc = check("allreduce", drt_allreduce(c, buf, buf, 1000, DRT_FLOAT32, DRT_SUM, &err), &err);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = check("broadcast", drt_broadcast(c, buf, 10000, 0, &err), &err);
    if (rc == 0)
        rc = check("barrier", drt_barrier(c, &err), &err);
    if (rc == 0 && lost >= 0) {
        if (drt_rank(c) == lost)
            _exit(0);
        if (drt_allreduce(c, buf, buf, 100000, DRT_FLOAT32, DRT_SUM, &err) == 0) {
            fprintf(stderr, "metricscheck: the allreduce after rank %d left succeeded\n", lost);
            rc = -1;
        } else {
            rc = check("shrink", drt_shrink(c, &info, &err), &err);
        }
    }
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = check("allreduce", drt_allreduce(c, buf, buf, 100000, DRT_FLOAT32, DRT_SUM, &err),
                   &err);
    if (rc == 0)
        rc = steps(c, &err);
    if (rc == 0)
        hold(argv[1]);
    drt_finalize(c);
    return rc != 0;
}
