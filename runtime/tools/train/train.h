/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's parts: options.c (the command line), setup.c (the world,
 * the model, the buckets; the end), state.c (checkpoints, resume,
 * preemption), elastic.c (going on after a lost rank), telemetry.c (the
 * step line and --metrics). The model and the data are model.c and
 * data.c; --plot and --compare are tools.h's;
 * files.h opens every file they write or read. Calls go one way, down:
 * ddp-train.c (the loop) calls setup.c, state.c and elastic.c (--elastic),
 * setup.c and elastic.c call state.c, and none of them calls back up. */
#ifndef DDP_TRAIN_H
#define DDP_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "ddprt.h"
#include "model.h"
#include "tools.h"

/* exit status: the ranks stopped on a signal after saving a checkpoint;
 * run the same command again (it resumes). EX_TEMPFAIL of sysexits.h. */
#define TRAIN_EXIT_PREEMPTED 75

typedef struct {
    const char *model;
    int hidden, layers;
    uint64_t samples, seed, max_steps;
    int epochs, batch;
    double lr, momentum;
    int lr_scale;           /* lr x world size (the default) */
    const char *algo;       /* NULL: the checkpoint's, else DDPRT_ALGO's */
    double bucket_mb, first_bucket_mb;
    int no_overlap;         /* one allreduce after backward */
    const char *ckpt_dir, *ckpt_local;
    uint64_t ckpt_every;
    int keep, resume, fresh, sync_ckpt;
    uint64_t log_every;
    const char *metrics, *dump;
    int slow_rank;
    long slow_ms;
    double straggler_ms;    /* a lag below this names no straggler */
    int elastic, min_ranks; /* --elastic: shrink on a lost rank, unless below min_ranks */
    int kill_rank, kill_node; /* fault injection: -1, or who SIGKILLs itself ... */
    uint64_t kill_step;     /* ... in this step ... */
    int kill_in;            /* ... at this point of it (KILL_IN_*) */
    const char *sample_log; /* FILE.RANK: each completed step's samples (tests) */
} opts_t;

/* where in its step --kill-in kills: as it starts, or after the update,
 * as telemetry's or the checkpoint's collective starts */
enum { KILL_IN_STEP, KILL_IN_TELEMETRY, KILL_IN_CHECKPOINT };

/* What a checkpoint holds besides the weights and momentum. */
typedef struct {
    uint64_t epoch, offset; /* the sampler: samples of this epoch already used */
    uint64_t step;          /* steps done, all epochs */
    double loss_sum;        /* this epoch's loss so far: rank 0's share holds all ranks' */
    uint64_t loss_count;
} progress_t;

/* telemetry.c's window: sums over the steps since the last line */
typedef struct {
    uint64_t steps;
    double loss, step_s, compute_s, comm_s, exposed_s, bytes;
    drt_algo_t algo;        /* the last step's (auto's choice) */
    int *slowest;           /* per rank: steps it was the slowest */
    double *lag;            /* per rank: its lag in those steps */
} window_t;

typedef struct {
    opts_t o;
    drt_comm_t *c;
    model_t *model;
    param_t *p;
    int np;
    dataset_t *data;
    uint32_t *perm;         /* this epoch's sample order */
    drt_buckets_t *buckets;
    drt_ckpt_t *ckpt;
    int ckpt_pending;       /* a background write not yet waited for */
    int ckpt_failed;        /* the last checkpoint was not written (rank 0) */
    double ckpt_stall;      /* seconds the last checkpoint held its step up */
    uint64_t ckpt_step;     /* the step of the last checkpoint asked for */
    uint64_t ckpt_written;  /* ... and of the last one written, 0: none */
    uint64_t ckpt_world;    /* ranks of the run that wrote the checkpoint resumed from */
    progress_t s;
    int resumed;            /* from a checkpoint */
    double lr;              /* after scaling */
    drt_algo_t algo;
    float *x;
    int *y;
    double batch_loss;      /* this rank's mean loss in the last step */
    FILE *metrics, *dump;
    window_t w;
    uint64_t G;             /* samples a step, all ranks: the start's world x --batch-size */
    int B;                  /* this rank's part of them */
    float gscale;           /* weight of this rank's mean gradient: B x world / G */
    int step_lost;          /* a rank was lost in this step's allreduce (--elastic) */
    int rank0, node0;       /* this rank's rank and node at the start (--kill-*) */
    int recovering;         /* recovered; no step completed since */
    double last_loss;       /* the last step's loss sum ... */
    int last_B;             /* ... over this many samples (elastic.c undoes a step) */
    FILE *samples;          /* --sample-log */
} train_t;

/* options.c: -1 to train; else the exit status (--help, a bad option, or
 * --plot/--compare, which it runs) */
int options_parse(opts_t *o, int argc, char **argv);

/* setup.c. From setup on SIGUSR1 preempts, and from watch_preemption (the
 * training loop) on SIGTERM too: the first stops every rank after the same
 * step, a second ends the process (libddprt's rule). */
void setup(train_t *t);
void watch_preemption(void);
int finish(train_t *t, int rc);

/* state.c */
void resume(train_t *t);
/* 0, or the failed collective's DRT_E* with e set: nothing saved */
int checkpoint_now(train_t *t, int wait, drt_error_t *e);
int preempted(train_t *t);
void checkpoint_close(train_t *t);

/* elastic.c: --elastic. start after setup; recover after a step failed
 * with DRT_ELOST: 0 to go on, else the exit status (75 below --min-ranks,
 * a checkpoint saved) */
void elastic_start(train_t *t);
int elastic_recover(train_t *t, double t_fail);
/* DIR/lost-nodes: names, or, for a run that stops, those the survivors
 * agree are lost */
void elastic_note_lost(train_t *t, const char *const *names, int n);
void elastic_note_agreed(train_t *t);
double elastic_clock(void);

/* telemetry.c */
void telemetry_open(train_t *t);
/* 0, or the line's collective's DRT_E* with e set */
int telemetry_step(train_t *t, const drt_step_stats_t *st, drt_error_t *e);
int telemetry_close(train_t *t); /* -1: a file could not be written */

#endif
