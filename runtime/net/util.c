/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers every part of the runtime uses: errors, log lines, the clock,
 * where a rank runs, the names of algorithms and types. The bottom of the
 * library: calls nothing of it. */
#include "../internal.h"

#include <arpa/inet.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int rt_fail(drt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    if (err) {
        va_start(ap, fmt);
        vsnprintf(err->text, sizeof(err->text), fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* One write per line: ranks share a terminal or pipe, and a line written
 * in pieces interleaves with theirs. */
static void log_line(const drt_comm_t *c, const char *fmt, va_list ap)
{
    char line[1024];
    int n;

    n = snprintf(line, sizeof(line), "ddprt: rank %d: ", c->rank);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    n = (int)strlen(line);
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return; /* nowhere to log to */
}

void rt_log(const drt_comm_t *c, const char *fmt, ...)
{
    va_list ap;

    if (!c->verbose)
        return;
    va_start(ap, fmt);
    log_line(c, fmt, ap);
    va_end(ap);
}

void rt_warn(const drt_comm_t *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_line(c, fmt, ap);
    va_end(ap);
}

const char *rt_where(const drt_comm_t *c, int rank, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN] = "?";

    inet_ntop(AF_INET, &c->ep_ip[rank], ip, sizeof(ip));
    snprintf(buf, len, "node %d at %s", c->node_of[rank], ip);
    return buf;
}

double rt_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *drt_algo_name(drt_algo_t algo)
{
    return algo == DRT_ALGO_FLAT ? "flat" : algo == DRT_ALGO_HIER ? "hier" : "auto";
}

int drt_algo_parse(const char *name, drt_algo_t *algo)
{
    static const drt_algo_t all[] = {DRT_ALGO_AUTO, DRT_ALGO_FLAT, DRT_ALGO_HIER};

    for (int i = 0; i < 3; i++)
        if (!strcmp(name, drt_algo_name(all[i]))) {
            *algo = all[i];
            return 0;
        }
    return -1;
}

int drt_dtype_parse(const char *name, drt_dtype_t *t)
{
    static const char *const names[] = {[DRT_FLOAT32] = "float32", [DRT_FLOAT64] = "float64",
                                        [DRT_BFLOAT16] = "bfloat16", [DRT_FLOAT16] = "float16",
                                        [DRT_INT32] = "int32", [DRT_INT64] = "int64"};

    for (int i = 0; i < 6; i++)
        if (!strcmp(name, names[i])) {
            *t = (drt_dtype_t)i;
            return 0;
        }
    return -1;
}

/* Called from the progress thread too: the lock keeps the list whole. */
void rt_mark_lost(drt_comm_t *c, int rank)
{
    if (rank < 0 || rank >= c->size || rank == c->rank)
        return;
    pthread_mutex_lock(&c->lock);
    if (!c->lost[rank]) {
        c->lost[rank] = 1;
        c->lost_list[c->nlost] = rank;
        __atomic_store_n(&c->nlost, c->nlost + 1, __ATOMIC_RELEASE); /* read without the lock */
    }
    pthread_mutex_unlock(&c->lock);
}

int rt_status(const drt_comm_t *c, int rc)
{
    return rc < 0 && __atomic_load_n(&c->nlost, __ATOMIC_ACQUIRE) ? DRT_ELOST : rc;
}
