/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's telemetry: every --log-every steps rank 0 prints one line of
 * averages over those steps, and names the straggler: the rank that was
 * last to its buckets in most of the steps, when it lagged by at least
 * --straggler-ms. --metrics writes every step as a JSON line. */
#include "train.h"
#include "files.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static FILE *open_file(const char *opt, const char *name, int append)
{
    char err[300];
    FILE *f;

    if (!name)
        return NULL;
    if (!(f = train_output_open(name, append, err, sizeof(err)))) {
        fprintf(stderr, "ddp-train: %s %s: %s\n", opt, name, err);
        exit(1);
    }
    return f;
}

void telemetry_open(train_t *t)
{
    int n = drt_size(t->c);

    t->w.slowest = calloc((size_t)n, sizeof(int));
    t->w.lag = calloc((size_t)n, sizeof(double));
    if (!t->w.slowest || !t->w.lag) {
        fprintf(stderr, "ddp-train: out of memory\n");
        exit(1);
    }
    if (drt_rank(t->c))
        return;
    /* a resumed run continues the files, a new one starts them over */
    t->metrics = open_file("--metrics", t->o.metrics, t->resumed);
    t->dump = open_file("--dump-weights", t->o.dump, t->resumed);
}

/* bus bandwidth as nccl-tests defines it: what each rank's links carry */
static double busbw(const train_t *t, double bytes, double secs)
{
    int n = drt_size(t->c);

    return n > 1 && secs > 0 ? 2.0 * (n - 1) / n * bytes / secs / 1e9 : 0;
}

static void metrics_line(train_t *t, const drt_step_stats_t *st)
{
    fprintf(t->metrics,
            "{\"step\": %" PRIu64 ", \"epoch\": %" PRIu64 ", \"loss\": %.6f, \"step_ms\": %.3f, "
            "\"compute_ms\": %.3f, \"comm_ms\": %.3f, \"exposed_ms\": %.3f, \"skew_ms\": %.3f, "
            "\"busbw_gbs\": %.4f, \"buckets\": %d, \"slowest_rank\": %d, \"slowest_lag_ms\": %.3f, "
            "\"algo\": \"%s\"}\n",
            t->s.step, t->s.epoch, t->batch_loss, st->step_s * 1e3, st->compute_s * 1e3,
            st->comm_s * 1e3, st->exposed_s * 1e3, st->skew_s * 1e3,
            busbw(t, (double)st->bytes, st->comm_s), st->buckets, st->slowest_rank,
            st->slowest_lag_s * 1e3, drt_algo_name(st->algo));
    /* a line per step, for whoever follows the file; a failed write ends the run */
    if (fflush(t->metrics) != 0 || ferror(t->metrics)) {
        fprintf(stderr, "ddp-train: --metrics %s: cannot write: %s (free space there, or give another "
                "file)\n", t->o.metrics, strerror(errno));
        exit(1);
    }
}

/* the straggler of the window, -1 for none */
static int straggler(const train_t *t, double *lag_ms)
{
    int n = drt_size(t->c), best = -1;

    for (int r = 0; r < n; r++)
        if (t->w.slowest[r] * 2 > (int)t->w.steps && (best < 0 || t->w.slowest[r] > t->w.slowest[best]))
            best = r;
    if (best < 0)
        return -1;
    *lag_ms = t->w.lag[best] / t->w.slowest[best] * 1e3;
    return *lag_ms >= t->o.straggler_ms ? best : -1;
}

/* The line (collective: the window's loss over all ranks). */
static int print_line(train_t *t, drt_error_t *e)
{
    double v[2] = {t->w.loss, (double)t->w.steps}, k = (double)t->w.steps, lag = 0;
    int s, rc;

    if ((rc = drt_allreduce(t->c, v, v, 2, DRT_FLOAT64, DRT_SUM, e)) < 0)
        return rc;
    if (drt_rank(t->c) == 0) {
        s = straggler(t, &lag);
        printf("step %" PRIu64 " loss %.6f step %.2f ms compute %.2f ms comm %.2f ms exposed %.2f ms "
               "busbw %.3f GB/s algo %s",
               t->s.step, v[0] / v[1], t->w.step_s / k * 1e3, t->w.compute_s / k * 1e3,
               t->w.comm_s / k * 1e3, t->w.exposed_s / k * 1e3, busbw(t, t->w.bytes, t->w.comm_s),
               drt_algo_name(t->w.algo));
        if (s >= 0)
            printf(" slowest rank %d (node %d) lag %.1f ms\n", s, drt_node_of(t->c, s), lag);
        else
            printf(" slowest none\n");
        fflush(stdout);
    }
    return 0;
}

static void window_reset(train_t *t)
{
    int n = drt_size(t->c);

    memset(t->w.slowest, 0, (size_t)n * sizeof(int));
    memset(t->w.lag, 0, (size_t)n * sizeof(double));
    t->w = (window_t){.slowest = t->w.slowest, .lag = t->w.lag};
}

/* The step's record; every --log-every steps the line, and the window
 * starts over (also when the line's collective failed). */
int telemetry_step(train_t *t, const drt_step_stats_t *st, drt_error_t *e)
{
    int rc = 0;

    if (t->metrics)
        metrics_line(t, st);
    t->w.steps++;
    t->w.loss += t->batch_loss;
    t->w.step_s += st->step_s;
    t->w.compute_s += st->compute_s;
    t->w.comm_s += st->comm_s;
    t->w.exposed_s += st->exposed_s;
    t->w.bytes += (double)st->bytes;
    t->w.algo = st->algo;
    if (st->slowest_rank >= 0) {
        t->w.slowest[st->slowest_rank]++;
        t->w.lag[st->slowest_rank] += st->slowest_lag_s;
    }
    if (t->o.log_every && t->s.step % t->o.log_every == 0) {
        rc = print_line(t, e);
        window_reset(t);
    }
    return rc;
}

/* A file that could not be written (a full disk, /dev/full) is an error:
 * its lines would be missing without a word. */
static int close_file(FILE *f, const char *name)
{
    int bad = ferror(f);

    if ((fclose(f) != 0 || bad)) {
        fprintf(stderr, "ddp-train: %s: cannot write: %s (free space there, or give another file)\n",
                name, strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

int telemetry_close(train_t *t)
{
    int rc = 0;

    if (t->metrics && close_file(t->metrics, t->o.metrics) < 0)
        rc = -1;
    if (t->dump && close_file(t->dump, t->o.dump) < 0)
        rc = -1;
    t->metrics = t->dump = NULL;
    free(t->w.slowest);
    free(t->w.lag);
    return rc;
}
