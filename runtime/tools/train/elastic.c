/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train --elastic: keep training on the survivors of a lost rank.
 *
 * A step during which a rank died is abandoned on every survivor: its
 * allreduce fails (DRT_ELOST) before the update, so no survivor applies a
 * half-reduced gradient. A survivor whose allreduce had already completed
 * may have applied that step (the dead rank sent its last bytes, then
 * died), but never the next: a step's allreduce completes only once every
 * rank entered it. So survivors differ by at most one step, and one that
 * is behind hands its weights and momentum to those ahead (one broadcast
 * per recovery, instead of a copy of the model every step). Then the rest of the
 * epoch is re-sharded over the survivors: the global batch stays
 * G = ranks x --batch-size of the run's start, rank r of M takes the
 * step's samples r, r+M, ... (G/M of them, one more for the first G%M
 * ranks), and its gradient, the mean over its own batch, is weighted by
 * B_r x M / G before the average, so the update is the mean over the G
 * samples as before. The learning rate stays. */
#include "train.h"
#include "files.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double elastic_clock(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ddp-train: %s: %s\n", what, why);
    exit(1);
}

void elastic_start(train_t *t)
{
    t->G = (uint64_t)drt_size(t->c) * (uint64_t)t->o.batch;
    t->B = t->o.batch;
    t->gscale = 1.0f;
    t->rank0 = drt_rank(t->c);
    t->node0 = drt_node_rank(t->c);
}

/* A survivor a step ahead takes the state of one that is not: the lowest
 * such rank broadcasts its weights, momentum and whether the momentum
 * buffers exist; the others undo their own bookkeeping of that step. */
static void share_state(train_t *t, int src)
{
    int32_t started = model_momentum_started(t->model);
    drt_error_t e;

    for (int i = 0; i < t->np; i++)
        if (drt_broadcast(t->c, t->p[i].w, t->p[i].n * sizeof(float), src, &e) < 0 ||
            drt_broadcast(t->c, t->p[i].m, t->p[i].n * sizeof(float), src, &e) < 0)
            die("--elastic: after the recovery", e.text);
    if (drt_broadcast(t->c, &started, sizeof(started), src, &e) < 0)
        die("--elastic: after the recovery", e.text);
    model_set_momentum_started(t->model, started != 0);
}

/* an allreduce that changes nothing yet: DRT_ELOST when another rank was
 * lost meanwhile (the caller shrinks again), any other failure ends the run */
static int agree(train_t *t, double *v, int n, drt_op_t op)
{
    drt_error_t e;
    int rc = drt_allreduce(t->c, v, v, (size_t)n, DRT_FLOAT64, op, &e);

    if (rc < 0 && rc != DRT_ELOST)
        die("--elastic: after the recovery", e.text);
    return rc;
}

/* Every survivor at the same step, with the same weights. A loss while
 * the weights are handed over ends the run (some are half overwritten). */
static int align_steps(train_t *t)
{
    double v[3] = {(double)t->s.step, -(double)t->s.step, 0};

    if (agree(t, v, 2, DRT_MAX) < 0)
        return DRT_ELOST;
    if (v[0] == -v[1])
        return 0; /* all at one step */
    if (v[0] + v[1] > 1) {
        fprintf(stderr, "ddp-train: --elastic: the survivors are at steps %.0f to %.0f: cannot "
                "line them up (a bug: please report it)\n", -v[1], v[0]);
        exit(1);
    }
    /* the lowest rank at the earlier step: -rank's maximum */
    v[2] = t->s.step == (uint64_t)-v[1] ? -(double)drt_rank(t->c) : -1e9;
    if (agree(t, &v[2], 1, DRT_MAX) < 0)
        return DRT_ELOST;
    if (t->s.step == (uint64_t)v[0]) {
        t->s.step--;
        t->s.offset -= t->G;
        t->s.loss_sum -= t->last_loss;
        t->s.loss_count -= (uint64_t)t->last_B;
    }
    share_state(t, (int)-v[2]);
    return 0;
}

/* The epoch's loss so far, into rank 0 as a checkpoint's fold does: the
 * lost ranks' running sums went with them, so the survivors' mean stands
 * for the samples they took (a checkpoint counts the loss of every sample
 * of the epoch used). */
static int fold_survivors_loss(train_t *t)
{
    double v[2] = {t->s.loss_sum, (double)t->s.loss_count};

    if (agree(t, v, 2, DRT_SUM) < 0)
        return DRT_ELOST;
    t->s.loss_sum = t->s.loss_count = 0;
    if (drt_rank(t->c) == 0 && t->s.offset) {
        t->s.loss_count = t->s.offset;
        t->s.loss_sum = v[1] > 0 ? v[0] * (double)t->s.offset / v[1] : 0;
    }
    return 0;
}

/* This rank's share of the step's G samples among M ranks. */
static void reshard(train_t *t)
{
    int M = drt_size(t->c), r = drt_rank(t->c);
    int B = (int)(t->G / (uint64_t)M) + (r < (int)(t->G % (uint64_t)M));

    free(t->x);
    free(t->y);
    t->x = calloc((size_t)B * DATA_FEATURES, sizeof(float));
    t->y = calloc((size_t)B, sizeof(int));
    if (!t->x || !t->y)
        die("--elastic", "out of memory for the larger per-rank batch");
    t->B = B;
    t->gscale = (float)((double)B * M / (double)t->G);
}

/* Lost nodes, one name a line, in DIR/lost-nodes: what a requeue excludes
 * (sbatch/train-requeue.sbatch). Appended, by whichever survivor writes. */
void elastic_note_lost(train_t *t, const char *const *names, int n)
{
    char path[4096], err[300];
    FILE *f;

    if (!t->o.ckpt_dir || n <= 0)
        return;
    snprintf(path, sizeof(path), "%s/lost-nodes", t->o.ckpt_dir);
    if (!(f = train_output_open(path, 1, err, sizeof(err)))) {
        fprintf(stderr, "ddp-train: %s: %s\n", path, err);
        return;
    }
    for (int i = 0; i < n; i++)
        if (names[i] && (i == 0 || strcmp(names[i], names[i - 1])))
            fprintf(f, "%s\n", names[i]);
    if (fclose(f) != 0)
        fprintf(stderr, "ddp-train: %s: cannot write\n", path);
}

/* What this rank knows is gone, before any agreement (none was reached). */
static void elastic_note_known(train_t *t)
{
    const char *names[64];
    int n = 0;

    for (int i = 0; i < drt_lost_count(t->c) && n < 64; i++)
        names[n++] = drt_node_name(t->c, drt_lost_rank(t->c, i));
    elastic_note_lost(t, names, n);
}

/* A run that stops for a lost rank (no --elastic) names the lost nodes
 * only once the survivors agree on them, and only one of them writes: a
 * survivor that saw another one exit before it learnt of the loss (the
 * abort notice is a datagram, best effort) would name that healthy node,
 * and a requeue would exclude it. Agreement is drt_shrink's, bounded by
 * DDPRT_TIMEOUT; when it fails (the launcher stopping the survivors
 * first, this rank left out) each writes what it knows, so that the dead
 * node is named all the same. */
void elastic_note_agreed(train_t *t)
{
    drt_shrink_info_t in;
    drt_error_t e;

    if (drt_shrink(t->c, &in, &e) < 0) {
        elastic_note_known(t);
        return;
    }
    if (drt_rank(t->c) == 0)
        elastic_note_lost(t, in.lost_nodes, in.nlost);
}

/* "lost rank 2 on node n2", "lost ranks 2,3 on node n2", "...; rank 5 on node n3" */
static void describe(const drt_shrink_info_t *in, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = 0;
    for (int i = 0; i < in->nlost && o + 80 < len; i++) {
        int same = i > 0 && !strcmp(in->lost_nodes[i], in->lost_nodes[i - 1]);
        int more = i + 1 < in->nlost && !strcmp(in->lost_nodes[i], in->lost_nodes[i + 1]);
        if (same)
            o += (size_t)snprintf(buf + o, len - o, ",%d", in->lost_ranks[i]);
        else
            o += (size_t)snprintf(buf + o, len - o, "%s%s %d", i ? "; " : "lost ",
                                  more ? "ranks" : "rank", in->lost_ranks[i]);
        if (!more)
            o += (size_t)snprintf(buf + o, len - o, " on node %s", in->lost_nodes[i]);
    }
}

/* The new rank 0 saves checkpoints from now on. */
static void own_checkpoints(train_t *t)
{
    drt_error_t e;

    if (drt_rank(t->c) != 0 || !t->o.ckpt_dir || t->ckpt)
        return;
    if (drt_ckpt_open(t->o.ckpt_dir, t->o.ckpt_local, t->o.keep, &t->ckpt, &e) < 0)
        die("--elastic: --checkpoint-dir", e.text);
}

int elastic_recover(train_t *t, double t_fail)
{
    drt_shrink_info_t in;
    drt_error_t e;
    char what[512];
    int old = drt_size(t->c), rc;

    do { /* again when another rank is lost before the survivors agree */
        if (drt_shrink(t->c, &in, &e) < 0) {
            elastic_note_known(t);
            die("--elastic: the survivors could not re-form", e.text);
        }
        describe(&in, what, sizeof(what));
        if (drt_rank(t->c) == 0)
            elastic_note_lost(t, in.lost_nodes, in.nlost);
    } while (align_steps(t) == DRT_ELOST || fold_survivors_loss(t) == DRT_ELOST);
    own_checkpoints(t);
    if (in.new_size < t->o.min_ranks) {
        if (drt_rank(t->c) == 0)
            fprintf(stderr, "ddp-train: world %d -> %d (%s): below --min-ranks %d: saving a "
                    "checkpoint and stopping for a requeue\n", old, in.new_size, what,
                    t->o.min_ranks);
        if ((rc = checkpoint_now(t, 1, &e)) == DRT_ELOST)
            return elastic_recover(t, t_fail); /* another rank lost: shrink again */
        if (rc < 0)
            die("checkpoint", e.text);
        return TRAIN_EXIT_PREEMPTED;
    }
    reshard(t);
    if (drt_rank(t->c) == 0) {
        printf("recovered: world %d -> %d (%s) in %.3f s\n", old, in.new_size, what,
               elastic_clock() - t_fail);
        fflush(stdout);
    }
    return 0;
}
