/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's start and end: the world, the model, the data, the buckets;
 * the final checkpoint and the weights' checksum. */
#include "train.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ddp-train: %s: %s\n", what, why);
    exit(1);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);

    if (!p)
        die("out of memory", "the data, the batch or the model does not fit (make them smaller)");
    return p;
}

/* Gradients in model order; the buckets take them from the last. */
static void make_buckets(train_t *t)
{
    size_t cap = (size_t)(t->o.bucket_mb * (1 << 20)), first = (size_t)(t->o.first_bucket_mb * (1 << 20));
    drt_error_t e;

    if (t->o.no_overlap)
        cap = first = SIZE_MAX;
    if (drt_buckets_create(t->c, cap, first, DRT_AVG, &t->buckets, &e) < 0)
        die("gradient buckets", e.text);
    for (int i = 0; i < t->np; i++)
        if (drt_buckets_add(t->buckets, t->p[i].g, t->p[i].n, DRT_FLOAT32, &e) < 0)
            die("gradient buckets", e.text);
}

static void make_model(train_t *t)
{
    char err[300];

    t->data = data_create(t->o.samples, t->o.seed, err, sizeof(err));
    if (!t->data)
        die("the data set", err);
    t->model = model_create(t->o.model, t->o.hidden, t->o.layers, t->o.seed, err, sizeof(err));
    if (!t->model)
        die("the model", err);
    t->np = model_params(t->model, &t->p);
    t->x = xcalloc((size_t)t->o.batch * DATA_FEATURES, sizeof(float));
    t->y = xcalloc((size_t)t->o.batch, sizeof(int));
    t->perm = xcalloc(t->o.samples, sizeof(uint32_t));
}

static void banner(const train_t *t)
{
    int n = drt_size(t->c);

    if (drt_rank(t->c))
        return;
    printf("ddp-train: %d rank%s on %d node%s, model %s (%zu parameters), batch %d x %d, lr %g, "
           "algo %s%s\n",
           n, n == 1 ? "" : "s", drt_node_count(t->c), drt_node_count(t->c) == 1 ? "" : "s", t->o.model, model_size(t->model), t->o.batch, n, t->lr,
           drt_algo_name(t->algo), t->o.no_overlap ? ", one allreduce after backward" : "");
    fflush(stdout);
}

/* What needs the world size: every rank decides the same. */
static void check_world(const train_t *t)
{
    uint64_t n = (uint64_t)drt_size(t->c), G = n * (uint64_t)t->o.batch;

    if (G > t->o.samples) {
        fprintf(stderr, "ddp-train: --batch-size %d x %" PRIu64 " ranks = %" PRIu64 " samples a step, more "
                "than --samples %" PRIu64 ": no step would run (lower --batch-size or raise --samples)\n",
                t->o.batch, n, G, t->o.samples);
        exit(2);
    }
    if (t->o.slow_rank >= (int)n) {
        fprintf(stderr, "ddp-train: --slow-rank %d: the world has ranks 0 to %" PRIu64 "\n",
                t->o.slow_rank, n - 1);
        exit(2);
    }
}

void watch_preemption(void)
{
    drt_error_t e;

    if (drt_preempt_watch(&e) < 0)
        die("preemption", e.text);
}

/* Preemption before the loop: SIGUSR1 is caught from here on (SLURM's
 * --signal=USR1@T may come while the ranks resume: they stop after their
 * first step, saved), SIGTERM not yet: until the first step there is
 * nothing new to save, and a rank blocked on the way (stdout a pipe nobody
 * reads, rank 0 slow to load a checkpoint) must end on the first SIGTERM,
 * from `timeout`, kill or scancel. The loop's watch_preemption catches it. */
static void watch_usr1(void)
{
    watch_preemption();
    signal(SIGTERM, SIG_DFL);
}

void setup(train_t *t)
{
    drt_error_t e;

    if (drt_init(&t->c, &e) < 0)
        die("bootstrap", e.text);
    check_world(t);
    drt_auto_pin(t->c, 1); /* auto decides once per size class: a resume replays it (state.c) */
    make_model(t);
    make_buckets(t);
    watch_usr1();
    t->lr = t->o.lr * (t->o.lr_scale ? drt_size(t->c) : 1);
    resume(t); /* sets the algorithm: the checkpoint's unless --algo */
    drt_set_algo(t->c, t->algo);
    telemetry_open(t);
    banner(t);
}

/* FNV-1a over every weight's bytes, in model order: equal checksums, equal
 * weights (bit for bit), to be compared between runs. */
static uint64_t checksum(const train_t *t)
{
    uint64_t h = 1469598103934665603ull;

    for (int i = 0; i < t->np; i++) {
        const unsigned char *b = (const unsigned char *)t->p[i].w;
        for (size_t k = 0; k < t->p[i].n * sizeof(float); k++)
            h = (h ^ b[k]) * 1099511628211ull;
    }
    return h;
}

int finish(train_t *t, int rc)
{
    checkpoint_close(t);
    if (rc == 0 && t->ckpt_failed) {
        fprintf(stderr, "ddp-train: the last checkpoint was not written (the error above says why)\n");
        rc = 1;
    }
    if (telemetry_close(t) < 0 && rc == 0)
        rc = 1;
    if (rc == 0 && drt_rank(t->c) == 0)
        printf("final weights checksum: %016" PRIx64 " (after %" PRIu64 " steps)\n", checksum(t),
               t->s.step);
    fflush(stdout);
    drt_buckets_free(t->buckets);
    drt_finalize(t->c);
    model_free(t->model);
    data_free(t->data);
    free(t->x);
    free(t->y);
    free(t->perm);
    return rc;
}
