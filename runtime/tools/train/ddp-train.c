/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ddp-train: data-parallel training on libddprt, the C counterpart of the
 * PyTorch DDP tutorial. Every rank holds the whole model; each step it
 * computes gradients on its own shard of the batch, libddprt averages them
 * across ranks while backward is still running (gradient buckets), and
 * every rank applies the same SGD update, so the weights stay identical.
 *
 * Around that loop: checkpoints (rank 0 writes them in the background),
 * preemption (all ranks stop after the same step and save), and one
 * telemetry line every few steps that names a straggler.
 *
 * Launch: `srun ddp-train ...` in a job with --ddp-topo, or `ddp-run -n 4
 * ddp-train ...` on one machine. `ddp-train --help` lists the options.
 */
#include "train.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fatal(const char *what, const drt_error_t *e)
{
    fprintf(stderr, "ddp-train: %s: %s\n", what, e->text);
    exit(1);
}

/* The ready callback of model_step: backward finished gradient i. */
static void grad_ready(void *ctx, int i)
{
    train_t *t = ctx;
    drt_error_t e;

    if (drt_buckets_ready(t->buckets, i, &e) < 0)
        fatal("gradient allreduce", &e);
}

static void slow_down(const train_t *t)
{
    struct timespec ts = {t->o.slow_ms / 1000, (long)(t->o.slow_ms % 1000) * 1000000L};

    if (t->o.slow_ms > 0 && drt_rank(t->c) == t->o.slow_rank)
        nanosleep(&ts, NULL);
}

/* One step: this rank's part of the global batch, forward and backward
 * with the buckets' allreduces overlapping backward, then SGD. */
static void step(train_t *t, const uint32_t *perm, drt_step_stats_t *st)
{
    int world = drt_size(t->c), B = t->o.batch;
    drt_error_t e;
    double loss;

    data_batch(t->data, perm, t->s.offset, world, drt_rank(t->c), B, t->x, t->y);
    if (drt_buckets_begin(t->buckets, &e) < 0)
        fatal("gradient buckets", &e);
    slow_down(t);
    loss = model_step(t->model, t->x, t->y, B, grad_ready, t);
    if (loss < 0) {
        fprintf(stderr, "ddp-train: out of memory for the batch's activations (use a smaller --batch-size)\n");
        exit(1);
    }
    if (!isfinite(loss)) {
        fprintf(stderr, "ddp-train: rank %d: the loss is %g at step %" PRIu64 ": training diverged "
                "(lower --lr)\n", drt_rank(t->c), loss, t->s.step + 1);
        exit(1);
    }
    if (drt_buckets_finish(t->buckets, st, &e) < 0)
        fatal("gradient allreduce", &e);
    model_sgd(t->model, t->lr, t->o.momentum);
    t->s.offset += (uint64_t)world * (uint64_t)B;
    t->s.step++;
    t->s.loss_sum += loss;
    t->s.loss_count += (uint64_t)B;
    t->batch_loss = loss / B;
}

/* The epoch's mean loss over all ranks' samples: one small allreduce. */
static void print_epoch(train_t *t)
{
    double v[2] = {t->s.loss_sum, (double)t->s.loss_count};
    drt_error_t e;

    if (drt_allreduce(t->c, v, v, 2, DRT_FLOAT64, DRT_SUM, &e) < 0)
        fatal("epoch loss", &e);
    if (drt_rank(t->c) == 0)
        printf("Epoch %" PRIu64 ", Loss: %.6f\n", t->s.epoch, v[1] > 0 ? v[0] / v[1] : 0.0);
    fflush(stdout);
    t->s.loss_sum = 0;
    t->s.loss_count = 0;
}

/* After a step: telemetry, the weights' dump, a checkpoint when due.
 * Returns 1 when the ranks agreed to stop (preemption). The dump is
 * flushed every step, as --metrics is: a rank a second SIGTERM ends leaves
 * every finished step's record. */
static int after_step(train_t *t, const drt_step_stats_t *st)
{
    telemetry_step(t, st);
    if (t->dump && (train_dump(t->dump, t->s.step, t->model) < 0 || fflush(t->dump) != 0)) {
        fprintf(stderr, "ddp-train: --dump-weights %s: cannot write: %s (free space there, or give "
                "another file)\n", t->o.dump, strerror(errno));
        exit(1);
    }
    if (st->stop) {
        checkpoint_now(t, 1);
        return 1;
    }
    if (t->o.ckpt_every && t->s.step % t->o.ckpt_every == 0)
        checkpoint_now(t, t->o.sync_ckpt);
    return 0;
}

static int run(train_t *t)
{
    int world = drt_size(t->c);
    uint64_t G = (uint64_t)world * (uint64_t)t->o.batch;
    drt_step_stats_t st;

    watch_preemption();
    for (; t->s.epoch < (uint64_t)t->o.epochs; t->s.epoch++, t->s.offset = 0) {
        data_permutation(t->perm, t->o.samples, t->o.seed, t->s.epoch);
        while (t->s.offset + G <= t->o.samples) {
            /* before the step: a rerun of a finished --max-steps run does none */
            if (t->o.max_steps && t->s.step >= t->o.max_steps)
                return 0;
            step(t, t->perm, &st);
            if (after_step(t, &st))
                return preempted(t);
        }
        print_epoch(t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    train_t t;
    int rc;

    memset(&t, 0, sizeof(t));
    rc = options_parse(&t.o, argc, argv);
    if (rc >= 0) /* --help, --plot, --compare, or a bad option */
        return rc;
    setup(&t);
    rc = run(&t);
    rc = finish(&t, rc);
    return rc;
}
