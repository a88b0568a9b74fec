/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus metrics (DDPRT_METRICS_DIR): each rank keeps counters of its
 * collectives (by operation, algorithm and size class), of the bucketed
 * steps and of faults, and rewrites DIR/ddprt-JOB.STEP-RANK.prom in the text
 * format of node_exporter's textfile collector at most once per
 * DDPRT_METRICS_INTERVAL seconds, when a collective or a step ends. The
 * file is replaced whole (a temporary name the collector skips, then
 * rename), so a scrape never reads half of it, and removed by
 * drt_finalize: a finished job leaves no series behind. A killed rank's
 * file stays; its ddprt_metrics_timestamp_seconds says since when.
 *
 * Writing is best effort: a directory that stops taking files costs one
 * warning, never the training. The counters are updated under a lock:
 * the progress thread ends non-blocking collectives while the caller's
 * thread ends steps. */
#define _GNU_SOURCE /* mkostemp */
#include "../internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_INTERVAL 15.0 /* node_exporter is commonly scraped every 15 to 60 s */
#define N_OPS 5
#define N_ALGOS 3
#define N_SIZES 5

typedef struct {
    uint64_t n;
    double bytes, secs;
    double win_bytes, win_secs; /* since the last write: the bandwidth gauge's window */
    double busbw;               /* bytes/s over the last window that had any */
} cell_t;

struct metrics {
    pthread_mutex_t lock;
    char path[4200], dir[4096];
    char labels[1024]; /* the labels of every series, rebuilt after drt_shrink */
    double interval, next;
    /* the collective in progress (collectives on a communicator are serial) */
    double t0;
    int op;
    double bytes;
    cell_t cell[N_OPS][N_ALGOS][N_SIZES];
    uint64_t failures[N_OPS];
    uint64_t steps, shrinks, lost;
    double step_s, compute_s, comm_s, exposed_s, lag_s;
    int slowest, warned;
};

static const char *const op_names[N_OPS] = {"allreduce", "broadcast", "allgather",
                                            "reduce_scatter", "barrier"};
/* size classes by the collective's size (as nccl-tests counts it) */
static const char *const size_names[N_SIZES] = {"0-4KiB", "4KiB-64KiB", "64KiB-1MiB",
                                                "1MiB-16MiB", "16MiB+"};

static int size_class(double bytes)
{
    int k = 0;

    for (double limit = 4096; k < N_SIZES - 1 && bytes >= limit; limit *= 16)
        k++;
    return k;
}

/* Label values as the text format wants them: \, " and newline escaped. */
static void put_label(char **p, char *end, const char *name, const char *value, int first)
{
    *p += snprintf(*p, (size_t)(end - *p), "%s%s=\"", first ? "" : ",", name);
    for (; value && *value && *p < end - 3; value++) {
        if (*value == '\\' || *value == '"' || *value == '\n')
            *(*p)++ = '\\';
        *(*p)++ = *value == '\n' ? 'n' : *value;
    }
    *p += snprintf(*p, (size_t)(end - *p), "\"");
}

static void make_labels(const drt_comm_t *c, struct metrics *m)
{
    char *p = m->labels, *end = m->labels + sizeof(m->labels), rank[16], local[16];

    snprintf(rank, sizeof(rank), "%d", c->rank);
    snprintf(local, sizeof(local), "%d", c->local_of[c->rank]);
    put_label(&p, end, "slurm_job_id", getenv("SLURM_JOB_ID"), 1);
    put_label(&p, end, "slurm_step_id", getenv("SLURM_STEP_ID"), 0);
    put_label(&p, end, "node", c->names[c->rank], 0);
    put_label(&p, end, "rank", rank, 0);
    put_label(&p, end, "local_rank", local, 0);
    put_label(&p, end, "gpu", getenv(DRT_ENV_GPU), 0);
}

/* "12345" or "12345.0": digits only, else the file is named by the pid */
static int plain_id(const char *s)
{
    if (!s || !*s || strlen(s) > 20)
        return 0;
    return strspn(s, "0123456789") == strlen(s);
}

static int parse_interval(struct metrics *m, drt_error_t *err)
{
    const char *s = getenv(DRT_ENV_METRICS_INTERVAL);
    char *end;

    m->interval = DEFAULT_INTERVAL;
    if (!s)
        return 0;
    m->interval = strtod(s, &end);
    if (end == s || *end || !(m->interval >= 0) || m->interval > 86400)
        return rt_fail(err, DRT_ENV_METRICS_INTERVAL "='%.40s' is not a number of seconds from 0 "
                       "(every collective) to 86400", s);
    return 0;
}

int metrics_open(drt_comm_t *c, drt_error_t *err)
{
    const char *dir = getenv(DRT_ENV_METRICS_DIR), *job = getenv("SLURM_JOB_ID");
    const char *step = getenv("SLURM_STEP_ID");
    struct metrics *m;
    struct stat st;

    if (!dir || !*dir)
        return 0;
    if (strlen(dir) >= sizeof(m->dir))
        return rt_fail(err, DRT_ENV_METRICS_DIR " is longer than %zu bytes", sizeof(m->dir) - 1);
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return rt_fail(err, DRT_ENV_METRICS_DIR " %s: %s (give node_exporter's textfile "
                       "directory, or unset it)", dir, stat(dir, &st) < 0 ? strerror(errno)
                       : "not a directory");
    if (!(m = calloc(1, sizeof(*m))))
        return rt_fail(err, "out of memory for the metrics");
    if (parse_interval(m, err) < 0) {
        free(m);
        return -1;
    }
    snprintf(m->dir, sizeof(m->dir), "%s", dir);
    if (plain_id(job) && plain_id(step ? step : "0"))
        snprintf(m->path, sizeof(m->path), "%s/ddprt-%s.%s-%d.prom", dir, job, step ? step : "0",
                 c->rank);
    else
        snprintf(m->path, sizeof(m->path), "%s/ddprt-pid%ld-%d.prom", dir, (long)getpid(), c->rank);
    pthread_mutex_init(&m->lock, NULL);
    m->slowest = -1;
    make_labels(c, m);
    c->metrics = m;
    rt_log(c, "metrics: %s, every %g s at most", m->path, m->interval);
    return 0;
}

void metrics_close(drt_comm_t *c)
{
    struct metrics *m = c->metrics;

    if (!m)
        return;
    if (unlink(m->path) < 0 && errno != ENOENT)
        rt_warn(c, "metrics: cannot remove %s: %s", m->path, strerror(errno));
    pthread_mutex_destroy(&m->lock);
    free(m);
    c->metrics = NULL;
}

/* ---- the text ---- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(FILE *f, const struct metrics *m, const char *name, const char *extra,
                   double v)
{
    fprintf(f, "%s{%s%s} %.17g\n", name, m->labels, extra ? extra : "", v);
}

/* the collectives' families: one series per class that has run */
static void write_colls(FILE *f, struct metrics *m)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"ddprt_collectives_total", "counter", "Collectives this rank completed."},
        {"ddprt_collective_bytes_total", "counter",
         "Their sizes in bytes (allgather and reduce_scatter: all ranks' parts)."},
        {"ddprt_collective_seconds_total", "counter",
         "Time in them, waits for other ranks included."},
        {"ddprt_collective_bus_bandwidth_bytes_per_second", "gauge",
         "Bus bandwidth (as nccl-tests defines it) over the class's collectives between the "
         "last two writes that had any."},
    };
    char extra[128];

    for (int k = 0; k < 4; k++) {
        family(f, fam[k].name, fam[k].type, fam[k].help);
        for (int o = 0; o < N_OPS; o++)
            for (int a = 0; a < N_ALGOS; a++)
                for (int s = 0; s < N_SIZES; s++) {
                    const cell_t *x = &m->cell[o][a][s];
                    double v = k == 0 ? (double)x->n : k == 1 ? x->bytes : k == 2 ? x->secs
                                                                                  : x->busbw;
                    if (!x->n || (k == 3 && o == TRACE_BARRIER))
                        continue;
                    snprintf(extra, sizeof(extra), ",op=\"%s\",algo=\"%s\",size=\"%s\"",
                             op_names[o], o == TRACE_ALLREDUCE ? drt_algo_name((drt_algo_t)a)
                             : "", size_names[s]);
                    sample(f, m, fam[k].name, extra, v);
                }
    }
    family(f, "ddprt_collective_failures_total", "counter",
           "Collectives that failed (a timeout, a lost rank, a broken connection).");
    for (int o = 0; o < N_OPS; o++) {
        snprintf(extra, sizeof(extra), ",op=\"%s\"", op_names[o]);
        sample(f, m, "ddprt_collective_failures_total", extra, (double)m->failures[o]);
    }
}

static void write_rest(FILE *f, const drt_comm_t *c, const struct metrics *m)
{
    static const char *const step_help[] = {
        "Steps of drt_buckets (gradient buckets), whose times follow.",
        "Their time, drt_buckets_begin to finish.",
        "Their compute: to the last gradient ready.",
        "Their buckets' allreduces, end to end.",
        "Their exposed communication: what finish waited for.",
    };
    static const char *const step_names[] = {"ddprt_steps_total", "ddprt_step_seconds_total",
        "ddprt_step_compute_seconds_total", "ddprt_step_comm_seconds_total",
        "ddprt_step_exposed_comm_seconds_total"};
    const double step_v[] = {(double)m->steps, m->step_s, m->compute_s, m->comm_s, m->exposed_s};
    struct timespec ts;

    for (int k = 0; k < 5; k++) {
        family(f, step_names[k], "counter", step_help[k]);
        sample(f, m, step_names[k], NULL, step_v[k]);
    }
    family(f, "ddprt_slowest_rank", "gauge",
           "The rank last to the buckets in the last step (-1: none yet, or one rank).");
    sample(f, m, "ddprt_slowest_rank", NULL, m->slowest);
    family(f, "ddprt_straggler_lag_seconds", "gauge", "Its mean lag behind the first rank.");
    sample(f, m, "ddprt_straggler_lag_seconds", NULL, m->lag_s);
    family(f, "ddprt_world_size", "gauge", "Ranks in the world now.");
    sample(f, m, "ddprt_world_size", NULL, c->size);
    family(f, "ddprt_lost_ranks_total", "counter", "Ranks found gone and dropped by drt_shrink.");
    sample(f, m, "ddprt_lost_ranks_total", NULL, (double)m->lost);
    family(f, "ddprt_shrinks_total", "counter",
           "Recoveries: drt_shrink calls that rebuilt the world over the survivors.");
    sample(f, m, "ddprt_shrinks_total", NULL, (double)m->shrinks);
    clock_gettime(CLOCK_REALTIME, &ts);
    family(f, "ddprt_metrics_timestamp_seconds", "gauge",
           "When this file was written (a hung or killed rank's falls behind).");
    sample(f, m, "ddprt_metrics_timestamp_seconds", NULL, (double)ts.tv_sec + ts.tv_nsec / 1e9);
}

/* the bandwidth gauges take the window's collectives, then it starts over */
static void close_window(struct metrics *m, int nranks)
{
    /* nccl-tests' factors: allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n */
    static const double per_op[N_OPS] = {2, 0, 1, 1, 0};

    for (int o = 0; o < N_OPS; o++)
        for (int a = 0; a < N_ALGOS; a++)
            for (int s = 0; s < N_SIZES; s++) {
                cell_t *x = &m->cell[o][a][s];
                double f = o == TRACE_BROADCAST ? 1 : per_op[o] * (nranks - 1) / nranks;
                if (x->win_secs > 0)
                    x->busbw = nranks > 1 ? x->win_bytes / x->win_secs * f : 0;
                x->win_bytes = x->win_secs = 0;
            }
}

static int write_file(const drt_comm_t *c, struct metrics *m)
{
    char tmp[4200];
    FILE *f;
    int fd, ok;

    /* the collector reads *.prom only: the temporary name is skipped */
    snprintf(tmp, sizeof(tmp), "%s/.ddprt-metrics.XXXXXX", m->dir);
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
        return -1;
    if (fchmod(fd, 0644) < 0 || !(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    write_colls(f, m);
    write_rest(f, c, m);
    ok = fflush(f) == 0 && !ferror(f);
    if (fclose(f) != 0 || !ok || rename(tmp, m->path) < 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* under m->lock */
static void maybe_write(const drt_comm_t *c, struct metrics *m)
{
    double now = rt_now();

    if (now < m->next)
        return;
    m->next = now + m->interval;
    close_window(m, c->size);
    if (write_file(c, m) < 0 && !m->warned) {
        m->warned = 1;
        rt_warn(c, "metrics: cannot write %s: %s (the run goes on without metrics there; check "
                "the directory's space and permissions)", m->path, strerror(errno));
    }
}

void metrics_enter(drt_comm_t *c, trace_op_t op, size_t count, int dtype)
{
    struct metrics *m = c->metrics;
    size_t esize = dtype == TRACE_BYTES ? 1 : drt_dtype_size((drt_dtype_t)dtype);

    m->t0 = rt_now();
    m->op = (int)op;
    /* nccl-tests' sizes: allgather the gathered whole, reduce_scatter what is scattered */
    m->bytes = (double)count * (double)esize *
               (op == TRACE_ALLGATHER || op == TRACE_REDUCE_SCATTER ? c->size : 1);
}

void metrics_leave(drt_comm_t *c, int rc)
{
    struct metrics *m = c->metrics;
    double secs = rt_now() - m->t0;
    int a = m->op == TRACE_ALLREDUCE && c->cpu.last < N_ALGOS ? (int)c->cpu.last : 0;
    cell_t *x = &m->cell[m->op][a][size_class(m->bytes)];

    pthread_mutex_lock(&m->lock);
    if (rc < 0) {
        m->failures[m->op]++;
    } else {
        x->n++;
        x->bytes += m->bytes;
        x->secs += secs;
        x->win_bytes += m->bytes;
        x->win_secs += secs;
    }
    maybe_write(c, m);
    pthread_mutex_unlock(&m->lock);
}

void metrics_step(drt_comm_t *c, const drt_step_stats_t *st)
{
    struct metrics *m = c->metrics;

    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->steps++;
    m->step_s += st->step_s;
    m->compute_s += st->compute_s;
    m->comm_s += st->comm_s;
    m->exposed_s += st->exposed_s;
    m->slowest = st->slowest_rank;
    m->lag_s = st->slowest_rank >= 0 ? st->slowest_lag_s : 0;
    maybe_write(c, m);
    pthread_mutex_unlock(&m->lock);
}

void metrics_shrink(drt_comm_t *c, int lost)
{
    struct metrics *m = c->metrics;

    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->shrinks++;
    m->lost += (uint64_t)lost;
    make_labels(c, m); /* the rank's number changed; the file's name stays */
    m->next = 0;       /* written now: a recovery is news */
    maybe_write(c, m);
    pthread_mutex_unlock(&m->lock);
}
