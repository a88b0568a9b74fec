/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's command line. */
#include "config.h"
#include "train.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: ddp-train [options]              (each rank: srun ddp-train, ddp-run -n N ddp-train)\n"
    "       ddp-train --plot METRICS.jsonl -o OUT.svg\n"
    "       ddp-train --compare A B [--rtol X]\n"
    "       ddp-train --help | --version\n"
    "\n"
    "Data-parallel SGD on libddprt: a seeded synthetic data set of 64 features and 10\n"
    "classes, each rank a disjoint shard; gradients averaged in buckets while backward runs.\n"
    "\n"
    "model and data\n"
    "  --model linear|mlp      linear: 64->10 (default); mlp: 64->H, L x (HxH), ->10, ReLU\n"
    "  --hidden H              mlp width (default 1024)\n"
    "  --layers L              mlp hidden layers (default 2)\n"
    "  --samples N             data set size (default 4096)\n"
    "  --seed S                weights, data and shuffles (default 0)\n"
    "training\n"
    "  --epochs N              (default 5)\n"
    "  --batch-size B          per rank (default 32); the global batch is B x ranks\n"
    "  --lr X                  learning rate (default 0.01), multiplied by the ranks\n"
    "  --no-lr-scale           ... unless this is given\n"
    "  --momentum M            SGD momentum (default 0.9)\n"
    "  --max-steps N           stop after N steps in all (0: no limit)\n"
    "communication\n"
    "  --algo flat|hier|auto   allreduce algorithm (default: the checkpoint's, else DDPRT_ALGO,\n"
    "                          else auto; flat and hier give bitwise repeatable runs)\n"
    "  --bucket-mb X           bucket size (default 25)\n"
    "  --first-bucket-mb X     the first bucket's (default 1)\n"
    "  --no-overlap            one allreduce of all gradients after backward\n"
    "checkpoints and preemption\n"
    "  --checkpoint-dir DIR    save there, and resume from its newest valid checkpoint\n"
    "  --checkpoint-every N    every N steps (default 0: only when preempted)\n"
    "  --checkpoint-local DIR  write to node-local DIR first, copy to --checkpoint-dir behind\n"
    "  --keep K                checkpoints kept (default 3)\n"
    "  --resume                fail unless a checkpoint exists to resume from\n"
    "  --fresh                 start over (refused if DIR has a valid checkpoint)\n"
    "  --sync-checkpoint       write in the step (to compare with the background write)\n"
    "elastic training (a launcher that keeps the survivors: srun -k, ddp-run -k)\n"
    "  --elastic               when ranks are lost, go on with the survivors: the step under way\n"
    "                          is redone, the global batch and learning rate stay, each\n"
    "                          survivor's batch grows; prints \"recovered: world N -> M ...\"\n"
    "  --min-ranks N           fewer survivors than N: save a checkpoint and exit 75 (default 1)\n"
    "  Without --elastic a lost rank ends the run (1). Either way the lost nodes' names, as\n"
    "  the survivors agree on them, are appended to DIR/lost-nodes, for a requeue to exclude.\n"
    "  --kill-rank R | --kill-node N, with --kill-step S   that rank (or every rank of that\n"
    "                          node) SIGKILLs itself at the start of step S (fault injection)\n"
    "  --kill-in WHERE         step (the default), or after step S's update as its telemetry\n"
    "                          line's or checkpoint's collective starts: telemetry, checkpoint\n"
    "  --sample-log FILE       each rank appends \"epoch step world sample\" lines for the\n"
    "                          steps it starts to FILE.RANK (a step redone after a lost rank\n"
    "                          again, with the smaller world; to check every sample is used once)\n"
    "  On SIGUSR1 or SIGTERM every rank stops after the same step, rank 0 saves, and all\n"
    "  exit 75; the same command then resumes. SIGTERM before the first step, or a\n"
    "  second one, ends the process (status 143).\n"
    "telemetry\n"
    "  --log-every N           a telemetry line every N steps (default 10; 0: none)\n"
    "  --metrics FILE          every step as a JSON line (rank 0)\n"
    "  --straggler-ms X        name the slowest rank when it lags by X ms or more (default 10)\n"
    "  --slow-rank R --slow-ms MS  make rank R slower by MS per step (a straggler, for tests)\n"
    "  --dump-weights FILE     rank 0 appends all weights after every step (for --compare)\n"
    "  Files written must be new or regular files, never a symbolic link, FIFO or device.\n"
    "\n"
    "Rank 0 prints \"Epoch N, Loss: X\" (the mean over all ranks' samples) and at the end\n"
    "\"final weights checksum: H\". Exit: 0 done, 75 preempted (checkpoint saved),\n"
    "1 error, 2 bad usage, 143 ended by SIGTERM.\n";

enum {
    O_MODEL = 256, O_HIDDEN, O_LAYERS, O_SAMPLES, O_SEED, O_EPOCHS, O_BATCH, O_LR, O_NOSCALE,
    O_MOMENTUM, O_MAXSTEPS, O_ALGO, O_BUCKET, O_FIRST, O_NOOVERLAP, O_CKDIR, O_CKEVERY, O_CKLOCAL,
    O_KEEP, O_RESUME, O_FRESH, O_SYNC, O_LOGEVERY, O_METRICS, O_STRAGGLER, O_SLOWRANK, O_SLOWMS,
    O_DUMP, O_PLOT, O_COMPARE, O_RTOL, O_HELP, O_VERSION, O_ELASTIC, O_MINRANKS, O_KILLRANK,
    O_KILLNODE, O_KILLSTEP, O_KILLIN, O_SAMPLELOG
};

static const struct option longopts[] = {
    {"model", 1, 0, O_MODEL}, {"hidden", 1, 0, O_HIDDEN}, {"layers", 1, 0, O_LAYERS},
    {"samples", 1, 0, O_SAMPLES}, {"seed", 1, 0, O_SEED}, {"epochs", 1, 0, O_EPOCHS},
    {"batch-size", 1, 0, O_BATCH}, {"lr", 1, 0, O_LR}, {"no-lr-scale", 0, 0, O_NOSCALE},
    {"momentum", 1, 0, O_MOMENTUM}, {"max-steps", 1, 0, O_MAXSTEPS}, {"algo", 1, 0, O_ALGO},
    {"bucket-mb", 1, 0, O_BUCKET}, {"first-bucket-mb", 1, 0, O_FIRST},
    {"no-overlap", 0, 0, O_NOOVERLAP}, {"checkpoint-dir", 1, 0, O_CKDIR},
    {"checkpoint-every", 1, 0, O_CKEVERY}, {"checkpoint-local", 1, 0, O_CKLOCAL},
    {"keep", 1, 0, O_KEEP}, {"resume", 0, 0, O_RESUME}, {"fresh", 0, 0, O_FRESH},
    {"sync-checkpoint", 0, 0, O_SYNC}, {"log-every", 1, 0, O_LOGEVERY},
    {"metrics", 1, 0, O_METRICS}, {"straggler-ms", 1, 0, O_STRAGGLER},
    {"slow-rank", 1, 0, O_SLOWRANK}, {"slow-ms", 1, 0, O_SLOWMS}, {"dump-weights", 1, 0, O_DUMP},
    {"plot", 1, 0, O_PLOT}, {"compare", 1, 0, O_COMPARE}, {"rtol", 1, 0, O_RTOL},
    {"elastic", 0, 0, O_ELASTIC}, {"min-ranks", 1, 0, O_MINRANKS},
    {"kill-rank", 1, 0, O_KILLRANK}, {"kill-node", 1, 0, O_KILLNODE},
    {"kill-step", 1, 0, O_KILLSTEP}, {"kill-in", 1, 0, O_KILLIN}, {"sample-log", 1, 0, O_SAMPLELOG},
    {"help", 0, 0, O_HELP}, {"version", 0, 0, O_VERSION}, {0, 0, 0, 0}};

static int bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "ddp-train: --%s '%.60s': %s (see ddp-train --help)\n", opt, val, want);
    return 2;
}

/* an integer in [lo, hi] */
static int num_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    /* digits only: strtoull would take " -1" as 2^64 - 1 */
    if (*s < '0' || *s > '9' || *end || errno || v < lo || v > hi) {
        char want[80];
        snprintf(want, sizeof(want), "not an integer from %llu to %llu", (unsigned long long)lo,
                 (unsigned long long)hi);
        return bad(opt, s, want);
    }
    *out = v;
    return 0;
}

static int num_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    uint64_t v;
    int rc = num_u64(opt, s, (uint64_t)lo, (uint64_t)hi, &v);

    *out = (int)v;
    return rc;
}

/* a finite number in [lo, hi] */
static int num_dbl(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);

    if (end == s || *end || isspace((unsigned char)*s) || !isfinite(v) || v < lo || v > hi) {
        char want[80];
        snprintf(want, sizeof(want), "not a number from %g to %g", lo, hi);
        return bad(opt, s, want);
    }
    *out = v;
    return 0;
}

static void defaults(opts_t *o)
{
    *o = (opts_t){.model = "linear", .hidden = 1024, .layers = 2, .samples = 4096, .epochs = 5,
                  .batch = 32, .lr = 0.01, .momentum = 0.9, .lr_scale = 1, .bucket_mb = 25,
                  .first_bucket_mb = 1, .keep = 3, .log_every = 10, .slow_rank = -1,
                  .straggler_ms = 10, .min_ranks = 1, .kill_rank = -1, .kill_node = -1};
}

static int one(opts_t *o, int c, const char *a)
{
    uint64_t v;

    switch (c) {
    case O_MODEL:
        if (strcmp(a, "linear") && strcmp(a, "mlp"))
            return bad("model", a, "not linear or mlp");
        o->model = a;
        return 0;
    case O_HIDDEN: return num_int("hidden", a, 1, MODEL_MAX_HIDDEN, &o->hidden);
    case O_LAYERS: return num_int("layers", a, 1, MODEL_MAX_LAYERS, &o->layers);
    case O_SAMPLES: return num_u64("samples", a, 1, DATA_MAX_SAMPLES, &o->samples);
    case O_SEED: return num_u64("seed", a, 0, UINT64_MAX, &o->seed);
    case O_EPOCHS: return num_int("epochs", a, 1, 1000000, &o->epochs);
    case O_BATCH: return num_int("batch-size", a, 1, 1 << 20, &o->batch);
    case O_LR: return num_dbl("lr", a, 0, 1e3, &o->lr);
    case O_NOSCALE: o->lr_scale = 0; return 0;
    case O_MOMENTUM: return num_dbl("momentum", a, 0, 1, &o->momentum);
    case O_MAXSTEPS: return num_u64("max-steps", a, 0, UINT64_MAX, &o->max_steps);
    case O_ALGO: {
        drt_algo_t al;
        if (drt_algo_parse(a, &al) < 0)
            return bad("algo", a, "not flat, hier or auto");
        o->algo = a;
        return 0;
    }
    case O_BUCKET: return num_dbl("bucket-mb", a, 1e-3, 1e6, &o->bucket_mb);
    case O_FIRST: return num_dbl("first-bucket-mb", a, 1e-3, 1e6, &o->first_bucket_mb);
    case O_NOOVERLAP: o->no_overlap = 1; return 0;
    case O_CKDIR: o->ckpt_dir = a; return 0;
    case O_CKEVERY: return num_u64("checkpoint-every", a, 0, UINT64_MAX, &o->ckpt_every);
    case O_CKLOCAL: o->ckpt_local = a; return 0;
    case O_KEEP: return num_int("keep", a, 1, 1000000, &o->keep);
    case O_RESUME: o->resume = 1; return 0;
    case O_FRESH: o->fresh = 1; return 0;
    case O_SYNC: o->sync_ckpt = 1; return 0;
    case O_LOGEVERY: return num_u64("log-every", a, 0, UINT64_MAX, &o->log_every);
    case O_METRICS: o->metrics = a; return 0;
    case O_STRAGGLER: return num_dbl("straggler-ms", a, 0, 1e9, &o->straggler_ms);
    case O_SLOWRANK: return num_int("slow-rank", a, 0, 1 << 30, &o->slow_rank);
    case O_SLOWMS:
        if (num_u64("slow-ms", a, 0, 3600000, &v))
            return 2;
        o->slow_ms = (long)v;
        return 0;
    case O_DUMP: o->dump = a; return 0;
    case O_ELASTIC: o->elastic = 1; return 0;
    case O_MINRANKS: return num_int("min-ranks", a, 1, 1 << 30, &o->min_ranks);
    case O_KILLRANK: return num_int("kill-rank", a, 0, 1 << 30, &o->kill_rank);
    case O_KILLNODE: return num_int("kill-node", a, 0, 1 << 30, &o->kill_node);
    case O_KILLSTEP: return num_u64("kill-step", a, 1, UINT64_MAX, &o->kill_step);
    case O_KILLIN:
        if (!strcmp(a, "step"))
            o->kill_in = KILL_IN_STEP;
        else if (!strcmp(a, "telemetry"))
            o->kill_in = KILL_IN_TELEMETRY;
        else if (!strcmp(a, "checkpoint"))
            o->kill_in = KILL_IN_CHECKPOINT;
        else
            return bad("kill-in", a, "not step, telemetry or checkpoint");
        return 0;
    case O_SAMPLELOG: o->sample_log = a; return 0;
    }
    fputs(usage, stderr);
    return 2;
}

static int check(const opts_t *o)
{
    if (o->ckpt_local && !o->ckpt_dir)
        return bad("checkpoint-local", o->ckpt_local, "needs --checkpoint-dir (the shared level)");
    if ((o->resume || o->ckpt_every) && !o->ckpt_dir) {
        fprintf(stderr, "ddp-train: --resume and --checkpoint-every need --checkpoint-dir\n");
        return 2;
    }
    if (!o->kill_step != (o->kill_rank < 0 && o->kill_node < 0)) {
        fprintf(stderr, "ddp-train: --kill-step goes with --kill-rank or --kill-node\n");
        return 2;
    }
    if (o->kill_in != KILL_IN_STEP && !o->kill_step) {
        fprintf(stderr, "ddp-train: --kill-in goes with --kill-step and --kill-rank or --kill-node\n");
        return 2;
    }
    if (o->resume && o->fresh) {
        fprintf(stderr, "ddp-train: --resume and --fresh contradict each other\n");
        return 2;
    }
    return -1;
}

/* --plot and --compare: tools that run on files, without a world */
static int tool(int argc, char **argv, const char *plot, const char *out, const char *cmp,
                double rtol)
{
    char err[300];

    if (plot) {
        if (!out) {
            fprintf(stderr, "ddp-train: --plot needs -o OUT.svg\n");
            return 2;
        }
        if (train_plot(plot, out, err, sizeof(err)) < 0) {
            fprintf(stderr, "ddp-train: --plot: %s\n", err);
            return 1;
        }
        return 0;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "ddp-train: --compare needs two files: --compare A B\n");
        return 2;
    }
    return train_compare(cmp, argv[optind], rtol, stdout);
}

int options_parse(opts_t *o, int argc, char **argv)
{
    const char *plot = NULL, *cmp = NULL, *out = NULL;
    double rtol = 1e-5;
    int c;

    defaults(o);
    while ((c = getopt_long(argc, argv, "o:", longopts, NULL)) != -1) {
        int rc = 0;
        if (c == O_HELP) {
            fputs(usage, stdout);
            return 0;
        }
        if (c == O_VERSION) {
            puts("ddp-train (ddp-topo) " PACKAGE_VERSION);
            return 0;
        }
        if (c == O_PLOT)
            plot = optarg;
        else if (c == O_COMPARE)
            cmp = optarg;
        else if (c == O_RTOL)
            rc = num_dbl("rtol", optarg, 0, 1e9, &rtol);
        else if (c == 'o')
            out = optarg;
        else
            rc = one(o, c, optarg);
        if (rc)
            return rc;
    }
    if (plot || cmp)
        return tool(argc, argv, plot, out, cmp, rtol);
    if (out)
        return bad("o", out, "-o goes with --plot");
    if (optind < argc) {
        fprintf(stderr, "ddp-train: unexpected argument '%.60s' (see ddp-train --help)\n", argv[optind]);
        return 2;
    }
    return check(o);
}
