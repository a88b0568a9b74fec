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
#include "files.h"

#include <errno.h>
#include <signal.h>
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

/* A collective failed: with --elastic and a lost rank, 1 (recover); else
 * the run ends, leaving the lost nodes' names for a requeue to exclude,
 * and rank 0 first finishes the checkpoint its writer has under way (it
 * was whole before the loss; exiting would lose it and make the requeue
 * redo those steps). */
static int lost_or_fatal(train_t *t, int rc, const char *what, const drt_error_t *e)
{
    if (rc == DRT_ELOST && t->o.elastic)
        return 1;
    if (rc == DRT_ELOST) {
        elastic_note_agreed(t);
        checkpoint_close(t);
    }
    fatal(what, e);
    return -1;
}

/* The ready callback of model_step: backward finished gradient i. A
 * survivor weights its mean gradient by its share of the global batch. */
static void grad_ready(void *ctx, int i)
{
    train_t *t = ctx;
    drt_error_t e;
    int rc;

    if (t->step_lost)
        return; /* the step is abandoned: finish says so */
    if (t->gscale != 1.0f)
        for (size_t k = 0; k < t->p[i].n; k++)
            t->p[i].g[k] *= t->gscale;
    if ((rc = drt_buckets_ready(t->buckets, i, &e)) < 0)
        t->step_lost = lost_or_fatal(t, rc, "gradient allreduce", &e);
}

static double unix_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* fault injection (--kill-rank/--kill-node): as a node's power failing
 * would, at the point of the step --kill-in names (the step starts with
 * the previous one's number). The wall clock of the kill, and of the
 * survivors' first step after it, on stderr: the recovery benchmark's two
 * ends. */
static void maybe_die(const train_t *t, int where)
{
    if (t->o.kill_step && where == t->o.kill_in &&
        t->s.step + (where == KILL_IN_STEP) == t->o.kill_step &&
        (t->rank0 == t->o.kill_rank || t->node0 == t->o.kill_node)) {
        fprintf(stderr, "ddp-train: rank %d: --kill-step %" PRIu64 ": SIGKILL at %.6f\n",
                t->rank0, t->o.kill_step, unix_now());
        raise(SIGKILL);
    }
}

static void first_step_after(train_t *t)
{
    if (!t->recovering)
        return;
    t->recovering = 0;
    if (t->o.kill_step && drt_rank(t->c) == 0)
        fprintf(stderr, "ddp-train: first step after the recovery done at %.6f\n", unix_now());
}

/* The step's samples of this rank, logged before its gradient can reach the
 * allreduce: a rank killed once the survivors have applied its gradient
 * has logged them; a step lost and redone is logged again, with the
 * smaller world (tests/integration/samples.py keeps those lines). */
static void log_samples(train_t *t, const uint32_t *perm, uint64_t offset)
{
    int world = drt_size(t->c), r = drt_rank(t->c);

    if (!t->samples)
        return;
    for (int i = 0; i < t->B; i++)
        fprintf(t->samples, "%" PRIu64 " %" PRIu64 " %d %u\n", t->s.epoch, t->s.step + 1, world,
                perm[offset + (size_t)r + (size_t)world * (size_t)i]);
    if (fflush(t->samples) != 0)
        fprintf(stderr, "ddp-train: --sample-log: cannot write\n");
}

static void slow_down(const train_t *t)
{
    struct timespec ts = {t->o.slow_ms / 1000, (long)(t->o.slow_ms % 1000) * 1000000L};

    if (t->o.slow_ms > 0 && drt_rank(t->c) == t->o.slow_rank)
        nanosleep(&ts, NULL);
}

/* One step: this rank's part of the global batch, forward and backward
 * with the buckets' allreduces overlapping backward, then SGD. 1 when a
 * rank was lost (--elastic): nothing of the step was applied here. */
static int step(train_t *t, const uint32_t *perm, drt_step_stats_t *st)
{
    int world = drt_size(t->c), B = t->B, rc;
    drt_error_t e;
    double loss;

    data_batch(t->data, perm, t->s.offset, world, drt_rank(t->c), B, t->x, t->y);
    log_samples(t, perm, t->s.offset);
    if ((rc = drt_buckets_begin(t->buckets, &e)) < 0)
        return lost_or_fatal(t, rc, "gradient buckets", &e);
    slow_down(t);
    maybe_die(t, KILL_IN_STEP);
    t->step_lost = 0;
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
    if ((rc = drt_buckets_finish(t->buckets, st, &e)) < 0 || t->step_lost)
        return t->step_lost ? 1 : lost_or_fatal(t, rc, "gradient allreduce", &e);
    model_sgd(t->model, t->lr, t->o.momentum);
    t->s.step++;
    t->s.offset += t->G;
    t->s.loss_sum += loss;
    t->s.loss_count += (uint64_t)B;
    t->last_loss = loss;
    t->last_B = B;
    t->batch_loss = loss / B;
    first_step_after(t);
    return 0;
}

/* The epoch's mean loss over all ranks' samples: one small allreduce.
 * 1 when a rank was lost (--elastic). */
static int print_epoch(train_t *t)
{
    double v[2] = {t->s.loss_sum, (double)t->s.loss_count};
    drt_error_t e;
    int rc;

    if ((rc = drt_allreduce(t->c, v, v, 2, DRT_FLOAT64, DRT_SUM, &e)) < 0)
        return lost_or_fatal(t, rc, "epoch loss", &e);
    if (drt_rank(t->c) == 0)
        printf("Epoch %" PRIu64 ", Loss: %.6f\n", t->s.epoch, v[1] > 0 ? v[0] / v[1] : 0.0);
    fflush(stdout);
    t->s.loss_sum = 0;
    t->s.loss_count = 0;
    return 0;
}

enum { AFTER_GO_ON, AFTER_STOP, AFTER_LOST };

/* a checkpoint of the step just done; AFTER_LOST as lost_or_fatal says */
static int checkpoint_step(train_t *t, int wait)
{
    drt_error_t e;
    int rc;

    maybe_die(t, KILL_IN_CHECKPOINT);
    if ((rc = checkpoint_now(t, wait, &e)) < 0 && lost_or_fatal(t, rc, "checkpoint", &e))
        return AFTER_LOST;
    return AFTER_GO_ON;
}

/* After a step: telemetry, the weights' dump, a checkpoint when due.
 * AFTER_STOP when the ranks agreed to stop (preemption). AFTER_LOST when
 * a rank was lost in telemetry's or the checkpoint's collective (with
 * --elastic): every survivor has done the step, so they recover and go on
 * from it; its checkpoint is left to the next one due. The dump is flushed
 * every step, as --metrics is: a rank a second SIGTERM ends leaves every
 * finished step's record. */
static int after_step(train_t *t, const drt_step_stats_t *st)
{
    drt_error_t e;
    int rc;

    maybe_die(t, KILL_IN_TELEMETRY);
    rc = telemetry_step(t, st, &e);
    if (t->dump && (train_dump(t->dump, t->s.step, t->model) < 0 || fflush(t->dump) != 0)) {
        fprintf(stderr, "ddp-train: --dump-weights %s: cannot write: %s (free space there, or give "
                "another file)\n", t->o.dump, strerror(errno));
        exit(1);
    }
    if (rc < 0 && lost_or_fatal(t, rc, "telemetry", &e))
        return AFTER_LOST;
    if (st->stop)
        return checkpoint_step(t, 1) == AFTER_LOST ? AFTER_LOST : AFTER_STOP;
    if (t->o.ckpt_every && t->s.step % t->o.ckpt_every == 0)
        return checkpoint_step(t, t->o.sync_ckpt);
    return AFTER_GO_ON;
}

/* --sample-log FILE: this rank's FILE.RANK */
static void open_sample_log(train_t *t)
{
    char path[4096], err[300];

    if (!t->o.sample_log)
        return;
    snprintf(path, sizeof(path), "%s.%d", t->o.sample_log, drt_rank(t->c));
    /* appended: a resumed run (train-elastic.sbatch) adds to the first run's */
    if (!(t->samples = train_output_open(path, 1, err, sizeof(err)))) {
        fprintf(stderr, "ddp-train: --sample-log %s: %s\n", path, err);
        exit(1);
    }
}

/* The epoch's steps, then its loss line. A recovery may step back over
 * the epoch's last step (elastic.c), so a failed loss line goes round the
 * same epoch again. */
static int run(train_t *t)
{
    drt_step_stats_t st;
    int rc;

    elastic_start(t);
    open_sample_log(t);
    watch_preemption();
    while (t->s.epoch < (uint64_t)t->o.epochs) {
        data_permutation(t->perm, t->o.samples, t->o.seed, t->s.epoch);
        while (t->s.offset + t->G <= t->o.samples) {
            /* before the step: a rerun of a finished --max-steps run does none */
            if (t->o.max_steps && t->s.step >= t->o.max_steps)
                return 0;
            rc = step(t, t->perm, &st) ? AFTER_LOST : after_step(t, &st);
            if (rc == AFTER_STOP)
                return preempted(t);
            if (rc == AFTER_LOST) {
                if ((rc = elastic_recover(t, elastic_clock())) != 0)
                    return rc;
                t->recovering = 1;
            }
        }
        if (print_epoch(t)) {
            if ((rc = elastic_recover(t, elastic_clock())) != 0)
                return rc;
            continue;
        }
        t->s.epoch++;
        t->s.offset = 0;
    }
    return 0;
}

/* The end state too: a rerun finds nothing left to do. A rank lost in its
 * collective (--elastic) leaves the survivors to save it. */
static int end_checkpoint(train_t *t)
{
    int rc;

    while (t->o.ckpt_dir && t->s.step != t->ckpt_step)
        if (checkpoint_step(t, 1) == AFTER_LOST && (rc = elastic_recover(t, elastic_clock())) != 0)
            return rc;
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
    if (rc == 0)
        rc = end_checkpoint(&t);
    rc = finish(&t, rc);
    if (t.samples)
        fclose(t.samples);
    return rc;
}
