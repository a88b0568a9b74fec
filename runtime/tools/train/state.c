/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's checkpoints: what a run needs to continue bit for bit.
 *
 * The ranks' weights and momentum are identical (the same averaged
 * gradients, the same update), so rank 0 alone saves them, with the
 * sampler's position (epoch, samples of it used), the step, the epoch's
 * loss so far and the settings that must not change on resume. On start,
 * rank 0 loads the newest valid checkpoint and broadcasts it; every rank
 * checks the settings the same way, so all accept or all refuse. The
 * shuffles need no saved generator state: each epoch's order is a pure
 * function of seed + epoch (data.h). The "auto" section holds --algo
 * auto's decisions (drt_auto_state), so a resumed run reduces each bucket
 * with the algorithm the uninterrupted run used: flat and hier add in
 * different orders, and their last bits differ. */
#include "train.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define META_MAX 2048
#define EPOCHS_MAX 1000000 /* options.c's --epochs limit: no run reaches a later epoch */
#define BATCH_MAX (1 << 20) /* ... and --batch-size's */
/* One sample's loss, -log softmax(z)[y] (model.c), is at most the float
 * logits' widest gap plus log(classes): no sum of n exceeds n times this. */
#define LOSS_MAX (2.0 * FLT_MAX + 16)

/* the meta section, parsed */
typedef struct {
    uint64_t version, hidden, layers, samples, seed, epoch, offset, step, world, batch, started,
        loss_count;
    char model[16], algo_name[16];
    drt_algo_t algo;
    double loss_sum;
} meta_t;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ddp-train: %s: %s\n", what, why);
    exit(1);
}

/* ---- the "meta" section: key value lines ---- */

static void meta_write(const train_t *t, char *buf, size_t len)
{
    snprintf(buf, len,
             "ddp-train 1\nmodel %s\nhidden %d\nlayers %d\nsamples %" PRIu64 "\nseed %" PRIu64
             "\nepoch %" PRIu64 "\noffset %" PRIu64 "\nstep %" PRIu64 "\nworld %d\nbatch %d\n"
             "algo %s\nmomentum_started %d\nloss_sum %a\nloss_count %" PRIu64 "\n",
             t->o.model, t->o.hidden, t->o.layers, t->o.samples, t->o.seed, t->s.epoch,
             t->s.offset, t->s.step, drt_size(t->c), t->o.batch, drt_algo_name(t->algo),
             (int)model_momentum_started(t->model), t->s.loss_sum, t->s.loss_count);
}

/* the value of `key` in meta, or NULL */
static const char *meta_get(const char *meta, const char *key, char *val, size_t len)
{
    size_t k = strlen(key);

    for (const char *l = meta; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        if (n > k && !strncmp(l, key, k) && l[k] == ' ' && n - k - 1 < len) {
            memcpy(val, l + k + 1, n - k - 1);
            val[n - k - 1] = 0;
            return val;
        }
    }
    return NULL;
}

/* A number as meta_write wrote it: digits only, no sign or space, no wrap. */
static int meta_u64(const char *meta, const char *key, uint64_t *v)
{
    char buf[64], *end;

    if (!meta_get(meta, key, buf, sizeof(buf)) || buf[0] < '0' || buf[0] > '9')
        return -1;
    errno = 0;
    *v = strtoull(buf, &end, 10);
    return *end || errno ? -1 : 0;
}

/* The fields against each other, as a run writes them (ddp-train.c's
 * step and print_epoch, fold_loss): a step takes at least one sample of
 * its epoch, so no more steps than samples seen (EPOCHS_MAX bounds them
 * far below what the next run could not resume); this epoch's loss is
 * summed over exactly the samples of it used, each sample's at most
 * LOSS_MAX; momentum starts with the first step. Limits, epoch and
 * samples small enough that the products cannot wrap. */
static int meta_consistent(const meta_t *m, char *why, size_t len)
{
    if (m->step > m->epoch * m->samples + m->offset)
        snprintf(why, len, "its state is inconsistent: step %" PRIu64 " is more steps than the %"
                 PRIu64 " samples seen by epoch %" PRIu64 ", sample %" PRIu64, m->step,
                 m->epoch * m->samples + m->offset, m->epoch, m->offset);
    else if (m->loss_count != m->offset)
        snprintf(why, len, "its state is inconsistent: the loss of %" PRIu64 " samples, but %" PRIu64
                 " of the epoch were used", m->loss_count, m->offset);
    else if (m->loss_sum < 0 || m->loss_sum > (double)m->loss_count * LOSS_MAX)
        snprintf(why, len, "its state is inconsistent: a loss sum of %g over %" PRIu64 " samples",
                 m->loss_sum, m->loss_count);
    else if (m->started && !m->step)
        snprintf(why, len, "its state is inconsistent: momentum started before step 1");
    else
        return 0;
    return -1;
}

/* Every key present and in range: a checkpoint is input like any other
 * file (its checksum says it is whole, not that it makes sense). */
static int meta_parse(const char *meta, meta_t *m, char *why, size_t len)
{
    char sum[64], *end;

    memset(m, 0, sizeof(*m));
    if (meta_u64(meta, "ddp-train", &m->version) || m->version != 1 ||
        !meta_get(meta, "model", m->model, sizeof(m->model)) || meta_u64(meta, "hidden", &m->hidden) ||
        meta_u64(meta, "layers", &m->layers) || meta_u64(meta, "samples", &m->samples) ||
        meta_u64(meta, "seed", &m->seed) || meta_u64(meta, "epoch", &m->epoch) ||
        meta_u64(meta, "offset", &m->offset) || meta_u64(meta, "step", &m->step) ||
        meta_u64(meta, "world", &m->world) || meta_u64(meta, "batch", &m->batch) ||
        meta_u64(meta, "momentum_started", &m->started) ||
        meta_u64(meta, "loss_count", &m->loss_count) ||
        !meta_get(meta, "algo", m->algo_name, sizeof(m->algo_name)) ||
        !meta_get(meta, "loss_sum", sum, sizeof(sum))) {
        snprintf(why, len, "its state is not ddp-train's version 1 (a key is missing or malformed)");
        return -1;
    }
    m->loss_sum = strtod(sum, &end);
    if (*end || !isfinite(m->loss_sum) || m->offset > m->samples || m->samples > DATA_MAX_SAMPLES ||
        m->epoch > EPOCHS_MAX || !m->world || !m->batch || m->batch > BATCH_MAX || m->started > 1 ||
        drt_algo_parse(m->algo_name, &m->algo) < 0) {
        snprintf(why, len, "its state is out of range (epoch %" PRIu64 ", sample %" PRIu64 " of %" PRIu64
                 ", step %" PRIu64 ", world %" PRIu64 ", algo '%s')", m->epoch, m->offset, m->samples,
                 m->step, m->world, m->algo_name);
        return -1;
    }
    return meta_consistent(m, why, len);
}

/* The checkpoint (of `step`, its header says) must be of this model, data
 * and seed; the world size and batch may change (the sampler continues at
 * the same sample). Fills why when it refuses. */
static int meta_check(const train_t *t, const char *meta, uint64_t step, char *why, size_t len)
{
    meta_t m;

    if (meta_parse(meta, &m, why, len) < 0)
        return -1;
    if (m.step != step) {
        snprintf(why, len, "its state is inconsistent: its meta says step %" PRIu64 ", its header "
                 "step %" PRIu64, m.step, step);
        return -1;
    }
    if (strcmp(m.model, t->o.model) ||
        (!strcmp(m.model, "mlp") && (m.hidden != (uint64_t)t->o.hidden || m.layers != (uint64_t)t->o.layers))) {
        snprintf(why, len, "it is of model %s (hidden %" PRIu64 ", layers %" PRIu64 "), this run's is %s"
                 " (hidden %d, layers %d)", m.model, m.hidden, m.layers, t->o.model, t->o.hidden, t->o.layers);
        return -1;
    }
    if (m.samples != t->o.samples || m.seed != t->o.seed) {
        snprintf(why, len, "it is of --samples %" PRIu64 " --seed %" PRIu64 ", this run's are %" PRIu64
                 " and %" PRIu64, m.samples, m.seed, t->o.samples, t->o.seed);
        return -1;
    }
    return 0;
}

/* ---- saving ---- */

/* seconds on a monotonic clock: what a checkpoint stalled its step */
static double clock_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait for the pending write: 1 written (st filled), 0 none pending, -1
 * failed (said on stderr; training goes on). */
static int wait_write(train_t *t, drt_ckpt_stats_t *st)
{
    drt_error_t e;

    if (!t->ckpt_pending)
        return 0;
    t->ckpt_pending = 0;
    t->ckpt_failed = drt_ckpt_wait(t->ckpt, st, &e) < 0;
    if (t->ckpt_failed) {
        if (t->ckpt_written)
            fprintf(stderr, "ddp-train: %s (training goes on; step %" PRIu64 "'s checkpoint stays the "
                    "newest)\n", e.text, t->ckpt_written);
        else
            fprintf(stderr, "ddp-train: %s (training goes on; no checkpoint is written yet)\n", e.text);
        return -1;
    }
    t->ckpt_written = st->step;
    return 1;
}

/* stall: what the checkpoint's step paid in all (the copy, a wait for the
 * write before it, and the write itself with --sync-checkpoint) */
static void print_write(const train_t *t, const drt_ckpt_stats_t *st, double stall)
{
    printf("checkpoint step %" PRIu64 ": %zu bytes written in %.1f ms (%s%s), the step stalled "
           "%.1f ms\n", st->step, st->bytes, st->write_s * 1e3,
           t->o.sync_ckpt ? "in the step" : "in the background",
           t->o.ckpt_local ? ", local level first" : "", stall * 1e3);
}

static void report_write(train_t *t)
{
    drt_ckpt_stats_t st;

    if (wait_write(t, &st) > 0)
        print_write(t, &st, t->ckpt_stall);
}

/* The epoch's loss so far, summed over ranks into rank 0's share, so the
 * saved sum is the whole world's; a failure leaves the sums as they were. */
static int fold_loss(train_t *t, drt_error_t *e)
{
    double v[2] = {t->s.loss_sum, (double)t->s.loss_count};
    int rc = drt_allreduce(t->c, v, v, 2, DRT_FLOAT64, DRT_SUM, e);

    if (rc < 0)
        return rc;
    t->s.loss_sum = drt_rank(t->c) == 0 ? v[0] : 0;
    t->s.loss_count = drt_rank(t->c) == 0 ? (uint64_t)v[1] : 0;
    return 0;
}

static void save(train_t *t)
{
    drt_ckpt_section_t *sec = calloc(2 * (size_t)t->np + 2, sizeof(*sec));
    char meta[META_MAX], decisions[DRT_AUTO_STATE_MAX], (*names)[80] = calloc(2 * (size_t)t->np, sizeof(*names));
    size_t dlen = sizeof(decisions);
    drt_error_t e;

    if (!sec || !names)
        die("checkpoint", "out of memory");
    meta_write(t, meta, sizeof(meta));
    if (drt_auto_state(t->c, decisions, &dlen, &e) < 0)
        die("checkpoint", e.text);
    sec[0] = (drt_ckpt_section_t){"meta", meta, strlen(meta) + 1};
    sec[1 + 2 * t->np] = (drt_ckpt_section_t){"auto", decisions, dlen};
    for (int i = 0; i < t->np; i++) {
        snprintf(names[2 * i], sizeof(names[0]), "w:%s", t->p[i].name);
        snprintf(names[2 * i + 1], sizeof(names[0]), "m:%s", t->p[i].name);
        sec[1 + 2 * i] = (drt_ckpt_section_t){names[2 * i], t->p[i].w, t->p[i].n * sizeof(float)};
        sec[2 + 2 * i] = (drt_ckpt_section_t){names[2 * i + 1], t->p[i].m, t->p[i].n * sizeof(float)};
    }
    report_write(t);
    if (drt_ckpt_save(t->ckpt, t->s.step, sec, 2 + 2 * t->np, &e) < 0) {
        t->ckpt_failed = 1;
        fprintf(stderr, "ddp-train: %s (training goes on)\n", e.text);
    } else
        t->ckpt_pending = 1;
    free(sec);
    free(names);
}

int checkpoint_now(train_t *t, int wait, drt_error_t *e)
{
    double t0 = clock_now();
    drt_ckpt_stats_t st;
    int written = 0, rc;

    if (!t->o.ckpt_dir)
        return 0;
    if ((rc = fold_loss(t, e)) < 0)
        return rc;
    if (drt_rank(t->c) == 0) {
        save(t);
        if (wait)
            written = wait_write(t, &st) > 0;
    }
    t->ckpt_stall = clock_now() - t0;
    if (written)
        print_write(t, &st, t->ckpt_stall);
    t->ckpt_step = t->s.step;
    fflush(stdout);
    return 0;
}

void checkpoint_close(train_t *t)
{
    if (t->ckpt) {
        report_write(t);
        drt_ckpt_close(t->ckpt);
        t->ckpt = NULL;
    }
}

/* Every rank waits for rank 0's save, so none exits (and no launcher
 * starts stopping the others) before the checkpoint is whole; all exit 75
 * when it was written, 1 when it failed. */
int preempted(train_t *t)
{
    int32_t saved = !t->ckpt_failed;
    int sig = drt_preempt_signal();
    drt_error_t e;

    if (drt_broadcast(t->c, &saved, sizeof(saved), 0, &e) < 0)
        die("preemption", e.text);
    fprintf(stderr, "ddp-train: rank %d: preempted (%s): stopped after step %" PRIu64 "%s\n",
            drt_rank(t->c), sig ? "a signal reached this rank" : "another rank got a signal",
            t->s.step, !t->o.ckpt_dir ? " (no --checkpoint-dir: nothing was saved)"
                       : saved ? "" : " (its checkpoint failed: a rerun resumes from the one before)");
    return saved ? TRAIN_EXIT_PREEMPTED : 1;
}

/* ---- resuming ---- */

/* the first value of n floats that is not finite, or -1: a run that
 * wrote NaN or Inf would have stopped ("training diverged") instead */
static long not_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return (long)i;
    return -1;
}

/* one parameter's weights and momentum from the loaded checkpoint */
static int load_param(train_t *t, const param_t *p, uint64_t step, char *why, size_t len)
{
    char name[80];
    const void *w, *mo;
    const float *v = p->w;
    const char *which = "weights";
    size_t nw, nm;
    long bad;

    snprintf(name, sizeof(name), "w:%s", p->name);
    w = drt_ckpt_section(t->ckpt, name, &nw);
    name[0] = 'm';
    mo = drt_ckpt_section(t->ckpt, name, &nm);
    if (!w || !mo || nw != p->n * sizeof(float) || nm != nw) {
        snprintf(why, len, "checkpoint step %" PRIu64 ": parameter %s is missing or of another size",
                 step, p->name);
        return -1;
    }
    memcpy(p->w, w, nw);
    memcpy(p->m, mo, nm);
    if ((bad = not_finite(v, p->n)) < 0) {
        v = p->m;
        which = "momentum";
        bad = not_finite(v, p->n);
    }
    if (bad >= 0) {
        snprintf(why, len, "checkpoint step %" PRIu64 ": parameter %s holds %g (%s %ld of %zu), which "
                 "no run writes", step, p->name, v[bad], which, bad, p->n);
        return -1;
    }
    return 0;
}

/* the "auto" section into d (*dlen bytes; -1 when the checkpoint has
 * none: an older ddp-train wrote it) */
static int load_decisions(train_t *t, uint64_t step, char *d, int32_t *dlen, char *why, size_t len)
{
    size_t n;
    const void *sec = drt_ckpt_section(t->ckpt, "auto", &n);

    *dlen = -1;
    if (!sec)
        return 0;
    if (n > DRT_AUTO_STATE_MAX) {
        snprintf(why, len, "checkpoint step %" PRIu64 ": its auto section is %zu bytes, more than "
                 "any run writes (%d)", step, n, DRT_AUTO_STATE_MAX);
        return -1;
    }
    memcpy(d, sec, n);
    *dlen = (int32_t)n;
    return 0;
}

/* rank 0: load the newest valid checkpoint into the model and t->s; the
 * meta text and auto's decisions go to the other ranks. 1 found, 0 none,
 * -1 refused (why), -2 the directory could not be read (why, with its own
 * hint). */
static int load(train_t *t, char *meta, char *d, int32_t *dlen, char *why, size_t len)
{
    uint64_t step;
    size_t n;
    drt_error_t e;
    const char *m;
    int rc = drt_ckpt_load(t->ckpt, &step, &e);

    if (rc <= 0) {
        snprintf(why, len, "%s", rc < 0 ? e.text : "");
        return rc < 0 ? -2 : 0;
    }
    m = drt_ckpt_section(t->ckpt, "meta", &n);
    if (!m || !n || n > META_MAX || m[n - 1]) {
        snprintf(why, len, "checkpoint step %" PRIu64 " of %s has no valid meta section", step, t->o.ckpt_dir);
        return -1;
    }
    memcpy(meta, m, n);
    if (meta_check(t, meta, step, why, len) < 0)
        return -1;
    for (int i = 0; i < t->np; i++)
        if (load_param(t, &t->p[i], step, why, len) < 0)
            return -1;
    return load_decisions(t, step, d, dlen, why, len) < 0 ? -1 : 1;
}

/* every rank: t->s and the algorithm from the meta text (rank 0 checked
 * it; every rank parses the same bytes) */
static void apply_meta(train_t *t, const char *meta)
{
    meta_t m;
    char why[200];

    if (meta_parse(meta, &m, why, sizeof(why)) < 0)
        die("resume", why);
    t->s.epoch = m.epoch;
    t->s.offset = m.offset;
    t->s.step = m.step;
    model_set_momentum_started(t->model, m.started != 0);
    if (!t->o.algo)
        t->algo = m.algo;
    if (drt_rank(t->c) == 0) {
        t->s.loss_count = m.loss_count;
        t->s.loss_sum = m.loss_sum;
    }
    t->ckpt_step = t->ckpt_written = t->s.step;
    t->ckpt_world = m.world;
}

/* rank 0's weights and momentum to every rank */
static void share_params(train_t *t)
{
    drt_error_t e;

    for (int i = 0; i < t->np; i++)
        if (drt_broadcast(t->c, t->p[i].w, t->p[i].n * sizeof(float), 0, &e) < 0 ||
            drt_broadcast(t->c, t->p[i].m, t->p[i].n * sizeof(float), 0, &e) < 0)
            die("resume", e.text);
}

static void default_algo(train_t *t)
{
    t->algo = drt_get_algo(t->c); /* DDPRT_ALGO, else auto */
    if (t->o.algo)
        drt_algo_parse(t->o.algo, &t->algo);
}

/* what rank 0 found, for everyone */
typedef struct {
    int32_t status; /* 1 found, 0 none, -1 refused, -2 unreadable (load's) */
    char text[META_MAX];
    int32_t auto_len; /* the "auto" section's bytes, -1: none (an older ddp-train's) */
    char decisions[DRT_AUTO_STATE_MAX];
} found_t;

/* rank 0: what DIR holds for this run */
static void find(train_t *t, found_t *f)
{
    char why[sizeof(drt_error_t) + 100] = "";
    drt_error_t e;
    uint64_t step;
    int rc;

    if (drt_ckpt_open(t->o.ckpt_dir, t->o.ckpt_local, t->o.keep, &t->ckpt, &e) < 0) {
        f->status = -1;
        snprintf(f->text, sizeof(f->text), "--checkpoint-dir: %s", e.text);
        return;
    }
    if (t->o.fresh) {
        /* a later resume would take the old run's newest over this one's */
        rc = drt_ckpt_load(t->ckpt, &step, &e);
        if (rc < 0)
            snprintf(f->text, sizeof(f->text), "--checkpoint-dir: %s", e.text);
        else if (rc > 0)
            snprintf(f->text, sizeof(f->text), "--fresh: %s already holds a checkpoint (step %" PRIu64
                     ") that a later resume would take (remove it, or give another --checkpoint-dir)",
                     t->o.ckpt_dir, step);
        f->status = rc ? -1 : 0;
        return;
    }
    f->status = load(t, f->text, f->decisions, &f->auto_len, why, sizeof(why));
    if (f->status == -2)
        snprintf(f->text, sizeof(f->text), "cannot resume from %s: %s", t->o.ckpt_dir, why);
    else if (f->status < 0)
        snprintf(f->text, sizeof(f->text), "cannot resume from %s: %s (remove its checkpoints, or give "
                 "another --checkpoint-dir)", t->o.ckpt_dir, why);
}

/* every rank: auto's decisions as the checkpoint recorded them, so the
 * rest of the run reduces as the uninterrupted one did (drt_auto_restore
 * agrees: every rank applies them, or every rank refuses) */
static void restore_decisions(train_t *t, const found_t *f)
{
    drt_error_t e;
    int rc = 0;

    if (f->auto_len >= 0 && (rc = drt_auto_restore(t->c, f->decisions, (size_t)f->auto_len, &e)) < 0) {
        fprintf(stderr, "ddp-train: cannot resume from %s: checkpoint step %" PRIu64 ": %s (remove its "
                "checkpoints, or give another --checkpoint-dir)\n", t->o.ckpt_dir, t->s.step, e.text);
        exit(1);
    }
    if (drt_rank(t->c) || t->algo != DRT_ALGO_AUTO)
        return;
    if (f->auto_len < 0)
        printf("note: the checkpoint holds no auto decisions (an older ddp-train wrote it): auto decides "
               "afresh, and the weights can differ in their last bits from an uninterrupted run's\n");
    else if (rc == 1)
        printf("note: the checkpoint's auto decisions were measured on another layout of ranks and "
               "nodes: auto decides afresh\n");
}

void resume(train_t *t)
{
    found_t f = {0};
    drt_error_t e;

    default_algo(t);
    if (!t->o.ckpt_dir)
        return;
    if (drt_rank(t->c) == 0)
        find(t, &f);
    if (drt_broadcast(t->c, &f, sizeof(f), 0, &e) < 0)
        die("resume", e.text);
    if (f.status < 0) {
        fprintf(stderr, "ddp-train: %s\n", f.text);
        exit(1);
    }
    if (f.status == 0) {
        if (t->o.resume)
            die("--resume", "no valid checkpoint to resume from (run without --resume to start over)");
        return;
    }
    apply_meta(t, f.text);
    share_params(t);
    t->resumed = 1;
    if (drt_rank(t->c) == 0) {
        printf("resumed from step %" PRIu64 " (epoch %" PRIu64 ", sample %" PRIu64 " of it) in %s\n",
               t->s.step, t->s.epoch, t->s.offset, t->o.ckpt_dir);
        if (t->ckpt_world != (uint64_t)drt_size(t->c))
            printf("note: the checkpoint was written by %" PRIu64 " ranks, this run has %d: the sampler "
                   "continues at the same sample; the learning rate is %g\n", t->ckpt_world,
                   drt_size(t->c), t->lr);
    }
    restore_decisions(t, &f);
}
